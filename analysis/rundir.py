"""Read a run directory (rounds.csv, devices.csv, summary.json) into numpy arrays; events.jsonl: event_log.py.

Depends only on the documented run-directory format, never on ``iotfl_sim`` itself, so it also works
on folders copied off a cluster or written by an older version of the simulator.
"""

from __future__ import annotations

import csv
import itertools
import re
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from iotfl_sim.core import safe_json

__all__ = [
    "PlotInputError",
    "Run",
    "load_run",
    "load_runs",
    "declared_targets",
    "read_resolved",
    "read_devices",
    "trained_devices",
]

RUN_DIR_CONTENTS = (
    "rounds.csv (plus optionally devices.csv, events.jsonl, summary.json, scenario.resolved.yaml)"
)
FAILURE_EVENTS = frozenset({"oom", "refused", "depleted", "offline", "dropped"})

_CHUNK_ROWS = 20_000  # rows parsed at a time (a row of a wide rounds.csv held as Python strings: ~3 KB)


class PlotInputError(Exception):
    """A run directory (or a file in it) is missing or unreadable."""


@dataclass
class Run:
    """One run directory, loaded.

    ``rounds`` maps every rounds.csv column to a float array (empty cells are nan);
    ``devices`` maps devices.csv columns to arrays (float, or str for text columns such as device_class).
    """

    path: Path
    name: str
    algorithm: str
    label: str
    rounds: dict[str, np.ndarray]
    devices: dict[str, np.ndarray] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    # what figures derive from the run's files once per load (``analysis.event_log.event_digest``: one read of
    # events.jsonl shared by every figure)
    memo: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def n_rounds(self) -> int:
        """Number of rows in rounds.csv."""
        return len(next(iter(self.rounds.values()))) if self.rounds else 0

    @property
    def events_path(self) -> Path:
        """Where this run's event log would be (it may not exist)."""
        return self.path / "events.jsonl"

    @cached_property
    def server_mode(self) -> str | None:
        """How the server folds in updates (``sync``, ``async``, ``semi_async``): summary.json's ``server_mode``,
        else scenario.resolved.yaml's ``server.mode``; None when neither says (runs from before the modes)."""
        mode = self.summary.get("server_mode")
        if not isinstance(mode, str) or not mode:
            server = read_resolved(self.path).get("server")
            mode = server.get("mode") if isinstance(server, dict) else None
        return mode if isinstance(mode, str) and mode else None

    @property
    def trained(self) -> tuple[int, int] | None:
        """(devices with at least one completed task, devices in the fleet) from devices.csv (``trained_devices``)."""
        return trained_devices(self.devices)

    def column(self, name: str) -> np.ndarray | None:
        """A rounds.csv column, or None when absent or entirely empty."""
        col = self.rounds.get(name)
        if col is None or col.size == 0 or np.isnan(col).all():
            return None
        return col


# ---------------------------------------------------------------------------------------------------------
# CSV -> columns


def _to_float_column(values: Sequence[str]) -> np.ndarray | None:
    """Parse strings into a float array (empty -> nan); None when some cell is not a number."""
    try:
        return np.array(values, dtype=float)
    except ValueError:
        pass
    arr = np.char.strip(np.array(values, dtype=str))
    arr = np.where(arr == "", "nan", arr)  # (np.where widens a '<U1' array of blanks to fit "nan")
    try:
        return arr.astype(float)
    except ValueError:
        return None


def _lenient_float_column(values: Sequence[str]) -> np.ndarray:
    """Like _to_float_column, but cells that are not numbers become nan instead of failing."""
    col = _to_float_column(values)
    if col is not None:
        return col
    out = np.full(len(values), np.nan)
    for i, v in enumerate(values):
        try:
            out[i] = float(v)
        except ValueError:
            pass
    return out


