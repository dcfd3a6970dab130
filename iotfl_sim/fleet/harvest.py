"""Energy coming in and the battery it fills: a periodic, piecewise-constant power source (a daily window of
constant harvest or charging power, or a solar panel on an irradiance trace) and the cell's chemistry.

The battery holds a *stored* energy, its level. With the device drawing ``draw`` W and the source giving ``in``
W, the level moves at

- ``charge_efficiency x (in - draw)`` while the source covers the draw (the device runs on it, the surplus is
  stored, losing the charging losses), capped at the capacity;
- ``-(draw - in) / discharge_efficiency x m`` while it does not (the battery supplies the rest, losing its
  discharge losses), where ``m = max(1, ((draw - in) / rated_w) ** (peukert - 1))`` is Peukert's rate effect,
  applied above the power the capacity is rated at (``rated_w = capacity / rated_hours``) only: below it the
  law would promise more than the rated capacity, which a lithium cell does not give.

With the draw constant between a device's events, the level is piecewise linear: on each segment of the source
it moves at one rate, clamped at the capacity, and a device whose level reaches zero is offline for good.
``walk`` integrates it over any span, whole periods in closed form: a period that never touches the capacity
moves every later period by the same amount, and a period that ends where the one before it ended repeats.

Ageing: ``fade_per_cycle`` of the nominal capacity is lost per equivalent full cycle (stored energy drawn out of
the battery / nominal capacity). ``walk`` returns the stored energy drawn so the fleet can shrink the capacity;
it does so at each of the device's events (a task's phase, a read), and holds it in between.
"""

from __future__ import annotations

import functools
import math
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from iotfl_sim.fleet.periodic import Periodic


@dataclass(frozen=True)
class Cell:
    """A battery's chemistry (the defaults: an ideal cell)."""

    charge_efficiency: float = 1.0
    discharge_efficiency: float = 1.0
    peukert: float = 1.0
    rated_w: float = math.inf  # the power at which the capacity is rated
    fade_per_cycle: float = 0.0

    def stored_rates(self, in_w: np.ndarray, draw_w: float) -> np.ndarray:
        """The level's rate of change (W) on segments of incoming power ``in_w`` with the device drawing ``draw_w``."""
        net = in_w - draw_w
        deficit = np.maximum(-net, 0.0)
        drain = deficit / self.discharge_efficiency
        if self.peukert != 1.0 and math.isfinite(self.rated_w):
            drain = drain * np.maximum(1.0, (deficit / self.rated_w) ** (self.peukert - 1.0))
        return np.where(net >= 0.0, self.charge_efficiency * net, -drain)


Harvest = Periodic  # incoming power, W


class Step(NamedTuple):  # a tuple: built at every step of every walk, where a frozen dataclass costs 3x the time
    """Where ``walk`` left a battery: its level at the end, the instant it emptied (None: it did not), and the
    stored energy drawn out of it on the way (for ageing)."""

    level: float
    dead_at: float | None
    drawn_j: float


def _span(level: float, cap: float, t0: float, lengths: np.ndarray, rates: np.ndarray) -> Step:
    """The level along consecutive segments from ``t0`` (clamped at ``cap``, linear inside a segment)."""
    deltas = rates * lengths
    sums = np.cumsum(deltas)
    # a running sum clamped from above: L_k = S_k + min(level, min_{j <= k} (cap - S_j))
    levels = sums + np.minimum(level, np.minimum.accumulate(cap - sums))
    empty = np.flatnonzero(levels <= 0.0)
    if empty.size:
        k = int(empty[0])
        start = level if k == 0 else float(levels[k - 1])
        t_start = t0 + float(np.sum(lengths[:k]))
        drawn = -float(np.sum(np.minimum(deltas[:k], 0.0))) + max(start, 0.0)
        return Step(0.0, t_start + (start / -float(rates[k]) if start > 0.0 else 0.0), drawn)
    return Step(float(levels[-1]) if levels.size else level, None, -float(np.sum(np.minimum(deltas, 0.0))))


def _one(level: float, cap: float, t0: float, dt: float, rate: float) -> Step:
    """``_span`` of one segment, in scalars."""
    if rate < 0.0:
        end = level + rate * dt
        if end <= 0.0:
            return Step(0.0, t0 + (level / -rate if level > 0.0 else 0.0), max(level, 0.0))
        return Step(end, None, -rate * dt)
    return Step(min(cap, level + rate * dt), None, 0.0)


SMALL_SPAN = 8  # spans of up to this many segments are walked in scalars


