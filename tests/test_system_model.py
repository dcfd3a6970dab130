"""Device, energy, network and server behaviour against analytic expectations (system-only runs)."""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path

import numpy as np
import pytest
import simpy
import yaml
from conftest import BIG, TINY, base_scenario

from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec
from iotfl_sim.fleet.network import (
    LORAWAN_FRAME_BYTES,
    SharedMedium,
    duty_cycled_duration,
    retransmitted_bytes,
)
from iotfl_sim.output.run_dir import RunRecorder
from iotfl_sim.scenario.loader import load_scenario, resolve_groups
from iotfl_sim.scenario.resolved import ResolvedScenario
from iotfl_sim.sim.engine import Simulation
from iotfl_sim.sim.setup import build_simulation

ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def model_cost():
    """The model's measured cost, measured on first use (not at import: both xdist workers collect this module)."""
    return ModelRecipe("cnn_small", 10, 1, (8, 8)).cost(SubmodelSpec(1.0))


def msg_bytes() -> int:
    return model_cost().params * 4 + 1024


def simulate(data: dict, tmp_path: Path | None = None, base_dir: Path | None = None) -> Simulation:
    sc = load_scenario(text=yaml.safe_dump(data))
    sim = build_simulation(ResolvedScenario(sc, resolve_groups(sc), base_dir))
    if tmp_path is not None:
        sim.recorder = RunRecorder(tmp_path, [], "all")
    sim.run()
    if sim.recorder is not None:
        sim.recorder.close()
    return sim


def events(tmp_path: Path) -> list[dict]:
    return [json.loads(x) for x in open(tmp_path / "events.jsonl")]


def one_group(profile: dict, count: int = 1, **group) -> dict:
    return {"groups": [{"name": "g", "count": count, "profile": profile, **group}]}


# ---------------------------------------------------------------- memory


def test_ou_memory_has_configured_mean_variance_and_correlation():
    data = base_scenario(numerics="none", rounds=1)
    data["fleet"]["groups"][1]["memory"] = {"process": "ou", "free": 500.0, "sigma": 40.0, "tau_s": 100.0}
    sim = simulate(data)
    f, d = sim.fleet, 5  # a device of the OU group
    samples = np.array([f.sample_free_memory(d, 1e4 + 1000.0 * i, 0) for i in range(4000)]) / 2**20
    assert samples.mean() == pytest.approx(500.0, abs=2.5)
    assert samples.std() == pytest.approx(40.0, rel=0.06)
    # lag-tau autocorrelation of an OU process is exp(-1)
    x = np.array([f.sample_free_memory(d, 1e7 + 100.0 * i, 0) for i in range(6000)])
    r = np.corrcoef(x[:-1], x[1:])[0, 1]
    assert r == pytest.approx(np.exp(-1.0), abs=0.05)


def test_ou_memory_can_fall_during_training_and_fail_the_task_then(tmp_path):
    prof = copy.deepcopy(TINY)
    prof["compute"]["flops"] = 1e6  # training takes a long time: memory has time to move
    prof["battery"]["capacity_j"] = None
    data = base_scenario(numerics="none", rounds=3, clients_per_round=4, fleet=one_group(prof, 4))
    need_mb = model_cost().memory_bytes(16) / 2**20
    data["fleet"]["groups"][0]["memory"] = {"process": "ou", "free": need_mb + 0.4, "sigma": 0.3, "tau_s": 30.0}
    simulate(data, tmp_path)
    ev = events(tmp_path)
    mid = [e for e in ev if e["event"] == "oom" and e.get("phase") == "train"]
    assert mid, "expected an out-of-memory failure during training"
    for e in mid:
        start = next(x for x in ev if x["event"] == "train_start" and x["device"] == e["device"] and x["round"] == e["round"])
        assert e["t"] > start["t"]


