"""What FedAsync and FedBuff share: one global model at full width that every task trains, devices whose declared
memory cannot hold it never selected, the rest chosen uniformly among the idle selectable ones."""

from __future__ import annotations

import numpy as np

from iotfl_sim.algorithms.base import (
    Assignment,
    Asynchronous,
    EvalTarget,
    Exclusive,
    FleetView,
    Strategy,
    select_uniform,
)
from iotfl_sim.fl.submodel import SubmodelSpec


class AsyncFullModel(Exclusive, Asynchronous, Strategy):
    """The shared half of an asynchronous full-model method: subclasses give ``buffer_size`` and ``apply``."""

    def setup(self, ctx) -> None:
        self.ctx = ctx
        self.spec = SubmodelSpec(1.0, name="full")
        self.state = ctx.initial_state(ctx.recipe, self.spec)
        self.eligible = self.fits(ctx.recipe, self.spec, ctx.declared_free_memory)

    def select_some(self, wave: int, fleet: FleetView, rng: np.random.Generator, k: int) -> list[Assignment]:
        return [Assignment(int(d), self.spec, level="full") for d in select_uniform(fleet, k, rng, self.eligible)]

    def payload(self, assignment: Assignment):
        return self.state

    def eval_targets(self) -> list[EvalTarget]:
        return [EvalTarget("full", self.spec, self.state, self.c.recipe)]
