"""The run directory: a new folder per run, files appended and flushed as the run goes.

Nothing a user produced is ever overwritten: a run always gets a fresh folder, and files are written
through a temporary name and renamed into place when whole.
"""

from __future__ import annotations

import csv
import heapq
import itertools
import json
import math
import os
import time
from collections import deque
from pathlib import Path
from typing import Any

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
        # Events that may not be written yet because an earlier one can still come (see ``hold``).
        self._held: list[tuple[float, int, str]] = []
        self._holds: deque[list] = deque()  # [instant, token, open] in the order they were taken
        self._open: dict[int, list] = {}
        self._seq = itertools.count()

    def scenario(self, resolved: dict) -> None:
        write_atomic(self.path / "scenario.resolved.yaml", yaml.safe_dump(resolved, sort_keys=False))

    def event(self, t: float, rnd: int, device: int, event: str, **fields: Any) -> None:
        if self._events_f is None:
            return
        if self.events_mode == "failures" and event not in ("oom", "depleted", "refused", "late", "offline"):
            return
        rec = {"t": round(t, 6), "round": rnd, "device": device, "event": event, **fields}
        line = json.dumps(rec) + "\n"
        if not self._open and not self._held:
            self._events_f.write(line)
            return
        heapq.heappush(self._held, (t, next(self._seq), line))
        self._write_ready()

    def hold(self, t: float) -> int | None:
        """Say that an event at an instant >= ``t`` (before the clock's now) may still be recorded; events
        after ``t`` wait until ``release`` so that the log stays in time order. Returns the token to release.

        A transfer through a shared gateway settles its failures (offline, depleted) only when the medium
        has delivered it, at an instant in the past; meanwhile other devices' events are recorded.
        """
        if self._events_f is None:
            return None
        token = next(self._seq)
        entry = [t, token, True]
        self._holds.append(entry)
        self._open[token] = entry
        return token

    def release(self, token: int | None) -> None:
        entry = self._open.pop(token, None) if token is not None else None
        if entry is None:
            return
        entry[2] = False
        while self._holds and not self._holds[0][2]:
            self._holds.popleft()
        self._write_ready()

    def _write_ready(self) -> None:
        """Write the held events no open hold can precede (all of them once nothing is held open)."""
        assert self._events_f is not None
        mark = self._holds[0][0] if self._holds else math.inf
        while self._held and self._held[0][0] <= mark:
            self._events_f.write(heapq.heappop(self._held)[2])

    def round_row(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        self._rounds.writerow({k: _fmt(row.get(k)) for k in self.columns})
        self._rounds_f.flush()
        if self._events_f is not None:
            self._events_f.flush()

    def devices(self, columns: dict[str, Any]) -> None:
        """Write devices.csv from per-device columns (arrays of equal length)."""
        names = list(columns)
        texts = [_column_text(columns[k]) for k in names]
        tmp = self.path / "devices.csv.tmp"
        with open(tmp, "w") as f:
            f.write(",".join(names) + "\n")
            f.writelines(",".join(row) + "\n" for row in zip(*texts, strict=True))
        os.replace(tmp, self.path / "devices.csv")

    def summary(self, summary: dict[str, Any]) -> None:
        write_atomic(self.path / "summary.json", json.dumps(summary, indent=2) + "\n")

    def close(self) -> None:
        self._rounds_f.close()
        if self._events_f is not None:
            self._holds.clear()
            self._open.clear()
            self._write_ready()
            self._events_f.close()


def _column_text(values: Any) -> list[str]:
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
