"""HeteroFL-IoT: the per-round proportional selection among nodes with energy, and a tiny end-to-end run."""

from __future__ import annotations

import copy
import csv
import json
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import TINY, base_scenario, strategy_context
from fake_view import MaskOnlyView

from iotfl_sim import methods
from iotfl_sim.algorithms.base import Assignment, Update
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


class FakeView(MaskOnlyView):
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
    assert methods.method("heterofl_iot").strategy_class() is HeteroFLIoT
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


def test_dynamic_by_capacity_proportional_is_rejected():
    with pytest.raises(ValueError, match="by_id"):
        HeteroFLIoTConfig(name="heterofl_iot", mode="dynamic", assign="by_capacity")


def test_dynamic_mode_hands_out_exact_quotas():
    s = make_strategy(proportions="a2-b4-c4", mode="dynamic")
    out = s.select(0, FakeView(100), np.random.default_rng(1))
    assert dict(mix(out)) == {"a": 2, "b": 4, "c": 4}


def battery_scenario(capacity_j: float, **over) -> dict:
    """20 battery nodes (the TINY profile, no idle draw, ``capacity_j`` each) on digits, cnn_small, 5 per round."""
    node = copy.deepcopy(TINY)
    node["power"]["idle_w"] = 0.0
    node["battery"]["capacity_j"] = capacity_j
    fleet = {"groups": [{"name": "node", "count": 20, "profile": node}]}
    return base_scenario(clients_per_round=5, fleet=fleet, model={"family": "cnn_small"}, **over)


def test_tiny_end_to_end_run(tmp_path, write_scenario):
    """20 battery nodes on digits, a2-b8, 5 per round: a level-a task costs more than an a-node's budget,
    so every a-node picked runs dry; it is never picked again and the mix holds while a-nodes last."""
    data = battery_scenario(
        3.0, rounds=3, algorithm={"name": "heterofl_iot", "proportions": "a2-b8"},
        server={"eval_every": 3, "bn_calibration_samples": 200},
    )  # fmt: skip
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


# ---------------------------------------------------------------- selection: paced (budget pacing)


def test_affordable_tasks_and_paced_caps_by_hand():
    from iotfl_sim.algorithms.heterofl_iot import affordable_tasks, paced_caps

    # level a: three nodes with 4, 4 and 1 J left at 1.5 J a task -> 2 + 2 + 0 = 4 whole tasks;
    # level b: five nodes with 3 J left at 0.5 J a task -> 6 each, 30 in all; mains power: unlimited
    assert affordable_tasks(np.array([4.0, 4.0, 1.0]), 1.5).tolist() == [2, 2, 0]
    assert affordable_tasks(np.full(5, 3.0), 0.5).sum() == 30
    assert affordable_tasks(np.array([np.inf]), 0.5).tolist() == [np.inf]
    # 3 rounds left, carries 0.5 and 0: x_a = 4/3 + 0.5 = 1.833 -> cap 1, carry 0.833; x_b = 30/3 = 10 -> 10,
    # capped by k = 8, carry 0; an unknown budget (nan: no task energy measured yet) -> k, carry 0
    caps, carry = paced_caps(np.array([4.0, 30.0, np.nan]), 3, np.array([0.5, 0.0, 0.7]), 8)
    assert caps.tolist() == [1, 8, 8]
    assert carry == pytest.approx([4 / 3 + 0.5 - 1, 0.0, 0.0])
    # a level that can afford 4 tasks over 10 rounds, spending what it is given: floor with carry spreads
    # them as x = 4/10 = .4 -> 0; 4/9 + .4 = .84 -> 0; 4/8 + .84 = 1.34 -> 1; 3/7 + .34 = .77 -> 0;
    # 3/6 + .77 = 1.27 -> 1; 2/5 + .27 = .67 -> 0; 2/4 + .67 = 1.17 -> 1; 1/3 + .17 = .51 -> 0;
    # 1/2 + .51 = 1.01 -> 1; 0 + .01 -> 0
    left, c, seq = 4.0, np.zeros(1), []
    for r in range(10):
        cap, c = paced_caps(np.array([left]), 10 - r, c, 10)
        seq.append(int(cap[0]))
        left -= cap[0]
    assert seq == [0, 0, 1, 0, 1, 0, 1, 0, 1, 0]