def test_sigma2_list_gives_each_device_one_of_the_variances():
    data = base_scenario(numerics="none", rounds=1)
    data["fleet"]["groups"][1]["count"] = 200
    data["fleet"]["groups"][1]["memory"] = {"sigma2": [5.0, 8.0, 10.0]}
    sim = simulate(data)
    sig2 = np.round((sim.fleet.mem_sigma[4:] / 2**20) ** 2, 6)
    assert set(sig2.tolist()) == {5.0, 8.0, 10.0}


# ---------------------------------------------------------------- energy


def test_fleet_figures_kept_incrementally_equal_the_full_computation():
    data = base_scenario(numerics="none", rounds=6, clients_per_round=6)
    data["fleet"]["groups"][0]["profile"]["battery"]["capacity_j"] = 3.0  # some die mid-run, from idle too
    data["fleet"]["groups"][0]["count"] = 10
    sim = simulate(data)
    for t in (sim.rows[-1]["sim_time_s"], sim.rows[-1]["sim_time_s"] + 100.0):
        total = sum(v.sum() for v in sim.fleet.class_energy(t).values())
        assert total == pytest.approx(sim.fleet.energy_total(t).sum(), rel=1e-9)
        assert sim.fleet.alive_count(t) == int((sim.fleet.depleted_at > t).sum())
    used = sim.fleet.energy_total(1e6)
    assert np.all(used[:10] <= 3.0 + 1e-9)  # a battery never goes negative


def test_lte_tail_energy_is_charged_after_each_transfer():
    prof = copy.deepcopy(BIG)
    prof["power"]["idle_w"] = 0.0
    prof["compute"]["flops"] = 1e6  # training outlasts the download's 11.576 s tail: each transfer has its full tail
    prof["link"] = {"radio": "lte", "down_mbps": 10.0, "up_mbps": 5.0, "rtt_ms": 0.0}
    data = base_scenario(numerics="none", rounds=1, clients_per_round=1, fleet=one_group(prof))
    data["fleet"]["groups"][0]["network"] = {"power_model": "preset"}
    data["server"] = {"deadline_s": 1e6}
    sim = simulate(data)
    air_down, air_up = msg_bytes() * 8 / 10e6, msg_bytes() * 8 / 5e6
    expect = (0.05197 * 10 + 1.28804) * air_down + (0.43839 * 5 + 1.28804) * air_up + 2 * 11.576 * 1.06
    assert sim.fleet.energy["radio"][0] == pytest.approx(expect, rel=1e-9)


# ---------------------------------------------------------------- network


def test_two_simultaneous_uploads_through_a_gateway_each_get_half():
    env = simpy.Environment()
    gw = SharedMedium(env, 10e6)
    took = []

    def upload():
        took.append((yield env.process(gw.transfer(5e6, 100e6))))

    env.process(upload())
    env.process(upload())
    env.run()
    assert took == [pytest.approx(1.0), pytest.approx(1.0)]  # 5 Mbit at 5 Mbit/s each


def test_gateway_shares_by_max_min_fairness_and_reallocates():
    env = simpy.Environment()
    gw = SharedMedium(env, 10e6)
    done = {}

    def flow(name, bits, cap, start):
        yield env.timeout(start)
        yield env.process(gw.transfer(bits, cap))
        done[name] = env.now

    env.process(flow("slow", 2e6, 2e6, 0.0))  # capped at 2 Mbit/s: the other gets 8
    env.process(flow("fast", 8e6, 100e6, 0.0))
    env.process(flow("late", 4e6, 100e6, 0.5))
    env.run()
    # 0-0.5 s: slow 2, fast 8 (fast has 4 Mbit left); 0.5-1.0: slow 2, fast 4, late 4 (slow done);
    # then fast and late have 2 Mbit left each at 5 Mbit/s: both done at 1.4 s
    assert done["slow"] == pytest.approx(1.0)
    assert done["fast"] == pytest.approx(1.4)
    assert done["late"] == pytest.approx(1.4)


