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

import math
from dataclasses import dataclass

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


@dataclass(frozen=True)
class Step:
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
        ends = np.cumsum(lengths)
        t_start = t0 + (0.0 if k == 0 else float(ends[k - 1]))
        drawn = -float(np.sum(np.minimum(deltas[:k], 0.0))) + max(start, 0.0)
        return Step(0.0, t_start + (start / -float(rates[k]) if start > 0.0 else 0.0), drawn)
    return Step(float(levels[-1]) if levels.size else level, None, -float(np.sum(np.minimum(deltas, 0.0))))


def _segments(h: Harvest, t0: float, t1: float) -> tuple[np.ndarray, np.ndarray]:
    """Lengths and incoming powers of the source's segments covering ``[t0, t1]``, ``t1 - t0`` at most a period
    past ``t0``'s period."""
    p0 = h.period_start(t0)
    starts = np.concatenate([p0 + h.offsets_s, p0 + h.period_s + h.offsets_s])
    power = np.concatenate([h.values, h.values])
    ends = np.append(starts[1:], p0 + 2.0 * h.period_s)
    keep = (ends > t0) & (starts < t1)
    lo, hi = np.maximum(starts[keep], t0), np.minimum(ends[keep], t1)
    return hi - lo, power[keep]


def walk(
    level: float, cap: float, t0: float, t1: float, draw_w: float, h: Harvest | None, cell: Cell
) -> Step:
    """The battery from ``level`` at ``t0`` to ``t1`` (``math.inf``: until it empties, if ever) while the device
    draws ``draw_w``; ``h`` None: nothing comes in."""
    if h is None:
        rate = float(cell.stored_rates(np.zeros(1), draw_w)[0])
        if t1 == math.inf:
            return Step(level, t0 + level / -rate if rate < 0 else None, level if rate < 0 else 0.0)
        return _span(level, cap, t0, np.array([t1 - t0]), np.array([rate]))
    drawn = 0.0
    t = t0
    # to the end of t0's period, then whole periods, then the rest
    first_end = min(t1, h.period_start(t0) + h.period_s)
    if first_end > t:
        lengths, power = _segments(h, t, first_end)
        s = _span(level, cap, t, lengths, cell.stored_rates(power, draw_w))
        drawn += s.drawn_j
        if s.dead_at is not None or first_end >= t1:
            return Step(s.level, s.dead_at, drawn)
        level, t = s.level, first_end
    rates = cell.stored_rates(h.values, draw_w)
    deltas = rates * h.lengths_s
    sums = np.cumsum(deltas)
    per_period, lowest, highest = float(sums[-1]), float(np.min(sums)), float(np.max(sums))
    drawn_per_period = -float(np.sum(np.minimum(deltas, 0.0)))
    previous_end = math.nan
    while t + h.period_s <= t1:
        if level + highest <= cap:  # never capped: every later period moves by per_period too
            if level + lowest <= 0:
                break  # it empties in this period
            if per_period < 0:
                n = max(0, math.ceil((level + lowest) / -per_period) - 1)  # periods surely survived
            elif per_period > 0:
                n = max(0, math.floor((cap - highest - level) / per_period))  # periods before the cap binds
            else:
                n = math.inf
            if t1 < math.inf:
                n = min(n, math.floor((t1 - t) / h.period_s))
            if n == math.inf:
                return Step(level, None, drawn)  # the same period forever (t1 infinite)
            if n > 0:
                level += n * per_period
                drawn += n * drawn_per_period
                t += n * h.period_s
                continue
        s = _span(level, cap, t, h.lengths_s, rates)
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
    lengths, power = _segments(h, t, min(t1, t + h.period_s))  # the rest, or the period it empties in
    s = _span(level, cap, t, lengths, cell.stored_rates(power, draw_w))
    return Step(s.level, s.dead_at, drawn + s.drawn_j)


def depletion_time(
    level: float, cap: float, t0: float, draw_w: float, h: Harvest | None, cell: Cell
) -> float:
    """When a battery at ``level`` at ``t0`` empties while the device draws ``draw_w`` (inf if it never does)."""
    if level <= 0.0:
        return t0
    dead = walk(level, cap, t0, math.inf, draw_w, h, cell).dead_at
    return math.inf if dead is None else dead
