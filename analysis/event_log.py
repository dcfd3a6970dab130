"""A run's events.jsonl read once, in blocks, keeping only what the figures draw: memory bounded whatever its size.

A long run's event log holds millions of lines (hundreds of MB). The figures need two things from it:

- the timeline (Gantt chart): the events of a sample of devices and of the server, chosen before reading
  (``sample_devices``, from devices.csv) or, without devices.csv, the first devices seen; up to the instant one
  of its rows holds ``MAX_ROW_BARS`` bars or all of them ``MAX_TIMELINE_EVENTS`` events (the timeline then shows
  the run up to that instant);
- the staleness of every applied update (asynchronous runs only): counts, not events.

``event_digest(run)`` reads both in one pass and keeps the result with the run, so every figure of a run shares
it. Only kept lines are parsed as JSON (a regular expression finds them); lines that are not valid JSON (a
half-written last line, a damaged file) are skipped, and a line longer than ``MAX_LINE_BYTES`` (a file of NUL
bytes after a crash) is dropped up to its end instead of being held in memory.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from analysis.rundir import PlotInputError, Run
from iotfl_sim.core import safe_json

__all__ = [
    "DeviceEvents",
    "EventDigest",
    "event_digest",
    "may_apply_updates",
    "sample_devices",
    "scan_events",
]

MAX_TIMELINE_DEVICES = 20
SERVER = -1  # the device id of the server's own events (server_work, and the hierarchy's)
# The timeline shows the run up to the instant one of its rows reaches MAX_ROW_BARS bars (a task's download,
# train and upload, a span of server work): every bar is drawn at least 0.4 % of the axis wide
# (``analysis.plots.MIN_BAR_FRACTION``), so 200 bars can fill 80 % of a row, more would run past the axis.
MAX_ROW_BARS = 200
# and up to the instant it holds this many events (a few MB of dicts), whichever comes first: a row's events that
# are not bars (late, offline, ...) are bounded too
MAX_TIMELINE_EVENTS = 20_000
_BAR_STARTS = frozenset({"dispatch", "train_start", "train_end"})  # events that start a bar on a device's row
# where reading stops whatever is left (staleness counted over the first 2 GiB; a few seconds a GiB)
MAX_SCAN_BYTES = 2 * 2**30
# a staleness above this is not one a run reaches (a damaged line): left out, it would make that many bins
MAX_STALENESS = 1_000_000
MAX_LINE_BYTES = 2**20  # an event line is ~100 bytes
_BLOCK = 4 * 2**20

# (at most 18 digits: a damaged line's number of thousands of digits is not converted, which Python refuses)
_DEVICE_RE = re.compile(rb'"device"\s*:\s*(-?\d{1,18})(?![0-9.eE])')
_T_RE = re.compile(rb'"t"\s*:\s*([-+0-9.eE]+)')
_APPLY_RE = re.compile(rb'"event"\s*:\s*"apply"')
_STALENESS_RE = re.compile(rb'"staleness"\s*:\s*(\d{1,18})(?![0-9.eE])')


class _LineBlocks:
    """A file in blocks of whole lines (up to 4 MiB), then its last line when it has no newline (probably
    half-written): iterating yields (block, whole). Stops at the first block boundary past ``max_bytes`` bytes and
    then says ``truncated``; ``last_line`` is the last whole line read. A line over ``MAX_LINE_BYTES`` is skipped.
    Raises PlotInputError if the file cannot be read."""

    def __init__(self, path: Path, max_bytes: int) -> None:
        self.path, self.max_bytes = path, max_bytes
        self.truncated = False
        self.last_line = b""

    def __iter__(self) -> Iterator[tuple[bytes, bool]]:
        n_bytes = 0
        rest = b""
        skipping = False  # inside a line too long to keep: drop until its newline
        block_size = max(4096, min(_BLOCK, self.max_bytes // 4))
        try:
            with open(self.path, "rb") as f:
                while True:
                    block = f.read(block_size)
                    if not block:
                        if rest.strip() and not skipping:
                            yield rest, False
                        return
                    if n_bytes >= self.max_bytes:
                        self.truncated = True
                        return
                    n_bytes += len(block)
                    if skipping:
                        nl = block.find(b"\n")
                        if nl < 0:
                            continue
                        block, skipping = block[nl + 1 :], False
                    block = rest + block
                    cut = block.rfind(b"\n") + 1
                    rest, block = block[cut:], block[:cut]
                    if len(rest) > MAX_LINE_BYTES:
                        rest, skipping = b"", True
                    if not block:
                        continue
                    self.last_line = block[block.rfind(b"\n", 0, len(block) - 1) + 1 :]
                    yield block, True
        except OSError as e:
            raise PlotInputError(f"{self.path}: cannot read ({e.strerror})") from e


def _lines_matching(block: bytes, pattern: re.Pattern[bytes]) -> Iterator[tuple[re.Match[bytes], bytes]]:
    """(match, the whole line holding it) for each match of ``pattern`` in a block of lines."""
    for m in pattern.finditer(block):
        start = block.rfind(b"\n", 0, m.start()) + 1
        end = block.find(b"\n", m.end())
        yield m, block[start : end if end >= 0 else len(block)]


@dataclass
class DeviceEvents:
    """The timeline's events: ``by_device[d]`` lists device ``d``'s events (dicts) in file (time) order.

    ``sampled``: the devices asked for; ``first_seen``: every kept device in order of first appearance;
    ``truncated``: the events stop before the log does (the event budget or the byte limit), at ``t_last``,
    else ``t_last`` is the latest time among the kept events."""

    by_device: dict[int, list[dict[str, Any]]]
    sampled: list[int]
    first_seen: list[int]
    truncated: bool
    t_last: float


@dataclass
class EventDigest:
    """What the figures draw from one event log: the timeline's events, and the applied updates counted by
    staleness (``staleness[s]``; None when not counted or none found; ``staleness_truncated``: the log is longer
    than what was read)."""

    timeline: DeviceEvents
    staleness: np.ndarray | None
    staleness_truncated: bool


def scan_events(
    path: str | Path,
    devices: Iterable[int] = (),
    fill: int = 0,
    *,
    count_staleness: bool = False,
    max_events: int = MAX_TIMELINE_EVENTS,
    max_row_bars: int = MAX_ROW_BARS,
    max_bytes: int = MAX_SCAN_BYTES,
) -> EventDigest:
    """Read events.jsonl once: the events of ``devices`` plus of the first ``fill`` other devices seen, up to the
    instant a device reaches ``max_row_bars`` bars or all of them ``max_events`` events, and with
    ``count_staleness`` every ``apply`` event's staleness, counted.

    Stops at the first block boundary past ``max_bytes`` bytes, and as soon as the timeline is full when no
    staleness is counted. A missing file has no events. Raises PlotInputError if it exists but cannot be read.
    """
    path = Path(path)
    sampled = [int(d) for d in devices]
    wanted = set(sampled)
    extra: set[int] = set()
    by_device: dict[int, list[dict[str, Any]]] = {}
    first_seen: list[int] = []
    kept = 0
    bars: dict[int, int] = {}
    t_last = 0.0
    full = False  # the timeline takes no more events
    cut_short = False  # ... because it reached its limits
    counts: dict[int, int] = {}

    def keep(d: int, line: bytes) -> None:
        nonlocal t_last, kept, full, cut_short
        try:
            ev = safe_json.loads(line)
        except ValueError:
            return
        if not isinstance(ev, dict):
            return
        if d not in by_device:
            by_device[d] = []
            first_seen.append(d)
        by_device[d].append(ev)
        t = ev.get("t")
        if isinstance(t, int | float) and t > t_last:
            t_last = float(t)
        kept += 1
        if ev.get("event") in _BAR_STARTS or "duration" in ev:
            bars[d] = bars.get(d, 0) + 1
            cut_short = cut_short or bars[d] >= max_row_bars
        cut_short = cut_short or kept >= max_events
        full = cut_short

    def line_by_line(block: bytes) -> None:
        for line in block.splitlines():
            if full:
                return
            m = _DEVICE_RE.search(line)
            if m is None:
                continue
            d = int(m.group(1))
            if d not in wanted and d not in extra:
                if len(extra) >= fill:
                    continue
                extra.add(d)
            keep(d, line)

    def by_pattern(block: bytes, pattern: re.Pattern[bytes]) -> None:
        for m, line in _lines_matching(block, pattern):
            if full:
                return
            keep(int(m.group(1)), line)

    def count(block: bytes) -> None:
        for _, line in _lines_matching(block, _APPLY_RE):
            s = _STALENESS_RE.search(line)
            # (not parsed as JSON, a few times faster: a line cut mid-write lacks its closing brace)
            if s is not None and line.rstrip().endswith(b"}") and (v := int(s.group(1))) <= MAX_STALENESS:
                counts[v] = counts.get(v, 0) + 1

    pattern: re.Pattern[bytes] | None = None
    blocks = _LineBlocks(path, max_bytes)
    if path.is_file():
        for block, whole in blocks:
            if count_staleness:
                count(block)
            if full:
                if not count_staleness:
                    break
                continue
            if not whole or len(extra) < fill:
                line_by_line(block)
                continue
            if pattern is None:
                ids = sorted(wanted | extra)
                if not ids:
                    full = True  # nothing to keep: only the counts go on
                    continue
                alternatives = b"|".join(str(d).encode() for d in ids)
                pattern = re.compile(rb'"device"\s*:\s*(' + alternatives + rb")(?![0-9.eE])")
            by_pattern(block, pattern)
    if blocks.truncated and not cut_short:
        # the read horizon is the time of the last line read, whichever device it was about
        m = _T_RE.search(blocks.last_line)
        if m:
            try:
                t_last = max(t_last, float(m.group(1)))
            except ValueError:
                pass
    timeline = DeviceEvents(by_device, sampled, first_seen, cut_short or blocks.truncated, t_last)
    staleness = None
    if counts:
        staleness = np.zeros(max(counts) + 1, dtype=np.int64)
        for v, n in counts.items():
            staleness[v] = n
    return EventDigest(timeline, staleness, blocks.truncated)


def may_apply_updates(run: Run) -> bool:
    """Whether the run can have ``apply`` events: it says it is not synchronous, or its rounds.csv has the
    asynchronous columns (the events file of a synchronous run, millions of lines, is then never scanned for them)."""
    return (
        run.server_mode not in (None, "sync")
        or "updates_applied" in run.rounds
        or "staleness_mean" in run.rounds
    )


def sample_devices(devices: dict[str, np.ndarray], k: int = MAX_TIMELINE_DEVICES) -> list[int]:
    """Up to k device ids spread over the fleet: devices that had tasks, about a quarter with failures."""
    ids_col = devices.get("device")
    if ids_col is None or ids_col.dtype.kind != "f" or ids_col.size == 0:
        return []
    ok_ids = np.isfinite(ids_col)
    ids = (
        ids_col.astype(np.int64, copy=False)
        if ok_ids.all()
        else np.where(ok_ids, ids_col, -1).astype(np.int64)
    )
    active = ok_ids.copy()
    tasks = devices.get("tasks")
    if tasks is not None and tasks.dtype.kind == "f":
        active &= np.nan_to_num(tasks) > 0
    failed = np.zeros(ids.size, dtype=bool)
    for col, v in devices.items():
        if col.startswith("failed_") and v.dtype.kind == "f":
            failed |= np.nan_to_num(v) > 0
    failing, fine = ids[active & failed], ids[active & ~failed]
    n_fail = min(failing.size, max(k // 4, k - fine.size))
    n_fine = min(fine.size, k - n_fail)

    def spread(a: np.ndarray, m: int) -> list[int]:
        if m <= 0:
            return []
        return [int(v) for v in a[np.unique(np.linspace(0, a.size - 1, m).round().astype(int))]]

    return sorted(set(spread(failing, n_fail) + spread(fine, n_fine)))


def event_digest(run: Run) -> EventDigest:
    """The run's event log as the figures use it (read on first use, then kept with the run): the timeline's
    sample (``sample_devices`` plus the server, filled up with the first devices seen) and, when the run can
    have applied updates, their staleness counts."""
    digest = run.memo.get("events")
    if digest is None:
        k = MAX_TIMELINE_DEVICES
        digest = scan_events(run.events_path, [*sample_devices(run.devices, k), SERVER], fill=k,
                             count_staleness=may_apply_updates(run))  # fmt: skip
        run.memo["events"] = digest
    return digest
