"""A run as a folder: ``run_scenario`` runs a validated scenario into a new run folder, ``resume_run`` continues a
stopped one from its last checkpoint; both stop cleanly on the first Ctrl-C / SIGTERM (finish the round,
checkpoint, write the summary) and at once on the second. The round itself is ``sim.engine``'s.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from iotfl_sim.core.errors import CheckpointError, ScenarioError
from iotfl_sim.exec.auto import Choice
from iotfl_sim.output.checkpoint import CheckpointStore
from iotfl_sim.output.run_dir import (
    RunLock,
    RunRecorder,
    check_offsets,
    new_run_dir,
    new_run_dir_whole,
    read_origin,
    scenario_sha256,
    write_atomic,
    write_origin,
    write_scenario,
)
from iotfl_sim.output.sources import SOURCES, check_sources, sources_text, user_sources
from iotfl_sim.output.space import no_space
from iotfl_sim.scenario.loader import ResolvedGroup
from iotfl_sim.scenario.model import Scenario
from iotfl_sim.scenario.resolved import ResolvedScenario
from iotfl_sim.sim.engine import ExecutorFactory, Simulation
from iotfl_sim.sim.setup import build_simulation


def _summary_complete(path: Path) -> bool:
    """Whether the run folder's summary.json says the run is complete (refuses one that is not a summary)."""
    from iotfl_sim.core import safe_json

    summary_path = path / "summary.json"
    if not summary_path.is_file():
        return False
    try:
        summary = safe_json.read(summary_path)
    except ValueError as e:
        summary = f"not readable JSON ({e})"
    if not isinstance(summary, dict) or not isinstance(summary.get("status", "complete"), str):
        what = summary if isinstance(summary, str) else "not a run summary"
        raise ScenarioError(
            f"--resume {path}: {summary_path} is {what}; move it away to resume from the last checkpoint"
        )
    return summary.get("status", "complete") == "complete"


class StopNow(KeyboardInterrupt):
    """A second SIGINT / SIGTERM: the run stops at once (``signum``: the signal, for the exit status 128 + it)."""

    def __init__(self, signum: int) -> None:
        super().__init__()
        self.signum = signum


class _StopOnSignal:
    """First SIGINT / SIGTERM: finish the round (an asynchronous run: the event; ``ServerLoop.stop_note``),
    checkpoint, write the summary; a second: stop at once."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.before: dict[int, Any] = {}

    def __enter__(self) -> _StopOnSignal:
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.before[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        import sys

        if self.sim.stop_requested:
            raise StopNow(signum)
        self.sim.stop_requested = True
        self.sim.status.stop_signal = signum
        where = self.sim.loop.stop_note
        print(f"\nstopping {where} (a checkpoint and the summary are written); "
              "press Ctrl-C again to stop at once", file=sys.stderr)  # fmt: skip

    def __exit__(self, *exc: Any) -> None:
        import signal

        for sig, handler in self.before.items():
            signal.signal(sig, handler)


@functools.cache
def _bar_class() -> type:
    from tqdm import tqdm

    # no monitor thread: a thread started before the executor's workers holds a malloc arena of its own, which
    # exec.glibc_heap's one-arena limit would then hand to a worker instead of the one they share
    return type("RoundBar", (tqdm,), {"monitor_interval": 0})


def round_bar(sc: Scenario, progress: bool | None) -> Any:
    """The run's progress bar: one tick per round (``progress``: None shows it where stderr is a terminal)."""
    return _bar_class()(total=sc.rounds, desc=sc.name, unit="round", disable=None if progress is None else not progress)


