"""The run directory: a new folder per run, files appended and flushed as the run goes.

Nothing a user produced is ever overwritten: a run always gets a fresh folder, and files are written
through a temporary name and renamed into place when whole. A process writing a folder holds its lock
(``FolderLock``); a resumed run's recorder writes nothing until the resume has passed every check.
"""

from __future__ import annotations

import contextlib
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
from iotfl_sim.core import safe_json
from iotfl_sim.core.catalog import FAILURE_REASONS, SERVER_WORK_KINDS
from iotfl_sim.core.errors import CheckpointError, ScenarioError
from iotfl_sim.output.space import writing

_UNSET = object()
ROUND_COLUMNS_HEAD = [
    "round", "sim_time_s", "round_time_s", "selected", "completed",
    *(f"failed_{r}" for r in FAILURE_REASONS), "alive",
]  # fmt: skip
ROUND_COLUMNS_TAIL = [
    "train_loss", "energy_j", "energy_compute_j", "energy_radio_j", "energy_idle_j", "energy_round_j",
    "bytes_down", "bytes_up", "bytes_down_round", "bytes_up_round",
    "comm_waste", "comm_waste_cum", "bytes_wasted", "server_time_s", *(f"server_{k}_s" for k in SERVER_WORK_KINDS), "server_energy_j",
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


NEW_SUFFIX = ".new"  # a run folder being made by ``new_run_dir_whole``: never a run


def new_run_dir_whole(final: Path, resolved: dict, base_dir: Path | None, sources: str | None = None) -> Path:
    """Make the run folder ``final`` (which must not exist) with its scenario in it (and ``sources``, the text of
    its ``sources.json``: ``output.sources``), under a temporary name
    renamed when whole: a folder under a study's run id is always a run (a sweep resumes it), never half made."""
    import shutil
    import tempfile

    if os.path.lexists(final):
        raise ScenarioError(f"{final}: already exists, and a run starts only in a new folder; move it away and try again")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name[:40]}.", suffix=NEW_SUFFIX, dir=final.parent))
    try:
        write_scenario(tmp, resolved)
        write_origin(tmp, base_dir)
        if sources is not None:
            write_atomic(tmp / "sources.json", sources)
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # made by this process a moment ago
        raise
    return final


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file, flush it to disk, and rename it over ``path``."""
    tmp = path.with_name(path.name + ".tmp")
    with writing(path), open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class FolderLock:
    """An exclusive lock on a folder for as long as one process writes it: ``flock`` on ``<folder>/.lock``.
    Runs and studies take it (a second ``--resume`` of a run, a second sweep of a study is refused).

    The kernel drops a flock when its process ends, however it ends (kill -9 included), so a lock never
    outlives its process: a ``.lock`` file a dead process left is simply taken over. Taking the lock writes
    nothing when the file is there; otherwise it creates the file, and ``release`` removes it again, as it
    does a file found there when ``wrote`` says the process wrote in the folder: a refused command leaves
    the folder as it found it, a finished one leaves no lock file.
    """

    NAME = ".lock"

    def __init__(self, folder: Path, busy: str) -> None:
        """``busy``: the error when another process holds the lock (a ScenarioError: one line, exit status 2)."""
        import fcntl

        self.path = Path(folder) / self.NAME
        self._fd: int | None = None
        self.created = False
        for _ in range(100):
            created = False
            try:
                try:  # read-write: on NFS, flock is a POSIX lock and needs a file open for writing
                    fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
                except FileNotFoundError:
                    try:
                        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
                    except FileExistsError:  # another process made it meanwhile: take that one
                        continue
                    created = True
            except OSError as e:
                raise ScenarioError(
                    f"{self.path}: cannot open the lock file ({e.strerror}); it must be a plain file: move it away"
                ) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                raise ScenarioError(busy) from None
            # the file may have been removed (and another one made) between open and flock: the lock held
            # would then be on a file nobody else looks at; start over
            try:
                now, mine = os.stat(self.path), os.fstat(fd)
                same = (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino)
            except FileNotFoundError:
                same = False
            if same:
                self._fd, self.created = fd, created
                return
            os.close(fd)
        raise ScenarioError(busy)

    def release(self, wrote: bool = True) -> None:
        """Drop the lock; the lock file goes with it if this process made it or ``wrote`` in the folder."""
        if self._fd is None:
            return
        if self.created or wrote:
            self.path.unlink(missing_ok=True)  # still held: whoever opens the name from now on makes a new file
        os.close(self._fd)  # closing drops the lock
        self._fd = None


class RunLock(FolderLock):
    """The lock of a run folder, for as long as a process writes it (a second ``--resume`` is refused)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, f"{path}: another iotfl-sim process is writing this run folder; wait for it to end")


