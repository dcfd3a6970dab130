"""The validation corpus (issue 46): every ``validation/*.csv`` file parses per ``validation/README.md``, every
row's model builds, and the corpus is as large as the issue asks.

The parsing lives in this file on purpose: the shared reader (``iotfl-sim profiles check`` / ``fit``) is being
written beside it; the integrator switches this test to that reader when both are in.
"""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path

import pytest
import torch

from iotfl_sim.fl.models.build import build_model
from iotfl_sim.fl.submodel import SubmodelSpec

VALIDATION = Path(__file__).resolve().parent.parent / "validation"
REQUIRED = ("row", "device", "device_class", "model", "width", "input_shape", "classes", "batch_size", "steps",
            "time", "how_read", "source")  # fmt: skip
OPTIONAL = ("power_mode", "profile", "depth", "samples", "energy", "power", "power_scope")
DEVICE_CLASSES = ("mcu", "sbc", "edge_gpu", "phone", "server", "other")
SCOPES = ("", "board", "rails")
# unit -> factor to the base unit (s, J, W)
TIME_UNITS = {"s": 1.0, "ms": 1e-3, "min": 60.0, "h": 3600.0}
ENERGY_UNITS = {"J": 1.0, "kJ": 1e3, "mJ": 1e-3, "Wh": 3600.0, "mWh": 3.6}
POWER_UNITS = {"W": 1.0, "mW": 1e-3}
HOW_READ = re.compile(r"^(table|text|plot \(digitised\)|derived: .+)")
QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?) ([A-Za-z]+)$")


def _quantity(cell: str, units: dict[str, float]) -> float:
    m = QUANTITY.match(cell)
    if m is None or m.group(2) not in units:
        raise ValueError(f"{cell!r} is not '<number> <unit>' with a unit in {sorted(units)}")
    value = float(m.group(1)) * units[m.group(2)]
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{cell!r} is not a positive finite quantity")
    return value


def _positive_int(cell: str) -> int:
    if not cell.isdigit() or int(cell) <= 0:
        raise ValueError(f"{cell!r} is not a positive integer")
    return int(cell)


def _shape(cell: str) -> tuple[int, int, int]:
    parts = cell.split("x")
    if len(parts) != 3:
        raise ValueError(f"{cell!r} is not channels x height x width")
    c, h, w = (_positive_int(p) for p in parts)
    return c, h, w


def row_problems(row: dict[str, str]) -> list[str]:
    """Every way ``row`` breaks the README's format, as 'column: why' strings (empty: the row is valid)."""
    problems = [f"{c}: missing" for c in REQUIRED if not (row.get(c) or "").strip()]
    checks = {
        "device_class": lambda v: None if v in DEVICE_CLASSES else f"not one of {DEVICE_CLASSES}",
        "width": lambda v: None if 0.0 < float(v) <= 1.0 else "not in (0, 1]",
        "input_shape": _shape,
        "classes": _positive_int,
        "batch_size": _positive_int,
        "steps": _positive_int,
        "time": lambda v: _quantity(v, TIME_UNITS),
        "how_read": lambda v: (
            None if HOW_READ.match(v) else "not table / text / plot (digitised) / derived: ..."
        ),
    }
    optional = {
        "depth": _positive_int,
        "samples": _positive_int,
        "energy": lambda v: _quantity(v, ENERGY_UNITS),
        "power": lambda v: _quantity(v, POWER_UNITS),
    }
    for column, check in list(checks.items()) + list(optional.items()):
        value = (row.get(column) or "").strip()
        if not value:
            continue
        try:
            why = check(value)
        except ValueError as e:
            why = str(e)
        if isinstance(why, str):
            problems.append(f"{column}: {why}")
    if (row.get("power_scope") or "") not in SCOPES:
        problems.append(f"power_scope: not one of {SCOPES}")
    samples, batch, steps = row.get("samples"), row.get("batch_size", ""), row.get("steps", "")
    if samples and batch.isdigit() and steps.isdigit() and samples.isdigit():
        if not (int(batch) * (int(steps) - 1) < int(samples) <= int(batch) * int(steps)):
            problems.append("samples: does not end in a partial last step of batch_size x steps")
    return problems


def _files() -> list[Path]:
    return sorted(VALIDATION.glob("*.csv"))


