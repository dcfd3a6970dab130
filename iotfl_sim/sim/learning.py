"""The real PyTorch side of a round, after its protocol was simulated: the accepted tasks trained through the
executor, and the method's models evaluated. Nothing here touches the simulated clock."""

from __future__ import annotations

import math
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from iotfl_sim import faults
from iotfl_sim.algorithms.base import Assignment, EvalTarget, Outcome, State, Strategy, Update
from iotfl_sim.exec.base import EvalJob
from iotfl_sim.exec.glibc_heap import release_free_heap
from iotfl_sim.fl.evaluate import eval_prototype
from iotfl_sim.fl.submodel import SharedCopies, slice_state
from iotfl_sim.fl.train import TrainJob
from iotfl_sim.scenario.model import Scenario
from iotfl_sim.seeding import int_seed

if TYPE_CHECKING:
    from iotfl_sim.sim.setup import NumericsSetup


@dataclass
class TrainTask:
    """A finished task to train for real: its outcome, the round (or async dispatch wave) that keys its seed and
    learning rate, and what the server knows of it (staleness, weight, the weights its device downloaded)."""

    outcome: Outcome
    rnd: int
    base: State | None = None  # None: the weights the strategy would send now (a synchronous round's)
    staleness: int = 0
    weight: float = 1.0
    upload_bytes: float = math.nan  # the bytes its upload was priced at (``Task.upload_bytes``)


class Learning:
    """Trains and evaluates for one run: which device trains which submodel from which weights with which seed
    (never how long it took) decides the numbers."""

    def __init__(self, sc: Scenario, numerics: NumericsSetup, strategy: Strategy, executor: Any, trim_heap: bool = True) -> None:
        self.sc = sc
        self.trim_heap = trim_heap  # return freed heap pages after each phase (exec.glibc_heap.heap_tuning_pays)
        self.numerics = numerics
        self.strategy = strategy
        self.executor = executor

    def train_tasks(self, tasks: list[TrainTask]) -> list[Update]:
        """Each task's local training, from the weights its device received (``TrainTask.base``, else what it
        would receive now), as ``Update``s in order; their ``staleness`` and ``base`` as the tasks give them."""
        loc = self.sc.local
        jobs = []
        copies = SharedCopies()
        for i, t in enumerate(tasks):
            o, rnd = t.outcome, t.rnd
            b = o.trained or o.assignment
            d = b.device
            recipe = self.strategy.recipe_for(b)
            sent = self.download(o.assignment) if t.base is None else t.base
            weights = slice_state(sent, recipe.shapes(b.spec))
            jobs.append(
                TrainJob(
                    key=i,
                    recipe=recipe,
                    spec=b.spec,
                    weights=copies.of(weights),
                    indices=self.numerics.parts[d],
                    epochs=self.sc.task_epochs(),
                    batch_size=loc.batch_size,
                    lr=loc.lr_schedule.lr_at(loc.lr, rnd),
                    momentum=loc.momentum,
                    weight_decay=loc.weight_decay,
                    clip_grad_norm=loc.clip_grad_norm,
                    label_mask=self.numerics.labels_per_device[d],
                    seed=int_seed(self.sc.seed, "train", d, rnd),
                    objective=self.strategy.local_objective(b),
                )
            )
        faults.hit("round_train")
        results = self.executor.run(jobs)
        if self.trim_heap:
            release_free_heap()  # the training's temporaries (exec.glibc_heap says why)
        labels = self.numerics.labels_per_device
        return [
            Update(
                t.outcome.trained or t.outcome.assignment, r.state, r.num_samples, labels[t.outcome.assignment.device],
                r.loss, staleness=t.staleness, weight=t.weight, base=t.base,
            )
            for t, r in zip(tasks, results, strict=True)
        ]

    def download(self, a: Assignment) -> dict[str, torch.Tensor]:
        """The weights a task's device receives: what its wire sends, else the strategy's payload."""
        sent = self.strategy.wire.payload(a) if self.strategy.wire is not None else None
        return self.strategy.payload(a) if sent is None else sent

    def evaluate(self) -> dict[str, float]:
        """``acc_<label>`` of every evaluation target, ``loss_full``, and ``acc_avg`` over the method's levels."""
        return self.start_evaluation().result()

    def start_evaluation(self, overlap: bool = False) -> Evaluation:
        """``evaluate``, its result read from the returned ``Evaluation``. With ``overlap`` (an executor that
        ``exec.base.overlaps``) it runs while the caller goes on: its jobs hold copies of the weights, which the
        next aggregation may replace, and the models' prototypes are built here first (``fl.evaluate.eval_prototype``:
        no evaluation thread then draws from torch's global RNG)."""
        targets = self.strategy.eval_targets()
        figures = self.strategy.eval_figures()  # the method's own, from the weights as they are now
        keys, jobs = [], {}
        for target in targets:
            # the same weights under another name (HeteroFL's level a is the full model) are evaluated once
            weights = tuple((v.data_ptr(), tuple(v.shape)) for v in target.state.values())
            key = (target.recipe, replace(target.spec, name=""), weights)
            keys.append(key)
            if key not in jobs:
                state = {k: v.clone() for k, v in target.state.items()} if overlap else target.state
                jobs[key] = EvalJob(target.recipe, target.spec, state, self.sc.server.eval_batch_size)
        if overlap:
            for job in jobs.values():
                eval_prototype(job.recipe, job.spec)
            pending = self.executor.evaluate_later(list(jobs.values()))
        else:
            pending = Future()
            pending.set_result(self.executor.evaluate(list(jobs.values())))
        return Evaluation(targets, keys, list(jobs), pending, self.trim_heap, figures)


@dataclass
class Evaluation:
    """An evaluation started by ``Learning.start_evaluation``: ``result()`` waits for it and names its figures."""

    targets: list[EvalTarget]
    keys: list[tuple]
    unique: list[tuple]  # the keys of the jobs, in the order the executor got them
    pending: Future
    trim_heap: bool = True  # Learning.trim_heap
    figures: dict[str, float] | None = None  # the strategy's ``eval_figures``

    def result(self) -> dict[str, float]:
        out: dict[str, float] = {}
        levels = []
        cache = dict(zip(self.unique, self.pending.result(), strict=True))
        for target, key in zip(self.targets, self.keys, strict=True):
            acc, loss = cache[key]
            out[f"acc_{target.label}"] = acc
            if target.label == "full":
                out["loss_full"] = loss
            if target.is_level:
                levels.append(acc)
        if levels:
            out["acc_avg"] = float(np.mean(levels))
        out.update(self.figures or {})
        if self.trim_heap:
            release_free_heap()  # the evaluation's feature maps
        return out
