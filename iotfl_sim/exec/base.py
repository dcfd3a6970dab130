"""The executor seam: where real training runs. The engine and the methods only see ``run(jobs)``."""

from __future__ import annotations

from typing import Protocol

from iotfl_sim.fl.train import TrainJob, TrainResult


class Executor(Protocol):
    def run(self, jobs: list[TrainJob]) -> list[TrainResult]:
        """Train every job; results in the order of ``jobs``. Must not depend on simulated time."""
        ...

    def close(self) -> None: ...
