"""The study folder: its index (``study.json`` + ``index.csv``), its lock, and reopening it for a sweep
(refused when it holds another study; runs complete on disk count as done)."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path
from typing import Any

import yaml

from analysis.study import short
from iotfl_sim.core import safe_json
from iotfl_sim.core.errors import ScenarioError
from iotfl_sim.output.run_dir import NEW_SUFFIX, FolderLock, write_atomic
from iotfl_sim.scenario.loader import read_yaml
from iotfl_sim.study.spec import DEFAULT_EXECUTOR, Point, Study, value_text

STATUSES = ("pending", "running", "done", "failed", "interrupted")


def _record(point: Point) -> dict[str, Any]:
    return {"id": point.id, "overrides": point.overrides, "status": "pending",
            "run_dir": f"runs/{point.id}", "error": None, "host_s": None}  # fmt: skip


def definition(study: Study) -> dict[str, Any]:
    """What study.json keeps of the study besides its runs: its name, the resolved base scenario, grid and zip."""
    return {"name": study.spec.name, "base": study.base_resolved, "grid": study.spec.grid, "zip": study.spec.zip_}


def write_index(folder: Path, study: Study, records: list[dict[str, Any]]) -> None:
    """study.json (the study's ``definition`` and its run records) and index.csv, each written atomically."""
    write_atomic(folder / "study.json", json.dumps({**definition(study), "runs": records}, indent=2) + "\n")
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


def run_summary(run_dir: Path) -> dict[str, Any] | None:
    try:
        summary = safe_json.read(run_dir / "summary.json")
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) else None


def summary_host_s(summary: dict[str, Any] | None) -> float | None:
    try:
        return float(summary["host_time_s"]["total"])  # type: ignore[index]
    except (TypeError, KeyError, ValueError):
        return None



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
        **definition(study),
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
        summary = run_summary(folder / rec["run_dir"])
        if summary is not None and summary.get("status") == "complete":
            rec["status"], rec["host_s"] = "done", summary_host_s(summary)
        records.append(rec)
    return folder, records
