"""Decoupled: one independent model per complexity level, each trained only by devices that fit it.

A selected device trains the largest level its declared memory can hold; each level's model is
averaged (by data size by default) over the devices that trained it.

``server.mode: semi_async``: a late update joins its own level's average with its staleness weight times its weight
(``algorithms.common.contributions``), trained from that level's model as its device downloaded it in its own round.
"""

from __future__ import annotations

import numpy as np

from iotfl_sim.algorithms.base import (
    Assignment,
    EvalTarget,
    FleetView,
    Strategy,
    Update,
    fixed_level_specs,
    select_uniform,
)
from iotfl_sim.algorithms.common import contributions
from iotfl_sim.fl.aggregate import aggregate_nested
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec
from iotfl_sim.scenario.algorithms import DecoupledConfig, parse_proportions


class Decoupled(Strategy):
    Config = DecoupledConfig
    checkpointed = ("states",)

    def __init__(self, cfg: DecoupledConfig) -> None:
        super().__init__(cfg)
        self.cfg: DecoupledConfig = cfg

    def setup(self, ctx) -> None:
        self.ctx = ctx
        letters = sorted(parse_proportions(self.cfg.levels), key=lambda x: -self.cfg.level_rates[x])
        self.levels = letters
        self.recipes = {x: self.recipe_at(self.cfg.level_rates[x]) for x in letters}
        self.specs = {x: SubmodelSpec(rate=self.cfg.level_rates[x], name=x) for x in letters}
        self.states = {x: ctx.initial_state(self.recipes[x], self.specs[x]) for x in letters}
        # largest level each device can hold (-1: none)
        self.level_of = np.full(ctx.num_devices, -1, dtype=np.int64)
        for i in reversed(range(len(letters))):
            x = letters[i]
            self.level_of[self.fits(self.recipes[x], self.specs[x], ctx.declared_free_memory)] = i
        self.eligible = self.level_of >= 0

    def candidate_specs(self) -> list[tuple[ModelRecipe, SubmodelSpec]]:
        return [(self.recipes[x], self.specs[x]) for x in self.levels]

    def possible_specs(self) -> np.ndarray:
        return fixed_level_specs(self.level_of, len(self.levels))

    def select(self, rnd: int, fleet: FleetView, rng: np.random.Generator) -> list[Assignment]:
        chosen = select_uniform(fleet, self.c.clients_per_round, rng, self.eligible)
        out = []
        for d in chosen:
            x = self.levels[self.level_of[d]]
            out.append(Assignment(int(d), self.specs[x], level=x))
        return out

    def recipe_for(self, assignment: Assignment) -> ModelRecipe:
        return self.recipes[assignment.level]

    def payload(self, assignment: Assignment):
        return self.states[assignment.level]

    def aggregate(self, rnd: int, updates: list[Update]) -> None:
        for x in self.levels:
            mine = [u for u in updates if u.assignment.level == x]
            if mine:
                self.states[x] = aggregate_nested(self.states[x], contributions(mine, self.cfg.weighting))

    def eval_targets(self) -> list[EvalTarget]:
        targets = [EvalTarget(x, self.specs[x], self.states[x], self.recipes[x]) for x in self.levels]
        top = self.levels[0]
        targets.append(EvalTarget("full", self.specs[top], self.states[top], self.recipes[top], is_level=False))
        return targets
