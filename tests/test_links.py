"""Links in the fleet (fleet/links.py): rate, spreading factor and loss from a device's distance, worked by hand from
the log-distance model and the SX1276 limits; rates over a hand-made bandwidth trace; out-of-range devices; and the
one-line refusals."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import yaml
from conftest import TINY, base_scenario

from iotfl_sim.cli import main
from iotfl_sim.fleet.fleet import Fleet
from iotfl_sim.scenario.loader import load_scenario, resolve_groups


def _fleet(network: dict, count: int = 1, base_dir: Path | None = None) -> Fleet:
    profile = copy.deepcopy(TINY)
    group = {"name": "node", "count": count, "profile": profile, "network": network}
    sc = load_scenario(text=yaml.safe_dump(base_scenario(fleet={"groups": [group]}, numerics="none")))
    return Fleet.build(resolve_groups(sc), 0, base_dir=base_dir)


LORA = {"radio": "lorawan", "lora": {"sf": 7}}


def _at(distance_m: float, **link) -> dict:
    return {
        **LORA,
        "link": {"path_loss": "bor2016_lora", "positions": {"kind": "fixed", "x_m": distance_m}, **link},
    }


def test_spreading_factor_rate_and_loss_from_distance_by_hand():
    # Bor et al.: PL(200 m) = 127.41 + 10 x 2.08 x log10(200 / 40) = 141.948 dB (shadowing 3.57 dB: drawn, so set
    # a custom model without it); rx = 14 dBm - PL = -127.948 dBm. Noise at 125 kHz with NF 6 dB: -174 + 50.97 + 6
    # = -117.03 dBm, so SF9 (limit -12.5 dB) needs -129.53 dBm and SF8 (-10 dB) -127.03: SF9 closes, SF8 does not.
    pl = {"pl_d0_db": 127.41, "d0_m": 40.0, "n": 2.08}
    fleet = _fleet({**LORA, "link": {"path_loss": pl, "positions": {"kind": "fixed", "x_m": 200.0}}})
    noise = -174 + 10 * math.log10(125e3) + 6
    rx = 14 - (127.41 + 20.8 * math.log10(5))
    margin = rx - (noise - 12.5)
    assert fleet.lora_sf[0] == 9
    assert fleet.up_bps[0] == pytest.approx(9 * 0.8 / (2**9 / 125e3))  # 1757.8 bit/s
    assert fleet.link_loss[0] == pytest.approx(
        1 / (1 + 9 * 10 ** (margin / 2))
    )  # 10 % at the limit, /10 per 2 dB
    assert fleet.phy(0).sf == 9 and fleet.distance_m[0] == pytest.approx(200.0)
    # a 3 dB margin asked (ADR-like) pushes it to SF10
    fleet = _fleet(
        {**LORA, "link": {"path_loss": pl, "positions": {"kind": "fixed", "x_m": 200.0}, "margin_db": 3}}
    )
    assert fleet.lora_sf[0] == 10


def test_positions_are_drawn_in_their_area_and_shadowing_from_the_seed():
    disc = {"kind": "disc", "x_m": 100.0, "y_m": -50.0, "radius_m": 30.0}
    a = _fleet(
        {**LORA, "link": {"path_loss": "bor2016_lora", "positions": disc, "gateway_m": [100.0, -50.0]}}, 50
    )
    b = _fleet(
        {**LORA, "link": {"path_loss": "bor2016_lora", "positions": disc, "gateway_m": [100.0, -50.0]}}, 50
    )
    assert (a.distance_m <= 30.0).all() and a.distance_m.tolist() == b.distance_m.tolist()
    assert a.lora_sf.tolist() == b.lora_sf.tolist()


def test_a_device_out_of_range_never_gets_a_transfer_through(tmp_path):
    fleet = _fleet(_at(100_000.0))  # 100 km with the Bor model: PL 198 dB, far below SF12's -137 dBm
    assert fleet.out_of_range.tolist() == [True]
    profile = copy.deepcopy(TINY)
    groups = [
        {"name": "far", "count": 2, "profile": copy.deepcopy(profile), "network": _at(100_000.0)},
        {"name": "near", "count": 2, "profile": profile},
    ]
    data = base_scenario(rounds=1, clients_per_round=4, numerics="none", fleet={"groups": groups})
    data["server"] = {"deadline_s": 100.0}
    path = tmp_path / "far.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    run = next((tmp_path / "out").iterdir())
    events = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]
    offline = {e["device"] for e in events if e["event"] == "offline"}
    uploaded = {e["device"] for e in events if e["event"] == "upload"}
    assert offline == {0, 1} and uploaded == {2, 3}


def test_rates_follow_a_bandwidth_trace(tmp_path):
    # 1 Mbps up / 2 down during [0, 1) s, an outage in [1, 2), 4 / 8 in [2, 3); the trace repeats every 3 s
    (tmp_path / "bw.csv").write_text("time_s,up_mbps,down_mbps\n0,1,2\n1,0,0\n2,4,8\n")
    fleet = _fleet({"bandwidth": {"trace": "bw.csv", "offsets": "same"}}, base_dir=tmp_path)
    # 1.5 Mbit up from 0: 1 Mbit in the first second, the outage, then 0.5 Mbit at 4 Mbps (0.125 s)
    assert fleet.air_time(0, True, 0.0, 1.5e6) == pytest.approx(2.125)
    # 20 Mbit down from 0.5 s: 1 Mbit to 1 s, outage to 2 s, 8 Mbit to 3 s (9 so far); 10 more by 6 s (19); the last
    # 1 Mbit at 2 Mbps takes 0.5 s: it ends at 6.5 s
    end = 0.5 + fleet.air_time(0, False, 0.5, 20e6)
    assert end == pytest.approx(6.5)
    assert fleet.rate_for(0, True, 0.0, 1.5e6) == pytest.approx(1.5e6 / 2.125)


def test_random_offsets_spread_a_group_over_its_trace(tmp_path):
    (tmp_path / "bw.csv").write_text("time_s,up_mbps,down_mbps\n0,1,2\n1,0,0\n2,4,8\n")
    fleet = _fleet({"bandwidth": {"trace": "bw.csv"}}, count=20, base_dir=tmp_path)
    assert len(set(fleet.bw_offset.tolist())) == 20 and (fleet.bw_offset < 3.0).all()


@pytest.mark.parametrize(
    ("network", "expected"),
    [
        ({"radio": "ethernet", "link": {"path_loss": "free_space_2400", "positions": {"kind": "fixed"}}},
         "ethernet, which has no path-loss model"),
        ({"link": {"path_loss": "bor2016_lora", "positions": {"kind": "disc"}}}, "need radius_m"),
        ({"link": {"path_loss": "bor2016_lora", "positions": {"kind": "fixed"}}, "bandwidth": {"trace": "x.csv"}},
         "give one of them"),
        ({"link": {"path_loss": "bor2016_lora", "positions": {"kind": "fixed"}}, "loss": 0.1}, "drop loss"),
        ({"link": {"path_loss": "okumura", "positions": {"kind": "fixed"}}}, "bor2016_lora"),
        ({"link": {"path_loss": {"pl_d0_db": 100, "d0_m": -1, "n": 2}, "positions": {"kind": "fixed"}}},
         "greater than 0"),
        ({"bandwidth": {"trace": "missing.csv"}}, "no such bandwidth trace"),
        ({"link": {"path_loss": "bor2016_lora", "positions": {"kind": "file", "path": "pos.csv"}}},
         "no row for device 1"),
    ],
)  # fmt: skip
def test_bad_link_settings_one_line_each(tmp_path, capsys, network, expected):
    (tmp_path / "pos.csv").write_text("device,x_m,y_m\n0,10,10\n")
    data = base_scenario(numerics="none")
    data["fleet"]["groups"][0]["network"] = network
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1, err


def test_the_scenario_names_every_published_path_loss_model():
    from iotfl_sim.fleet.link_quality import PATH_LOSS_PRESETS
    from iotfl_sim.scenario.model import PATH_LOSS_MODELS

    assert set(PATH_LOSS_MODELS) == set(PATH_LOSS_PRESETS)


def test_expected_retransmissions_at_a_given_error_rate():
    import numpy as np

    from iotfl_sim.fleet.link_quality import expected_attempts
    from iotfl_sim.fleet.network import MTU_BYTES, retransmitted_bytes

    # each packet is sent until it arrives: 1 / (1 - p) attempts on average (geometric), so 10 packets at p = 0.2 put
    # 12.5 packets on the air; the transfer's bytes scale the same way
    p, nbytes = 0.2, 10 * MTU_BYTES
    rng = np.random.default_rng(5)
    mean = np.mean([retransmitted_bytes(nbytes, p, rng) for _ in range(20000)])
    assert mean == pytest.approx(nbytes / (1 - p), rel=0.01)
    assert float(expected_attempts(p)) == pytest.approx(1.25)
