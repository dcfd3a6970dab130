"""FedProx (Li et al., "Federated Optimization in Heterogeneous Networks", MLSys 2020): FedAvg whose devices
minimise their local loss plus the proximal term ``(mu / 2) * ||w - w^t||^2``, ``w^t`` being the global
model they received.

Choices the paper leaves open or that this simulator makes:

- Everyone trains the full model; devices whose declared memory cannot hold it are never selected (as
  ``fedavg``'s default). Selection is uniform among selectable devices.
- Aggregation: the average of the returned models weighted by local data size (``weighting: data``; the
  paper's Algorithm 2 writes a plain mean over sampled devices, ``weighting: count``).
- The proximal term covers every trainable parameter (not BatchNorm's running statistics) and is added to
  the loss of every local step (``fl.train.proximal_term``); its cost on the device (about 4 FLOPs per
  parameter per step, under 1 % of a step at batch 16) is not priced.
- Not modelled: the paper's "gamma-inexact" partial work (stragglers sending what they trained so far):
  here a device that misses the deadline fails its task as in every method.

Written only against the public method API (``iotfl_sim.strategy``); ``examples/fedprox.py`` is the same
method as a user would write it in their own file, and a test checks that the two give the same numbers.
"""

from __future__ import annotations

import numpy as np

from iotfl_sim.scenario.algorithms import FedProxConfig
from iotfl_sim.strategy import (
    Assignment,
    EvalTarget,
    Exclusive,
    FleetView,
    LocalObjective,
    Strategy,
    SubmodelSpec,
    Update,
    average,
    select_uniform,
)


class FedProx(Exclusive, Strategy):
    Config = FedProxConfig
    checkpointed = ("state",)

    def setup(self, ctx) -> None:
        self.ctx = ctx
        self.spec = SubmodelSpec(1.0, name="full")
        self.state = ctx.initial_state(ctx.recipe, self.spec)
        self.eligible = self.fits(ctx.recipe, self.spec, ctx.declared_free_memory)

    def select(self, rnd: int, fleet: FleetView, rng: np.random.Generator) -> list[Assignment]:
        chosen = select_uniform(fleet, self.c.clients_per_round, rng, self.eligible)
        return [Assignment(int(d), self.spec, level="full") for d in chosen]

    def payload(self, assignment: Assignment):
        return self.state

    def local_objective(self, assignment: Assignment) -> LocalObjective:
        return LocalObjective(prox_mu=self.cfg.mu)

    def aggregate(self, rnd: int, updates: list[Update]) -> None:
        self.state = average(self.state, updates, self.cfg.weighting)

    def eval_targets(self) -> list[EvalTarget]:
        return [EvalTarget("full", self.spec, self.state, self.c.recipe)]
