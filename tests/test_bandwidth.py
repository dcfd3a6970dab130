"""Bandwidth traces (fleet/bandwidth.py): each format read from a hand-written file with its rates worked out by hand,
the format told apart, every refusal as one line naming the file, and the end of a transfer over a periodic rate
derived by hand across segments, outages, the period's wrap and a million whole periods."""

from __future__ import annotations

import math
import random
import time
from pathlib import Path

import numpy as np
import pytest

from iotfl_sim.fleet import bandwidth
from iotfl_sim.fleet.bandwidth import (
    UP_RATIO,
    BandwidthError,
    link_mean_rate,
    link_transfer_end,
    links,
    mean_rate,
    read_bandwidth,
    transfer_end,
)
from iotfl_sim.fleet.periodic import Periodic
from iotfl_sim.fleet.traces import TraceError

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "scenarios" / "traces" / "bandwidth_lumos5g_sample.csv"

LUMOS_HEADER = (
    "run_num,seq_num,abstractSignalStr,latitude,longitude,movingSpeed,compassDirection,nrStatus,lte_rssi,lte_rsrp,"
    "lte_rsrq,lte_rssnr,nr_ssRsrp,nr_ssRsrq,nr_ssSinr,Throughput,mobility_mode,trajectory_direction,tower_id\n"
)


def _row(run: int, seq: int, mbps: str, mode: str = "driving") -> str:
    return f"{run},{seq}.0,2,44.97,-93.25,7.1,210,CONNECTED,-59.0,-95,-16.0,2147483647.0,-92.0,-12.0,10.0,{mbps},{mode},CW,16\n"


LUMOS = LUMOS_HEADER + "".join(
    [_row(7, 1, "100"), _row(7, 2, "0"), _row(7, 3, "50"), _row(8, 1, "20"), _row(8, 2, "40")]
)
# hsdpa: Unix s, ms since start, lat, lon, bytes since the last line, ms since it
HSDPA = """1289406399 549000 59.851754 10.781778 125000 1000
1289406400 550000 59.851864 10.781833 250000 1000
1289406401 551000  59.851964 10.781901 0 1000
"""
# ghent: the same, the first field in ms since the epoch, the last zero-padded
GHENT = """1453121790686 39287 51.0386528885778 3.73220785642186 2500000 1000
1453121791687 40287 51.0386532820580 3.73222847166054 1250000 1000
1453121792686 41286 51.0386553301824 3.73225142858955 0 0999
"""


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# ---------------------------------------------------------------- the formats, by hand


def test_each_format_read_by_hand(tmp_path):
    own = read_bandwidth(_write(tmp_path / "own.csv", "time_s,up_mbps,down_mbps\n0,1,2\n10,0.5,0\n20,1,4\n"))
    assert own.times_s.tolist() == [0.0, 10.0, 20.0] and own.period_s == 30.0
    assert own.up_bps.tolist() == [1e6, 5e5, 1e6] and own.down_bps.tolist() == [2e6, 0.0, 4e6]  # 0: an outage

    lumos = read_bandwidth(
        _write(tmp_path / "lumos.csv", LUMOS)
    )  # the first row's run, 7; seq_num in seconds
    assert lumos.times_s.tolist() == [0.0, 1.0, 2.0] and lumos.period_s == 3.0
    assert lumos.down_bps.tolist() == [100e6, 0.0, 50e6]
    assert lumos.up_bps.tolist() == pytest.approx(
        [100e6 * 6 / 13, 0.0, 50e6 * 6 / 13]
    )  # downlink only: 6/13 up
    other = read_bandwidth(tmp_path / "lumos.csv", run=8, up_ratio=0.5)
    assert other.down_bps.tolist() == [20e6, 40e6] and other.up_bps.tolist() == [10e6, 20e6]

    # 125000 B in 1000 ms = 1 Mbit/s, measured over the second before the line: 548-549 s, then 2 and 0 Mbit/s
    hsdpa = read_bandwidth(_write(tmp_path / "bus.log", HSDPA))
    assert hsdpa.times_s.tolist() == [0.0, 1.0, 2.0] and hsdpa.period_s == 3.0
    assert hsdpa.down_bps.tolist() == [1e6, 2e6, 0.0]
    assert hsdpa.up_bps.tolist() == pytest.approx([UP_RATIO * 1e6, UP_RATIO * 2e6, 0.0])

    # 2500000 B in 1000 ms = 20 Mbit/s, 1250000 B = 10 Mbit/s; the last over 999 ms from 40.287 s
    ghent = read_bandwidth(_write(tmp_path / "report_car.log", GHENT))
    assert ghent.times_s.tolist() == pytest.approx([0.0, 1.0, 2.0]) and ghent.period_s == pytest.approx(3.0)
    assert ghent.down_bps.tolist() == [20e6, 10e6, 0.0]
    as_hsdpa = read_bandwidth(tmp_path / "report_car.log", "hsdpa")  # ghent is read as hsdpa
    assert (
        as_hsdpa.down_bps.tolist() == ghent.down_bps.tolist()
        and as_hsdpa.times_s.tolist() == ghent.times_s.tolist()
    )


