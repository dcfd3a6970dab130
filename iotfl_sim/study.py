"""Studies: one base scenario, a grid of overrides, every point run in parallel into one study folder.

A study file (YAML, read under the same limits as scenarios)::

    name: lr_vs_method
    base: quickstart.yaml              # relative to this file, or a whole scenario written inline
    grid:                              # the cartesian product of these
      algorithm.name: [fedavg, heterofl]
      seed: [0, 1, 2]
    zip:                               # varied together (equal-length lists), times the grid
      local.lr: [0.01, 0.05]
      local.epochs: [1, 2]
    workers: 4                         # parallel runs (default: every core); `--workers` overrides
    runs_per_worker: null              # runs one worker process makes before a fresh one replaces it
    executor: {kind: inline, threads: 1}   # every run's executor (default: this)
    dispatch: {kind: processes}        # or {kind: ray, address: null}: one Ray task per run (see Dispatch)

Each point is the base with ``--set``-style overrides (``scenario.loader.apply_set``), validated like
``iotfl-sim validate`` before anything runs. The study folder ``<out>/<name>/`` holds ``study.yaml`` (the
file as given), ``study.resolved.yaml`` (the base with every default filled in, and the grid),
``runs/<run_id>/`` (normal run folders) and the index ``study.json`` + ``index.csv``: one record per run
with ``id``, ``overrides``, ``status`` (pending | running | done | failed | interrupted), ``run_dir``
(relative to the study folder), ``error`` and ``host_s``. Running the same study again skips complete
runs, resumes interrupted or killed ones (``sim.runner.resume_run``) and runs the rest.

One sweep at a time writes a study folder: it holds the folder's lock (``lock_study``, the run folder's
``FolderLock``) from before its first write; a second sweep is refused before it changes anything. A run
folder appears whole under its id (``output.run_dir.new_run_dir_whole``), so the sweep never deletes one: a
folder in a run's way that is not a run fails that point.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import itertools
import json
import os
import re
import shutil
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from analysis import safe_json
from analysis.study import short
from iotfl_sim.forkserver import worker_context
from iotfl_sim.output.run_dir import NEW_SUFFIX, FolderLock, write_atomic
from iotfl_sim.output.space import no_space
from iotfl_sim.scenario.loader import ScenarioError, _format_errors, _set_parts, read_yaml
from iotfl_sim.scenario.model import plain_name
from iotfl_sim.scenario.profile import Strict
from iotfl_sim.study_check import axes_of, check_settings, raise_problems

STATUSES = ("pending", "running", "done", "failed", "interrupted")
MAX_RUNS = 100_000
DEFAULT_EXECUTOR = {"kind": "inline", "threads": 1}
ID_MAX = 80  # longer run ids are cut and get a hash suffix


class Dispatch(Strict):
    """Where a sweep's runs execute. ``processes``: worker processes on this machine (``worker_context``).
    ``ray``: one Ray task per run, on a local Ray or the cluster at ``address``; every node then needs iotfl-sim, the data
    under the same path (``IOTFL_DATA``) and the study folder on a shared filesystem."""

    kind: Literal["processes", "ray"] = "processes"
    address: str | None = Field(None, description="ray: a running cluster (e.g. ray://head:10001 or auto); null: a local Ray")


class StudyFile(Strict):
    """The study file (``iotfl-sim sweep STUDY.yaml``)."""

    name: str = Field(max_length=100, description="names the study folder <out>/<name>/: letters, digits, _ - .")
    description: str = ""
    base: str | dict[str, Any] = Field(description="the base scenario: a path relative to the study file, or inline")
    grid: dict[str, list[Any]] = Field(
        default_factory=dict, description="dotted scenario key -> values; every combination is one run"
    )
    zip_: dict[str, list[Any]] = Field(
        default_factory=dict, alias="zip", description="dotted key -> values, equal lengths, varied together"
    )
    workers: int | None = Field(None, ge=1, le=4096, description="runs at a time (null: one per core)")
    runs_per_worker: int | None = Field(
        None, ge=1, description="runs a worker process makes before a fresh one replaces it (null: no limit)"
    )
    executor: dict[str, Any] | None = Field(
        None, description="every run's executor (null: {kind: inline, threads: 1}; a sweep runs runs in parallel)"
    )
    dispatch: Dispatch = Field(
        default_factory=lambda: Dispatch(),
        description="how runs are spread: worker processes on this machine, or Ray tasks (a local Ray or a cluster)",
    )

    model_config = {**Strict.model_config, "populate_by_name": True}

    @field_validator("name")
    @classmethod
    def _plain_name(cls, v: str) -> str:
        return plain_name(v, "the study folder <out>/<name>/", "lr_sweep")

    @field_validator("grid", "zip_")
    @classmethod
    def _keys_and_lists(cls, v: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for key, values in v.items():
            if not re.fullmatch(r"[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*", key):
                raise ValueError(f"{key!r} is not a dotted scenario key (e.g. local.lr or fleet.groups.0.count)")
            if not values:
                raise ValueError(f"{key}: give at least one value")
        return v

    @model_validator(mode="after")
    def _zip_and_size(self) -> StudyFile:
        lengths = {k: len(v) for k, v in self.zip_.items()}
        if len(set(lengths.values())) > 1:
            shown = ", ".join(f"{k}: {n}" for k, n in lengths.items())
            raise ValueError(f"zip: every list must have the same length (got {shown})")
        both = sorted(set(self.grid) & set(self.zip_))
        if both:
            raise ValueError(f"zip: {', '.join(both)} also in grid; vary a key in one of them only")
        n = 1
        for values in self.grid.values():
            n *= len(values)
        n *= next(iter(lengths.values()), 1)
        if n > MAX_RUNS:
            raise ValueError(f"grid: {n:,} runs; a study holds at most {MAX_RUNS:,}")
        return self


# ---------------------------------------------------------------- expansion and ids


def expand(grid: dict[str, list[Any]], zipped: dict[str, list[Any]] | None = None) -> list[dict[str, Any]]:
    """The overrides of every point: the grid's cartesian product (first key slowest), each with every
    row of ``zipped`` (lists of equal length varied together).

    >>> expand({"seed": [0, 1]}, {"local.lr": [0.1, 0.2], "local.epochs": [1, 2]})[1]
    {'seed': 0, 'local.lr': 0.2, 'local.epochs': 2}
    """
    zipped = zipped or {}
    rows = [dict(zip(zipped, r, strict=True)) for r in zip(*zipped.values(), strict=True)] if zipped else [{}]
    points = []
    for combo in itertools.product(*grid.values()):
        for row in rows:
            points.append({**dict(zip(grid, combo, strict=True)), **row})
    return points


def value_text(v: Any) -> str:
    """A value as written in a run id or a CSV cell (YAML-ish scalars, compact JSON for the rest)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float, str)):
        return str(v)
    return json.dumps(v, separators=(",", ":"), sort_keys=True)


