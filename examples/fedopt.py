"""FedOpt in your own file: FedAdam, FedYogi and FedAdagrad (Reddi et al., ICLR 2021, Algorithm 2) written only
against ``iotfl_sim.strategy``: devices train as in FedAvg, the server applies an adaptive optimizer to the
average client change.

    algorithm:
      name: fedopt:FedOpt
      server_optimizer: yogi
      server_lr: 0.01

It is the built-in ``fedopt`` written as a user would; ``tests/test_method_examples.py`` checks that the two give
the same numbers and that one server step matches a hand computation.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from iotfl_sim.strategy import (
    Assignment,
    EvalTarget,
    MethodConfig,
    Strategy,
    SubmodelSpec,
    average,
    select_uniform,
)

OPTIMIZER_FLOPS = 13  # server arithmetic per parameter and round, charged as server work


class FedOptConfig(MethodConfig):
    server_optimizer: Literal["adam", "yogi", "adagrad"] = "adam"
    server_lr: float = Field(0.01, gt=0)
    beta1: float = Field(0.9, ge=0, lt=1)
    beta2: float = Field(0.99, ge=0, lt=1)
    tau: float = Field(1e-3, gt=0)
    weighting: Literal["data", "count"] = "data"


class FedOpt(Strategy):
    Config = FedOptConfig
    checkpointed = ("state", "m", "v")

    def setup(self, ctx) -> None:
        self.ctx = ctx
        self.spec = SubmodelSpec(1.0, name="full")
        self.state = ctx.initial_state(ctx.recipe, self.spec)
        self.eligible = self.fits(ctx.recipe, self.spec, ctx.declared_free_memory)
        with torch.device("meta"):  # parameter names only, no weights
            names = [n for n, p in ctx.recipe.build(self.spec).named_parameters() if p.requires_grad]
        self.trained = [n for n in names if n in self.state]
        self.m = {n: torch.zeros_like(self.state[n]) for n in self.trained}
        self.v = {n: torch.full_like(self.state[n], self.cfg.tau**2) for n in self.trained}

    def select(self, rnd, fleet, rng) -> list[Assignment]:
        chosen = select_uniform(fleet, self.c.clients_per_round, rng, self.eligible)
        return [Assignment(int(d), self.spec, level="full") for d in chosen]

    def payload(self, assignment):
        return self.state

    def aggregate(self, rnd, updates) -> None:
        cfg = self.cfg
        mean = average(self.state, updates, cfg.weighting)  # BatchNorm statistics keep the plain average
        for n in self.trained:
            x, delta = self.state[n], mean[n] - self.state[n]
            m = cfg.beta1 * self.m[n] + (1 - cfg.beta1) * delta
            sq = delta * delta
            if cfg.server_optimizer == "adagrad":
                v = self.v[n] + sq
            elif cfg.server_optimizer == "yogi":
                v = self.v[n] - (1 - cfg.beta2) * sq * torch.sign(self.v[n] - sq)
            else:
                v = cfg.beta2 * self.v[n] + (1 - cfg.beta2) * sq
            mean[n] = x + cfg.server_lr * m / (torch.sqrt(v) + cfg.tau)
            self.m[n], self.v[n] = m, v
        self.state = mean

    def observe(self, rnd, outcomes) -> None:
        if self.aggregated(outcomes):  # the server's optimizer arithmetic takes simulated time too
            self.c.server_work.charge("server_optimizer", float(OPTIMIZER_FLOPS * self.c.recipe.cost(self.spec).params))

    def eval_targets(self) -> list[EvalTarget]:
        return [EvalTarget("full", self.spec, self.state, self.c.recipe)]