def test_gateway_in_a_scenario_halves_two_devices_uploads():
    prof = copy.deepcopy(BIG)
    prof["link"] = {"radio": "wifi", "down_mbps": 100.0, "up_mbps": 100.0, "rtt_ms": 0.0}
    prof["compute"]["flops"] = 1e12
    data = base_scenario(numerics="none", rounds=1, clients_per_round=2, fleet=one_group(prof, 2))
    data["fleet"]["gateways"] = [{"name": "ap", "down_mbps": 1000.0, "up_mbps": 1.0}]
    data["fleet"]["groups"][0]["network"] = {"gateway": "ap"}
    sim = simulate(data)
    samples = int(sim.numerics.samples_per_device.min())  # 719 and 718: one starts its upload a hair earlier
    t_down = msg_bytes() * 8 / 100e6  # the gateway's downlink is not the bottleneck
    t_comp = 3 * model_cost().flops_forward_per_sample * samples / 1e12
    t_up = 2 * msg_bytes() * 8 / 1e6  # both messages through the shared 1 Mbit/s, half each while both send
    agg = sim.rows[0]["server_aggregate_s"]  # the round closes after the server's aggregation (priced on its own in test_server_cost)
    assert sim.rows[0]["sim_time_s"] == pytest.approx(t_down + t_comp + t_up + agg, rel=1e-9)



@pytest.mark.parametrize("per, shared", [(1, False), (2, True), (None, True)])
def test_gateway_per_block_of_devices(per, shared):
    """devices_per_gateway replicates the gateway per block of device indices: devices 0 and 1 share one copy
    when the block holds both (each upload at half the capacity while both send) and not when it holds one."""
    prof = copy.deepcopy(BIG)
    prof["link"] = {"radio": "wifi", "down_mbps": 100.0, "up_mbps": 100.0, "rtt_ms": 0.0}
    prof["compute"]["flops"] = 1e12
    data = base_scenario(numerics="none", rounds=1, clients_per_round=2, fleet=one_group(prof, 2))
    data["fleet"]["gateways"] = [{"name": "ap", "down_mbps": 1000.0, "up_mbps": 1.0, "devices_per_gateway": per}]
    data["fleet"]["groups"][0]["network"] = {"gateway": "ap"}
    sim = simulate(data)
    # 719 and 718 samples: sharing, the last upload ends when both messages are through (the earlier start
    # included); alone, the round waits for the device with more to train
    per_device = sim.numerics.samples_per_device
    samples = int(per_device.min() if shared else per_device.max())
    t_down = msg_bytes() * 8 / 100e6
    t_comp = 3 * model_cost().flops_forward_per_sample * samples / 1e12
    t_up = (2 if shared else 1) * msg_bytes() * 8 / 1e6
    agg = sim.rows[0]["server_aggregate_s"]  # the round closes after the server's aggregation (priced on its own in test_server_cost)
    assert sim.rows[0]["sim_time_s"] == pytest.approx(t_down + t_comp + t_up + agg, rel=1e-9)
    assert len({k[1] for k in sim.system.media}) == (1 if shared else 2)

