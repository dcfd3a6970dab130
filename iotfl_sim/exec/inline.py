"""Runs training and evaluation jobs one after another in this process."""

from __future__ import annotations

import torch

from iotfl_sim.exec.base import EvalJob, NumericData, Worker
from iotfl_sim.fl.train import TrainJob, TrainResult


class InlineExecutor:
    def __init__(self, data: NumericData, threads: int = 1) -> None:
        self._before = torch.get_num_threads()
        torch.set_num_threads(threads)  # the engine pins them for the whole run; standalone use pins them here
        self.worker = Worker(data, threads)

    def run(self, jobs: list[TrainJob]) -> list[TrainResult]:
        return [self.worker.train(j) for j in jobs]

    def evaluate(self, jobs: list[EvalJob]) -> list[tuple[float, float]]:
        return self.worker.evaluate(jobs)

    def close(self) -> None:
        self.worker.clear()
        torch.set_num_threads(self._before)
