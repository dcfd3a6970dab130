"""Device availability: config models, the vectorised lazy runtime, and trace importers."""

from __future__ import annotations

import math
import os
import pickle
import random

import numpy as np
import pytest
from pydantic import ValidationError

from iotfl_sim.fleet.availability import build_availability
from iotfl_sim.fleet.draws import draw, draw_np, neglog1m, neglog1m_np
from iotfl_sim.fleet.traces import TraceError, load_csv_trace, load_fedscale_trace
from iotfl_sim.scenario.availability import (
    AlwaysAvailability,
    MarkovAvailability,
    TraceAvailability,
    parse_availability,
)

MARKOV = {"kind": "markov", "mean_on_s": 3600.0, "mean_off_s": 1800.0}


def one_group(cfg: dict, n: int, seed: int = 7, base_dir=None):
    return build_availability([cfg], np.zeros(n, dtype=np.int32), seed, base_dir)


def check_offline_at(av, d: int, t: float, rnd: int = 0) -> float:
    """offline_at agrees with online: online just before it, offline at it."""
    end = av.offline_at(d, t, rnd)
    assert end >= t
    if end == t:
        assert not av.online(d, t, rnd)
    else:
        assert av.online(d, t, rnd)
        if math.isfinite(end):
            assert av.online(d, float(np.nextafter(end, -math.inf)), rnd)
            assert not av.online(d, end, rnd)
    return end


# ---------------------------------------------------------------- config


def test_config_union_and_defaults() -> None:
    assert isinstance(parse_availability({"kind": "always"}), AlwaysAvailability)
    assert AlwaysAvailability().kind == "always"
    m = parse_availability({"kind": "markov"})
    assert isinstance(m, MarkovAvailability) and m.mean_on_s == 3600 and m.start_online is None
    t = parse_availability({"kind": "trace", "format": "csv", "path": "x.csv"})
    assert isinstance(t, TraceAvailability) and t.mapping == "modulo"
    assert MarkovAvailability.model_fields["mean_on_s"].description
    for bad in (
        {"kind": "sometimes"},
        {"kind": "bernoulli", "p": 1.5},
        {"kind": "markov", "mean_on_s": 0},
        {"kind": "diurnal", "online_hours": 25},
        {"kind": "always", "p": 0.5},
        {"kind": "trace", "path": "x.csv"},
    ):
        with pytest.raises(ValidationError):
            parse_availability(bad)


# ---------------------------------------------------------------- draws


def test_scalar_and_vector_draws_agree_to_the_bit() -> None:
    m = np.random.default_rng(0).integers(0, 2**53, 20000, dtype=np.uint64)
    m[:2] = [0, 2**53 - 1]
    vec = neglog1m_np(m)
    assert np.array_equal(vec, [neglog1m(int(x)) for x in m])
    assert np.allclose(vec, -np.log1p(-(m.astype(np.float64) / 2**53)), rtol=1e-13, atol=1e-14)
    kd = np.arange(50, dtype=np.uint64) * np.uint64(977)
    assert [draw(int(k), 12) for k in kd] == draw_np(kd, 12).tolist()


# ---------------------------------------------------------------- always, bernoulli


def test_always() -> None:
    av = one_group({"kind": "always"}, 10)
    assert av.online(3, 1e9, 5) and av.offline_at(3, 12.0, 5) == math.inf
    assert av.online_mask(0.0, 0, np.arange(10)).all()


def test_bernoulli_frequency_and_independence() -> None:
    n, rounds, p = 2000, 100, 0.3
    av = one_group({"kind": "bernoulli", "p": p}, n)
    masks = np.array([av.online_mask(0.0, r, np.arange(n)) for r in range(rounds)])
    assert abs(masks.mean() - p) < 0.01
    assert abs((masks[1:] & masks[:-1]).mean() - p * p) < 0.01  # rounds are independent
    assert masks.mean(axis=0).std() < 0.08  # no device is stuck on or off (binomial std ~0.046)
    for d in range(0, n, 97):
        for r in (0, 5, 99):
            assert av.online(d, 123.0, r) == masks[r, d]
            assert av.offline_at(d, 123.0, r) == (math.inf if masks[r, d] else 123.0)
    assert not one_group({"kind": "bernoulli", "p": 0.0}, 5).online_mask(0.0, 1, np.arange(5)).any()


