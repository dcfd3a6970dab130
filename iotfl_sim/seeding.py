"""Independent random streams derived from (seed, concern, ids...).

Every random draw of a run comes from a stream named by what it is for, so that adding a plot,
switching executor or evaluating more often never shifts another draw.
"""

from __future__ import annotations

import threading
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


# ``momentary``: the generator ``stream`` gives, its state computed in Python. Building a SeedSequence, a PCG64 and a
# Generator costs ~25-40 us, most of it numpy's Python-level argument handling; a run draws two or three per task
# (memory, compute jitter, a lossy link). numpy's SeedSequence (its entropy pool mixing and ``generate_state``) and
# PCG64's seeding from it (``pcg64_set_seed``: state and increment from the first and last two 64-bit words) are
# fixed, documented algorithms; the words here are checked against numpy's in ``tests/test_seeding.py``.

_M32 = 0xFFFFFFFF
_M128 = (1 << 128) - 1
_INIT_A, _MULT_A, _INIT_B, _MULT_B = 0x43B0D7E5, 0x931E8875, 0x8B51F9DD, 0x58F38DED
_MIX_L, _MIX_R = 0xCA01F9DD, 0x4973F715
_PCG_MULT = 0x2360ED051FC65DA44385DF649FCCF645


def _powers(init: int, mult: int, n: int) -> list[int]:
    out = [init]
    for _ in range(n - 1):
        out.append((out[-1] * mult) & _M32)
    return out


_HA = _powers(_INIT_A, _MULT_A, 64)  # the pool hash's constant before its k-th use: _HA[k], after it: _HA[k + 1]
_HB = _powers(_INIT_B, _MULT_B, 9)  # generate_state's, likewise


def _hashmix(value: int, k: int) -> int:
    value = ((value ^ _HA[k]) * _HA[k + 1]) & _M32
    return value ^ (value >> 16)


def _mix(x: int, y: int) -> int:
    r = (_MIX_L * x - _MIX_R * y) & _M32
    return r ^ (r >> 16)


_prefixes: dict[tuple[int, str], tuple[int, ...]] = {}


def _prefix(seed: int, concern: str) -> tuple[int, ...]:
    """What the pool mixing of entropy ``[seed, concern, a, b, ...]`` owes to its first two words alone: the pool's
    words 0 and 1 after the first two mixing rounds, and the four hashes of them mixed into words 2 and 3."""
    got = _prefixes.get((seed, concern))
    if got is None:
        m0, m1 = _hashmix(int(seed), 0), _hashmix(_concern_id(concern), 1)
        m1 = _mix(m1, _hashmix(m0, 4))
        a5, a6 = _hashmix(m0, 5), _hashmix(m0, 6)
        m0 = _mix(m0, _hashmix(m1, 7))
        b8, b9 = _hashmix(m1, 8), _hashmix(m1, 9)
        got = _prefixes[(seed, concern)] = (m0, m1, a5, a6, b8, b9)
    return got


def _pool(seed: int, concern: str, words: tuple[int, ...]) -> list[int]:
    """numpy SeedSequence's pool for entropy ``[seed, crc32(concern), *words]`` (each < 2**32, at least two words)."""
    m0, m1, a5, a6, b8, b9 = _prefix(seed, concern)
    m2 = _mix(_mix(_hashmix(words[0], 2), a5), b8)
    m3 = _mix(_mix(_hashmix(words[1], 3), a6), b9)
    m0, m1, m3 = _mix(m0, _hashmix(m2, 10)), _mix(m1, _hashmix(m2, 11)), _mix(m3, _hashmix(m2, 12))
    m0, m1, m2 = _mix(m0, _hashmix(m3, 13)), _mix(m1, _hashmix(m3, 14)), _mix(m2, _hashmix(m3, 15))
    pool = [m0, m1, m2, m3]
    k = 16
    for w in words[2:]:  # entropy beyond the pool's four words: mixed into each
        for i in range(4):
            pool[i] = _mix(pool[i], _hashmix(w, k))
            k += 1
    return pool


