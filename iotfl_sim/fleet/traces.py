"""Availability trace files: reading FedScale's ``client_behave_trace`` and CSV interval files into one table
(``TraceTable``) that ``fleet.availability``'s trace model replays.

Trace semantics (documented choices):

- FedScale ``client_behave_trace``: a client is online during ``[active[i], inactive[i])``
  (FedScale's own check is inclusive at the end; half-open intervals make "offline at
  offline_at" exact). ``finish_time`` ends the trace: intervals are clipped to
  ``[0, finish_time]`` and the pattern repeats with period ``finish_time``; an interval reaching
  ``finish_time`` joins one starting at 0 across the wrap. ``duration`` and ``model`` are not
  used. If ``inactive`` has one entry fewer than ``active``, the last interval lasts until
  ``finish_time``.
- CSV: online during ``[online_from, online_until)``; rows of a device may overlap (merged); the
  trace is not repeated. Its clients are the ids 0..max(device), so ids missing from the file are
  never online and, with ``mapping: modulo``, simulated device i replays CSV device i.
- ``mapping``: the trace's clients in sorted id order; simulated device i (its fleet-wide index)
  takes client ``i mod count`` (modulo) or ``perm[i mod count]`` for a permutation drawn from
  ``stream(seed, "avail_map")`` (random). Groups sharing a file thus take different clients.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from iotfl_sim import safe_pickle
from iotfl_sim.core.errors import ScenarioError
from iotfl_sim.scenario.availability import TraceAvailability
from iotfl_sim.seeding import stream

INF = math.inf


class TraceError(ScenarioError):
    """A trace file that cannot be used; the message names the file, the problem and the fix."""




class ClientTrace(NamedTuple):
    """Online intervals ``[starts[i], ends[i])`` of one trace client, sorted and disjoint."""

    starts: np.ndarray
    ends: np.ndarray
    period: float  # the pattern repeats with this period; inf: not repeated


class TraceTable:
    """All clients of one trace file as CSR arrays, plus how the trace's universe maps to slots."""

    def __init__(self, flat: _Flat, universe: int, slot_of_id: np.ndarray | None) -> None:
        self.ids = flat.ids
        self._info: dict[int, tuple[int, int, float, float, bool]] = {}  # the scalar path's per-slot cache
        self.universe = universe  # number of trace clients devices are mapped onto
        self.slot_of_id = slot_of_id  # universe index -> slot (CSV ids); None: identity
        self.off = np.append(flat.off, flat.off[-1])  # plus a last, empty slot: never online
        self.st, self.en = flat.starts, flat.ends
        self.periodic = bool(np.isfinite(flat.periods).any())
        self.period = np.append(flat.periods, 1.0 if self.periodic else INF)
        n = self.period.shape[0]
        self.full = np.zeros(n, dtype=bool)  # online all the time
        # End of interval 0 where the last interval runs into it across the period boundary.
        self.wrap = np.full(n, np.nan)
        if self.periodic and self.st.shape[0]:
            a, b = self.off[:-1], self.off[1:]
            last = self.st.shape[0] - 1
            joins = (
                (b > a)
                & (self.st[np.minimum(a, last)] <= 0.0)
                & (self.en[np.clip(b - 1, 0, last)] >= self.period)
            )
            self.full = joins & (b - a == 1)
            self.wrap = np.where(joins & (b - a > 1), self.en[np.minimum(a, last)], np.nan)

    def info(self, slot: int) -> tuple[int, int, float, float, bool]:
        """(first, end) interval index, period (0: not repeated), wrap end (nan: none), always online."""
        got = self._info.get(slot)
        if got is None:
            period = float(self.period[slot]) if self.periodic else 0.0
            got = (
                int(self.off[slot]),
                int(self.off[slot + 1]),
                period,
                float(self.wrap[slot]),
                bool(self.full[slot]),
            )
            self._info[slot] = got
        return got

    def slots_for(self, devices: np.ndarray, mapping: str, seed: int) -> np.ndarray:
        u = devices.astype(np.int64) % self.universe
        if mapping == "random":
            u = stream(seed, "avail_map").permutation(self.universe)[u]
        if self.slot_of_id is None:
            return u
        return self.slot_of_id[u]






