"""Selection at scale: the sampled uniform selection (``fleet.selection``, ``sim.view.ServerView.sample_selectable``,
``algorithms.base.select_uniform``) and the O(deaths) fleet ledger and devices.csv writer it runs with."""

from __future__ import annotations

import bisect
import io
import itertools
from collections import Counter

import numpy as np
import pytest
import yaml
from conftest import BIG, TINY, base_scenario
from scipy import stats

from iotfl_sim.algorithms.base import random_selection, select_uniform
from iotfl_sim.algorithms.heterofl import HeteroFL
from iotfl_sim.fleet.fleet import Fleet
from iotfl_sim.fleet.selection import SAMPLED_SELECTION_MIN_DEVICES, SampleStats, sample_uniform
from iotfl_sim.output.run_dir import _column_text, write_rows
from iotfl_sim.scenario.loader import load_scenario, resolve_groups
from iotfl_sim.scenario.resolved import ResolvedScenario
from iotfl_sim.sim.engine import Simulation
from iotfl_sim.sim.setup import build_simulation

# ---------------------------------------------------------------- sample_uniform


def test_sampled_k_subsets_are_uniform():
    # 10 ids, 6 admitted, k = 2: each of the 15 admitted pairs equally likely (chi-square)
    admitted = np.array([0, 2, 3, 5, 7, 9])
    accept = lambda ids: np.isin(ids, admitted)  # noqa: E731
    counts: Counter = Counter()
    stat = SampleStats()
    for seed in range(15_000):
        got = sample_uniform(10, 2, np.random.default_rng(seed), accept, budget=10_000, stats=stat)
        assert got is not None and len(got) == 2 and np.isin(got, admitted).all()
        counts[tuple(got.tolist())] += 1
    pairs = list(itertools.combinations(admitted.tolist(), 2))
    assert set(counts) == set(pairs)
    assert stats.chisquare([counts[p] for p in pairs]).pvalue > 1e-3


def test_sampled_selection_is_reproducible_and_gives_up_when_too_few():
    accept = lambda ids: ids % 3 == 0  # noqa: E731
    a = sample_uniform(1000, 50, np.random.default_rng(7), accept)
    b = sample_uniform(1000, 50, np.random.default_rng(7), accept, stats=SampleStats(rate=0.9))
    assert a is not None and np.array_equal(a, b)  # stats size the checks, never the draws
    assert (a % 3 == 0).all() and len(set(a.tolist())) == 50 and np.all(np.diff(a) > 0)
    assert sample_uniform(1000, 5, np.random.default_rng(0), lambda ids: ids == 17) is None  # 1 admitted < 5
    assert sample_uniform(1000, 0, np.random.default_rng(0), accept).size == 0


def test_each_id_is_asked_once():
    asked: list[int] = []

    def accept(ids):
        asked.extend(ids.tolist())
        return ids < 5

    sample_uniform(20, 5, np.random.default_rng(1), accept, budget=100_000)
    assert len(asked) == len(set(asked))


# ---------------------------------------------------------------- the engine's view


def sim_for_selection(n_tiny=60, n_big=40, avail=None, **over) -> Simulation:
    data = base_scenario(**{"numerics": "none", "rounds": 1, "clients_per_round": 5, **over})
    data["fleet"]["groups"][0]["count"] = n_tiny
    data["fleet"]["groups"][1]["count"] = n_big
    if avail is not None:
        for g in data["fleet"]["groups"]:
            g["availability"] = avail
    sc = load_scenario(text=yaml.safe_dump(data))
    sim = build_simulation(ResolvedScenario(sc, resolve_groups(sc)))
    sim.view.sample_min_devices = 1  # force the sampled path on a small fleet
    return sim


def test_view_samples_only_selectable_and_eligible_devices_uniformly():
    sim = sim_for_selection(avail={"kind": "markov", "mean_on_s": 600, "mean_off_s": 300})
    view, n = sim.view, sim.fleet.n
    view.known_gone[::7] = True
    sim.fleet.busy[3::11] = True
    eligible = np.ones(n, dtype=bool)
    eligible[::5] = False
    view.now, view.rnd = 5000.0, 3
    allowed = np.flatnonzero(view.selectable_mask() & eligible)
    assert 20 < allowed.size < n
    counts = np.zeros(n, dtype=np.int64)
    for seed in range(3000):
        chosen = select_uniform(view, 5, np.random.default_rng(seed), eligible)
        assert len(chosen) == 5 and np.isin(chosen, allowed).all()
        counts[chosen] += 1
    assert counts[np.setdiff1d(np.arange(n), allowed)].sum() == 0
    assert stats.chisquare(counts[allowed]).pvalue > 1e-3
    # the same answers through a function of the ids
    a = select_uniform(view, 5, np.random.default_rng(11), eligible)
    b = select_uniform(view, 5, np.random.default_rng(11), lambda ids: eligible[ids])
    assert np.array_equal(a, b)


def test_view_falls_back_to_the_mask_when_few_are_selectable():
    sim = sim_for_selection()
    view = sim.view
    view.known_gone[:] = True
    view.known_gone[[4, 50, 77]] = False
    got = select_uniform(view, 5, np.random.default_rng(0))
    assert got.tolist() == [4, 50, 77]  # all of them, after the sampler gave up
    assert view.has_selectable(3) and not view.has_selectable(4)
    view.known_gone[:] = True
    assert select_uniform(view, 5, np.random.default_rng(0)).size == 0 and not view.has_selectable(1)


