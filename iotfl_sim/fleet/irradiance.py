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

``column`` picks another irradiance column of the file. The checks, the refusals and the repetition are
``fleet.series_csv``'s: irradiance below -20 or above 2000 W/m2 is refused (no surface on Earth gets more; the solar
constant is 1361 W/m2), and small negative values (night-time sensor offsets, PVGIS's ``-0.0``) count as 0, so a
typical meteorological year repeats yearly and a week weekly.
"""

from __future__ import annotations

import functools
from datetime import datetime
from pathlib import Path

from iotfl_sim.fleet.harvest import Harvest
from iotfl_sim.fleet.series_csv import (
    Kind,
    Series,
    checked,
    column,
    fail,
    iso_rows,
    number,
    plain_rows,
    read_rows,
    seconds,
    stat_file,
)
from iotfl_sim.fleet.traces import TraceError

FORMATS = ("auto", "pvgis", "nsrdb", "pvlib", "csv")
NIGHT_OFFSET_W_M2 = -20.0  # at or above this, a negative reading is a sensor offset and counts as 0
MAX_W_M2 = 2000.0
Irradiance = Series  # values in W/m2


class IrradianceError(TraceError):
    """An irradiance trace that cannot be used; the message names the file (and row), the problem and the fix."""


KIND = Kind(
    "irradiance", "W/m2", NIGHT_OFFSET_W_M2, MAX_W_M2, NIGHT_OFFSET_W_M2, "harvest.trace",
    "a PVGIS, NSRDB, pvlib or time_s,w_m2 CSV", IrradianceError,
)  # fmt: skip


def _fail(path: Path, where: str, what: str, fix: str) -> TraceError:
    return fail(KIND, path, where, what, fix)


def _number(path: Path, line: int, name: str, text: str) -> float:
    return number(KIND, path, line, name, text)


def _column(path: Path, header: list[str], name: str) -> int:
    return column(KIND, path, header, name, "harvest.column")


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
        times.append(seconds(t))
        values.append(sum(_number(path, i + 1, header[c], r[c]) for c in cols))
    return times, values


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
        times.append(seconds(t))
        values.append(_number(path, i + 1, header[col], r[col]))
    return times, values


def _pvlib(path: Path, rows: list[list[str]], column: str | None) -> tuple[list[float], list[float]]:
    header = [c.strip() for c in rows[0]] if rows else []
    name = column or ("poa_global" if "poa_global" in header else "ghi")
    return iso_rows(KIND, path, rows, _column(path, header, name), name)


def _plain(path: Path, rows: list[list[str]], column: str | None) -> tuple[list[float], list[float]]:
    return plain_rows(KIND, path, rows, column or "w_m2", "harvest.column")


READERS = {"pvgis": _pvgis, "nsrdb": _nsrdb, "pvlib": _pvlib, "csv": _plain}


@functools.lru_cache(maxsize=16)
def _read_cached(path: Path, stamp: tuple[int, int], fmt: str, column: str | None) -> Irradiance:
    rows = read_rows(KIND, path)
    kind = _sniff(rows) if fmt == "auto" else fmt
    times, values = READERS[kind](path, rows, column)
    return checked(KIND, path, kind, times, values)


def read_irradiance(path: str | Path, fmt: str = "auto", column: str | None = None) -> Irradiance:
    """The irradiance trace in ``path`` (see the module for the formats and what is refused)."""
    p = Path(path).expanduser()
    if fmt not in READERS and fmt != "auto":
        raise _fail(p, "", f"unknown format {fmt!r}", f"use one of {', '.join(FORMATS)}")
    stamp = stat_file(KIND, p)
    return _read_cached(p.resolve(), stamp, fmt, column)


def solar_harvest(trace: Irradiance, area_m2: float, efficiency: float, start_s: float = 0.0) -> Harvest:
    """A panel of ``area_m2`` converting ``efficiency`` of the irradiance on it; the simulation's time 0 is
    ``start_s`` into the trace."""
    return Harvest(
        trace.times_s, area_m2 * efficiency * trace.values, trace.period_s, (-start_s) % trace.period_s
    )
