"""A round-based averaging method run asynchronously (``sim/buffered_async.py``): FedBuff's buffer over the method's
own aggregation, stale updates moved onto the current model by their staleness-weighted delta."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import yaml
from conftest import BIG, base_scenario

from iotfl_sim.algorithms.base import Assignment, RunLeft, Update
from iotfl_sim.cli import main
from iotfl_sim.fl.submodel import SubmodelSpec
from iotfl_sim.scenario.algorithms import Staleness
from iotfl_sim.scenario.loader import load_scenario, resolve_groups
from iotfl_sim.scenario.resolved import ResolvedScenario
from iotfl_sim.sim.buffered_async import BufferedForm
from iotfl_sim.sim.engine import Simulation
from iotfl_sim.sim.setup import build_simulation
from iotfl_sim.strategy import average


@dataclass
class Context:
    clients_per_round: int = 10
    run_left: RunLeft | None = None


class Mean:
    """A round-based method reduced to what the buffered form uses: one global model, FedAvg's count-weighted
    mean (``iotfl_sim.strategy.average``), and a selection of the first ``clients_per_round`` devices."""

    def __init__(self, state: dict) -> None:
        self.state = state
        self.ctx = Context()
        self.seen_k: list[int] = []
        self.seen_left: list[RunLeft | None] = []

    @property
    def c(self):
        return self.ctx

    def payload(self, assignment):
        return self.state

    def aggregate(self, rnd, updates):
        self.state = average(self.state, updates, weighting="count")

    def select(self, rnd, fleet, rng):
        self.seen_k.append(self.ctx.clients_per_round)
        self.seen_left.append(self.ctx.run_left)
        return [Assignment(d, SubmodelSpec(1.0)) for d in range(self.ctx.clients_per_round)]


def update(device: int, state: dict, staleness: int, base: dict) -> Update:
    return Update(Assignment(device, SubmodelSpec(1.0)), state, 10, np.arange(2), 0.0, staleness=staleness, base=base)


def form(strategy, kind: str = "constant", buffer_size: int | None = None, run_left=None) -> BufferedForm:
    server = SimpleNamespace(buffer_size=buffer_size, staleness=Staleness(kind=kind))
    return BufferedForm(strategy, SimpleNamespace(server=server, selection_size=lambda: 4), run_left)


def test_a_stale_update_joins_by_its_weighted_delta_on_the_current_model_by_hand():
    """Global x = [10, 20]. Device 2, fresh: trained [12, 22]. Device 1, 3 versions stale, downloaded [0, 0] and
    trained [4, -4]: delta [4, -4], weight (3 + 1)^-1/2 = 0.5, moved to [10 + 2, 20 - 2] = [12, 18]. The count
    mean of [12, 22] and [12, 18] is [12, 20]."""
    x = {"w": torch.tensor([10.0, 20.0])}
    method = Mean(x)
    fresh = update(2, {"w": torch.tensor([12.0, 22.0])}, 0, x)
    stale = update(1, {"w": torch.tensor([4.0, -4.0])}, 3, {"w": torch.tensor([0.0, 0.0])})
    form(method, kind="polynomial").apply(7, [fresh, stale])
    assert method.state["w"].tolist() == [12.0, 20.0]


def test_fresh_updates_are_aggregated_as_they_came_and_in_order_of_device():
    """Staleness 0: each update as trained (no rebasing arithmetic), handed over sorted by device."""
    x = {"w": torch.tensor([1.0])}
    method = Mean(x)
    got: list[list[int]] = []
    method.aggregate = lambda rnd, ups: got.append([u.assignment.device for u in ups]) or None  # type: ignore[method-assign]
    a, b = update(5, {"w": torch.tensor([0.1])}, 0, x), update(3, {"w": torch.tensor([0.3])}, 0, x)
    form(method).apply(1, [a, b])
    assert got == [[3, 5]]


def test_select_some_asks_the_method_for_k_devices_and_restores_its_context():
    method = Mean({})
    ctx = method.ctx
    chosen = form(method).select_some(0, None, np.random.default_rng(0), 3)
    assert [a.device for a in chosen] == [0, 1, 2] and method.seen_k == [3]
    assert method.ctx is ctx and ctx.clients_per_round == 10
    assert form(method).buffer_size() == 4 and form(method, buffer_size=2).buffer_size() == 2
    # what is left of the run, asked of the server at each wave, is the method's for that call only
    left = RunLeft(7, (Assignment(5, SubmodelSpec(1.0)),), 2)
    form(method, run_left=lambda: left).select_some(1, None, np.random.default_rng(0), 2)
    assert method.seen_left == [None, left] and method.ctx is ctx and ctx.run_left is None


def simulation(data: dict) -> Simulation:
    sc = load_scenario(text=yaml.safe_dump(data))
    return build_simulation(ResolvedScenario(sc, resolve_groups(sc)))


def ample_fleet(n: int) -> dict:
    """``n`` identical devices that never fail: ample memory, no battery limit."""
    return {"groups": [{"name": "big", "count": n, "profile": copy.deepcopy(BIG)}]}


# the method variants whose buffered form, with K = concurrency = clients per round, is their synchronous run, with the
# state beside the model that must match too (FedOpt's moments, DAdaQuant's level schedule)
AS_SYNC = {
    "heterofl": ({"algorithm": {"name": "heterofl", "proportions": "a1-b1", "mode": "fix"}}, ()),
    "fedopt": (None, ("m", "v")),
    "fedx": (None, ()),
    "dadaquant_fedx_setting": (None, ("schedule", "last_update")),
    "scalefl": (None, ()),
}


@pytest.mark.parametrize("variant", list(AS_SYNC))
def test_buffered_with_k_equal_to_concurrency_after_each_update_is_the_synchronous_run(variant):
    """Each slot refilled only after a version, buffer = concurrency = clients per round, no task failing: each version
    folds the K updates trained from the same model (staleness 0), in the order of device as a round's: the
    synchronous round's model, bit for bit, and its accuracy in every row. FedOpt steps its optimizer, FedX fine-tunes
    and DAdaQuant steps its level schedule once a version as once a round; ScaleFL's exit-KD switch reads the version
    a wave downloads, which is the round's number here; the quantizers' draws are keyed alike."""
    from test_resume import METHODS

    given, beside = AS_SYNC[variant]
    common = {"rounds": 2, "fleet": ample_fleet(8), **copy.deepcopy(given or METHODS[variant])}
    # BN statistics recomputed before each evaluation on 64 training samples, not 2,000 (every one of digits'):
    # the same seeded draw in both runs, whose models are compared bit for bit
    calibration = {"bn_calibration_samples": 64}
    sync = simulation(base_scenario(**common, server=calibration))
    sync.run()
    buffered = simulation(base_scenario(**common, server={"mode": "async", "dispatch": "after_update", "buffer_size": 4,
                                                          **calibration}))  # fmt: skip
    buffered.run()
    assert sync.strategy.state.keys() == buffered.strategy.state.keys()
    assert all(torch.equal(sync.strategy.state[k], buffered.strategy.state[k]) for k in sync.strategy.state)
    for name in beside:
        a, b = getattr(sync.strategy, name), getattr(buffered.strategy, name)
        if isinstance(a, dict):
            assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
        else:
            assert a == b, name
    for a, b in zip(sync.rows, buffered.rows, strict=True):
        accs = [c for c in a if c.startswith("acc_")]
        assert "acc_full" in accs
        for col in (*accs, "completed", "bytes_down", "bytes_up", "server_time_s", "server_train_s", "server_other_s"):
            assert a[col] == b[col], col
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-12)  # the same losses, summed in arrival order
        assert b["staleness_max"] == 0


def test_heterofl_buffered_on_a_mixed_fleet_applies_stale_updates_and_learns():
    """Continuous dispatch over a fleet of fast and slow devices: some updates are folded in versions after their
    download (staleness >= 1), and the model still learns digits (well above the 10 % of chance)."""
    fleet = {"groups": [
        {"name": "fast", "count": 4, "profile": copy.deepcopy(BIG)},
        {"name": "slow", "count": 4, "profile": {**copy.deepcopy(BIG), "compute": {**BIG["compute"], "flops": BIG["compute"]["flops"] / 8}}},
    ]}  # fmt: skip
    sim = simulation(base_scenario(
        rounds=6, fleet=fleet, algorithm={"name": "heterofl", "proportions": "a1-b1"},
        server={"mode": "async", "buffer_size": 2, "concurrency": 4}, local={"epochs": 2, "batch_size": 16, "lr": 0.1},
    ))  # fmt: skip
    sim.run()
    assert max(r["staleness_max"] for r in sim.rows) >= 1
    assert sim.rows[-1]["acc_full"] > 0.3


def buffered_methods() -> list[str]:
    from iotfl_sim import methods

    return [m.name for m in methods.registered() if {"sync", "async"} <= m.config.modes]


def test_the_buffered_form_is_declared_by_the_methods_the_docs_name():
    assert buffered_methods() == [
        "fedavg", "heterofl", "heterofl_iot", "adaptivefl", "scalefl", "flexfl", "fedx", "dadaquant", "fedprox", "fedopt",
    ]


@pytest.mark.parametrize("name", buffered_methods())
def test_every_round_based_method_declared_async_runs_two_versions(name):
    """Each "yes" async cell of a round-based method (docs/methods_and_modes.md) run: two versions, system-only."""
    from test_resume import METHODS  # each method's smallest setting (ScaleFL needs a family with exits)

    given = copy.deepcopy(METHODS[name])
    given.pop("server", None)
    sim = simulation(base_scenario(numerics="none", **given, server={"mode": "async", "buffer_size": 2}))
    sim.run()
    assert [r["round"] for r in sim.rows] == [1, 2] and all(r["updates_applied"] for r in sim.rows)


@pytest.mark.parametrize(
    ("server", "algorithm", "says"),
    [
        ({"buffer_size": 2}, "fedavg", "server.buffer_size applies to server.mode: async (this is sync): remove it"),
        ({"mode": "async", "buffer_size": 2}, "fedbuff", "fedbuff is asynchronous itself: give its own algorithm.buffer_size"),
        ({"mode": "async"}, "decoupled", "server.mode: async: algorithm decoupled runs only in sync"),
    ],
)
def test_a_buffer_size_where_it_means_nothing_is_one_line_and_status_2(tmp_path, write_scenario, capsys, server, algorithm, says):
    path = write_scenario(base_scenario(server=server, algorithm={"name": algorithm}))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and "Traceback" not in err and "\n" not in err


def test_a_stopped_buffered_heterofl_run_resumes_to_the_files_of_a_run_never_stopped(tmp_path, write_scenario, monkeypatch):
    """Stopped after its first version and resumed: the same rows, events and devices as the run never stopped, a stale
    update (trained from weights the checkpoint kept) folded in after the stop."""
    from test_resume import resumed_run, rounds

    fleet = {"groups": [
        {"name": "fast", "count": 3, "profile": copy.deepcopy(BIG)},
        {"name": "slow", "count": 3, "profile": {**copy.deepcopy(BIG), "compute": {**BIG["compute"], "flops": BIG["compute"]["flops"] / 8}}},
    ]}  # fmt: skip
    data = base_scenario(
        rounds=3, fleet=fleet, algorithm={"name": "heterofl", "proportions": "a1-b1"},
        server={"mode": "async", "buffer_size": 2, "concurrency": 4},
    )  # fmt: skip
    whole = resumed_run(data, tmp_path, write_scenario, monkeypatch)
    assert max(float(r["staleness_max"]) for r in rounds(whole)[1:]) >= 1  # a stale update folded after the stop
