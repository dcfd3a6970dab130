"""Chargers plugged in on a daily schedule that varies from day to day and from device to device.

A group's ``harvest: {kind: charger}`` draws ``variants`` schedules, each ``days`` days long and then repeated. On day
``k`` of a schedule the charger is plugged in from ``start_hour + N(0, start_sd_hours)`` for
``hours + N(0, hours_sd)`` hours (clipped to [0, 24]), unless the day is skipped (``skip_probability``); a session
that runs past the schedule's end continues at its start, and overlapping sessions merge. Each device follows one
schedule, drawn uniformly. Every number is drawn from the scenario's seed, so a schedule is the same in every run and
resume.

Why a few shared schedules rather than one per device: a device's schedule is the power source its battery is walked
over (``fleet.harvest.walk``), and the instant its idle draw would empty it is found per source at build time. With
``variants`` sources that costs ``variants`` walks, whatever the fleet's size; 64 distinct schedules already give a
group of phones a spread of plug-in times and day-to-day variation.
"""

from __future__ import annotations

import numpy as np

from iotfl_sim.fleet.periodic import Periodic
from iotfl_sim.fleet.traces import TraceTable
from iotfl_sim.scenario.model import ChargerConfig
from iotfl_sim.seeding import stream

NEVER_S = 1e15  # a period no run reaches (30 million years): a trace that does not repeat


def schedule(cfg: ChargerConfig, seed: int, group: int, variant: int) -> Periodic:
    """Schedule ``variant`` of group ``group``: the charger's power (W) over ``cfg.days`` days."""
    day, hour = cfg.day_s, cfg.day_s / 24.0
    period = cfg.days * day
    rng = stream(seed, "charger", group, variant)
    draws = rng.standard_normal((cfg.days, 2))
    skipped = rng.random(cfg.days) < cfg.skip_probability
    spans: list[tuple[float, float]] = []
    for k in range(cfg.days):
        length = min(max(cfg.hours + cfg.hours_sd * draws[k, 1], 0.0), 24.0) * hour
        if skipped[k] or length <= 0.0:
            continue
        start = (k * day + (cfg.start_hour + cfg.start_sd_hours * draws[k, 0]) * hour) % period
        end = start + length
        if end <= period:
            spans.append((start, end))
        else:  # past the schedule's end: on at its start
            spans += [(start, period), (0.0, end - period)]
    return _on_off(sorted(spans), cfg.power_w, period)


def _on_off(spans: list[tuple[float, float]], power_w: float, period: float) -> Periodic:
    """``power_w`` on the union of ``spans`` (sorted by start, inside ``[0, period]``), 0 elsewhere."""
    merged: list[list[float]] = []
    for a, b in spans:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    offsets, values = [0.0], [0.0]
    for a, b in merged:
        if b <= a:
            continue
        if a == offsets[-1]:
            values[-1] = power_w
        else:
            offsets.append(a)
            values.append(power_w)
        if b < period:
            offsets.append(b)
            values.append(0.0)
    return Periodic(np.asarray(offsets), np.asarray(values), period)


def plugged_when_online(
    power_w: float, table: TraceTable, members: np.ndarray, mapping: str, seed: int
) -> tuple[tuple[Periodic, ...], np.ndarray]:
    """A charger plugged in whenever the availability trace has the device online: one source per trace client the
    group's devices replay (the same client as their availability, by the same mapping), and which one each
    follows. A trace that does not repeat (CSV) is one period of ``NEVER_S``: after its last interval, unplugged."""
    slots = table.slots_for(members, mapping, seed)
    distinct, which = np.unique(slots, return_inverse=True)
    sources = []
    for slot in distinct.tolist():
        a, b, period, _, _ = table.info(slot)
        period = period if period > 0 else NEVER_S
        spans = sorted(zip(table.st[a:b].tolist(), np.minimum(table.en[a:b], period).tolist(), strict=True))
        sources.append(_on_off([(s, e) for s, e in spans if e > s and s < period], power_w, period))
    return tuple(sources), which.astype(np.int32)


def schedules(
    cfg: ChargerConfig, seed: int, group: int, count: int
) -> tuple[tuple[Periodic, ...], np.ndarray]:
    """The group's schedules, and which one each of its ``count`` devices follows."""
    sources = tuple(schedule(cfg, seed, group, v) for v in range(cfg.variants))
    which = stream(seed, "charger_of", group).integers(0, cfg.variants, size=count)
    return sources, which.astype(np.int32)
