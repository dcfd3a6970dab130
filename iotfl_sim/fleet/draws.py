"""Counter-based random draws for availability (``fleet.availability``), the same bits in Python and numpy.

Random draws. Every draw is a pure function of (seed, "avail", device, counter), where the counter
is the round (bernoulli), the flip number (markov: 0 draws the initial state, k the k-th
duration) or a fixed slot (diurnal start hour: 1 and 2). The draw is a counter-based SplitMix64,
``mix(mix(key + device * G) + counter * G)`` with ``key = int_seed(seed, "avail")``: it stands in
for ``seeding.stream(seed, "avail", device, counter)``, which costs ~20 us to build per device and
draw (20 s for a 1M-device mask), where this costs ~1 us in Python and a few ns per element in
numpy. The same integer arithmetic runs in Python (scalar queries) and numpy (vector queries), and
exponential durations use a log made of basic float operations only, so both paths give
bit-identical times: an answer never depends on which devices were asked about together, in
which order, or through which path.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

M64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15
C1 = 0xBF58476D1CE4E5B9
C2 = 0x94D049BB133111EB
TWO53 = 1 << 53


def mix(z: int) -> int:
    """SplitMix64's finaliser on a Python int (mod 2**64)."""
    z &= M64
    z = ((z ^ (z >> 30)) * C1) & M64
    z = ((z ^ (z >> 27)) * C2) & M64
    return z ^ (z >> 31)


def mix_np(z: np.ndarray, tmp: np.ndarray | None = None) -> np.ndarray:
    """SplitMix64's finaliser, in place on a uint64 array (wrapping arithmetic); ``tmp``: scratch space."""
    tmp = np.right_shift(z, 30, out=tmp)
    z ^= tmp
    z *= C1
    np.right_shift(z, 27, out=tmp)
    z ^= tmp
    z *= C2
    np.right_shift(z, 31, out=tmp)
    z ^= tmp
    return z


def device_keys(key: int, devices: np.ndarray) -> np.ndarray:
    z = devices.astype(np.uint64) * np.uint64(GAMMA)
    z += np.uint64(key & M64)
    return mix_np(z)


class LazyKeys:
    """The device keys ``device_keys(key, members)`` of a group, computed when indexed (int, slice or
    index array) instead of stored: a Markov group of millions asks about a few devices a round."""

    def __init__(self, key: int, lo: int, n: int, members: np.ndarray | None = None) -> None:
        self.key, self.lo, self.n, self.members = key, lo, n, members
        self.shape = (n,)

    def _ids(self, li: Any) -> np.ndarray:
        if isinstance(li, slice):
            li = np.arange(*li.indices(self.n), dtype=np.int64)
        li = np.asarray(li, dtype=np.int64)
        return self.members[li] if self.members is not None else li + self.lo

    def __getitem__(self, li: Any) -> Any:
        if isinstance(li, int | np.integer):
            d = int(self.members[li]) if self.members is not None else self.lo + int(li)
            return mix(self.key + d * GAMMA)  # == device_keys(key, [d])[0]
        return device_keys(self.key, self._ids(li))


def draw(kd: int, counter: int) -> int:
    """53 random bits for (device key, counter)."""
    return mix(kd + counter * GAMMA) >> 11


def draw_np(kd: np.ndarray, counter: np.ndarray | int) -> np.ndarray:
    if isinstance(counter, np.ndarray):
        z = counter.astype(np.uint64) * np.uint64(GAMMA)
        z += kd
    else:
        z = kd + np.uint64((counter * GAMMA) & M64)
    mix_np(z)
    z >>= np.uint64(11)
    return z


# -ln(1 - m / 2**53) from basic float operations only (frexp, a table, a short series), so that
# Python floats and numpy arrays agree to the bit; np.log1p may use SIMD code that differs from
# math.log1p in the last place, which would make a device's flip times depend on the code path.
TAB_N = 1024
CENTRES = [0.5 + (i + 0.5) / (2 * TAB_N) for i in range(TAB_N)]
LOGS = [math.log(c) for c in CENTRES]
CENTRES_NP = np.array(CENTRES)
LOGS_NP = np.array(LOGS)
LN2 = math.log(2.0)
THIRD = 1.0 / 3.0


def neglog1m(m: int) -> float:
    f, b = math.frexp(float(TWO53 - m))
    i = int((f - 0.5) * (2.0 * TAB_N))
    c = CENTRES[i]
    r = (f - c) / c
    p = r * (1.0 + r * (-0.5 + r * (THIRD + r * (-0.25 + r * 0.2))))
    return (53 - b) * LN2 - (LOGS[i] + p)


def neglog1m_np(m: np.ndarray) -> np.ndarray:
    f, b = np.frexp((np.uint64(TWO53) - m).astype(np.float64))
    i = ((f - 0.5) * (2.0 * TAB_N)).astype(np.intp)
    c = CENTRES_NP[i]
    r = (f - c) / c
    p = r * (1.0 + r * (-0.5 + r * (THIRD + r * (-0.25 + r * 0.2))))
    return (53 - b).astype(np.float64) * LN2 - (LOGS_NP[i] + p)


def threshold(p: float) -> int:
    """Integer threshold so that ``m < thr`` <=> ``m / 2**53 < p`` for 53-bit m."""
    return math.ceil(min(max(p, 0.0), 1.0) * TWO53)


# ---------------------------------------------------------------- per-group implementations
