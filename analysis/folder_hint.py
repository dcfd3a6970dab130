"""What to tell a user who gave ``plot`` a folder that is neither a run nor a study: that a study folder works too,
and which run or study lies a level or two down (they gave ``runs/``, or the project folder).

The search is bounded, whatever the folder (a home directory, a disk): two levels, at most ``MAX_ENTRIES`` entries
read in all, and it stops at the ``MAX_FOUND``-th find.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from analysis.study import is_study_dir

__all__ = ["not_a_run_message", "runs_and_studies_inside"]

MAX_DEPTH = 2
MAX_ENTRIES = 2000
MAX_FOUND = 5


def _kind(p: Path) -> str | None:
    if is_study_dir(p):
        return "study"
    return "run" if (p / "rounds.csv").is_file() else None


def runs_and_studies_inside(root: Path) -> list[tuple[str, Path]]:
    """("run" | "study", folder) for the runs and studies one or two levels below ``root``, breadth first, in name
    order within each folder read (a folder's first entries only, when it has more than the budget left)."""
    found: list[tuple[str, Path]] = []
    budget = MAX_ENTRIES
    level = [root]
    for _ in range(MAX_DEPTH):
        below: list[Path] = []
        for folder in level:
            names: list[str] = []
            try:
                with os.scandir(folder) as it:
                    for entry in it:
                        if budget <= 0:
                            break
                        budget -= 1
                        try:
                            if entry.is_dir():
                                names.append(entry.name)
                        except OSError:
                            continue
            except OSError:
                continue
            for name in sorted(names):
                p = folder / name
                kind = _kind(p)
                if kind is None:
                    below.append(p)
                    continue
                found.append((kind, p))
                if len(found) >= MAX_FOUND:
                    return found
        level = below
    return found


def not_a_run_message(path: Path) -> str:
    """One line for a folder without rounds.csv given as a run: what it lacks, that a study folder would do, and
    the run or study inside it (a study first), as the command to type."""
    head = (
        f"{path}: neither a run folder (no rounds.csv) nor a study folder (no study.json or index.csv), the two "
        "that `plot` takes"
    )
    found = runs_and_studies_inside(path)
    if not found:
        return f"{head}; give a folder that `iotfl-sim run` or `iotfl-sim sweep` printed"
    kind, first = next(((k, p) for k, p in found if k == "study"), found[0])
    same = [p for k, p in found if k == kind]
    what = f"is a {kind}" if len(same) == 1 else f"are {'studies' if kind == 'study' else 'runs'}, the first"
    return f"{head}; inside it {what}: iotfl-sim plot {shlex.quote(str(first))}"