def write_scenario(path: Path, resolved: dict) -> None:
    """``scenario.resolved.yaml`` of the run folder ``path``: what the run ran, every default filled in."""
    write_atomic(path / "scenario.resolved.yaml", yaml.safe_dump(resolved, sort_keys=False))


def scenario_sha256(path: Path) -> str:
    """SHA-256 of the run folder's ``scenario.resolved.yaml`` (a checkpoint records it; a resume compares)."""
    return hashlib.sha256((path / "scenario.resolved.yaml").read_bytes()).hexdigest()


def write_origin(path: Path, base_dir: Path | None) -> None:
    """Where the scenario was read from (relative paths in it, e.g. availability traces, resolve there)."""
    write_atomic(path / "origin.json", json.dumps({"base_dir": str(base_dir) if base_dir else None}) + "\n")


def read_origin(path: Path) -> Path | None:
    try:
        base = safe_json.read(path / "origin.json").get("base_dir")
    except (OSError, ValueError, AttributeError):
        return None
    return Path(base) if isinstance(base, str) else None


def check_offsets(path: Path, offsets: Any, events: str) -> dict[str, int]:
    """A checkpoint's file offsets, checked against the run folder's files (reads only: a refused resume
    changes nothing): each appended file must be at least as long as when the checkpoint was written."""
    names = ["rounds.csv"] + (["events.jsonl"] if events != "none" else [])
    keys = [*names, "events_lines"]
    if not isinstance(offsets, dict) or not all(type(offsets.get(k)) is int and offsets[k] >= 0 for k in keys):
        raise CheckpointError(
            f"{path / 'checkpoints'}: the last checkpoint's file offsets are not byte counts; remove that "
            "checkpoint folder to resume from the one before it, or start a new run"
        )
    for name in names:
        have = (path / name).stat().st_size if (path / name).is_file() else -1
        if have < offsets[name]:
            raise CheckpointError(
                f"{path / name}: shorter than when the last checkpoint was written (the file was changed); start a new run"
            )
    return {k: offsets[k] for k in keys}


