"""Running a study: ``sweep`` over worker processes (``worker_context``) or Ray tasks, one run per task, with
the index kept current and Ctrl-C / SIGTERM stopping it resumably."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iotfl_sim.core.errors import ScenarioError
from iotfl_sim.exec.cores import SHARE_ENV, available_cores
from iotfl_sim.forkserver import NoMainReimport, worker_context
from iotfl_sim.output.space import no_space
from iotfl_sim.study.folder import lock_study, prepare, study_folder, summary_host_s, write_index
from iotfl_sim.study.spec import Study, load_point, set_args

# ---------------------------------------------------------------- workers

_EVENTS: Any = None
_STOP: Any = None


def _init_worker(events: Any, stop: Any) -> None:
    """A worker ignores Ctrl-C while idle; the run it executes installs its own handler (checkpoint, stop)."""
    global _EVENTS, _STOP
    _EVENTS, _STOP = events, stop
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def run_environment(parallel: int) -> dict[str, str]:
    """The environment of a sweep's runs on this machine: the sweep's own, and how many runs share its cores
    (``exec.cores.SHARE_ENV``), so that a run's ``executor: auto`` sizes its workers by its share."""
    return {**os.environ, SHARE_ENV: str(parallel)}


def _run_task(task: dict[str, Any]) -> dict[str, Any]:
    """One run in a worker process: fresh into its folder, or ``resume_run`` of the folder there."""
    from iotfl_sim.scenario.loader import resolved_dict
    from iotfl_sim.sim.runner import resume_run, run_scenario

    rid, run_dir = task["id"], Path(task["run_dir"])  # never removed here: a run folder appears whole
    if task.get("env") is not None:  # the sweep's environment now, not the fork server's when it started
        os.environ.clear()
        os.environ.update(task["env"])
    if _STOP is not None and _STOP.is_set():  # queued before the sweep was stopped: leave it pending
        return {"id": rid, "status": "pending", "error": None, "host_s": None}
    if _EVENTS is not None:
        _EVENTS.put((rid, os.getpid()))
    t0 = time.perf_counter()
    summary = None
    try:
        if task["resume"]:
            _, summary = resume_run(run_dir, progress=False, quiet=True)
        else:
            with contextlib.redirect_stderr(io.StringIO()):  # the sweep printed load notes once already
                sc, groups = load_point(task["base"], task["sets"])
            _, summary = run_scenario(
                sc, groups, None, resolved_dict(sc, groups), progress=False,
                base_dir=Path(task["base"]["base_dir"]), run_dir=run_dir, quiet=True,
            )  # fmt: skip
        status = "done" if summary.get("status") == "complete" else "interrupted"
        error = None
    except KeyboardInterrupt:  # a second Ctrl-C: stopped at once, resumable from its last checkpoint
        status, error = "interrupted", None
    except ScenarioError as e:
        status, error = "failed", " / ".join(x for x in str(e).splitlines() if x.strip())
    except Exception as e:  # noqa: BLE001 - a failing run is recorded, the others go on
        status, error = "failed", f"{type(e).__name__}: {e}"
        if run_dir.is_dir():
            (run_dir / "error.log").write_text(traceback.format_exc())
    host = summary_host_s(summary) if status == "done" else None
    return {"id": rid, "status": status, "error": error, "host_s": host if host is not None else time.perf_counter() - t0}


# ---------------------------------------------------------------- sweep


@dataclass
class SweepResult:
    folder: Path
    records: list[dict[str, Any]]
    stopped: bool

    def count(self, status: str) -> int:
        return sum(r["status"] == status for r in self.records)