# ---------------------------------------------------------------- markov


def test_markov_online_fraction_and_durations() -> None:
    n, step, horizon = 400, 60.0, 200_000.0
    av = one_group(MARKOV, n)
    devices = np.arange(n)
    prev = av.online_mask(0.0, 0, devices)
    fractions, on_lengths = [prev.mean()], []
    for t in np.arange(step, horizon, step):
        cur = av.online_mask(t, 0, devices)
        fractions.append(cur.mean())
        started = np.flatnonzero(cur & ~prev)  # an online period began in (t - step, t]
        if started.size:
            on_lengths.append(av.offline_at_many(t, 0, devices[started]) - t + step / 2)
        prev = cur
    assert abs(np.mean(fractions) - 2 / 3) < 0.02
    lengths = np.concatenate(on_lengths)
    assert lengths.size > 5000
    assert abs(lengths.mean() / 3600.0 - 1.0) < 0.05
    # From a random instant, the time left online is again Exp(mean_on) (memorylessness).
    t = 987_654.0
    on = av.online_mask(t, 0, devices)
    left = av.offline_at_many(t, 0, devices[on]) - t
    assert abs(left.mean() / 3600.0 - 1.0) < 0.15


def test_markov_start_state() -> None:
    up = one_group({**MARKOV, "start_online": True}, 50)
    down = one_group({**MARKOV, "start_online": False}, 50)
    assert up.online_mask(0.0, 0, np.arange(50)).all()
    assert not down.online_mask(0.0, 0, np.arange(50)).any()


def test_markov_query_order_does_not_matter() -> None:
    queries = [(d, float(t)) for d in range(0, 60, 3) for t in np.linspace(0, 400_000, 25)]
    queries += [(5, 100.0), (7, 100.0), (5, 3e6), (9, 2.5e7)]
    reference = one_group({**MARKOV, "mean_on_s": 600.0, "mean_off_s": 300.0}, 60)
    expected = {
        q: (reference.online(q[0], q[1], 0), reference.offline_at(q[0], q[1], 0)) for q in sorted(queries)
    }
    for seed in range(3):
        shuffled = queries[:]
        random.Random(seed).shuffle(shuffled)
        av = one_group({**MARKOV, "mean_on_s": 600.0, "mean_off_s": 300.0}, 60)
        for d, t in shuffled:  # increasing and decreasing times mixed
            assert (av.online(d, t, 0), av.offline_at(d, t, 0)) == expected[(d, t)]
        # The vector path gives the same answers, whatever was asked before.
        for t in (100.0, 3e6, 50.0):
            devs = np.array([5, 7, 9, 5, 42])
            got = av.offline_at_many(t, 0, devs)
            fresh = one_group({**MARKOV, "mean_on_s": 600.0, "mean_off_s": 300.0}, 60)
            assert got.tolist() == [fresh.offline_at(int(d), t, 0) for d in devs]
            assert av.online_mask(t, 0, devs).tolist() == [fresh.online(int(d), t, 0) for d in devs]


def test_markov_offline_at_consistent() -> None:
    av = one_group(MARKOV, 30)
    for d in range(30):
        t = 0.0
        for _ in range(20):
            end = check_offline_at(av, d, t)
            t = end + 1.0 if math.isfinite(end) and end > t else t + 777.0


# ---------------------------------------------------------------- diurnal


