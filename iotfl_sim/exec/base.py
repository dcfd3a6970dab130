"""The executor seam: where real training and evaluation run. The engine only sees ``run`` and ``evaluate``.

Every executor does the same work per job through one ``Worker`` (a process's data, cached model
skeletons and torch thread count), so results are the same bits whichever executor ran them, as long
as the thread count is the same: CPU kernels split reductions by thread, so a job trained on one
thread and on two differs in the last bits. ``executor.threads`` pins it (default 1).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn

from iotfl_sim import faults
from iotfl_sim.fl.data.images import Images, subset
from iotfl_sim.fl.evaluate import (
    Figures,
    batch_figures_group,
    batch_scores_group,
    combine,
    eval_prototype,
    has_batch_norm,
    load_statistics,
    prepared,
    running_statistics,
    shared_layers,
)
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec
from iotfl_sim.fl.train import TrainJob, TrainResult, train_local

State = dict[str, torch.Tensor]
Scores = list[tuple[int, float]]  # (correct, summed loss) per test batch
WORKER_TASKS = ("train", "calibrate", "score", "evaluate_group")  # the Worker methods executors send work to


@dataclass
class NumericData:
    """The tensors every worker needs, shared once per run (never pickled per job)."""

    x_train: Images
    y_train: torch.Tensor
    calib_x: Images  # static-BN calibration inputs
    x_test: Images
    y_test: torch.Tensor

    def share_memory(self) -> NumericData:
        for t in (self.x_train, self.y_train, self.calib_x, self.x_test, self.y_test):
            t.share_memory_()
        return self


@dataclass(frozen=True)
class EvalJob:
    """Evaluate ``state`` as submodel ``spec`` (static BN calibrated first), at ``batch_size``."""

    recipe: ModelRecipe
    spec: SubmodelSpec
    state: State
    batch_size: int


class Executor(Protocol):
    def run(self, jobs: list[TrainJob]) -> list[TrainResult]:
        """Train every job; results in the order of ``jobs``. Must not depend on simulated time."""
        ...

    def evaluate(self, jobs: list[EvalJob]) -> list[tuple[float, float]]:
        """(accuracy, mean loss) of every job, in the order of ``jobs``."""
        ...

    def close(self) -> None: ...


def missing_methods(executor: Any) -> list[str]:
    """The methods of ``Executor`` that ``executor`` lacks (or has as something not callable): [] for an executor."""
    return [m for m in ("run", "evaluate", "close") if not callable(getattr(executor, m, None))]


def overlaps(executor: Any, setting: bool | str = True) -> bool:
    """Does ``executor`` evaluate beside the caller's next work, under ``executor.overlap_eval`` = ``setting``?
    Executors that can say ``overlaps = True`` and have ``evaluate_later(jobs) -> concurrent.futures.Future`` of
    ``evaluate``'s result, whose jobs must hold weights nobody changes until the result is read
    (``sim.learning.Learning.start_evaluation`` copies them). ``"auto"``: only those that say ``overlap_pays``
    (the thread executor, measured in ``benchmarks/overlap_eval.md``; the fused trainer on CUDA, whose GPU trains
    while the host's threads evaluate)."""
    can = bool(getattr(executor, "overlaps", False))
    if setting == "auto":
        return can and bool(getattr(executor, "overlap_pays", False))
    return can and bool(setting)


class Worker:
    """One process's side of an executor: the shared data, a skeleton per submodel spec, the thread count."""

    def __init__(self, data: NumericData, threads: int) -> None:
        self.data = data
        self.threads = threads
        self._skeletons: dict[tuple[ModelRecipe, SubmodelSpec], nn.Module] = {}

    def skeleton(self, recipe: ModelRecipe, spec: SubmodelSpec) -> nn.Module:
        key = (recipe, spec)
        model = self._skeletons.get(key)
        if model is None:
            model = self._skeletons[key] = recipe.build(spec)
        return model

    def train(self, job: TrainJob) -> TrainResult:
        faults.hit("train")
        d = self.data
        return train_local(self.skeleton(job.recipe, job.spec), job, d.x_train, d.y_train, self.skeleton)

    def calibrate(self, jobs: list[EvalJob], start: int, stop: int) -> list[Figures]:
        """Per job, the static-BN figures of calibration samples [start, stop) (batch-aligned); ``jobs`` is one
        ``sharing_groups`` group, run together. ``fl.evaluate.running_statistics`` turns the slices' figures into
        the statistics."""
        faults.hit("eval")
        models = [prepared(j.recipe, j.spec, j.state) for j in jobs]
        return batch_figures_group(models, [j.state for j in jobs], subset(self.data.calib_x, slice(start, stop)), jobs[0].batch_size)

    def score(self, jobs: list[EvalJob], stats: list[State], start: int, stop: int) -> list[Scores]:
        """Per job, per-batch (correct, loss sum) on test samples [start, stop) with the calibrated statistics."""
        states = [{**j.state, **st} for j, st in zip(jobs, stats, strict=True)]
        models = [prepared(j.recipe, j.spec, st) for j, st in zip(jobs, states, strict=True)]
        d = self.data
        return batch_scores_group(models, states, subset(d.x_test, slice(start, stop)), d.y_test[start:stop], jobs[0].batch_size)

    def evaluate_group(self, jobs: list[EvalJob]) -> list[Scores]:
        """``calibrate`` over all calibration samples, then ``score`` over the whole test set, each model loaded once."""
        faults.hit("eval")
        d = self.data
        models = [prepared(j.recipe, j.spec, j.state) for j in jobs]
        states = [j.state for j in jobs]
        for model, figures in zip(models, batch_figures_group(models, states, d.calib_x, jobs[0].batch_size), strict=True):
            load_statistics(model, running_statistics([figures]))
        return batch_scores_group(models, states, d.x_test, d.y_test, jobs[0].batch_size)

    def evaluate(self, jobs: list[EvalJob]) -> list[tuple[float, float]]:
        return parallel_evaluate(jobs, len(self.data.calib_x), len(self.data.y_test), 1, self.map)

    def call(self, method: str, args: tuple) -> Any:
        """One task: ``method`` of this worker (``WORKER_TASKS``) on ``args``, what every executor's workers run
        (in this process, a pool worker, a thread or a Ray actor) for ``parallel_evaluate`` and training."""
        if method not in WORKER_TASKS:
            raise ValueError(f"{method!r} is not a worker task ({', '.join(WORKER_TASKS)})")
        return getattr(self, method)(*args)

    def map(self, method: str, tasks: list[tuple]) -> list:
        """``call`` on every task's arguments, in order (what executors do in parallel)."""
        return [self.call(method, t) for t in tasks]

    def clear(self) -> None:
        self._skeletons.clear()


def batch_aligned_slices(n: int, batch_size: int, parts: int) -> list[tuple[int, int]]:
    """Split [0, n) into at most ``parts`` contiguous slices that start on batch boundaries."""
    batches = -(-n // batch_size)
    parts = max(1, min(parts, batches))
    bounds = [round(i * batches / parts) * batch_size for i in range(parts + 1)]
    return [(min(a, n), min(b, n)) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if min(a, n) < min(b, n)]


def sharing_groups(jobs: list[EvalJob]) -> list[list[int]]:
    """Indices of ``jobs`` evaluated together: models that share their first layers (``fl.evaluate.shared_layers``)
    go in one group, where their common prefix runs once per batch; each (recipe, spec) at most once per group,
    since a worker holds one evaluation skeleton per spec. Reads the models' prototypes, not a thread's skeletons."""
    skeletons = [eval_prototype(j.recipe, j.spec) for j in jobs]
    groups: list[list[int]] = []
    for i, job in enumerate(jobs):
        for g in groups:
            first = jobs[g[0]]
            if job.batch_size != first.batch_size or any((jobs[k].recipe, jobs[k].spec) == (job.recipe, job.spec) for k in g):
                continue
            if any(shared_layers(skeletons[i], skeletons[k], job.state, jobs[k].state) > 0 for k in g):
                g.append(i)
                break
        else:
            groups.append([i])
    return groups


def parallel_evaluate(
    jobs: list[EvalJob], n_calib: int, n_test: int, parts: int, run: Callable[[str, list[tuple]], list]
) -> list[tuple[float, float]]:
    """(accuracy, mean loss) of every job. ``run(method, tasks)`` applies a ``Worker`` method to each task's
    arguments (in parallel where it can) and returns the results in task order.

    With ``parts`` = 1, one ``evaluate_group`` task per sharing group. Otherwise two passes, each cut into at most
    ``parts`` batch-aligned slices per group: static-BN figures of the calibration samples (groups without
    BatchNorm skip it), accumulated here in slice order (``fl.evaluate.running_statistics``), then the test set
    scored with them; per-batch scores are added in batch order. Either way the totals are the same bits however
    the work was shared out."""
    if not jobs:
        return []
    groups = sharing_groups(jobs)
    members = [[jobs[i] for i in g] for g in groups]
    if parts == 1:
        per_group = run("evaluate_group", [(sub,) for sub in members])
    else:
        calib_tasks, calib_owner = [], []
        for gi, sub in enumerate(members):
            if any(has_batch_norm(eval_prototype(j.recipe, j.spec)) for j in sub):
                for start, stop in batch_aligned_slices(n_calib, sub[0].batch_size, parts) or [(0, 0)]:
                    calib_tasks.append((sub, start, stop))
                    calib_owner.append(gi)
        figures: list[list[list[Figures]]] = [[] for _ in members]  # per group, per slice, per job
        for gi, f in zip(calib_owner, run("calibrate", calib_tasks), strict=True):
            figures[gi].append(f)
        score_tasks, score_owner = [], []
        for gi, sub in enumerate(members):
            stats = [running_statistics([f[i] for f in figures[gi]]) for i in range(len(sub))]
            for start, stop in batch_aligned_slices(n_test, sub[0].batch_size, parts):
                score_tasks.append((sub, stats, start, stop))
                score_owner.append(gi)
        per_group = [[[] for _ in sub] for sub in members]
        for gi, part in zip(score_owner, run("score", score_tasks), strict=True):
            for i, s in enumerate(part):
                per_group[gi][i].extend(s)  # a job's slices come back in order
    scores: list[Scores] = [[] for _ in jobs]
    for g, part in zip(groups, per_group, strict=True):
        for i, s in zip(g, part, strict=True):
            scores[i] = s
    return [combine(s, n_test) for s in scores]
