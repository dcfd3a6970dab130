"""HeteroFL-IoT: the per-round proportional selection among nodes with energy, and a tiny end-to-end run."""

from __future__ import annotations

import copy
import json
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import TINY, base_scenario, strategy_context

from iotfl_sim.algorithms import REGISTRY
from iotfl_sim.algorithms.base import Assignment, Outcome, Update
from iotfl_sim.algorithms.heterofl import HeteroFL
from iotfl_sim.algorithms.heterofl_iot import HeteroFLIoT, fill_quotas, level_quotas
from iotfl_sim.cli import main
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.scenario.algorithms import HeteroFLIoTConfig

ROOT = Path(__file__).resolve().parents[1]


class FakeTrueState:
    def __init__(self, alive: np.ndarray) -> None:
        self.alive = alive

    def alive_mask(self, t: float, devices: np.ndarray | None = None) -> np.ndarray:
        return self.alive.copy() if devices is None else self.alive[devices]


class FakeView:
    """A FleetView over n devices: ``alive`` is the true energy state, ``gone`` what the server learned
    from failed tasks."""

    def __init__(self, n: int) -> None:
        self.num_devices = n
        self.alive = np.ones(n, dtype=bool)
        self.gone = np.zeros(n, dtype=bool)
        self.now = 0.0
        self.oracle_users: set[str] = set()

    def selectable_mask(self) -> np.ndarray:
        return ~self.gone

    def selectable(self) -> np.ndarray:
        return np.flatnonzero(self.selectable_mask())

    def declared_free_memory(self) -> np.ndarray:
        return np.full(self.num_devices, 1e12)

    def true_state(self, strategy: str) -> FakeTrueState:
        self.oracle_users.add(strategy)
        return FakeTrueState(self.alive)


def make_strategy(n: int = 100, k: int = 10, **cfg) -> HeteroFLIoT:
    recipe = ModelRecipe("cnn_small", 10, 1, (8, 8))
    ctx = strategy_context(recipe, n, k)
    s = HeteroFLIoT(HeteroFLIoTConfig(name="heterofl_iot", **cfg))
    s.setup(ctx)
    return s


def mix(assignments) -> Counter:
    return Counter(a.level for a in assignments)


def test_registered_and_aggregates_as_heterofl_by_hand():
    assert REGISTRY["heterofl_iot"] is HeteroFLIoT
    assert issubclass(HeteroFLIoT, HeteroFL)
    # HeteroFL's aggregation on hand-made tensors: every entry averaged, unweighted, over the clients
    # whose (nested, prefix) submodel holds it; a classifier row only over the clients holding that label.
    s = make_strategy(n=4, k=2)
    s.state = {"w": torch.zeros(4), "cls": torch.zeros(3, 2)}
    s.classifier = ("cls",)
    full = Update(Assignment(0, s.specs["a"], level="a"), {"w": torch.full((4,), 4.0),
                  "cls": torch.tensor([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]])}, 10, np.array([0, 1]), 0.0)  # fmt: skip
    half = Update(Assignment(1, s.specs["b"], level="b"), {"w": torch.full((2,), 2.0),
                  "cls": torch.tensor([[5.0], [6.0], [7.0]])}, 30, np.array([1, 2]), 0.0)  # fmt: skip
    s.aggregate(0, [full, half])
    assert s.state["w"].tolist() == [3.0, 3.0, 4.0, 4.0]  # (4 + 2) / 2 where both hold it: counts, not 10 vs 30
    # row 0: label 0 only on the full client; row 1: both, column 1 only the full one; row 2: label 2 only
    # on the half client, and its column 1 nobody trained: kept at 0
    assert s.state["cls"].tolist() == [[1.0, 1.0], [4.0, 2.0], [7.0, 0.0]]


def test_quotas_follow_the_paper():
    # Algorithm 1: L_t = max(L_p x 10, 1), shares summing to 10
    assert level_quotas(np.array([0.2, 0.8]), 10).tolist() == [2, 8]
    assert level_quotas(np.array([0.2, 0.4, 0.4]), 10).tolist() == [2, 4, 4]
    assert level_quotas(np.full(5, 0.2), 10).tolist() == [2, 2, 2, 2, 2]
    assert level_quotas(np.array([0.02, 0.98]), 10).tolist() == [1, 9]  # at least one of each level
    assert level_quotas(np.array([0.2, 0.8]), 7).sum() == 7
    # a level short of live nodes: fill gives its slots to the others, leave keeps them empty
    assert fill_quotas(np.array([2, 8]), np.array([1, 80]), np.array([0.2, 0.8]), True).tolist() == [1, 9]
    assert fill_quotas(np.array([2, 8]), np.array([1, 80]), np.array([0.2, 0.8]), False).tolist() == [1, 8]
    assert fill_quotas(
        np.array([2, 4, 4]), np.array([0, 1, 50]), np.array([0.2, 0.4, 0.4]), True
    ).tolist() == [0, 1, 9]


@pytest.mark.parametrize(
    "props,expect", [("a2-b8", {"a": 2, "b": 8}), ("a2-b4-c4", {"a": 2, "b": 4, "c": 4})]
)
def test_every_round_has_the_configured_mix(props, expect):
    s = make_strategy(proportions=props)
    view = FakeView(100)
    for rnd in range(50):
        out = s.select(rnd, view, np.random.default_rng(rnd))
        assert dict(mix(out)) == expect
        assert len({a.device for a in out}) == 10
        for a in out:  # a node trains its fixed level
            assert a.level == s.levels[s.fixed[a.device]]
    assert view.oracle_users == {"heterofl_iot"}