def _fail(path: Path | str, what: str, fix: str) -> TraceError:
    return TraceError(f"{path}: {what}; {fix}")


class _Flat(NamedTuple):
    """A whole trace file as CSR arrays: client ``ids[c]`` is online during
    ``[starts[i], ends[i])`` for ``off[c] <= i < off[c+1]`` (sorted, disjoint), repeated with ``periods[c]``."""

    ids: list[Any]
    off: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    periods: np.ndarray


def _compact(
    cid: np.ndarray, s: np.ndarray, e: np.ndarray, periods: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Clip to [0, period] (repeated traces), drop empty intervals, sort per client, merge overlaps."""
    per = periods[cid]
    rep = np.isfinite(per)
    if rep.any():
        s = np.where(rep, np.maximum(s, 0.0), s)
        e = np.where(rep, np.minimum(e, per), e)
    keep = e > s
    if not keep.all():
        cid, s, e = cid[keep], s[keep], e[keep]
    same = cid[1:] == cid[:-1]
    if (cid[1:] < cid[:-1]).any() or (same & (s[1:] < s[:-1])).any():
        order = np.lexsort((s, cid))
        cid, s, e = cid[order], s[order], e[order]
        same = cid[1:] == cid[:-1]
    if (same & (s[1:] <= e[:-1])).any():  # overlapping or touching: merge (rare)
        out_c: list[int] = []
        out_s: list[float] = []
        out_e: list[float] = []
        for c, a, b in zip(cid.tolist(), s.tolist(), e.tolist(), strict=True):
            if out_c and out_c[-1] == c and a <= out_e[-1]:
                out_e[-1] = max(out_e[-1], b)
            else:
                out_c.append(c)
                out_s.append(a)
                out_e.append(b)
        cid, s, e = np.array(out_c, dtype=np.int64), np.array(out_s), np.array(out_e)
    off = np.zeros(periods.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(cid, minlength=periods.shape[0]), out=off[1:])
    return off, s.astype(np.float64), e.astype(np.float64)


def _sorted_ids(ids: Any) -> list[Any]:
    try:
        return sorted(ids)
    except TypeError:  # mixed id types
        return sorted(ids, key=lambda c: (type(c).__name__, str(c)))


def _open_trace(path: str | Path) -> Path:
    p = Path(path)
    if not p.is_file():
        raise _fail(
            p,
            "trace file not found",
            "check `path:` in the group's availability block (relative paths start at the scenario's folder)",
        )
    return p


_FEDSCALE_HOW = (
    "give a FedScale client_behave_trace pickle: {client_id: {'active': [s, ...], 'inactive': [s, ...], "
    "'finish_time': s}}"
)


def _length(value: Any) -> int:
    """How many times a client's list (or array) holds, before it is copied; 0 for what is not one."""
    if isinstance(value, np.ndarray):
        return value.size
    return len(value) if isinstance(value, list | tuple) else 0


def _times(path: Path, cid: Any, field: str, value: Any) -> list[Any]:
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if not isinstance(value, list | tuple):
        raise _fail(
            path,
            f"client {cid!r}: {field!r} is a {type(value).__name__}, not a list of seconds",
            _FEDSCALE_HOW,
        )
    return list(value)


def _check_numbers(path: Path, cid: Any, field: str, values: list[Any]) -> None:
    try:
        arr = np.array(values, dtype=np.float64)
        ok = arr.ndim == 1 and bool(np.isfinite(arr).all())
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise _fail(
            path, f"client {cid!r}: {field!r} holds a value that is not a finite number", "times are seconds"
        )


def _read_fedscale(path: str | Path) -> _Flat:
    p = _open_trace(path)
    data = _fedscale_clients(p)
    ids = _sorted_ids(data)
    # A pickle stores a list shared by many clients once: a file of a few MB can name one long list from
    # every client, and copying it per client (below) would take tens of GB. Without sharing, every time in
    # the file takes at least one byte of it (an opcode), so the expanded lists may hold at most one time per
    # byte: what is built from the file stays within a few times its size.
    budget = p.stat().st_size
    counts: list[int] = []
    periods: list[float] = []
    act: list[Any] = []
    ina: list[Any] = []
    for cid in ids:
        entry = data[cid]
        budget -= _length(entry["active"]) + _length(entry["inactive"])
        if budget < 0:
            raise _fail(
                p,
                f"its clients' interval lists hold more times than its {p.stat().st_size:,} bytes can store, i.e. "
                "one list is shared by many clients (a pickle bomb: it would expand to far more memory than the file)",
                "write each client's own 'active' and 'inactive' lists",
            )
        a, b, finish = _fedscale_intervals(p, cid, entry)
        act.extend(a)
        ina.extend(b)
        counts.append(len(a))
        periods.append(finish)
    cid_of = np.repeat(np.arange(len(ids)), counts)
    s, e = _finite_times(p, data, ids, act, ina)
    back = np.flatnonzero(e < s)
    if back.size:
        i = int(back[0])
        raise _fail(
            p,
            f"client {ids[cid_of[i]]!r}: interval ends ({e[i]:g}) before it starts ({s[i]:g})",
            "inactive[i] must be >= active[i]",
        )
    per = np.array(periods, dtype=np.float64)
    off, s, e = _compact(cid_of, s, e, per)
    return _Flat(ids, off, s, e, per)


def _fedscale_clients(p: Path) -> Mapping:
    """The pickle's dict of clients, each a dict with 'active', 'inactive' and 'finish_time'."""
    try:
        with p.open("rb") as fh:
            data = safe_pickle.load(fh)
    except Exception as e:  # any unpickling failure means "not a usable trace pickle"
        raise _fail(
            p, f"not a readable pickle ({type(e).__name__}: {e})".replace("\n", " "), _FEDSCALE_HOW
        ) from None
    if not isinstance(data, Mapping):
        raise _fail(p, f"the pickle holds a {type(data).__name__}, not a dict of clients", _FEDSCALE_HOW)
    if not data:
        raise _fail(p, "the trace has no clients", _FEDSCALE_HOW)
    for cid, entry in data.items():
        if not isinstance(entry, Mapping):
            raise _fail(p, f"client {cid!r} is a {type(entry).__name__}, not a dict", _FEDSCALE_HOW)
        missing = [k for k in ("active", "inactive", "finish_time") if k not in entry]
        if missing:
            raise _fail(p, f"client {cid!r} has no {', '.join(repr(m) for m in missing)}", _FEDSCALE_HOW)
    return data


def _fedscale_intervals(p: Path, cid: Any, entry: Mapping) -> tuple[list[Any], list[Any], float]:
    """(starts, ends, trace length) of one client; a last interval still open at the end closes there."""
    a = _times(p, cid, "active", entry["active"])
    b = _times(p, cid, "inactive", entry["inactive"])
    try:
        finish = float(entry["finish_time"])
    except (TypeError, ValueError):
        finish = math.nan
    if not (math.isfinite(finish) and finish > 0):
        raise _fail(
            p,
            f"client {cid!r}: finish_time is {entry['finish_time']!r}",
            "finish_time must be a positive number of seconds (the trace's length)",
        )
    if len(b) == len(a) - 1:
        b.append(finish)  # still online when the trace ends
    if len(b) != len(a):
        raise _fail(
            p,
            f"client {cid!r} has {len(a)} 'active' but {len(b)} 'inactive' times",
            "each online interval needs an active (start) and an inactive (end) time",
        )
    return a, b, finish


def _finite_times(p: Path, data: Mapping, ids: list, act: list[Any], ina: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Start and end times as float arrays; a time that is not a finite number is refused naming its client."""
    try:
        s = np.array(act, dtype=np.float64)
        e = np.array(ina, dtype=np.float64)
        bad = ~(np.isfinite(s) & np.isfinite(e))
    except (TypeError, ValueError):
        bad = None
    if bad is None or bad.any():  # find the culprit client (slow path, errors only)
        for cid in ids:
            _check_numbers(p, cid, "active", _times(p, cid, "active", data[cid]["active"]))
            _check_numbers(p, cid, "inactive", _times(p, cid, "inactive", data[cid]["inactive"]))
        raise _fail(p, "the interval times are not all finite numbers", "times are seconds")
    return s, e


_CSV_HEADER = ["device", "online_from", "online_until"]
_CSV_HOW = "write a header line device,online_from,online_until and one row per online interval (seconds)"


def _read_csv(path: str | Path) -> _Flat:
    p = _open_trace(path)
    devs: list[float] = []
    t0s: list[float] = []
    t1s: list[float] = []
    lines: list[int] = []
    try:
        with p.open(newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            first = next(reader, None)
            if first is None or [c.strip().lower() for c in first] != _CSV_HEADER:
                got = ",".join(first or [])
                raise _fail(p, f"line 1 is {got!r}, not the header {','.join(_CSV_HEADER)!r}", _CSV_HOW)
            for row in reader:
                if not row or not "".join(row).strip() or row[0].lstrip().startswith("#"):
                    continue
                if len(row) != 3:
                    raise _fail(p, f"line {reader.line_num} has {len(row)} fields, not 3", _CSV_HOW)
                try:
                    devs.append(float(row[0]))
                    t0s.append(float(row[1]))
                    t1s.append(float(row[2]))
                except ValueError:
                    raise _fail(
                        p,
                        f"line {reader.line_num}: {','.join(row)!r} holds a value that is not a number",
                        _CSV_HOW,
                    ) from None
                lines.append(reader.line_num)
    except UnicodeDecodeError:
        raise _fail(p, "not a text file", _CSV_HOW) from None
    except csv.Error as e:  # e.g. a field over the csv module's limit (128 KB): no trace has one
        raise _fail(p, f"line {reader.line_num}: not readable CSV ({e})", _CSV_HOW) from None
    dev, s, e = np.array(devs), np.array(t0s), np.array(t1s)
    bad_dev = np.flatnonzero(~((dev >= 0) & (dev == np.floor(dev)) & (dev < _CSV_MAX_ID)))
    if bad_dev.size:
        i = int(bad_dev[0])
        raise _fail(
            p,
            f"line {lines[i]}: device {devs[i]:g} is not an integer in [0, {_CSV_MAX_ID})",
            "number the devices 0, 1, 2, ...",
        )
    bad_t = np.flatnonzero(~(np.isfinite(s) & ~np.isnan(e) & (e >= s)))
    if bad_t.size:
        i = int(bad_t[0])
        raise _fail(
            p,
            f"line {lines[i]}: online_until ({t1s[i]:g}) is before online_from ({t0s[i]:g}) or not a time",
            "give finite seconds with online_from <= online_until",
        )
    ids, cid_of = np.unique(dev.astype(np.int64), return_inverse=True)
    per = np.full(ids.shape[0], INF)
    off, s, e = _compact(cid_of.reshape(-1).astype(np.int64), s, e, per)
    return _Flat(ids.tolist(), off, s, e, per)


def _as_dict(flat: _Flat) -> dict[Any, ClientTrace]:
    off = flat.off.tolist()
    return {
        cid: ClientTrace(
            flat.starts[off[c] : off[c + 1]], flat.ends[off[c] : off[c + 1]], float(flat.periods[c])
        )
        for c, cid in enumerate(flat.ids)
    }


def load_fedscale_trace(path: str | Path) -> dict[Any, ClientTrace]:
    """Read a FedScale ``client_behave_trace`` pickle: client id -> online intervals (period finish_time)."""
    return _as_dict(_read_fedscale(path))


def load_csv_trace(path: str | Path) -> dict[int, ClientTrace]:
    """Read a CSV trace (header ``device,online_from,online_until``): device id -> online intervals."""
    return _as_dict(_read_csv(path))


_CSV_MAX_ID = 1 << 24


def load_table(cfg: TraceAvailability, base_dir: Path | None) -> TraceTable:
    path = Path(cfg.path).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = Path(base_dir) / path
    if cfg.format == "fedscale":
        flat = _read_fedscale(path)
        return TraceTable(flat, len(flat.ids), None)
    flat = _read_csv(path)
    if not flat.ids:
        raise _fail(path, "the trace has no rows", "add one row per online interval under the header")
    top = int(flat.ids[-1])
    slot_of_id = np.full(top + 1, len(flat.ids), dtype=np.int64)  # the empty last slot: never online
    slot_of_id[np.array(flat.ids, dtype=np.int64)] = np.arange(len(flat.ids))
    return TraceTable(flat, top + 1, slot_of_id)
