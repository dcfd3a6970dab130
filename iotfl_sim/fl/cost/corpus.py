"""Measurement files of on-device training (``validation/README.md``) read into typed rows.

One CSV per source, or a folder of them (every ``*.csv`` directly inside it, in name order). A bad file is
refused with one line naming the file, the row (its ``row`` id and line) and the column, and the fix. Reading is
bounded: at most ``MAX_FILE_BYTES`` per file, ``MAX_ROWS`` rows and ``MAX_FILES`` files in all.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass
from pathlib import Path

from iotfl_sim.core.catalog import MODEL_FAMILIES
from iotfl_sim.fl.models.fedx import OFA_MAX_DEPTH, OFA_MAX_EXPAND
from iotfl_sim.scenario.profile import DEVICE_CLASSES as PROFILE_CLASSES

DEVICE_CLASSES = (*PROFILE_CLASSES, "other")  # a profile's device_class, or a device no class fits
REQUIRED = (
    "row", "device", "device_class", "model", "width", "input_shape", "classes", "batch_size", "steps", "time",
    "how_read", "source",
)  # fmt: skip
OPTIONAL = ("power_mode", "profile", "depth", "samples", "energy", "power", "power_scope")
COLUMNS = REQUIRED + OPTIONAL
# what `energy` / `power` cover: the whole board at its supply (what a profile's train_w is), or only the compute
# rails the source names (a Jetson's CPU and GPU rail monitors)
POWER_SCOPES = ("board", "rails")
# families whose `depth` the cost model builds: family -> (deepest depth, the widest expand ratio `width` is a share of)
DEPTH_FAMILIES = {"ofa_mbv3": (OFA_MAX_DEPTH, OFA_MAX_EXPAND)}

TIME_UNITS = {"s": 1.0, "ms": 1e-3, "min": 60.0, "h": 3600.0}
ENERGY_UNITS = {"J": 1.0, "kJ": 1e3, "mJ": 1e-3, "Wh": 3600.0, "mWh": 3.6}
POWER_UNITS = {"W": 1.0, "mW": 1e-3}

MAX_FILE_BYTES = 4 << 20  # a source's table is a few KB; 4 MiB is thousands of rows
MAX_ROWS = 10_000
MAX_FILES = 256
MAX_BATCH = 65_536
MAX_STEPS = 10**9
MAX_CLASSES = 100_000
MAX_CHANNELS = 64
MAX_SIDE = 4096

HOW = "see validation/README.md for the columns"
_NUMBER = r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?"
_QUANTITY = re.compile(rf"^\s*(?P<num>{_NUMBER}|[+-]?(?:nan|inf|infinity))\s*(?P<unit>[A-Za-z]*)\s*$", re.IGNORECASE)


class CorpusError(ValueError):
    """A measurement file that cannot be used; the message is one line, meant to be printed as is."""


@dataclass(frozen=True)
class Measurement:
    """One published (or the user's own) measurement of training on a real device, in SI units."""

    file: str
    line: int
    row: str
    device: str
    device_class: str
    power_mode: str
    profile: str
    model: str
    width: float
    input_shape: tuple[int, int, int]
    classes: int
    batch_size: int
    steps: int
    time_s: float
    energy_j: float | None  # as published
    power_w: float | None  # as published
    how_read: str
    source: str
    depth: int | None = None  # blocks per stage of a DEPTH_FAMILIES model; None: the full depth
    samples: int | None = None  # the samples the steps cover when the last step is partial; None: all steps full
    power_scope: str = ""  # one of POWER_SCOPES, "" when the source does not say

    @property
    def samples_total(self) -> int:
        """The samples the measured steps train on: ``samples``, else ``steps`` full batches."""
        return self.batch_size * self.steps if self.samples is None else self.samples

    @property
    def rails(self) -> bool:
        """Energy / power measured on compute rails only, not the board power a profile's ``train_w`` is."""
        return self.power_scope == "rails"

    @property
    def label(self) -> str:
        """``file:row``: unique across the files of a folder."""
        return f"{Path(self.file).name}:{self.row}"

    @property
    def workload(self) -> tuple[str, float, int | None, tuple[int, int, int], int]:
        """What one training step is: (model, width, depth, input shape, batch)."""
        return (self.model, self.width, self.depth, self.input_shape, self.batch_size)

    @property
    def measured_energy_j(self) -> float | None:
        """The measured energy: as published, else the published average power x the measured time."""
        if self.energy_j is not None:
            return self.energy_j
        return None if self.power_w is None else self.power_w * self.time_s

    @property
    def energy_from_power(self) -> bool:
        return self.energy_j is None and self.power_w is not None

    @property
    def measured_power_w(self) -> float | None:
        """The measured average power while training: as published, else energy / time."""
        if self.power_w is not None:
            return self.power_w
        return None if self.energy_j is None else self.energy_j / self.time_s


def read_corpus(path: str | Path) -> list[Measurement]:
    """Every row of a measurement file, or of every ``*.csv`` in a folder; ``CorpusError`` on a bad one."""
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.glob("*.csv") if f.is_file())
        if not files:
            raise CorpusError(f"{p}: a folder with no *.csv files; give a measurement CSV or a folder of them ({HOW})")
        if len(files) > MAX_FILES:
            raise CorpusError(f"{p}: {len(files)} CSV files, over the limit of {MAX_FILES}; split the folder")
    elif p.is_file():
        files = [p]
    else:
        what = "not a regular file or folder" if p.exists() else "no such file or folder"
        raise CorpusError(f"{p}: {what}; give a measurement CSV or a folder of them ({HOW})")
    rows: list[Measurement] = []
    for f in files:
        rows.extend(read_file(f, MAX_ROWS - len(rows)))
    return rows


