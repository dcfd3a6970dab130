"""Device -> gateway -> cloud aggregation (``sim/hierarchy.py``): one gateway with k1 = k2 = 1 is flat FedAvg,
backhaul bytes are a hand count, the cloud averages every k2 gateway rounds, HeteroFL runs, bad scenarios are
refused in one line, and a stopped run resumes to the same files."""

from __future__ import annotations

import copy
import csv
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from conftest import base_scenario

from iotfl_sim.cli import main
from iotfl_sim.fl.submodel import SubmodelSpec
from iotfl_sim.scenario.loader import load_scenario, resolve_groups
from iotfl_sim.scenario.resolved import ResolvedScenario
from iotfl_sim.sim import engine, hierarchy
from iotfl_sim.sim.engine import Simulation
from iotfl_sim.sim.setup import build_simulation

HEADER = 1024  # server.header_bytes' default


def gatewayed(data: dict, per_gateway: int | None = None, **tier) -> dict:
    """``data`` with one gateway every group names (``per_gateway``: its devices_per_gateway) and a hierarchy."""
    data = copy.deepcopy(data)
    gw = {"name": "gw", "down_mbps": 50.0, "up_mbps": 20.0}
    if per_gateway is not None:
        gw["devices_per_gateway"] = per_gateway
    data["fleet"]["gateways"] = [gw]
    for g in data["fleet"]["groups"]:
        g.setdefault("network", {})["gateway"] = "gw"
    data["hierarchy"] = tier
    return data


def simulation_of(data: dict) -> Simulation:
    sc = load_scenario(text=yaml.safe_dump(data))
    return build_simulation(ResolvedScenario(sc, resolve_groups(sc)))


def simulate(data: dict) -> Simulation:
    sim = simulation_of(data)
    sim.run()
    return sim


def rows(run: Path) -> list[dict[str, str]]:
    with open(run / "rounds.csv") as f:
        return list(csv.DictReader(f))


def only_run(parent: Path) -> Path:
    (run,) = [p for p in parent.iterdir() if p.is_dir()]
    return run


@pytest.mark.parametrize(("method", "beside"), [
        ("fedavg", ()), ("adaptivefl", ("tc", "tr", "history")), ("fedopt", ("m", "v")), ("fedx", ()),
        ("dadaquant_fedx_setting", ("schedule", "last_update")), ("decoupled", ()), ("adapterfl", ()),
    ])
def test_one_gateway_with_k1_k2_one_is_the_flat_sync_run_bit_for_bit(method, beside):
    """The model (Decoupled's: one per level), the state ``beside`` it (AdaptiveFL's RL tables and per-round counts;
    FedOpt's moments: its gateway only averages, and the cloud's optimizer steps on that one gateway's model) and the
    rows' figures: the flat run's."""
    from test_resume import METHODS

    # two rounds: the second starts from the first's aggregate (and FedOpt's moments); the methods whose state
    # beside the model needs rounds to move (AdaptiveFL's RL tables, DAdaQuant's level schedule) get three
    rounds = 3 if method in ("adaptivefl", "dadaquant_fedx_setting") else 2
    flat_data = base_scenario(rounds=rounds, clients_per_round=3, **copy.deepcopy(METHODS[method]))
    # BN statistics recomputed before each evaluation on 64 training samples (the default 2,000 is every one of
    # digits'): the same seeded draw in both runs
    flat_data.setdefault("server", {})["bn_calibration_samples"] = 64
    flat_data["fleet"]["gateways"] = [{"name": "gw", "down_mbps": 50.0, "up_mbps": 20.0}]
    for g in flat_data["fleet"]["groups"]:
        g["network"] = {"gateway": "gw"}  # the same shared links as the hierarchical run's devices
    flat = simulate(flat_data)
    tiered = simulate(gatewayed(flat_data))
    assert len(tiered.loop.nodes) == 1
    a, b = model_of(flat.strategy), model_of(tiered.strategy)
    assert a.keys() == b.keys() and a
    for k, v in a.items():
        assert torch.equal(v, b[k]), k
    for name in beside:
        a, b = getattr(flat.strategy, name), getattr(tiered.strategy, name)
        if isinstance(a, dict):  # FedOpt's moments: a tensor per parameter
            assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
        else:
            assert (np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b), name
    for a, b in zip(flat.rows, tiered.rows, strict=True):
        for col in ("train_loss", "acc_full", "completed", "bytes_down", "bytes_up"):
            assert a[col] == b[col], col
        assert b["sim_time_s"] > a["sim_time_s"]  # the gateway's aggregation and the backhaul take time


