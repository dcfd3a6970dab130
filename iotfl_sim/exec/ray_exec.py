"""Runs training and evaluation jobs on Ray actors: a local Ray, or an existing cluster by address.

The run's tensors are put in Ray's object store once; one actor per worker holds a ``Worker`` (skeleton
cache, pinned torch threads), exactly the work the inline and pool executors do, so the results are
the same bits. Jobs are dealt to the actors round-robin and their results gathered in job order.
Install with ``pip install 'iotfl-sim[ray]'``.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from iotfl_sim.exec.base import EvalJob, NumericData, Worker, parallel_evaluate
from iotfl_sim.fl.train import TrainJob, TrainResult


def start_ray(address: str | None, num_cpus: int, setting: str = "executor.address") -> bool:
    """Connect to the cluster at ``address``, or start a local Ray of ``num_cpus``; False when this process
    was connected already (the caller then must not shut it down). An address where no cluster answers, or
    whose cluster refuses this process, is a ScenarioError naming ``setting``."""
    import ray

    if ray.is_initialized():
        return False
    opts: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
    if address:
        check_reachable(address, setting)
        try:
            ray.init(address=address, **opts)
        except (ConnectionError, ValueError) as e:  # auto with no cluster; ray:// without ray[client]; a token
            raise _join_error(e, address, setting) from None
    else:
        # Ray starts its workers at nice 15: on a busy machine they then crawl (15x slower measured here
        # while other runs used the cores), so the local Ray's workers get the caller's priority (a cluster
        # joined by address keeps the niceness its nodes were started with)
        os.environ.setdefault("RAY_worker_niceness", "0")
        ray.init(num_cpus=num_cpus, **opts)
    return True


def _join_error(e: BaseException, address: str, setting: str) -> Exception:
    from iotfl_sim.core.errors import ScenarioError

    chain: list[BaseException] = []
    cause: BaseException | None = e
    while cause is not None and len(chain) < 10:
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    if any(type(x).__name__ == "AuthenticationError" or "InvalidAuthToken" in str(x) for x in chain):
        # Ray 2.60: a head started where ~/.ray/auth_token exists (a local Ray writes it) wants that token,
        # and a driver given an address sends it only when told to (a refused one retries for ~20 s first)
        return ScenarioError(
            f"{setting}: the Ray cluster at {address} wants an authentication token: run with RAY_AUTH_MODE=token "
            "and the cluster's token in ~/.ray/auth_token or RAY_AUTH_TOKEN"
        )
    first = str(chain[0]).splitlines()[0] if str(chain[0]) else type(chain[0]).__name__
    return ScenarioError(f"{setting}: cannot join the Ray cluster at {address}: {first}")


def check_reachable(address: str, setting: str) -> None:
    """Refuse at once a host:port (or ray://host:port) where nothing listens: Ray itself keeps retrying (still
    waiting after 2 minutes, measured with Ray 2.60). ``auto`` is left to Ray."""
    from iotfl_sim.core.errors import ScenarioError

    hostport = address.removeprefix("ray://")
    if hostport in ("auto", "local"):
        return
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise ScenarioError(
            f"{setting}: {address!r} is not a Ray address; give auto, host:port (e.g. 10.0.0.5:6379) or ray://host:10001"
        )
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
    except OSError as e:
        raise ScenarioError(
            f"{setting}: no Ray cluster answers at {address} ({e.strerror or e}); start one "
            "(ray start --head) or fix the address"
        ) from None


class _Actor:
    def __init__(self, data: NumericData, threads: int) -> None:
        import torch

        torch.set_num_threads(threads)
        self.worker = Worker(data, threads)

    def train(self, job: TrainJob) -> TrainResult:
        return self.worker.train(job)

    def call(self, method: str, *args: Any) -> Any:
        """An evaluation task: a ``Worker`` method and its arguments (``exec.base.parallel_evaluate``)."""
        return self.worker.call(method, args)


class RayExecutor:
    def __init__(self, data: NumericData, workers: int | None = None, threads: int = 1, address: str | None = None) -> None:
        try:
            import ray
        except ImportError:
            from iotfl_sim.core.errors import ScenarioError

            raise ScenarioError(
                "executor.kind: ray needs Ray: pip install 'iotfl-sim[ray]' (or pick kind: pool)"
            ) from None
        from iotfl_sim.exec.pool import default_workers

        self.ray = ray
        self._owns = start_ray(address, workers or default_workers())
        self.workers = workers or max(1, int(ray.available_resources().get("CPU", 1)))
        self.n_calib, self.n_test = len(data.calib_x), len(data.y_test)
        ref = ray.put(data)
        actor = ray.remote(num_cpus=1)(_Actor)
        self.actors = [actor.remote(ref, threads) for _ in range(self.workers)]

    def _map(self, method: str, args: list[tuple]) -> list[Any]:
        refs = [getattr(self.actors[i % len(self.actors)], method).remote(*a) for i, a in enumerate(args)]
        return self.ray.get(refs)

    def run(self, jobs: list[TrainJob]) -> list[TrainResult]:
        return self._map("train", [(j,) for j in jobs])

    def evaluate(self, jobs: list[EvalJob]) -> list[tuple[float, float]]:
        return parallel_evaluate(jobs, self.n_calib, self.n_test, self.workers,
                                 lambda method, tasks: self._map("call", [(method, *t) for t in tasks]))

    def close(self) -> None:
        for a in self.actors:
            self.ray.kill(a)
        self.actors = []
        if self._owns:
            self.ray.shutdown()
