"""Runs the round's training and evaluation jobs in parallel worker processes on this machine.

Workers are started once per run (``forkserver.worker_context``: forked from a server that only imported,
never from a process whose OpenMP pool is already running) and given the run's tensors once, in shared
memory; each keeps a model skeleton per submodel spec. A job travels with its weights only, as plain pickled
bytes both ways (``_packed``): torch's multiprocessing reductions, which share the run's data once, would move
every small tensor of every task through a shared-memory segment of its own, fetched in a round trip each
(17-30 ms per cnn_small training job against about 5 ms pickled, 7 ms per evaluation task of a small CNN;
issue 22). Results come back in job order. Evaluation is split in two passes so that both parallelise, each
cut into batch-aligned slices per evaluated model (models sharing a prefix go together:
``exec.base.sharing_groups``): static-BN figures of the calibration samples, accumulated here in slice order,
then the test set scored. Every worker trains and scores with ``threads`` torch threads, the same work the
inline executor does, so results are identical.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from dataclasses import replace
from typing import Any

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


def _packed(task: tuple[Callable[[Any], Any], bytes]) -> bytes:
    """Run ``fn`` on the unpickled argument and return its result pickled (see the module docstring)."""
    fn, blob = task
    return pickle.dumps(fn(pickle.loads(blob)), protocol=pickle.HIGHEST_PROTOCOL)


def _train(job: TrainJob) -> TrainResult:
    assert _WORKER is not None
    return _WORKER.train(job)


def _train_fused(jobs: list[TrainJob]) -> list[TrainResult]:
    assert _FUSED is not None
    return _FUSED.run(jobs)


def _call(task: tuple[str, tuple]) -> Any:
    """An evaluation task: a ``Worker`` method and its arguments (``exec.base.parallel_evaluate``)."""
    assert _WORKER is not None
    return _WORKER.call(*task)


def _compact(state: State) -> State:
    """``state`` with every tensor that views a larger storage (a submodel sliced from the global model)
    copied out: pickling a view writes its whole storage."""
    return {
        k: v if v.untyped_storage().nbytes() == v.numel() * v.element_size() and v.is_contiguous() else v.clone()
        for k, v in state.items()
    }


def _compact_jobs(jobs: list[Any]) -> list[Any]:
    """Train or eval jobs with compact weights (``_compact``); the same values, so the same results."""
    out = []
    for j in jobs:
        if isinstance(j, TrainJob):
            out.append(replace(j, weights=_compact(j.weights)))
        else:
            out.append(replace(j, state=_compact(j.state)))
    return out


def default_workers() -> int:
    """One worker per core this process may keep busy (affinity and cgroup quota: ``exec.cores``)."""
    return available_cores().usable


def fused_shares(jobs: list[TrainJob], workers: int, fusable: Callable[[list[TrainJob]], bool]) -> list[list[int]]:
    """Positions of ``jobs`` per pool task: every group (``fused.group_key``) that ``fusable`` accepts cut into
    ``workers`` contiguous, near-equal parts, part w of each such group in task w, in job order; then every
    other job as a task of its own, so the pool balances those as it balances unfused jobs."""
    groups: dict[tuple, list[int]] = {}
    for i, job in enumerate(jobs):
        groups.setdefault(group_key(job), []).append(i)
    shares: list[list[int]] = [[] for _ in range(workers)]
    singles: list[list[int]] = []
    for positions in groups.values():
        if not fusable([jobs[i] for i in positions]):
            singles.extend([i] for i in positions)
            continue
        base, extra = divmod(len(positions), workers)
        start = 0
        for w in range(workers):
            size = base + (w < extra)
            shares[w].extend(positions[start : start + size])
            start += size
    return [sorted(s) for s in shares if s] + sorted(singles)


class PoolExecutor:
    """``fuse``: each worker trains its share of a round (``fused_shares``) with the fused trainer (``kind: fused``
    on a CPU); results then depend on the number of workers within float tolerance, like fused ones do."""

    def __init__(self, data: NumericData, workers: int | None = None, threads: int = 1, fuse: bool = False) -> None:
        self.workers = workers or default_workers()
        self.fuse = fuse
        self.n_calib, self.n_test = len(data.calib_x), len(data.y_test)
        # decides which groups the workers will fuse (builds skeletons only; its data are never used)
        self._fuser = FusedExecutor(data.x_train[:0], data.y_train[:0]) if fuse else None
        ctx = worker_context()
        with NoMainReimport():  # a script without a __main__ guard may make a run: its workers must not re-run it
            self.pool = ctx.Pool(self.workers, initializer=_init, initargs=(data.share_memory(), threads, fuse))

    def _map(self, fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
        """``pool.map(fn, items)`` with arguments and results as pickled bytes (``_packed``)."""
        tasks = [(fn, pickle.dumps(i, protocol=pickle.HIGHEST_PROTOCOL)) for i in items]
        return [pickle.loads(b) for b in self.pool.map(_packed, tasks, chunksize=1)]

    def run(self, jobs: list[TrainJob]) -> list[TrainResult]:
        jobs = _compact_jobs(jobs)
        if not self.fuse:
            return self._map(_train, jobs)
        assert self._fuser is not None
        shares = fused_shares(jobs, self.workers, self._fuser.can_fuse)
        results: list[TrainResult | None] = [None] * len(jobs)
        for share, trained in zip(shares, self._map(_train_fused, [[jobs[i] for i in s] for s in shares]), strict=True):
            for i, res in zip(share, trained, strict=True):
                results[i] = res
        return [r for r in results if r is not None]

    def evaluate(self, jobs: list[EvalJob]) -> list[tuple[float, float]]:
        return parallel_evaluate(
            _compact_jobs(jobs), self.n_calib, self.n_test, self.workers,
            lambda method, tasks: self._map(_call, [(method, t) for t in tasks]),
        )  # fmt: skip

    def close(self) -> None:
        self.pool.close()
        self.pool.join()