def test_diurnal_windows_wrap_midnight() -> None:
    day, h = 86400.0, 3600.0
    av = one_group({"kind": "diurnal", "online_hours": 8, "start_hour_mean": 22, "start_hour_std": 0}, 5)
    for k in range(4):
        base = k * day
        assert av.online(2, base + 22 * h, k) and av.online(2, base + 23.5 * h, k)
        assert av.online(2, base + 1 * h, k) and av.online(2, base + 6 * h - 1e-6, k)
        assert not av.online(2, base + 6 * h, k) and not av.online(2, base + 21.999 * h, k)
        assert av.offline_at(2, base + 23 * h, k) == base + 30 * h
        assert av.offline_at(2, base + 12 * h, k) == base + 12 * h
        check_offline_at(av, 2, base + 22 * h)
    mask = av.online_mask(3 * h, 0, np.arange(5))
    assert mask.all()
    noon = one_group(
        {"kind": "diurnal", "online_hours": 2, "start_hour_mean": 12, "start_hour_std": 0, "day_s": 2400}, 1
    )
    assert noon.online(0, 1200.0, 0) and not noon.online(0, 1400.0, 0) and noon.online(0, 2400.0 + 1300.0, 0)


def test_diurnal_start_hours_are_drawn_per_device() -> None:
    n = 4000
    av = one_group({"kind": "diurnal", "online_hours": 4, "start_hour_mean": 12, "start_hour_std": 2}, n)
    hours = av.parts[0].start_hour
    assert abs(hours.mean() - 12) < 0.15 and abs(hours.std() - 2) < 0.15
    devices = np.arange(n)
    for t in (0.0, 43_000.0, 86_400.0 * 3 + 50_000.0):
        mask = av.online_mask(t, 0, devices)
        assert mask.tolist() == [av.online(d, t, 0) for d in range(n)]
        ends = av.offline_at_many(t, 0, devices)
        assert np.array_equal(ends, [av.offline_at(d, t, 0) for d in range(n)])
    for d in range(0, n, 400):
        check_offline_at(av, d, 50_000.0)
        check_offline_at(av, d, float(av.parts[0].s[d]) + 86_400.0)
    always = one_group({"kind": "diurnal", "online_hours": 24}, 3)
    assert always.online(1, 5.0, 0) and always.offline_at(1, 5.0, 0) == math.inf


# ---------------------------------------------------------------- traces


def write_fedscale(path, clients: dict) -> None:
    with open(path, "wb") as fh:
        pickle.dump(clients, fh)


FEDSCALE = {
    12: {"duration": 40, "active": [5], "inactive": [], "finish_time": 40, "model": "Pixel"},
    3: {"duration": 100, "active": [10, 50], "inactive": [20, 60], "finish_time": 100, "model": "SM-G9"},
    7: {"duration": 100, "active": [80, 0], "inactive": [100, 30], "finish_time": 100, "model": "iPhone"},
}


def test_fedscale_trace_repeats_and_maps_modulo(tmp_path) -> None:
    write_fedscale(tmp_path / "behave.pkl", FEDSCALE)
    loaded = load_fedscale_trace(tmp_path / "behave.pkl")
    assert (
        loaded[3].starts.tolist() == [10, 50]
        and loaded[3].ends.tolist() == [20, 60]
        and loaded[3].period == 100
    )
    cfg = {"kind": "trace", "format": "fedscale", "path": "behave.pkl"}
    av = one_group(cfg, 5, base_dir=tmp_path)
    # device 0 -> client 3, 1 -> 7, 2 -> 12, 3 -> 3 (sorted ids, modulo)
    for d in (0, 3):
        assert [av.online(d, t, 0) for t in (9.9, 10, 19.9, 20, 55, 60, 110, 155)] == [0, 1, 1, 0, 1, 0, 1, 1]
        assert av.offline_at(d, 112.0, 0) == 120.0
    assert av.offline_at(1, 85.0, 0) == 130.0  # [80, 100) joins [0, 30) of the next repetition
    assert av.online(1, 0.0, 0) and not av.online(1, 30.0, 0) and av.online(1, 199.0, 0)
    assert av.offline_at(2, 39.0, 0) == 40.0 and not av.online(2, 42.0, 0) and av.online(2, 45.0, 0)
    for d in range(5):
        for t in (0.0, 9.0, 15.0, 85.0, 99.0, 1234.5):
            check_offline_at(av, d, t)
    ts = np.array([0.0, 10.0, 19.0, 20.0, 85.0, 99.99, 100.0, 1e6 + 15.0])
    for t in ts:
        devs = np.array([4, 0, 2, 1, 3])
        assert av.offline_at_many(t, 0, devs).tolist() == [av.offline_at(int(d), t, 0) for d in devs]


