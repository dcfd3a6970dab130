"""A periodic, piecewise-constant signal over simulated time: a harvest's power, a grid's carbon intensity."""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Periodic:
    """A periodic, piecewise-constant signal: ``values[k]`` from ``offsets_s[k]`` to ``offsets_s[k + 1]`` (the last
    to ``period_s``) of every period; periods start at ``origin_s + m x period_s``. A harvest is one in W, a grid's
    carbon intensity one in g/kWh."""

    offsets_s: np.ndarray
    values: np.ndarray
    period_s: float
    origin_s: float = 0.0
    lengths_s: np.ndarray = field(init=False, repr=False, compare=False)
    cache: dict = field(init=False, repr=False, compare=False, default_factory=dict)  # for callers' derived figures

    def __post_init__(self) -> None:
        offsets = np.asarray(self.offsets_s, dtype=np.float64)
        power = np.asarray(self.values, dtype=np.float64)
        if offsets.ndim != 1 or offsets.size == 0 or offsets[0] != 0.0 or power.shape != offsets.shape:
            raise ValueError(
                "a periodic signal needs segment offsets starting at 0 and one value per segment"
            )
        if (
            np.any(np.diff(offsets) <= 0)
            or not offsets[-1] < self.period_s
            or not math.isfinite(self.period_s)
        ):
            raise ValueError("segments must be increasing and inside a finite period")
        object.__setattr__(self, "offsets_s", offsets)
        object.__setattr__(self, "values", power)
        object.__setattr__(self, "lengths_s", np.diff(np.append(offsets, self.period_s)))

    @classmethod
    def window(cls, power_w: float, start_s: float, length_s: float, period_s: float = 86400.0) -> Periodic:
        """``power_w`` during ``[start, start + length)`` of every period, 0 outside it."""
        if length_s >= period_s:
            return cls(np.zeros(1), np.array([power_w]), period_s, start_s % period_s)
        return cls(np.array([0.0, length_s]), np.array([power_w, 0.0]), period_s, start_s % period_s)

    def period_start(self, t: float) -> float:
        """The start of the period holding ``t``."""
        return t - ((t - self.origin_s) % self.period_s)

    def value(self, t: float) -> float:
        """The value at ``t``."""
        offsets, values, _, _ = self._scalars()
        return values[bisect_right(offsets, (t - self.origin_s) % self.period_s) - 1]

    def integral(self, t0: float, t1: float) -> float:
        """The integral over ``[t0, t1]`` (a harvest's energy in J)."""
        return self.cumulative(t1) - self.cumulative(t0) if t1 > t0 else 0.0

    def cumulative(self, t: float) -> float:
        """The integral from ``origin_s`` to ``t`` (negative before it)."""
        offsets, values, prefix, total = self._scalars()
        phase = (t - self.origin_s) % self.period_s
        whole = round((t - phase - self.origin_s) / self.period_s)
        k = bisect_right(offsets, phase) - 1
        return whole * total + prefix[k] + values[k] * (phase - offsets[k])

    def _scalars(self) -> tuple[list[float], list[float], list[float], float]:
        """Offsets, values, the integral up to each segment's start, and a whole period's, as Python floats
        (a call costs a microsecond, not numpy's tens)."""
        got = self.cache.get("scalars")
        if got is None:
            areas = (self.values * self.lengths_s).tolist()
            prefix = [0.0]
            for a in areas[:-1]:
                prefix.append(prefix[-1] + a)
            got = self.cache["scalars"] = (self.offsets_s.tolist(), self.values.tolist(), prefix, sum(areas))
        return got

    def next_change(self, t: float) -> float:
        """The first instant after ``t`` at which the value may change (the end of ``t``'s segment)."""
        offsets, _, _, _ = self._scalars()
        start = self.period_start(t)
        ends = [*offsets[1:], self.period_s]
        k = bisect_right(offsets, t - start) - 1
        end = start + ends[k]
        if end <= t:  # t rounded onto the segment's end: the next one's
            end = start + ends[k + 1] if k + 1 < len(ends) else start + self.period_s + ends[0]
        return end


def product_integral(a: Periodic, b: Periodic, t0: float, t1: float) -> float:
    """The integral of ``a x b`` over ``[t0, t1]``, segment by segment (a charger's power times the grid's carbon
    intensity): O(segments of either signal in the span)."""
    total, t = 0.0, t0
    while t < t1:
        end = min(a.next_change(t), b.next_change(t), t1)
        total += a.value(t) * b.value(t) * (end - t)
        t = end
    return total
