"""Bandwidth traces (a link's uplink and downlink rate over time) read from the common public formats, and the
instant a transfer ends on a link whose rate follows one.

Formats (``format: auto`` tells them apart by their first line):

- ``csv``: this project's own: columns ``time_s`` (seconds), ``up_mbps`` and ``down_mbps`` (Mbit/s, 10^6 bit/s).
- ``lumos5g``: the CSV of Lumos5G 1.0 (Narayanan et al., "Lumos5G: Mapping and Predicting Commercial mmWave 5G
  Throughput", IMC 2020; CC BY 4.0; github.com/SIGCOMM20-5G/Lumos5G): a header ``run_num, seq_num,
  abstractSignalStr, latitude, longitude, movingSpeed, compassDirection, nrStatus, lte_rssi, lte_rsrp, lte_rsrq,
  lte_rssnr, nr_ssRsrp, nr_ssRsrq, nr_ssSinr, Throughput, mobility_mode, trajectory_direction, tower_id``, then one
  row per second (``seq_num``) of each run, ``Throughput`` the TCP downlink iPerf 3.7 measured in that second, in
  Mbit/s. A file holds many runs: ``run`` picks one (default: the first row's), the rows with that ``run_num``
  (and, where the columns exist, the ``mobility_mode`` and ``trajectory_direction`` of its first row); time is
  ``seq_num`` in seconds.
- ``hsdpa``: the HSDPA logs of Riiser et al. ("Commute path bandwidth traces from 3G networks: analysis and
  applications", MMSys 2013; Telenor's 3G/HSDPA network around Oslo; datasets.simula.no/hsdpa-tcp-logs): lines
  of six fields separated by spaces: Unix time (s), milliseconds since an unspecified start (monotonic), latitude,
  longitude, bytes received since the previous line, milliseconds elapsed since it (the difference of the
  second fields).
- ``ghent``: the 4G/LTE logs of van der Hooft et al. ("HTTP/2-Based Adaptive Streaming of HEVC Video over 4G/LTE
  Networks", IEEE Communications Letters 2016; around Ghent; users.ugent.be/~jvdrhoof/dataset-4g): the same six
  fields, except that the first counts milliseconds since the epoch (and the last may be zero-padded: ``0999``).
  As the first field is not used, a ghent log is read exactly as an hsdpa one; ``auto`` names it ghent when its
  first field is too large for seconds.

An hsdpa or ghent line's rate, bytes x 8 / ms / 1000 Mbit/s, is the mean over the interval the line measured, so it
holds from (second field - sixth field) to the second field, in milliseconds. Lumos5G, HSDPA and Ghent measured
downloads only: their uplink is ``up_ratio`` x the downlink, by default 6/13, the ratio of the LTE medians (6 Mb/s
up, 13 Mb/s down; Huang et al., MobiSys 2012) of the project's default backhaul; a csv file gives both and refuses
``up_ratio``.

The checks, the refusals and the repetition are ``fleet.series_csv``'s, for each direction: a rate below 0 or above
100 Gbit/s is refused, a rate of 0 is an outage. Rates come back in bit/s.

A link follows a trace as a ``Periodic`` signal in bit/s (``links``). ``transfer_end`` is the instant the last bit of
a transfer started at ``t0`` arrives: outages wait, the period wraps, whole periods are counted in closed form, and
a link with no rate at all never ends one (``inf``). ``mean_rate`` is the mean rate over ``[t0, t1]``.
"""

from __future__ import annotations

import functools
import math
from bisect import bisect_left, bisect_right
from pathlib import Path
from typing import NamedTuple

import numpy as np

from iotfl_sim.fleet.periodic import Periodic
from iotfl_sim.fleet.series_csv import Kind, checked, fail, number, plain_rows, read_rows, stat_file
from iotfl_sim.fleet.traces import TraceError

