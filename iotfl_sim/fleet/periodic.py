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
        """The integral over ``[t0, t1]`` (a harvest's energy in J): within one segment its value times the span (most
        spans between a device's events are), else through ``cumulative``."""
        if t1 <= t0:
            return 0.0
        offsets, values, _, _ = self.__dict__.get("_scalar_cache") or self._scalars()
        phase = (t0 - self.origin_s) % self.period_s
        k = bisect_right(offsets, phase) - 1
        end = offsets[k + 1] if k + 1 < len(offsets) else self.period_s
        if phase + (t1 - t0) <= end:
            return values[k] * (t1 - t0)
        return self.cumulative(t1) - self.cumulative(t0)

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
        got = self.__dict__.get("_scalar_cache")
        if got is None:
            areas = (self.values * self.lengths_s).tolist()
            prefix = [0.0]
            for a in areas[:-1]:
                prefix.append(prefix[-1] + a)
            got = (self.offsets_s.tolist(), self.values.tolist(), prefix, sum(areas))
            object.__setattr__(self, "_scalar_cache", got)
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


MAX_PRODUCT_SEGMENTS = 200_000  # a product signal over the periods' common multiple is built up to this size


def product_integral(a: Periodic, b: Periodic, t0: float, t1: float) -> float:
    """The integral of ``a x b`` over ``[t0, t1]`` (a charger's power times the grid's carbon intensity). A constant
    signal scales the other's integral; else through their product over a common period when the periods have one of
    at most ``MAX_PRODUCT_SEGMENTS`` segments (built once, cached on ``a``); else segment by segment over the signal
    whose segments are longer, the other integrated in closed form over each: O(its segments in the span)."""
    got = a.cache.get(("product", id(b)))  # cached only for two signals that are not constant (below)
    if got is not None and got[1] is not None:
        return got[1].integral(t0, t1)
    if a.offsets_s.size == 1:
        return float(a.values[0]) * b.integral(t0, t1)
    if b.offsets_s.size == 1:
        return float(b.values[0]) * a.integral(t0, t1)
    key = ("product", id(b))
    got = a.cache.get(key)
    if got is None:
        got = a.cache[key] = (b, _product(a, b))  # b kept: its id stays its own while cached
    product = got[1]
    if product is not None:
        return product.integral(t0, t1)
    x, y = (a, b) if a.period_s / a.offsets_s.size >= b.period_s / b.offsets_s.size else (b, a)
    total, t = 0.0, t0
    while t < t1:
        end = min(x.next_change(t), t1)
        total += x.value(0.5 * (t + end)) * y.integral(t, end)  # the middle: a span's start may round to the one before
        t = end
    return total


def _product(a: Periodic, b: Periodic) -> Periodic | None:
    """``a x b`` as one periodic signal, when their periods have a common multiple of few segments (None if not)."""
    long, short = max(a.period_s, b.period_s), min(a.period_s, b.period_s)
    ratio = long / short
    k = round(ratio)
    if k < 1 or abs(ratio - k) > 1e-9 * ratio:
        return None  # no common period: at most the long one times a small integer is tried
    period = long
    if a.offsets_s.size * (period / a.period_s) + b.offsets_s.size * (period / b.period_s) > MAX_PRODUCT_SEGMENTS:
        return None
    origin = a.origin_s

    def starts(x: Periodic) -> np.ndarray:
        reps = round(period / x.period_s)
        shift = (x.origin_s - origin) % x.period_s
        s = (x.offsets_s[None, :] + shift + x.period_s * np.arange(-1, reps + 1)[:, None]).ravel()
        return s[(s >= 0.0) & (s < period)]

    cuts = np.unique(np.concatenate([[0.0], starts(a), starts(b)]))
    mids = (cuts + np.append(cuts[1:], period)) / 2.0 + origin  # each segment read at its middle (see above)
    values = np.array([a.value(m) * b.value(m) for m in mids.tolist()])
    return Periodic(cuts, values, period, origin)
