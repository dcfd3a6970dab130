"""Irradiance traces (W/m2 over time) read from the common public formats, and a solar panel on one.

Formats (``format: auto`` tells them apart by their first lines):

- ``pvgis``: the CSV of PVGIS (re.jrc.ec.europa.eu) TMY and hourly series: optional metadata lines, then a header
  whose first field starts with ``time`` (``time(UTC)``), rows ``YYYYMMDD:HHMM,...`` until a blank line (the
  legend PVGIS appends is ignored). Irradiance: ``G(h)`` (global horizontal, TMY), else the plane of array
  ``Gb(i) + Gd(i) + Gr(i)`` (hourly series with components), else ``G(i)``.
- ``nsrdb``: NSRDB PSM3 / PSM4 CSV: a line of metadata names starting with ``Source``, a line of their values, then
  a header with ``Year, Month, Day, Hour, Minute`` and ``GHI``.
- ``pvlib``: a pandas DataFrame written by ``to_csv`` (pvlib's iotools output): the first column an ISO
  timestamp (an offset such as ``-07:00`` allowed), irradiance ``poa_global`` if present, else ``ghi``.
- ``csv``: this project's own: columns ``time_s`` (seconds) and ``w_m2``.

``column`` picks another irradiance column of the file. Each value holds from its timestamp until the next one; the
trace repeats with its span (last time - first time + its usual step), so a typical meteorological year repeats
yearly and a week weekly. Refused, one line each naming the file and row: a trace with no rows or one row, a time
that does not increase, a gap (a step over 1.5 times the file's most common step: fill it or cut the trace there),
a value that is not a number, and irradiance below -20 or above 2000 W/m2 (no surface on Earth gets more; the
solar constant is 1361 W/m2). Small negative values (night-time sensor offsets, PVGIS's ``-0.0``) count as 0.
"""

from __future__ import annotations

import csv
import functools
import math
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

import numpy as np

from iotfl_sim.fleet.harvest import Harvest
from iotfl_sim.fleet.traces import TraceError

FORMATS = ("auto", "pvgis", "nsrdb", "pvlib", "csv")
NIGHT_OFFSET_W_M2 = -20.0  # at or above this, a negative reading is a sensor offset and counts as 0
MAX_W_M2 = 2000.0
GAP_FACTOR = 1.5
MAX_ROWS = 2_000_000  # a year at 15-second resolution; a bigger file is refused before it is read whole


class Irradiance(NamedTuple):
    times_s: np.ndarray  # from the first row, strictly increasing
    w_m2: np.ndarray
    period_s: float  # the trace repeats with this period


class IrradianceError(TraceError):
    """An irradiance trace that cannot be used; the message names the file (and row), the problem and the fix."""


def _fail(path: Path, where: str, what: str, fix: str) -> IrradianceError:
    return IrradianceError(f"{path}{where}: {what}; {fix}")


def _rows(path: Path) -> list[list[str]]:
    try:
        with path.open(newline="", encoding="utf-8-sig") as fh:
            rows = []
            for row in csv.reader(fh):
                rows.append(row)
                if len(rows) > MAX_ROWS + 100:
                    raise _fail(path, "", f"more than {MAX_ROWS:,} rows", "resample it to a coarser step")
            return rows
    except FileNotFoundError:
        raise _fail(
            path, "", "no such irradiance trace", "check harvest.trace (relative to the scenario's folder)"
        ) from None
    except UnicodeDecodeError:
        raise _fail(
            path, "", "not a text CSV file", "give a PVGIS, NSRDB, pvlib or time_s,w_m2 CSV"
        ) from None
    except (OSError, csv.Error) as e:
        raise _fail(path, "", f"cannot be read ({e})", "check the file") from None


def _sniff(rows: list[list[str]]) -> str:
    first = [c.strip() for c in rows[0]] if rows else []
    if first and first[0].startswith("Source"):
        return "nsrdb"
    if "time_s" in first and "w_m2" in first:
        return "csv"
    head = [r[0].strip() for r in rows[:20] if r]
    if any(h.startswith("time") for h in head) or any(h.startswith(("Latitude", "Longitude")) for h in head):
        return "pvgis"
    return "pvlib"


