"""Every method whose aggregation is a weighted average of the updates runs semi-asynchronously: a late update joins a
later round with its staleness weight (``sim.semi_async``), decoded from its own round's message."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from conftest import BIG, base_scenario, strategy_context
from test_async import simulation
from test_resume import METHODS, resumed_run, rounds

from iotfl_sim import methods
from iotfl_sim.algorithms.base import Assignment, Update

SEMI_ASYNC = [m.name for m in methods.registered() if "semi_async" in m.config.modes]
# the methods issue 47 enabled (the others ran semi_async before and have their own tests: test_semi_async.py,
# test_heterofl_iot.py): each trains for real, with late updates, and resumes to the same files; fedbase is AdapterFL
# with no block shared between its models (algorithms/adapterfl.py: FedBase subclasses AdapterFL, the same groups and
# late-update path), so adapterfl's run stands for both here and fedbase's cell runs system-only above
ENABLED = ["decoupled", "adaptivefl", "scalefl", "flexfl", "adapterfl", "fedx", "dadaquant"]
# server.deadline_s per method for the fleet of ``one_slow_group``: below every task of the slow group and above the
# fast groups', and more than half the slow group's shortest task, so that a task late in round 1 arrives before
# round 2 closes (system-only task times in seconds, slow / fast: fedavg, decoupled, fedprox, fedopt
# 11.8 / 0.5; heterofl 3.3 and 11.8 / 0.1; heterofl_iot 3.1 and 11.8 / 0.1; adaptivefl 1.9-5.1 / 0.5; scalefl 2.4 / 0.1 and 3.9; flexfl 3.0 / 0.5;
# adapterfl, fedbase 17.7-23.1 / 0.6; fedx 1.5-2.5 / 0.1; dadaquant 6.1 / 0.3)
DEADLINE = {
    "fedavg": 8.0, "decoupled": 8.0, "heterofl": 8.0, "heterofl_iot": 2.5, "fedprox": 8.0, "fedopt": 8.0,
    "adaptivefl": 1.5, "scalefl": 2.0, "flexfl": 2.0, "adapterfl": 15.0, "fedbase": 15.0, "fedx": 1.3,
    "dadaquant": 4.0,
}  # fmt: skip
# HeteroFL's levels drawn per selection: fixed by id, the slow group's three level-a devices are all late in round 1
# and its one level-b device (3.3 s) closes round 2 before they arrive
ALGORITHM = {"heterofl": {"mode": "dynamic"}}


def one_slow_group(data: dict) -> dict:
    """``data`` on a fleet of its first group (4 devices, as slow as written) and two fast devices (its other groups,
    with BIG's compute and link), 3 clients a round: every round selects a slow device (at most 3 of the 4 are busy
    and only 2 are fast), so every round runs to its deadline, and a task of the slow group late in round 1 joins
    round 2."""
    data = copy.deepcopy(data)
    slow, *fast = data["fleet"]["groups"]
    assert len(fast) in (1, 2), "two fast devices: one group of 2 or two of 1"
    slow["count"] = 4
    for g in fast:
        g["count"] = 2 // len(fast)
        for part in ("compute", "link"):
            g["profile"][part] = copy.deepcopy(BIG[part])
    data["clients_per_round"] = 3
    return data


def semi_async(name: str, rounds: int = 2) -> dict:
    """The resume test's scenario of method ``name``, semi_async, on a fleet whose first group misses every deadline."""
    assert name in DEADLINE, f"{name} runs semi_async: give it a deadline in DEADLINE that its slow group misses"
    variant = copy.deepcopy(METHODS[name])
    data = one_slow_group(base_scenario(rounds=rounds, **variant))
    data["algorithm"].update(ALGORITHM.get(name, {}))
    data["server"] = {**variant.get("server", {}), "mode": "semi_async", "deadline_s": DEADLINE[name]}
    return data


def assert_late_updates_joined(table: list[dict]) -> None:
    """Some update joined a later round than its own: more updates applied than completed in their rounds."""
    fresh = sum(int(r["completed"]) for r in table)
    assert int(table[-1]["updates_applied"]) > fresh, table
    assert max(float(r["staleness_max"] or 0) for r in table) >= 1, table


@pytest.mark.parametrize("name", SEMI_ASYNC)
def test_every_semi_async_cell_runs_rounds_a_late_update_joins(name):
    sim = simulation({**semi_async(name), "numerics": "none"})
    sim.run()
    assert len(sim.rows) == 2
    assert_late_updates_joined(sim.rows)


@pytest.mark.parametrize("name", ENABLED)
def test_an_enabled_method_trains_with_late_updates_and_resumes_to_the_same_files(name, tmp_path, write_scenario, monkeypatch):
    whole = resumed_run(semi_async(name), tmp_path, write_scenario, monkeypatch)
    table = rounds(whole)
    assert_late_updates_joined(table)
    accuracies = [float(v) for r in table for k, v in r.items() if k.startswith("acc_") and v != ""]
    assert accuracies and all(math.isfinite(a) for a in accuracies)


def _update(device: int, spec, state: dict, samples: int, staleness: int = 0, weight: float = 1.0) -> Update:
    return Update(Assignment(device, spec, level=spec.name), state, samples, np.arange(10), 0.0, staleness, weight)


