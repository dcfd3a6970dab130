"""Uniform selection among a large fleet's selectable devices without touching every device.

A round of a million-device fleet picks ~100 clients; building the mask of every selectable device
(online, not busy, not known gone, eligible) costs O(devices) per round and asks the availability
model about every device. ``sample_uniform`` instead draws candidate ids uniformly from ``[0, n)``,
checks only the drawn ids, and accepts them in draw order until ``k`` distinct ones pass: the first
``k`` distinct accepted ids of an i.i.d. uniform sequence are a uniformly random ``k``-subset of the
accepted set. When passing devices are rare it gives up (returns None) after a budget of draws
comparable to one full mask, and the caller builds the mask. Whether and when it gives up depends
only on the pattern of accepted / rejected / repeated draws, which relabelling the accepted devices
does not change, so the result is uniform in both cases.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

# Fleets of at least this many devices select by sampling (``sim.view.ServerView.sample_selectable``); smaller ones
# build the full mask, with the draws every recorded run and test was made with.
SAMPLED_SELECTION_MIN_DEVICES = 100_000

_MAX_BATCH = 1 << 20


@dataclass
class SampleStats:
    """What one call of ``sample_uniform`` saw, kept by the caller to size the next call's checks."""

    rate: float = 0.5  # fraction of the distinct drawn ids that were admitted


def sample_uniform(
    n: int,
    k: int,
    rng: np.random.Generator,
    accept: Callable[[np.ndarray], np.ndarray],
    budget: int | None = None,
    stats: SampleStats | None = None,
) -> np.ndarray | None:
    """``k`` distinct ids of ``[0, n)``, sorted, uniformly at random among those ``accept`` admits.

    ``accept(ids)`` returns a bool mask over distinct int64 ids (each id is asked at most once, and
    its answer must not depend on the other ids asked with it). Returns None, having drawn at most
    about ``budget`` ids (default ``n // 8``), when fewer than ``k`` admitted ids were found by then.

    The ids drawn depend only on ``rng`` and the answers; ``stats`` (the admitted fraction of the last
    call) only sizes the chunks ``accept`` is asked about, so that little more than the ids needed
    are checked (asking about a Markov device first costs a walk of its chain up to now).
    """
    if k <= 0:
        return np.empty(0, dtype=np.int64)
    if n <= 0:
        return None
    budget = max(n // 8, 4 * k) if budget is None else budget
    stats = SampleStats() if stats is None else stats
    found: list[np.ndarray] = []
    seen = np.empty(0, dtype=np.int64)
    got = drawn = asked = admitted = 0
    while got < k:
        left = budget - drawn
        if left <= 0:
            return None
        p = (got + 1) / (drawn + 2)  # admitted fraction of the draws so far (Laplace): at first 1/2
        want = math.ceil(1.25 * (k - got) / p) + 16
        if drawn and want > 8 * left:
            return None  # the expected draws far exceed the budget: the mask is cheaper
        m = min(want, left, _MAX_BATCH)
        ids = rng.integers(0, n, size=m, dtype=np.int64)
        drawn += m
        uniq, first = np.unique(ids, return_index=True)
        ids = uniq[np.argsort(first, kind="stable")]  # distinct, in order of first draw
        if seen.size:
            ids = ids[~np.isin(ids, seen)]
        seen = np.concatenate([seen, ids])
        pos = 0
        while pos < ids.size and got < k:  # ask in draw order, about as many as should be needed
            rate = stats.rate if not asked else (admitted + 1) / (asked + 2)
            chunk = ids[pos : pos + math.ceil(1.1 * (k - got) / max(rate, 1e-3)) + 8]
            pos += chunk.size
            ok = chunk[accept(chunk)]
            asked += chunk.size
            admitted += ok.size
            take = ok[: k - got]
            found.append(take)
            got += take.size
    stats.rate = admitted / asked
    return np.sort(np.concatenate(found))