def _number(path: Path, line: int, name: str, text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise _fail(path, f":{line}", f"{name} {text!r} is not a number", "fix or drop that row") from None
    if not math.isfinite(v):
        raise _fail(path, f":{line}", f"{name} is {text}", "give a finite value") from None
    return v


def _column(path: Path, header: list[str], name: str) -> int:
    if name not in header:
        raise _fail(
            path,
            "",
            f"has no column {name!r} (columns: {', '.join(header)})",
            "set harvest.column to one of them",
        )
    return header.index(name)


def _pvgis(path: Path, rows: list[list[str]], column: str | None) -> tuple[list[float], list[float]]:
    start = next((i for i, r in enumerate(rows) if r and r[0].strip().startswith("time")), None)
    if start is None:
        raise _fail(
            path, "", "no PVGIS header line starting with 'time'", "give the CSV PVGIS wrote, or format: csv"
        )
    header = [c.strip() for c in rows[start]]
    if column is not None:
        cols = [_column(path, header, column)]
    elif "G(h)" in header:
        cols = [header.index("G(h)")]
    elif all(c in header for c in ("Gb(i)", "Gd(i)", "Gr(i)")):
        cols = [header.index(c) for c in ("Gb(i)", "Gd(i)", "Gr(i)")]
    else:
        cols = [_column(path, header, "G(i)")]
    times, values = [], []
    for i in range(start + 1, len(rows)):
        r = rows[i]
        if not r or not "".join(r).strip():
            break  # the legend PVGIS writes after a blank line
        try:
            t = datetime.strptime(r[0].strip(), "%Y%m%d:%H%M")
        except ValueError:
            raise _fail(
                path, f":{i + 1}", f"time {r[0]!r} is not YYYYMMDD:HHMM", "fix or drop that row"
            ) from None
        if len(r) <= max(cols):
            raise _fail(path, f":{i + 1}", "the row is short", "give every column of the header")
        times.append(_seconds(t))
        values.append(sum(_number(path, i + 1, header[c], r[c]) for c in cols))
    return times, values


def _seconds(t: datetime) -> float:
    """Seconds of a naive or aware timestamp on one clock (an aware one in its own offset's wall time is not
    wanted: aware timestamps compare by their UTC instants)."""
    if t.tzinfo is not None:
        return t.timestamp()
    return (t - datetime(1970, 1, 1)).total_seconds()


def _nsrdb(path: Path, rows: list[list[str]], column: str | None) -> tuple[list[float], list[float]]:
    if len(rows) < 3:
        raise _fail(path, "", "an NSRDB file has two metadata lines and a header", "give the CSV NSRDB wrote")
    header = [c.strip() for c in rows[2]]
    parts = [_column(path, header, k) for k in ("Year", "Month", "Day", "Hour", "Minute")]
    col = _column(path, header, column or "GHI")
    times, values = [], []
    for i in range(3, len(rows)):
        r = rows[i]
        if not r or not "".join(r).strip():
            continue
        if len(r) <= max(*parts, col):
            raise _fail(path, f":{i + 1}", "the row is short", "give every column of the header")
        try:
            t = datetime(*(int(r[k]) for k in parts))
        except ValueError:
            raise _fail(
                path, f":{i + 1}", "Year/Month/Day/Hour/Minute is not a date", "fix or drop that row"
            ) from None
        times.append(_seconds(t))
        values.append(_number(path, i + 1, header[col], r[col]))
    return times, values


def _pvlib(path: Path, rows: list[list[str]], column: str | None) -> tuple[list[float], list[float]]:
    header = [c.strip() for c in rows[0]] if rows else []
    name = column or ("poa_global" if "poa_global" in header else "ghi")
    col = _column(path, header, name)
    times, values = [], []
    for i in range(1, len(rows)):
        r = rows[i]
        if not r or not "".join(r).strip():
            continue
        try:
            t = datetime.fromisoformat(r[0].strip())
        except ValueError:
            raise _fail(
                path, f":{i + 1}", f"time {r[0]!r} is not an ISO timestamp", "fix or drop that row"
            ) from None
        if len(r) <= col:
            raise _fail(path, f":{i + 1}", "the row is short", "give every column of the header")
        times.append(_seconds(t))
        values.append(_number(path, i + 1, name, r[col]))
    return times, values


def _plain(path: Path, rows: list[list[str]], column: str | None) -> tuple[list[float], list[float]]:
    header = [c.strip() for c in rows[0]]
    tc, vc = _column(path, header, "time_s"), _column(path, header, column or "w_m2")
    times, values = [], []
    for i in range(1, len(rows)):
        r = rows[i]
        if not r or not "".join(r).strip():
            continue
        if len(r) <= max(tc, vc):
            raise _fail(path, f":{i + 1}", "the row is short", "give every column of the header")
        times.append(_number(path, i + 1, "time_s", r[tc]))
        values.append(_number(path, i + 1, header[vc], r[vc]))
    return times, values


READERS = {"pvgis": _pvgis, "nsrdb": _nsrdb, "pvlib": _pvlib, "csv": _plain}


def _checked(path: Path, fmt: str, times: list[float], values: list[float]) -> Irradiance:
    if len(times) < 2:
        raise _fail(
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
        raise _fail(
            path, f" (data row {k + 1})", "time does not increase", "sort the rows and drop repeated times"
        )
    usual = Counter(steps.tolist()).most_common(1)[0][0]
    gaps = np.flatnonzero(steps > GAP_FACTOR * usual)
    if gaps.size:
        k = int(gaps[0]) + 1
        raise _fail(
            path, f" (data row {k + 1})",
            f"a gap of {steps[k - 1]:g} s before this row (the usual step is {usual:g} s)",
            "fill the gap or cut the trace there",
        )  # fmt: skip
    bad = np.flatnonzero((v < NIGHT_OFFSET_W_M2) | (v > MAX_W_M2))
    if bad.size:
        k = int(bad[0])
        raise _fail(
            path, f" (data row {k + 1})", f"irradiance {v[k]:g} W/m2 is outside [{NIGHT_OFFSET_W_M2:g}, {MAX_W_M2:g}]",
            "check the column and its units (W/m2)",
        )  # fmt: skip
    return Irradiance(t - t[0], np.maximum(v, 0.0), float(t[-1] - t[0] + usual))


@functools.lru_cache(maxsize=16)
def _read_cached(path: Path, stamp: tuple[int, int], fmt: str, column: str | None) -> Irradiance:
    rows = _rows(path)
    kind = _sniff(rows) if fmt == "auto" else fmt
    times, values = READERS[kind](path, rows, column)
    return _checked(path, kind, times, values)


def read_irradiance(path: str | Path, fmt: str = "auto", column: str | None = None) -> Irradiance:
    """The irradiance trace in ``path`` (see the module for the formats and what is refused)."""
    p = Path(path).expanduser()
    if fmt not in READERS and fmt != "auto":
        raise _fail(p, "", f"unknown format {fmt!r}", f"use one of {', '.join(FORMATS)}")
    try:
        st = p.stat()
    except FileNotFoundError:
        raise _fail(
            p, "", "no such irradiance trace", "check harvest.trace (relative to the scenario's folder)"
        ) from None
    except OSError as e:
        raise _fail(p, "", f"cannot be read ({e.strerror})", "check the path and its permissions") from None
    if not p.is_file():
        raise _fail(p, "", "is not a file", "give the path of a CSV file")
    return _read_cached(p.resolve(), (st.st_mtime_ns, st.st_size), fmt, column)


def solar_harvest(trace: Irradiance, area_m2: float, efficiency: float, start_s: float = 0.0) -> Harvest:
    """A panel of ``area_m2`` converting ``efficiency`` of the irradiance on it; the simulation's time 0 is
    ``start_s`` into the trace."""
    return Harvest(
        trace.times_s, area_m2 * efficiency * trace.w_m2, trace.period_s, (-start_s) % trace.period_s
    )
