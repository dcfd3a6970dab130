"""FedProx in your own file: the method of Li et al. (MLSys 2020) written only against ``iotfl_sim.strategy``.

Run it from a scenario beside this file (the scenario's folder is searched for the module)::

    algorithm:
      name: fedprox:FedProx        # module:Class
      mu: 0.01

It is the built-in ``fedprox`` written as a user would; ``tests/test_method_examples.py`` checks that the two
give the same numbers and that the proximal term moves the weights as a hand computation says.
See docs/write_a_method.md for the walk-through.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from iotfl_sim.strategy import (
    Assignment,
    EvalTarget,
    LocalObjective,
    MethodConfig,
    Strategy,
    SubmodelSpec,
    average,
    select_uniform,
)


class FedProxConfig(MethodConfig):
    """The options a scenario's ``algorithm:`` block may give (validated strictly, with these defaults)."""

    mu: float = Field(0.01, ge=0, description="weight of the proximal term (mu/2)||w - w_global||^2")
    weighting: Literal["data", "count"] = Field("data", description="aggregation weights")


class FedProx(Strategy):
    Config = FedProxConfig
    checkpointed = ("state",)  # the only attribute that changes after setup: saved by checkpoints

    def setup(self, ctx) -> None:
        self.ctx = ctx
        self.spec = SubmodelSpec(1.0, name="full")  # everyone trains the scenario's model at full width
        self.state = ctx.initial_state(ctx.recipe, self.spec)
        self.eligible = self.fits(ctx.recipe, self.spec, ctx.declared_free_memory)  # declared memory holds it

    def select(self, rnd, fleet, rng: np.random.Generator) -> list[Assignment]:
        chosen = select_uniform(fleet, self.c.clients_per_round, rng, self.eligible)
        return [Assignment(int(d), self.spec, level="full") for d in chosen]

    def payload(self, assignment):
        return self.state

    def local_objective(self, assignment) -> LocalObjective:
        return LocalObjective(prox_mu=self.cfg.mu)  # cross-entropy + (mu/2)||w - w_received||^2

    def aggregate(self, rnd, updates) -> None:
        self.state = average(self.state, updates, self.cfg.weighting)

    def eval_targets(self) -> list[EvalTarget]:
        return [EvalTarget("full", self.spec, self.state, self.c.recipe)]
