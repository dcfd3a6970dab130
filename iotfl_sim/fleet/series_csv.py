"""Time series read from CSV files (irradiance, a grid's carbon intensity): the rows, the checks every series
gets, and the readers two kinds of file share. Every refusal is one line naming the file (and row), the problem
and the fix, as the kind's error class.

Checks: at least two rows; time strictly increasing; no gap (a step over ``GAP_FACTOR`` times the file's most common
step: fill it or cut the series there); every value a finite number inside the kind's bounds (values in
``[floor, 0)`` count as 0: a sensor's night-time offset). Each value holds from its timestamp until the next one,
and the series repeats with its span (last time - first time + its usual step).
"""

from __future__ import annotations

import csv
import math
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

import numpy as np

from iotfl_sim.fleet.traces import TraceError

GAP_FACTOR = 1.5
MAX_ROWS = 2_000_000  # a year at 15-second resolution; a bigger file is refused before it is read whole


class Kind(NamedTuple):
    """What a series holds and how it is refused."""

    what: str  # "irradiance"
    unit: str  # "W/m2"
    low: float  # values below are refused
    high: float  # values above are refused
    floor: float  # values in [floor, 0) count as 0 (floor = 0: none do)
    field: str  # the scenario field that names the file: "harvest.trace"
    formats: str  # the formats to suggest: "a PVGIS, NSRDB, pvlib or time_s,w_m2 CSV"
    error: type[TraceError]


class Series(NamedTuple):
    times_s: np.ndarray  # from the first row, strictly increasing
    values: np.ndarray
    period_s: float  # the series repeats with this period


def fail(kind: Kind, path: Path, where: str, what: str, fix: str) -> TraceError:
    return kind.error(f"{path}{where}: {what}; {fix}")


def missing(kind: Kind, path: Path) -> TraceError:
    return fail(
        kind,
        path,
        "",
        f"no such {kind.what} trace",
        f"check {kind.field} (relative to the scenario's folder)",
    )


def stat_file(kind: Kind, path: Path) -> tuple[int, int]:
    """``path``'s (modification time, size), or the refusal of a path that is not a readable file."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise missing(kind, path) from None
    except OSError as e:
        raise fail(
            kind, path, "", f"cannot be read ({e.strerror})", "check the path and its permissions"
        ) from None
    if not path.is_file():
        raise fail(kind, path, "", "is not a file", "give the path of a CSV file")
    return st.st_mtime_ns, st.st_size


def read_rows(kind: Kind, path: Path) -> list[list[str]]:
    try:
        with path.open(newline="", encoding="utf-8-sig") as fh:
            rows = []
            for row in csv.reader(fh):
                rows.append(row)
                if len(rows) > MAX_ROWS + 100:
                    raise fail(
                        kind, path, "", f"more than {MAX_ROWS:,} rows", "resample it to a coarser step"
                    )
            return rows
    except FileNotFoundError:
        raise missing(kind, path) from None
    except UnicodeDecodeError:
        raise fail(kind, path, "", "not a text CSV file", f"give {kind.formats}") from None
    except (OSError, csv.Error) as e:
        raise fail(kind, path, "", f"cannot be read ({e})", "check the file") from None


def number(kind: Kind, path: Path, line: int, name: str, text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise fail(
            kind, path, f":{line}", f"{name} {text!r} is not a number", "fix or drop that row"
        ) from None
    if not math.isfinite(v):
        raise fail(kind, path, f":{line}", f"{name} is {text}", "give a finite value") from None
    return v


def column(kind: Kind, path: Path, header: list[str], name: str, field: str) -> int:
    if name not in header:
        raise fail(
            kind,
            path,
            "",
            f"has no column {name!r} (columns: {', '.join(header)})",
            f"set {field} to one of them",
        )
    return header.index(name)


def seconds(t: datetime) -> float:
    """Seconds of a timestamp on one clock: an aware one by its UTC instant, a naive one as written."""
    if t.tzinfo is not None:
        return t.timestamp()
    return (t - datetime(1970, 1, 1)).total_seconds()


def _blank(row: list[str]) -> bool:
    return not row or not "".join(row).strip()


def iso_rows(
    kind: Kind, path: Path, rows: list[list[str]], col: int, name: str
) -> tuple[list[float], list[float]]:
    """Rows after the header whose first field is an ISO timestamp (an offset such as ``-07:00`` allowed)."""
    times, values = [], []
    for i in range(1, len(rows)):
        r = rows[i]
        if _blank(r):
            continue
        try:
            t = datetime.fromisoformat(r[0].strip())
        except ValueError:
            raise fail(
                kind, path, f":{i + 1}", f"time {r[0]!r} is not an ISO timestamp", "fix or drop that row"
            ) from None
        if len(r) <= col:
            raise fail(kind, path, f":{i + 1}", "the row is short", "give every column of the header")
        times.append(seconds(t))
        values.append(number(kind, path, i + 1, name, r[col]))
    return times, values


def plain_rows(
    kind: Kind, path: Path, rows: list[list[str]], value: str, field: str
) -> tuple[list[float], list[float]]:
    """This project's own layout: a ``time_s`` column (seconds) and a ``value`` column."""
    header = [c.strip() for c in rows[0]]
    tc, vc = column(kind, path, header, "time_s", field), column(kind, path, header, value, field)
    times, values = [], []
    for i in range(1, len(rows)):
        r = rows[i]
        if _blank(r):
            continue
        if len(r) <= max(tc, vc):
            raise fail(kind, path, f":{i + 1}", "the row is short", "give every column of the header")
        times.append(number(kind, path, i + 1, "time_s", r[tc]))
        values.append(number(kind, path, i + 1, header[vc], r[vc]))
    return times, values


def checked(kind: Kind, path: Path, fmt: str, times: list[float], values: list[float]) -> Series:
    """The series, or its refusal (see the module)."""
    if len(times) < 2:
        raise fail(
            kind,
            path,
            "",
            f"{len(times)} data row(s) read as {fmt}",
            "give at least two rows (or the right format)",
        )
    t = np.asarray(times, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    steps = np.diff(t)
    back = np.flatnonzero(steps <= 0)
    if back.size:
        k = int(back[0]) + 1
        raise fail(
            kind,
            path,
            f" (data row {k + 1})",
            "time does not increase",
            "sort the rows and drop repeated times",
        )
    usual = Counter(steps.tolist()).most_common(1)[0][0]
    gaps = np.flatnonzero(steps > GAP_FACTOR * usual)
    if gaps.size:
        k = int(gaps[0]) + 1
        raise fail(
            kind, path, f" (data row {k + 1})",
            f"a gap of {steps[k - 1]:g} s before this row (the usual step is {usual:g} s)",
            "fill the gap or cut the trace there",
        )  # fmt: skip
    bad = np.flatnonzero((v < kind.low) | (v > kind.high))
    if bad.size:
        k = int(bad[0])
        raise fail(
            kind, path, f" (data row {k + 1})",
            f"{kind.what} {v[k]:g} {kind.unit} is outside [{kind.low:g}, {kind.high:g}]",
            f"check the column and its units ({kind.unit})",
        )  # fmt: skip
    floored = np.where((v < 0.0) & (v >= kind.floor), 0.0, v)
    return Series(t - t[0], floored, float(t[-1] - t[0] + usual))
