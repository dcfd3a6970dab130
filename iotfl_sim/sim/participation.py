"""Who can ever take part in a run, by fleet group: what ``iotfl-sim validate`` and ``run`` say before training.

A device *can ever take part* when some submodel the method could give it needs no more training memory than
the most free memory the device can ever have when a task arrives:

- the submodels it could be given are the method's ``candidate_specs`` restricted by its
  ``Strategy.possible_specs`` (its own rules: an eligibility mask, a fixed level, and on-device adaptation,
  which may train a smaller candidate than the one sent);
- their need is ``SystemModel.memory_need``; the device's most free memory ``Fleet.max_free_memory`` (its
  declared free memory, which Gaussian memory never exceeds; unbounded for an OU process with a spread);
- a method that ignores memory (``fedavg`` with ``memory: ignore``) fits every candidate everywhere.

Whatever else keeps a device from training (being offline, a drained battery, a deadline, never being drawn)
is left out: it can only lower the count, so the count is an upper bound, and a group reported as never taking
part never does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from iotfl_sim.core.errors import ScenarioError

if TYPE_CHECKING:
    from iotfl_sim.sim.engine import Simulation


@dataclass(frozen=True)
class GroupReach:
    """One fleet group: its size, how many of its devices can ever take part, and (for the warning) the
    smallest need of any candidate and the most free memory any of its devices can have, in memory units."""

    name: str
    devices: int
    can: int
    memory_rules_out: bool  # no candidate fits any of its devices: memory alone keeps the group out
    smallest_need: float
    most_free: float


def memory_unit(sim: Simulation) -> tuple[str, float]:
    """How memory figures are shown: (unit, memory units per shown unit)."""
    return ("% of the full model", 1.0) if sim.system.memory_need.relative else ("MB", sim.system.memory_need.scale)


def amount(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def _fits(sim: Simulation) -> tuple[np.ndarray, np.ndarray]:
    """(each candidate's training need, whether it fits each device's most possible free memory: devices x
    candidates)."""
    needs = np.array([sim.system.memory_need(r, s) for r, s in sim.strategy.candidate_specs()], dtype=np.float64)
    if sim.system.memory_ignored:
        return needs, np.ones((sim.fleet.n, len(needs)), dtype=bool)
    return needs, sim.fleet.max_free_memory()[:, None] >= needs[None, :]


def can_take_part(sim: Simulation) -> np.ndarray:
    """Per device: whether it can ever take part (module docstring)."""
    _, fits = _fits(sim)
    possible = sim.strategy.possible_specs()
    if possible is None:
        return fits.any(1)
    try:
        possible = np.broadcast_to(np.asarray(possible, dtype=bool), fits.shape)
    except ValueError:
        raise ScenarioError(
            f"algorithm {sim.sc.algorithm.name}: possible_specs() gave an array of shape {np.shape(possible)}, not one "
            f"row per device and one column per candidate_specs() entry {fits.shape}; fix the method's possible_specs"
        ) from None
    return (fits & possible).any(1)


def reach(sim: Simulation) -> list[GroupReach]:
    """Per fleet group, in the scenario's order: how many devices can ever take part (module docstring)."""
    fleet = sim.fleet
    needs, fits = _fits(sim)
    most = fleet.max_free_memory()
    can = can_take_part(sim)
    k = len(fleet.groups)
    size = np.bincount(fleet.group_of, minlength=k)
    counts = np.bincount(fleet.group_of, weights=can, minlength=k).astype(np.int64)
    any_fit = np.bincount(fleet.group_of, weights=fits.any(1), minlength=k)
    roomiest = np.zeros(k)
    np.maximum.at(roomiest, fleet.group_of, most)
    return [
        GroupReach(g.name, int(size[i]), int(counts[i]), bool(any_fit[i] == 0), float(needs.min()), float(roomiest[i]))
        for i, g in enumerate(fleet.groups)
    ]


def participation(sim: Simulation) -> tuple[list[str], list[str]]:
    """(notes, warnings): one note counting, by group, the devices that can ever take part; a warning per
    group none of whose devices ever can, naming why and what to change."""
    name = sim.sc.algorithm.name
    if not sim.strategy.candidate_specs():  # a Flower app: its memory is measured only as its ClientApp runs
        return [f"participation: {name}'s memory need is measured as each message runs; no device is ruled out before"], []
    groups = reach(sim)
    total, n = sum(g.can for g in groups), sum(g.devices for g in groups)
    by_group = ", ".join(f"{g.name} {g.can} of {g.devices}" for g in groups)
    notes = [f"participation: {name} can ever give a task to {total} of {n} devices ({by_group})"]
    fleet = sim.fleet
    if fleet.out_of_range.size and fleet.out_of_range.any():
        far = np.bincount(fleet.group_of[fleet.out_of_range], minlength=len(groups))
        notes.append(
            "participation: out of radio range (network.link: no scheme reaches the gateway), so every task they "
            "start fails as offline: " + ", ".join(f"{g.name} {int(far[i])} of {g.devices}" for i, g in enumerate(groups) if far[i])
        )
    unit, scale = memory_unit(sim)
    warnings = []
    for g in groups:
        if g.can or not g.devices:
            continue
        if g.memory_rules_out:
            why = (
                f"the smallest submodel it could give any device needs {amount(g.smallest_need / scale)} {unit} to "
                f"train, and they have at most {amount(g.most_free / scale)} {unit} free"
            )
        else:
            why = (
                "its assignment never gives them a submodel they can hold (a fixed level larger than their memory, "
                "or a model kept for devices whose declared memory holds it)"
            )
        warnings.append(
            f"participation: group {g.name} ({g.devices} devices) never trains under {name}: {why}; the run "
            "compares training on the rest of the fleet. To include them, lower local.batch_size or the model, raise "
            "the group's memory.free_mb, or use a method that fits the model to each device (e.g. heterofl with "
            "assign: by_capacity)"
        )
    return notes, warnings