def read_file(path: Path, max_rows: int = MAX_ROWS) -> list[Measurement]:
    """The rows of one measurement CSV."""
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise CorpusError(
            f"{path}: {size} bytes, over the limit of {MAX_FILE_BYTES} for a measurement file; split it into one file per source"
        )
    with path.open("rb") as fh:
        raw = fh.read(MAX_FILE_BYTES + 1)  # the file may have grown since stat
    if len(raw) > MAX_FILE_BYTES:
        raise CorpusError(f"{path}: over the limit of {MAX_FILE_BYTES} bytes for a measurement file; split it")
    if b"\0" in raw:
        raise CorpusError(f"{path}: a binary file, not CSV text; give a measurement CSV saved as UTF-8 text ({HOW})")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise CorpusError(f"{path}: line {line} is not UTF-8 text; save the file as UTF-8 ({HOW})") from None
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, None)
        if header is None or not any(c.strip() for c in header):
            raise CorpusError(f"{path}: empty file; write the header row first ({', '.join(REQUIRED)}, ...; {HOW})")
        columns = _header(path, header)
        out: list[Measurement] = []
        seen: dict[str, int] = {}
        for cells in reader:
            if not any(c.strip() for c in cells):
                continue
            if len(out) >= max_rows:
                raise CorpusError(f"{path}: more than {MAX_ROWS} rows in all; split the measurements over fewer rows")
            m = _row(path, reader.line_num, columns, cells)
            if m.row in seen:
                raise CorpusError(
                    f"{path}: row {m.row!r} (line {m.line}), column row: the id is used on line {seen[m.row]} too; "
                    "give each row its own id"
                )
            seen[m.row] = m.line
            out.append(m)
    except csv.Error as e:
        raise CorpusError(f"{path}: line {reader.line_num}: not readable CSV ({e}); {HOW}") from None
    if not out:
        raise CorpusError(f"{path}: a header and no rows; add one row per measurement ({HOW})")
    return out


def _header(path: Path, header: list[str]) -> dict[str, int]:
    names = [c.strip() for c in header]
    seen: dict[str, int] = {}
    for i, n in enumerate(names):
        if n in seen:
            raise CorpusError(f"{path}: line 1 (the header), column {n}: named twice; keep one")
        if n not in COLUMNS:
            raise CorpusError(
                f"{path}: line 1 (the header), column {n!r}: not a column of the format; rename it to one of "
                f"{', '.join(COLUMNS)} or remove it"
            )
        seen[n] = i
    missing = [c for c in REQUIRED if c not in seen]
    if missing:
        raise CorpusError(
            f"{path}: line 1 (the header): missing column{'s' if len(missing) > 1 else ''} {', '.join(missing)}; "
            f"add {'them' if len(missing) > 1 else 'it'} ({HOW})"
        )
    return seen


class _Cells:
    """One row's cells by column name, and the errors that name the file, the row, its line and the column."""

    def __init__(self, path: Path, line: int, columns: dict[str, int], cells: list[str]) -> None:
        self.path, self.line, self.columns, self.cells = path, line, columns, cells
        self.row_id = self.get("row")

    def get(self, col: str) -> str:
        i = self.columns.get(col)
        return self.cells[i].strip() if i is not None and i < len(self.cells) else ""

    def fail(self, col: str, what: str, fix: str) -> CorpusError:
        who = f"row {self.row_id!r} (line {self.line})" if self.row_id else f"line {self.line}"
        return CorpusError(f"{self.path}: {who}, column {col}: {what}; {fix}")

    def required(self, col: str) -> str:
        v = self.get(col)
        if not v:
            raise self.fail(col, "empty", f"fill it in ({HOW})")
        return v

    def integer(self, col: str, low: int, high: int) -> int:
        v = self.required(col)
        try:
            x = float(v)
        except ValueError:
            raise self.fail(col, f"{v!r} is not a number", f"give a whole number from {low} to {high}") from None
        if not math.isfinite(x) or x != int(x) or not low <= x <= high:
            raise self.fail(col, f"{v!r} is not a whole number from {low} to {high}", "give one")
        return int(x)

    def quantity(self, col: str, units: dict[str, float], example: str, required: bool) -> float | None:
        v = self.required(col) if required else self.get(col)
        if not v:
            return None
        m = _QUANTITY.match(v)
        known = ", ".join(units)
        if m is None or m["unit"] not in units:
            unit = f"unit {m['unit']!r} is not one of {known}" if m is not None and m["unit"] else f"no unit ({known})"
            what = f"{v!r} is not a number with a unit" if m is None else f"{v!r}: {unit}"
            raise self.fail(col, what, f"write a number and a unit, e.g. {example!r}")
        x = float(m["num"]) * units[m["unit"]]
        if not math.isfinite(x) or x <= 0:
            raise self.fail(col, f"{v!r} is not a positive finite amount", f"give the measured value, e.g. {example!r}")
        return x


