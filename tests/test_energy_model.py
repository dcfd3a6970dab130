"""Training energy that depends on the work (fl.cost.energy) and radio energy per byte (fleet.network), by hand."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import yaml
from conftest import BIG, base_scenario
from test_system_model import events, msg_bytes, one_group, simulate

from iotfl_sim.fl.cost.energy import training_energy_j, training_power_w
from iotfl_sim.fl.cost.opcost import StepParts, StepTrace
from iotfl_sim.fleet.network import RADIO_PRESETS, transfer_energy_j
from iotfl_sim.scenario.profile import DeviceProfile, Rates

# ---------------------------------------------------------------- the roofline split


def test_step_parts_split_each_op_by_its_bound_and_sum_to_the_step_time():
    # three ops on a device of F = 1e9 FLOP/s, B = 1e8 bytes/s, 1 ms per op:
    #   op a: 4e6 FLOPs -> 4 ms compute, 1e5 bytes -> 1 ms memory: compute-bound, 4 ms
    #   op b: 1e6 FLOPs -> 1 ms compute, 5e5 bytes -> 5 ms memory: memory-bound, 5 ms
    #   op c: 2e6 FLOPs -> 2 ms, 2e5 bytes -> 2 ms: a tie, counted compute-bound, 2 ms
    trace = StepTrace(8, ("a", "b", "c"), np.array([4e6, 1e6, 2e6]), np.array([1e5, 5e5, 2e5]))
    parts = trace.parts(1e9, 1e8, 1e-3)
    assert parts.compute_s == pytest.approx(0.006)
    assert parts.memory_s == pytest.approx(0.005)
    assert parts.overhead_s == pytest.approx(0.003)
    assert parts.total_s == pytest.approx(trace.time(1e9, 1e8, 1e-3))  # 14 ms


def test_step_parts_use_a_kinds_own_rate_and_fixed_cost():
    # kind "a" runs at 1e8 FLOP/s with 2 ms extra per call: 4e6 / 1e8 = 40 ms compute, overhead 1 + 2 ms
    trace = StepTrace(8, ("a", "b"), np.array([4e6, 1e6]), np.array([1e5, 5e5]))
    kernels = (("a", 2e-3, ((1.0, 1e8),)),)
    parts = trace.parts(1e9, 1e8, 1e-3, kernels)
    assert (parts.compute_s, parts.memory_s, parts.overhead_s) == pytest.approx((0.040, 0.005, 0.004))
    assert parts.total_s == pytest.approx(trace.time(1e9, 1e8, 1e-3, kernels))


# ---------------------------------------------------------------- the power mix


def rates(train_w: float = 6.0, compute_w: float | None = None, memory_w: float | None = None, overhead_w=None):
    return Rates(1e9, train_w, 1e8, 1e-3, compute_w=compute_w, memory_w=memory_w, overhead_w=overhead_w)


def test_training_power_is_the_time_weighted_mix_of_the_levels():
    parts = StepParts(2.0, 1.0, 1.0)
    # (2 x 10 + 1 x 6 + 1 x 4) / 4 = 7.5 W
    assert training_power_w(rates(compute_w=10.0, memory_w=6.0, overhead_w=4.0), parts) == pytest.approx(7.5)
    # overhead at memory_w when not given: (2 x 10 + 1 x 6 + 1 x 6) / 4 = 8 W
    assert training_power_w(rates(compute_w=10.0, memory_w=6.0), parts) == pytest.approx(8.0)
    # 8 W for 30 s (the task's jittered duration; the mix is the same at any scale) = 240 J
    assert training_energy_j(rates(compute_w=10.0, memory_w=6.0), 30.0, parts) == pytest.approx(240.0)


def test_without_activity_terms_training_draws_the_constant_train_w():
    assert training_power_w(rates(train_w=6.0), StepParts(2.0, 1.0, 1.0)) == 6.0
    assert training_energy_j(6.0, 30.0) == 180.0
    assert training_energy_j(rates(train_w=6.0), 30.0, StepParts(2.0, 1.0, 1.0)) == 180.0


def profile(power: dict, modes: dict | None = None) -> DeviceProfile:
    data = copy.deepcopy(BIG)
    data["power"].update(power)
    if modes:
        data["compute"]["power_modes"] = modes
    return DeviceProfile.model_validate(data)


def test_a_profiles_terms_reach_its_rates_and_a_mode_has_its_own():
    p = profile({"compute_w": 9.0, "memory_w": 5.0})
    r = p.rates()
    assert (r.compute_w, r.memory_w, r.overhead_w) == (9.0, 5.0, None)
    modes = {"low": {"flops": 5e9, "train_w": 4.0, "compute_w": 4.5, "memory_w": 3.5, "overhead_w": 3.0}, "plain": {"flops": 5e9, "train_w": 4.0}}
    p = profile({"compute_w": 9.0, "memory_w": 5.0}, modes)
    assert (p.rates("low").compute_w, p.rates("low").memory_w, p.rates("low").overhead_w) == (4.5, 3.5, 3.0)
    assert p.rates("plain").compute_w is None  # a mode without terms draws its own train_w, not the profile's levels
    assert profile({}).rates().compute_w is None


@pytest.mark.parametrize(
    ("power", "says"),
    [
        ({"compute_w": 9.0}, "memory_w is missing"),
        ({"memory_w": 5.0}, "compute_w is missing"),
        ({"overhead_w": 2.0}, "overhead_w needs compute_w and memory_w"),
        ({"compute_w": 0.0, "memory_w": 5.0}, "greater than 0"),
        ({"compute_w": float("nan"), "memory_w": 5.0}, "finite"),
    ],
)
def test_bad_activity_terms_are_refused(power, says):
    with pytest.raises(ValueError, match=says):
        profile(power)


# ---------------------------------------------------------------- in the engine


def energy_run(power: dict, mem_bw_gbs: float | None = None):
    prof = copy.deepcopy(BIG)
    prof["power"].update({"idle_w": 0.0, **power})
    prof["battery"] = {"capacity_j": None}
    if mem_bw_gbs is not None:
        prof["compute"].update({"mem_bw_gbs": mem_bw_gbs, "op_overhead_us": 0.0})
    data = base_scenario(numerics="none", rounds=1, clients_per_round=1, fleet=one_group(prof))
    data["fleet"]["cost_model"] = "roofline"
    sim = simulate(data)
    start = sim.fleet.energy["compute"][0]
    return sim, float(start)


def test_engine_charges_the_mixed_power_for_the_training_time():
    # equal levels: whatever the split, the power is that level (7.5 W), not train_w (6 W)
    sim_const, e_const = energy_run({})
    sim_mixed, e_mixed = energy_run({"compute_w": 7.5, "memory_w": 7.5, "overhead_w": 7.5})
    assert e_const > 0
    assert e_mixed == pytest.approx(e_const * 7.5 / 6.0, rel=1e-12)  # same training time, 7.5 W instead of 6 W


def test_engine_prices_flops_rule_training_as_all_compute_bound():
    # no memory bandwidth: time is FLOPs / FLOP/s and all of it compute-bound, so the power is compute_w (9 W)
    # whatever memory_w is
    _, e_const = energy_run({})
    _, e_mixed = energy_run({"compute_w": 9.0, "memory_w": 1.0})
    assert e_mixed == pytest.approx(e_const * 9.0 / 6.0, rel=1e-12)


def test_engine_weighs_the_levels_by_the_modelled_split():
    # with a roofline (no dispatch overhead) the step has compute-bound (t_c) and memory-bound (t_m) ops:
    #   levels (9, 3): P1 = (9 t_c + 3 t_m) / (t_c + t_m);  levels (3, 9): P2 = (3 t_c + 9 t_m) / (t_c + t_m)
    # so P1 + P2 = 12 W = 2 x train_w whatever the split, and P1 != 6 W unless t_c = t_m
    _, e_const = energy_run({}, mem_bw_gbs=0.5)
    sim, e1 = energy_run({"compute_w": 9.0, "memory_w": 3.0}, mem_bw_gbs=0.5)
    _, e2 = energy_run({"compute_w": 3.0, "memory_w": 9.0}, mem_bw_gbs=0.5)
    assert e1 + e2 == pytest.approx(2 * e_const, rel=1e-12)
    assert abs(e1 - e_const) > 0.05 * e_const


# ---------------------------------------------------------------- radio energy per byte

MB = 1e6  # bytes


@pytest.mark.parametrize(
    ("radio", "up", "bps", "joules"),
    [
        # power x airtime of 8e6 bits, by hand from each preset's datasheet figure (fleet/network.py)
        ("wifi", True, 1e6, 0.79 * 8.0),  # ESP32 tx 240 mA x 3.3 V ~ 0.79 W, 8 s
        ("wifi", False, 1e6, 0.33 * 8.0),
        ("nbiot", True, 62.5e3, 0.551 * 128.0),  # M5311 167 mA x 3.3 V, 8e6 / 62.5e3 = 128 s
        ("nbiot", False, 26e3, 0.178 * 8e6 / 26e3),
        ("lorawan", True, 5.47e3, 0.396 * 8e6 / 5.47e3),  # SX1276 120 mA x 3.3 V at SF7
        ("ble", True, 1e6, 0.0192 * 8.0),  # nRF52840 6.4 mA x 3 V
        # Huang's LTE model: (a x Mb/s + b) x airtime + the 11.576 s tail at 1.06 W once
        ("lte", True, 6e6, (0.43839 * 6 + 1.28804) * 8 / 6 + 11.576 * 1.06),
        ("lte", False, 13e6, (0.05197 * 13 + 1.28804) * 8 / 13 + 11.576 * 1.06),
    ],
)
def test_energy_of_a_megabyte_by_technology(radio, up, bps, joules):
    assert transfer_energy_j(RADIO_PRESETS[radio], up, MB, bps) == pytest.approx(joules, rel=1e-12)


def test_lte_tail_is_charged_once_per_message_not_per_packet():
    # 10 MB is 6850 packets of 1460 bytes; the tail (12.27 J) still comes once, after the last
    lte = RADIO_PRESETS["lte"]
    one, ten = transfer_energy_j(lte, True, MB, 6e6), transfer_energy_j(lte, True, 10 * MB, 6e6)
    tail = 11.576 * 1.06
    assert ten - tail == pytest.approx(10 * (one - tail), rel=1e-12)


@pytest.mark.parametrize("radio", ["wifi", "nbiot", "lorawan", "ble", "lte"])
def test_engine_charges_each_technology_its_power_times_airtime(radio):
    prof = copy.deepcopy(BIG)
    prof["power"]["idle_w"] = 0.0
    prof["battery"] = {"capacity_j": None}
    prof["compute"]["flops"] = 1e6  # training outlasts the download's LTE tail: each transfer has its full tail
    prof["link"] = {"radio": radio, "down_mbps": 0.2, "up_mbps": 0.1, "rtt_ms": 20.0}
    data = base_scenario(numerics="none", rounds=1, clients_per_round=1, fleet=one_group(prof))
    data["fleet"]["groups"][0]["network"] = {"power_model": "preset"}
    data["server"] = {"deadline_s": 1e6}
    sim = simulate(data)
    p = RADIO_PRESETS[radio]
    expect = transfer_energy_j(p, False, msg_bytes(), 0.2e6) + transfer_energy_j(p, True, msg_bytes(), 0.1e6)
    assert sim.fleet.energy["radio"][0] == pytest.approx(expect, rel=1e-9)


def test_lte_tail_is_charged_with_the_profiles_radio_power_too():
    # power_model: profile takes tx_w / rx_w from the profile, but the tail is the network's (RRC inactivity
    # timer), so it is charged after each transfer all the same: 1 W x airtime each way + 2 tails
    prof = copy.deepcopy(BIG)
    prof["power"]["idle_w"] = 0.0
    prof["battery"] = {"capacity_j": None}
    prof["compute"]["flops"] = 1e6  # training outlasts the download's tail
    prof["link"] = {"radio": "lte", "down_mbps": 10.0, "up_mbps": 5.0, "rtt_ms": 0.0}
    data = base_scenario(numerics="none", rounds=1, clients_per_round=1, fleet=one_group(prof))
    data["server"] = {"deadline_s": 1e6}
    sim = simulate(data)
    expect = 1.0 * msg_bytes() * 8 / 10e6 + 1.0 * msg_bytes() * 8 / 5e6 + 2 * 11.576 * 1.06
    assert sim.fleet.energy["radio"][0] == pytest.approx(expect, rel=1e-9)


def test_yaml_round_trip_of_a_profile_with_terms():
    p = profile({"compute_w": 9.0, "memory_w": 5.0, "overhead_w": 4.0})
    again = DeviceProfile.model_validate(yaml.safe_load(yaml.safe_dump(p.model_dump())))
    assert again.rates() == p.rates()


def test_a_transfer_inside_the_last_tail_cuts_it_so_one_connected_period_has_one_tail(tmp_path):
    # training (on BIG's 1e10 FLOP/s) ends well inside the download's 11.576 s tail: the radio stays connected from
    # the download's end to the upload's start, so that gap is charged at the tail's 1.06 W, and one full tail
    # follows the upload (before: two full tails, 11.576 s of tail power counted twice over the gap)
    prof = copy.deepcopy(BIG)
    prof["power"]["idle_w"] = 0.0
    prof["battery"] = {"capacity_j": None}
    prof["link"] = {"radio": "lte", "down_mbps": 10.0, "up_mbps": 5.0, "rtt_ms": 0.0}
    data = base_scenario(numerics="none", rounds=1, clients_per_round=1, fleet=one_group(prof))
    data["fleet"]["groups"][0]["network"] = {"power_model": "preset"}
    sim = simulate(data, tmp_path)
    ev = {e["event"]: e["t"] for e in events(tmp_path) if e.get("device") == 0}
    gap = ev["train_end"] - ev["arrive"]  # download end to upload start
    assert 0 < gap < 11.576
    air_down, air_up = msg_bytes() * 8 / 10e6, msg_bytes() * 8 / 5e6
    expect = (0.05197 * 10 + 1.28804) * air_down + 1.06 * gap + (0.43839 * 5 + 1.28804) * air_up + 11.576 * 1.06
    assert sim.fleet.energy["radio"][0] == pytest.approx(expect, abs=1e-5)  # the log rounds event times