@pytest.mark.parametrize(
    "text, fmt",
    [
        ("time_s,up_mbps,down_mbps\n0,1,2\n", "csv"),
        (LUMOS_HEADER + _row(1, 1, "10"), "lumos5g"),
        (HSDPA.splitlines()[0] + "\n", "hsdpa"),
        (GHENT.splitlines()[0] + "\n", "ghent"),
    ],
)
def test_auto_tells_the_formats_apart(tmp_path, text, fmt):
    # one row is refused, naming the format auto chose
    with pytest.raises(BandwidthError, match=rf"1 data row\(s\) read as {fmt};"):
        read_bandwidth(_write(tmp_path / "one", text))


# ---------------------------------------------------------------- refusals


CSV_HEAD = "time_s,up_mbps,down_mbps\n"


@pytest.mark.parametrize(
    "text, kwargs, expected",
    [
        (CSV_HEAD + "0,1,1\n10,1,1\n5,1,1\n", {}, "(data row 3): time does not increase"),
        (
            CSV_HEAD + "0,1,1\n10,1,1\n20,1,1\n50,1,1\n",
            {},
            "(data row 4): a gap of 30 s before this row (the usual step is 10 s)",
        ),
        (CSV_HEAD + "0,1,1\n10,-1,1\n", {}, "(data row 2): uplink rate -1 Mbps is outside [0, 100000]"),
        (CSV_HEAD + "0,1,1\n10,1,2e5\n", {}, "downlink rate 200000 Mbps is outside"),
        (CSV_HEAD + "0,1,1\n10,fast,1\n", {}, ":3: up_mbps 'fast' is not a number"),
        (CSV_HEAD + "0,1,1\n10,1,inf\n", {}, ":3: down_mbps is inf"),
        (CSV_HEAD + "0,1,1\n", {}, "1 data row(s) read as csv"),
        ("time_s,up_mbps\n0,1\n10,1\n", {}, "has no column 'down_mbps'"),
        ("", {}, "is empty"),
        ("\n  \n", {}, "is empty"),
        (CSV_HEAD + "0,1,1\n10,1,1\n", {"fmt": "pcap"}, "unknown format 'pcap'"),
        (CSV_HEAD + "0,1,1\n10,1,1\n", {"up_ratio": 0.5}, "up_ratio applies to download-only traces"),
        (
            CSV_HEAD + "0,1,1\n10,1,1\n",
            {"run": 1},
            "run applies to Lumos5G files only (this one reads as csv)",
        ),
        (HSDPA, {"up_ratio": 0.0}, "up_ratio 0.0 is not a positive number"),
        (HSDPA.replace(" 250000 ", " -1000 "), {}, "(data row 2): downlink rate -0.008 Mbps is outside"),
        (HSDPA.replace(" 250000 ", " lots "), {}, ":2: field 5 (bytes) 'lots' is not a number"),
        (HSDPA.replace(" 250000 1000", " 250000 0"), {}, ":2: field 6 is 0 ms elapsed"),
        (
            HSDPA + "1289406402 552000 59.85 10.78 1000\n",
            {},
            ":4: 5 fields where an HSDPA or Ghent log line has 6",
        ),
        (HSDPA.replace("551000", "549500"), {}, "(data row 3): time does not increase"),
        (
            HSDPA + "1289406404 555000 59.85 10.78 1000 1000\n",
            {},
            "(data row 4): a gap of 4 s before this row (the usual step is 1 s)",
        ),
        (LUMOS, {"run": 9}, "no rows of run 9 (runs: 7, 8)"),
        (LUMOS.replace("7,2.0,", "7,1.0,"), {}, "(data row 2): time does not increase"),
        (LUMOS.replace(",50,", ",n/a,"), {}, ":4: Throughput 'n/a' is not a number"),
        (LUMOS.replace("Throughput", "tput"), {"fmt": "lumos5g"}, "has no column 'Throughput'"),
    ],
)
def test_bad_traces_one_line_each(tmp_path, text, kwargs, expected):
    path = _write(tmp_path / "bad.trace", text)
    with pytest.raises(BandwidthError) as e:
        read_bandwidth(path, **kwargs)
    assert expected in str(e.value) and str(path) in str(e.value) and "\n" not in str(e.value)
    assert isinstance(e.value, TraceError)