def _row(path: Path, line: int, columns: dict[str, int], cells: list[str]) -> Measurement:
    c = _Cells(path, line, columns, cells)
    if len(cells) > len(columns):
        last = max(columns, key=columns.__getitem__)
        raise c.fail(
            f"after {last}", f"{len(cells)} cells under a header of {len(columns)} columns", "quote cells that hold a comma"
        )
    row_id = c.required("row")
    device_class = c.required("device_class")
    if device_class not in DEVICE_CLASSES:
        raise c.fail("device_class", f"{device_class!r} is not a device class", f"use one of {', '.join(DEVICE_CLASSES)}")
    model = c.required("model")
    if model not in MODEL_FAMILIES:
        raise c.fail("model", f"{model!r} is not a model family the cost model builds", f"use one of {', '.join(MODEL_FAMILIES)}")
    width_text = c.required("width")
    try:
        width = float(width_text)
    except ValueError:
        width = math.nan
    if not 0 < width <= 1:  # NaN fails too
        raise c.fail("width", f"{width_text!r} is not a width multiplier in (0, 1]", "give 1 for the full model")
    depth = _depth(c, model, width)
    batch, steps = c.integer("batch_size", 1, MAX_BATCH), c.integer("steps", 1, MAX_STEPS)
    samples = None
    if c.get("samples"):
        samples = c.integer("samples", 1, MAX_BATCH * MAX_STEPS)
        if not batch * (steps - 1) < samples <= batch * steps:
            raise c.fail(
                "samples", f"{samples} samples do not end in a partial last step of {steps} steps of {batch}",
                f"give a count from {batch * (steps - 1) + 1} to {batch * steps}, or leave it empty when every step is full",
            )  # fmt: skip
    scope = c.get("power_scope")
    if scope and scope not in POWER_SCOPES:
        raise c.fail(
            "power_scope", f"{scope!r} is not a power scope",
            f"use {' or '.join(POWER_SCOPES)} (the whole board, or only the compute rails how_read names), or leave it empty",
        )  # fmt: skip
    return Measurement(
        file=str(path),
        line=line,
        row=row_id,
        device=c.required("device"),
        device_class=device_class,
        power_mode=c.get("power_mode"),
        profile=c.get("profile"),
        model=model,
        width=width,
        input_shape=_shape(c),
        classes=c.integer("classes", 1, MAX_CLASSES),
        batch_size=batch,
        steps=steps,
        time_s=float(c.quantity("time", TIME_UNITS, "10.9 s", required=True)),  # type: ignore[arg-type]
        energy_j=c.quantity("energy", ENERGY_UNITS, "68 J", required=False),
        power_w=c.quantity("power", POWER_UNITS, "6.2 W", required=False),
        how_read=c.required("how_read"),
        source=c.required("source"),
        depth=depth,
        samples=samples,
        power_scope=scope,
    )


def _depth(c: _Cells, model: str, width: float) -> int | None:
    """``depth``, for a family that has one: then ``width`` must be an expand ratio over the widest (e / 6)."""
    if not c.get("depth"):
        return None
    if model not in DEPTH_FAMILIES:
        raise c.fail(
            "depth", f"{model} has no depth the cost model varies",
            f"leave it empty, or use a depth-elastic family ({', '.join(DEPTH_FAMILIES)})",
        )  # fmt: skip
    deepest, widest = DEPTH_FAMILIES[model]
    depth = c.integer("depth", 1, deepest)
    expand = width * widest
    if abs(expand - round(expand)) > 1e-3:
        raise c.fail(
            "width", f"{width:g} is not an expand ratio of {model} (e / {widest} for a whole e)",
            f"give e / {widest}, e.g. {4 / widest:.6f} for e = 4",
        )  # fmt: skip
    return depth


def _shape(c: _Cells) -> tuple[int, int, int]:
    v = c.required("input_shape")
    parts = [p.strip() for p in v.lower().split("x")]
    fix = f"write channels x height x width, e.g. '3x32x32' (channels up to {MAX_CHANNELS}, sides up to {MAX_SIDE})"
    if len(parts) != 3 or not all(p.isascii() and p.isdigit() for p in parts):
        raise c.fail("input_shape", f"{v!r} is not CxHxW", fix)
    ch, h, w = (int(p) for p in parts)
    if not (1 <= ch <= MAX_CHANNELS and 1 <= h <= MAX_SIDE and 1 <= w <= MAX_SIDE):
        raise c.fail("input_shape", f"{v!r} is out of range", fix)
    return ch, h, w