class _Rates:
    """A source's segments under one draw, over two periods (a span may cross into the next): the level's rate on
    each, which is all a span inside a period or two needs (cached on the source per cell and draw; a draw that
    varies from task to task, as a radio's with its rate, makes one each, so this is kept small). The figures
    of whole periods are built the first time a walk needs them (``period``)."""

    def __init__(self, h: Harvest, cell: Cell, draw_w: float) -> None:
        self.h, self.cell = h, cell  # the cell held: the cache's key is its id, which stays its own while it lives
        self.rates = cell.stored_rates(h.values, draw_w)
        self.rates2_list = self.rates.tolist() * 2
        self.starts2_list = _starts2(h)

    @functools.cached_property
    def period(self) -> _Period:
        return _Period(self.h, self.rates)

    @staticmethod
    def of(h: Harvest, cell: Cell, draw_w: float) -> _Rates:
        key = (id(cell), draw_w)  # not the cell: hashing a dataclass's fields at every call cost more than the rest
        r = h.cache.get(key)
        if r is None:
            if len(h.cache) >= 1024:  # draws are few (idle, training, radio per profile); bound it anyway
                h.cache.clear()
            r = h.cache[key] = _Rates(h, cell, draw_w)
        return r


def _starts2(h: Harvest) -> list[float]:
    """The segments' starts over two periods, from the start of the first (cached on the source)."""
    got = h.cache.get("starts2")
    if got is None:
        got = h.cache["starts2"] = np.concatenate([h.offsets_s, h.offsets_s + h.period_s]).tolist()
    return got


class _Period:
    """One whole period of a source under one draw: what ``walk`` needs to cross periods in closed form."""

    def __init__(self, h: Harvest, rates: np.ndarray) -> None:
        self.rates = rates
        deltas = self.rates * h.lengths_s
        sums = np.cumsum(deltas)
        self.per_period, self.lowest, self.highest = float(sums[-1]), float(np.min(sums)), float(np.max(sums))
        self.drawn = -float(np.sum(np.minimum(deltas, 0.0)))
        self.starts2 = np.concatenate([h.offsets_s, h.offsets_s + h.period_s])
        self.ends2 = np.append(self.starts2[1:], 2.0 * h.period_s)
        self.rates2 = np.concatenate([self.rates, self.rates])
        # a period that touches the capacity ends at E = cap + per_period - max_k S_k whatever it started from,
        # and one started at E never falls below M = cap + m_off (S: the period's running sum of level changes)
        self.e_off = self.per_period - float(np.max(sums))
        prefix_max = np.maximum.accumulate(sums)
        self.m_off = min(self.e_off, float(np.min(sums + np.minimum(self.e_off, -prefix_max))))
        # that steady path's level (minus cap) at each segment's start, for ``steady_at``
        ends = sums + np.minimum(self.e_off, -prefix_max)
        self.steady_starts = [self.e_off, *ends[:-1].tolist()]
        self.offsets_list = h.offsets_s.tolist()
        self.rates_list = self.rates.tolist()

    def steady(self, cap: float) -> tuple[float, float]:
        """(E, M) for a battery of capacity ``cap`` when a period brings no net loss (``per_period >= 0``): a period
        started at E or above ends at E and never falls below M."""
        return cap + self.e_off, cap + self.m_off

    def steady_at(self, cap: float, phase: float) -> float:
        """The steady path's level (the period started at E) at ``phase`` seconds into a period."""
        k = bisect_right(self.offsets_list, phase) - 1
        return min(cap, cap + self.steady_starts[k] + self.rates_list[k] * (phase - self.offsets_list[k]))


def _through(level: float, cap: float, t0: float, p0: float, t1: float, r: _Rates) -> Step:
    """The level from ``t0`` to ``t1``, ``t1`` at most the end of the period after ``t0``'s, which starts at ``p0``."""
    a, b = t0 - p0, t1 - p0
    starts = r.starts2_list
    k0 = bisect_right(starts, a) - 1
    k1 = bisect_left(starts, b)  # segments k0 .. k1 - 1 cover [a, b]
    if k1 - k0 == 1:
        return _one(level, cap, t0, t1 - t0, r.rates2_list[k0])
    if k1 - k0 <= SMALL_SPAN:  # a task crossing a segment boundary or two: scalars beat numpy's overhead
        drawn, t = 0.0, t0
        for k in range(k0, k1):
            end = min(b, starts[k + 1] if k + 1 < len(starts) else b)
            s = _one(level, cap, t, end - (t - p0), r.rates2_list[k])
            drawn += s.drawn_j
            if s.dead_at is not None:
                return Step(0.0, s.dead_at, drawn)
            level, t = s.level, p0 + end
        return Step(level, None, drawn)
    p = r.period
    lengths = np.minimum(p.ends2[k0:k1], b) - np.maximum(p.starts2[k0:k1], a)
    return _span(level, cap, t0, lengths, p.rates2[k0:k1])


