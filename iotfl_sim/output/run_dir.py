"""The run directory: a new folder per run, files appended and flushed as the run goes.

Nothing a user produced is ever overwritten: a run always gets a fresh folder, and files are written
through a temporary name and renamed into place when whole.
"""

from __future__ import annotations

import csv
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from iotfl_sim.fleet.fleet import FAILURE_REASONS

ROUND_COLUMNS_HEAD = [
    "round", "sim_time_s", "round_time_s", "selected", "completed",
    *(f"failed_{r}" for r in FAILURE_REASONS), "alive",
]  # fmt: skip
ROUND_COLUMNS_TAIL = [
    "train_loss", "energy_j", "energy_compute_j", "energy_radio_j", "energy_idle_j", "energy_round_j",
    "bytes_down", "bytes_up", "bytes_down_round", "bytes_up_round",
    "comm_waste", "comm_waste_cum", "server_time_s", "server_energy_j",
    "host_train_s", "host_eval_s", "host_other_s",
]  # fmt: skip


def new_run_dir(parent: str | Path, name: str) -> Path:
    """Create ``parent/<name>-<timestamp>`` (with a -N suffix if taken) and return it."""
    parent = Path(parent)
    parent.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for i in range(1000):
        path = parent / (f"{name}-{stamp}" + (f"-{i}" if i else ""))
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"could not create a new run folder under {parent}")


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class RunRecorder:
    """Writes rounds.csv, events.jsonl, devices.csv, summary.json and scenario.resolved.yaml."""

    def __init__(
        self, path: Path, acc_labels: list[str], events: str = "all", extra_columns: list[str] | None = None
    ) -> None:
        self.path = path
        self.acc_columns = ["acc_full", "acc_avg", *[f"acc_{x}" for x in acc_labels if x not in ("full", "avg")]]
        self.columns = [*ROUND_COLUMNS_HEAD, *self.acc_columns, "loss_full", *ROUND_COLUMNS_TAIL, *(extra_columns or [])]
        self._rounds_f = open(path / "rounds.csv", "w", newline="")  # noqa: SIM115 - kept open for the run
        self._rounds = csv.DictWriter(self._rounds_f, fieldnames=self.columns)
        self._rounds.writeheader()
        self._rounds_f.flush()
        self.events_mode = events
        self._events_f = open(path / "events.jsonl", "w") if events != "none" else None  # noqa: SIM115
        self.rows: list[dict[str, Any]] = []

    def scenario(self, resolved: dict) -> None:
        write_atomic(self.path / "scenario.resolved.yaml", yaml.safe_dump(resolved, sort_keys=False))

    def event(self, t: float, rnd: int, device: int, event: str, **fields: Any) -> None:
        if self._events_f is None:
            return
        if self.events_mode == "failures" and event not in ("oom", "depleted", "refused", "late", "offline"):
            return
        rec = {"t": round(t, 6), "round": rnd, "device": device, "event": event, **fields}
        self._events_f.write(json.dumps(rec) + "\n")

    def round_row(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        self._rounds.writerow({k: _fmt(row.get(k)) for k in self.columns})
        self._rounds_f.flush()
        if self._events_f is not None:
            self._events_f.flush()

    def devices(self, columns: dict[str, Any]) -> None:
        """Write devices.csv from per-device columns (arrays of equal length)."""
        names = list(columns)
        tmp = self.path / "devices.csv.tmp"
        with open(tmp, "w") as f:
            f.write(",".join(names) + "\n")
            write_rows(f, [columns[k] for k in names])
        os.replace(tmp, self.path / "devices.csv")

    def summary(self, summary: dict[str, Any]) -> None:
        write_atomic(self.path / "summary.json", json.dumps(summary, indent=2) + "\n")

    def close(self) -> None:
        self._rounds_f.close()
        if self._events_f is not None:
            self._events_f.close()


def write_rows(f: Any, columns: list[Any]) -> None:
    """CSV rows of equal-length columns (``_column_text`` cells), with O(rows) vectorised work plus Python
    work per run of rows that repeat the row before in every column but the first.

    A large fleet's rows are mostly alike (a device never selected differs from its group's others
    only by its id), so each run costs one formatted row and one join over the ids: 10M rows in
    seconds, where formatting every cell took minutes and a string per cell.
    """
    if not columns:
        return
    cols = [c if isinstance(c, np.ndarray) else np.asarray(c, dtype=object) for c in columns]
    n = len(cols[0])
    if n == 0:
        return
    same = np.ones(n - 1, dtype=bool)
    for c in cols[1:]:
        same &= _same_as_previous(c)
    starts = np.flatnonzero(~same) + 1
    bounds = [0, *starts.tolist(), n]
    first = np.array(bounds[:-1], dtype=np.int64)
    cells = [_column_text(c[first]) for c in cols[1:]]  # each run's row, after the first cell
    rests = ["".join("," + x for x in row) + "\n" for row in zip(*cells, strict=True)] if cells else ["\n"] * len(first)
    objects = [c for c in cols[1:] if c.dtype.kind == "O"]
    for a, b, rest in zip(bounds[:-1], bounds[1:], rests, strict=True):
        if b - a > 1 and any(type(c[a]) is not str and len({type(x) for x in c[a:b]}) > 1 for c in objects):
            # equal but of different types (1 == 1.0 == True): one row at a time
            f.writelines(",".join(_column_text(c[r : r + 1])[0] for c in cols) + "\n" for r in range(a, b))
            continue
        for i in range(a, b, 1 << 20):  # a million ids at a time
            f.write(rest.join(_column_text(cols[0][i : min(b, i + (1 << 20))])))
            f.write(rest)


def _same_as_previous(c: np.ndarray) -> np.ndarray:
    """Which entries (from the second on) equal the one before (for objects: ``==``, see ``write_rows``)."""
    if c.dtype.kind == "f":  # bit for bit (-0.0 and 0.0 print differently), or both NaN (printed "")
        bits = np.ascontiguousarray(c, dtype=np.float64).view(np.int64)
        same = bits[1:] == bits[:-1]
        i = np.flatnonzero(~same)
        same[i] = np.isnan(c[i]) & np.isnan(c[i + 1])
        return same
    return np.asarray(c[1:] == c[:-1], dtype=bool)


def _column_text(values: Any) -> list[str]:
    if isinstance(values, np.ndarray) and values.dtype.kind in "iub":
        return list(map(str, values.tolist()))  # what the loop below gives for ints and bools, faster
    out = []
    for v in values.tolist() if hasattr(values, "tolist") else values:
        if isinstance(v, float):
            out.append("" if v != v else f"{v:.10g}")
        else:
            out.append(str(v))
    return out


def _fmt(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.10g}"
    return v