class RunRecorder:
    """Writes rounds.csv, events.jsonl, devices.csv and summary.json of a run folder.

    ``offsets`` (a checkpoint's, see ``check_offsets``): a resumed run. The recorder then writes nothing
    until ``begin``: the replay of the earlier rounds retraces the event log without writing it, and only
    once the resume has passed every check are the files cut back to those offsets and continued.
    """

    def __init__(
        self, path: Path, acc_labels: list[str], events: str = "all", extra_columns: list[str] | None = None,
        offsets: dict[str, int] | None = None,
    ) -> None:
        self.path = path
        self.acc_columns = ["acc_full", "acc_avg", *[f"acc_{x}" for x in acc_labels if x not in ("full", "avg")]]
        self.columns = [*ROUND_COLUMNS_HEAD, *self.acc_columns, "loss_full", *ROUND_COLUMNS_TAIL, *(extra_columns or [])]
        self.events_mode = events
        self._events_on = events != "none"
        self._offsets = check_offsets(path, offsets, events) if offsets is not None else None
        self._rounds_f: Any = None
        self._events_f: Any = None
        # Events that may not be written yet because an earlier one can still come (see ``hold``).
        self._held: list[tuple[float, int, str]] = []
        self._holds: deque[list] = deque()  # [instant, token, open] in the order they were taken
        self._open: dict[int, list] = {}
        self._seq = itertools.count()
        self.events_written = 0  # lines, counted from the start of the run
        # a resumed run's replay retraces the event log (holds and all); these lines are on disk already
        self._skip = self._offsets["events_lines"] if self._offsets is not None else 0
        self._loggers: Any = _UNSET  # output.tensorboard / output.wandb, started at the first row
        if self._offsets is None:
            self.begin()

    @property
    def writing(self) -> bool:
        """Whether this recorder has begun writing the run folder's files."""
        return self._rounds_f is not None

    def begin(self) -> None:
        """Start writing: a new run's files from scratch, a resumed run's cut back to the checkpoint's offsets
        (rows after it and a torn last line go) and continued."""
        if self.writing:
            return
        off = self._offsets
        names = ["rounds.csv"] + (["events.jsonl"] if self.events_mode != "none" else [])
        if off is not None:
            for name in names:
                with writing(self.path / name):
                    os.truncate(self.path / name, off[name])
        mode = "w" if off is None else "a"
        with writing(self.path / "rounds.csv"):
            self._rounds_f = open(self.path / "rounds.csv", mode, newline="")  # noqa: SIM115 - kept open for the run
            if off is None:
                csv.DictWriter(self._rounds_f, fieldnames=self.columns).writeheader()
                self._rounds_f.flush()
        if len(names) > 1:
            with writing(self.path / "events.jsonl"):
                self._events_f = open(self.path / "events.jsonl", mode)  # noqa: SIM115

    def offsets(self) -> dict[str, int]:
        """Byte lengths of the appended files, everything written so far flushed."""
        with writing(self.path / "rounds.csv"):
            self._rounds_f.flush()
        out = {"rounds.csv": self._rounds_f.tell(), "events.jsonl": 0, "events_lines": self.events_written}
        if self._events_f is not None:
            with writing(self.path / "events.jsonl"):
                self._events_f.flush()
            out["events.jsonl"] = self._events_f.tell()
        return out

    def event(self, t: float, rnd: int, device: int, event: str, **fields: Any) -> None:
        if not self._events_on:
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
        if not self._events_on:
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
        mark = self._holds[0][0] if self._holds else math.inf
        while self._held and self._held[0][0] <= mark:
            self._emit(heapq.heappop(self._held)[2])

    def _emit(self, line: str) -> None:
        self.events_written += 1
        if not self.writing:  # the replay of a resumed run retraces lines already on disk
            self._skip -= 1
            return
        with writing(self.path / "events.jsonl"):
            self._events_f.write(line)

    @property
    def replay_pending(self) -> int:
        """Lines of the event log a resumed run's replay has not yet retraced (negative: it made more lines
        than the checkpoint counted, which a faithful replay never does)."""
        return self._skip

    def round_row(self, row: dict[str, Any]) -> None:
        if self._events_f is not None:
            with writing(self.path / "events.jsonl"):
                self._events_f.flush()
        buf = io.StringIO()
        csv.DictWriter(buf, fieldnames=self.columns).writerow({k: _fmt(row.get(k)) for k in self.columns})
        line = buf.getvalue()
        with writing(self.path / "rounds.csv"):
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
        with writing(self.path / "devices.csv"), open(tmp, "w") as f:
            f.write(",".join(names) + "\n")
            write_rows(f, [columns[k] for k in names])
        os.replace(tmp, self.path / "devices.csv")

    def summary(self, summary: dict[str, Any]) -> None:
        write_atomic(self.path / "summary.json", json.dumps(summary, indent=2) + "\n")

    def close(self, failed: bool = False) -> None:
        """Write the events still held and close the files. ``failed`` (the run is ending on an error): the
        files stay as they are (a resume cuts them back to its checkpoint) and nothing here raises."""
        if self._loggers not in (None, _UNSET):
            self._loggers.close()
        if not self.writing:
            return
        try:
            if not failed and self._events_f is not None:
                self._holds.clear()
                self._open.clear()
                self._write_ready()
        except OSError:
            failed = True
            raise
        finally:
            for f, name in ((self._rounds_f, "rounds.csv"), (self._events_f, "events.jsonl")):
                if f is None:
                    continue
                if failed:
                    with contextlib.suppress(OSError):  # the first error is the one to report
                        f.close()
                else:
                    with writing(self.path / name):
                        f.close()
            self._rounds_f = self._events_f = None


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
