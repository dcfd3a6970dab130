"""A figure the AdaptiveFL claims read that ``claims.figures`` does not compute: the spread of the level models'
accuracy along the learning curve (AdaptiveFL's Fig. 2, "the best inference performance with the least
variations", adaptivefl_dac24.txt:254).

Fig. 2 draws each method's "avg" accuracy as a solid line; the same authors' FlexFL paper (flexfl.txt:258) says
of its identical figure that the band around the line spans "the highest and lowest accuracies among all
models". The variation a reader sees is that band, so the figure here is its width: at every evaluated round,
the highest minus the lowest accuracy of the method's level models (the models its ``acc_avg`` averages),
averaged over the evaluated rounds.
"""

from __future__ import annotations

import math
import re

import numpy as np

# The level models each method's ``acc_avg`` averages (``EvalTarget.is_level``), by ``summary.json``'s algorithm:
# AdaptiveFL's heads S_1 / M_1 / L_1 (its ``avg_over: heads`` default; the pool's S_2, S_3, M_2, M_3 are not
# levels), FlexFL's small / medium / large, HeteroFL's and Decoupled's levels a-e, ScaleFL's l1, l2, ...
LEVEL_COLUMNS: dict[str, re.Pattern[str]] = {
    "adaptivefl": re.compile(r"acc_[SML]1"),
    "flexfl": re.compile(r"acc_(small|medium|large)"),
    "heterofl": re.compile(r"acc_[a-e]"),
    "decoupled": re.compile(r"acc_[a-e]"),
    "scalefl": re.compile(r"acc_l[0-9]+"),
}


def level_spread_run(algorithm: str, rounds: dict[str, np.ndarray]) -> float:
    """Mean over the evaluated rounds of (highest - lowest) level-model accuracy, as a fraction; NaN for a
    method without levels (FedAvg), with fewer than two level columns, or with no round where every level
    was evaluated. ``rounds``: rounds.csv's columns (``analysis.rundir.Run.rounds``)."""
    pattern = LEVEL_COLUMNS.get(algorithm)
    if pattern is None:
        return math.nan
    cols = [v for c, v in rounds.items() if pattern.fullmatch(c)]
    if len(cols) < 2:
        return math.nan
    table = np.vstack(cols)  # (levels, rounds)
    evaluated = np.isfinite(table).all(axis=0)
    if not evaluated.any():
        return math.nan
    at = table[:, evaluated]
    return float(np.mean(at.max(axis=0) - at.min(axis=0)))
