"""The run directory: a new folder per run, files appended and flushed as the run goes.

Nothing a user produced is ever overwritten: a run always gets a fresh folder, and files are written
through a temporary name and renamed into place when whole.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import time
from pathlib import Path
from typing import Any

import yaml

from iotfl_sim import faults
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
        self._loggers: Any = _UNSET  # output.tensorboard / output.wandb, started at the first row

    def offsets(self) -> dict[str, int]:
        """Byte lengths of the appended files, everything written so far flushed."""
        self._rounds_f.flush()
        out = {"rounds.csv": self._rounds_f.tell(), "events.jsonl": 0}
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
        self._events_f.write(json.dumps(rec) + "\n")

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
        texts = [_column_text(columns[k]) for k in names]
        tmp = self.path / "devices.csv.tmp"
        with open(tmp, "w") as f:
            f.write(",".join(names) + "\n")
            f.writelines(",".join(row) + "\n" for row in zip(*texts, strict=True))
        os.replace(tmp, self.path / "devices.csv")

    def summary(self, summary: dict[str, Any]) -> None:
        write_atomic(self.path / "summary.json", json.dumps(summary, indent=2) + "\n")

    def close(self) -> None:
        if self._loggers not in (None, _UNSET):
            self._loggers.close()
        self._rounds_f.close()
        if self._events_f is not None:
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
