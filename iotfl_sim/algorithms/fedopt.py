"""FedOpt (Reddi et al., "Adaptive Federated Optimization", ICLR 2021, Algorithm 2): FedAdam, FedYogi and
FedAdagrad. Devices train as in FedAvg; the server treats the average client change as a pseudo-gradient
and applies an adaptive optimizer to it:

    Delta_t = average_i (x_i - x_t)                          (x_i: client i's trained model)
    m_t     = beta1 m_{t-1} + (1 - beta1) Delta_t
    v_t     = v_{t-1} + Delta_t^2                            adagrad
            = v_{t-1} - (1 - beta2) Delta_t^2 sign(v_{t-1} - Delta_t^2)    yogi
            = beta2 v_{t-1} + (1 - beta2) Delta_t^2          adam
    x_{t+1} = x_t + eta m_t / (sqrt(v_t) + tau)

Choices the paper leaves open or that this simulator makes:

- ``m`` starts at 0 and ``v`` at ``tau^2`` (Algorithm 2 asks ``v_{-1} >= tau^2``); no bias correction (the
  paper's algorithm has none).
- The optimizer updates the trainable parameters; BatchNorm's running statistics take the plain average of
  the clients' (a pseudo-gradient of running statistics has no meaning), integer counters keep the server's.
- ``weighting: data`` averages client models by local data size, as FedAvg here; ``count`` is the plain mean
  Algorithm 2 writes. Everyone trains the full model; devices whose declared memory cannot hold it are never
  selected.
- Defaults: beta1 0.9, beta2 0.99 and tau 1e-3 as the paper recommends; the server learning rate must be
  tuned per task (the paper searches a grid), 0.01 is only a start.
- The server's optimizer arithmetic is charged as server work after aggregation (``server_optimizer``:
  ``OPTIMIZER_FLOPS`` per parameter, counted from the update rule above), in system-only runs too.
- Under a hierarchy (not in the paper) the optimizer is the cloud's: each gateway only averages its devices'
  models (``gateway_aggregate``, ``weighting`` as above), and at each cloud round the cloud takes the average
  of the gateways' models weighted by the samples each aggregated (HierFAVG's) as the x_i above and steps once:
  Delta_t is the cloud round's change, and ``m``, ``v`` stay the cloud's. One gateway with k1 = k2 = 1 is flat
  FedOpt bit for bit.
- ``server.mode: async`` (not in the paper), in FedBuff's buffered form (``sim.buffered_async``): FedBuff's server
  step is "agnostic to the choice of optimizer" (its AISTATS 2022 abstract), and here the optimizer is FedOpt's.
  Each model version averages its ``server.buffer_size`` updates (``weighting`` as above), a stale one first moved
  onto the current model by its delta weighted by ``server.staleness``, so Delta_t = mean_i s_i (x_i - x_downloaded,i)
  is FedBuff's buffered delta, and the optimizer steps once on it: one step, and one ``server_optimizer`` charge,
  per version; ``m`` and ``v`` advance per version as they do per round.

Written only against the public method API (``iotfl_sim.strategy``); ``examples/fedopt.py`` is the same method
as a user would write it, and a test checks that the two give the same numbers.
"""

from __future__ import annotations

import numpy as np
import torch

from iotfl_sim.scenario.algorithms import FedOptConfig
from iotfl_sim.strategy import (
    Assignment,
    EvalTarget,
    Exclusive,
    FleetView,
    Outcome,
    State,
    Strategy,
    SubmodelSpec,
    Tier,
    Update,
    average,
    average_tiers,
    select_uniform,
)

OPTIMIZER_FLOPS = 13  # per parameter and round: delta 1, m 3, Delta^2 1, v 3, sqrt 1, + tau 1, / 1, x eta 1, + x 1


def server_step(
    x: torch.Tensor, delta: torch.Tensor, m: torch.Tensor, v: torch.Tensor, cfg: FedOptConfig
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One step of Algorithm 2 for one tensor: (x_{t+1}, m_t, v_t)."""
    m = cfg.beta1 * m + (1 - cfg.beta1) * delta
    sq = delta * delta
    if cfg.server_optimizer == "adagrad":
        v = v + sq
    elif cfg.server_optimizer == "yogi":
        v = v - (1 - cfg.beta2) * sq * torch.sign(v - sq)
    else:
        v = cfg.beta2 * v + (1 - cfg.beta2) * sq
    return x + cfg.server_lr * m / (torch.sqrt(v) + cfg.tau), m, v


class FedOpt(Exclusive, Strategy):
    Config = FedOptConfig
    checkpointed = ("state", "m", "v")

    def setup(self, ctx) -> None:
        self.ctx = ctx
        self.spec = SubmodelSpec(1.0, name="full")
        self.state = ctx.initial_state(ctx.recipe, self.spec)
        self.eligible = self.fits(ctx.recipe, self.spec, ctx.declared_free_memory)
        with torch.device("meta"):
            names = [n for n, p in ctx.recipe.build(self.spec).named_parameters() if p.requires_grad]
        self.trained = [n for n in names if n in self.state]  # empty in system-only runs
        tau2 = self.cfg.tau**2
        self.m = {n: torch.zeros_like(self.state[n]) for n in self.trained}
        self.v = {n: torch.full_like(self.state[n], tau2) for n in self.trained}

    def select(self, rnd: int, fleet: FleetView, rng: np.random.Generator) -> list[Assignment]:
        chosen = select_uniform(fleet, self.c.clients_per_round, rng, self.eligible)
        return [Assignment(int(d), self.spec, level="full") for d in chosen]

    def payload(self, assignment: Assignment):
        return self.state

    def aggregate(self, rnd: int, updates: list[Update]) -> None:
        self.step(average(self.state, updates, self.cfg.weighting))

    def step(self, mean: State) -> None:
        """Algorithm 2's server update from the average ``mean`` of the models (buffers keep that plain average)."""
        for n in self.trained:
            x = self.state[n]
            mean[n], self.m[n], self.v[n] = server_step(x, mean[n] - x, self.m[n], self.v[n], self.cfg)
        self.state = mean

    def gateway_aggregate(self, rnd: int, updates: list[Update]) -> None:
        """A gateway of a hierarchy averages only: the optimizer is the cloud's (``combine``)."""
        self.state = average(self.state, updates, self.cfg.weighting)

    def combine(self, rnd: int, tiers: list[Tier]) -> None:
        """The cloud steps its optimizer on the gateways' models averaged by the samples each aggregated."""
        if tiers:
            self.charge_step()
            if self.state:
                self.step(average_tiers(self.state, tiers))

    def observe(self, rnd: int, outcomes: list[Outcome]) -> None:
        if self.c.tier == "server" and self.aggregated(outcomes):  # a gateway's round: combine charges the cloud's
            self.charge_step()

    def charge_step(self) -> None:
        self.c.server_work.charge("server_optimizer", float(OPTIMIZER_FLOPS * self.c.recipe.cost(self.spec).params))

    def eval_targets(self) -> list[EvalTarget]:
        return [EvalTarget("full", self.spec, self.state, self.c.recipe)]