def run_scenario(
    sc: Scenario,
    groups: list[ResolvedGroup],
    out_parent: str | Path | None,
    resolved: dict,
    progress: bool | None = None,
    base_dir: Path | None = None,
    run_dir: Path | None = None,
    executor_factory: ExecutorFactory | None = None,
    quiet: bool = False,
) -> tuple[Path | None, dict[str, Any]]:
    """Run a validated scenario into a new run folder under ``out_parent`` (None: write nothing), or into
    ``run_dir`` exactly (a folder that must not exist yet: a study's ``runs/<run_id>``; it appears whole,
    its scenario in it, or not at all). ``executor_factory``: see ``sim.setup.build_simulation``. ``quiet``: no note on stderr
    (which executor ``kind: auto`` chose)."""
    bar = round_bar(sc, progress)
    recorder = None
    path = None
    lock = None
    ok = False
    try:
        # fails on bad input before any folder is made
        sim = build_simulation(ResolvedScenario(sc, groups, base_dir), progress=bar, executor_factory=executor_factory)
        _announce_executor(sim, quiet)
        resolved = _pinned(resolved, sim.host.choice)
        if run_dir is not None or out_parent is not None:
            # the user's files the run's code comes from, by SHA-256: a resume refuses them changed
            sources = sources_text(user_sources(_code_roots(sim, executor_factory)))
        if run_dir is not None:
            path = new_run_dir_whole(Path(run_dir), resolved, base_dir, sources)
        elif out_parent is not None:
            path = new_run_dir(out_parent, sc.name)
            write_scenario(path, resolved)
            write_origin(path, base_dir)
            write_atomic(path / SOURCES, sources)
        if path is not None:
            lock = RunLock(path)
            recorder = RunRecorder(path, _labels(sim), sc.output.events, extra_columns=_extra_columns(sim))
            sim.recorder = recorder
            sim.checkpointing.store = _store(sc, path)
        sim.checkpointing.tape.recording = sim.checkpointing.store is not None
        result = path, _run_interruptible(sim, path)
        ok = True
        return result
    except OSError as e:
        raise _os_error(e, path) from None
    finally:
        bar.close()
        _finish(recorder, lock, ok, path)


def _pinned(resolved: dict, choice: Choice) -> dict:
    """``resolved`` with the executor settings this machine chose that decide the run's numbers
    (``Choice.pinned``): rerunning or resuming the run's file, alone, in a sweep or elsewhere, reproduces them."""
    pins = choice.pinned()
    return {**resolved, "executor": {**resolved["executor"], **pins}} if pins else resolved


def _code_roots(sim: Simulation, executor_factory: ExecutorFactory | None) -> list[Any]:
    """Where the run's code comes from (``output.sources``): the module ``algorithm.name`` names by import path,
    the method's class, its wire, and a caller's executor factory and the executor it made."""
    import sys

    name = sim.sc.algorithm.name
    named = sys.modules.get(name.partition(":")[0]) if ":" in name else None
    custom = sim.host.executor if executor_factory is not None else None
    return [named, sim.strategy, sim.strategy.wire, executor_factory, custom]


def _os_error(e: OSError, path: Path | None) -> Exception:
    """No space left (``output.space``): one line naming the file, and how to continue; else ``e`` itself."""
    if path is not None and (path / "scenario.resolved.yaml").is_file():
        then = f"continue with: iotfl-sim run --resume {path}"
    else:
        then = "start the run again"
    return no_space(e, then) or e


def _finish(recorder: RunRecorder | None, lock: RunLock | None, ok: bool, path: Path | None) -> None:
    """Close the run's files and drop its lock. After an error (``ok`` False) closing raises nothing."""
    wrote = ok or (recorder is not None and recorder.writing)
    try:
        if recorder is not None:
            try:
                recorder.close(failed=not ok)
            except OSError as e:
                raise _os_error(e, path) from None
    finally:
        if lock is not None:
            lock.release(wrote=wrote)


