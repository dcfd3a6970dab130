"""Studies and groups of runs: read a study folder (study.json / index.csv) or loose run folders, and
group the runs into *methods* whose seeds are compared.

Reads only the documented study and run-folder formats (never the simulator itself):

    <study>/study.json   {"name", "base", "grid", "zip", "runs": [{"id", "overrides", "status", "run_dir",
                          "error", "host_s"}]} (study folders written before it kept base, grid and zip:
                          only name and runs)
    <study>/index.csv    the same records (read when study.json is absent)
    <study>/runs/<id>/   a normal run folder

A run counts when its study record says ``done`` (a loose run folder: when its summary.json says
``complete``); every other run is kept aside as *excluded* with the reason, and the tables list it.
"""

from __future__ import annotations

import csv
import json
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analysis.rundir import PlotInputError, Run, load_run, number_repeated_labels, read_resolved
from iotfl_sim.core import safe_json

__all__ = [
    "Excluded",
    "Method",
    "Study",
    "StudyRun",
    "Selection",
    "is_study_dir",
    "load_study",
    "select",
]

SEED_KEY = "seed"


@dataclass
class StudyRun:
    """One record of a study's index."""

    id: str
    overrides: dict[str, Any]
    status: str
    run_dir: Path  # absolute
    error: str | None = None
    host_s: float | None = None


@dataclass
class Study:
    """A study folder as read. ``base`` (the resolved base scenario), ``grid`` and ``zip`` are None where the
    index does not record them (study folders written before study.json kept them, or read from index.csv)."""

    path: Path
    name: str
    base: dict[str, Any] | None
    grid: dict[str, list[Any]] | None
    zip: dict[str, list[Any]] | None
    runs: list[StudyRun]

    @property
    def host_s_total(self) -> float:
        return float(sum(r.host_s for r in self.runs if r.host_s is not None))


@dataclass
class Excluded:
    """A run left out of the comparison, and why."""

    id: str
    path: Path
    reason: str


@dataclass
class Method:
    """The runs of one method (its seeds), with the key that defines it."""

    label: str
    key: tuple[tuple[str, Any], ...]
    runs: list[Run] = field(default_factory=list)
    run_ids: list[str] = field(default_factory=list)
    seeds: list[Any] = field(default_factory=list)
    host_s: list[float | None] = field(default_factory=list)
    loose: bool = False  # loose run folders grouped by algorithm + scenario name


@dataclass
class Selection:
    """What ``select`` found: methods in a stable order, excluded runs, and the studies read."""

    methods: list[Method]
    excluded: list[Excluded]
    studies: list[Study]


EXAMPLES = 3  # excluded runs named one by one in messages and pages; excluded.csv lists every one


def excluded_counts(excluded: Sequence[Excluded]) -> str:
    """The excluded runs counted by why, most common first: ``99,999 pending, 1 unreadable``."""
    kinds = Counter(e.reason.split(":")[0].removeprefix("status ") for e in excluded)
    return ", ".join(f"{n:,} {k}" for k, n in kinds.most_common())


def excluded_examples(excluded: Sequence[Excluded], n: int = EXAMPLES) -> list[Excluded]:
    """The first ``n`` excluded runs with different reasons."""
    out: list[Excluded] = []
    reasons: set[str] = set()
    for e in excluded:
        if e.reason not in reasons:
            reasons.add(e.reason)
            out.append(e)
            if len(out) == n:
                break
    return out


def short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def require_runs(sel: Selection, paths: Sequence[str | Path], what: str) -> None:
    """Refuse (one line, however many runs were left out) a selection with no finished run: ``what`` would
    otherwise write nothing, or an empty page, and exit 0."""
    if sel.methods:
        return
    given = ", ".join(str(p) for p in paths)
    if sel.excluded:
        shown = "; ".join(short(f"{e.id}: {e.reason}") for e in excluded_examples(sel.excluded, 2))
        raise PlotInputError(
            f"{what}: no finished run in {given} ({len(sel.excluded):,} left out: {excluded_counts(sel.excluded)}; "
            f"e.g. {shown}); a run folder has rounds.csv and summary.json, a study folder study.json"
        )
    raise PlotInputError(
        f"{what}: {given} holds no run (a run folder has rounds.csv and summary.json, a study folder study.json)"
    )


def is_study_dir(path: str | Path) -> bool:
    p = Path(path)
    return (
        p.is_dir()
        and ((p / "study.json").is_file() or (p / "index.csv").is_file())
        and not (p / "rounds.csv").is_file()
    )


def _parse_cell(text: str) -> Any:
    """index.csv cells: JSON when they parse as JSON, else the text (empty -> None)."""
    if text == "":
        return None
    try:
        return safe_json.loads(text)
    except ValueError:
        return text