def model_of(strategy) -> dict:
    """The method's model as one flat dict: its ``state``, or Decoupled's ``states`` (one model per level)."""
    if hasattr(strategy, "states"):
        return {f"{x}/{k}": v for x, state in strategy.states.items() for k, v in state.items()}
    return strategy.state


def test_backhaul_bytes_are_the_model_in_float32_plus_a_header_per_gateway_each_way_each_cloud_round(tmp_path, write_scenario):
    data = gatewayed(base_scenario(rounds=2, numerics="none", clients_per_round=2), per_gateway=3)
    assert main(["run", str(write_scenario(data)), "--out", str(tmp_path), "--quiet"]) == 0
    run = only_run(tmp_path)
    sc = load_scenario(text=yaml.safe_dump(data))
    recipe = build_simulation(ResolvedScenario(sc, resolve_groups(sc))).recipe  # the scenario's model: cnn_small on 8 x 8 digits
    weights = recipe.build(SubmodelSpec(1.0)).state_dict().values()
    n_params = sum(t.numel() for t in weights if t.is_floating_point())  # float32 values on the wire
    gateways = 3  # 8 devices in blocks of 3
    per_round = gateways * (n_params * 4 + HEADER)
    got = rows(run)
    assert [float(r["bytes_backhaul_up"]) for r in got] == [per_round, 2 * per_round]
    assert [float(r["bytes_backhaul_down"]) for r in got] == [per_round, 2 * per_round]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["hierarchy"] == {"gateways": 3, "device_rounds": 1, "gateway_rounds": 1}
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    ups = [e for e in events if e["event"] == "backhaul" and e["up"]]
    assert sorted({e["gateway"] for e in ups}) == ["gw[0]", "gw[1]", "gw[2]"]
    assert sum(e["event"] == "cloud_aggregate" for e in events) == 2


def weighted_average(states: list[dict], weights: list[float]) -> dict:
    """By hand: every float tensor the float64 weighted mean of the gateways', back in float32."""
    out = {}
    for k, v in states[0].items():
        if not v.is_floating_point():
            continue
        total = sum(w * s[k].to(torch.float64) for s, w in zip(states, weights, strict=True))
        out[k] = (total / sum(weights)).to(v.dtype)
    return out


def record_backhaul(monkeypatch, model: str = "state") -> list[tuple]:
    """(up, gateway, its model, the cloud's model) at each backhaul transfer's start; ``model``: the method's
    attribute that holds it."""
    seen = []
    backhaul = hierarchy.GatewayTier._backhaul

    def spy(self, node, rnd, up):
        seen.append((up, node.label, dict(node.tier.values[model]), dict(getattr(self.sim.strategy, model))))
        return backhaul(self, node, rnd, up)

    monkeypatch.setattr(hierarchy.GatewayTier, "_backhaul", spy)
    return seen


