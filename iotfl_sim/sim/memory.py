"""The memory a device needs to train a submodel, and the set-up check that some device of the fleet has it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from iotfl_sim.core.errors import ScenarioError
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec
from iotfl_sim.fleet.fleet import MB, Fleet
from iotfl_sim.scenario.model import Scenario


class InfeasibleFleetError(ScenarioError):
    """No device of the fleet can hold any submodel the method would assign."""


class MemoryNeed:
    """Training memory of a submodel in the fleet's memory units (``fleet.memory_units``), cached per submodel.

    MB units: bytes of weights, gradients, optimizer state and one batch of activations, measured from the real
    submodel. Relative units (FlexFL): percent of the full model's parameters.
    """

    def __init__(self, sc: Scenario) -> None:
        self.relative = sc.fleet.memory_units == "relative"
        self.batch_size = sc.local.batch_size
        self.optimizer_slots = 1 if sc.local.momentum > 0 else 0
        self.scale = 1.0 if self.relative else MB  # bytes per unit of the figures people read (MB)
        self._cache: dict[tuple[ModelRecipe, SubmodelSpec], float] = {}

    def __call__(self, recipe: ModelRecipe, spec: SubmodelSpec) -> float:
        key = (recipe, spec)
        need = self._cache.get(key)
        if need is None:
            if self.relative:
                full = replace(recipe, global_rate=1.0).cost(SubmodelSpec(1.0, rounding=spec.rounding)).params
                need = 100.0 * recipe.cost(spec).params / full
            else:
                need = recipe.cost(spec).memory_bytes(self.batch_size, self.optimizer_slots)
            self._cache[key] = need
        return need

    def check_feasible(self, fleet: Fleet, specs: list[tuple[ModelRecipe, SubmodelSpec]], method: str) -> None:
        """Refuse a fleet where no device declares enough free memory for the smallest of ``specs``."""
        smallest = min(self(r, s) for r, s in specs)
        if (fleet.mem_free >= smallest).any():
            return
        unit = "% of the full model" if self.relative else "MB"
        best = int(np.argmax(fleet.mem_free))
        group = fleet.groups[fleet.group_of[best]].name
        raise InfeasibleFleetError(
            f"fleet: no device can hold any submodel of {method}: the smallest needs "
            f"{smallest / self.scale:.3g} {unit} to train, the roomiest group ({group}) declares "
            f"{fleet.mem_free[best] / self.scale:.3g}; raise memory.free_mb (or the group's memory.free), "
            "shrink local.batch_size or the model"
        )
