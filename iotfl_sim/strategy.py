"""The public API for writing an FL method: everything a method in its own file needs, in one import.

>>> from iotfl_sim.strategy import Strategy, MethodConfig, Assignment, EvalTarget, average, select_uniform

A method subclasses ``Strategy`` (its docstring is the contract: what the engine calls, in which order, and
the rules a method keeps), gives its options as a ``MethodConfig`` subclass (``Strategy.Config``), and is
named in a scenario by its import path (``algorithm: {name: my_module:MyMethod, ...}``), by an installed
entry point in the group ``iotfl_sim.methods``, or by the name it was registered under
(``register_method``, or ``iotfl_sim.run(scenario, methods=[MyMethod])``). ``docs/write_a_method.md`` walks
through one; ``examples/fedprox.py`` and ``examples/fedopt.py`` are complete ones.
"""

from __future__ import annotations

from collections.abc import Sequence

from iotfl_sim.algorithms.base import (
    AggregateWork,
    Assignment,
    Asynchronous,
    DeviceState,
    EvalTarget,
    Exclusive,
    FleetView,
    GlobalModel,
    InferWork,
    Outcome,
    QsgdWork,
    State,
    Strategy,
    StrategyContext,
    Tier,
    TrainWork,
    Update,
    Wire,
    average_tiers,
    select_uniform,
)
from iotfl_sim.algorithms.common import contributions
from iotfl_sim.algorithms.wire import QsgdWire
from iotfl_sim.fl.aggregate import aggregate_nested
from iotfl_sim.fl.objectives import LocalObjective
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec
from iotfl_sim.methods import register_method
from iotfl_sim.scenario.algorithms import MethodConfig

__all__ = [
    "AggregateWork", "Assignment", "Asynchronous", "DeviceState", "EvalTarget", "Exclusive", "FleetView", "GlobalModel", "InferWork", "LocalObjective",
    "MethodConfig", "ModelRecipe", "Outcome", "QsgdWire", "QsgdWork", "State", "Strategy", "StrategyContext",
    "SubmodelSpec", "Tier", "TrainWork", "Update", "Wire", "average", "average_tiers", "register_method", "select_uniform",
]  # fmt: skip


def average(state: State, updates: Sequence[Update], weighting: str = "data") -> State:
    """FedAvg's aggregation: the updates' weights averaged by local data size (``data``) or equally
    (``count``), each key over the updates that hold it; a submodel's update covers the leading slice of
    each tensor of ``state`` it was cut from (HeteroFL's nesting), the rest keeps ``state``'s values, as do
    integer tensors (BatchNorm's counters).
    Returns ``state`` itself when there are no updates."""
    if not updates:
        return state
    return aggregate_nested(state, contributions(updates, weighting))