def gateway_weights(run: Path, cloud_round: int, k2: int, per_gateway: int, gateways: int) -> list[float]:
    """By hand from the run's public files: each gateway's weight at the cloud (HierFAVG's edge data size) is the
    samples (devices.csv) of the updates its devices delivered ("accepted" events) in its k2 gateway rounds
    (keys cloud_round x k2 .. + k2 - 1); gateway g holds devices g x per_gateway .. + per_gateway - 1."""
    with open(run / "devices.csv") as f:
        samples = {int(r["device"]): int(r["samples"]) for r in csv.DictReader(f)}
    keys = range(cloud_round * k2, (cloud_round + 1) * k2)
    weights = [0.0] * gateways
    for line in (run / "events.jsonl").read_text().splitlines():
        e = json.loads(line)
        if e["event"] == "accepted" and e["round"] in keys:
            weights[e["device"] // per_gateway] += samples[e["device"]]
    return weights


@pytest.mark.parametrize("algorithm", [{"name": "fedavg"}, {"name": "heterofl", "proportions": "a1-b1"}])
def test_the_cloud_averages_the_gateways_models_every_k2_gateway_rounds(monkeypatch, tmp_path, write_scenario, algorithm):
    data = gatewayed(base_scenario(rounds=2, clients_per_round=2, algorithm=algorithm), per_gateway=4, gateway_rounds=2)
    data["server"] = {"bn_calibration_samples": 64}
    seen = record_backhaul(monkeypatch)
    assert main(["run", str(write_scenario(data)), "--out", str(tmp_path), "--quiet"]) == 0
    run = only_run(tmp_path)
    ups = [s for s in seen if s[0]]
    downs = [s for s in seen if not s[0]]
    assert len(ups) == len(downs) == 4  # 2 gateways x 2 cloud rounds, each way
    unequal = False
    for r in range(2):
        models = {label: model for _, label, model, _ in ups[2 * r : 2 * r + 2]}
        a, b = models["gw[0]"], models["gw[1]"]
        wa, wb = gateway_weights(run, r, k2=2, per_gateway=4, gateways=2)
        assert wa > 0 and wb > 0
        unequal |= wa != wb  # 2 x 2 updates a gateway, of 179 or 180 samples: an unweighted mean would differ
        assert any(not torch.equal(a[k], b[k]) for k in a)  # each gateway trained its own devices: they differ
        merged = downs[2 * r][3]  # what the cloud sends down: both gateways' models, weighted by samples
        for k, v in weighted_average([a, b], [wa, wb]).items():
            assert torch.equal(merged[k], v), k
    assert unequal
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    kinds = [(e["event"], e.get("gateway")) for e in events if e["event"] in ("gateway_aggregate", "cloud_aggregate")]
    per_cloud = [("gateway_aggregate", "gw[0]"), ("gateway_aggregate", "gw[1]")] * 2 + [("cloud_aggregate", None)]
    assert sorted(kinds[:5], key=str) == sorted(per_cloud, key=str) and kinds[4] == ("cloud_aggregate", None)
    assert len(kinds) == 10 and kinds[9] == ("cloud_aggregate", None)
    got = rows(run)
    assert len(got) == 2 and all(r["acc_full"] for r in got)
    assert {e["round"] for e in events if e["event"] == "train_start"} == {0, 1, 2, 3}  # gateway rounds' keys


def test_fedopt_steps_the_clouds_optimizer_once_a_cloud_round_on_the_gateways_samples_weighted_average(monkeypatch, tmp_path, write_scenario):
    """Hierarchical FedAdam by hand (Reddi et al., Algorithm 2, first step: m = 0, v = tau^2): each gateway averages
    its devices' models only, and the cloud takes Delta = (the gateways' models weighted by samples) - x and steps
    x + eta m / (sqrt(v) + tau), m = (1 - beta1) Delta, v = beta2 tau^2 + (1 - beta2) Delta^2; BatchNorm buffers take
    the plain average. Its optimizer work is charged once per cloud round, not per gateway round."""
    from iotfl_sim.algorithms.fedopt import FedOpt

    eta, beta1, beta2, tau = 0.05, 0.9, 0.99, 1e-3
    algorithm = {"name": "fedopt", "server_lr": eta, "beta1": beta1, "beta2": beta2, "tau": tau}
    data = gatewayed(base_scenario(rounds=1, clients_per_round=2, algorithm=algorithm), per_gateway=4, gateway_rounds=2)
    seen = record_backhaul(monkeypatch)
    steps = []
    charge = FedOpt.charge_step
    monkeypatch.setattr(FedOpt, "charge_step", lambda self: (steps.append(self.c.tier), charge(self))[1])
    assert main(["run", str(write_scenario(data)), "--out", str(tmp_path), "--quiet"]) == 0
    assert steps == ["server"]  # one cloud round, two gateways of two gateway rounds each
    run = only_run(tmp_path)
    ups = {label: (model, cloud) for up, label, model, cloud in seen if up}
    (a, x), (b, _) = ups["gw[0]"], ups["gw[1]"]
    merged = next(cloud for up, _, _, cloud in seen if not up)
    wa, wb = gateway_weights(run, 0, k2=2, per_gateway=4, gateways=2)
    mean = weighted_average([a, b], [wa, wb])
    stepped = 0
    for k, v in merged.items():
        if not v.is_floating_point():
            continue
        if "running_" in k:
            assert torch.equal(v, mean[k]), k
            continue
        delta = mean[k].double() - x[k].double()
        m, var = (1 - beta1) * delta, beta2 * tau**2 + (1 - beta2) * delta * delta
        want = x[k].double() + eta * m / (var.sqrt() + tau)
        assert torch.allclose(v.double(), want, rtol=1e-5, atol=1e-6), k
        assert not torch.allclose(v.double(), mean[k].double(), rtol=1e-5, atol=1e-6), k  # not the plain average
        stepped += 1
    assert stepped > 0


def test_fedx_fine_tunes_at_the_cloud_once_a_cloud_round_the_gateways_samples_weighted_average(monkeypatch, tmp_path, write_scenario):
    """FedX under a hierarchy: gateways aggregate by eq. 4 only; the cloud fine-tunes (eq. 5) the gateways' models
    averaged by the samples each aggregated, once per cloud round (two gateways of two gateway rounds: not four times),
    and sends the fine-tuned model down."""
    from test_resume import METHODS

    from iotfl_sim.algorithms import fedx

    data = gatewayed(base_scenario(rounds=1, clients_per_round=2, **copy.deepcopy(METHODS["fedx"])), per_gateway=4, gateway_rounds=2)
    seen = record_backhaul(monkeypatch)
    tuned = []
    fine_tune = fedx.fine_tune

    def spy(recipe, spec, state, *args, **kw):
        out = fine_tune(recipe, spec, state, *args, **kw)
        tuned.append(({k: v.clone() for k, v in state.items()}, out))
        return out

    monkeypatch.setattr(fedx, "fine_tune", spy)
    assert main(["run", str(write_scenario(data)), "--out", str(tmp_path), "--quiet"]) == 0
    assert len(tuned) == 1
    run = only_run(tmp_path)
    ups = {label: model for up, label, model, _ in seen if up}
    merged = next(cloud for up, _, _, cloud in seen if not up)
    wa, wb = gateway_weights(run, 0, k2=2, per_gateway=4, gateways=2)
    (before, after), = tuned
    for k, v in weighted_average([ups["gw[0]"], ups["gw[1]"]], [wa, wb]).items():
        assert torch.equal(before[k], v), k
    assert all(torch.equal(merged[k], after[k]) for k in after)


def test_dadaquant_steps_its_level_schedule_at_the_cloud_on_the_loss_pooled_over_the_cloud_round(monkeypatch):
    """The cloud is DAdaQuant's server: one schedule step per cloud round (2, not 2 gateways x 2 gateway rounds x 2),
    on G^_t = sum_k |D_k| F_k / sum_k |D_k| over every update the gateways aggregated in that cloud round; phi counts
    cloud rounds (a tenth of ``rounds``, not of rounds x k2)."""
    from iotfl_sim.algorithms import dadaquant

    log = []
    terms, observe = dadaquant.DAdaQuant._loss_terms, dadaquant.LevelSchedule.observe
    monkeypatch.setattr(dadaquant.DAdaQuant, "_loss_terms", lambda self, u: (log.append(("terms", *terms(self, u))), log[-1][1:])[1])
    monkeypatch.setattr(dadaquant.LevelSchedule, "observe", lambda self, loss: (log.append(("observe", loss)), observe(self, loss))[1])
    data = gatewayed(base_scenario(rounds=2, clients_per_round=2, algorithm={"name": "dadaquant"}), per_gateway=4, gateway_rounds=2)
    data["server"] = {"bn_calibration_samples": 64}  # the schedule reads training losses; evaluations only cost here
    simulate(data)
    steps = [i for i, e in enumerate(log) if e[0] == "observe"]
    assert len(steps) == 2
    start = 0
    for i in steps:
        pooled = [e for e in log[start:i] if e[0] == "terms"]
        assert len(pooled) == 4  # 2 gateways x 2 gateway rounds
        assert log[i][1] == pytest.approx(sum(e[1] for e in pooled) / sum(e[2] for e in pooled), rel=1e-12)
        start = i + 1
    ten = simulation_of(gatewayed(base_scenario(numerics="none", rounds=10, algorithm={"name": "dadaquant"}), gateway_rounds=3))
    assert ten.strategy.c.rounds == 30 and ten.strategy.schedule.phi == 1


def test_decoupled_averages_each_levels_model_at_the_cloud_by_the_samples_the_gateways_gave_that_level(monkeypatch, tmp_path, write_scenario):
    """Decoupled under a hierarchy: two gateways, each with two devices that hold only level e (1 MB free) and two
    that hold level a. The cloud's level-x model is the gateways' level-x models averaged with weights the samples
    (devices.csv) of the level-x updates each delivered ("accepted" events) in its two gateway rounds, not the
    samples over both levels; a gateway that trained no level-x update does not take part."""
    from conftest import BIG, TINY

    small = copy.deepcopy(TINY)
    small["memory"] = {"total_mb": 2, "free_mb": 1, "sigma_mb": 0.0}
    data = base_scenario(rounds=1, clients_per_round=3, algorithm={"name": "decoupled", "levels": "a-e"})
    data["fleet"]["groups"] = [
        {"name": f"{kind}{i}", "count": 2, "profile": copy.deepcopy(profile)}
        for i in range(2) for kind, profile in (("small", small), ("big", BIG))
    ]  # fmt: skip
    data = gatewayed(data, per_gateway=4, gateway_rounds=2)
    seen = record_backhaul(monkeypatch, "states")
    assert main(["run", str(write_scenario(data)), "--out", str(tmp_path), "--quiet"]) == 0
    run = only_run(tmp_path)
    with open(run / "devices.csv") as f:
        samples = {int(r["device"]): int(r["samples"]) for r in csv.DictReader(f)}
    level = {d: "e" if d % 4 < 2 else "a" for d in range(8)}  # groups of two: small, big, small, big
    weights = {x: [0.0, 0.0] for x in "ae"}
    for line in (run / "events.jsonl").read_text().splitlines():
        e = json.loads(line)
        if e["event"] == "accepted":
            weights[level[e["device"]]][e["device"] // 4] += samples[e["device"]]
    ups = {label: model for up, label, model, _ in seen if up}
    cloud = next(merged for up, _, _, merged in seen if not up)
    totals = [weights["a"][g] + weights["e"][g] for g in (0, 1)]
    shares = {x: weights[x][0] / sum(weights[x]) for x in "ae" if sum(weights[x])}
    assert shares and any(abs(s - totals[0] / sum(totals)) > 1e-3 for s in shares.values())  # the weights matter
    for x in "ae":
        if not sum(weights[x]):
            continue
        want = weighted_average([ups["gw[0]"][x], ups["gw[1]"][x]], weights[x])
        for k, v in want.items():
            assert torch.equal(cloud[x][k], v), (x, k)
    sc = load_scenario(text=yaml.safe_dump(data))
    recipe, rates = build_simulation(ResolvedScenario(sc, resolve_groups(sc))).recipe, sc.algorithm.level_rates
    models = [replace(recipe, global_rate=rates[x]).build(SubmodelSpec(rates[x])) for x in "ae"]
    floats = sum(t.numel() for m in models for t in m.state_dict().values() if t.is_floating_point())
    assert float(rows(run)[0]["bytes_backhaul_up"]) == 2 * (floats * 4 + HEADER)  # both levels' models, 2 gateways


def test_adapterfl_averages_each_block_at_the_cloud_by_the_clients_the_gateways_gave_it(monkeypatch, tmp_path, write_scenario):
    """AdapterFL under a hierarchy (its default ``weighting: count``, the paper's unweighted means): the cloud's
    shared block is the gateways' averaged by the number of updates each aggregated in its two gateway rounds
    ("accepted" events), a model's own blocks by the number of that model's updates each aggregated (the model a
    device trained: its "train_start" event), as the flat server averages over clients. The backhaul carries the
    group: every model's parameters, the shared block once."""
    from conftest import BIG
    from test_resume import GROUP

    def free(mb: float) -> dict:
        profile = copy.deepcopy(BIG)
        profile["memory"] = {"total_mb": 2 * mb, "free_mb": mb, "sigma_mb": 0.0}
        return profile

    data = base_scenario(rounds=1, clients_per_round=4, algorithm={"name": "adapterfl", **GROUP})
    # devices that fit only L-S (3.1 MB), up to L-M (11.4 MB), every model (15.2 MB): gateway 0 holds one, one, two
    # (the selector's 4 slots a round go 1, 1, 2), gateway 1 two, one, one (2, 1, 1)
    data["fleet"]["groups"] = [
        {"name": f"{kind}{i}", "count": count, "profile": free(mb)}
        for i, counts in enumerate(((1, 1, 2), (2, 1, 1)))
        for kind, count, mb in zip("sml", counts, (5.0, 13.0, 32.0), strict=True)
    ]  # fmt: skip
    data = gatewayed(data, per_gateway=4, gateway_rounds=2)
    seen = record_backhaul(monkeypatch)
    assert main(["run", str(write_scenario(data)), "--out", str(tmp_path), "--quiet"]) == 0
    run = only_run(tmp_path)
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    trained = {(e["round"], e["device"]): e["level"] for e in events if e["event"] == "train_start"}
    weights: dict[str, list[float]] = {x: [0.0, 0.0] for x in ("L-S", "L-M", "L-L")}
    for e in events:
        if e["event"] == "accepted":
            weights[trained[(e["round"], e["device"])]][e["device"] // 4] += 1.0
    totals = [sum(w[g] for w in weights.values()) for g in (0, 1)]
    assert len({w[0] / sum(w) for w in weights.values() if sum(w)} | {totals[0] / sum(totals)}) > 1  # the weights matter
    ups = {label: model for up, label, model, _ in seen if up}
    start = next(merged for up, _, _, merged in seen if up)  # the cloud's model as the cloud round began
    cloud = next(merged for up, _, _, merged in seen if not up)
    checked = set()
    for k, v in cloud.items():
        if not v.is_floating_point():
            continue
        owner = k.split("/", 1)[0]
        w = weights[owner] if owner in weights else totals
        if not sum(w):
            assert torch.equal(v, start[k]), k  # no gateway trained it
            continue
        assert torch.equal(v, weighted_average([{k: ups["gw[0]"][k]}, {k: ups["gw[1]"][k]}], w)[k]), k
        checked.add(owner if owner in weights else "shared")
    assert "shared" in checked and len(checked) >= 3
    sc = load_scenario(text=yaml.safe_dump(data))
    sim = build_simulation(ResolvedScenario(sc, resolve_groups(sc)))
    models = [sim.strategy.recipes[x].build(sim.strategy.specs[x]) for x in weights]
    every = sum(p.numel() for m in models for p in m.parameters())
    shared = sum(p.numel() for n, p in models[0].named_parameters() if n.startswith("ex."))
    assert shared > 0
    assert float(rows(run)[0]["bytes_backhaul_up"]) == 2 * ((every - 2 * shared) * 4 + HEADER)  # 2 gateways


def hierarchical_methods() -> list[str]:
    from iotfl_sim import methods

    return [m.name for m in methods.registered() if "hierarchical" in m.config.modes]


@pytest.mark.parametrize("name", hierarchical_methods())
def test_every_method_declared_hierarchical_runs_cloud_rounds_over_two_gateways(name):
    """Each "yes" cell of the hierarchical column (docs/methods_and_modes.md) run: 2 cloud rounds, system-only, over
    gateways of 4 devices, each gateway's model up and the cloud's down its backhaul every cloud round."""
    from test_resume import METHODS  # each method's smallest setting (ScaleFL needs a family with exits)

    sim = simulate(gatewayed(base_scenario(numerics="none", **copy.deepcopy(METHODS[name])), per_gateway=4))
    assert [r["round"] for r in sim.rows] == [1, 2] and all(r["completed"] > 0 for r in sim.rows)
    model_bytes = sim.loop.model_params * 4.0 + HEADER
    gateways = len(sim.loop.nodes)  # a copy per 4 devices of the method's fleet: 2 or more
    assert gateways >= 2
    assert sim.rows[-1]["bytes_backhaul_up"] == sim.rows[-1]["bytes_backhaul_down"] == 2 * gateways * model_bytes


def test_a_method_counts_the_gateway_rounds_it_sees_as_its_rounds():
    """Under a hierarchy every gateway round is one of the method's rounds (keyed cloud round x k2 + j): its context's
    ``rounds`` is rounds x k2, so a schedule over the run's rounds (ScaleFL's exit-KD start) spans all of them."""
    from test_resume import METHODS

    scalefl = copy.deepcopy(METHODS["scalefl"])
    flat = simulation_of(base_scenario(numerics="none", rounds=3, **scalefl))
    tiered = simulation_of(gatewayed(base_scenario(numerics="none", rounds=3, **scalefl), gateway_rounds=2))
    assert flat.strategy.c.rounds == 3 and tiered.strategy.c.rounds == 6


def test_adaptivefl_tables_learn_from_every_gateway_round_of_every_gateway_in_simulated_time_order(
    monkeypatch, tmp_path, write_scenario
):
    """AdaptiveFL's RL tables hold a row per device (Algorithm 1) and a gateway selects and observes only its own
    devices, so each gateway round is one of Algorithm 1's rounds at that gateway. By hand from events.jsonl, where
    every model is kept whole (memory never binds here): pool S2, S1, M2, M1, L1 (cnn_small, p = 2), levels S S M M
    L; a model m kept whole adds 2 to T_c[level(m)] and 1 to T_r[m..L1], then p - 1 = 1 more to T_r[L1]. A
    gateway's selection at round key j sees its devices' outcomes of every key before j (the tables learn every
    gateway round, not every cloud round), the run's end every gateway's, and ``history`` has one entry a gateway
    round in the order the gateways aggregated on the clock: gateways of 5 and 3 devices send 4 and 3 models, and
    the small gw[1] ends both its rounds before gw[0] ends its first."""
    from iotfl_sim.algorithms import adaptivefl

    data = gatewayed(base_scenario(numerics="none", algorithm={"name": "adaptivefl"}), per_gateway=5, gateway_rounds=2)
    seen, held = [], []
    select = adaptivefl.AdaptiveFL.select

    def spy(self, rnd, fleet, rng):
        held[:] = [self]
        seen.append((rnd, fleet.members.copy(), self.tc.copy(), self.tr.copy()))
        return select(self, rnd, fleet, rng)

    monkeypatch.setattr(adaptivefl.AdaptiveFL, "select", spy)
    assert main(["run", str(write_scenario(data)), "--out", str(tmp_path), "--quiet"]) == 0
    events = [json.loads(line) for line in (only_run(tmp_path) / "events.jsonl").read_text().splitlines()]
    sent = {(e["round"], e["device"]): e["level"] for e in events if e["event"] == "dispatch"}
    trained = {(e["round"], e["device"]): e["level"] for e in events if e["event"] == "train_start"}
    accepted = [(e["round"], e["device"]) for e in events if e["event"] == "accepted"]
    assert accepted and all(trained[t] == sent[t] for t in accepted)  # kept whole
    pool, level = ["S2", "S1", "M2", "M1", "L1"], {"S": 0, "M": 1, "L": 2}

    def tables(tasks: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
        tc, tr = np.ones((8, 3)), np.ones((8, 5))
        for t in tasks:
            d, m = t[1], pool.index(sent[t])
            tc[d, level[sent[t][0]]] += 2
            tr[d, m:] += 1
            tr[d, 4] += 1
        return tc, tr

    assert sorted({(key, tuple(np.flatnonzero(m))) for key, m, _, _ in seen}) == [
        (key, gw) for key in range(4) for gw in [(0, 1, 2, 3, 4), (5, 6, 7)]
    ]
    for key, members, tc, tr in seen:
        want_c, want_r = tables([t for t in accepted if t[0] < key])
        assert np.array_equal(tc[members], want_c[members]) and np.array_equal(tr[members], want_r[members]), key
    assert any(key > 0 and (tr[m] != 1).any() for key, m, _, tr in seen)  # a gateway selected from learnt rows
    (strategy,) = held
    want_c, want_r = tables(accepted)
    assert np.array_equal(strategy.tc, want_c) and np.array_equal(strategy.tr, want_r)
    order = [(e["round"], e["gateway"]) for e in events if e["event"] == "gateway_aggregate"]
    assert [g for _, g in order[:4]] == ["gw[1]", "gw[1]", "gw[0]", "gw[0]"]

    def count(tasks, rnd: int, gw: str) -> int:
        return sum(t[0] == rnd and f"gw[{t[1] // 5}]" == gw for t in tasks)

    assert strategy.history == [
        {"sent": count(sent, r, g), "whole": count(accepted, r, g), "pruned": 0, "refused": 0} for r, g in order
    ]
    assert [h["sent"] for h in strategy.history[:4]] == [3, 3, 4, 4]


def test_k1_trains_k1_times_the_local_epochs_in_one_task():
    """k1 = 3 with one epoch a task is, in every public figure, the run with three local epochs a task: the same
    losses and accuracy (one task trains the three epochs with one optimizer), the same compute energy, the same
    bytes (one download and one upload a task, not three); and three times the compute energy of k1 = 1 (no
    jitter: training time is FLOPs over the device's rate, energy its train power times that)."""

    def scenario(epochs: int) -> dict:
        data = base_scenario(rounds=1, clients_per_round=3, local={"epochs": epochs, "batch_size": 16, "lr": 0.05})
        data["server"] = {"bn_calibration_samples": 64}
        return data

    flat3 = scenario(3)
    flat3["fleet"]["gateways"] = [{"name": "gw", "down_mbps": 50.0, "up_mbps": 20.0}]
    for g in flat3["fleet"]["groups"]:
        g["network"] = {"gateway": "gw"}  # the same shared links as the hierarchical runs' devices
    three, flat, one = (simulate(d).rows[0] for d in (gatewayed(scenario(1), device_rounds=3), flat3, gatewayed(scenario(1))))
    for col in ("train_loss", "acc_full", "completed", "bytes_down", "bytes_up", "energy_compute_j"):
        assert three[col] == flat[col], col
    assert three["energy_compute_j"] == pytest.approx(3 * one["energy_compute_j"], rel=1e-12)
    assert three["train_loss"] != one["train_loss"]


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda d: d["fleet"]["groups"][1]["network"].pop("gateway"), "fleet.groups[1] (big) has no network.gateway"),
        (lambda d: d.update(algorithm={"name": "feddf"}), "method feddf cannot run hierarchically"),
    ],
)
def test_a_scenario_the_hierarchy_cannot_run_is_refused_in_one_line(tmp_path, write_scenario, capsys, change, words):
    data = gatewayed(base_scenario(numerics="none"))
    change(data)
    assert main(["validate", str(write_scenario(data))]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and "hierarchy" in err and len(err.splitlines()) == 1, err


def test_quantized_downloads_over_several_gateways_each_carry_the_devices_own_gateways_model(monkeypatch):
    """Two gateway copies (4 devices each), 8-bit QSGD downloads: each gateway encodes with a wire of its own, so a
    device receives its own gateway's model quantized (the tier the method holds while the gateway trains), never
    another gateway's or the unquantized model. By hand: s = 2^8 intervals of each 128-value group's norm, so every
    value is within norm / 256 of the gateway's (norm <= the tensor's), and lies on that group's grid of levels."""
    from iotfl_sim.sim.learning import Learning

    data = gatewayed(base_scenario(rounds=2, clients_per_round=2, algorithm={"name": "fedavg", "download_bits": 8, "qsgd_bucket": 128}), per_gateway=4)
    seen = []
    download = Learning.download

    def spy(self, a):
        sent = download(self, a)
        seen.append((a.device, {k: v.clone() for k, v in self.strategy.state.items()}, sent))
        return sent

    monkeypatch.setattr(Learning, "download", spy)
    sim = simulate(data)
    assert sim.status.stalled is None
    assert {d // 4 for d, _, _ in seen} == {0, 1}  # both gateways' devices trained
    for _, model, sent in seen:
        assert any(not torch.equal(sent[k], model[k]) for k in model)  # quantized, not the float32 model
        for k, v in model.items():
            if not v.is_floating_point():
                continue
            groups = v.flatten().split(128)
            for g, q in zip(groups, sent[k].flatten().split(128), strict=True):
                step = float(g.norm()) / 256
                assert float((q - g).abs().max()) <= step * (1 + 1e-5) + 1e-12
                levels = (q.abs() / step).double() if step > 0 else q.abs().double()
                assert float((levels - levels.round()).abs().max()) < 1e-3


@pytest.mark.parametrize("method", ["fedavg", "adaptivefl"])
def test_a_stopped_hierarchical_run_resumes_to_the_same_files(tmp_path, write_scenario, monkeypatch, method):
    """AdaptiveFL: its RL tables, which every gateway round updates, resume from the cloud round's checkpoint."""
    from test_resume import METHODS

    data = gatewayed(base_scenario(rounds=2, clients_per_round=2, **copy.deepcopy(METHODS[method])), per_gateway=4, gateway_rounds=2)
    data["server"] = {"bn_calibration_samples": 64}
    data["output"] = {"progress": False, "checkpoint": {"every_rounds": 1, "every_s": None}}
    path = write_scenario(data)
    assert main(["run", str(path), "--out", str(tmp_path / "whole"), "--quiet"]) == 0
    checkpoint = engine.Simulation.checkpoint  # stop at the first (after round 1), as a first Ctrl-C would
    monkeypatch.setattr(engine.Simulation, "checkpoint", lambda sim, done: (checkpoint(sim, done), setattr(sim, "stop_requested", True)))
    assert main(["run", str(path), "--out", str(tmp_path / "cut"), "--quiet"]) == 130
    monkeypatch.setattr(engine.Simulation, "checkpoint", checkpoint)
    cut = only_run(tmp_path / "cut")
    assert len(rows(cut)) == 1
    assert main(["run", "--resume", str(cut), "--quiet"]) == 0
    whole = only_run(tmp_path / "whole")
    strip = {"host_train_s", "host_eval_s", "host_aggregate_s", "host_other_s"}
    assert [{k: v for k, v in r.items() if k not in strip} for r in rows(whole)] == [
        {k: v for k, v in r.items() if k not in strip} for r in rows(cut)
    ]
    assert (whole / "events.jsonl").read_text() == (cut / "events.jsonl").read_text()
    assert (whole / "devices.csv").read_text() == (cut / "devices.csv").read_text()