def test_fedscale_trace_clips_merges_and_covers(tmp_path) -> None:
    clients = {
        "a": {"active": np.array([0, 10]), "inactive": np.array([60, 50]), "finish_time": 60},  # whole period
        "b": {"active": (30, 5, 70), "inactive": (45, 35, 90), "finish_time": 50},  # overlap, beyond the end
    }
    write_fedscale(tmp_path / "c.pkl", clients)
    loaded = load_fedscale_trace(tmp_path / "c.pkl")
    assert loaded["a"].starts.tolist() == [0] and loaded["a"].ends.tolist() == [60]
    assert loaded["b"].starts.tolist() == [5] and loaded["b"].ends.tolist() == [45]
    av = one_group({"kind": "trace", "format": "fedscale", "path": "c.pkl"}, 2, base_dir=tmp_path)
    assert av.offline_at(0, 1e7 + 0.5, 0) == math.inf
    assert av.offline_at(1, 1e7 + 7.0, 0) == 1e7 + 45.0 and not av.online(1, 1e7 + 47.0, 0)
    assert av.offline_at_many(1e7 + 7.0, 0, np.array([0, 1])).tolist() == [math.inf, 1e7 + 45.0]


def test_fedscale_trace_random_mapping(tmp_path) -> None:
    clients = {
        c: {"duration": 10, "active": [c], "inactive": [c + 0.5], "finish_time": 10, "model": "x"}
        for c in range(6)
    }
    write_fedscale(tmp_path / "t.pkl", clients)
    cfg = {"kind": "trace", "format": "fedscale", "path": str(tmp_path / "t.pkl"), "mapping": "random"}

    def assignment(seed: int) -> list[int]:
        av = one_group(cfg, 12, seed=seed)
        return [next(c for c in range(6) if av.online(d, c + 0.25, 0)) for d in range(12)]

    first = assignment(1)
    assert sorted(first[:6]) == list(range(6)) and first[6:] == first[:6]  # a permutation, then modulo
    assert assignment(1) == first
    assert any(assignment(s) != first for s in range(2, 6))


def test_csv_trace(tmp_path) -> None:
    (tmp_path / "avail.csv").write_text(
        "device,online_from,online_until\n0,0,10\n0,5,20\n2,100,200\n0,50,60\n\n2,300,inf\n"
    )
    loaded = load_csv_trace(tmp_path / "avail.csv")
    assert loaded[0].starts.tolist() == [0, 50] and loaded[0].ends.tolist() == [20, 60] and 1 not in loaded
    av = one_group({"kind": "trace", "format": "csv", "path": "avail.csv"}, 5, base_dir=tmp_path)
    assert av.offline_at(0, 0.0, 0) == 20.0 and av.online(0, 15.0, 0) and not av.online(0, 20.0, 0)
    assert not av.online(0, 1015.0, 0)  # not repeated
    assert not any(av.online(1, t, 0) for t in (0.0, 15.0, 150.0, 1e6))  # absent from the file
    assert (
        av.online(2, 150.0, 0)
        and av.offline_at(2, 150.0, 0) == 200.0
        and av.offline_at(2, 1e9, 0) == math.inf
    )
    assert av.online(3, 55.0, 0) and not av.online(4, 150.0, 0)  # ids 0..2 repeat modulo 3
    for t in (0.0, 19.0, 55.0, 150.0, 250.0, 400.0):
        devs = np.arange(5)[::-1]
        assert av.offline_at_many(t, 0, devs).tolist() == [av.offline_at(int(d), t, 0) for d in devs]
        for d in range(5):
            check_offline_at(av, d, t)