def _id_text(v: Any) -> str:
    """A mapping with a ``name`` (a whole ``algorithm:`` block, say) shows as its name in a run id."""
    if isinstance(v, dict) and isinstance(v.get("name"), str):
        return v["name"]
    return value_text(v)


def run_id(overrides: dict[str, Any]) -> str:
    """A readable, deterministic, filesystem-safe folder name for a point: ``algorithm.name=fedavg,seed=1``.

    A mapping value with a ``name`` shows as that name (``algorithm=heterofl``). Characters other than
    letters, digits and ``_ . = , + -`` become ``_``. When the id does not spell every value out, or it is
    longer than ``ID_MAX``, it is cut and gets a hash of the overrides, so ids stay unique.

    >>> run_id({"algorithm.name": "fedavg", "seed": 1})
    'algorithm.name=fedavg,seed=1'
    """
    if not overrides:
        return "base"
    shown = {k: _id_text(v) for k, v in overrides.items()}
    raw = ",".join(f"{k}={t}" for k, t in shown.items())
    safe = re.sub(r"[^A-Za-z0-9_.=,+-]", "_", raw)
    if safe.startswith((".", "-")):
        safe = "_" + safe
    exact = all(t == value_text(overrides[k]) for k, t in shown.items())
    if exact and safe == raw and len(safe) <= ID_MAX:
        return safe
    digest = hashlib.sha256(json.dumps(overrides, sort_keys=True, default=str).encode()).hexdigest()[:10]
    return f"{safe[: ID_MAX - 11]}-{digest}"