def test_a_missing_file_is_one_line(tmp_path):
    with pytest.raises(BandwidthError, match=r"missing\.csv: no such bandwidth trace; check"):
        read_bandwidth(tmp_path / "missing.csv")


# ---------------------------------------------------------------- transfers, by hand

# 1 Mbit/s during [0, 10), an outage during [10, 20), 2 Mbit/s during [20, 30); 3e7 bits a period
T, R, P = np.array([0.0, 10.0, 20.0]), np.array([1e6, 0.0, 2e6]), 30.0


def _end(t0: float, bits: float, origin: float = 0.0) -> float:
    return transfer_end(T, R, P, origin, t0, bits)


def test_transfer_end_by_hand():
    assert _end(2.0, 5e6) == 7.0  # inside one segment: 5 s at 1 Mbit/s
    assert _end(5.0, 1e7) == 22.5  # 5e6 bits by 10 s, the outage, then 5e6 at 2 Mbit/s: 2.5 s
    assert _end(12.0, 2e6) == 21.0  # starts in the outage: waits for 20 s
    assert (
        _end(25.0, 2e7) == 40.0
    )  # 1e7 by 30 s, wraps, 1e7 at 1 Mbit/s; ends as the outage starts, not after it
    assert _end(5.0, 1e7 / 2) == 10.0  # the last bit at the segment's end, not after the outage
    assert _end(95.0, 1e7) == 112.5  # the same transfer three periods on
    assert _end(-25.0, 1e7) == -7.5  # and before time 0
    assert _end(7.0, 5e6, origin=5.0) == 12.0  # periods starting at 5 s: the first case shifted by 5 s
    assert _end(3.0, 0.0) == 3.0
    with pytest.raises(ValueError):
        _end(3.0, -1.0)


def test_whole_periods_in_closed_form():
    start = time.perf_counter()
    for _ in range(1000):
        # 10^6 whole periods of 3e7 bits, then 5e6 bits at 1 Mbit/s
        assert _end(0.0, 3e7 * 1e6 + 5e6) == 1e6 * 30.0 + 5.0
    assert time.perf_counter() - start < 1.0  # a microsecond each: no loop over the periods
    assert _end(0.0, 3e7 * 1e6) == 1e6 * 30.0  # exactly 10^6 periods: the last bit at the last one's end
    # 1 Mbit/s for 10 s then silent for 10 s: exactly 10^6 periods' bits end 10 s into the last period, not at its end
    assert (
        transfer_end(np.array([0.0, 10.0]), np.array([1e6, 0.0]), 20.0, 0.0, 0.0, 1e13)
        == 999_999 * 20.0 + 10.0
    )
    assert (
        _end(5.0, 3e7 * 1e6) == 5.0 + 1e6 * 30.0
    )  # a whole number of periods from anywhere: that many later


