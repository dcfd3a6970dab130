"""Device availability at run time: vectorised over the fleet and advanced lazily.

``build_availability`` turns one ``availability:`` config per device group into one object that
answers "is device d online at time t (round r)?" and "when does it go offline?". Per group it
keeps a few numpy arrays (one entry per device), never a Python object per device, and nothing
ticks: a Markov device's chain is advanced only when the device is asked about.

Random draws. Every draw is a pure function of (seed, "avail", device, counter), where the counter
is the round (bernoulli), the flip number (markov: 0 draws the initial state, k the k-th
duration) or a fixed slot (diurnal start hour: 1 and 2). The draw is a counter-based SplitMix64,
``mix(mix(key + device * G) + counter * G)`` with ``key = int_seed(seed, "avail")``: it stands in
for ``seeding.stream(seed, "avail", device, counter)``, which costs ~20 us to build per device and
draw (20 s for a 1M-device mask), where this costs ~1 us in Python and a few ns per element in
numpy. The same integer arithmetic runs in Python (scalar queries) and numpy (vector queries), and
exponential durations use a log made of basic float operations only, so both paths give
bit-identical times: an answer never depends on which devices were asked about together, in
which order, or through which path.

Cost. Scalar queries are O(1) except for a Markov chain that must catch up: ~1-2 us per flip
since it was last asked about. Vector queries advance all the asked chains together in numpy
(~0.1 us per flip), after which scalar queries at the same or later times are cache hits; so ask
for many devices at once (``online_mask``, ``offline_at_many``) when you can.

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

import bisect
import csv
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np
from pydantic import BaseModel

from iotfl_sim import safe_pickle
from iotfl_sim.fleet.fleet import small_pages
from iotfl_sim.scenario.availability import (
    AlwaysAvailability,
    AvailabilityConfig,
    BernoulliAvailability,
    DiurnalAvailability,
    MarkovAvailability,
    TraceAvailability,
    parse_availability,
)
from iotfl_sim.scenario.loader import ScenarioError
from iotfl_sim.seeding import int_seed, stream

INF = math.inf


class Availability(Protocol):
    """What the engine asks of availability (one object for the whole fleet)."""

    def online(self, d: int, t: float, rnd: int) -> bool:
        """Is device d online at time t (round rnd)?"""
        ...

    def offline_at(self, d: int, t: float, rnd: int) -> float:
        """First instant >= t at which d goes offline (inf if it stays online; t if offline at t)."""
        ...

    def online_mask(self, t: float, rnd: int, devices: np.ndarray) -> np.ndarray:
        """``online`` vectorised over an index array."""
        ...


class TraceError(ScenarioError):
    """A trace file that cannot be used; the message names the file, the problem and the fix."""


# ---------------------------------------------------------------- counter-based draws

_M64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15
_C1 = 0xBF58476D1CE4E5B9
_C2 = 0x94D049BB133111EB
_TWO53 = 1 << 53


def _mix(z: int) -> int:
    """SplitMix64's finaliser on a Python int (mod 2**64)."""
    z &= _M64
    z = ((z ^ (z >> 30)) * _C1) & _M64
    z = ((z ^ (z >> 27)) * _C2) & _M64
    return z ^ (z >> 31)


def _mix_np(z: np.ndarray, tmp: np.ndarray | None = None) -> np.ndarray:
    """SplitMix64's finaliser, in place on a uint64 array (wrapping arithmetic); ``tmp``: scratch space."""
    tmp = np.right_shift(z, 30, out=tmp)
    z ^= tmp
    z *= _C1
    np.right_shift(z, 27, out=tmp)
    z ^= tmp
    z *= _C2
    np.right_shift(z, 31, out=tmp)
    z ^= tmp
    return z


def _device_keys(key: int, devices: np.ndarray) -> np.ndarray:
    z = devices.astype(np.uint64) * np.uint64(_GAMMA)
    z += np.uint64(key & _M64)
    return _mix_np(z)


