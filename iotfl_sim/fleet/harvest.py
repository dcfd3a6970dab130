"""Energy coming in: a daily window of constant harvest or charging power (a solar day, a charger at night).

The battery level then moves piecewise linearly: during the window it gains the harvest power minus
what the device draws, outside it it only loses; it never exceeds its capacity and a device whose
level reaches zero is offline for good.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Harvest:
    power_w: float
    start_s: float  # window start within the period
    length_s: float
    period_s: float = 86400.0

    def _phase(self, t: float) -> float:
        return (t - self.start_s) % self.period_s

    def rate(self, t: float) -> float:
        """Harvest power at ``t`` (the window is [start, start + length) every period)."""
        return self.power_w if self._phase(t) < self.length_s else 0.0

    def next_boundary(self, t: float) -> float:
        ph = self._phase(t)
        step = self.length_s - ph if ph < self.length_s else self.period_s - ph
        return t + max(step, 1e-9)


def battery_path(level: float, cap: float, t0: float, t1: float, draw_w: float, h: Harvest) -> tuple[float, float | None]:
    """Level at ``t1`` of a battery at ``level`` at ``t0`` drawing ``draw_w``, and the instant it empties (or None)."""
    t = t0
    while t < t1:
        end = min(t1, h.next_boundary(t))
        net = h.rate(t) - draw_w
        if net < 0 and level + net * (end - t) <= 0:
            return 0.0, t + level / -net
        level = min(cap, level + net * (end - t))
        t = end
    return level, None


def depletion_time(level: float, cap: float, t0: float, draw_w: float, h: Harvest) -> float:
    """When a battery at ``level`` at ``t0`` empties while drawing ``draw_w`` (inf if it never does)."""
    if draw_w <= 0:
        return math.inf
    period_start = t0 + ((h.start_s - t0) % h.period_s)
    level, dead = battery_path(level, cap, t0, period_start, draw_w, h)
    if dead is not None:
        return dead
    t = period_start
    for _ in range(3):  # look at whole periods from here on
        end_level, dead = battery_path(level, cap, t, t + h.period_s, draw_w, h)
        if dead is not None:
            return dead
        if end_level >= level - 1e-12:
            return math.inf  # a period no longer loses energy: it never will
        daily_loss = level - end_level
        dip = _deepest_dip(draw_w, h)
        capped = level + h.power_w * h.length_s - draw_w * h.length_s > cap
        if not capped and daily_loss > 0:
            skip = max(0, int((level - dip) / daily_loss) - 1)  # whole periods survived for sure
            level -= skip * daily_loss
            t += skip * h.period_s
            end_level, dead = battery_path(level, cap, t, t + 3 * h.period_s, draw_w, h)
            return dead if dead is not None else math.inf  # cannot happen: the skip leaves < 2 periods
        level, t = end_level, t + h.period_s
    return math.inf


def _deepest_dip(draw_w: float, h: Harvest) -> float:
    """Largest drop below its start level within one period starting at the window's start."""
    gain = max(0.0, (h.power_w - draw_w) * h.length_s)
    return max(0.0, draw_w * (h.period_s - h.length_s) - gain) + max(0.0, (draw_w - h.power_w) * h.length_s)