def set_args(overrides: dict[str, Any]) -> list[str]:
    """``--set`` strings for the overrides (JSON is YAML, so every value reads back as itself)."""
    return [f"{k}={json.dumps(v)}" for k, v in overrides.items()]


# ---------------------------------------------------------------- the study


@dataclass
class Point:
    id: str
    overrides: dict[str, Any]


@dataclass
class Study:
    """A validated study: where it is read from and what its points are."""

    source: Path  # the study file
    text: str  # as given
    spec: StudyFile
    base_path: Path | None  # the base scenario file (None: inline)
    base_dir: Path  # where the base's relative paths resolve
    base_resolved: dict[str, Any]
    points: list[Point] = field(default_factory=list)

    @property
    def executor_sets(self) -> list[str]:
        return [f"executor={json.dumps(self.spec.executor if self.spec.executor is not None else DEFAULT_EXECUTOR)}"]

    def task_base(self) -> dict[str, Any]:
        return {
            "path": str(self.base_path) if self.base_path is not None else None,
            "text": None if self.base_path is not None else yaml.safe_dump(self.spec.base, sort_keys=False),
            "base_dir": str(self.base_dir),
            "study": str(self.source),
        }


def load_point(base: dict[str, Any], sets: list[str], check: bool = False):
    """Scenario and groups of one point (in the sweep process or a worker); ``check``: every preflight check."""
    from iotfl_sim.scenario.loader import load_scenario, resolve_groups

    with _inline_base_errors(base):
        if base["path"] is not None:
            sc = load_scenario(base["path"], sets=sets)
        else:
            sc = load_scenario(text=base["text"], sets=sets)
        groups = resolve_groups(sc, Path(base["base_dir"]) / "device_profiles", _source(base))
    if check:
        check_point(base, sc, groups)
    return sc, groups


def check_point(base: dict[str, Any], sc: Any, groups: list[Any]) -> None:
    """The checks ``run`` makes before training (``sim.preflight``, less the output folder: the sweep's own)
    of a point that ``load_point`` loaded."""
    from iotfl_sim.output.loggers import check_available
    from iotfl_sim.sim.preflight import check_data, check_system

    source = _source(base)
    with _inline_base_errors(base):
        check_available(sc.output, source)
        check_data(sc, sum(g.count for g in groups), source)
        check_system(sc, groups, Path(base["base_dir"]), source)


def _source(base: dict[str, Any]) -> str:
    return base["path"] or f"{base['study']}: base"


@contextlib.contextmanager
def _inline_base_errors(base: dict[str, Any]):
    """An inline base's errors name the study file: the dumped text's lines mean nothing to the user."""
    try:
        yield
    except ScenarioError as e:
        if base["path"] is None:
            text = re.sub(r"(?m)^<scenario>(:\d+)?: ", f"{base['study']}: base.", str(e))
            raise ScenarioError(text) from None
        raise