class EnergyTrueState:
    """The oracle a paced strategy reads: each node's energy left and the energy it drew for tasks."""

    def __init__(self, left: np.ndarray) -> None:
        self.left = left
        self.drawn = np.zeros_like(left)

    def alive_mask(self, t: float, devices: np.ndarray | None = None) -> np.ndarray:
        alive = self.left > 0
        return alive if devices is None else alive[devices]

    def energy_left(self, t: float, devices: np.ndarray) -> np.ndarray:
        return self.left[devices]

    def task_energy(self, devices: np.ndarray) -> np.ndarray:
        return self.drawn[devices]


class EnergyView(FakeView):
    def __init__(self, n: int, budget: float) -> None:
        super().__init__(n)
        self.state = EnergyTrueState(np.full(n, budget))

    def true_state(self, strategy: str) -> EnergyTrueState:
        self.oracle_users.add(strategy)
        return self.state


def test_paced_selection_spreads_each_level_budget_to_the_last_round():
    """100 nodes with 10 J, a-tasks cost 4 J (2 per a-node: 40 in all), b-tasks 1 J (10 per b-node: 800, more
    than the 8-10 slots a round can use). Round 0 has no measured task energy: the paper's 2:8. Then level a
    is paced at 38 tasks over 79 rounds (0.48 a round, 0 or 1 by floor with carry) and b fills the rest."""
    s = HeteroFLIoT(HeteroFLIoTConfig(name="heterofl_iot", proportions="a2-b8", selection="paced"))
    s.setup(strategy_context(ModelRecipe("cnn_small", 10, 1, (8, 8)), 100, 10, rounds=80))
    view = EnergyView(100, 10.0)
    cost = {"a": 4.0, "b": 1.0}
    per_round = []
    for rnd in range(80):
        out = s.select(rnd, view, np.random.default_rng(rnd))
        m = mix(out)
        per_round.append(m["a"])
        assert m["a"] + m["b"] == 10 and len({a.device for a in out}) == 10
        for a in out:
            assert view.state.left[a.device] >= cost[a.level], "a node that cannot pay for its task was picked"
            view.state.left[a.device] -= cost[a.level]
            view.state.drawn[a.device] += cost[a.level]
    assert per_round[0] == 2 and max(per_round[1:]) == 1
    # 38 tasks over 79 rounds: every 10 consecutive rounds hold floor or ceil of 10 x 38/79 = 4.8, +-1 carry
    for start in range(1, 71):
        assert 4 <= sum(per_round[start : start + 10]) <= 6, (start, per_round)
    assert sum(per_round[70:]) >= 4  # the mix still holds in the last rounds
    assert view.oracle_users == {"heterofl_iot"}


def test_paced_needs_fix_mode_and_the_oracle():
    with pytest.raises(ValueError, match="mode: fix"):
        HeteroFLIoTConfig(name="heterofl_iot", selection="paced", mode="dynamic")
    with pytest.raises(ValueError, match="energy_info: oracle"):
        HeteroFLIoTConfig(name="heterofl_iot", selection="paced", energy_info="outcomes")


