"""Runs the round's training and evaluation jobs on worker threads of this process.

PyTorch releases the GIL inside its kernels, so N threads train N clients at once: on 2 cores the executors
job (FedAvg, MNIST, ``conv``) ran in 0.51x the inline time and 0.93x the 2-worker pool's
(``benchmarks/executors_default.md``), with no worker processes to start, nothing pickled between processes,
and one copy of PyTorch and of the data in memory. Each thread holds its own ``Worker`` (model skeletons) and its own evaluation skeletons
(``fl.evaluate.eval_skeleton`` caches per thread), and runs every job whole with ``threads`` torch threads,
as the inline executor runs it, so results are inline's bit for bit. Evaluation is cut into batch-aligned
slices over the threads like the pool's (``exec.base.parallel_evaluate``).

``evaluate_later`` runs an evaluation's slicing and combining on one more thread, so the caller goes on (the
engine simulates and trains the next round) while the evaluation's slices queue on the workers ahead of the
next round's training jobs: the workers idle neither in the evaluation's tail nor while the caller simulates.

One thing threads share that processes do not: the global RNG, which ``train_local`` seeds per job for
random modules (dropout). A round with a job whose model has one (``fl.train.draws_global_rng``) trains on
the calling thread, one job after another, so its draws are inline's; ``exec.auto`` picks the pool for
such models. After a round the global RNG is left as inline leaves it: seeded with the last job's seed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch

from iotfl_sim.exec.base import EvalJob, NumericData, Worker, parallel_evaluate
from iotfl_sim.exec.cores import available_cores
from iotfl_sim.fl.torch_seed import seed_torch
from iotfl_sim.fl.train import TrainJob, TrainResult, draws_global_rng


class ThreadExecutor:
    overlaps = True  # exec.base.overlaps
    # and by default (overlap_eval: auto): the evaluation's slices fill what the workers would idle through between
    # rounds (the round's last job on one thread, the server aggregating, the evaluation's own tail). IoT peers job
    # 0.98x the wall time of evaluating alone, conv job 1.00x (benchmarks/overlap_eval.md, 5 runs each)
    overlap_pays = True

    def __init__(self, data: NumericData, workers: int | None = None, threads: int = 1) -> None:
        self.workers = workers or available_cores().usable
        self.data, self.threads = data, threads
        self.n_calib, self.n_test = len(data.calib_x), len(data.y_test)
        self._local = threading.local()
        self._made: list[Worker] = []
        self._lock = threading.Lock()
        self._caller = Worker(data, threads)  # rounds whose models draw from the global RNG
        self._random: dict[tuple, bool] = {}
        self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="iotfl-worker", initializer=self._start)
        self._coordinator: ThreadPoolExecutor | None = None  # evaluate_later's thread, made at its first call

    def _start(self) -> None:
        torch.set_num_threads(self.threads)  # also this thread's OpenMP team size, which is per thread
        worker = Worker(self.data, self.threads)
        self._local.worker = worker
        with self._lock:
            self._made.append(worker)

    def _on_thread(self, method: str) -> Callable[[tuple], Any]:
        return lambda args: self._local.worker.call(method, args)

    def _map(self, method: str, tasks: list[tuple]) -> list[Any]:
        """``Worker.method`` on every task's arguments, on the threads, results in task order."""
        return list(self._pool.map(self._on_thread(method), tasks))

    def _draws_rng(self, job: TrainJob) -> bool:
        """Does ``job``'s model draw from the global RNG? Asked of a model built for the question and dropped: the
        caller's worker builds its own skeletons only for rounds it trains (a full model copy kept otherwise)."""
        key = (job.recipe, job.spec)
        if key not in self._random:
            self._random[key] = draws_global_rng(job.recipe.build(job.spec))
        return self._random[key]

    def run(self, jobs: list[TrainJob]) -> list[TrainResult]:
        if any(self._draws_rng(j) for j in jobs):
            return [self._caller.train(j) for j in jobs]
        results = self._map("train", [(j,) for j in jobs])
        if jobs:
            seed_torch(jobs[-1].seed)  # the threads seeded it in whatever order they ran
        return results

    def evaluate(self, jobs: list[EvalJob]) -> list[tuple[float, float]]:
        return parallel_evaluate(jobs, self.n_calib, self.n_test, self.workers, self._map)

    def evaluate_later(self, jobs: list[EvalJob]) -> Future:
        """``evaluate(jobs)`` on a thread of its own (its torch threads pinned as the caller's, for the combining):
        the result when the future is read."""
        if self._coordinator is None:
            self._coordinator = ThreadPoolExecutor(
                1, thread_name_prefix="iotfl-eval", initializer=torch.set_num_threads, initargs=(self.threads,)
            )
        return self._coordinator.submit(self.evaluate, jobs)

    def close(self) -> None:
        if self._coordinator is not None:
            self._coordinator.shutdown(wait=True, cancel_futures=True)
        self._pool.shutdown(wait=True, cancel_futures=True)
        for worker in [self._caller, *self._made]:
            worker.clear()