def test_scalefl_scales_a_late_updates_count_by_its_staleness_weight():
    from test_scalefl import make

    s = make()
    s.state = {"w": torch.zeros(4)}
    fresh = _update(0, s.specs[0], {"w": torch.tensor([1.0, 1.0])}, 1000)
    late = _update(1, s.specs[1], {"w": torch.tensor([6.0, 6.0, 6.0])}, 1, staleness=2, weight=0.25)
    s.aggregate(3, [fresh, late])
    # count weighting: entries 0-1 (1 x 1 + 0.25 x 6) / (1 + 0.25) = 2; entry 2 only the late one: 6; entry 3 keeps 0
    assert s.state["w"].tolist() == [2.0, 2.0, 6.0, 0.0]


def test_decoupled_scales_a_late_updates_data_weight_by_its_staleness_weight():
    from iotfl_sim.algorithms.decoupled import Decoupled
    from iotfl_sim.fl.recipe import ModelRecipe
    from iotfl_sim.scenario.algorithms import DecoupledConfig

    s = Decoupled(DecoupledConfig(name="decoupled", levels="a-b"))
    s.setup(strategy_context(ModelRecipe("mlp", 10, 1, (2, 2), norm="none", scaler=False), weights=False))
    s.states = {"a": {"w": torch.zeros(2)}, "b": {"w": torch.full((1,), 7.0)}}
    a = s.specs["a"]
    fresh = _update(0, a, {"w": torch.tensor([1.0, 1.0])}, 30)
    late = _update(1, a, {"w": torch.tensor([4.0, 10.0])}, 40, staleness=1, weight=0.75)
    s.aggregate(2, [fresh, late])
    # data weights 30 and 40 x 0.75 = 30: the plain mean, (1 + 4) / 2 and (1 + 10) / 2; level b untouched
    assert s.states["a"]["w"].tolist() == [2.5, 5.5] and s.states["b"]["w"].tolist() == [7.0]


def test_dadaquant_decodes_a_late_upload_against_the_weights_its_device_downloaded():
    from test_dadaquant import _dadaquant

    s = _dadaquant()
    s.wire.dispatch(2, [], s)  # this round's base: the current global state
    g = torch.Generator().manual_seed(5)
    downloaded = {k: v + torch.randn(v.shape, generator=g) for k, v in s.state.items()}  # an older global state
    trained = {k: v + torch.randn(v.shape, generator=g) for k, v in downloaded.items()}
    late = Update(Assignment(0, s.spec, level="full", extras={"q": 1}), trained, 10, np.arange(3), 0.0, 1, 0.5, downloaded)
    s.wire.receive(2, late)
    # q = 1: each entry of the decoded difference from the download is 0 or +-||trained - downloaded|| of its tensor
    for k, v in late.state.items():
        norm = float(torch.linalg.vector_norm(trained[k] - downloaded[k]))
        diff = (v - downloaded[k]).abs().flatten()
        assert all(min(abs(x), abs(x - norm)) < 1e-5 * max(norm, 1.0) for x in diff.tolist()), k


def test_a_late_uploads_quantizer_draws_are_its_own_rounds():
    from iotfl_sim.algorithms.wire import QuantizedWire
    from iotfl_sim.fl.submodel import SubmodelSpec

    wire = QuantizedWire(seed=1, server_work=None, bucket=None)
    state = {"w": torch.linspace(-1.0, 1.0, 64)}
    spec = SubmodelSpec(1.0, name="full")

    def received(rnd: int, staleness: int) -> torch.Tensor:
        u = Update(Assignment(0, spec, level="full", bits=2), dict(state), 10, np.arange(10), 0.0, staleness)
        wire.receive(rnd, u)
        return u.state["w"]

    assert torch.equal(received(3, 1), received(2, 0))  # dispatched in round 2, joining round 3
    assert not torch.equal(received(3, 0), received(2, 0))  # another round's draws differ


def test_a_late_uploads_price_outlives_the_next_rounds_dispatch():
    from iotfl_sim.algorithms.base import ServerWork
    from iotfl_sim.algorithms.wire import QuantizedWire
    from iotfl_sim.fl.recipe import ModelRecipe
    from iotfl_sim.fl.submodel import SubmodelSpec

    recipe, spec = ModelRecipe("mlp", 10, 1, (2, 2), norm="none", scaler=False), SubmodelSpec(1.0, name="full")
    wire = QuantizedWire(seed=1, server_work=ServerWork(), bucket=None)
    late, fresh = Assignment(0, spec, level="full", bits=4), Assignment(1, spec, level="full", bits=8)
    wire.dispatch(0, late, {}, 32, recipe)  # system-only: priced as parameters x bits / 8
    wire.sent.clear()  # the next round's dispatch (QsgdWire, FedXWire) forgets the last round's downloads
    wire.dispatch(1, fresh, {}, 32, recipe)
    params = recipe.cost(spec).params
    assert wire.wire_bytes(late, up=True) == params * 4 / 8 and wire.wire_bytes(fresh, up=True) == params * 8 / 8
    assert wire.wire_bytes(late, up=False) is None  # its download was last round's
