"""FedAsync (Xie, Koyejo, Gupta, "Asynchronous Federated Optimization", OPT 2020, Algorithm 1): the server
mixes each arriving model into the global one as it comes,

    x_t = (1 - alpha_t) x_{t-1} + alpha_t x_new,      alpha_t = alpha * s(t - tau),

where tau is the version the device downloaded and s the staleness function (constant, polynomial
(t - tau + 1)^-a or hinge; ``Staleness``). Devices minimise f(x) + rho/2 ||x - x_tau||^2 from the model they
downloaded (Algorithm 1's regularised local problem).

Choices the paper leaves open or that this simulator makes:

- The paper's experiments draw staleness at random; here it is whatever the fleet makes it: ``concurrency``
  devices train at once (``server.concurrency``), each new task goes to a device chosen uniformly among the
  idle, selectable ones whose declared memory holds the full model (the paper's scheduler "triggers idle
  workers"), and staleness counts the versions applied between a device's download and its update.
- Local work is the scenario's ``local`` block (epochs, batch size, learning rate), the same for every task; the
  paper lets the number of local iterations vary between H_min and H_max.
- Every floating-point tensor is mixed, BatchNorm's running statistics included; integer tensors (BatchNorm's
  counters) keep the server's values. Mixing runs in float64 and rounds once.
- Defaults are the paper's CIFAR-10 ones: alpha 0.6 (0.9 is its fast setting), polynomial a = 0.5 (hinge:
  a = 10, b = 4), rho = 0.005.
- The server's work (mixing, about 3 FLOPs per parameter) is charged as aggregation by the engine.
"""

from __future__ import annotations

import torch

from iotfl_sim.algorithms.async_common import AsyncFullModel
from iotfl_sim.algorithms.base import Assignment, Update
from iotfl_sim.fl.objectives import LocalObjective
from iotfl_sim.scenario.algorithms import FedAsyncConfig


class FedAsync(AsyncFullModel):
    Config = FedAsyncConfig
    checkpointed = ("state",)

    def __init__(self, cfg: FedAsyncConfig) -> None:
        super().__init__(cfg)
        self.cfg: FedAsyncConfig = cfg

    def buffer_size(self) -> int:
        return 1

    def local_objective(self, assignment: Assignment) -> LocalObjective:
        return LocalObjective(prox_mu=self.cfg.rho)

    def apply(self, version: int, updates: list[Update]) -> None:
        (u,) = updates
        alpha = self.cfg.alpha * self.cfg.staleness.weight(u.staleness)
        self.state = mix(self.state, u.state, alpha)


def mix(x: dict[str, torch.Tensor], y: dict[str, torch.Tensor], alpha: float) -> dict[str, torch.Tensor]:
    """(1 - alpha) x + alpha y for every floating-point tensor (float64, rounded once); the rest keep x's."""
    out = {}
    for k, v in x.items():
        if torch.is_floating_point(v) and k in y:
            out[k] = ((1.0 - alpha) * v.double() + alpha * y[k].double()).to(v.dtype)
        else:
            out[k] = v
    return out