def _read_csv_columns(path: Path, columns: Iterable[str] | None, numeric_only: bool) -> dict[str, np.ndarray]:
    """Read a CSV with a header row into column arrays, in chunks (fast for millions of rows).

    Rows shorter than the header (for example a half-written last line) are dropped.
    """
    try:
        f = open(path, newline="", encoding="utf-8-sig")  # noqa: SIM115 - closed below
    except OSError as e:
        raise PlotInputError(
            f"{path}: cannot read ({e.strerror}); a run directory must contain {RUN_DIR_CONTENTS}"
        ) from e
    with f:
        reader = csv.reader(f)
        try:
            header = [h.strip() for h in next(reader)]
        except StopIteration:
            raise PlotInputError(f"{path}: empty file, expected a CSV header row") from None
        except (csv.Error, UnicodeDecodeError) as e:
            raise PlotInputError(f"{path}: not a readable CSV file ({e})") from None
        wanted = header if columns is None else [c for c in columns if c in header]
        idx = [header.index(c) for c in wanted]
        ncols = len(header)
        parts: dict[str, list[np.ndarray]] = {c: [] for c in wanted}
        text_cols: set[str] = set()
        try:
            while True:
                raw_rows = list(itertools.islice(reader, _CHUNK_ROWS))
                if not raw_rows:
                    break
                chunk = [r for r in raw_rows if len(r) >= ncols]
                if not chunk:
                    continue
                cols = list(zip(*chunk, strict=False))
                for c, i in zip(wanted, idx, strict=True):
                    raw = cols[i]
                    if numeric_only:
                        parts[c].append(_lenient_float_column(raw))
                        continue
                    arr = None if c in text_cols else _to_float_column(raw)
                    if arr is None:
                        text_cols.add(c)
                        arr = np.array(raw, dtype=str)
                    parts[c].append(arr)
        except (csv.Error, UnicodeDecodeError) as e:
            raise PlotInputError(f"{path}: not a readable CSV file ({e})") from None
    out: dict[str, np.ndarray] = {}
    for c, chunks in parts.items():
        if not chunks:
            out[c] = np.zeros(0)
        elif c in text_cols:
            out[c] = np.concatenate([ch.astype(str) for ch in chunks])
        else:
            out[c] = np.concatenate(chunks)
    return out


def _read_table(path: Path, columns: Iterable[str] | None) -> dict[str, np.ndarray]:
    """Read devices.csv-like tables: numpy's C parser when the file is regular, else the csv module.

    The first rows decide each column's type (number, number with empty cells, text); a file that
    does not fit that guess (or has quoted commas, ragged rows ...) is re-read with the csv module.
    """
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f)
            header = [h.strip() for h in next(reader, [])]
            head_rows = [r for r in itertools.islice(reader, 2000) if len(r) == len(header)]
    except (OSError, csv.Error, UnicodeDecodeError):
        header = []
    if not header:
        return _read_csv_columns(path, columns, numeric_only=False)  # raises the right error
    wanted = header if columns is None else [c for c in dict.fromkeys(columns) if c in header]
    if not wanted:
        return {}
    kinds: dict[str, str] = {}
    for c in wanted:
        i = header.index(c)
        cells = [r[i].strip() for r in head_rows]
        try:
            [float(v) for v in cells if v]
            kinds[c] = "blank" if "" in cells else "num"
        except ValueError:
            kinds[c] = "text"
    width = {c: max([len(r[header.index(c)]) for r in head_rows] + [1]) for c in wanted}
    width = {c: max(16, 2 * w) for c, w in width.items()}
    dtype = np.dtype([(f"c{j}", "f8" if kinds[c] == "num" else f"U{width[c]}") for j, c in enumerate(wanted)])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "input contained no data" for a header-only file
            table = np.atleast_1d(
                np.loadtxt(
                    path,
                    delimiter=",",
                    skiprows=1,
                    usecols=[header.index(c) for c in wanted],
                    dtype=dtype,
                    quotechar='"',
                    comments=None,
                    ndmin=1,
                )
            )
    except (ValueError, OSError, UnicodeDecodeError):
        return _read_csv_columns(path, wanted, numeric_only=False)
    out: dict[str, np.ndarray] = {}
    for j, c in enumerate(wanted):
        col = table[f"c{j}"]
        if kinds[c] == "num":
            out[c] = np.ascontiguousarray(col)
            continue
        if col.size and int(np.char.str_len(col).max()) >= width[c]:
            return _read_csv_columns(path, wanted, numeric_only=False)  # some text may have been cut off
        if kinds[c] == "blank":
            try:
                out[c] = np.where(np.char.strip(col) == "", "nan", col).astype(float)
                continue
            except ValueError:
                pass
        out[c] = np.ascontiguousarray(col)
    return out