def test_a_silent_link_never_ends_a_transfer():
    assert transfer_end(np.array([0.0, 5.0]), np.array([0.0, 0.0]), 10.0, 0.0, 1.0, 1.0) == math.inf
    assert _end(0.0, math.inf) == math.inf
    with pytest.raises(ValueError, match="not negative"):
        transfer_end(np.array([0.0, 5.0]), np.array([1.0, -1.0]), 10.0, 0.0, 1.0, 1.0)


def test_transfer_end_matches_a_step_by_step_sum():
    rng = random.Random(3)
    for _ in range(200):
        n = rng.randint(1, 5)
        offsets = [0.0] + sorted(rng.sample(range(1, 40), n - 1))
        rates = [rng.choice([0.0, 1.0, 2.0, 5.0]) for _ in range(n)]
        if not any(rates):
            rates[0] = 1.0
        period, origin = 40.0, float(rng.randint(0, 39))
        t0, bits = float(rng.randint(-100, 100)), float(rng.randint(1, 600))
        t, left = t0, bits  # step through the segments one at a time (integers: exact)
        while True:
            phase = (t - origin) % period
            k = max(i for i, o in enumerate(offsets) if o <= phase)
            end = t + ((offsets[k + 1] if k + 1 < n else period) - phase)
            if rates[k] * (end - t) >= left:
                t += left / rates[k]
                break
            left -= rates[k] * (end - t)
            t = end
        assert transfer_end(np.array(offsets), np.array(rates), period, origin, t0, bits) == pytest.approx(t)


def test_mean_rate_by_hand():
    assert mean_rate(T, R, P, 0.0, 5.0, 25.0) == (5e6 + 0.0 + 1e7) / 20.0
    assert mean_rate(T, R, P, 0.0, 0.0, 30.0 * 1e6) == 1e6  # whole periods: 3e7 bits / 30 s
    assert mean_rate(T, R, P, 0.0, 12.0, 12.0) == 0.0  # no interval: the rate at that instant
    with pytest.raises(ValueError):
        mean_rate(T, R, P, 0.0, 2.0, 1.0)


def test_read_only_traces_build_their_link_once(tmp_path):
    trace = read_bandwidth(_write(tmp_path / "own.csv", "time_s,up_mbps,down_mbps\n0,1,2\n10,0.5,0\n"))
    assert not trace.down_bps.flags.writeable
    first = bandwidth._link(trace.times_s, trace.down_bps, trace.period_s, 0.0)
    assert bandwidth._link(trace.times_s, trace.down_bps, trace.period_s, 0.0) is first
    # 2 Mbit/s for 10 s, then nothing for 10 s: 3e7 bits take one wrap
    assert transfer_end(trace.times_s, trace.down_bps, trace.period_s, 0.0, 0.0, 3e7) == 25.0
    up, down = links(trace, start_s=10.0)  # time 0 is 10 s into the trace: the outage first
    assert link_transfer_end(down, 0.0, 2e6) == 11.0 and link_transfer_end(up, 0.0, 1e6) == 2.0
    assert link_mean_rate(down, 0.0, 20.0) == 1e6
    assert isinstance(down, Periodic)


# ---------------------------------------------------------------- the bundled sample


def test_bundled_lumos5g_sample():
    sample = read_bandwidth(SAMPLE)  # told apart as lumos5g
    rows = [r.split(",") for r in SAMPLE.read_text().splitlines()[1:]]
    assert len(rows) == 230 and {r[0] for r in rows} == {"1"}  # run 1, all of it
    assert sample.times_s.tolist() == [float(i) for i in range(230)] and sample.period_s == 230.0
    assert sample.down_bps.tolist() == [float(r[15]) * 1e6 for r in rows]
    assert np.flatnonzero(sample.down_bps == 0.0).tolist() == [121, 152, 227]  # seq 122, 153, 228: outages
    assert sample.up_bps == pytest.approx(sample.down_bps * 6 / 13)
    # a 100 MB model down from time 0: it arrives before the run ends, at the instant the sum reaches 8e8 bits
    _, down = links(sample)
    end = link_transfer_end(down, 0.0, 8e8)
    cum = np.cumsum(sample.down_bps)
    k = int(np.searchsorted(cum, 8e8))
    assert end == pytest.approx(k + (8e8 - (cum[k - 1] if k else 0.0)) / sample.down_bps[k])
