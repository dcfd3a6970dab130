"""FedDF (Lin et al., "Ensemble Distillation for Robust Model Fusion in Federated Learning", NeurIPS
2020) over heterogeneous prototypes, as AdapterFL's baseline.

- Prototypes S, M, L (``prototypes``, ``width`` as in AdapterFL); each has its own global model. The
  selector is AdapterFL's (``algorithms.adapterfl.select_by_fit``, with its ``fit`` rule: by
  parameters or by training memory): a device trains the prototype of its level, every prototype that fits some selectable device gets at least one client per round.
- Local training: plain cross-entropy with the scenario's ``local`` settings.
- Server, every round: each prototype's received models are averaged (FedAvg, weighted by data size
  by default); that average is the student. The teachers are all received local models, of every
  prototype; the ensemble's prediction is the mean of their logits (FedDF's eq.) computed once per
  round on the proxy set, with each teacher in eval mode. Every prototype (also one nobody trained
  this round) is then distilled for ``distill_steps`` steps of ``distill_batch_size`` unlabeled proxy
  samples: T^2 KL(softmax(ensemble / T) || softmax(student / T)) with batchmean reduction, T = 1,
  Adam lr 1e-3 with a cosine schedule over the steps (the reference code's choices); the code's early
  stopping on a validation split is not reproduced (a fixed number of steps instead). Batches cycle
  through seeded permutations of the proxy set.
- Proxy set: ``proxy_fraction`` (1 % as in AdapterFL's experiments) of the train set, held out of the
  clients' data (``ctx.proxy_indices``); labels are never read.
- Server work ``distill`` is charged: the teachers' forward passes over the proxy set plus 3 x the
  students' forward FLOPs per distilled sample. System-only runs charge the same FLOPs for a proxy set
  of ``proxy_fraction`` of the clients' samples and train nothing.
- Evaluation: ``acc_S``, ``acc_M``, ``acc_L`` (``acc_avg`` their mean) and ``acc_full`` (the prototype
  with the most parameters).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import torch

from iotfl_sim.algorithms.adapterfl import LETTERS, ModelPoolRounds
from iotfl_sim.algorithms.base import Assignment, EvalTarget, InferWork, Outcome, TrainWork, Update
from iotfl_sim.algorithms.common import contributions
from iotfl_sim.fl.aggregate import aggregate_nested
from iotfl_sim.fl.objectives import kd_term
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec
from iotfl_sim.fl.torch_seed import seed_torch
from iotfl_sim.scenario.algorithms import FedDFConfig
from iotfl_sim.seeding import int_seed, stream

State = dict[str, torch.Tensor]


class FedDF(ModelPoolRounds):
    Config = FedDFConfig
    checkpointed = ("states",)

    def __init__(self, cfg: FedDFConfig) -> None:
        super().__init__(cfg)
        self.cfg: FedDFConfig = cfg
        self._skeletons: dict[tuple[ModelRecipe, SubmodelSpec], torch.nn.Module] = {}

    def setup(self, ctx) -> None:
        self.ctx = ctx
        cfg = self.cfg
        self.order_pool([
            (LETTERS[j], replace(ctx.recipe, family=fam, global_rate=cfg.width), SubmodelSpec(rate=cfg.width, name=LETTERS[j]))
            for j, fam in enumerate(cfg.prototypes)
        ])  # fmt: skip
        self.states = {x: ctx.initial_state(self.recipes[x], self.specs[x]) for x in self.labels}
        if ctx.data is not None and (ctx.proxy_indices is None or len(ctx.proxy_indices) == 0):
            raise ValueError("feddf: distillation needs a proxy set; set algorithm.proxy_fraction > 0")


    def payload(self, assignment: Assignment) -> State:
        return self.states[assignment.level]

    def _model(self, label: str) -> torch.nn.Module:
        key = (self.recipes[label], self.specs[label])
        if key not in self._skeletons:
            self._skeletons[key] = self.recipes[label].build(self.specs[label])
        return self._skeletons[key]

    def aggregate(self, rnd: int, updates: list[Update]) -> None:
        if not updates:
            return
        for x in self.labels:
            mine = [u for u in updates if u.assignment.level == x]
            if mine:
                self.states[x] = aggregate_nested(self.states[x], contributions(mine, self.cfg.weighting))
        if self.cfg.distill_steps > 0 and self.c.data is not None:
            self.distill(rnd, updates)

    def _proxy_size(self) -> int:
        if self.c.proxy_indices is not None:
            return len(self.c.proxy_indices)
        return max(1, int(round(self.cfg.proxy_fraction * float(np.sum(self.c.samples_per_device)))))

    def charge_distill(self, teachers: list[str]) -> None:
        """Teachers' forward passes over the proxy set plus the students' Adam steps (priced as SGD with momentum:
        one state buffer where Adam keeps two)."""
        cfg, n_proxy, work = self.cfg, self._proxy_size(), self.c.server_work
        bs = min(cfg.distill_batch_size, n_proxy)
        for t in teachers:
            work.charge("distill", InferWork(self.recipes[t], self.specs[t], n_proxy, cfg.distill_batch_size))
        for x in self.labels:
            work.charge("distill", TrainWork(self.recipes[x], self.specs[x], bs * cfg.distill_steps, 1, bs, 0.9))

    def observe(self, rnd: int, outcomes: list[Outcome]) -> None:
        # system-only runs train nothing (aggregate is not called): charge the distillation a real run does
        if self.c.data is None and self.cfg.distill_steps > 0:
            teachers = [(o.trained or o.assignment).level for o in outcomes if o.status == "completed"]
            if teachers:
                self.charge_distill(teachers)

    def distill(self, rnd: int, updates: list[Update]) -> None:
        ctx = self.c
        self.charge_distill([u.assignment.level for u in updates])
        x_proxy = ctx.data.x_train[torch.as_tensor(ctx.proxy_indices)]
        teacher = self.ensemble_logits(updates, x_proxy)
        for i, x in enumerate(self.labels):
            self.states[x] = self.distill_one(x, x_proxy, teacher, int_seed(ctx.seed, "feddf_distill", rnd, i))

    @torch.no_grad()
    def ensemble_logits(self, updates: list[Update], x: torch.Tensor) -> torch.Tensor:
        """Mean of the received local models' logits on ``x`` (eval mode, batches of distill_batch_size)."""
        total = None
        for u in updates:
            model = self._model(u.assignment.level)
            model.load_state_dict(u.state, strict=True)
            model.eval()
            out = torch.cat([model(x[s : s + self.cfg.distill_batch_size]) for s in range(0, len(x), self.cfg.distill_batch_size)])
            total = out.double() if total is None else total + out.double()
        assert total is not None
        return (total / len(updates)).float()

    def distill_one(self, label: str, x: torch.Tensor, teacher: torch.Tensor, seed: int) -> State:
        cfg = self.cfg
        model = self._model(label)
        model.load_state_dict(self.states[label], strict=True)
        model.train()
        opt = torch.optim.Adam(model.parameters(), lr=cfg.distill_lr)
        bs = min(cfg.distill_batch_size, len(x))
        rng = stream(seed, "feddf_batches")
        order = np.empty(0, dtype=np.int64)
        with torch.random.fork_rng():
            seed_torch(seed)  # dropout in the student
            for step in range(cfg.distill_steps):
                if len(order) < bs:
                    order = np.concatenate([order, rng.permutation(len(x))])
                idx, order = torch.as_tensor(order[:bs]), order[bs:]
                if cfg.cosine:
                    for g in opt.param_groups:
                        g["lr"] = 0.5 * cfg.distill_lr * (1 + math.cos(math.pi * step / cfg.distill_steps))
                loss = kd_term(model(x[idx]), teacher[idx], cfg.temperature, "batchmean")
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
        return {k: v.detach().clone() for k, v in model.state_dict().items()}

    def eval_targets(self) -> list[EvalTarget]:
        out = [EvalTarget(x, self.specs[x], self.states[x], self.recipes[x]) for x in self.labels]
        big = max(self.labels, key=lambda x: self.recipes[x].cost(self.specs[x]).params)
        out.append(EvalTarget("full", self.specs[big], self.states[big], self.recipes[big], is_level=False))
        return out
