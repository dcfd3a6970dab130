"""The run directory: a new folder per run, files appended and flushed as the run goes.

Nothing a user produced is ever overwritten: a run always gets a fresh folder, and files are written
through a temporary name and renamed into place when whole.
"""

from __future__ import annotations

import csv
import hashlib
import heapq
import io
import itertools
import json
import math
import os
import time
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from iotfl_sim import faults
from iotfl_sim.algorithms.base import SERVER_WORK_KINDS
from iotfl_sim.fleet.fleet import FAILURE_REASONS
from iotfl_sim.output.codec import CheckpointError
from iotfl_sim.scenario.loader import ScenarioError

_UNSET = object()
ROUND_COLUMNS_HEAD = [
    "round", "sim_time_s", "round_time_s", "selected", "completed",
    *(f"failed_{r}" for r in FAILURE_REASONS), "alive",
]  # fmt: skip
ROUND_COLUMNS_TAIL = [
    "train_loss", "energy_j", "energy_compute_j", "energy_radio_j", "energy_idle_j", "energy_round_j",
    "bytes_down", "bytes_up", "bytes_down_round", "bytes_up_round",
    "comm_waste", "comm_waste_cum", "server_time_s", *(f"server_{k}_s" for k in SERVER_WORK_KINDS), "server_energy_j",
    "host_train_s", "host_eval_s", "host_aggregate_s", "host_other_s",
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
    """Write ``text`` to a temporary file, flush it to disk, and rename it over ``path``."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class RunLock:
    """An exclusive lock on a run folder for as long as a process writes it (a second ``--resume`` is refused)."""

    def __init__(self, path: Path) -> None:
        import fcntl

        self._f = open(path / ".lock", "a+")  # noqa: SIM115 - held for the run
        try:
            fcntl.flock(self._f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._f.close()
            raise ScenarioError(f"{path}: another iotfl-sim process is writing this run folder; wait for it to end") from None

    def release(self) -> None:
        self._f.close()  # closing drops the lock


def _truncate(path: Path, size: int) -> None:
    """Cut ``path`` back to ``size`` bytes (what a checkpoint saw): rows after it, or a torn last line, go."""
    have = path.stat().st_size if path.exists() else -1
    if have < size:
        raise CheckpointError(f"{path}: shorter than when the last checkpoint was written (the file was changed); start a new run")
    os.truncate(path, size)


class RunRecorder:
    """Writes rounds.csv, events.jsonl, devices.csv, summary.json and scenario.resolved.yaml.

    ``offsets`` (a checkpoint's): continue the files of a resumed run from those byte offsets.
    """

    def __init__(
        self, path: Path, acc_labels: list[str], events: str = "all", extra_columns: list[str] | None = None,
        offsets: dict[str, int] | None = None,
    ) -> None:
        self.path = path
        self.acc_columns = ["acc_full", "acc_avg", *[f"acc_{x}" for x in acc_labels if x not in ("full", "avg")]]
        self.columns = [*ROUND_COLUMNS_HEAD, *self.acc_columns, "loss_full", *ROUND_COLUMNS_TAIL, *(extra_columns or [])]
        self.events_mode = events
        if offsets is not None:
            _truncate(path / "rounds.csv", offsets["rounds.csv"])
            if events != "none":
                _truncate(path / "events.jsonl", offsets["events.jsonl"])
        mode = "w" if offsets is None else "a"
        self._rounds_f = open(path / "rounds.csv", mode, newline="")  # noqa: SIM115 - kept open for the run
        self._rounds = csv.DictWriter(self._rounds_f, fieldnames=self.columns)
        if offsets is None:
            self._rounds.writeheader()
            self._rounds_f.flush()
        self._events_f = open(path / "events.jsonl", mode) if events != "none" else None  # noqa: SIM115
        # Events that may not be written yet because an earlier one can still come (see ``hold``).
        self._held: list[tuple[float, int, str]] = []
        self._holds: deque[list] = deque()  # [instant, token, open] in the order they were taken
        self._open: dict[int, list] = {}
        self._seq = itertools.count()
        self.events_written = 0  # lines, counted from the start of the run
        # a resumed run's replay retraces the event log (holds and all) without writing the lines already on disk
        self._skip = int(offsets.get("events_lines", 0)) if offsets is not None else 0
        self._loggers: Any = _UNSET  # output.tensorboard / output.wandb, started at the first row

    def offsets(self) -> dict[str, int]:
        """Byte lengths of the appended files, everything written so far flushed."""
        self._rounds_f.flush()
        out = {"rounds.csv": self._rounds_f.tell(), "events.jsonl": 0, "events_lines": self.events_written}
        if self._events_f is not None:
            self._events_f.flush()
            out["events.jsonl"] = self._events_f.tell()
        return out

    def scenario_sha256(self) -> str:
        return hashlib.sha256((self.path / "scenario.resolved.yaml").read_bytes()).hexdigest()

    def origin(self, base_dir: Path | None) -> None:
        """Where the scenario was read from (relative paths in it, e.g. availability traces, resolve there)."""
        write_atomic(self.path / "origin.json", json.dumps({"base_dir": str(base_dir) if base_dir else None}) + "\n")

    @staticmethod
    def read_origin(path: Path) -> Path | None:
        try:
            base = json.loads((path / "origin.json").read_text()).get("base_dir")
        except (OSError, ValueError, AttributeError):
            return None
        return Path(base) if isinstance(base, str) else None

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
            self._emit(line)
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
            self._emit(heapq.heappop(self._held)[2])

    def _emit(self, line: str) -> None:
        assert self._events_f is not None
        self.events_written += 1
        if self._skip > 0:  # already on disk: the replay of a resumed run retraces it
            self._skip -= 1
            return
        self._events_f.write(line)

    @property
    def replay_pending(self) -> int:
        """Lines of the event log a resumed run's replay has not yet retraced."""
        return self._skip

    def round_row(self, row: dict[str, Any]) -> None:
        if self._events_f is not None:
            self._events_f.flush()
        buf = io.StringIO()
        csv.DictWriter(buf, fieldnames=self.columns).writerow({k: _fmt(row.get(k)) for k in self.columns})
        line = buf.getvalue()
        if faults.armed("row_torn"):
            self._rounds_f.write(line[: len(line) // 2])
            self._rounds_f.flush()
        faults.hit("row_torn")
        self._rounds_f.write(line)
        self._rounds_f.flush()
        faults.hit("row_written")
        if self._loggers is _UNSET:
            from iotfl_sim.output.loggers import RoundLoggers

            self._loggers = RoundLoggers.for_run(self.path)
        if self._loggers is not None:
            self._loggers.round({k: row.get(k) for k in self.columns})

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
        if self._loggers not in (None, _UNSET):
            self._loggers.close()
        self._rounds_f.close()
        if self._events_f is not None:
            self._holds.clear()
            self._open.clear()
            self._write_ready()
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
