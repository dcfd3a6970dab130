"""The server's work priced by its profile (``sim/server_cost.py``): hand computations and the device equivalence."""

from __future__ import annotations

import copy

import pytest
import yaml
from conftest import BIG, base_scenario

from iotfl_sim.algorithms.base import AggregateWork, InferWork, QsgdWork, ServerWork, TrainWork
from iotfl_sim.cli import main
from iotfl_sim.core.errors import ScenarioError
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec
from iotfl_sim.scenario.loader import load_scenario, resolve_groups
from iotfl_sim.scenario.profile import DeviceProfile
from iotfl_sim.scenario.resolved import ResolvedScenario
from iotfl_sim.sim.server_cost import ServerCost
from iotfl_sim.sim.setup import build_simulation

SERVER = {
    **copy.deepcopy(BIG),
    "name": "toy_server",
    "device_class": "server",
    "compute": {"flops": 1.0e12, "mem_bw_gbs": 100.0, "op_overhead_us": 5.0, "jitter": {"dist": "none"}},
    "power": {"idle_w": 50.0, "train_w": 200.0, "tx_w": 0.0, "rx_w": 0.0},
    "server_work": {
        "aggregate_gbs": 2.0,
        "aggregate_tensor_us": 10.0,
        "qsgd_encode_values_per_s": 4.0e6,
        "qsgd_encode_tensor_us": 100.0,
        "qsgd_decode_values_per_s": 1.0e8,
        "qsgd_decode_tensor_us": 20.0,
    },
}
# The MLP on 8x8 digits without norm layers: 64 -> 200 -> 200 -> 10, weights and biases.
MLP = ModelRecipe("mlp", 10, 1, (8, 8), norm="none")
MLP_PARAMS = 64 * 200 + 200 + 200 * 200 + 200 + 200 * 10 + 10  # 55,210
MLP_TENSORS = 6


def _cost(**over) -> ServerCost:
    return ServerCost(DeviceProfile.model_validate({**SERVER, **over}))


def test_the_mlp_is_what_the_hand_counts_say():
    state = MLP.build(SubmodelSpec(1.0)).state_dict()
    assert len(state) == MLP_TENSORS and sum(t.numel() for t in state.values()) == MLP_PARAMS


def test_aggregation_of_a_toy_model_by_hand():
    # 8 clients send the whole MLP: 8 x 55,210 values read and 55,210 written, 4 bytes each, at 2 GB/s,
    # plus 10 us for each of the 8 x 6 tensors received
    p = _cost().price(AggregateWork(8 * MLP_PARAMS, MLP_PARAMS, 8 * MLP_TENSORS))
    assert p.kind == "aggregate"
    assert p.seconds == pytest.approx(4 * 9 * 55_210 / 2e9 + 48 * 10e-6)


def test_qsgd_encode_and_decode_cost_from_the_profile_rates():
    enc = _cost().price(QsgdWork(1_000_000, 4))
    assert enc.kind == "qsgd" and enc.seconds == pytest.approx(1_000_000 / 4e6 + 4 * 100e-6)
    dec = _cost().price(QsgdWork(1_000_000, 4, decode=True))
    assert dec.seconds == pytest.approx(1_000_000 / 1e8 + 4 * 20e-6)


def test_inference_of_the_mlp_by_hand_when_compute_bound():
    # per sample: 2 x (64x200 + 200x200 + 200x10) FLOPs in the three addmm, 200 + 200 for the two ReLUs;
    # memory and overhead made negligible, 1e12 FLOP/s
    per_sample = 2 * (64 * 200 + 200 * 200 + 200 * 10) + 400
    cost = _cost(compute={"flops": 1.0e12, "mem_bw_gbs": 1.0e9, "op_overhead_us": 0.0, "jitter": {"dist": "none"}})
    p = cost.price(InferWork(MLP, SubmodelSpec(1.0), samples=250, batch=100))
    assert p.kind == "infer"
    assert p.flops == pytest.approx(250 * per_sample)
    assert p.seconds == pytest.approx(250 * per_sample / 1e12)


def test_plain_flops_run_at_the_compute_rate():
    p = _cost().price(3.0e12)
    assert p.kind == "other" and p.seconds == pytest.approx(3.0)


def test_the_flop_rule_keeps_the_old_counts():
    cost = ServerCost(None, flops=1e10, power_w=10.0)
    fwd = MLP.cost(SubmodelSpec(1.0)).flops_forward_per_sample
    assert cost.price(TrainWork(MLP, SubmodelSpec(1.0), samples=100, epochs=2)).seconds == pytest.approx(3 * fwd * 200 / 1e10)
    assert cost.price(AggregateWork(1e6, 1e5, 10)).seconds == pytest.approx(1e6 / 1e10)
    assert cost.price(QsgdWork(1e6, 3)).seconds == pytest.approx(10 * 1e6 / 1e10)


