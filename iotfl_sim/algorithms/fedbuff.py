"""FedBuff (Nguyen et al., "Federated Learning with Buffered Asynchronous Aggregation", AISTATS 2022,
Algorithm 1): devices train asynchronously and send their change Delta_i = x_tau - y_i (downloaded minus
trained); the server keeps a buffer and, once K updates are in, takes one step

    x <- x - eta_g * (1/K) sum_i s(staleness_i) Delta_i

(with server momentum: the heavy-ball buffer m <- mu m + that average, x <- x - eta_g m, PyTorch's SGD
momentum, which FedBuff's released FLSim config uses).

Choices the paper leaves open or that this simulator makes:

- Staleness counts server steps (buffer flushes) between a device's download and the flush its update joins,
  as FLSim's sequence numbers do; s is 1/sqrt(1 + staleness) by default (the paper's scaling), any
  ``Staleness`` by option.
- The sum is divided by K, as the paper writes (FLSim sums and folds 1/K into its server learning rate: its
  lr = this server_lr / K). The staleness weights are not renormalised, so stale updates shrink the step.
- ``concurrency`` devices train at once (``server.concurrency``; FedBuff studies hundreds to a thousand); a
  finished or failed device is replaced at once by one chosen uniformly among idle selectable devices whose
  declared memory holds the full model (FLSim samples all users uniformly; with many more devices than
  concurrency the two nearly agree). Updates beyond any staleness are kept (FLSim's max_staleness is infinite).
- Every floating-point tensor takes the step (BatchNorm's running statistics too); integer tensors keep the
  server's values. The step runs in float64 and rounds once.
- Defaults: K = 10, server_lr 1 and momentum 0, which with constant staleness and K = concurrency updates from
  the same version is FedAvg (plain mean) over the buffer; the released Sent140 config uses server_lr 0.7 in
  FLSim's scaling (7 here with K = 10) with momentum 0.9: tune it per task.
"""

from __future__ import annotations

import torch

from iotfl_sim.algorithms.async_common import AsyncFullModel
from iotfl_sim.algorithms.base import Outcome, Update
from iotfl_sim.scenario.algorithms import FedBuffConfig

STEP_FLOPS = 4  # per parameter and flush beyond the averaging the engine charges: delta 1, momentum 2, step 1


class FedBuff(AsyncFullModel):
    Config = FedBuffConfig
    checkpointed = ("state", "momentum")

    def __init__(self, cfg: FedBuffConfig) -> None:
        super().__init__(cfg)
        self.cfg: FedBuffConfig = cfg
        self.momentum: dict[str, torch.Tensor] = {}  # the server's heavy-ball buffer (float64), from the first step

    def buffer_size(self) -> int:
        return self.cfg.buffer_size

    def apply(self, version: int, updates: list[Update]) -> None:
        cfg = self.cfg
        weights = [cfg.staleness.weight(u.staleness) for u in updates]
        out = {}
        for k, x in self.state.items():
            if not torch.is_floating_point(x):
                out[k] = x
                continue
            step = torch.zeros_like(x, dtype=torch.float64)
            for u, w in zip(updates, weights, strict=True):
                assert u.base is not None, "the engine passes each update's downloaded weights"
                step += w * (u.base[k].double() - u.state[k].double())
            step /= cfg.buffer_size
            if cfg.server_momentum > 0:
                m = self.momentum.get(k)
                step = step if m is None else cfg.server_momentum * m + step
                self.momentum = {**self.momentum, k: step}
            out[k] = (x.double() - cfg.server_lr * step).to(x.dtype)
        self.state = out

    def observe(self, rnd: int, outcomes: list[Outcome]) -> None:
        if self.aggregated(outcomes):  # the engine folded a buffer (system-only runs too, where apply does not run)
            self.c.server_work.charge("server_step", float(STEP_FLOPS * self.c.recipe.cost(self.spec).params))