class _LazyKeys:
    """The device keys ``_device_keys(key, members)`` of a group, computed when indexed (int, slice or
    index array) instead of stored: a Markov group of millions asks about a few devices a round."""

    def __init__(self, key: int, lo: int, n: int, members: np.ndarray | None = None) -> None:
        self.key, self.lo, self.n, self.members = key, lo, n, members
        self.shape = (n,)

    def _ids(self, li: Any) -> np.ndarray:
        if isinstance(li, slice):
            li = np.arange(*li.indices(self.n), dtype=np.int64)
        li = np.asarray(li, dtype=np.int64)
        return self.members[li] if self.members is not None else li + self.lo

    def __getitem__(self, li: Any) -> Any:
        if isinstance(li, int | np.integer):
            d = int(self.members[li]) if self.members is not None else self.lo + int(li)
            return _mix(self.key + d * _GAMMA)  # == _device_keys(key, [d])[0]
        return _device_keys(self.key, self._ids(li))


def _draw(kd: int, counter: int) -> int:
    """53 random bits for (device key, counter)."""
    return _mix(kd + counter * _GAMMA) >> 11


def _draw_np(kd: np.ndarray, counter: np.ndarray | int) -> np.ndarray:
    if isinstance(counter, np.ndarray):
        z = counter.astype(np.uint64) * np.uint64(_GAMMA)
        z += kd
    else:
        z = kd + np.uint64((counter * _GAMMA) & _M64)
    _mix_np(z)
    z >>= np.uint64(11)
    return z


# -ln(1 - m / 2**53) from basic float operations only (frexp, a table, a short series), so that
# Python floats and numpy arrays agree to the bit; np.log1p may use SIMD code that differs from
# math.log1p in the last place, which would make a device's flip times depend on the code path.
_TAB_N = 1024
_CENTRES = [0.5 + (i + 0.5) / (2 * _TAB_N) for i in range(_TAB_N)]
_LOGS = [math.log(c) for c in _CENTRES]
_CENTRES_NP = np.array(_CENTRES)
_LOGS_NP = np.array(_LOGS)
_LN2 = math.log(2.0)
_THIRD = 1.0 / 3.0


def _neglog1m(m: int) -> float:
    f, b = math.frexp(float(_TWO53 - m))
    i = int((f - 0.5) * (2.0 * _TAB_N))
    c = _CENTRES[i]
    r = (f - c) / c
    p = r * (1.0 + r * (-0.5 + r * (_THIRD + r * (-0.25 + r * 0.2))))
    return (53 - b) * _LN2 - (_LOGS[i] + p)


def _neglog1m_np(m: np.ndarray) -> np.ndarray:
    f, b = np.frexp((np.uint64(_TWO53) - m).astype(np.float64))
    i = ((f - 0.5) * (2.0 * _TAB_N)).astype(np.intp)
    c = _CENTRES_NP[i]
    r = (f - c) / c
    p = r * (1.0 + r * (-0.5 + r * (_THIRD + r * (-0.25 + r * 0.2))))
    return (53 - b).astype(np.float64) * _LN2 - (_LOGS_NP[i] + p)


def _threshold(p: float) -> int:
    """Integer threshold so that ``m < thr`` <=> ``m / 2**53 < p`` for 53-bit m."""
    return math.ceil(min(max(p, 0.0), 1.0) * _TWO53)


# ---------------------------------------------------------------- per-group implementations