def _rows() -> list[tuple[str, dict[str, str]]]:
    out = []
    for path in _files():
        with path.open(newline="", encoding="utf-8") as f:
            out += [(path.stem, r) for r in csv.DictReader(f)]
    return out


def _has_energy(row: dict[str, str]) -> bool:
    return bool((row.get("energy") or "").strip() or (row.get("power") or "").strip())


def test_the_row_checker_catches_each_kind_of_bad_cell():
    good = {
        "row": "r1", "device": "Raspberry Pi 4", "device_class": "sbc", "model": "resnet18", "width": "1",
        "input_shape": "3x32x32", "classes": "10", "batch_size": "32", "steps": "24", "samples": "750",
        "time": "10.9 s", "power": "2267 mW", "how_read": "table", "source": "somewhere, Table 1",
    }  # fmt: skip
    assert row_problems(good) == []
    bad = {
        "device_class": "laptop", "width": "1.5", "input_shape": "3x32", "classes": "0", "time": "10.9",
        "power": "-3 W", "energy": "5 kWs", "how_read": "guessed", "samples": "700", "source": "",
    }  # fmt: skip
    for column, value in bad.items():
        found = row_problems({**good, column: value})
        assert [p for p in found if p.startswith(f"{column}:")], (column, value, found)


def test_every_file_has_the_required_columns_and_only_known_ones():
    assert _files(), "no validation/*.csv"
    for path in _files():
        with path.open(newline="", encoding="utf-8") as f:
            header = next(csv.reader(f))
        assert len(set(header)) == len(header), path.name
        assert set(REQUIRED) <= set(header), (path.name, set(REQUIRED) - set(header))
        assert set(header) <= set(REQUIRED) | set(OPTIONAL), (
            path.name,
            set(header) - set(REQUIRED) - set(OPTIONAL),
        )


def test_every_row_parses_and_row_ids_are_unique_per_file():
    seen: dict[str, set[str]] = {}
    for source, row in _rows():
        assert row_problems(row) == [], (source, row.get("row"), row_problems(row))
        ids = seen.setdefault(source, set())
        assert row["row"] not in ids, (source, row["row"])
        ids.add(row["row"])


def test_every_row_has_a_source_a_reader_can_find():
    for source, row in _rows():
        # an author or repository, and where in it (a table, figure, section, file or line)
        text = row["source"]
        assert len(text) > 40, (source, row["row"], text)
        assert re.search(r"Table|Fig|line|section|\.pkl|\.md|\.csv", text), (source, row["row"], text)


def test_every_row_names_a_profile_that_exists():
    profiles = Path(__file__).resolve().parent.parent / "device_profiles"
    for source, row in _rows():
        if row.get("profile"):
            assert (profiles / f"{row['profile']}.yaml").exists(), (source, row["row"], row["profile"])


def test_every_rows_model_builds_and_runs_on_the_meta_device():
    built: dict[tuple, tuple] = {}
    for source, row in _rows():
        c, h, w = _shape(row["input_shape"])
        depth = int(row["depth"]) if row.get("depth") else None
        key = (row["model"], float(row["width"]), depth, c, h, w, int(row["classes"]))
        if key not in built:
            with torch.device("meta"):
                model = build_model(
                    row["model"], SubmodelSpec(rate=float(row["width"]), depth=depth),
                    num_classes=int(row["classes"]), in_channels=c, image_size=(h, w),
                )  # fmt: skip
                built[key] = tuple(model(torch.zeros(2, c, h, w)).shape)
        assert built[key] == (2, int(row["classes"])), (source, row["row"], built[key])


def test_the_corpus_has_the_rows_and_energy_rows_the_issue_asks():
    rows = _rows()
    assert len(rows) >= 40, len(rows)
    assert sum(_has_energy(r) for _, r in rows) >= 15


@pytest.mark.xfail(
    strict=True,
    reason="issue 46 asks for >= 5 sources and microcontroller rows (3 sources, no mcu row yet); validation/SOURCES.md lists what was "
    "tried and why it gave no row",
)
def test_the_corpus_has_five_sources_and_every_device_class_the_issue_names():
    rows = _rows()
    assert len({s for s, _ in rows}) >= 5
    assert {"sbc", "edge_gpu", "phone", "mcu"} <= {r["device_class"] for _, r in rows}