def read_devices(path: Path, columns: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """devices.csv (or a table like it) as column arrays, only ``columns`` (None: all); {} when the file is
    missing. Raises PlotInputError naming the file when it cannot be read."""
    return _read_table(path, columns) if path.is_file() else {}


def trained_devices(devices: dict[str, np.ndarray]) -> tuple[int, int] | None:
    """(devices with at least one completed task, devices) from devices.csv's columns: the share of the fleet
    that trained at least once. None without a ``completed`` column (no devices.csv, or one written before it)."""
    done = devices.get("completed")
    if done is None or done.dtype.kind not in "fiu":
        return None
    return int(np.count_nonzero(np.nan_to_num(done.astype(float)) > 0)), int(done.size)


# ---------------------------------------------------------------------------------------------------------
# names


def _scenario_name_algorithm(path: Path) -> tuple[str | None, str | None]:
    """(name, algorithm) from scenario.resolved.yaml, read with a couple of regexes (no YAML needed)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None, None

    def clean(s: str) -> str:
        s = s.split(" #", 1)[0].strip()
        return s.strip("'\"")

    name = algo = None
    m = re.search(r"^name:[ \t]*(\S.*)$", text, re.M)
    if m:
        name = clean(m.group(1))
    m = re.search(r"^algorithm:[ \t]*(\S.*)$", text, re.M)
    if m and not m.group(1).startswith("{"):
        algo = clean(m.group(1))
    else:
        m = re.search(r"^algorithm:.*\n(?:[ \t]+.*\n)*?[ \t]+name:[ \t]*(\S.*)$", text, re.M)
        if m:
            algo = clean(m.group(1))
    return name, algo


MAX_RESOLVED_BYTES = 1 << 20  # a resolved scenario is tens of KB (the simulator reads at most 1 MB of YAML)
MAX_RESOLVED_DEPTH = 100  # as the simulator's YAML limit; PyYAML takes seconds, then recurses too deep, past ~600


def _nested_too_deep(text: str) -> bool:
    """Whether YAML ``text`` may nest more than MAX_RESOLVED_DEPTH levels (brackets or indentation), checked
    before parsing: PyYAML's time grows faster than the nesting, and it ends in a RecursionError."""
    depth = 0
    for m in re.finditer(r"[\[\]{}]", text):
        depth += 1 if m.group() in "[{" else -1
        if depth > MAX_RESOLVED_DEPTH:
            return True
    return any(len(line) - len(line.lstrip(" -")) > 2 * MAX_RESOLVED_DEPTH for line in text.splitlines())


def read_resolved(run_dir: Path) -> dict[str, Any]:
    """The run's scenario.resolved.yaml as a dict; {} when it is missing, unreadable, over 1 MB or nested over
    100 levels (then the study's base answers)."""
    p = Path(run_dir) / "scenario.resolved.yaml"
    try:
        if p.stat().st_size > MAX_RESOLVED_BYTES:
            return {}
        text = p.read_text(encoding="utf-8")
        if _nested_too_deep(text):
            return {}
        data = yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError, RecursionError):  # ValueError: not UTF-8
        return {}
    return data if isinstance(data, dict) else {}


def _fractions(values: Any) -> tuple[float, ...] | None:
    if not isinstance(values, list | tuple):
        return None
    try:
        out = tuple(sorted({float(v) for v in values}))
    except (TypeError, ValueError):
        return None
    return out if out and all(0 < v <= 1 for v in out) else None