def _pcg64_state(p: list[int]) -> tuple[int, int]:
    """PCG64's (state, increment) seeded from the pool's ``generate_state(4, uint64)``."""
    w = []
    for i in range(8):
        v = ((p[i & 3] ^ _HB[i]) * _HB[i + 1]) & _M32
        w.append(v ^ (v >> 16))
    initstate = (w[1] << 96) | (w[0] << 64) | (w[3] << 32) | w[2]  # 64-bit words little-endian; seed[0] the high half
    inc = ((((w[5] << 96) | (w[4] << 64) | (w[7] << 32) | w[6]) << 1) | 1) & _M128
    return ((inc + initstate) * _PCG_MULT + inc) & _M128, inc  # srandom: step, add the initial state, step


def _pcg64_state_of_two(prefix: tuple[int, ...], a: int, b: int) -> tuple[int, int]:
    """``_pcg64_state(_pool(seed, concern, (a, b)))`` written out: the draws of every task (memory, compute jitter)
    take this path, where each function call costs as much as the arithmetic."""
    m0, m1, a5, a6, b8, b9 = prefix
    ha, hb, ml, mr, m32 = _HA, _HB, _MIX_L, _MIX_R, _M32
    v = ((a ^ ha[2]) * ha[3]) & m32
    m2 = v ^ (v >> 16)
    r = (ml * m2 - mr * a5) & m32
    m2 = r ^ (r >> 16)
    r = (ml * m2 - mr * b8) & m32
    m2 = r ^ (r >> 16)
    v = ((b ^ ha[3]) * ha[4]) & m32
    m3 = v ^ (v >> 16)
    r = (ml * m3 - mr * a6) & m32
    m3 = r ^ (r >> 16)
    r = (ml * m3 - mr * b9) & m32
    m3 = r ^ (r >> 16)
    v = ((m2 ^ ha[10]) * ha[11]) & m32
    r = (ml * m0 - mr * (v ^ (v >> 16))) & m32
    m0 = r ^ (r >> 16)
    v = ((m2 ^ ha[11]) * ha[12]) & m32
    r = (ml * m1 - mr * (v ^ (v >> 16))) & m32
    m1 = r ^ (r >> 16)
    v = ((m2 ^ ha[12]) * ha[13]) & m32
    r = (ml * m3 - mr * (v ^ (v >> 16))) & m32
    m3 = r ^ (r >> 16)
    v = ((m3 ^ ha[13]) * ha[14]) & m32
    r = (ml * m0 - mr * (v ^ (v >> 16))) & m32
    m0 = r ^ (r >> 16)
    v = ((m3 ^ ha[14]) * ha[15]) & m32
    r = (ml * m1 - mr * (v ^ (v >> 16))) & m32
    m1 = r ^ (r >> 16)
    v = ((m3 ^ ha[15]) * ha[16]) & m32
    r = (ml * m2 - mr * (v ^ (v >> 16))) & m32
    m2 = r ^ (r >> 16)
    v = ((m0 ^ hb[0]) * hb[1]) & m32
    w0 = v ^ (v >> 16)
    v = ((m1 ^ hb[1]) * hb[2]) & m32
    w1 = v ^ (v >> 16)
    v = ((m2 ^ hb[2]) * hb[3]) & m32
    w2 = v ^ (v >> 16)
    v = ((m3 ^ hb[3]) * hb[4]) & m32
    w3 = v ^ (v >> 16)
    v = ((m0 ^ hb[4]) * hb[5]) & m32
    w4 = v ^ (v >> 16)
    v = ((m1 ^ hb[5]) * hb[6]) & m32
    w5 = v ^ (v >> 16)
    v = ((m2 ^ hb[6]) * hb[7]) & m32
    w6 = v ^ (v >> 16)
    v = ((m3 ^ hb[7]) * hb[8]) & m32
    w7 = v ^ (v >> 16)
    inc = ((((w5 << 96) | (w4 << 64) | (w7 << 32) | w6) << 1) | 1) & _M128
    return ((inc + ((w1 << 96) | (w0 << 64) | (w3 << 32) | w2)) * _PCG_MULT + inc) & _M128, inc


def _mix_np(x: np.ndarray, y: np.ndarray | int) -> np.ndarray:
    r = (np.uint64(_MIX_L) * x - np.uint64(_MIX_R) * y) & np.uint64(_M32)  # uint64 wraps mod 2**64: exact mod 2**32
    return r ^ (r >> np.uint64(16))