def read_study(path: str | Path, check: bool = True, *, text: str | None = None) -> Study:
    """Read and validate a study file and every one of its points; ScenarioError names the point.
    ``text``: the study's YAML given directly (``path`` then only names it; a relative ``base`` resolves
    from ``path``'s folder)."""
    from iotfl_sim.scenario import safe_yaml
    from iotfl_sim.scenario.loader import resolved_dict

    path = Path(path)
    if text is None:
        doc = read_yaml(path, "study")
        text = path.read_text()
    else:
        try:
            doc = safe_yaml.load(text, str(path))
        except safe_yaml.YamlInputError as e:
            raise ScenarioError(str(e)) from None
    if not isinstance(doc.data, dict):
        raise ScenarioError(f"{path}: a study is a YAML mapping (name:, base:, grid:, ...)")
    try:
        spec = StudyFile.model_validate(doc.data)
    except ValidationError as e:
        raise ScenarioError(_format_errors(e, StudyFile, doc.data, str(path), doc.lines)) from None
    for key in [*spec.grid, *spec.zip_]:
        _set_parts(f"{key}=0")
    if isinstance(spec.base, str):
        base_path = _base_file(path, spec, doc.lines)
        base_dir = base_path.parent
    else:
        base_path, base_dir = None, path.resolve().parent
    study = Study(path, text, spec, base_path, base_dir, {})
    notes = io.StringIO()  # "algorithm changed ... dropped options": once per study, not once per point
    with contextlib.redirect_stderr(notes):
        sc, groups = load_point(study.task_base(), study.executor_sets)
        study.base_resolved = resolved_dict(sc, groups)
        seen: set[str] = set()
        for overrides in expand(spec.grid, spec.zip_):
            rid = run_id(overrides)
            if rid in seen:
                raise ScenarioError(f"{path}: grid: point {rid} appears twice (a value repeated in a list); list each value once")
            seen.add(rid)
            study.points.append(Point(rid, overrides))
        report = check_settings(
            axes_of(spec.grid, spec.zip_),
            lambda overrides: load_point(study.task_base(), study.executor_sets + set_args(overrides)),
            (lambda loaded: check_point(study.task_base(), *loaded)) if check else (lambda loaded: None),
            str(path),
            run_id,
        )
    for line in dict.fromkeys(notes.getvalue().splitlines()):
        print(line, file=sys.stderr)
    raise_problems(report)
    return study


def _base_file(path: Path, spec: StudyFile, lines: dict[tuple, int]) -> Path:
    """The base scenario file a study names, refused in one line when it is missing or is a study file (the
    study itself, say: its keys would read as nine unrelated scenario errors)."""
    where = f"{path}:{lines[('base',)]}" if ("base",) in lines else str(path)
    base_path = (path.resolve().parent / str(spec.base)).resolve()
    if not base_path.is_file():
        raise ScenarioError(f"{where}: base: no scenario file {base_path}")
    if base_path == path.resolve():
        raise ScenarioError(
            f"{where}: base: {spec.base} is this study file itself; base names the scenario file every point "
            "starts from (e.g. base: ../scenarios/quickstart.yaml), or holds that scenario inline"
        )
    try:
        data = read_yaml(base_path, "scenario").data
    except ScenarioError:
        return base_path  # the base's own problems are reported when it is loaded, naming its lines
    if isinstance(data, dict) and "base" in data and ("grid" in data or "zip" in data or "fleet" not in data):
        raise ScenarioError(
            f"{where}: base: {base_path} is a study file (it has base:), not a scenario; name the scenario file "
            "that study starts from, or sweep that study itself"
        )
    return base_path


# ---------------------------------------------------------------- the index


def _record(point: Point) -> dict[str, Any]:
    return {"id": point.id, "overrides": point.overrides, "status": "pending",
            "run_dir": f"runs/{point.id}", "error": None, "host_s": None}  # fmt: skip


def write_index(folder: Path, name: str, records: list[dict[str, Any]]) -> None:
    """study.json and index.csv, each written atomically."""
    write_atomic(folder / "study.json", json.dumps({"name": name, "runs": records}, indent=2) + "\n")
    keys = list(dict.fromkeys(k for r in records for k in r["overrides"]))
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["id", *keys, "status", "run_dir", "error", "host_s"])
    for r in records:
        cells = [value_text(r["overrides"][k]) if k in r["overrides"] else "" for k in keys]
        host = "" if r["host_s"] is None else f"{r['host_s']:.3f}"
        w.writerow([r["id"], *cells, r["status"], r["run_dir"], r["error"] or "", host])
    write_atomic(folder / "index.csv", buf.getvalue())


def read_index(folder: Path) -> dict[str, Any]:
    return safe_json.read(Path(folder) / "study.json")


def _summary(run_dir: Path) -> dict[str, Any] | None:
    try:
        summary = safe_json.read(run_dir / "summary.json")
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) else None


