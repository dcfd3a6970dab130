"""Checking a study's points before its sweep, in bounded time: each distinct setting once, not each point.

A study's points are the product of its *axes*: every grid key (one value per point) and the zip (one row
per point), so 100,000 points may hold only a few dozen settings. A problem comes from the base or from a
setting, so each setting is checked once, in the *anchor* point (the first value of every axis) with that one
setting changed: ``1 + sum(len(axis) - 1)`` checks instead of their product. Settings are taken round-robin
over the axes (every axis's second value, then every third ...). The anchor and the first ``MAX_FULL``
settings get every check ``run`` makes before training (``study.check_point``: the dataset files, the split,
the system build); the next, up to ``MAX_CHECKS`` in all, the scenario's own checks (the schema and the
profiles). Any further setting is checked when its run starts (a failing run is recorded as ``failed`` in the
index, with its message); a note says how many were left.

Each problem is reported once, with the points it affects: a problem of the anchor that some value of an axis
clears is put down to the anchor's value on that axis (otherwise to the base: every point); a problem the
anchor lacks, to the settings whose check shows it. Two settings that are each fine and fail only together
(neither of them the anchor's) are not found before the sweep.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from typing import Any

from iotfl_sim.core.errors import ScenarioError

MAX_FULL = 6  # settings (besides the anchor) given every run-time check: each builds the system, ~0.1-0.5 s
MAX_CHECKS = 200  # points checked in all (the scenario's own checks take a few ms each)
MAX_SHOWN = 10  # problems printed; the rest are counted


@dataclass
class Axis:
    name: str  # the grid key, or "zip"
    settings: list[dict[str, Any]]  # the overrides of each value (a zip row: several keys)



def axes_of(grid: dict[str, list[Any]], zipped: dict[str, list[Any]]) -> list[Axis]:
    """The grid keys in order, then the zip (the order in which ``study.expand`` varies them, slowest first)."""
    axes = [Axis(k, [{k: v} for v in values]) for k, values in grid.items()]
    if zipped:
        rows = [dict(zip(zipped, r, strict=True)) for r in zip(*zipped.values(), strict=True)]
        axes.append(Axis("zip", rows))
    return axes


@dataclass
class _Result:
    """One point's check: the problems of each stage; None where that stage did not run."""

    load: list[str] | None = None
    run: list[str] | None = None

    def shows(self, problem: str, stage: str) -> bool | None:
        found = self.load if stage == "load" else self.run
        return None if found is None else problem in found


@dataclass
class StudyCheck:
    """What ``check_settings`` found: each problem (in the order met) with the points it affects."""

    points: int
    problems: list[tuple[str, int, str]] = field(default_factory=list)  # (where, points affected, problem)
    unchecked: int = 0  # settings left to be checked when their run starts
    load_only: int = 0  # settings given the scenario's own checks only

    def message(self) -> str:
        lines = []
        for where, _, problem in self.problems[:MAX_SHOWN]:
            lines.append(f"{where}: {problem}" if where else problem)
        if len(self.problems) > MAX_SHOWN:
            lines.append(f"and {len(self.problems) - MAX_SHOWN} more problems; fix these and validate again")
        return "\n".join(lines)