FORMATS = ("auto", "csv", "lumos5g", "hsdpa", "ghent")
MAX_MBPS = 1e5  # 100 Gbit/s: no radio or Ethernet link to a device carries more
UP_RATIO = 6.0 / 13.0  # uplink / downlink of the LTE medians (Huang et al.), the project's default backhaul
FIELD = "network.bandwidth.trace"
FORMAT_LIST = "a time_s,up_mbps,down_mbps CSV, a Lumos5G CSV, or an HSDPA or Ghent log"
EPOCH_MS = 1e11  # a first field above this counts milliseconds (ghent), below it seconds (hsdpa)


class BandwidthError(TraceError):
    """A bandwidth trace that cannot be used; the message names the file (and row), the problem and the fix."""


# a file's refusals name a bandwidth trace, a value's its direction
BANDWIDTH, UP, DOWN = (
    Kind(what, "Mbps", 0.0, MAX_MBPS, 0.0, FIELD, FORMAT_LIST, BandwidthError)
    for what in ("bandwidth", "uplink rate", "downlink rate")
)


class BandwidthTrace(NamedTuple):
    times_s: np.ndarray  # from 0, strictly increasing; read-only
    up_bps: np.ndarray  # read-only
    down_bps: np.ndarray  # read-only
    period_s: float  # the trace repeats with this period


def _fail(path: Path, where: str, what: str, fix: str) -> TraceError:
    return fail(BANDWIDTH, path, where, what, fix)


def _blank(row: list[str]) -> bool:
    return not row or not "".join(row).strip()


def _sniff(rows: list[list[str]]) -> str:
    first = next((r for r in rows if not _blank(r)), [])
    header = [c.strip() for c in first]
    if "seq_num" in header and "Throughput" in header:
        return "lumos5g"
    fields = ",".join(first).split()
    if len(fields) == 6:
        try:
            return "ghent" if float(fields[0]) > EPOCH_MS else "hsdpa"
        except ValueError:
            pass
    return "csv"


def _need(path: Path, header: list[str], names: tuple[str, ...], fmt: str) -> list[int]:
    for name in names:
        if name not in header:
            raise _fail(
                path, "", f"has no column {name!r} (columns: {', '.join(header)})",
                f"give {', '.join(names)} columns for {fmt}, or set the format ({', '.join(FORMATS[1:])})",
            )  # fmt: skip
    return [header.index(n) for n in names]


def _csv(path: Path, rows: list[list[str]]) -> tuple[list[float], list[float], list[float]]:
    _need(path, [c.strip() for c in rows[0]], ("time_s", "up_mbps", "down_mbps"), "csv")
    times, up = plain_rows(UP, path, rows, "up_mbps", FIELD)
    _, down = plain_rows(DOWN, path, rows, "down_mbps", FIELD)
    return times, up, down


def _lumos5g(path: Path, rows: list[list[str]], run: float | None) -> tuple[list[float], list[float]]:
    header = [c.strip() for c in rows[0]]
    rc, sc, tc = _need(path, header, ("run_num", "seq_num", "Throughput"), "lumos5g")
    tags = [header.index(n) for n in ("mobility_mode", "trajectory_direction") if n in header]
    times, values, runs, tag = [], [], [], None
    for i in range(1, len(rows)):
        r = rows[i]
        if _blank(r):
            continue
        if len(r) <= max(rc, sc, tc, *tags):
            raise _fail(path, f":{i + 1}", "the row is short", "give every column of the header")
        this = number(DOWN, path, i + 1, "run_num", r[rc])
        if run is None:
            run = this
        if this != run:
            if this not in runs and len(runs) < 10:
                runs.append(this)
            continue
        if tag is None:
            tag = [r[k] for k in tags]
        elif [r[k] for k in tags] != tag:
            continue
        times.append(number(DOWN, path, i + 1, "seq_num", r[sc]))
        values.append(number(DOWN, path, i + 1, "Throughput", r[tc]))
    if not times:
        others = ", ".join(f"{v:g}" for v in runs) or "none"
        raise _fail(
            path, "", f"no rows of run {run:g} (runs: {others})", "set run to one of the file's run_num"
        )
    return times, values