class _Part:
    """Availability of one group; ``li`` are indices within the group."""

    def online(self, li: int, t: float, rnd: int) -> bool:
        raise NotImplementedError

    def offline_at(self, li: int, t: float, rnd: int) -> float:
        raise NotImplementedError

    def online_mask(self, t: float, rnd: int, li: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def offline_at_many(self, t: float, rnd: int, li: np.ndarray) -> np.ndarray:
        raise NotImplementedError


class _Always(_Part):
    def online(self, li: int, t: float, rnd: int) -> bool:
        return True

    def offline_at(self, li: int, t: float, rnd: int) -> float:
        return INF

    def online_mask(self, t: float, rnd: int, li: np.ndarray) -> np.ndarray:
        return np.ones(li.shape[0], dtype=bool)

    def offline_at_many(self, t: float, rnd: int, li: np.ndarray) -> np.ndarray:
        return np.full(li.shape[0], INF)


class _Bernoulli(_Part):
    def __init__(self, kd: np.ndarray, p: float) -> None:
        self.kd = kd
        self.p = p
        self.thr = _threshold(p)
        self._tmp = np.empty(0, dtype=np.uint64)

    def online(self, li: int, t: float, rnd: int) -> bool:
        return _draw(int(self.kd[li]), rnd) < self.thr

    def offline_at(self, li: int, t: float, rnd: int) -> float:
        return INF if self.online(li, t, rnd) else t

    def online_mask(self, t: float, rnd: int, li: np.ndarray) -> np.ndarray:
        if self.p >= 1.0:
            return np.ones(li.shape[0], dtype=bool)
        if self.p <= 0.0:
            return np.zeros(li.shape[0], dtype=bool)
        # _draw_np(kd, rnd) < thr, without temporaries: page-faulting fresh 8 MB arrays is most of the cost.
        z = np.take(self.kd, li)
        z += np.uint64((rnd * _GAMMA) & _M64)
        if self._tmp.shape[0] < z.shape[0]:
            self._tmp = np.empty(z.shape[0], dtype=np.uint64)
        _mix_np(z, self._tmp[: z.shape[0]])
        return z < np.uint64(self.thr << 11)  # (z >> 11) < thr, and thr < 2**53 here

    def offline_at_many(self, t: float, rnd: int, li: np.ndarray) -> np.ndarray:
        return np.where(self.online_mask(t, rnd, li), INF, t)


class _Markov(_Part):
    """Lazy two-state chain. Per device: flips applied ``k``, time of flip k ``tp``, of flip k+1 ``tn``.

    Segment j (between flips j-1 and j, flip 0 at time 0) is online iff ``s0 xor (j-1 odd)``; its
    length is ``mean * Exp(1)`` drawn with counter j. Counter 0 draws the initial state.
    """

    # Scalar queries lagging more than this many mean half-cycles go through the numpy path.
    _SCALAR_FLIPS = 64
    _MAX_BLOCK_CELLS = 4_000_000

    def __init__(self, kd: np.ndarray | _LazyKeys, cfg: MarkovAvailability) -> None:
        self.kd = kd
        self.on = float(cfg.mean_on_s)
        self.off = float(cfg.mean_off_s)
        self.half = 0.5 * (self.on + self.off)
        n = kd.shape[0]
        self.start_online = cfg.start_online
        self.s0_thr = _threshold(self.on / (self.on + self.off))
        # A chain is set up (initial state, first flip) when first asked about: ``ready``. Until then
        # its entries are the zeros numpy allocates lazily, so an idle device costs no work and no page.
        self.ready = np.zeros(n, dtype=bool)
        self.s0 = np.zeros(n, dtype=bool)
        self.k = np.zeros(n, dtype=np.int64)
        self.tp = np.zeros(n)
        self.tn = np.zeros(n)

    def _first_flip(self, kd: np.ndarray, s0: np.ndarray) -> np.ndarray:
        return np.where(s0, self.on, self.off) * _neglog1m_np(_draw_np(kd, 1))

    def _set_up(self, li: np.ndarray) -> None:
        """Draw the initial state and first flip of the chains ``li`` not set up yet (vector path)."""
        new = li[~self.ready[li]]
        if not new.size:
            return
        kd = self.kd[new]
        if self.start_online is None:
            s0 = _draw_np(kd, 0) < np.uint64(self.s0_thr)
        else:
            s0 = np.full(new.size, bool(self.start_online))
        self.s0[new] = s0
        self.tn[new] = self._first_flip(kd, s0)
        self.ready[new] = True

    def _set_up_one(self, li: int) -> None:
        """``_set_up`` for one chain, with the scalar draws (bit-identical to the vector ones)."""
        kd = int(self.kd[li])
        s0 = _draw(kd, 0) < self.s0_thr if self.start_online is None else bool(self.start_online)
        self.s0[li] = s0
        self.tn[li] = (self.on if s0 else self.off) * _neglog1m(_draw(kd, 1))
        self.ready[li] = True

    # -- scalar path

    def _state(self, li: int, t: float) -> tuple[bool, float]:
        """(online at t, time of the next flip after t)."""
        if not self.ready[li]:
            self._set_up_one(li)
        s0 = bool(self.s0[li])
        tp = float(self.tp[li])
        if t >= tp:
            tn = float(self.tn[li])
            k = int(self.k[li])
            if t < tn:
                return s0 != bool(k & 1), tn
            k, tp, tn = self._run(li, s0, k, tn, t)
            self.k[li], self.tp[li], self.tn[li] = k, tp, tn
            return s0 != bool(k & 1), tn
        # Earlier than the cached state: replay from time 0 without touching the cache.
        kd = int(self.kd[li])
        tn0 = (self.on if s0 else self.off) * _neglog1m(_draw(kd, 1))
        if t < tn0:
            return s0, tn0
        k, tp, tn = self._run(li, s0, 0, tn0, t)
        return s0 != bool(k & 1), tn

    def _run(self, li: int, s0: bool, k: int, tn: float, t: float) -> tuple[int, float, float]:
        """Apply flips k+1, k+2, ... (flip k+1 at ``tn``) up to t; returns the new (k, tp, tn)."""
        if t - tn > self._SCALAR_FLIPS * self.half:
            ks = np.array([k], dtype=np.int64)
            tps = np.zeros(1)
            tns = np.array([tn])
            self._advance(self.kd[li : li + 1], self.s0[li : li + 1], ks, tps, tns, t)
            return int(ks[0]), float(tps[0]), float(tns[0])
        # _neglog1m(_draw(kd, k + 1)) inlined: this loop is the cost of a scalar query.
        on, off, frexp, centres, logs = self.on, self.off, math.frexp, _CENTRES, _LOGS
        z = int(self.kd[li]) + (k + 2) * _GAMMA
        tp = tn
        while tn <= t:
            k += 1
            tp = tn
            w = z & _M64
            z += _GAMMA
            w = ((w ^ (w >> 30)) * _C1) & _M64
            w = ((w ^ (w >> 27)) * _C2) & _M64
            f, b = frexp(float(_TWO53 - ((w ^ (w >> 31)) >> 11)))
            i = int((f - 0.5) * (2.0 * _TAB_N))
            c = centres[i]
            r = (f - c) / c
            e = (53 - b) * _LN2 - (logs[i] + r * (1.0 + r * (-0.5 + r * (_THIRD + r * (-0.25 + r * 0.2)))))
            tn = tp + (on if s0 != bool(k & 1) else off) * e
        return k, tp, tn

    def online(self, li: int, t: float, rnd: int) -> bool:
        return self._state(li, t)[0]

    def offline_at(self, li: int, t: float, rnd: int) -> float:
        on, tn = self._state(li, t)
        return tn if on else t

    # -- vector path

    def _advance(
        self, kd: np.ndarray, s0: np.ndarray, k: np.ndarray, tp: np.ndarray, tn: np.ndarray, t: float
    ) -> None:
        """Advance the given chains (in place on k, tp, tn) until every ``tn > t``, a block of flips at a time."""
        todo = np.flatnonzero(tn <= t)
        while todo.size:
            m = todo.size
            tn_t = tn[todo]
            lag = float(t - tn_t.min())
            block = int(
                min(max(lag / self.half * 1.25 + 4.0, 4.0), 4096.0, max(4, self._MAX_BLOCK_CELLS // m))
            )
            k_t = k[todo]
            j = k_t[:, None] + np.arange(2, block + 2)  # counters of the segments after flip k+1
            e = _neglog1m_np(_draw_np(kd[todo][:, None], j))
            seg_on = s0[todo][:, None] ^ ((j - 1) & 1).astype(bool)
            acc = np.empty((m, block + 1))
            acc[:, 0] = tn_t
            acc[:, 1:] = np.where(seg_on, self.on, self.off) * e
            acc = np.add.accumulate(acc, axis=1)  # acc[:, c] = time of flip k+1+c
            c = (acc <= t).sum(axis=1)
            applied = np.minimum(c, block)
            rows = np.arange(m)
            k[todo] = k_t + applied
            tp[todo] = acc[rows, applied - 1]
            tn[todo] = acc[rows, applied]
            todo = todo[c > block]

    def _states(self, t: float, li: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self._set_up(li)
        back = t < self.tp[li]
        stale = self.tn[li] <= t
        stale &= ~back
        if stale.any():
            idx = li[stale]
            k, tp, tn = self.k[idx], self.tp[idx], self.tn[idx]
            self._advance(self.kd[idx], self.s0[idx], k, tp, tn, t)
            self.k[idx], self.tp[idx], self.tn[idx] = k, tp, tn
        k, tn = self.k[li], self.tn[li]
        if back.any():
            idx = li[back]
            s0 = self.s0[idx]
            kb = np.zeros(idx.size, dtype=np.int64)
            tpb = np.zeros(idx.size)
            tnb = self._first_flip(self.kd[idx], s0)
            self._advance(self.kd[idx], s0, kb, tpb, tnb, t)
            k[back], tn[back] = kb, tnb
        return self.s0[li] ^ (k & 1).astype(bool), tn

    def online_mask(self, t: float, rnd: int, li: np.ndarray) -> np.ndarray:
        return self._states(t, li)[0]

    def offline_at_many(self, t: float, rnd: int, li: np.ndarray) -> np.ndarray:
        on, tn = self._states(t, li)
        return np.where(on, tn, t)


class _Diurnal(_Part):
    """Window j of a device is ``[j*day + s, j*day + s + on)``; the same expressions in both paths."""

    def __init__(self, kd: np.ndarray, cfg: DiurnalAvailability) -> None:
        self.day = float(cfg.day_s)
        self.on = float(cfg.online_hours) / 24.0 * self.day
        self.always = cfg.online_hours >= 24.0
        self.never = cfg.online_hours <= 0.0
        # Start hour ~ N(mean, std) by Box-Muller on draws 1 and 2, wrapped to [0, 24).
        radius = np.sqrt(2.0 * _neglog1m_np(_draw_np(kd, 1)))
        angle = (2.0 * math.pi / _TWO53) * _draw_np(kd, 2).astype(np.float64)
        hour = np.mod(cfg.start_hour_mean + cfg.start_hour_std * radius * np.cos(angle), 24.0)
        hour[hour >= 24.0] = 0.0
        self.start_hour = hour
        self.s = hour * (self.day / 24.0)

    def _end(self, li: int, t: float) -> float:
        s = float(self.s[li])
        k = math.floor((t - s) / self.day)
        start = k * self.day + s
        end = start + self.on
        return end if start <= t < end else t

    def online(self, li: int, t: float, rnd: int) -> bool:
        if self.always or self.never:
            return self.always
        return self._end(li, t) > t

    def offline_at(self, li: int, t: float, rnd: int) -> float:
        if self.always or self.never:
            return INF if self.always else t
        return self._end(li, t)

    def _windows(self, t: float, li: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s = self.s[li]
        start = np.subtract(t, s)
        start /= self.day
        np.floor(start, out=start)
        start *= self.day
        start += s
        on = start <= t
        end = np.add(start, self.on, out=start)
        on &= end > t
        return on, end

    def online_mask(self, t: float, rnd: int, li: np.ndarray) -> np.ndarray:
        if self.always or self.never:
            return np.full(li.shape[0], self.always)
        return self._windows(t, li)[0]

    def offline_at_many(self, t: float, rnd: int, li: np.ndarray) -> np.ndarray:
        if self.always or self.never:
            return np.full(li.shape[0], INF if self.always else t)
        on, end = self._windows(t, li)
        return np.where(on, end, t)


class ClientTrace(NamedTuple):
    """Online intervals ``[starts[i], ends[i])`` of one trace client, sorted and disjoint."""

    starts: np.ndarray
    ends: np.ndarray
    period: float  # the pattern repeats with this period; inf: not repeated


class _TraceTable:
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


class _Trace(_Part):
    def __init__(self, table: _TraceTable, slots: np.ndarray) -> None:
        self.tb = table
        self.slot = slots

    def offline_at(self, li: int, t: float, rnd: int) -> float:
        tb = self.tb
        a, b, period, wrap, full = tb.info(int(self.slot[li]))
        if a == b:
            return t
        if full:
            return INF
        k, base, x = 0, 0.0, t
        if period:
            k = math.floor(t / period)
            base = k * period
            x = t - base
            if x < 0.0 or x >= period:  # t / period rounded across a period boundary
                k += -1 if x < 0.0 else 1
                base = k * period
                x = t - base
        i = bisect.bisect_right(tb.st, x, a, b) - 1
        if i < a:
            return t
        end = (k + 1) * period + wrap if i == b - 1 and not math.isnan(wrap) else base + float(tb.en[i])
        return end if end > t else t

    def online(self, li: int, t: float, rnd: int) -> bool:
        return self.offline_at(li, t, rnd) > t

    def offline_at_many(self, t: float, rnd: int, li: np.ndarray) -> np.ndarray:
        tb = self.tb
        if tb.st.shape[0] == 0:
            return np.full(li.shape[0], t)
        slot = self.slot[li]
        n = slot.shape[0]
        lo, hi = tb.off[slot], tb.off[slot + 1]
        if tb.periodic:
            period = tb.period[slot]
            k = np.floor(t / period)
            base = k * period
            x = t - base
            fix = (x < 0.0) | (x >= period)
            if fix.any():
                k[fix] += np.where(x[fix] < 0.0, -1.0, 1.0)
                base[fix] = k[fix] * period[fix]
                x[fix] = t - base[fix]
        else:
            k = base = np.zeros(n)
            x = np.full(n, t)
        # Vectorised binary search: first index in [lo, hi) whose start is > x.
        a, b = lo.copy(), hi.copy()
        last = tb.st.shape[0] - 1
        while True:
            active = a < b
            if not active.any():
                break
            mid = (a + b) >> 1
            right = active & (tb.st[np.minimum(mid, last)] <= x)
            a = np.where(right, mid + 1, a)
            b = np.where(active & ~right, mid, b)
        i = a - 1
        found = i >= lo
        end = base + tb.en[np.clip(i, 0, last)]
        if tb.periodic:
            wrap = tb.wrap[slot]
            wrapped = found & (i == hi - 1) & ~np.isnan(wrap)
            if wrapped.any():
                end[wrapped] = (k[wrapped] + 1.0) * period[wrapped] + wrap[wrapped]
            end[tb.full[slot]] = INF
            found |= tb.full[slot]
        return np.where(found & (end > t), end, t)

    def online_mask(self, t: float, rnd: int, li: np.ndarray) -> np.ndarray:
        return self.offline_at_many(t, rnd, li) > t


# ---------------------------------------------------------------- the fleet-wide object


class FleetAvailability:
    """Availability of every device (implements ``Availability``), dispatching to one vectorised
    implementation per group. Device ids are fleet-wide indices; ``online_mask`` and
    ``offline_at_many`` take any integer index array (fastest sorted, e.g. ``np.arange(n)``)."""

    def __init__(self, parts: list[_Part], group_of: np.ndarray, bounds: np.ndarray | None) -> None:
        self.parts = parts
        self.group_of = group_of
        self.n = int(group_of.shape[0])
        self._bounds = bounds  # group g holds devices [bounds[g], bounds[g+1]) when groups are contiguous
        self._lo = None if bounds is None else [int(b) for b in bounds[:-1]]
        self._single = parts[0] if len(parts) == 1 else None  # one group: local index == device
        self._local: np.ndarray | None = None
        if bounds is None:
            local = np.empty(self.n, dtype=np.int64)
            for g in range(len(parts)):
                members = np.flatnonzero(group_of == g)
                local[members] = np.arange(members.size)
            self._local = local

    def _where(self, d: int) -> tuple[_Part, int]:
        if self._single is not None:
            return self._single, d
        g = int(self.group_of[d])
        li = d - self._lo[g] if self._lo is not None else int(self._local[d])  # type: ignore[index]
        return self.parts[g], li

    def online(self, d: int, t: float, rnd: int) -> bool:
        """Is device d online at time t (in round rnd)?"""
        part, li = self._where(int(d))
        return bool(part.online(li, float(t), int(rnd)))

    def offline_at(self, d: int, t: float, rnd: int) -> float:
        """First instant >= t at which d is offline: t if it is offline at t, inf if it stays online."""
        part, li = self._where(int(d))
        return float(part.offline_at(li, float(t), int(rnd)))

    def online_mask(self, t: float, rnd: int, devices: np.ndarray) -> np.ndarray:
        """``online`` for each device of an index array, as a bool array."""
        return self._dispatch("online_mask", float(t), int(rnd), devices, bool)

    def offline_at_many(self, t: float, rnd: int, devices: np.ndarray) -> np.ndarray:
        """``offline_at`` for each device of an index array, as a float array."""
        return self._dispatch("offline_at_many", float(t), int(rnd), devices, np.float64)

    def _dispatch(self, method: str, t: float, rnd: int, devices: np.ndarray, dtype: Any) -> np.ndarray:
        devices = np.asarray(devices)
        if devices.dtype.kind not in "iu":
            if devices.size or devices.dtype.kind == "b":
                raise TypeError(f"devices must be an integer index array, not {devices.dtype}")
            devices = devices.astype(np.int64)
        devices = devices.reshape(-1)
        if self._single is not None:
            return getattr(self._single, method)(t, rnd, devices)
        out = np.empty(devices.shape[0], dtype=dtype)
        if self._lo is not None and devices.size and bool(np.all(devices[:-1] <= devices[1:])):
            cuts = np.searchsorted(devices, self._bounds).tolist()  # type: ignore[arg-type]
            for g, part in enumerate(self.parts):
                a, b = cuts[g], cuts[g + 1]
                if b > a:
                    out[a:b] = getattr(part, method)(t, rnd, devices[a:b] - self._lo[g])
            return out
        groups = self.group_of[devices]
        for g, part in enumerate(self.parts):
            sel = np.flatnonzero(groups == g)
            if sel.size:
                d = devices[sel]
                li = d - self._lo[g] if self._lo is not None else self._local[d]  # type: ignore[index]
                out[sel] = getattr(part, method)(t, rnd, li)
        return out


# ---------------------------------------------------------------- trace files


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
        if not isinstance(entry, Mapping):
            raise _fail(p, f"client {cid!r} is a {type(entry).__name__}, not a dict", _FEDSCALE_HOW)
        missing = [k for k in ("active", "inactive", "finish_time") if k not in entry]
        if missing:
            raise _fail(p, f"client {cid!r} has no {', '.join(repr(m) for m in missing)}", _FEDSCALE_HOW)
        budget -= _length(entry["active"]) + _length(entry["inactive"])
        if budget < 0:
            raise _fail(
                p,
                f"its clients' interval lists hold more times than its {p.stat().st_size:,} bytes can store, i.e. "
                "one list is shared by many clients (a pickle bomb: it would expand to far more memory than the file)",
                "write each client's own 'active' and 'inactive' lists",
            )
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
        act.extend(a)
        ina.extend(b)
        counts.append(len(a))
        periods.append(finish)
    cid_of = np.repeat(np.arange(len(ids)), counts)
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


def _load_table(cfg: TraceAvailability, base_dir: Path | None) -> _TraceTable:
    path = Path(cfg.path).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = Path(base_dir) / path
    if cfg.format == "fedscale":
        flat = _read_fedscale(path)
        return _TraceTable(flat, len(flat.ids), None)
    flat = _read_csv(path)
    if not flat.ids:
        raise _fail(path, "the trace has no rows", "add one row per online interval under the header")
    top = int(flat.ids[-1])
    slot_of_id = np.full(top + 1, len(flat.ids), dtype=np.int64)  # the empty last slot: never online
    slot_of_id[np.array(flat.ids, dtype=np.int64)] = np.arange(len(flat.ids))
    return _TraceTable(flat, top + 1, slot_of_id)


# ---------------------------------------------------------------- building


def build_availability(
    configs: Sequence[AvailabilityConfig | Mapping[str, Any]],
    group_of: np.ndarray,
    seed: int,
    base_dir: Path | None = None,
) -> FleetAvailability:
    """One availability object for the fleet: ``configs[g]`` applies to devices with ``group_of == g``.

    Relative trace paths are resolved against ``base_dir`` (the scenario file's folder), else the
    working directory. A trace file used by several groups is read once.
    """
    with small_pages():  # per-device arrays, touched a few devices at a time (see fleet.small_pages)
        return _build_availability(configs, group_of, seed, base_dir)


def _build_availability(
    configs: Sequence[AvailabilityConfig | Mapping[str, Any]],
    group_of: np.ndarray,
    seed: int,
    base_dir: Path | None,
) -> FleetAvailability:
    cfgs = [c if isinstance(c, BaseModel) else parse_availability(c) for c in configs]
    group_of = np.asarray(group_of).reshape(-1)
    n = group_of.shape[0]
    if not cfgs:
        raise ValueError("build_availability needs one availability config per group (got none)")
    if n and (int(group_of.min()) < 0 or int(group_of.max()) >= len(cfgs)):
        raise ValueError(
            f"group_of refers to groups 0..{int(group_of.max())} but {len(cfgs)} configs were given"
        )
    contiguous = n == 0 or bool(np.all(group_of[:-1] <= group_of[1:]))
    bounds = np.searchsorted(group_of, np.arange(len(cfgs) + 1)) if contiguous else None
    key = int_seed(seed, "avail")
    tables: dict[tuple[str, Path], _TraceTable] = {}
    parts: list[_Part] = []
    for g, cfg in enumerate(cfgs):
        if isinstance(cfg, AlwaysAvailability):
            parts.append(_Always())
            continue
        if isinstance(cfg, MarkovAvailability):  # keys on demand: nothing of size n is computed here
            if bounds is not None:
                lo, hi = int(bounds[g]), int(bounds[g + 1])
                parts.append(_Markov(_LazyKeys(key, lo, hi - lo), cfg))
            else:
                members = np.flatnonzero(group_of == g).astype(np.int64)
                parts.append(_Markov(_LazyKeys(key, 0, members.size, members), cfg))
            continue
        if bounds is not None:
            members = np.arange(bounds[g], bounds[g + 1], dtype=np.int64)
        else:
            members = np.flatnonzero(group_of == g).astype(np.int64)
        if isinstance(cfg, BernoulliAvailability):
            parts.append(_Bernoulli(_device_keys(key, members), float(cfg.p)))
        elif isinstance(cfg, DiurnalAvailability):
            parts.append(_Diurnal(_device_keys(key, members), cfg))
        elif isinstance(cfg, TraceAvailability):
            where = (cfg.format, (Path(base_dir or ".") / Path(cfg.path).expanduser()).resolve())
            if where not in tables:
                tables[where] = _load_table(cfg, base_dir)
            table = tables[where]
            parts.append(_Trace(table, table.slots_for(members, cfg.mapping, seed)))
        else:  # pragma: no cover - the config union is closed
            raise TypeError(f"unknown availability config {cfg!r}")
    return FleetAvailability(parts, group_of, bounds)