@pytest.mark.parametrize(
    ("name", "fmt", "content"),
    [
        ("garbage.pkl", "fedscale", b"this is not a pickle"),
        ("list.pkl", "fedscale", pickle.dumps([1, 2, 3])),
        ("nofinish.pkl", "fedscale", pickle.dumps({1: {"active": [1], "inactive": [2]}})),
        ("backwards.pkl", "fedscale", pickle.dumps({1: {"active": [5], "inactive": [2], "finish_time": 9}})),
        (
            "lengths.pkl",
            "fedscale",
            pickle.dumps({1: {"active": [1], "inactive": [2, 3, 4], "finish_time": 9}}),
        ),
        ("text.pkl", "fedscale", pickle.dumps({1: {"active": ["soon"], "inactive": [2], "finish_time": 9}})),
        ("header.csv", "csv", b"id,start,end\n0,1,2\n"),
        ("number.csv", "csv", b"device,online_from,online_until\n0,abc,2\n"),
        ("order.csv", "csv", b"device,online_from,online_until\n0,5,2\n"),
        ("fields.csv", "csv", b"device,online_from,online_until\n0,5\n"),
        ("negative.csv", "csv", b"device,online_from,online_until\n-1,0,5\n"),
    ],
)
def test_malformed_trace_names_the_file(tmp_path, name: str, fmt: str, content: bytes) -> None:
    (tmp_path / name).write_bytes(content)
    with pytest.raises(TraceError) as err:
        one_group({"kind": "trace", "format": fmt, "path": name}, 3, base_dir=tmp_path)
    message = str(err.value)
    assert name in message and "\n" not in message and "; " in message


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo should-not-run",))


def test_trace_pickle_cannot_run_code_and_missing_file(tmp_path) -> None:
    (tmp_path / "evil.pkl").write_bytes(pickle.dumps({1: _Evil()}))
    with pytest.raises(TraceError, match="evil.pkl"):
        load_fedscale_trace(tmp_path / "evil.pkl")
    with pytest.raises(TraceError, match="nowhere.csv.*not found"):
        one_group({"kind": "trace", "format": "csv", "path": "nowhere.csv"}, 2, base_dir=tmp_path)


# ---------------------------------------------------------------- several groups


@pytest.mark.parametrize("contiguous", [True, False])
def test_groups_dispatch(contiguous: bool) -> None:
    configs = [
        {"kind": "always"},
        {"kind": "bernoulli", "p": 0.5},
        {**MARKOV, "mean_on_s": 500.0, "mean_off_s": 700.0},
        {"kind": "diurnal", "online_hours": 6, "day_s": 3600},
    ]
    group_of = np.repeat(np.arange(4), [30, 40, 50, 60]).astype(np.int32)
    if not contiguous:
        group_of = np.random.default_rng(3).permutation(group_of)
    av = build_availability(configs, group_of, 11, None)
    n = group_of.size
    for rnd, t in enumerate([0.0, 500.0, 1800.0, 250.0, 10_000.0]):
        for devs in (np.arange(n), np.random.default_rng(rnd).permutation(n)[:100]):
            mask = av.online_mask(t, rnd, devs)
            ends = av.offline_at_many(t, rnd, devs)
            assert mask.tolist() == [av.online(int(d), t, rnd) for d in devs]
            assert ends.tolist() == [av.offline_at(int(d), t, rnd) for d in devs]
            assert np.array_equal(mask, ends > t)
    assert av.online_mask(5.0, 0, np.array([], dtype=np.int64)).shape == (0,)
    with pytest.raises(ValueError):
        build_availability(configs[:2], group_of, 1, None)
