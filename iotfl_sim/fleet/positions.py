"""Device positions in metres on a plane, and their distance to a gateway: fixed, uniform in a rectangle or a disc
(drawn from a ``numpy.random.Generator`` passed in), or read from a CSV file.

Choices: positions are 2-D (antenna heights are in the path-loss fit, not here); "uniform in a disc" is uniform in
area (radius R sqrt(U), angle 2 pi V), not in radius. The CSV file has the header ``device,x_m,y_m`` and one row
per device: the device id a non-negative integer, unique; x and y finite numbers (metres). It is read in file
order, at most ``MAX_ROWS`` rows (a bigger file is refused before it is read whole). Every refusal is one line
naming the file (and line), the problem and the fix, as a ``PositionsError`` (a ``TraceError``).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import NamedTuple

import numpy as np

from iotfl_sim.fleet.traces import TraceError

MAX_ROWS = 1_000_000
MAX_ID = 1 << 31
HEADER = ("device", "x_m", "y_m")
_HOW = (
    "the file needs the header device,x_m,y_m and one row per device: an integer id >= 0, x and y in metres"
)


class PositionsError(TraceError):
    """A positions file that cannot be used; the message names the file, the line, the problem and the fix."""


class Positions(NamedTuple):
    """Device ids and their coordinates (metres), in the same order."""

    ids: np.ndarray  # int64
    x_m: np.ndarray
    y_m: np.ndarray


def fixed(n: int, x_m: float, y_m: float) -> tuple[np.ndarray, np.ndarray]:
    """``n`` devices all at (x_m, y_m)."""
    return np.full(n, float(x_m)), np.full(n, float(y_m))


def uniform_rectangle(
    n: int, x_min: float, x_max: float, y_min: float, y_max: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` devices uniform in [x_min, x_max) x [y_min, y_max), from ``rng`` (x drawn first, then y)."""
    if not (x_max >= x_min and y_max >= y_min):
        raise ValueError(f"empty rectangle: x [{x_min}, {x_max}], y [{y_min}, {y_max}]; give min <= max")
    return rng.uniform(x_min, x_max, n), rng.uniform(y_min, y_max, n)


def uniform_disc(
    n: int, cx: float, cy: float, radius_m: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` devices uniform in area in the disc of ``radius_m`` around (cx, cy): r = R sqrt(U), angle 2 pi V."""
    if radius_m < 0:
        raise ValueError(f"radius {radius_m} m is negative; give a radius >= 0")
    r = radius_m * np.sqrt(rng.random(n))
    a = 2.0 * np.pi * rng.random(n)
    return cx + r * np.cos(a), cy + r * np.sin(a)


def distance_m(x_m: np.ndarray, y_m: np.ndarray, gateway_x_m: float, gateway_y_m: float) -> np.ndarray:
    """Euclidean distance of each device to the gateway at (gateway_x_m, gateway_y_m)."""
    return np.hypot(np.asarray(x_m, dtype=float) - gateway_x_m, np.asarray(y_m, dtype=float) - gateway_y_m)


def _fail(path: Path, where: str, what: str, fix: str) -> PositionsError:
    return PositionsError(f"{path}{where}: {what}; {fix}")


def _number(path: Path, line: int, name: str, text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise _fail(path, f":{line}", f"{name} {text!r} is not a number", "fix or drop that row") from None
    if not math.isfinite(v):
        raise _fail(path, f":{line}", f"{name} is {text.strip()}", "give a finite number of metres")
    return v


def read_positions_csv(path: str | Path, max_rows: int = MAX_ROWS) -> Positions:
    """The devices of a ``device,x_m,y_m`` CSV file, in file order; refuses, as ``PositionsError``: a missing or
    unreadable file, a wrong header, a row without three fields, a non-numeric, NaN or infinite value, an id that
    is negative, fractional or too large, a duplicate id, no rows, more than ``max_rows`` rows."""
    p = Path(path)
    ids: list[int] = []
    xs: list[float] = []
    ys: list[float] = []
    seen: dict[int, int] = {}
    try:
        with p.open(newline="", encoding="utf-8-sig") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if header is None or tuple(h.strip() for h in header) != HEADER:
                got = "nothing" if header is None else repr(",".join(header))
                raise _fail(p, ":1", f"the header is {got}, not 'device,x_m,y_m'", _HOW)
            for row in reader:
                line = reader.line_num
                if not row or all(not c.strip() for c in row):
                    continue
                if len(ids) >= max_rows:
                    raise _fail(
                        p, f":{line}", f"more than {max_rows:,} rows", "split the fleet or raise max_rows"
                    )
                if len(row) != 3:
                    raise _fail(p, f":{line}", f"{len(row)} fields, not 3", _HOW)
                dev = _number(p, line, "device", row[0])
                if dev < 0 or dev != math.floor(dev) or dev >= MAX_ID:
                    raise _fail(
                        p, f":{line}", f"device {row[0].strip()} is not an integer in [0, {MAX_ID})",
                        "number the devices 0, 1, 2, ...",
                    )  # fmt: skip
                dev_id = int(dev)
                if dev_id in seen:
                    raise _fail(
                        p, f":{line}", f"device {dev_id} again (first on line {seen[dev_id]})",
                        "give each device one row",
                    )  # fmt: skip
                seen[dev_id] = line
                ids.append(dev_id)
                xs.append(_number(p, line, "x_m", row[1]))
                ys.append(_number(p, line, "y_m", row[2]))
    except FileNotFoundError:
        raise _fail(p, "", "no such positions file", "check the path") from None
    except IsADirectoryError:
        raise _fail(p, "", "is a folder, not a file", "give the path of a CSV file") from None
    except UnicodeDecodeError:
        raise _fail(p, "", "not a text CSV file", _HOW) from None
    except csv.Error as e:
        raise _fail(p, "", f"not readable as CSV ({e})", _HOW) from None
    except OSError as e:
        raise _fail(p, "", f"cannot be read ({e.strerror})", "check the path and its permissions") from None
    if not ids:
        raise _fail(p, "", "no device rows under the header", "add one row per device")
    return Positions(np.array(ids, dtype=np.int64), np.array(xs), np.array(ys))