_REWRITE = "the sweep rewrites the study's index: run `iotfl-sim sweep` on its study file again"


def _read_index_csv(path: Path) -> list[dict[str, Any]]:
    """index.csv's rows as records (cells parsed by ``_parse_cell``); a row with more or fewer cells than the
    header, a cell over the csv module's field limit or bytes that are not UTF-8 are refused."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.reader(f)
            header = next(reader, [])
            records = []
            for row in reader:
                if not row:  # a blank line
                    continue
                if len(row) != len(header):
                    raise PlotInputError(
                        f"{path}: line {reader.line_num} has {len(row)} cells, the header {len(header)}; {_REWRITE}"
                    )
                records.append({k: _parse_cell(v) for k, v in zip(header, row, strict=True)})
    except (csv.Error, UnicodeDecodeError) as e:
        raise PlotInputError(f"{path}: not a readable CSV file ({e}); {_REWRITE}") from None
    return records


def load_study(path: str | Path) -> Study:
    """Read ``<path>/study.json`` (or ``index.csv`` when there is no study.json)."""
    path = Path(path)
    sj = path / "study.json"
    if sj.is_file():
        try:
            data = safe_json.loads(sj.read_bytes())
        except ValueError as e:
            raise PlotInputError(f"{sj}: not readable JSON ({e}); {_REWRITE}") from None
        if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
            raise PlotInputError(f"{sj}: expected an object with a 'runs' list; {_REWRITE}")
        records = data["runs"]
    elif (path / "index.csv").is_file():
        data = {"name": path.name}
        records = _read_index_csv(path / "index.csv")
    else:
        raise PlotInputError(f"{path}: not a study folder (no study.json or index.csv)")
    runs = []
    root = path.resolve()
    inside = os.path.join(root, "")  # the study folder's path with a trailing separator
    for i, rec in enumerate(records):
        if not isinstance(rec, dict):
            raise PlotInputError(f"{path}: run record {i} is not an object")
        rid = str(rec.get("id") or f"run{i}")
        overrides = rec.get("overrides") or {}
        if not isinstance(overrides, dict):
            overrides = {}
        rd = rec.get("run_dir") or f"runs/{rid}"
        status = str(rec.get("status") or "pending")
        # only a run that is read needs its links followed (100,000 records: a resolve() each took a minute)
        where = str((root / str(rd)).resolve()) if status == "done" else os.path.normpath(os.path.join(root, str(rd)))
        run_dir = Path(where)
        if not where.startswith(inside):  # a study's runs live in it: never read another folder
            status, rec = "failed", {**rec, "error": f"run_dir {rd!r} is outside the study folder"}
        host = rec.get("host_s")
        runs.append(
            StudyRun(
                id=rid,
                overrides=dict(overrides),
                status=status,
                run_dir=run_dir,
                error=rec.get("error") or None,
                host_s=float(host) if isinstance(host, int | float) else None,
            )
        )
    base, grid, zipped = (_definition_part(sj, data, key) for key in ("base", "grid", "zip"))
    return Study(path=path, name=str(data.get("name") or path.name), base=base, grid=grid, zip=zipped, runs=runs)


def _definition_part(sj: Path, data: dict[str, Any], key: str) -> dict[str, Any] | None:
    """study.json's ``base`` (an object), ``grid`` or ``zip`` (objects of lists); None when not recorded."""
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise PlotInputError(f"{sj}: '{key}' is {type(value).__name__}, expected an object; {_REWRITE}")
    if key != "base":
        bad = next((k for k, v in value.items() if not isinstance(v, list)), None)
        if bad is not None:
            raise PlotInputError(f"{sj}: '{key}.{short(bad, 60)}' is {type(value[bad]).__name__}, expected a list of values; {_REWRITE}")
    return value


# ---------------------------------------------------------------------------------------------------------
# configuration values of a run (for --by and seeds)


def _lookup(d: Any, dotted: str) -> Any:
    cur = d
    for part in dotted.split("."):
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            return None
    return cur


def _value(key: str, overrides: dict[str, Any], resolved: dict[str, Any], base: dict[str, Any]) -> Any:
    if key in overrides:
        return overrides[key]
    v = _lookup(resolved, key)
    return v if v is not None else _lookup(base, key)


def fmt_value(v: Any) -> str:
    """An override value as labels and tables show it: strings bare, the rest as sorted JSON."""
    if isinstance(v, str):
        return v
    return json.dumps(v, sort_keys=True)


def _short(v: Any) -> str:
    """A whole ``algorithm:`` block (a mapping with a ``name``) reads as its name."""
    return v["name"] if isinstance(v, dict) and isinstance(v.get("name"), str) else fmt_value(v)