def walk(
    level: float, cap: float, t0: float, t1: float, draw_w: float, h: Harvest | None, cell: Cell
) -> Step:
    """The battery from ``level`` at ``t0`` to ``t1`` (``math.inf``: until it empties, if ever) while the device
    draws ``draw_w``; ``h`` None: nothing comes in."""
    if h is None:
        rate = float(cell.stored_rates(np.zeros(1), draw_w)[0])
        if t1 == math.inf:
            return Step(level, t0 + level / -rate if rate < 0 else None, level if rate < 0 else 0.0)
        return _one(level, cap, t0, t1 - t0, rate)
    r = h.cache.get((id(cell), draw_w)) or _Rates.of(h, cell, draw_w)
    p0 = t0 - ((t0 - h.origin_s) % h.period_s)  # h.period_start(t0), inline: this runs at every activity
    if t0 < t1 <= p0 + h.period_s:  # most spans (a task's phase, the idle time before it) lie in one segment
        starts = r.starts2_list
        a, b = t0 - p0, t1 - p0
        k = bisect_right(starts, a) - 1
        if k >= 0 and starts[k] < b <= starts[k + 1]:  # _through's one-segment case, the same arithmetic
            rate = r.rates2_list[k]
            if rate >= 0.0:
                return Step(min(cap, level + rate * (t1 - t0)), None, 0.0)
            end = level + rate * (t1 - t0)
            if end > 0.0:
                return Step(end, None, -rate * (t1 - t0))
            return _one(level, cap, t0, t1 - t0, rate)
    if t1 == math.inf and r.period.per_period >= 0:
        lowest = r.period.steady(cap)[1]
        # the level never drifts further from the steady path (which repeats every period and never falls below
        # M): a battery behind it by less than M never empties
        if lowest > 0 and level > r.period.steady_at(cap, t0 - p0) - lowest:
            return Step(level, None, 0.0)
    drawn = 0.0
    t = t0
    # to the end of t0's period, then whole periods, then the rest
    first_end = min(t1, p0 + h.period_s)
    if first_end > t:
        s = _through(level, cap, t, p0, first_end, r)
        drawn += s.drawn_j
        if s.dead_at is not None or first_end >= t1:
            return Step(s.level, s.dead_at, drawn)
        level, t = s.level, first_end
    p = r.period
    previous_end = math.nan
    while t + h.period_s <= t1:
        if t1 == math.inf and p.per_period >= 0:
            end, lowest = p.steady(cap)
            if level >= end and lowest > 0:
                return Step(end, None, drawn)  # from here every period ends at E and stays above M > 0
        if level + p.highest <= cap:  # never capped: every later period moves by per_period too
            if level + p.lowest <= 0:
                break  # it empties in this period
            if p.per_period < 0:
                n = max(0, math.ceil((level + p.lowest) / -p.per_period) - 1)  # periods surely survived
            elif p.per_period > 0:
                n = max(0, math.floor((cap - p.highest - level) / p.per_period))  # periods before the cap binds
            else:
                n = math.inf
            if t1 < math.inf:
                n = min(n, math.floor((t1 - t) / h.period_s))
            if n == math.inf:
                return Step(level, None, drawn)  # the same period forever (t1 infinite)
            if n > 0:
                level += n * p.per_period
                drawn += n * p.drawn
                t += n * h.period_s
                continue
        s = _span(level, cap, t, h.lengths_s, p.rates)
        drawn += s.drawn_j
        if s.dead_at is not None:
            return Step(0.0, s.dead_at, drawn)
        if s.level == previous_end and t1 == math.inf:
            return Step(s.level, None, drawn)  # a fixed point: every later period ends here too
        if s.level == previous_end:
            n = math.floor((t1 - t) / h.period_s)  # the rest of the whole periods repeat this one
            drawn += (n - 1) * s.drawn_j
            level, t = s.level, t + n * h.period_s
            continue
        previous_end, level, t = s.level, s.level, t + h.period_s
    if t >= t1:
        return Step(level, None, drawn)
    s = _through(level, cap, t, h.period_start(t), min(t1, t + h.period_s), r)  # the rest, or the period it empties in
    return Step(s.level, s.dead_at, drawn + s.drawn_j)


def period_level(level: float, cap: float, draw_w: float, h: Harvest, cell: Cell) -> float:
    """The level after one whole period of ``h`` begun at one of its period starts at ``level`` (0 if it empties):
    the same function of ``level`` for every period, since a period's segments and rates do not depend on when it
    starts."""
    r = h.cache.get((id(cell), draw_w)) or _Rates.of(h, cell, draw_w)
    s = _span(level, cap, 0.0, h.lengths_s, r.period.rates)
    return 0.0 if s.dead_at is not None else s.level


def depletion_time(
    level: float, cap: float, t0: float, draw_w: float, h: Harvest | None, cell: Cell
) -> float:
    """When a battery at ``level`` at ``t0`` empties while the device draws ``draw_w`` (inf if it never does)."""
    if level <= 0.0:
        return t0
    dead = walk(level, cap, t0, math.inf, draw_w, h, cell).dead_at
    return math.inf if dead is None else dead