def test_random_selection_varies_the_mix():
    s = make_strategy(proportions="a2-b8", selection="random")
    view = FakeView(100)
    counts = {mix(s.select(r, view, np.random.default_rng(r)))["a"] for r in range(50)}
    assert len(counts) > 1  # HeteroFL's uniform draw: 1:9, 3:7 ... (the paper's Fig. 2)


@pytest.mark.parametrize("selection", ["proportional", "random"])
def test_budget_run_keeps_the_mix_among_nodes_with_energy(selection):
    """Nodes spend a per-level cost per task and die when their budget is gone; the server never picks a
    dead node, and (proportional) each level gets min(quota, live nodes), the rest going to the others."""
    s = make_strategy(proportions="a2-b8", selection=selection)
    view = FakeView(100)
    budget = np.full(100, 10.0)
    cost = {"a": 4.0, "b": 1.0}
    level_of = np.array([s.levels[i] for i in s.fixed])
    for rnd in range(80):
        live = {x: int((view.alive & (level_of == x)).sum()) for x in ("a", "b")}
        out = s.select(rnd, view, np.random.default_rng(rnd))
        assert all(view.alive[a.device] for a in out), "a dead node was selected"
        m = mix(out)
        if selection == "proportional":
            want_a = min(2, live["a"])
            assert m["a"] == want_a and m["b"] == min(10 - want_a, live["b"])
        for a in out:
            budget[a.device] -= cost[a.level]
            if budget[a.device] <= 0:
                view.alive[a.device] = False
    if selection == "proportional":  # 20 a-nodes x 3 tasks at 2 a round: all spent by round 30
        assert not view.alive[level_of == "a"].any()
    assert view.alive[level_of == "b"].any()


def test_outcomes_mode_uses_no_oracle():
    s = make_strategy(proportions="a2-b8", energy_info="outcomes")
    view = FakeView(100)
    view.gone[:15] = True  # 15 of the 20 a-nodes failed as depleted earlier
    out = s.select(0, view, np.random.default_rng(0))
    assert view.oracle_users == set()
    assert not any(a.device < 15 for a in out)
    assert dict(mix(out)) == {"a": 2, "b": 8}


def test_clock_from_outcomes_without_view_now():
    s = make_strategy(proportions="a2-b8")
    a = s.select(0, FakeView(100), np.random.default_rng(0))[0]
    s.observe(0, [Outcome(a, "completed", finished_at=12.5), Outcome(a, "deadline")])
    view = FakeView(100)
    del view.now
    assert s.now(view) == 12.5


def test_dynamic_by_capacity_proportional_is_rejected():
    with pytest.raises(ValueError, match="by_id"):
        HeteroFLIoTConfig(name="heterofl_iot", mode="dynamic", assign="by_capacity")


def test_dynamic_mode_hands_out_exact_quotas():
    s = make_strategy(proportions="a2-b4-c4", mode="dynamic")
    out = s.select(0, FakeView(100), np.random.default_rng(1))
    assert dict(mix(out)) == {"a": 2, "b": 4, "c": 4}


def test_tiny_end_to_end_run(tmp_path, write_scenario):
    """20 battery nodes on digits, a2-b8, 5 per round: a level-a task costs more than an a-node's budget,
    so every a-node picked runs dry; it is never picked again and the mix holds while a-nodes last."""
    node = copy.deepcopy(TINY)
    node["power"]["idle_w"] = 0.0
    node["battery"]["capacity_j"] = 3.0
    data = base_scenario(
        rounds=3,
        clients_per_round=5,
        fleet={"groups": [{"name": "node", "count": 20, "profile": node}]},
        algorithm={"name": "heterofl_iot", "proportions": "a2-b8"},
        model={"family": "cnn_small"},
        server={"eval_every": 3, "bn_calibration_samples": 200},
    )
    out = tmp_path / "runs"
    assert main(["run", str(write_scenario(data)), "--out", str(out), "--quiet"]) == 0
    (path,) = list(out.iterdir())
    summary = json.loads((path / "summary.json").read_text())
    assert summary["rounds"] == 3 and summary["oracle_knowledge"] == ["heterofl_iot"]
    assert 0.0 < summary["final_accuracy"]["acc_full"] <= 1.0
    events = [json.loads(x) for x in open(path / "events.jsonl")]
    dead: set[int] = set()
    per_round: dict[int, Counter] = defaultdict(Counter)
    for e in sorted(events, key=lambda e: (e["round"], e["t"])):
        if e["event"] == "dispatch":
            assert e["device"] not in dead, "a node known to have run dry was selected"
            per_round[e["round"]][e["level"]] += 1
        elif e["event"] == "depleted":
            dead.add(e["device"])
    picked_a = {e["device"] for e in events if e["event"] == "dispatch" and e["level"] == "a"}
    assert picked_a and picked_a <= dead, "every a-node picked should run dry on its task"
    # 4 a-nodes (ids 0-3), each picked once at most: 1 per round while they last, the rest level b
    for rnd, m in per_round.items():
        assert m["a"] + m["b"] == 5 and m["a"] == 1, (rnd, m)