def _hashmix_np(x: np.ndarray, k: int) -> np.ndarray:
    v = ((x ^ np.uint64(_HA[k])) * np.uint64(_HA[k + 1])) & np.uint64(_M32)
    return v ^ (v >> np.uint64(16))


_primed: dict[tuple[int, str, int, int], tuple[int, int]] = {}
PRIMED_MAX = 100_000  # states computed ahead and not used yet (a task that failed first): dropped beyond this


def prime(seed: int, concern: str, firsts: np.ndarray, second: int) -> None:
    """Compute ahead, in one vectorised pass, the states ``momentary(seed, concern, a, second)`` will need for each
    ``a`` of ``firsts`` (a round's devices): ~2 us a key instead of ~12. Keys outside one 32-bit word are left to
    ``momentary``; a primed state is the one it would compute (``tests/test_seeding.py``), so priming never changes
    a draw."""
    a = np.asarray(firsts, dtype=np.int64)
    if not 0 <= seed <= _M32 or not 0 <= second <= _M32 or not a.size or a.min() < 0 or a.max() > _M32:
        return
    if len(_primed) > PRIMED_MAX:
        _primed.clear()
    m0, m1, a5, a6, b8, b9 = _prefix(seed, concern)
    m3s = _mix(_mix(_hashmix(second, 3), a6), b9)  # the part of word 3 that is the same for every key
    m2 = _mix_np(_mix_np(_hashmix_np(a.astype(np.uint64), 2), a5), b8)
    v0 = _mix_np(np.full_like(m2, m0), _hashmix_np(m2, 10))
    v1 = _mix_np(np.full_like(m2, m1), _hashmix_np(m2, 11))
    m3 = _mix_np(np.full_like(m2, m3s), _hashmix_np(m2, 12))
    v0, v1, m2 = _mix_np(v0, _hashmix_np(m3, 13)), _mix_np(v1, _hashmix_np(m3, 14)), _mix_np(m2, _hashmix_np(m3, 15))
    pool = (v0, v1, m2, m3)
    words = []
    for i in range(8):
        v = ((pool[i & 3] ^ np.uint64(_HB[i])) * np.uint64(_HB[i + 1])) & np.uint64(_M32)
        words.append((v ^ (v >> np.uint64(16))).tolist())
    for d, w0, w1, w2, w3, w4, w5, w6, w7 in zip(a.tolist(), *words, strict=True):
        inc = ((((w5 << 96) | (w4 << 64) | (w7 << 32) | w6) << 1) | 1) & _M128
        state = ((inc + ((w1 << 96) | (w0 << 64) | (w3 << 32) | w2)) * _PCG_MULT + inc) & _M128
        _primed[(seed, concern, d, second)] = (state, inc)


_local = threading.local()


def momentary(seed: int, concern: str, *ids: int) -> np.random.Generator:
    """``stream(seed, concern, *ids)``'s generator, for draws made at once: one generator per thread, reseeded by each
    call, so it holds its stream only until the next call (never keep it). Several times faster than ``stream``."""
    if len(ids) == 2 and 0 <= seed <= _M32:
        a, b = int(ids[0]), int(ids[1])
        if 0 <= a <= _M32 and 0 <= b <= _M32:
            got = _primed.pop((seed, concern, a, b), None) if _primed else None
            if got is None:
                got = _pcg64_state_of_two(_prefixes.get((seed, concern)) or _prefix(seed, concern), a, b)
            state, inc = got
        else:
            return stream(seed, concern, *ids)
    else:
        words = tuple(map(int, ids))
        if len(words) < 2 or not 0 <= seed <= _M32 or not all(0 <= w <= _M32 for w in words) or len(words) > 12:
            return stream(seed, concern, *words)  # entropy that is not one 32-bit word per id: numpy's own
        state, inc = _pcg64_state(_pool(seed, concern, words))
    gen = getattr(_local, "gen", None)
    if gen is None:
        gen = _local.gen = np.random.Generator(np.random.PCG64(0))
    gen.bit_generator.state = {
        "bit_generator": "PCG64", "state": {"state": state, "inc": inc}, "has_uint32": 0, "uinteger": 0,
    }
    return gen
