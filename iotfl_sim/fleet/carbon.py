"""A grid's carbon intensity over time (g CO2(eq) per kWh): a constant, or a trace read from a CSV.

Formats (``format: auto`` tells them apart by the header): ``csv``, this project's own ``time_s, g_per_kwh``;
``timestamped``, a first column of ISO timestamps (an offset such as ``+01:00`` allowed) and an intensity column,
as exports of grid-intensity services have (Electricity Maps' CSVs, whose first column is ``Datetime (UTC)``).
Without ``column`` the intensity is the one column whose name reads as a carbon intensity (``carbon intensity``
or ``carbon_intensity``, any case); a file with several (a direct and a life-cycle one) must name its column.
Values are refused outside [0, 3000] g/kWh (the dirtiest grids are near 1000; lignite plants about 1100-1200).
The checks and the repetition are ``fleet.series_csv``'s.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from iotfl_sim.fleet.periodic import Periodic
from iotfl_sim.fleet.series_csv import (
    Kind,
    Series,
    checked,
    column,
    fail,
    iso_rows,
    plain_rows,
    read_rows,
    stat_file,
)
from iotfl_sim.fleet.traces import TraceError
from iotfl_sim.scenario.model import CarbonConfig

J_PER_KWH = 3.6e6
MAX_G_PER_KWH = 3000.0


class CarbonError(TraceError):
    """A carbon-intensity trace that cannot be used; the message names the file (and row), the problem and the fix."""


KIND = Kind(
    "carbon intensity", "g/kWh", 0.0, MAX_G_PER_KWH, 0.0, "fleet.carbon.trace",
    "a time_s,g_per_kwh CSV or one with ISO timestamps in its first column", CarbonError,
)  # fmt: skip


def _intensity_column(path: Path, header: list[str], name: str | None) -> int:
    if name is not None:
        return column(KIND, path, header, name, "fleet.carbon.column")
    named = [i for i, h in enumerate(header) if "carbon intensity" in h.lower().replace("_", " ")]
    if len(named) != 1:
        found = ", ".join(header[i] for i in named) if named else "none"
        raise fail(
            KIND, path, "", f"{len(named)} columns read as a carbon intensity ({found})",
            "set fleet.carbon.column to the one to use",
        )  # fmt: skip
    return named[0]


@functools.lru_cache(maxsize=8)
def _read_cached(path: Path, stamp: tuple[int, int], fmt: str, name: str | None) -> Series:
    rows = read_rows(KIND, path)
    header = [c.strip() for c in rows[0]] if rows else []
    kind = fmt if fmt != "auto" else ("csv" if "time_s" in header else "timestamped")
    if kind == "csv":
        times, values = plain_rows(KIND, path, rows, name or "g_per_kwh", "fleet.carbon.column")
    else:
        col = _intensity_column(path, header, name)
        times, values = iso_rows(KIND, path, rows, col, header[col])
    return checked(KIND, path, kind, times, values)


def read_intensity(path: str | Path, fmt: str = "auto", column: str | None = None) -> Series:
    """The carbon-intensity trace in ``path`` (see the module)."""
    p = Path(path).expanduser()
    return _read_cached(p.resolve(), stat_file(KIND, p), fmt, column)


def grid_intensity(cfg: CarbonConfig | None, base_dir: Path | None) -> Periodic | None:
    """The scenario's ``fleet.carbon`` as a periodic signal in g/kWh (None: carbon is not counted)."""
    if cfg is None:
        return None
    if cfg.g_per_kwh is not None:
        return Periodic(np.zeros(1), np.array([cfg.g_per_kwh]), 86400.0)
    path = Path(cfg.trace).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    s = read_intensity(path, cfg.format, cfg.column)
    return Periodic(s.times_s, s.values, s.period_s, (-cfg.start_hour * 3600.0) % s.period_s)