def budget_run(
    tmp_path, write_scenario, selection: str, name: str | None = None, gateways: int = 1, **over
) -> tuple[list[Counter], dict, Path]:
    """The 12-round budget run; ``over`` changes the scenario (``gateways`` > 1: each dispatch counts in its
    gateway's Counter of each round, gateway g holding devices 10g to 10g + 9)."""
    data = battery_scenario(
        10.0, rounds=12, numerics="none", output={"progress": False, "events": "all"},
        algorithm={"name": "heterofl_iot", "proportions": "a2-b8", "selection": selection},
    )  # fmt: skip
    data.update(over)
    name = name or selection
    out = tmp_path / name
    assert main(["run", str(write_scenario(data, f"{name}.yaml")), "--out", str(out), "--quiet"]) == 0
    (path,) = list(out.iterdir())
    per_round = [Counter() for _ in range(12 * gateways)]
    for line in open(path / "events.jsonl"):
        e = json.loads(line)
        if e["event"] == "dispatch":
            per_round[e["round"] * gateways + e["device"] // 10 * (gateways > 1)][e["level"]] += 1
    return per_round, json.loads((path / "summary.json").read_text()), path


def task_energy_by_hand(path: Path) -> dict[tuple[int, int], tuple[str, float]]:
    """(level, energy) of each task (round, device) from the TINY profile's powers (train 1 W, receive 0.3 W, send 0.8 W, no idle
    draw here) and the simulated times in the event log: train_w x (train_end - train_start) + rx_w x the download's
    air time + tx_w x the upload's, the air time being the transfer's span less the 50 ms RTT (no radio power), which
    is also the message's bytes over the link's rate (1 Mb/s down, 0.5 Mb/s up; the same model both ways)."""
    power, rtt = TINY["power"], TINY["link"]["rtt_ms"] / 1e3
    at: dict[tuple[int, int], dict[str, dict]] = defaultdict(dict)
    for line in open(path / "events.jsonl"):
        e = json.loads(line)
        at[(e["round"], e["device"])][e["event"]] = e
    energy: dict[tuple[int, int], tuple[str, float]] = {}
    for key, ev in at.items():
        if "dispatch" not in ev:
            continue
        down = ev["arrive"]["t"] - ev["dispatch"]["t"] - rtt
        train = ev["train_end"]["t"] - ev["train_start"]["t"]
        up = ev["upload"]["t"] - ev["train_end"]["t"] - rtt
        nbytes = ev["upload"]["bytes"]
        assert down == pytest.approx(nbytes * 8 / (TINY["link"]["down_mbps"] * 1e6), abs=2e-6)
        assert up == pytest.approx(nbytes * 8 / (TINY["link"]["up_mbps"] * 1e6), abs=2e-6)
        assert train == pytest.approx(ev["train_start"]["flops"] / TINY["compute"]["flops"], abs=2e-6)
        energy[key] = (ev["dispatch"]["level"], power["train_w"] * train + power["rx_w"] * down + power["tx_w"] * up)
    return energy


def test_paced_mix_holds_to_the_last_round_system_only(tmp_path, write_scenario):
    """20 nodes of 10 J (a2-b8: a-nodes 0-3), 5 a round (quota 1:4), 12 rounds. The task energies, by hand from the
    profile and the simulated times (``task_energy_by_hand``): an a-task 1.028 s of training, 3.03 s receiving and
    6.06 s sending, 6.78 J; a b-task 0.26 s, 0.78 s and 1.56 s, 1.74 J. So an a-node pays for 1 task and a b-node for
    5 (80 > the 60 slots). Proportional: a fresh a-node in rounds 0-3, then the four drained ones (3.2 J left) in
    rounds 4-7, which run dry mid-task, then 0:5. Paced: round 0 sends 1 (no measurement yet); then 3 affordable
    a-tasks over 11 rounds: x = 3/11 = .27, 3/10 + .27 = .57, 3/9 + .57 = .91, 3/8 + .91 = 1.28 -> round 4;
    2/7 + .28 = .57, 2/6 + .57 = .90, 2/5 + .90 = 1.30 -> round 7; 1/4 + .30 = .55, 1/3 + .55 = .88,
    1/2 + .88 = 1.38 -> round 10."""
    paced, s_paced, path = budget_run(tmp_path, write_scenario, "paced")
    energy = task_energy_by_hand(path)
    per_level = {lv: [x for level, x in energy.values() if level == lv] for lv in ("a", "b")}
    assert [min(per_level[lv]) for lv in "ab"] == pytest.approx([6.783, 1.741], abs=1e-3)  # 71 or 72 samples a node
    assert [max(per_level[lv]) for lv in "ab"] == pytest.approx([6.783, 1.744], abs=1e-3)
    assert {10.0 // x for x in per_level["a"]} == {1} and {10.0 // x for x in per_level["b"]} == {5}
    # the simulator's books agree: each node's energy is its tasks' (every task here completed)
    for row in csv.DictReader(open(path / "devices.csv")):
        mine = [x for (_, dev), (_, x) in energy.items() if dev == int(row["device"])]
        assert len(mine) == int(row["completed"]) and float(row["energy_j"]) == pytest.approx(sum(mine), abs=1e-5)
    assert [m["a"] for m in paced] == [1, 0, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0]
    assert all(m["a"] + m["b"] == 5 for m in paced)
    assert s_paced["failures"]["depleted"] == 0
    prop, s_prop, _ = budget_run(tmp_path, write_scenario, "proportional")
    assert [m["a"] for m in prop] == [1] * 8 + [0] * 4
    assert s_prop["failures"]["depleted"] == 4


def test_paced_async_waves_of_whole_rounds_pace_as_the_synchronous_rounds(tmp_path, write_scenario):
    """The run above in FedBuff's buffered form with concurrency = buffer_size = 5 and dispatch after each update:
    every wave starts with nothing in flight and needs S = (12 - v) x 5 updates, so its S / k = 12 - v waves left
    are the synchronous rounds left, and level a goes out in the same waves (1 at wave 0, then 3 over the 11 left:
    waves 4, 7 and 10, derived in the test above)."""
    server = {"mode": "async", "dispatch": "after_update", "concurrency": 5, "buffer_size": 5}
    waves, summary, _ = budget_run(tmp_path, write_scenario, "paced", "paced_async", server=server)
    assert [m["a"] for m in waves] == [1, 0, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0]
    assert summary["failures"]["depleted"] == 0


class BusyView(EnergyView):
    """An EnergyView whose devices in flight are not selectable (as the server's view)."""

    def __init__(self, n: int, budget: float) -> None:
        super().__init__(n, budget)
        self.busy = np.zeros(n, dtype=bool)

    def selectable_mask(self) -> np.ndarray:
        return ~(self.gone | self.busy)


def test_paced_async_waves_spend_the_budget_exactly_and_never_what_is_in_flight():
    """The paced selection under an asynchronous server, by hand. 8 nodes, a1-b3: a-nodes 0 and 1 with 10 J and
    4 J a task (2 tasks each, 4 in all), b-nodes 2-7 on mains. 10 versions of 1 update, 2 slots: wave 0 fills both,
    then each wave refills the slot of the oldest task, which ends (draws its energy) before the next wave.
    Before wave j >= 1, j updates are in and one task is in flight: S = 10 - j - 1 = 9 - j.
    Each wave's quota keeps a1-b3 among the 2 tasks (1 a, 1 b): a when the task in flight is b, else b.
    w0: nothing measured, 1 a + 1 b (the a ends first). w1: e_a = 4 / 1 ended; 1 + 2 = 3 affordable,
    x = 3/8 = .375 -> 0 (b fills). w2: 3/7 + .375 = .804 -> 0. w3: 3/6 + .804 = 1.304 -> a (carry .304).
    w4 (a in flight, quota b): 1 ended, e_a = 4; 6 and 10 J -> 1 + 2 = 3, less the 1 in flight = 2,
    x = 2/5 + .304 = .704 -> 0. w5: 2 ended, 8 J drawn; 2 affordable (2 and 10 J, or 6 and 6), x = 2/4 + .704
    = 1.204 -> a (.204). w6: 2 - 1 in flight = 1, x = 1/3 + .204 = .537 -> 0. w7: (2, 6) J: 1, x = 1/2 + .537
    = 1.037 -> a (.037). w8: 1 - 1 = 0 -> 0. w9: S = 0 (a wave past what the run needs is paced as its last)
    and nothing affordable -> b. So a goes out in waves 0, 3, 5 and 7: 4 tasks, the a-nodes' budget exactly,
    each to a node that can pay for it and for what it has in flight, all 4 among the 10 updates applied.
    Counting tasks in flight as measured (e_a = 4 J / 2 dispatched at w4, 8 affordable) would send a at w4."""
    from types import SimpleNamespace

    from iotfl_sim.algorithms.base import RunLeft
    from iotfl_sim.sim.buffered_async import BufferedForm

    s = HeteroFLIoT(HeteroFLIoTConfig(name="heterofl_iot", proportions="a1-b3", selection="paced"))
    s.setup(strategy_context(ModelRecipe("cnn_small", 10, 1, (8, 8)), 8, 2, rounds=10))
    assert s.fixed.tolist() == [0, 0, 1, 1, 1, 1, 1, 1]
    view = BusyView(8, 10.0)
    view.state.left[2:] = np.inf
    cost = {"a": 4.0, "b": 1.0}
    in_flight: list[Assignment] = []
    completed = 0
    form = BufferedForm(
        s, SimpleNamespace(server=SimpleNamespace(buffer_size=1, staleness=None), selection_size=lambda: 2),
        lambda: RunLeft(10 - completed - len(in_flight), tuple(in_flight), 10 - completed),
    )  # fmt: skip
    waves = []
    while completed < 10:
        out = form.select_some(len(waves), view, np.random.default_rng(len(waves)), 2 - len(in_flight))
        waves.append("".join(a.level for a in out))
        for a in out:
            assert view.state.left[a.device] >= cost[a.level], "a node that cannot pay for its task was picked"
            view.busy[a.device] = True
        in_flight += out
        done = in_flight.pop(0)
        view.state.left[done.device] -= cost[done.level]
        view.state.drawn[done.device] += cost[done.level]
        view.busy[done.device] = False
        completed += 1
    assert waves == ["ab", "b", "b", "a", "b", "a", "b", "a", "b", "b"]
    assert view.state.left[:2].tolist() == [2.0, 2.0] and view.state.drawn[:2].sum() == 16.0


def test_concurrent_quotas_keep_the_mix_among_the_tasks_in_flight():
    from iotfl_sim.algorithms.heterofl_iot import concurrent_quotas

    shares = np.array([0.2, 0.8])
    # nothing in flight: the round's quota; 1 a + 3 b in flight and 1 slot: a2-b8 of 5 is 1:4 -> b
    assert concurrent_quotas(shares, 5, np.array([0, 0])).tolist() == level_quotas(shares, 5).tolist() == [1, 4]
    assert concurrent_quotas(shares, 1, np.array([1, 3])).tolist() == [0, 1]
    assert concurrent_quotas(shares, 1, np.array([0, 4])).tolist() == [1, 0]
    # 3 a in flight (over the share), 2 slots: a2-b8 of 5 is 1:4, b lacks 4: cut back to 2 -> 0:2
    assert concurrent_quotas(shares, 2, np.array([3, 0])).tolist() == [0, 2]


def test_paced_hierarchy_paces_each_gateways_own_nodes_over_the_gateway_rounds(tmp_path, write_scenario):
    """The 12-round budget run as 6 cloud rounds of 2 gateway rounds over two gateways of 10 nodes: the a-nodes
    (0-3) are all behind gateway 0, which paces them over its 12 gateway rounds as the flat run paces them over its
    12 rounds (the same task energies: 1 a-task a node): 1 at gateway round 0, then 3 over 11, rounds 4, 7 and 10.
    Gateway 1 holds no a-node. Had the gateways shared one fleet-wide pace, gateway 1's selections would advance
    level a's carry too, and a would go out about twice as often, its budget gone by the middle of the run."""
    fleet = battery_scenario(10.0)["fleet"]
    fleet["gateways"] = [{"name": "gw", "down_mbps": 50.0, "up_mbps": 20.0, "devices_per_gateway": 10}]
    fleet["groups"][0]["network"] = {"gateway": "gw"}
    tier = {"fleet": fleet, "hierarchy": {"gateway_rounds": 2}, "rounds": 6}
    rounds, summary, _ = budget_run(tmp_path, write_scenario, "paced", "paced_tier", gateways=2, **tier)
    assert [rounds[2 * r]["a"] for r in range(12)] == [1, 0, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0]
    assert all(rounds[2 * r + 1]["a"] == 0 for r in range(12))
    assert summary["failures"]["depleted"] == 0


def test_a_stopped_paced_hierarchical_run_resumes_to_the_same_files(tmp_path, write_scenario, monkeypatch):
    """Each gateway's pace (carry and task count, keyed by its first device) goes through the checkpoint: a run
    stopped after its first cloud round and resumed writes the files of a run never stopped."""
    from iotfl_sim.sim import engine

    data = battery_scenario(
        10.0, rounds=4, numerics="none", hierarchy={"gateway_rounds": 2},
        algorithm={"name": "heterofl_iot", "proportions": "a2-b8", "selection": "paced"},
        output={"progress": False, "events": "all", "checkpoint": {"every_rounds": 1, "every_s": None}},
    )  # fmt: skip
    data["fleet"]["gateways"] = [{"name": "gw", "down_mbps": 50.0, "up_mbps": 20.0, "devices_per_gateway": 10}]
    data["fleet"]["groups"][0]["network"] = {"gateway": "gw"}
    path = write_scenario(data)
    assert main(["run", str(path), "--out", str(tmp_path / "whole"), "--quiet"]) == 0
    checkpoint = engine.Simulation.checkpoint
    monkeypatch.setattr(engine.Simulation, "checkpoint", lambda sim, done: (checkpoint(sim, done), setattr(sim, "stop_requested", True)))
    assert main(["run", str(path), "--out", str(tmp_path / "cut"), "--quiet"]) == 130
    monkeypatch.setattr(engine.Simulation, "checkpoint", checkpoint)
    (cut,) = list((tmp_path / "cut").iterdir())
    assert main(["run", "--resume", str(cut), "--quiet"]) == 0
    (whole,) = list((tmp_path / "whole").iterdir())
    assert (whole / "events.jsonl").read_text() == (cut / "events.jsonl").read_text()
    assert (whole / "devices.csv").read_text() == (cut / "devices.csv").read_text()


def test_fleet_energy_left_and_task_energy_by_hand():
    """The oracle figures paced reads. 10 J, idle 0.1 W: 1 s of compute at 2 W from t = 0 (2 J; compute power
    replaces idle), 1 s of radio at 0.5 W from t = 2 (0.5 J + 0.1 J idle on top), idle 1-2 s and 3-5 s
    (0.1 + 0.2 J): at t = 5, 10 - 2.9 = 7.1 J left, 2.5 J of it drawn by tasks. Then a 100 J task drains it: 0."""
    import yaml

    from iotfl_sim.fleet.fleet import Fleet
    from iotfl_sim.scenario.loader import load_scenario, resolve_groups

    profile = copy.deepcopy(TINY)
    profile["battery"] = {"capacity_j": 10.0}
    profile["power"]["idle_w"] = 0.1
    data = base_scenario(fleet={"groups": [{"name": "d", "count": 1, "profile": profile}]}, numerics="none")
    sc = load_scenario(text=yaml.safe_dump(data))
    fleet = Fleet.build(resolve_groups(sc), 0)
    ids = np.array([0])
    assert fleet.spend(0, 0.0, 1.0, 2.0, "compute") is None
    assert fleet.spend(0, 2.0, 1.0, 0.5, "radio") is None
    assert fleet.energy_left(5.0, ids) == pytest.approx([7.1])
    assert fleet.task_energy(ids) == pytest.approx([2.5])
    assert fleet.spend(0, 6.0, 50.0, 2.0, "compute") is not None
    assert fleet.energy_left(60.0, ids).tolist() == [0.0]