def resume_run(path: Path, progress: bool | None = None, quiet: bool = False) -> tuple[Path, dict[str, Any]]:
    """Continue the run in folder ``path`` from its last checkpoint (from the start if it has none).

    Every check comes before any write: the lock, the summary, the user's source files the run loaded
    (``sources.json``), the scenario, the checkpoint (its SHA-256s, its format, migrated if older, the
    scenario's hash, the files' offsets, the values it restores against the run's own) and the replay of the
    checkpoint's rounds. A refused resume
    leaves every file of the folder as it was; only then are the files cut back to the checkpoint."""
    from iotfl_sim.scenario.loader import load_scenario, resolve_groups

    path = Path(path)
    if not (path / "scenario.resolved.yaml").is_file():
        raise ScenarioError(f"--resume {path}: not a run folder (no scenario.resolved.yaml); give a folder that `iotfl-sim run` made")
    lock = RunLock(path)  # writes nothing if the lock file is there; else the file goes again on release
    recorder = None
    bar = None
    ok = False
    try:
        if _summary_complete(path):
            raise ScenarioError(f"--resume {path}: this run is already complete (summary.json); nothing to resume")
        check_sources(path)  # before the scenario is read: an edited method module is not even imported
        base_dir = read_origin(path)  # the scenario's own folder: where a method named by import path may live
        source = str(path / "scenario.resolved.yaml")
        sc = load_scenario(source, search=[base_dir] if base_dir is not None else [])
        if sc.algorithm.name == "flower":
            raise ScenarioError(
                f"--resume {path}: a Flower app's run cannot be resumed (its ServerApp's main and its ClientApps' "
                "context.state live in the app's own code, which no checkpoint holds); run the scenario again"
            )
        resolved = ResolvedScenario(sc, resolve_groups(sc, path, source), base_dir, source)
        store = CheckpointStore(path, sc.output.checkpoint.keep)
        loaded = store.load_latest()  # refuses a checkpoints path that is not a folder
        if loaded is not None:
            meta, state, tape = loaded
            if meta.get("scenario_sha256") != scenario_sha256(path):
                raise CheckpointError(f"{path / 'scenario.resolved.yaml'}: changed since the checkpoint was written; "
                                      "a run resumes only with the scenario it started with: start a new run instead")  # fmt: skip
            check_offsets(path, meta.get("offsets"), sc.output.events)
        bar = round_bar(sc, progress)
        sim = build_simulation(resolved, progress=bar)
        _announce_executor(sim, quiet)
        labels, energy = _labels(sim), _extra_columns(sim)
        sim.checkpointing.store = store if _store(sc, path) is not None else None
        if loaded is None:  # killed before its first checkpoint: start again in the same folder
            store.clean_partial()
            recorder = RunRecorder(path, labels, sc.output.events, extra_columns=energy)
            sim.recorder = recorder
        else:  # the recorder writes nothing until the replay of the checkpoint's rounds has passed its checks
            recorder = RunRecorder(path, labels, sc.output.events, extra_columns=energy, offsets=meta["offsets"])
            sim.resume_from(meta, state, tape, recorder, store.state_file)
        sim.checkpointing.tape.recording = sim.checkpointing.store is not None or loaded is not None
        result = path, _run_interruptible(sim, path)
        ok = True
        return result
    except OSError as e:
        raise _os_error(e, path) from None
    finally:
        if bar is not None:
            bar.close()
        _finish(recorder, lock, ok, path)


def _announce_executor(sim: Simulation, quiet: bool) -> None:
    """Say once, on stderr, which executor ``kind: auto`` chose and why."""
    import sys

    from tqdm import tqdm

    if sim.host.choice.why and not quiet:
        tqdm.write(f"note: executor: {sim.host.choice.why}", file=sys.stderr)


def _run_interruptible(sim: Simulation, path: Path | None) -> dict[str, Any]:
    import sys

    try:
        with _StopOnSignal(sim):
            return sim.run()
    except KeyboardInterrupt:
        if path is not None and sim.checkpointing.store is not None:
            done = sim.checkpointing.store.rounds()
            where = f"the last checkpoint is after round {done[-1]}" if done else "no checkpoint yet: it will start over"
            print(f"stopped at once; {where}; continue with: iotfl-sim run --resume {path}", file=sys.stderr)
        raise


def _store(sc: Scenario, path: Path) -> CheckpointStore | None:
    cfg = sc.output.checkpoint
    if cfg.every_rounds is None and cfg.every_s is None:
        return None
    return CheckpointStore(path, cfg.keep)


def _labels(sim: Simulation) -> list[str]:
    if sim.sc.numerics != "torch":
        return []
    return [*(t.label for t in sim.strategy.eval_targets()), *sim.strategy.eval_labels()]


def _extra_columns(sim: Simulation) -> list[str]:
    """rounds.csv's columns beyond the fixed ones: energy per device class, the server loop's (its mode's, the hierarchy's)."""
    carbon = ["carbon_g"] if sim.fleet.carbon is not None else []
    return [*(f"energy_{c}_j" for c in sim.fleet.class_names), *carbon, *sim.fleet.observer.columns, *sim.loop.columns]
