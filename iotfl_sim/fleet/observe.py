"""What the fleet's physical state looks like over a run, for the plots: per device class, the mean over a fixed,
seeded sample of its devices (at most ``SAMPLE`` per class) of its battery's state of charge and incoming power,
its temperature, and its link rate, each read at a row's instant without moving any device's state.

Columns appear only where a model is on: ``soc_<class>`` (0-1) for classes with a power source or a non-ideal cell
(a battery level the model tracks), ``harvest_w_<class>``
for classes with a source (a panel, a charger, a window), ``temp_c_<class>`` for classes with a thermal model,
``clock_<class>`` (the mean clock share, 0-1, of each sampled device's last training: below 1 when it throttled)
beside it, ``down_mbps_<class>`` for classes whose rate follows a bandwidth trace. A depleted device counts with state of charge
0; a device busy with a task reads its state at the end of its current activity (what the fleet has settled).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from iotfl_sim.fleet.harvest import Cell, Harvest, period_level, walk
from iotfl_sim.seeding import stream

if TYPE_CHECKING:
    from iotfl_sim.fleet.fleet import Fleet

SAMPLE = 16


class Observer:
    """The sample and the columns of one fleet (built once; reads are O(classes x SAMPLE))."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self._reached: dict[int, tuple] = {}  # _tracked_level's
        self.samples: dict[str, np.ndarray] = {}
        self.kinds: dict[str, list[str]] = {}
        for c, name in enumerate(fleet.class_names):
            members = np.flatnonzero(fleet.class_of == c)
            if members.size > SAMPLE:
                members = np.sort(stream(fleet.seed, "observe", c).choice(members, SAMPLE, replace=False))
            groups = {int(g) for g in fleet.group_of[members]}
            kinds = []
            if any(fleet.tracked[g] for g in groups):  # a source or a real cell: the level is the model's
                kinds.append("soc")
            if any(fleet.harvests[g] is not None for g in groups):
                kinds.append("harvest_w")
            if fleet.thermals and any(fleet.thermals[g] is not None for g in groups):
                kinds += ["temp_c", "clock"]
            if fleet.bandwidth and any(fleet.bandwidth[g] is not None for g in groups):
                kinds.append("down_mbps")
            if kinds:
                self.samples[name] = members
                self.kinds[name] = kinds

    @property
    def columns(self) -> list[str]:
        return [f"{k}_{name}" for name, kinds in self.kinds.items() for k in kinds]

    def row(self, t: float) -> dict[str, float]:
        out: dict[str, float] = {}
        for name, kinds in self.kinds.items():
            ids = self.samples[name]
            for k in kinds:
                values = [v for d in ids.tolist() if not math.isnan(v := getattr(self, f"_{k}")(d, t))]
                out[f"{k}_{name}"] = float(np.mean(values)) if values else math.nan
        return out

    def _soc(self, d: int, t: float) -> float:
        f = self.fleet
        cap = float(f.capacity_j[d])
        if not math.isfinite(cap):
            return math.nan
        if not f.alive(d, t) or cap <= 0.0:
            return 0.0
        g = f.group_of[d]
        last = float(f.settled_at[d])
        if f.tracked[g]:
            level = float(f.level[d])
            if t > last:
                level = self._tracked_level(d, g, last, level, cap, t)
        else:
            level = cap - f.used(d) - float(f.idle_w[d]) * max(t - last, 0.0)
        return min(max(level / cap, 0.0), 1.0)

    def _tracked_level(self, d: int, g: int, last: float, level: float, cap: float, t: float) -> float:
        """Device ``d``'s battery at ``t``, idle since ``last`` at ``level``, along one fixed path: one segment of its
        source at a time up to the first period start after ``last`` (B0), whole periods from there (each the same
        function of the level it starts at: ``period_level``; once a period ends where it began, every later one
        does), then one segment at a time from the last period start at or before ``t`` to the last segment start
        before it, then to ``t``. Where the path stopped is kept (``_reached``) while the device's state is
        unchanged, so each row walks only what the clock moved through since the last, and whole days of a
        battery that a charger refills cost nothing; the steps and their order do not depend on where the walk
        starts, so the answer does not depend on which rows came before, or on a resume."""
        f = self.fleet
        h, cell, draw = f.source(d), f.cells[g], float(f.idle_w[d])
        if h is None:
            return walk(level, cap, last, t, draw, h, cell).level
        period = h.period_s
        b0 = h.period_start(last) + period
        k_t = -1 if t < b0 else math.floor((t - b0) / period)  # the last period start at or before t: b0 + k_t P
        kept = self._reached.get(d)
        if kept is None or kept[0] != (last, level, cap) or kept[1] > k_t:
            kept = ((last, level, cap), -1, level, False, last, level)
        _, k, k_level, fixed, at, at_level = kept
        if k < k_t:  # to the period start b0 + k_t P: the segments up to b0 first, then whole periods
            if k == -1:
                at, at_level = self._segments(at, at_level, cap, b0, draw, h, cell)
                k, k_level = 0, at_level
            while k < k_t and k_level > 0.0 and not fixed:
                after = period_level(k_level, cap, draw, h, cell)
                fixed, k, k_level = after == k_level, k + 1, after
            k = k_t
            at, at_level = b0 + k * period, k_level
        elif at > t:  # kept past t (a row read out of order): this period's segments again from its start
            at, at_level = (b0 + k * period if k >= 0 else last), (k_level if k >= 0 else level)
        at, at_level = self._segments(at, at_level, cap, t, draw, h, cell, stop_before=True)
        self._reached[d] = ((last, level, cap), k, k_level, fixed, at, at_level)
        return walk(at_level, cap, at, t, draw, h, cell).level if t > at and at_level > 0.0 else at_level

    @staticmethod
    def _segments(
        at: float, level: float, cap: float, until: float, draw: float, h: Harvest, cell: Cell, stop_before: bool = False
    ) -> tuple[float, float]:
        """The battery walked one segment of ``h`` at a time from ``at``: to ``until`` (a period start), or with
        ``stop_before`` to the last segment start at or before ``until``."""
        while level > 0.0:
            nxt = h.next_change(at)
            if nxt <= at or (nxt > until if stop_before else nxt >= until):
                break
            level, at = walk(level, cap, at, nxt, draw, h, cell).level, nxt
        if not stop_before and level > 0.0 and until > at:
            level, at = walk(level, cap, at, until, draw, h, cell).level, until
        return at, level

    def _harvest_w(self, d: int, t: float) -> float:
        h = self.fleet.source(d)
        return math.nan if h is None else h.value(t)

    def _temp_c(self, d: int, t: float) -> float:
        return self.fleet.temperature(d, t)

    def _clock(self, d: int, t: float) -> float:
        """The mean clock share (0-1) of the device's last training, nan before its first."""
        return float(self.fleet.last_clock[d]) if self.fleet.thermals[self.fleet.group_of[d]] is not None else math.nan

    def _down_mbps(self, d: int, t: float) -> float:
        traced = self.fleet.traced_link(d, up=False)
        return math.nan if traced is None else traced[0].value(t + traced[1]) / 1e6