def _named(v: Any) -> str:
    """A named mapping as ``name (option=value, ...)``, for when two blocks share a name."""
    if not (isinstance(v, dict) and isinstance(v.get("name"), str)):
        return fmt_value(v)
    rest = ", ".join(f"{k}={fmt_value(x)}" for k, x in sorted(v.items()) if k != "name")
    return f"{v['name']} ({rest})" if rest else v["name"]


def _label(key: tuple[tuple[str, Any], ...], keys_shown: Sequence[str], fmt: Any = fmt_value) -> str:
    if len(keys_shown) == 1:
        return next((fmt(v) for k, v in key if k in keys_shown), "all runs")
    parts = [f"{k}={fmt(v)}" for k, v in key if k in keys_shown]
    return ", ".join(parts) if parts else "all runs"


def _shown_keys(methods: list[Method]) -> tuple[list[str], Any]:
    """The keys (and value format) a label needs: those that tell methods apart, short forms where they
    stay distinct, and none that another key already determines (a zip of ``algorithm`` and ``model.family``
    is labelled by the algorithm alone)."""
    keys = [k for k, _ in methods[0].key] if methods else []

    def distinct(ks: Sequence[str], fmt: Any) -> int:
        return len({tuple(fmt(dict(m.key).get(k)) for k in ks) for m in methods})

    shown = [k for k in keys if distinct([k], fmt_value) > 1] or keys
    fmt = _short if distinct(shown, _short) == distinct(shown, fmt_value) else _named
    for k in reversed(list(shown)):
        rest = [x for x in shown if x != k]
        if rest and distinct(rest, fmt) == distinct(shown, fmt):
            shown = rest
    return shown, fmt


# ---------------------------------------------------------------------------------------------------------


def select(paths: Iterable[str | Path], by: Sequence[str] | None = None) -> Selection:
    """Load every study folder and run folder in ``paths`` and group their usable runs into methods.

    Grouping: ``by`` (dotted scenario keys, e.g. ``algorithm.name``) when given; otherwise a study's runs
    by every override except ``seed``, and loose run folders by algorithm name + scenario name.
    Methods keep the order in which they are first met.
    """
    studies: list[Study] = []
    excluded: list[Excluded] = []
    entries: list[tuple[str, Path, dict[str, Any], dict[str, Any], float | None, bool]] = []
    for p in paths:
        p = Path(p)
        if is_study_dir(p):
            st = load_study(p)
            studies.append(st)
            for r in st.runs:
                if r.status != "done":
                    why = f"status {r.status}" + (f": {r.error}" if r.error else "")
                    excluded.append(Excluded(r.id, r.run_dir, why))
                    continue
                entries.append((r.id, r.run_dir, r.overrides, st.base, r.host_s, True))
        else:
            entries.append((p.name, p, {}, {}, None, False))

    methods: dict[tuple, Method] = {}
    varying: set[str] = set()
    for rid, run_dir, overrides, base, host_s, in_study in entries:
        try:
            run = load_run(run_dir)
        except PlotInputError as e:
            excluded.append(Excluded(rid, run_dir, f"unreadable: {e}"))
            continue
        if not in_study:
            status = run.summary.get("status")
            if status != "complete":
                why = "no summary.json (still running?)" if not run.summary else f"status {status}"
                excluded.append(Excluded(rid, run_dir, why))
                continue
        resolved = read_resolved(run_dir)
        if by:
            key = tuple((k, _value(k, overrides, resolved, base)) for k in by)
            varying.update(by)
        elif in_study:
            key = tuple(sorted(((k, v) for k, v in overrides.items() if k != SEED_KEY), key=lambda kv: kv[0]))
            varying.update(k for k, _ in key)
        else:
            key = (
                ("algorithm.name", run.algorithm or _lookup(resolved, "algorithm.name")),
                ("name", run.name),
            )
            varying.update(("algorithm.name", "name"))
        hkey = tuple((k, fmt_value(v)) for k, v in key)
        m = methods.get(hkey)
        if m is None:
            m = methods[hkey] = Method(label="", key=key, loose=not by and not in_study)
        m.runs.append(run)
        m.run_ids.append(rid)
        m.seeds.append(_value(SEED_KEY, overrides, resolved, base))
        m.host_s.append(host_s)
    out = list(methods.values())
    shown, fmt = _shown_keys(out)
    for m in out:
        m.label = _loose_label(m) if m.loose else _label(m.key, shown, fmt)
    number_repeated_labels(out)
    return Selection(methods=out, excluded=excluded, studies=studies)


def _loose_label(m: Method) -> str:
    d = dict(m.key)
    algo, name = d.get("algorithm.name"), d.get("name")
    if algo and name and str(algo).lower() not in str(name).lower():
        return f"{name} ({algo})"
    return str(name or algo or "runs")