def test_a_server_training_step_costs_what_the_same_step_costs_a_device_with_the_same_numbers():
    device = {**copy.deepcopy(SERVER), "name": "same_as_server"}
    data = base_scenario(
        numerics="none",
        rounds=1,
        clients_per_round=1,
        fleet={"groups": [{"name": "twin", "count": 1, "profile": device}]},
        model={"family": "mlp", "norm": "none"},
        local={"epochs": 2, "batch_size": 16, "lr": 0.05, "momentum": 0.9, "weight_decay": 0.0, "clip_grad_norm": None},
        server={"profile": copy.deepcopy(SERVER)},
    )
    sc = load_scenario(text=yaml.safe_dump(data))
    sim = build_simulation(ResolvedScenario(sc, resolve_groups(sc)))
    spec = SubmodelSpec(1.0)
    samples = int(sim.numerics.samples_per_device[0])
    flops, device_seconds = sim.system.training_time.task_cost(sim.recipe, spec, 0, 0)
    server = sim.system.server_cost.price(TrainWork(sim.recipe, spec, samples, epochs=2, batch=16, momentum=0.9))
    assert server.seconds == device_seconds
    assert server.flops == flops


def _scenario(tmp_path, server: dict) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(base_scenario(numerics="none", server=server)))
    return str(path)


def test_server_profile_by_path_relative_to_the_scenario(tmp_path):
    (tmp_path / "srv.yaml").write_text(yaml.safe_dump(SERVER))
    sc = load_scenario(_scenario(tmp_path, {"profile": "./srv.yaml"}))
    assert sc.server.profile["name"] == "toy_server"
    assert ServerCost.of(sc.server).power_w == 200.0


def test_default_server_is_the_bundled_gpu_server_and_the_flop_rule_is_opt_in(tmp_path):
    sc = load_scenario(_scenario(tmp_path, {}))
    assert sc.server.profile["name"] == "gpu_server_titan_xp" and sc.server.compute is None
    old = load_scenario(_scenario(tmp_path, {"compute": {"flops": 1e12}}))
    assert old.server.profile is None and ServerCost.of(old.server).flops == 1e12


def test_profile_and_compute_together_are_refused(tmp_path):
    with pytest.raises(ScenarioError, match="server.profile or server.compute, not both"):
        load_scenario(_scenario(tmp_path, {"profile": "gpu_server_titan_xp", "compute": {"flops": 1e12}}))


def test_a_profile_without_server_work_is_refused_naming_the_fix(tmp_path):
    with pytest.raises(ScenarioError, match="no server_work section.*profiles measure --server"):
        load_scenario(_scenario(tmp_path, {"profile": "raspberry_pi_4b"}))


def test_validate_warns_about_the_flop_rule(tmp_path, capsys):
    assert main(["validate", _scenario(tmp_path, {"compute": {"flops": 1e13}})]) == 0
    err = capsys.readouterr().err
    assert "server.compute: server work is priced by the old FLOP rule" in err
    assert main(["validate", _scenario(tmp_path, {})]) == 0
    assert "FLOP rule" not in capsys.readouterr().err


def test_charge_accepts_typed_work_and_non_negative_flops_only():
    w = ServerWork()
    w.charge("a", AggregateWork(1.0, 1.0))
    w.charge("b", 5)
    assert [k for k, _ in w.drain()] == ["a", "b"]
    for bad in (-1.0, float("nan"), True, "3"):
        with pytest.raises(ValueError):
            w.charge("x", bad)


def test_rounds_split_server_time_by_kind_and_the_summary_adds_them_up(tmp_path):
    from iotfl_sim.sim.summary import summarize

    data = base_scenario(numerics="none", rounds=2, clients_per_round=4, server={"profile": copy.deepcopy(SERVER)})
    sc = load_scenario(text=yaml.safe_dump(data))
    sim = build_simulation(ResolvedScenario(sc, resolve_groups(sc)))
    sim.run()
    for row in sim.rows:
        split = sum(row[f"server_{k}_s"] for k in ("train", "infer", "aggregate", "qsgd", "other"))
        assert row["server_time_s"] == pytest.approx(split)
        assert row["server_aggregate_s"] > 0  # fedavg has no work of its own: the engine's aggregation only
    by_kind = summarize(sim.run_figures(), 1.0)["server_time_by_kind_s"]
    assert by_kind["aggregate"] == pytest.approx(sum(r["server_aggregate_s"] for r in sim.rows))
    assert by_kind["train"] == 0.0
