"""Which target accuracies the tables and figures use: the ones given (``--targets``), else the runs' own.

A run declares its targets in its scenario (``server.target_accuracies``; summary.json's ``to_accuracy``
holds the same keys). When the runs of a selection declare different sets, every target any run declared
is used (the sorted union): a crossing is read from rounds.csv for any target, so no run loses a column,
and the note says which runs declared what. Runs that declare nothing (folders written without a scenario)
count for nothing; when none declares any, ``FALLBACK_TARGETS`` apply.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from analysis.rundir import Run, declared_targets

__all__ = ["FALLBACK_TARGETS", "Targets", "resolve_targets", "target_label"]

FALLBACK_TARGETS = (0.6, 0.8)


@dataclass(frozen=True)
class Targets:
    """The targets (fractions, ascending) and where they come from, in words (for notes)."""

    values: tuple[float, ...]
    source: str
    disagree: bool = False


def target_label(t: float) -> str:
    """A target as tables and figures name it: ``80%``."""
    return f"{100 * t:g}%"


def _labels(ts: Iterable[float]) -> str:
    return " ".join(target_label(t) for t in ts)


def resolve_targets(runs: Iterable[Run], given: Sequence[float] | None = None) -> Targets:
    """``given`` when not None/empty; else the runs' declared targets (their union when they differ)."""
    if given:
        return Targets(tuple(sorted(set(given))), "given (--targets)")
    counts: dict[tuple[float, ...], int] = {}
    for run in runs:
        ts = declared_targets(run)
        if ts is not None:
            counts[ts] = counts.get(ts, 0) + 1
    if not counts:
        return Targets(FALLBACK_TARGETS, "no run declares server.target_accuracies: the default of compare")
    if len(counts) == 1:
        return Targets(next(iter(counts)), "the runs' server.target_accuracies")
    union = tuple(sorted({t for ts in counts for t in ts}))
    sets = "; ".join(f"{_labels(ts)} in {n} run{'s' * (n != 1)}" for ts, n in counts.items())
    return Targets(union, f"the runs' server.target_accuracies differ ({sets}): every target any run declared", True)