def test_small_fleets_keep_the_mask_draws():
    sim = sim_for_selection()
    sim.view.sample_min_devices = SAMPLED_SELECTION_MIN_DEVICES
    assert sim.view.sample_selectable(5, np.random.default_rng(0)) is None
    mask = sim.view.selectable_mask()
    expect = random_selection(np.flatnonzero(mask), 5, np.random.default_rng(4))
    assert np.array_equal(select_uniform(sim.view, 5, np.random.default_rng(4)), expect)


def test_a_sampled_run_is_reproducible():
    def run():
        sim = sim_for_selection(
            avail={"kind": "markov", "mean_on_s": 900, "mean_off_s": 300},
            algorithm={"name": "heterofl", "mode": "dynamic", "proportions": "a1-b1"},
            rounds=6,
        )
        summary = sim.run()
        return summary["completed"], [r["energy_j"] for r in sim.rows], sim.fleet.tasks.copy()

    a, b = run(), run()
    assert a[0] == b[0] and a[1] == b[1] and np.array_equal(a[2], b[2])
    assert a[2].sum() == 6 * 5


def test_heterofl_level_draw_equals_rng_choice():
    s = HeteroFL.__new__(HeteroFL)
    s.props = np.array([0.1, 0.2, 0.3, 0.4])
    s.fits_level = np.random.default_rng(2).random((200, 4)) > 0.3
    s.fits_level[:, -1] = True
    s._cdfs = {}
    s.cfg = type("C", (), {"assign": "by_capacity"})()
    r1, r2 = np.random.default_rng(5), np.random.default_rng(5)
    for d in range(200):
        p = s.props * s.fits_level[d]
        expect = int(r1.choice(len(p), p=p / p.sum()))
        assert bisect.bisect_right(s._level_cdf(d), r2.random()) == expect
    assert r1.random() == r2.random()


# ---------------------------------------------------------------- deaths in bulk


def test_bulk_deaths_match_one_at_a_time_to_the_bit():
    data = base_scenario(numerics="none")
    data["fleet"]["groups"] = [
        {"name": "tiny", "count": 300, "profile": dict(TINY)},
        {"name": "big", "count": 50, "profile": dict(BIG)},
        {"name": "tiny2", "count": 200, "profile": {**TINY, "name": "tiny2", "power": {**TINY["power"], "idle_w": 0.07}}},
    ]
    sc = load_scenario(text=yaml.safe_dump(data))
    groups = resolve_groups(sc)
    fleets = [Fleet.build(groups, 0), Fleet.build(groups, 0)]
    fleets[0]._BATCH_KILLS = 10**9  # one at a time
    fleets[1]._BATCH_KILLS = 1  # always vectorised
    rng = np.random.default_rng(0)
    ops = []
    t = 0.0
    for _ in range(400):
        t += float(rng.exponential(500.0))
        d = int(rng.integers(0, 550))
        ops.append((t, d, float(rng.exponential(20.0)), float(rng.uniform(0.5, 8.0))))
    for f in fleets:
        for i, (t, d, dur, w) in enumerate(ops):
            f.spend(d, t, dur, w, "compute" if i % 2 else "radio")
            if i % 37 == 0:
                f.class_energy(t)
        f.advance_to(ops[-1][0] + 1e6)
    a, b = fleets
    assert a.dead.sum() > 400  # most died idle, in bulk
    for name in ("settled_at", "depleted_at", "dead"):
        assert np.array_equal(getattr(a, name), getattr(b, name))
    for k in a.energy:
        assert np.array_equal(a.energy[k], b.energy[k]) and np.array_equal(a._used[k], b._used[k])
    assert np.array_equal(a._idle_rate, b._idle_rate) and np.array_equal(a._idle_settled, b._idle_settled)
    assert np.array_equal(a._alive, b._alive)
    for t in (ops[100][0], ops[-1][0] + 10.0):  # energy_total in place: the same bits as the plain expression
        plain = a.energy["compute"] + a.energy["radio"] + a.energy["idle"]
        plain = plain + a.idle_w * np.clip(np.minimum(t, a.depleted_at) - a.settled_at, 0.0, None)
        assert np.array_equal(a.energy_total(t), plain)


# ---------------------------------------------------------------- devices.csv


def naive_rows(cols) -> str:
    texts = [_column_text(c) for c in cols]
    return "".join(",".join(row) + "\n" for row in zip(*texts, strict=True))


@pytest.mark.parametrize("seed", range(5))
def test_write_rows_equals_cell_by_cell(seed):
    rng = np.random.default_rng(seed)
    for _ in range(60):
        n = int(rng.integers(1, 80))
        cols = [np.arange(n)]
        for _ in range(int(rng.integers(0, 6))):
            kind = int(rng.integers(0, 6))
            if kind == 0:
                c = rng.integers(0, 2, n)
            elif kind == 1:
                c = rng.choice([0.0, -0.0, np.nan, 1.5, 1e300, np.inf, 1 / 3], n)
            elif kind == 2:
                c = np.array(rng.choice(["a", "b"], n), dtype=object)
            elif kind == 3:
                c = np.array([[1, 1.0, True, "1", None][i] for i in rng.integers(0, 5, n)], dtype=object)
            elif kind == 4:
                c = rng.integers(0, 2, n).astype(bool)
            else:
                c = np.repeat(rng.random(3), [n // 3, n // 3, n - 2 * (n // 3)])
            cols.append(c)
        f = io.StringIO()
        write_rows(f, cols)
        assert f.getvalue() == naive_rows(cols)