def sweep(
    study: Study,
    out: str | Path = "studies",
    workers: int | None = None,
    progress: bool | None = None,
    dispatch: str | None = None,
) -> SweepResult:
    """Run every point of ``study`` not complete yet, ``workers`` at a time (default: the study's, else
    one per core, or through Ray one per CPU of the cluster), in worker processes (``worker_context``) or as Ray tasks (``dispatch``: overrides the study's
    ``dispatch.kind``). Ctrl-C (or SIGTERM to this process) stops launching runs; running ones finish their
    round, checkpoint and are marked ``interrupted``; run the sweep again to go on.
    """
    lock = lock_study(study_folder(study, out))
    wrote = False
    try:
        folder, records = prepare(study, out)
        wrote = True
        return _sweep_locked(study, folder, records, workers, progress, dispatch)
    except OSError as e:
        raise no_space(e, f"run the sweep again (runs resume where they stopped): iotfl-sim sweep {study.source}") or e from None
    finally:
        lock.release(wrote=wrote)


def _sweep_locked(
    study: Study, folder: Path, records: list[dict[str, Any]], workers: int | None, progress: bool | None,
    dispatch: str | None,
) -> SweepResult:
    from tqdm import tqdm

    todo = [r for r in records if r["status"] != "done"]
    for r in todo:  # the index says what is left before anything starts
        r["status"] = "pending"
    write_index(folder, study, records)
    wanted = workers or study.spec.workers  # None: one per usable core here, or per CPU of the Ray cluster
    n = max(1, min(wanted or available_cores().usable, len(todo)))
    bar = tqdm(total=len(records), initial=len(records) - len(todo), desc=study.spec.name, unit="run",
               disable=None if progress is None else not progress)  # fmt: skip
    run = _Sweep(study, folder, records, bar)
    kind = dispatch or study.spec.dispatch.kind
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, run.on_signal)
    try:
        if todo and kind == "ray":
            run.on_ray(todo, wanted, n, study.spec.dispatch.address)
        elif todo:
            run.on_processes(todo, n)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        bar.close()
        for r in records:  # whatever happened, the index ends consistent: nothing is left "running"
            if r["status"] == "running":
                r["status"] = "interrupted"
        write_index(folder, study, records)
    return SweepResult(folder, records, run.stop)


