"""Defaults shared by the methods (Flower-style: a handful of plain methods, overridden where a method differs)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from torch import nn

from iotfl_sim.algorithms.base import (
    Assignment,
    DeviceState,
    LocalObjective,
    Outcome,
    State,
    StrategyContext,
)
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec, slice_state


class StrategyBase:
    name = "base"

    def __init__(self) -> None:
        self.ctx: StrategyContext | None = None

    # -- defaults a method overrides where it differs

    def adapt(self, assignment: Assignment, device: DeviceState) -> Assignment | None:
        return assignment

    def local_objective(self, assignment: Assignment) -> LocalObjective:
        return LocalObjective()

    def observe(self, rnd: int, outcomes: list[Outcome]) -> None:
        return None

    # -- helpers

    @property
    def c(self) -> StrategyContext:
        assert self.ctx is not None, "setup() has not run"
        return self.ctx

    def recipe_at(self, global_rate: float) -> ModelRecipe:
        return replace(self.c.recipe, global_rate=global_rate)

    def fits(self, recipe: ModelRecipe, spec: SubmodelSpec, free_bytes: np.ndarray) -> np.ndarray:
        """Which devices' declared free memory can hold a training task of ``spec``."""
        return free_bytes >= self.c.memory_need(recipe, spec)

    @staticmethod
    def slice_for(state: State, recipe: ModelRecipe, spec: SubmodelSpec) -> State:
        return slice_state(state, recipe.shapes(spec))


def classifier_keys(recipe: ModelRecipe, spec: SubmodelSpec) -> tuple[str, ...]:
    """Names of the last Linear layer's tensors (the classifier, which keeps every class row)."""
    model = recipe.build(spec)
    last = None
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            last = name
    if last is None:
        return ()
    return tuple(k for k in model.state_dict() if k.rsplit(".", 1)[0] == last)