def _log(path: Path, rows: list[list[str]]) -> tuple[list[float], list[float]]:
    times, values = [], []
    for i, r in enumerate(rows):
        if _blank(r):
            continue
        fields = ",".join(r).split()
        if len(fields) != 6:
            raise _fail(
                path, f":{i + 1}", f"{len(fields)} fields where an HSDPA or Ghent log line has 6 separated by spaces",
                "fix or drop that line, or set the format",
            )  # fmt: skip
        t_ms = number(DOWN, path, i + 1, "field 2 (ms since start)", fields[1])
        nbytes = number(DOWN, path, i + 1, "field 5 (bytes)", fields[4])
        dt_ms = number(DOWN, path, i + 1, "field 6 (ms elapsed)", fields[5])
        if dt_ms <= 0:
            raise _fail(path, f":{i + 1}", f"field 6 is {fields[5]} ms elapsed", "fix or drop that line")
        times.append((t_ms - dt_ms) / 1000.0)
        values.append(nbytes * 8.0 / dt_ms / 1000.0)
    return times, values


def _frozen(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


@functools.lru_cache(maxsize=16)
def _read_cached(
    path: Path, stamp: tuple[int, int], fmt: str, run: float | None, up_ratio: float | None
) -> BandwidthTrace:
    rows = read_rows(BANDWIDTH, path)
    if not any(not _blank(r) for r in rows):
        raise _fail(path, "", "is empty", f"give {FORMAT_LIST}")
    kind = _sniff(rows) if fmt == "auto" else fmt
    if run is not None and kind != "lumos5g":
        raise _fail(path, "", f"run applies to Lumos5G files only (this one reads as {kind})", "drop run")
    if kind == "csv":
        if up_ratio is not None:
            raise _fail(
                path, "", "up_ratio applies to download-only traces; a csv gives up_mbps", "drop up_ratio"
            )
        times, up, down = _csv(path, rows)
        up_s, down_s = checked(UP, path, kind, times, up), checked(DOWN, path, kind, times, down)
        up_mbps, down_mbps = up_s.values, down_s.values
    else:
        times, down = _lumos5g(path, rows, run) if kind == "lumos5g" else _log(path, rows)
        down_s = checked(DOWN, path, kind, times, down)
        down_mbps = down_s.values
        up_mbps = down_mbps * (UP_RATIO if up_ratio is None else up_ratio)
    return BandwidthTrace(
        _frozen(down_s.times_s), _frozen(up_mbps * 1e6), _frozen(down_mbps * 1e6), down_s.period_s
    )


def read_bandwidth(
    path: str | Path, fmt: str = "auto", run: int | None = None, up_ratio: float | None = None
) -> BandwidthTrace:
    """The bandwidth trace in ``path`` (see the module for the formats, ``run``, ``up_ratio`` and what is refused)."""
    p = Path(path).expanduser()
    if fmt not in FORMATS:
        raise _fail(p, "", f"unknown format {fmt!r}", f"use one of {', '.join(FORMATS)}")
    if up_ratio is not None and not (math.isfinite(up_ratio) and up_ratio > 0):
        raise _fail(
            p, "", f"up_ratio {up_ratio!r} is not a positive number", "give uplink / downlink, e.g. 0.5"
        )
    stamp = stat_file(BANDWIDTH, p)
    return _read_cached(p.resolve(), stamp, fmt, None if run is None else float(run), up_ratio)


def links(trace: BandwidthTrace, start_s: float = 0.0) -> tuple[Periodic, Periodic]:
    """The (uplink, downlink) rates in bit/s as periodic signals; the simulation's time 0 is ``start_s`` into the
    trace."""
    origin = (-start_s) % trace.period_s
    return (
        Periodic(trace.times_s, trace.up_bps, trace.period_s, origin),
        Periodic(trace.times_s, trace.down_bps, trace.period_s, origin),
    )


# ---------------------------------------------------------------- transfers over a periodic rate


def _scalars(link: Periodic) -> tuple[list[float], list[float], list[float], list[float], float]:
    """Offsets, rates, the bits sent by each segment's start and by its end within a period, and a whole period's,
    as Python floats (cached on the link)."""
    got = link.cache.get("transfer")
    if got is None:
        offsets, rates = link.offsets_s.tolist(), link.values.tolist()
        if not all(r >= 0.0 and math.isfinite(r) for r in rates):
            raise ValueError("a link's rates must be finite and not negative")
        starts, ends, done = [], [], 0.0
        for r, n in zip(rates, link.lengths_s.tolist(), strict=True):
            starts.append(done)
            done += r * n
            ends.append(done)
        got = link.cache["transfer"] = (offsets, rates, starts, ends, done)
    return got


def link_transfer_end(link: Periodic, t0: float, bits: float) -> float:
    """The instant the last of ``bits`` sent from ``t0`` arrives over ``link`` (a rate in bit/s); ``inf`` when the
    link never carries anything."""
    if not bits > 0:
        if bits == 0:
            return t0
        raise ValueError(f"a transfer of {bits!r} bits")
    offsets, rates, starts, ends, total = _scalars(link)
    if not total > 0 or math.isinf(bits):
        return math.inf
    period = link.period_s
    phase = (t0 - link.origin_s) % period
    k = bisect_right(offsets, phase) - 1
    target = starts[k] + rates[k] * (phase - offsets[k]) + bits  # bits counted from the start of t0's period
    whole = math.ceil(target / total) - 1  # periods sent in full before the one the last bit arrives in
    rest = target - whole * total  # in (0, total]
    if rest <= 0.0:
        whole, rest = whole - 1, rest + total
    elif rest > total:
        whole, rest = whole + 1, rest - total
    j = bisect_left(ends, rest)  # the first segment whose end reaches it: one with a rate
    return max(t0, (t0 - phase) + whole * period + offsets[j] + (rest - starts[j]) / rates[j])


def link_mean_rate(link: Periodic, t0: float, t1: float) -> float:
    """The mean rate of ``link`` over ``[t0, t1]`` (its rate at ``t0`` when they are equal)."""
    if t1 < t0:
        raise ValueError(f"an interval from {t0!r} back to {t1!r}")
    if t1 == t0:
        return link.value(t0)
    return link.integral(t0, t1) / (t1 - t0)


_LINKS: dict[tuple[int, int, float, float], tuple[np.ndarray, np.ndarray, Periodic]] = {}


def _link(times_s, rate_bps, period_s: float, origin_s: float) -> Periodic:
    """The link of these segments; read-only arrays (as ``read_bandwidth``'s are) are taken as fixed, so their link
    and its cached figures are built once."""
    fixed = all(isinstance(a, np.ndarray) and not a.flags.writeable for a in (times_s, rate_bps))
    if not fixed:
        return Periodic(
            np.array(times_s, dtype=np.float64), np.array(rate_bps, dtype=np.float64), period_s, origin_s
        )
    key = (id(times_s), id(rate_bps), float(period_s), float(origin_s))
    got = _LINKS.get(key)
    if got is not None and got[0] is times_s and got[1] is rate_bps:
        return got[2]
    if len(_LINKS) >= 64:
        _LINKS.clear()
    link = Periodic(times_s, rate_bps, period_s, origin_s)
    _LINKS[key] = (times_s, rate_bps, link)
    return link


def transfer_end(times_s, rate_bps, period_s: float, origin_s: float, t0: float, bits: float) -> float:
    """The instant the last of ``bits`` sent from ``t0`` arrives over a link whose rate is ``rate_bps[k]`` bit/s from
    ``times_s[k]`` to ``times_s[k + 1]`` (the last to ``period_s``) of every period, periods starting at ``origin_s +
    m x period_s``; ``inf`` when the rate is 0 throughout."""
    return link_transfer_end(_link(times_s, rate_bps, period_s, origin_s), t0, bits)


def mean_rate(times_s, rate_bps, period_s: float, origin_s: float, t0: float, t1: float) -> float:
    """The mean rate in bit/s over ``[t0, t1]`` of the link ``transfer_end`` describes."""
    return link_mean_rate(_link(times_s, rate_bps, period_s, origin_s), t0, t1)