def _host_s(summary: dict[str, Any] | None) -> float | None:
    try:
        return float(summary["host_time_s"]["total"])  # type: ignore[index]
    except (TypeError, KeyError, ValueError):
        return None


# ---------------------------------------------------------------- workers

_EVENTS: Any = None
_STOP: Any = None


def _init_worker(events: Any, stop: Any) -> None:
    """A worker ignores Ctrl-C while idle; the run it executes installs its own handler (checkpoint, stop)."""
    global _EVENTS, _STOP
    _EVENTS, _STOP = events, stop
    signal.signal(signal.SIGINT, signal.SIG_IGN)


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
            _, summary = resume_run(run_dir, progress=False)
        else:
            with contextlib.redirect_stderr(io.StringIO()):  # the sweep printed load notes once already
                sc, groups = load_point(task["base"], task["sets"])
            _, summary = run_scenario(
                sc, groups, None, resolved_dict(sc, groups), progress=False,
                base_dir=Path(task["base"]["base_dir"]), run_dir=run_dir,
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
    host = _host_s(summary) if status == "done" else None
    return {"id": rid, "status": status, "error": error, "host_s": host if host is not None else time.perf_counter() - t0}


# ---------------------------------------------------------------- sweep


class _NoMainReimport:
    """Spawned workers re-run the parent's ``__main__`` script unless told not to; a notebook-style script
    calling the sweep at top level would then start the sweep again in every worker. The workers need
    nothing from ``__main__`` (the task is ``iotfl_sim.study._run_task``), so hide its file meanwhile."""

    def __enter__(self) -> None:
        self.main = sys.modules.get("__main__")
        self.file = None
        if self.main is not None and getattr(self.main, "__spec__", None) is None and hasattr(self.main, "__file__"):
            self.file = self.main.__file__
            del self.main.__file__

    def __exit__(self, *exc: Any) -> None:
        if self.file is not None:
            self.main.__file__ = self.file  # type: ignore[union-attr]


@dataclass
class SweepResult:
    folder: Path
    records: list[dict[str, Any]]
    stopped: bool

    def count(self, status: str) -> int:
        return sum(r["status"] == status for r in self.records)


def study_folder(study: Study, out: str | Path) -> Path:
    return Path(out) / study.spec.name


def lock_study(folder: Path) -> FolderLock:
    """Make the study folder if need be and take its lock (``output.run_dir.FolderLock``, as a run folder's):
    one sweep at a time writes a study; a second is refused before it changes anything."""
    folder.mkdir(parents=True, exist_ok=True)  # an OSError names the path in the way (the CLI: one line)
    return FolderLock(
        folder, f"{folder}: another `iotfl-sim sweep` is running this study (it holds {folder / FolderLock.NAME}); "
        "wait for it to end, or give another --out",
    )  # fmt: skip


def base_difference(recorded: Any, now: Any, path: str = "") -> str | None:
    """Where a study folder's recorded base scenario (``study.resolved.yaml``) and the study's base now first
    differ, as ``field: recorded -> now``; None when they are the same study. A key the record lacks whose
    value now is None is a field a later version added with its "not set" default (the behaviour the
    recorded runs had), so it is no difference: upgrading iotfl-sim does not strand a half-run study."""
    if isinstance(recorded, dict) and isinstance(now, dict):
        for key in list(recorded) + [k for k in now if k not in recorded]:
            if key not in recorded and now[key] is None:
                continue
            if key not in now:
                return f"{path}{key}: {_short(recorded[key])} -> absent"
            if key not in recorded:
                return f"{path}{key}: absent -> {_short(now[key])}"
            found = base_difference(recorded[key], now[key], f"{path}{key}.")
            if found is not None:
                return found
        return None
    if isinstance(recorded, list) and isinstance(now, list) and len(recorded) == len(now):
        for i, (a, b) in enumerate(zip(recorded, now, strict=True)):
            found = base_difference(a, b, f"{path}{i}.")
            if found is not None:
                return found
        return None
    if recorded != now:
        return f"{path.rstrip('.') or 'base'}: {_short(recorded)} -> {_short(now)}"
    return None


def _short(value: Any) -> str:
    return short(repr(value), 60)


def prepare(study: Study, out: str | Path) -> tuple[Path, list[dict[str, Any]]]:
    """Reopen (or fill) the study folder, whose lock the caller holds (``lock_study``); the index records,
    with runs complete on disk marked done. Checks before it writes: a refusal leaves the folder as it was."""
    folder = study_folder(study, out)
    resolved_path = folder / "study.resolved.yaml"
    resolved = {
        "name": study.spec.name,
        "base": study.base_resolved,
        "grid": study.spec.grid,
        "zip": study.spec.zip_,
        "executor": study.spec.executor if study.spec.executor is not None else DEFAULT_EXECUTOR,
    }
    if resolved_path.is_file():
        try:
            before = read_yaml(resolved_path, "resolved study").data
        except ScenarioError as e:
            raise ScenarioError(f"{e}; it records which study {folder} holds: restore it, or give another --out") from None
        where = base_difference(before.get("base") if isinstance(before, dict) else None, study.base_resolved)
        if where is not None:
            raise ScenarioError(
                f"{folder}: holds a study whose base scenario differs from {study.source}'s ({where}); its runs "
                "would not match: give another --out or another name"
            )
    write_atomic(folder / "study.yaml", study.text)
    write_atomic(resolved_path, yaml.safe_dump(resolved, sort_keys=False))
    runs = folder / "runs"
    for tmp in runs.glob(f".*{NEW_SUFFIX}") if runs.is_dir() else []:  # a run folder a killed sweep was making
        shutil.rmtree(tmp, ignore_errors=True)
    records = []
    for p in study.points:
        rec = _record(p)
        summary = _summary(folder / rec["run_dir"])
        if summary is not None and summary.get("status") == "complete":
            rec["status"], rec["host_s"] = "done", _host_s(summary)
        records.append(rec)
    return folder, records


def sweep(
    study: Study,
    out: str | Path = "studies",
    workers: int | None = None,
    progress: bool | None = None,
    dispatch: str | None = None,
) -> SweepResult:
    """Run every point of ``study`` not complete yet, ``workers`` at a time (default: the study's, else
    one per core), in worker processes (``worker_context``) or as Ray tasks (``dispatch``: overrides the study's
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
    write_index(folder, study.spec.name, records)
    n = workers or study.spec.workers or os.cpu_count() or 1
    n = max(1, min(n, len(todo)))
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
            run.on_ray(todo, n, study.spec.dispatch.address)
        elif todo:
            run.on_processes(todo, n)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        bar.close()
        for r in records:  # whatever happened, the index ends consistent: nothing is left "running"
            if r["status"] == "running":
                r["status"] = "interrupted"
        write_index(folder, study.spec.name, records)
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
        write_index(self.folder, self.study.spec.name, self.records)

    def on_processes(self, todo: list[dict[str, Any]], n: int) -> None:
        import concurrent.futures as cf
        import queue

        ctx = worker_context()
        events, stop_event = ctx.Queue(), ctx.Event()
        self.on_stop.append(stop_event.set)
        try:
            with _NoMainReimport(), cf.ProcessPoolExecutor(
                max_workers=n, mp_context=ctx, initializer=_init_worker, initargs=(events, stop_event),
                max_tasks_per_child=self.study.spec.runs_per_worker,
            ) as pool:  # fmt: skip
                env = dict(os.environ)  # (Ray tasks may run on other machines: they keep theirs)
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

    def on_ray(self, todo: list[dict[str, Any]], n: int, address: str | None) -> None:
        """One Ray task per run, at most ``n`` in flight (so a task in flight is a run running). A stop
        cancels the running tasks, which Ray delivers as Ctrl-C: the run checkpoints as under processes."""
        try:
            import ray
        except ImportError:
            raise ScenarioError("dispatch.kind: ray needs Ray: pip install 'iotfl-sim[ray]' (or dispatch: {kind: processes})") from None
        from ray.exceptions import RayError, TaskCancelledError

        from iotfl_sim.exec.ray_exec import start_ray

        owns = start_ray(address, n)
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