def declared_targets(run: Run) -> tuple[float, ...] | None:
    """The target accuracies the run's scenario declared (``server.target_accuracies``, fractions, sorted):
    the keys of summary.json's ``to_accuracy``, else scenario.resolved.yaml; None when neither says."""
    reach = run.summary.get("to_accuracy")
    if isinstance(reach, dict) and isinstance(reach.get("acc_full"), dict):
        found = _fractions(list(reach["acc_full"]))
        if found is not None:
            return found
    server = read_resolved(run.path).get("server")
    return _fractions(server.get("target_accuracies")) if isinstance(server, dict) else None


def _make_label(name: str, algorithm: str) -> str:
    if algorithm and algorithm.lower() not in name.lower():
        return f"{name} ({algorithm})"
    return name


# ---------------------------------------------------------------------------------------------------------
# public API


def load_run(path: str | Path, device_columns: Iterable[str] | None = None) -> Run:
    """Load a run directory; ``device_columns`` restricts which devices.csv columns are read (None: all).

    Raises PlotInputError naming the path when the folder or its rounds.csv is missing or unreadable.
    devices.csv, summary.json and scenario.resolved.yaml are optional.
    """
    path = Path(path)
    if not path.is_dir():
        what = "does not exist" if not path.exists() else "is not a directory"
        raise PlotInputError(f"{path}: {what}; a run directory must contain {RUN_DIR_CONTENTS}")
    rounds_path = path / "rounds.csv"
    if not rounds_path.is_file():
        raise PlotInputError(f"{rounds_path}: missing; a run directory must contain {RUN_DIR_CONTENTS}")
    rounds = _read_csv_columns(rounds_path, None, numeric_only=True)
    if "round" not in rounds:
        raise PlotInputError(
            f"{rounds_path}: no 'round' column in its header, so it is not the rounds.csv of a run; give the folder "
            "that `iotfl-sim run` printed"
        )

    devices = read_devices(path / "devices.csv", device_columns)

    summary: dict[str, Any] = {}
    summary_path = path / "summary.json"
    if summary_path.is_file():
        try:
            loaded = safe_json.loads(summary_path.read_bytes())
            if isinstance(loaded, dict):
                summary = loaded
        except (OSError, ValueError):
            summary = {}  # a half-written summary must not stop plotting

    name = summary.get("name")
    algorithm = summary.get("algorithm")
    if not name or not algorithm:
        sc_name, sc_algo = _scenario_name_algorithm(path / "scenario.resolved.yaml")
        name = name or sc_name
        algorithm = algorithm or sc_algo
    name = str(name) if name else path.name
    algorithm = str(algorithm) if algorithm else ""
    return Run(
        path=path,
        name=name,
        algorithm=algorithm,
        label=_make_label(name, algorithm),
        rounds=rounds,
        devices=devices,
        summary=summary,
    )


def load_runs(paths: Iterable[str | Path], device_columns: Iterable[str] | None = None) -> list[Run]:
    """Load several run directories and make their labels unique (a shared label gets the folder name)."""
    cols = None if device_columns is None else list(device_columns)
    runs = [load_run(p, cols) for p in paths]
    disambiguate_labels(runs)
    return runs


def disambiguate_labels(runs: list[Run]) -> None:
    """Append the folder name to labels that several runs share (then a counter, if still shared)."""
    counts: dict[str, int] = {}
    for r in runs:
        counts[r.label] = counts.get(r.label, 0) + 1
    for r in runs:
        if counts[r.label] > 1:
            r.label = f"{r.label} [{r.path.name}]"
    number_repeated_labels(runs)


def number_repeated_labels(items: Sequence[Any]) -> None:
    """Give the second, third ... holder of a label (anything with a ``.label``) a `` #2``, `` #3`` suffix."""
    seen: dict[str, int] = {}
    for r in items:
        n = seen.get(r.label, 0)
        seen[r.label] = n + 1
        if n:
            r.label = f"{r.label} #{n + 1}"
