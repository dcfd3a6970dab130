"""Device availability at run time: vectorised over the fleet and advanced lazily.

``build_availability`` turns one ``availability:`` config per device group into one object that
answers "is device d online at time t (round r)?" and "when does it go offline?". Per group it
keeps a few numpy arrays (one entry per device), never a Python object per device, and nothing
ticks: a Markov device's chain is advanced only when the device is asked about.

Random draws: ``fleet.draws`` (a pure function of (seed, "avail", device, counter)). Trace files:
``fleet.traces`` (formats and semantics).

Cost. Scalar queries are O(1) except for a Markov chain that must catch up: ~1-2 us per flip
since it was last asked about. Vector queries advance all the asked chains together in numpy
(~0.1 us per flip), after which scalar queries at the same or later times are cache hits; so ask
for many devices at once (``online_mask``, ``offline_at_many``) when you can.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from pydantic import BaseModel

from iotfl_sim.fleet.draws import (
    C1,
    C2,
    CENTRES,
    GAMMA,
    LN2,
    LOGS,
    M64,
    TAB_N,
    THIRD,
    TWO53,
    LazyKeys,
    device_keys,
    draw,
    draw_np,
    mix_np,
    neglog1m,
    neglog1m_np,
    threshold,
)
from iotfl_sim.fleet.fleet import small_pages
from iotfl_sim.fleet.traces import TraceTable, load_table
from iotfl_sim.scenario.availability import (
    AlwaysAvailability,
    AvailabilityConfig,
    BernoulliAvailability,
    DiurnalAvailability,
    MarkovAvailability,
    TraceAvailability,
    parse_availability,
)
from iotfl_sim.seeding import int_seed

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
        self.thr = threshold(p)
        self._tmp = np.empty(0, dtype=np.uint64)

    def online(self, li: int, t: float, rnd: int) -> bool:
        return draw(int(self.kd[li]), rnd) < self.thr

    def offline_at(self, li: int, t: float, rnd: int) -> float:
        return INF if self.online(li, t, rnd) else t

    def online_mask(self, t: float, rnd: int, li: np.ndarray) -> np.ndarray:
        if self.p >= 1.0:
            return np.ones(li.shape[0], dtype=bool)
        if self.p <= 0.0:
            return np.zeros(li.shape[0], dtype=bool)
        # draw_np(kd, rnd) < thr, without temporaries: page-faulting fresh 8 MB arrays is most of the cost.
        z = np.take(self.kd, li)
        z += np.uint64((rnd * GAMMA) & M64)
        if self._tmp.shape[0] < z.shape[0]:
            self._tmp = np.empty(z.shape[0], dtype=np.uint64)
        mix_np(z, self._tmp[: z.shape[0]])
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

    def __init__(self, kd: np.ndarray | LazyKeys, cfg: MarkovAvailability) -> None:
        self.kd = kd
        self.on = float(cfg.mean_on_s)
        self.off = float(cfg.mean_off_s)
        self.half = 0.5 * (self.on + self.off)
        n = kd.shape[0]
        self.start_online = cfg.start_online
        self.s0_thr = threshold(self.on / (self.on + self.off))
        # A chain is set up (initial state, first flip) when first asked about: ``ready``. Until then
        # its entries are the zeros numpy allocates lazily, so an idle device costs no work and no page.
        self.ready = np.zeros(n, dtype=bool)
        self.s0 = np.zeros(n, dtype=bool)
        self.k = np.zeros(n, dtype=np.int64)
        self.tp = np.zeros(n)
        self.tn = np.zeros(n)

    def _first_flip(self, kd: np.ndarray, s0: np.ndarray) -> np.ndarray:
        return np.where(s0, self.on, self.off) * neglog1m_np(draw_np(kd, 1))

    def _set_up(self, li: np.ndarray) -> None:
        """Draw the initial state and first flip of the chains ``li`` not set up yet (vector path)."""
        new = li[~self.ready[li]]
        if not new.size:
            return
        kd = self.kd[new]
        if self.start_online is None:
            s0 = draw_np(kd, 0) < np.uint64(self.s0_thr)
        else:
            s0 = np.full(new.size, bool(self.start_online))
        self.s0[new] = s0
        self.tn[new] = self._first_flip(kd, s0)
        self.ready[new] = True

    def _set_up_one(self, li: int) -> None:
        """``_set_up`` for one chain, with the scalar draws (bit-identical to the vector ones)."""
        kd = int(self.kd[li])
        s0 = draw(kd, 0) < self.s0_thr if self.start_online is None else bool(self.start_online)
        self.s0[li] = s0
        self.tn[li] = (self.on if s0 else self.off) * neglog1m(draw(kd, 1))
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
        tn0 = (self.on if s0 else self.off) * neglog1m(draw(kd, 1))
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
        # neglog1m(draw(kd, k + 1)) inlined: this loop is the cost of a scalar query.
        on, off, frexp, centres, logs = self.on, self.off, math.frexp, CENTRES, LOGS
        z = int(self.kd[li]) + (k + 2) * GAMMA
        tp = tn
        while tn <= t:
            k += 1
            tp = tn
            w = z & M64
            z += GAMMA
            w = ((w ^ (w >> 30)) * C1) & M64
            w = ((w ^ (w >> 27)) * C2) & M64
            f, b = frexp(float(TWO53 - ((w ^ (w >> 31)) >> 11)))
            i = int((f - 0.5) * (2.0 * TAB_N))
            c = centres[i]
            r = (f - c) / c
            e = (53 - b) * LN2 - (logs[i] + r * (1.0 + r * (-0.5 + r * (THIRD + r * (-0.25 + r * 0.2)))))
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
            e = neglog1m_np(draw_np(kd[todo][:, None], j))
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
        radius = np.sqrt(2.0 * neglog1m_np(draw_np(kd, 1)))
        angle = (2.0 * math.pi / TWO53) * draw_np(kd, 2).astype(np.float64)
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


class _Trace(_Part):
    def __init__(self, table: TraceTable, slots: np.ndarray) -> None:
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
    tables: dict[tuple[str, Path], TraceTable] = {}
    parts: list[_Part] = []
    for g, cfg in enumerate(cfgs):
        if isinstance(cfg, AlwaysAvailability):
            parts.append(_Always())
            continue
        if isinstance(cfg, MarkovAvailability):  # keys on demand: nothing of size n is computed here
            if bounds is not None:
                lo, hi = int(bounds[g]), int(bounds[g + 1])
                parts.append(_Markov(LazyKeys(key, lo, hi - lo), cfg))
            else:
                members = np.flatnonzero(group_of == g).astype(np.int64)
                parts.append(_Markov(LazyKeys(key, 0, members.size, members), cfg))
            continue
        if bounds is not None:
            members = np.arange(bounds[g], bounds[g + 1], dtype=np.int64)
        else:
            members = np.flatnonzero(group_of == g).astype(np.int64)
        if isinstance(cfg, BernoulliAvailability):
            parts.append(_Bernoulli(device_keys(key, members), float(cfg.p)))
        elif isinstance(cfg, DiurnalAvailability):
            parts.append(_Diurnal(device_keys(key, members), cfg))
        elif isinstance(cfg, TraceAvailability):
            where = (cfg.format, (Path(base_dir or ".") / Path(cfg.path).expanduser()).resolve())
            if where not in tables:
                tables[where] = load_table(cfg, base_dir)
            table = tables[where]
            parts.append(_Trace(table, table.slots_for(members, cfg.mapping, seed)))
        else:  # pragma: no cover - the config union is closed
            raise TypeError(f"unknown availability config {cfg!r}")
    return FleetAvailability(parts, group_of, bounds)
