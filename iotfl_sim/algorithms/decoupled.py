"""Decoupled: one independent model per complexity level, each trained only by devices that fit it.

A selected device trains the largest level its declared memory can hold; each level's model is
averaged (by data size by default) over the devices that trained it.

``server.mode: semi_async``: a late update joins its own level's average with its staleness weight times its weight
(``algorithms.common.contributions``), trained from that level's model as its device downloaded it in its own round.

``hierarchy:``: a gateway holds one model per level (``tier_state``: ``states``) and averages its devices' updates
into each as the flat server does; beside them it keeps, per level, the total weight of the updates it averaged
into that level since the cloud round began (``level_weights``: their samples under the default
``weighting: data``, their number under ``count``). The cloud averages each level's model over the gateways that
trained that level, weighted by those per-level totals, not by a gateway's samples over all levels: a gateway
whose devices trained mostly level a weighs little in level e's average, as its few level-e clients would in a flat
round. So with one gateway round per cloud round each level's cloud model is the flat weighted average of that
cloud round's level updates (up to float rounding), and one gateway with k1 = k2 = 1 is flat Decoupled bit for
bit. A level no gateway trained keeps its cloud model. The backhaul carries every level's model (``tier_size``).
"""

from __future__ import annotations

import numpy as np

from iotfl_sim.algorithms.base import (
    Assignment,
    EvalTarget,
    FleetView,
    Strategy,
    Tier,
    Update,
    fixed_level_specs,
    select_uniform,
)
from iotfl_sim.algorithms.common import contributions
from iotfl_sim.fl.aggregate import Contribution, aggregate_nested
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec
from iotfl_sim.scenario.algorithms import DecoupledConfig, parse_proportions


class Decoupled(Strategy):
    Config = DecoupledConfig
    checkpointed = ("states",)
    tier_state = ("states", "level_weights")  # under a hierarchy a gateway's level models and their weights

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
        self.level_weights: dict[str, float] = {}  # under a hierarchy, a gateway's per level (its tier); never the cloud's
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
        self._average(updates)

    def _average(self, updates: list[Update]) -> dict[str, float]:
        """Each level's model averaged over its updates (``states`` rebound, never changed in place: a gateway's
        starts as the cloud's); the total weight each level's average took."""
        states, weights = dict(self.states), {}
        for x in self.levels:
            mine = contributions([u for u in updates if u.assignment.level == x], self.cfg.weighting)
            if mine:
                states[x] = aggregate_nested(self.states[x], mine)
                weights[x] = sum(c.weight for c in mine)
        self.states = states
        return weights

    def gateway_aggregate(self, rnd: int, updates: list[Update]) -> None:
        """The flat average, and each level's weight added to the gateway's ``level_weights``."""
        done = self._average(updates)
        self.level_weights = {x: self.level_weights.get(x, 0.0) + done.get(x, 0.0) for x in self.levels}

    def combine(self, rnd: int, tiers: list[Tier]) -> None:
        """Each level's model averaged over the gateways, weighted by the weight each gave that level."""
        states = dict(self.states)
        for x in self.levels:
            held = [Contribution(t.values["states"][x], t.values["level_weights"].get(x, 0.0)) for t in tiers]
            held = [c for c in held if c.weight > 0]
            if held:
                states[x] = aggregate_nested(self.states[x], held)
        self.states = states

    def tier_size(self) -> tuple[int, int]:
        """Every level's model goes up and down the backhaul."""
        sizes = [(r.cost(s).params, len(r.shapes(s))) for r, s in self.candidate_specs()]
        return sum(p for p, _ in sizes), sum(t for _, t in sizes)

    def eval_targets(self) -> list[EvalTarget]:
        targets = [EvalTarget(x, self.specs[x], self.states[x], self.recipes[x]) for x in self.levels]
        top = self.levels[0]
        targets.append(EvalTarget("full", self.specs[top], self.states[top], self.recipes[top], is_level=False))
        return targets
