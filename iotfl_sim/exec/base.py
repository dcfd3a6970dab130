"""The executor seam: where real training and evaluation run. The engine only sees ``run`` and ``evaluate``.

Every executor does the same work per job through one ``Worker`` (a process's data, cached model
skeletons and torch thread count), so results are the same bits whichever executor ran them, as long
as the thread count is the same: CPU kernels split reductions by thread, so a job trained on one
thread and on two differs in the last bits. ``executor.threads`` pins it (default 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import nn

from iotfl_sim.fl.evaluate import batch_scores, bn_statistics, calibrate_bn, combine, prepared
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec
from iotfl_sim.fl.train import TrainJob, TrainResult, train_local

State = dict[str, torch.Tensor]


@dataclass
class NumericData:
    """The tensors every worker needs, shared once per run (never pickled per job)."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    calib_x: torch.Tensor  # static-BN calibration inputs
    x_test: torch.Tensor
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
        d = self.data
        return train_local(self.skeleton(job.recipe, job.spec), job, d.x_train, d.y_train, self.skeleton)

    def calibrate(self, job: EvalJob) -> State:
        """Static-BN statistics of ``job``'s model (empty for a model without BatchNorm)."""
        model = prepared(job.recipe, job.spec, job.state)
        calibrate_bn(model, self.data.calib_x, job.batch_size)
        return bn_statistics(model)

    def score(self, job: EvalJob, stats: State, start: int, stop: int) -> list[tuple[int, float]]:
        """Per-batch (correct, loss sum) on test samples [start, stop) with the calibrated statistics."""
        model = prepared(job.recipe, job.spec, {**job.state, **stats})
        return batch_scores(model, self.data.x_test[start:stop], self.data.y_test[start:stop], job.batch_size)

    def evaluate(self, job: EvalJob) -> tuple[float, float]:
        return combine(self.score(job, self.calibrate(job), 0, len(self.data.y_test)), len(self.data.y_test))

    def clear(self) -> None:
        self._skeletons.clear()


def batch_aligned_slices(n: int, batch_size: int, parts: int) -> list[tuple[int, int]]:
    """Split [0, n) into at most ``parts`` contiguous slices that start on batch boundaries."""
    batches = -(-n // batch_size)
    parts = max(1, min(parts, batches))
    bounds = [round(i * batches / parts) * batch_size for i in range(parts + 1)]
    return [(min(a, n), min(b, n)) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if min(a, n) < min(b, n)]
