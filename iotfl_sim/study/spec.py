"""The study file (``iotfl-sim sweep STUDY.yaml``; the format is in ``iotfl_sim.study``'s docstring): its model,
the grid x zip expansion into points, run ids, and reading it with every point validated as ``run`` would."""

from __future__ import annotations

import contextlib
import hashlib
import io
import itertools
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from iotfl_sim.core.errors import ScenarioError
from iotfl_sim.scenario.loader import _format_errors, _set_parts, read_yaml
from iotfl_sim.scenario.model import plain_name
from iotfl_sim.scenario.profile import Strict
from iotfl_sim.study_check import axes_of, check_settings, raise_problems

MAX_RUNS = 100_000
DEFAULT_EXECUTOR = {"kind": "inline", "threads": 1}
ID_MAX = 80  # longer run ids are cut and get a hash suffix


class Dispatch(Strict):
    """Where a sweep's runs execute. ``processes``: worker processes on this machine (``worker_context``).
    ``ray``: one Ray task per run, on a local Ray or the cluster at ``address``; every node then needs the same
    iotfl-sim and PyTorch, the data where a run on it looks (a run keeps its node's environment: its ``IOTFL_DATA``)
    and the study folder on a shared filesystem at the same path (docs/ray_cluster.md)."""

    kind: Literal["processes", "ray"] = "processes"
    address: str | None = Field(None, description="ray: a running cluster (auto, host:6379 or ray://host:10001); null: a local Ray")


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
    workers: int | None = Field(None, ge=1, le=4096, description="runs at a time (null: one per core; through Ray, one per CPU of the cluster)")
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
