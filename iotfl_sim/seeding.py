"""Independent random streams derived from (seed, concern, ids...).

Every random draw of a run comes from a stream named by what it is for, so that adding a plot,
switching executor or evaluating more often never shifts another draw.
"""

from __future__ import annotations

import zlib

import numpy as np


def _concern_id(concern: str) -> int:
    return zlib.crc32(concern.encode())


def stream(seed: int, concern: str, *ids: int) -> np.random.Generator:
    """A generator for ``concern`` (e.g. "memory") and ids (e.g. device, round)."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, _concern_id(concern), *map(int, ids)])))


def int_seed(seed: int, concern: str, *ids: int) -> int:
    """A 63-bit integer seed for libraries that take one (torch)."""
    return int(np.random.SeedSequence([seed, _concern_id(concern), *map(int, ids)]).generate_state(2, np.uint64)[0] >> 1)
