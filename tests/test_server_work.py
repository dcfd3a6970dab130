"""Server work on the simulated clock, the communication-waste rate, and the proxy set held out for the server."""

from __future__ import annotations

import numpy as np
import pytest
import yaml
from conftest import base_scenario
from test_engine import expected_task_time

from iotfl_sim import methods
from iotfl_sim.algorithms.base import Assignment, DeviceState, ServerWork
from iotfl_sim.algorithms.fedavg import FedAvg
from iotfl_sim.fl.submodel import SubmodelSpec
from iotfl_sim.scenario.algorithms import FedAvgConfig
from iotfl_sim.scenario.loader import load_scenario, resolve_groups
from iotfl_sim.scenario.resolved import ResolvedScenario
from iotfl_sim.sim.engine import Simulation
from iotfl_sim.sim.setup import build_simulation, split_proxy


class _Charging(FedAvg):
    """FedAvg that charges 2e12 FLOPs of set-up work and 5e11 after each aggregation."""

    def setup(self, ctx) -> None:
        super().setup(ctx)
        ctx.server_work.charge("pretrain", 2e12)

    def aggregate(self, rnd, updates) -> None:
        super().aggregate(rnd, updates)
        self.c.server_work.charge("distill", 5e11)


class _Halving(FedAvg):
    """FedAvg whose devices train a half-width model (models come back smaller than sent)."""

    def adapt(self, assignment: Assignment, device: DeviceState) -> Assignment | None:
        return Assignment(assignment.device, SubmodelSpec(0.5), level="half")


def _sim(monkeypatch, cls, numerics: str = "none", **over) -> Simulation:
    monkeypatch.setitem(methods._METHODS, "fedavg", methods.Method("fedavg", FedAvgConfig, cls))
    data = base_scenario(numerics=numerics, rounds=2, clients_per_round=8, **over)
    sc = load_scenario(text=yaml.safe_dump(data))
    return build_simulation(ResolvedScenario(sc, resolve_groups(sc)))


def test_server_work_is_simulated_time_before_dispatch_and_after_aggregation(monkeypatch):
    flop_rule = {"compute": {"flops": 1e11, "power_w": 100.0}}
    base = _sim(monkeypatch, FedAvg, server=flop_rule)
    base.run()
    sim = _sim(monkeypatch, _Charging, server=flop_rule)
    sim.run()
    # numerics none: the strategy's aggregate is not called, so of its own work only the set-up is charged (20 s);
    # the engine prices every round's aggregation, under the FLOP rule 1 FLOP per received value
    params = sum(t.numel() for t in sim.recipe.build(SubmodelSpec(1.0)).state_dict().values())
    aggregation = sim.rows[1]["completed"] * params / 1e11
    assert sim.rows[1]["server_aggregate_s"] == pytest.approx(aggregation)
    assert sim.rows[0]["server_time_s"] == pytest.approx(20.0 + sim.rows[0]["completed"] * params / 1e11)
    assert sim.rows[0]["server_other_s"] == pytest.approx(20.0)
    assert sim.rows[1]["server_time_s"] == pytest.approx(aggregation)
    assert sim.rows[0]["round_time_s"] == pytest.approx(base.rows[0]["round_time_s"] + 20.0)
    assert sim.rows[1]["sim_time_s"] == pytest.approx(base.rows[1]["sim_time_s"] + 20.0)
    assert sim.rows[1]["server_energy_j"] == pytest.approx(100.0 * (20.0 + 2 * aggregation))


def test_server_work_after_aggregation_with_training(monkeypatch):
    sim = _sim(monkeypatch, _Charging, numerics="torch", server={"compute": {"flops": 1e11}})
    sim.run()
    agg = [r["server_aggregate_s"] for r in sim.rows]
    assert agg[0] > 0
    assert sim.rows[0]["server_time_s"] == pytest.approx(20.0 + 5.0 + agg[0])
    assert sim.rows[1]["server_time_s"] == pytest.approx(5.0 + agg[1])


def test_server_work_rejects_negative_flops():
    with pytest.raises(ValueError, match="non-negative"):
        ServerWork().charge("x", -1.0)
    with pytest.raises(ValueError):
        ServerWork().charge("x", float("nan"))


def test_comm_waste_counts_the_size_pruned_away_on_the_device(monkeypatch):
    sim = _sim(monkeypatch, _Halving)
    sim.run()
    recipe = sim.recipe
    full = recipe.cost(SubmodelSpec(1.0)).params
    half = recipe.cost(SubmodelSpec(0.5)).params
    row = sim.rows[0]
    assert row["completed"] == 8
    assert row["comm_waste"] == pytest.approx(1 - half / full)
    assert row["comm_waste_cum"] == pytest.approx(1 - half / full)
    plain = _sim(monkeypatch, FedAvg)
    plain.run()
    assert plain.rows[0]["comm_waste"] == 0.0


def test_comm_waste_counts_failed_tasks_as_wasted(monkeypatch):
    # a deadline that cuts the 4 slow devices: half of the (equal-size) models come back
    g = base_scenario()["fleet"]["groups"]
    fast = expected_task_time(g[1]["profile"], 1437 // 8, 1)
    slow = expected_task_time(g[0]["profile"], 1437 // 8, 1)
    sim = _sim(monkeypatch, FedAvg, server={"deadline_s": (fast + slow) / 2})
    sim.run()
    assert sim.rows[0]["completed"] == 4
    assert sim.rows[0]["comm_waste"] == pytest.approx(0.5)


def test_split_proxy_is_disjoint_seeded_and_sized():
    proxy, clients = split_proxy(1000, 0.01, seed=4)
    assert len(proxy) == 10 and len(clients) == 990
    assert not np.intersect1d(proxy, clients).size
    assert np.array_equal(np.sort(np.concatenate([proxy, clients])), np.arange(1000))
    again, _ = split_proxy(1000, 0.01, seed=4)
    assert np.array_equal(proxy, again)
    none, everything = split_proxy(50, 0.0, seed=4)
    assert none is None and len(everything) == 50