class _Sweep:
    """One sweep's bookkeeping (index, progress bar, stop requests), shared by both dispatch kinds."""

    def __init__(self, study: Study, folder: Path, records: list[dict[str, Any]], bar: Any) -> None:
        self.study, self.folder, self.records, self.bar = study, folder, records, bar
        self.by_id = {r["id"]: r for r in records}
        self.stop = False
        self.on_stop: list[Any] = []  # called once, at the first Ctrl-C
        self.running: dict[str, int] = {}  # run id -> worker pid (processes only)

    def task(self, rec: dict[str, Any]) -> dict[str, Any]:
        run_dir = self.folder / rec["run_dir"]
        return {
            "id": rec["id"], "run_dir": str(run_dir), "base": self.study.task_base(),
            "sets": self.study.executor_sets + set_args(rec["overrides"]),
            "resume": (run_dir / "scenario.resolved.yaml").is_file(),
        }  # fmt: skip

    def on_signal(self, signum: int, frame: Any) -> None:
        if not self.stop:
            self.stop = True
            for f in self.on_stop:
                f()
            print("\nsweep: stopping: no new runs; running ones finish their round and checkpoint "
                  "(run the sweep again to continue)", file=sys.stderr)  # fmt: skip
        if signum == signal.SIGTERM:  # sent to this process only: pass it on as the runs' Ctrl-C
            for pid in self.running.values():
                try:
                    os.kill(pid, signal.SIGINT)
                except OSError:
                    pass

    def started(self, rid: str) -> None:
        if self.by_id[rid]["status"] == "pending":
            self.by_id[rid]["status"] = "running"

    def finished(self, rid: str, res: dict[str, Any] | None, died: str | None = None) -> None:
        """A run's result (``res``), or ``died``: its worker was lost; ``None`` and no ``died``: never ran."""
        rec = self.by_id[rid]
        self.running.pop(rid, None)
        if died is not None:
            rec.update(status="failed", error=f"worker process died: {died}")
        elif res is None:
            rec["status"] = "pending"
            return
        else:
            rec.update(status=res["status"], error=res["error"], host_s=res["host_s"])
        if rec["status"] in ("done", "failed"):
            self.bar.update(1)
            self.bar.set_postfix({"failed": sum(x["status"] == "failed" for x in self.records)}, refresh=False)

    def write(self) -> None:
        write_index(self.folder, self.study, self.records)

    def on_processes(self, todo: list[dict[str, Any]], n: int) -> None:
        import concurrent.futures as cf
        import queue

        ctx = worker_context()
        events, stop_event = ctx.Queue(), ctx.Event()
        self.on_stop.append(stop_event.set)
        try:
            with NoMainReimport(), cf.ProcessPoolExecutor(
                max_workers=n, mp_context=ctx, initializer=_init_worker, initargs=(events, stop_event),
                max_tasks_per_child=self.study.spec.runs_per_worker,
            ) as pool:  # fmt: skip
                env = run_environment(n)  # (Ray tasks may run on other machines: they keep theirs)
                futures = {pool.submit(_run_task, {**self.task(r), "env": env}): r["id"] for r in todo}
                pending = set(futures)
                cancelled = False
                while pending:
                    if self.stop and not cancelled:
                        for f in pending:
                            f.cancel()
                        cancelled = True
                    done, pending = cf.wait(pending, timeout=0.2, return_when=cf.FIRST_COMPLETED)
                    changed = bool(done)
                    while True:
                        try:
                            rid, pid = events.get_nowait()
                        except queue.Empty:
                            break
                        self.started(rid)
                        self.running[rid] = pid
                        changed = True
                    for f in done:
                        if f.cancelled():
                            self.finished(futures[f], None)
                        elif f.exception() is not None:  # the worker process died (killed, out of memory)
                            exc = f.exception()
                            self.finished(futures[f], None, died=f"{type(exc).__name__}: {exc}")
                        else:
                            self.finished(futures[f], f.result())
                    if changed:
                        self.write()
        finally:
            events.close()

    def on_ray(self, todo: list[dict[str, Any]], wanted: int | None, local: int, address: str | None) -> None:
        """One Ray task per run, at most ``wanted`` in flight (None: one per CPU of the cluster), so a task in
        flight is a run running; a Ray this starts itself has ``local`` CPUs. A stop cancels the running
        tasks, which Ray delivers as Ctrl-C: the run checkpoints as under processes."""
        try:
            import ray
        except ImportError:
            raise ScenarioError("dispatch.kind: ray needs Ray: pip install 'iotfl-sim[ray]' (or dispatch: {kind: processes})") from None
        from ray.exceptions import RayError, TaskCancelledError

        from iotfl_sim.exec.ray_exec import start_ray

        owns = start_ray(address, local, "dispatch.address")
        # a joined cluster's CPUs, not this machine's cores: its other nodes run runs too
        n = max(1, min(wanted or int(ray.cluster_resources().get("CPU", 1)), len(todo)))
        remote = ray.remote(num_cpus=1, max_retries=0)(_run_task)
        queue_ = list(todo)
        inflight: dict[Any, str] = {}
        cancelled = False
        try:
            while queue_ or inflight:
                launched = False
                while queue_ and len(inflight) < n and not self.stop:
                    rec = queue_.pop(0)
                    inflight[remote.remote(self.task(rec))] = rec["id"]
                    self.started(rec["id"])
                    launched = True
                if self.stop and queue_:
                    queue_.clear()  # never launched: they stay pending
                if self.stop and not cancelled:
                    for ref in inflight:
                        ray.cancel(ref)
                    cancelled = True
                done, _ = ray.wait(list(inflight), num_returns=1, timeout=0.2) if inflight else ([], [])
                for ref in done:
                    rid = inflight.pop(ref)
                    try:
                        self.finished(rid, ray.get(ref))
                    except TaskCancelledError:
                        self.finished(rid, {"status": "interrupted", "error": None, "host_s": None})
                    except RayError as e:
                        self.finished(rid, None, died=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
                if done or launched:
                    self.write()
        finally:
            if owns:
                ray.shutdown()
