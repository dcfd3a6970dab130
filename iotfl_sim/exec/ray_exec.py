"""Runs training and evaluation jobs on Ray actors: a local Ray, or an existing cluster by address.

The run's tensors are put in Ray's object store once; one actor per worker holds a ``Worker`` (skeleton
cache, pinned torch threads), exactly the work the inline and pool executors do, so the results are
the same bits. Jobs are dealt to the actors round-robin and their results gathered in job order.
Install with ``pip install 'iotfl-sim[ray]'``.
"""

from __future__ import annotations

import os
from typing import Any

from iotfl_sim.exec.base import EvalJob, NumericData, State, Worker, parallel_evaluate
from iotfl_sim.fl.train import TrainJob, TrainResult


def start_ray(address: str | None, num_cpus: int) -> bool:
    """Connect to the cluster at ``address``, or start a local Ray of ``num_cpus``; False when this process
    was connected already (the caller then must not shut it down)."""
    import ray

    if ray.is_initialized():
        return False
    opts: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
    if address:
        ray.init(address=address, **opts)
    else:
        # Ray starts its workers at nice 15: on a busy machine they then crawl (15x slower measured here
        # while other runs used the cores), so the local Ray's workers get the caller's priority
        os.environ.setdefault("RAY_worker_niceness", "0")
        ray.init(num_cpus=num_cpus, **opts)
    return True


class _Actor:
    def __init__(self, data: NumericData, threads: int) -> None:
        import torch

        torch.set_num_threads(threads)
        self.worker = Worker(data, threads)

    def train(self, job: TrainJob) -> TrainResult:
        return self.worker.train(job)

    def calibrate(self, jobs: list[EvalJob]) -> list[State]:
        return self.worker.calibrate(jobs)

    def score(self, jobs: list[EvalJob], stats: list[State], start: int, stop: int) -> list[list[tuple[int, float]]]:
        return self.worker.score(jobs, stats, start, stop)


class RayExecutor:
    def __init__(self, data: NumericData, workers: int | None = None, threads: int = 1, address: str | None = None) -> None:
        try:
            import ray
        except ImportError:
            from iotfl_sim.scenario.loader import ScenarioError

            raise ScenarioError(
                "executor.kind: ray needs Ray: pip install 'iotfl-sim[ray]' (or pick kind: pool)"
            ) from None
        from iotfl_sim.exec.pool import default_workers

        self.ray = ray
        self._owns = start_ray(address, workers or default_workers())
        self.workers = workers or max(1, int(ray.available_resources().get("CPU", 1)))
        self.n_test = len(data.y_test)
        ref = ray.put(data)
        actor = ray.remote(num_cpus=1)(_Actor)
        self.actors = [actor.remote(ref, threads) for _ in range(self.workers)]

    def _map(self, method: str, args: list[tuple]) -> list[Any]:
        refs = [getattr(self.actors[i % len(self.actors)], method).remote(*a) for i, a in enumerate(args)]
        return self.ray.get(refs)

    def run(self, jobs: list[TrainJob]) -> list[TrainResult]:
        return self._map("train", [(j,) for j in jobs])

    def evaluate(self, jobs: list[EvalJob]) -> list[tuple[float, float]]:
        return parallel_evaluate(jobs, self.n_test, self.workers, lambda groups: self._map("calibrate", [(g,) for g in groups]),
                                 lambda tasks: self._map("score", tasks))

    def close(self) -> None:
        for a in self.actors:
            self.ray.kill(a)
        self.actors = []
        if self._owns:
            self.ray.shutdown()