def check_settings(axes: list[Axis], load: Any, run: Any, source: str, name: Any) -> StudyCheck:
    """Check the anchor and each setting once (see the module docstring). ``load(overrides)`` loads a point
    (the scenario's own checks) and ``run(loaded)`` makes the run-time checks; both raise ScenarioError.
    ``name(overrides)``: a point's (or a setting's) id, as messages show it."""
    n_points = math.prod(len(a.settings) for a in axes)
    longest = max((len(a.settings) for a in axes), default=1)
    order = [(i, j) for j in range(1, longest) for i, a in enumerate(axes) if j < len(a.settings)]
    anchor = {k: v for a in axes for k, v in a.settings[0].items()}
    results: dict[tuple[int, int] | None, _Result] = {None: _check(load, run, anchor, full=True)}
    report = StudyCheck(n_points)
    for n, (i, j) in enumerate(order):
        if n >= MAX_CHECKS - 1:
            report.unchecked = len(order) - n
            break
        full = n < MAX_FULL
        report.load_only += not full
        results[(i, j)] = _check(load, run, {**anchor, **axes[i].settings[j]}, full)
    seen: dict[tuple[str, str], None] = {}
    for res in results.values():
        for stage, found in (("load", res.load), ("run", res.run)):
            for p in found or ():
                seen.setdefault((p, stage))
    for problem, stage in seen:
        report.problems.append(_attribute(problem, stage, axes, results, n_points, name))
    if report.unchecked:
        print(
            f"note: {source}: {report.unchecked:,} of the study's {len(order) + 1:,} settings are checked only when "
            f"their runs start (a study's check covers {MAX_CHECKS:,}); a run that fails is marked failed in the "
            "index, with its error",
            file=sys.stderr,
        )
    return report


def _lines(e: ScenarioError) -> list[str]:
    return [x for x in str(e).splitlines() if x.strip()]


def _check(load: Any, run: Any, overrides: dict[str, Any], full: bool) -> _Result:
    try:
        loaded = load(overrides)
    except ScenarioError as e:
        return _Result(load=_lines(e))
    if not full:
        return _Result(load=[])
    try:
        run(loaded)
    except ScenarioError as e:
        return _Result(load=[], run=_lines(e))
    return _Result(load=[], run=[])


def _attribute(
    problem: str, stage: str, axes: list[Axis], results: dict, n_points: int, name: Any
) -> tuple[str, int, str]:
    """(where, how many points, problem): which settings a problem is put down to (module docstring)."""

    def shows(i: int, j: int) -> bool | None:
        res = results.get((i, j) if j else None)
        return None if res is None else res.shows(problem, stage)

    in_anchor = results[None].shows(problem, stage)
    picked: list[list[int]] = []
    for i, a in enumerate(axes):
        marks = [shows(i, j) for j in range(len(a.settings))]
        picked.append([j for j, m in enumerate(marks) if (m is not False if in_anchor else m is True)])
    if in_anchor:
        count = math.prod(len(p) for p in picked)
        narrowed = [(i, p) for i, p in enumerate(picked) if len(p) < len(axes[i].settings)]
        joint = " and "
    else:
        count = n_points - math.prod(len(a.settings) - len(p) for a, p in zip(axes, picked, strict=True))
        narrowed = [(i, p) for i, p in enumerate(picked) if p]
        joint = " or "
    example = name(_example(axes, picked, in_anchor))
    if not axes:
        return "", count, problem
    if count == 1:
        return f"point {example}", count, problem
    if not narrowed:
        return f"all {count:,} points (e.g. {example})", count, problem
    said = joint.join(_settings_text(axes[i], p, name) for i, p in narrowed)
    return f"{count:,} of {n_points:,} points ({said}; e.g. {example})", count, problem


def _settings_text(axis: Axis, js: list[int], name: Any) -> str:
    shown = [name(axis.settings[j]) for j in js[:3]]
    more = f" and {len(js) - 3} more" if len(js) > 3 else ""
    if len(js) == 1:
        return shown[0]
    return f"{axis.name}: {' | '.join(shown)}{more}"


def _example(axes: list[Axis], picked: list[list[int]], in_anchor: bool | None) -> dict[str, Any]:
    """The overrides of one point that shows the problem."""
    overrides: dict[str, Any] = {}
    if in_anchor:
        for a, p in zip(axes, picked, strict=True):
            overrides.update(a.settings[p[0]])
    else:
        i = next(i for i, p in enumerate(picked) if p)
        for k, a in enumerate(axes):
            overrides.update(a.settings[picked[i][0] if k == i else 0])
    return overrides


def raise_problems(report: StudyCheck) -> None:
    if report.problems:
        raise ScenarioError(report.message())


__all__ = ["MAX_CHECKS", "MAX_FULL", "Axis", "StudyCheck", "axes_of", "check_settings", "raise_problems"]