def test_lorawan_duty_cycle_holds(tmp_path):
    prof = copy.deepcopy(TINY)
    prof["link"] = {"radio": "lorawan", "down_mbps": 1.0, "up_mbps": 0.00547, "rtt_ms": 0.0}
    prof["battery"]["capacity_j"] = None
    prof["compute"]["flops"] = 1e12
    data = base_scenario(numerics="none", rounds=3, clients_per_round=1, fleet=one_group(prof))
    simulate(data, tmp_path)
    ev = events(tmp_path)
    frames = -(-msg_bytes() // LORAWAN_FRAME_BYTES)
    air = msg_bytes() * 8 / 5470.0
    ends = [e["t"] for e in ev if e["event"] == "upload"]
    starts = [e["t"] for e in ev if e["event"] == "train_end"]
    assert len(ends) == 3
    assert ends[0] - starts[0] == pytest.approx(duty_cycled_duration(air, 0.01, frames), rel=1e-9)
    # over the whole run (up to the end of the silence after the last frame) at most 1 % on air
    silence = air / frames * 99
    assert 3 * air / (ends[-1] + silence - starts[0]) <= 0.01 + 1e-12
    # the second upload had to wait for the sub-band to reopen
    assert ends[1] - starts[1] > ends[0] - starts[0]


def test_retransmissions_follow_the_loss_rate():
    rng = np.random.default_rng(0)
    sent = np.mean([retransmitted_bytes(1460 * 1000, 0.2, rng) for _ in range(300)])
    assert sent / (1460 * 1000) == pytest.approx(1 / 0.8, rel=0.01)


# ---------------------------------------------------------------- availability and server


def test_device_going_offline_mid_task_fails_at_that_instant(tmp_path):
    prof = copy.deepcopy(TINY)
    prof["compute"]["flops"] = 1e6
    prof["battery"]["capacity_j"] = None
    trace = tmp_path / "trace.csv"
    trace.write_text("device,online_from,online_until\n0,0,40\n")
    data = base_scenario(numerics="none", rounds=1, clients_per_round=1, fleet=one_group(prof))
    data["fleet"]["groups"][0]["availability"] = {"kind": "trace", "format": "csv", "path": "trace.csv"}
    sim = simulate(data, tmp_path, base_dir=tmp_path)
    ev = events(tmp_path)
    off = [e for e in ev if e["event"] == "offline"]
    assert len(off) == 1 and off[0]["t"] == pytest.approx(40.0) and off[0]["phase"] == "train"
    assert sim.rows[0]["failed_offline"] == 1


def test_over_selection_keeps_the_first_k_to_arrive():
    data = base_scenario(numerics="none", rounds=1, clients_per_round=4)
    data["server"] = {"over_selection": 2.0}
    sim = simulate(data)
    row = sim.rows[0]
    assert row["selected"] == 8 and row["completed"] == 4 and row["failed_surplus"] == 4
    # the four fast devices (group big) arrive first and the round ends with the fourth of them
    samples = int(sim.numerics.samples_per_device[4])
    link = BIG["link"]
    fast = (
        msg_bytes() * 8 / (link["down_mbps"] * 1e6)
        + msg_bytes() * 8 / (link["up_mbps"] * 1e6)
        + 2 * link["rtt_ms"] / 1000
        + 3 * model_cost().flops_forward_per_sample * samples / BIG["compute"]["flops"]
    )
    assert row["sim_time_s"] == pytest.approx(fast + row["server_aggregate_s"], rel=1e-9)  # the round closes after the server's aggregation (priced on its own in test_server_cost)


def test_server_waits_until_enough_devices_are_online(tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text("device,online_from,online_until\n" + "".join(f"{d},300,1e9\n" for d in range(4)))
    data = base_scenario(numerics="none", rounds=1, clients_per_round=2)
    for g in data["fleet"]["groups"]:
        g["availability"] = {"kind": "trace", "format": "csv", "path": "trace.csv"}
    data["server"] = {"min_participants": 2, "retry_s": 60.0}
    sim = simulate(data, tmp_path, base_dir=tmp_path)
    first = min(e["t"] for e in events(tmp_path) if e["event"] == "dispatch")
    assert first == pytest.approx(300.0)  # retries at 0, 60, ..., 300
    assert sim.rows[0]["completed"] == 2


# ---------------------------------------------------------------- FlexFL's configurations


@pytest.mark.parametrize("conf,sigma2", [(1, {0.0}), (2, {5.0, 8.0, 10.0}), (3, {10.0, 20.0, 30.0})])
def test_flexfl_configurations(conf, sigma2):
    sc = load_scenario(ROOT / "scenarios" / f"flexfl_conf{conf}.yaml", sets=["numerics=none", "rounds=1"])
    assert sc.fleet.memory_units == "relative"
    sim = build_simulation(ResolvedScenario(sc, resolve_groups(sc)))
    counts = np.bincount(sim.fleet.group_of)
    assert (counts / counts.sum()).tolist() == pytest.approx([0.4, 0.3, 0.3])
    assert sorted(set((sim.fleet.mem_free).tolist())) == [35.0, 60.0, 110.0]
    assert set(np.round(sim.fleet.mem_sigma**2, 6).tolist()) == sigma2
    # relative units: the full model needs 100 (% of itself)
    full = sim.strategy.candidate_specs()[0]
    assert sim.system.memory_need(*full) == pytest.approx(100.0)


# ---------------------------------------------------------------- harvesting


def test_harvest_path_is_piecewise_linear_and_capped():
    from iotfl_sim.fleet.harvest import Cell, Harvest, depletion_time, walk

    h = Harvest.window(power_w=3.0, start_s=6.0, length_s=12.0, period_s=24.0)  # a 24-second "day"
    ideal = Cell()
    # draw 1 W from a full 100 J battery over 0..24: -6, +24 (capped at 100 right away), -6
    step = walk(100.0, 100.0, 0.0, 24.0, 1.0, h, ideal)
    assert step.dead_at is None and step.level == pytest.approx(94.0) and step.drawn_j == pytest.approx(12.0)
    # from 10 J: 0-6 s -> 4 J, 6-18 s +24 -> 28 J, 18-24 s -> 22 J
    assert walk(10.0, 100.0, 0.0, 24.0, 1.0, h, ideal).level == pytest.approx(22.0)
    # drawing 2 W from full at t = 6: the first window is capped (100), each night costs 24 J and each later window
    # brings 12: nights start at 100, 88, 76, ..., 16 (the 8th, at t = 18 + 7 x 24 = 186), which ends 8 s in
    assert depletion_time(100.0, 100.0, 6.0, 2.0, h, ideal) == pytest.approx(194.0)
    step = walk(100.0, 100.0, 6.0, 195.0, 2.0, h, ideal)
    assert step.dead_at == pytest.approx(194.0) and step.level == 0.0
    assert depletion_time(50.0, 100.0, 0.0, 1.0, h, ideal) == float("inf")  # the day brings more than it costs


def test_solar_harvesting_keeps_a_device_alive_that_would_otherwise_die():
    prof = copy.deepcopy(TINY)
    prof["battery"]["capacity_j"] = 5000.0
    prof["power"]["idle_w"] = 0.05  # 100,000 s on the battery alone; a 12-hour night costs 2,160 J
    data = base_scenario(numerics="none", rounds=1, clients_per_round=1, fleet=one_group(prof, 2))
    dying = simulate(data)
    assert dying.fleet.depleted_at[1] == pytest.approx(100_000.0)
    data["fleet"]["groups"][0]["harvest"] = {"power_w": 0.2, "start_hour": 6, "hours": 12}
    solar = simulate(data)
    assert solar.fleet.depleted_at[1] == float("inf")
    assert solar.fleet.alive_count(1e7) == 2


# ---------------------------------------------------------------- power modes and the example deployment


def test_power_mode_changes_throughput_and_power_together():
    def compute(mode: str, cost_model: str = "roofline") -> tuple[float, Simulation]:
        data = base_scenario(numerics="none", rounds=1, clients_per_round=1)
        data["fleet"] = {
            "cost_model": cost_model,
            "groups": [{"name": "nano", "profile": "jetson_nano", "count": 1, "power_mode": mode}],
        }
        sim = simulate(data)
        return sim.fleet.energy["compute"][0], sim

    from iotfl_sim.fl.cost import opcost
    from iotfl_sim.scenario.loader import load_profile

    nano = load_profile("jetson_nano")
    (e5, s5), (e10, s10) = compute("5w"), compute("10w")
    assert (s5.fleet.flops[0], s10.fleet.flops[0]) == (nano.mode("5w")[0], nano.mode("10w")[0])
    # each mode has its own FLOP/s and op overhead (32 vs 20 us) and the same bandwidth
    assert (s5.fleet.op_overhead_s[0], s10.fleet.op_overhead_s[0]) == pytest.approx((32e-6, 20e-6))
    # energy / power = compute time; the same device and round draw the same jitter in both modes, so the
    # ratio of the two times is the ratio of the modes' roofline prices of the same training
    recipe, spec = ModelRecipe("cnn_small", 10, 1, (8, 8)), SubmodelSpec(1.0)
    samples, batch = int(s5.numerics.samples_per_device[0]), s5.sc.local.batch_size

    def price(mode: str) -> float:
        r = nano.rates(mode)
        loc = s5.sc.local  # defaults: momentum 0.9, weight decay 5e-4 and clipping at 1.0, all traced
        opts = opcost.StepOptions(loc.momentum, loc.weight_decay > 0, loc.clip_grad_norm is not None)
        assert opts == opcost.StepOptions(0.9, True, True)
        return opcost.train_seconds(recipe, spec, samples, 1, batch, r.flops, r.mem_bw, r.op_overhead_s, opts)

    t5, t10 = e5 / nano.mode("5w")[1], e10 / nano.mode("10w")[1]
    assert t5 / t10 == pytest.approx(price("5w") / price("10w"), rel=1e-9)
    assert t5 > t10
    # the old FLOPs-only cost model: the time ratio is the inverse of the modes' FLOP/s
    (f5, _), (f10, _) = compute("5w", "flops"), compute("10w", "flops")
    t5, t10 = f5 / nano.mode("5w")[1], f10 / nano.mode("10w")[1]
    assert t5 / t10 == pytest.approx(nano.mode("10w")[0] / nano.mode("5w")[0], rel=1e-9)


def test_field_deployment_example_runs_every_mechanism(tmp_path):
    path = ROOT / "scenarios" / "iot_field_deployment.yaml"
    sc = load_scenario(path, sets=["rounds=3", "numerics=none"])
    sim = build_simulation(ResolvedScenario(sc, resolve_groups(sc), path.parent))
    sim.recorder = RunRecorder(tmp_path, [], "all")
    sim.run()
    sim.recorder.close()
    assert sim.system.media, "the barn access point is a shared medium"
    assert any(h is not None for h in sim.fleet.harvests)
    assert any(r.duty_cycle < 1 for r in sim.fleet.radio)
    assert sum(r["completed"] for r in sim.rows) > 0


def test_deadline_counts_from_dispatch_after_waiting_for_devices(tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text("device,online_from,online_until\n" + "".join(f"{d},300,1e9\n" for d in range(8)))
    data = base_scenario(numerics="none", rounds=1, clients_per_round=8)
    for g in data["fleet"]["groups"]:
        g["availability"] = {"kind": "trace", "format": "csv", "path": "trace.csv"}
    data["server"] = {"min_participants": 2, "retry_s": 60.0, "deadline_s": 3.0}
    sim = simulate(data, tmp_path, base_dir=tmp_path)
    row = sim.rows[0]
    # dispatched at 300 s; the fast devices finish within 3 s, the slow ones (over 6 s of upload) are cut
    assert row["sim_time_s"] == pytest.approx(303.0 + row["server_aggregate_s"])  # the round closes after the server's aggregation (priced on its own in test_server_cost)
    assert row["completed"] == 4 and row["failed_deadline"] == 4


def test_a_system_only_run_sizes_its_clients_from_the_train_samples_a_real_run_keeps():
    """data.train_samples cuts the train set of a real run; a system-only pilot of the same scenario must price
    the same local work (each device's share of 600 samples, not of MNIST's 60,000)."""
    data = base_scenario(numerics="none", data={"dataset": "mnist", "train_samples": 600})
    sc = load_scenario(text=yaml.safe_dump(data))
    sizes = build_simulation(ResolvedScenario(sc, resolve_groups(sc))).numerics.samples_per_device
    assert sizes.sum() == 600 and sizes.max() - sizes.min() <= 1
