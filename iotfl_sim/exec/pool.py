"""Runs the round's training and evaluation jobs in parallel worker processes on this machine.

Workers are started once per run (``forkserver.worker_context``: forked from a server that only imported,
never from a process whose OpenMP pool is already running) and given the run's tensors once, in shared
memory; each keeps a model skeleton per submodel spec. A job travels with its weights only; results come back in job order. Evaluation is
split in two passes so that both parallelise: static-BN calibration, one task per evaluated model,
then scoring, each model's test set cut into batch-aligned slices (models sharing a prefix go together:
``exec.base.sharing_groups``). Every worker trains and scores
with ``threads`` torch threads, the same work the inline executor does, so results are identical.
"""

from __future__ import annotations

import torch.multiprocessing  # noqa: F401 - its reductions share the run's tensors with the workers

from iotfl_sim.exec.base import EvalJob, NumericData, State, Worker, parallel_evaluate
from iotfl_sim.exec.cores import available_cores
from iotfl_sim.exec.fused import FusedExecutor, group_key
from iotfl_sim.fl.train import TrainJob, TrainResult
from iotfl_sim.forkserver import NoMainReimport, worker_context

_WORKER: Worker | None = None
_FUSED: FusedExecutor | None = None


def _init(data: NumericData, threads: int, fuse: bool = False) -> None:
    import signal

    import torch

    global _WORKER
    # a terminal's Ctrl-C reaches the whole process group: the run itself decides when to stop
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(threads)
    _WORKER = Worker(data, threads)
    if fuse:
        global _FUSED
        _FUSED = FusedExecutor(data.x_train, data.y_train, "cpu", data)


def _train(job: TrainJob) -> TrainResult:
    assert _WORKER is not None
    return _WORKER.train(job)


def _train_fused(jobs: list[TrainJob]) -> list[TrainResult]:
    assert _FUSED is not None
    return _FUSED.run(jobs)


def _calibrate(jobs: list[EvalJob]) -> list[State]:
    assert _WORKER is not None
    return _WORKER.calibrate(jobs)


def _score(task: tuple[list[EvalJob], list[State], int, int]) -> list[list[tuple[int, float]]]:
    assert _WORKER is not None
    return _WORKER.score(*task)


def default_workers() -> int:
    """One worker per core this process may keep busy (affinity and cgroup quota: ``exec.cores``)."""
    return available_cores().usable


def fused_shares(jobs: list[TrainJob], workers: int) -> list[list[int]]:
    """Positions of ``jobs`` per worker: every fusable group (``fused.group_key``) cut into ``workers``
    contiguous, near-equal parts, part w of each group to worker w, in job order; empty shares left out."""
    groups: dict[tuple, list[int]] = {}
    for i, job in enumerate(jobs):
        groups.setdefault(group_key(job), []).append(i)
    shares: list[list[int]] = [[] for _ in range(workers)]
    for positions in groups.values():
        base, extra = divmod(len(positions), workers)
        start = 0
        for w in range(workers):
            size = base + (w < extra)
            shares[w].extend(positions[start : start + size])
            start += size
    return [sorted(s) for s in shares if s]


class PoolExecutor:
    """``fuse``: each worker trains its share of a round (``fused_shares``) with the fused trainer (``kind: fused``
    on a CPU); results then depend on the number of workers within float tolerance, like fused ones do."""

    def __init__(self, data: NumericData, workers: int | None = None, threads: int = 1, fuse: bool = False) -> None:
        self.workers = workers or default_workers()
        self.fuse = fuse
        self.n_test = len(data.y_test)
        ctx = worker_context()
        with NoMainReimport():  # a script without a __main__ guard may make a run: its workers must not re-run it
            self.pool = ctx.Pool(self.workers, initializer=_init, initargs=(data.share_memory(), threads, fuse))

    def run(self, jobs: list[TrainJob]) -> list[TrainResult]:
        if not self.fuse:
            return self.pool.map(_train, jobs, chunksize=1)
        shares = fused_shares(jobs, self.workers)
        results: list[TrainResult | None] = [None] * len(jobs)
        for share, trained in zip(shares, self.pool.map(_train_fused, [[jobs[i] for i in s] for s in shares], chunksize=1), strict=True):
            for i, res in zip(share, trained, strict=True):
                results[i] = res
        return [r for r in results if r is not None]

    def evaluate(self, jobs: list[EvalJob]) -> list[tuple[float, float]]:
        return parallel_evaluate(jobs, self.n_test, self.workers, lambda groups: self.pool.map(_calibrate, groups, chunksize=1),
                                 lambda tasks: self.pool.map(_score, tasks, chunksize=1))

    def close(self) -> None:
        self.pool.close()
        self.pool.join()
