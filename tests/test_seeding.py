"""``seeding.momentary``: numpy's own streams, their state computed in Python."""

from __future__ import annotations

import random

import numpy as np
import pytest

from iotfl_sim.seeding import momentary, stream


def _numpy_state(seed: int, concern: str, ids: list[int]) -> dict:
    """The reference: numpy's SeedSequence and PCG64 seeding, built as ``stream`` builds them."""
    import zlib

    entropy = [seed, zlib.crc32(concern.encode()), *ids]
    return np.random.PCG64(np.random.SeedSequence(entropy)).state


def test_the_state_is_numpys_for_every_kind_of_key():
    """Random keys of 0 to 13 ids, words at the edges (0, 2**32 - 1) and beyond one word (numpy's own path then):
    the generator's state is the one numpy's SeedSequence and PCG64 give."""
    rng = random.Random(11)
    for _ in range(3000):
        n = rng.choice([0, 1, 2, 2, 2, 3, 4, 7, 12, 13])
        ids = [rng.choice([0, 1, 2**32 - 1, rng.randrange(2**32), rng.randrange(2**32, 2**40)]) for _ in range(n)]
        seed = rng.choice([0, 1, 2**32 - 1, 2**32, rng.randrange(2**32), rng.randrange(2**33, 2**62)])
        concern = rng.choice(["memory", "compute", "link", "", "é"])
        assert momentary(seed, concern, *ids).bit_generator.state == _numpy_state(seed, concern, ids), (seed, concern, ids)


def test_numpy_integers_as_ids_and_seed():
    assert momentary(np.int64(7), "memory", np.int64(123), np.int32(4)).bit_generator.state == _numpy_state(
        7, "memory", [123, 4]
    )


def test_draws_equal_streams_draws():
    """The draws a run makes from it (normal, lognormal, exponential, negative binomial) are ``stream``'s."""
    for d in range(50):
        assert momentary(3, "memory", d, 9).normal(0.0, 0.4) == stream(3, "memory", d, 9).normal(0.0, 0.4)
        assert momentary(3, "compute", d, 9).lognormal(0.0, 0.2) == stream(3, "compute", d, 9).lognormal(0.0, 0.2)
        assert momentary(3, "compute", d, 2).exponential(1.0) == stream(3, "compute", d, 2).exponential(1.0)
        a, b = momentary(3, "link", d, 9, 1), stream(3, "link", d, 9, 1)
        assert a.negative_binomial(40, 0.9) == b.negative_binomial(40, 0.9)
        assert a.lognormal(0.0, 0.3) == b.lognormal(0.0, 0.3)


def test_each_call_reseeds():
    """The shared generator holds the last call's stream: a draw after a second call is the second stream's."""
    first = momentary(0, "memory", 1, 1)
    momentary(0, "memory", 2, 1)
    assert first.normal() == stream(0, "memory", 2, 1).normal()


def test_negative_ids_fail_as_numpy_does():
    with pytest.raises(ValueError):
        momentary(0, "memory", -1, 3)


def test_primed_states_are_the_ones_computed_one_by_one():
    """A round's keys primed in one vectorised pass give numpy's states, each used once; keys never primed, or out
    of one word, still come out right."""
    from iotfl_sim import seeding

    rng = np.random.default_rng(4)
    for seed, concern, rnd in ((0, "memory", 0), (2**32 - 1, "compute", 2**32 - 1), (77, "memory", 12345)):
        devices = np.concatenate([[0, 2**32 - 1], rng.integers(0, 2**32, 40)])
        seeding.prime(seed, concern, devices, rnd)
        for d in devices.tolist():
            assert momentary(seed, concern, d, rnd).bit_generator.state == _numpy_state(seed, concern, [d, rnd])
            assert (seed, concern, d, rnd) not in seeding._primed  # used up
        seeding.prime(seed, concern, np.array([2**32, 5]), rnd)  # a key beyond one word: nothing primed
        assert momentary(seed, concern, 5, rnd).bit_generator.state == _numpy_state(seed, concern, [5, rnd])
