"""Semi-synchronous rounds (``server.mode: semi_async``): a late update joins a later round, staleness-weighted."""

from __future__ import annotations

import torch
from conftest import base_scenario
from test_async import events, rows, run_dir, simulation


def semi(rounds: int = 5, deadline: float = 10.0, **algorithm) -> dict:
    return base_scenario(
        rounds=rounds, algorithm={"name": "fedavg", "weighting": "count", **algorithm},
        server={"mode": "semi_async", "deadline_s": deadline},
    )  # fmt: skip


def test_a_late_update_joins_the_first_round_to_close_after_it_with_its_rounds_of_staleness(tmp_path):
    run = run_dir({**semi(rounds=6), "numerics": "none"}, tmp_path)  # the bookkeeping is the system's
    evs = events(run)
    closes = {}  # round index -> the instant its row was made (its last server event)
    for e in evs:
        if e["event"] == "server_work":
            closes[e["round"]] = e["t"]
    uploaded = {(e["round"], e["device"]): e["t"] for e in evs if e["event"] == "upload"}
    late = [e for e in evs if e["event"] == "apply" and e["staleness"] > 0]
    assert late, "the deadline should leave some tasks late"
    for e in late:
        joined = e["version"] - 1  # the round whose aggregation it joined
        assert e["staleness"] == joined - e["round"]
        arrived = uploaded[(e["round"], e["device"])]
        assert closes[joined - 1] < arrived <= closes[joined]
    table = rows(run)
    assert int(table[-1]["updates_applied"]) == sum(1 for e in evs if e["event"] == "apply")
    assert max(float(r["staleness_max"] or 0) for r in table) == max(e["staleness"] for e in late)


def test_a_late_update_is_weighted_by_the_staleness_function_and_trains_from_its_own_rounds_model():
    sim = simulation(semi(rounds=5))
    history = [sim.strategy.state]
    seen = []
    aggregate = sim.strategy.aggregate

    def checking(rnd, updates):
        num = {k: torch.zeros_like(v, dtype=torch.float64) for k, v in sim.strategy.state.items()}
        den = 0.0
        for u in updates:
            assert u.weight == (u.staleness + 1) ** -0.5  # the default polynomial, a = 0.5
            assert u.base is None if u.staleness == 0 else u.base is history[rnd - u.staleness]
            den += u.weight
            for k in num:
                num[k] += u.weight * u.state[k].double()
            seen.append(u.staleness)
        aggregate(rnd, updates)
        for k, v in sim.strategy.state.items():
            if v.is_floating_point():
                assert torch.equal(v, (num[k] / den).to(v.dtype)), k
        history.append(sim.strategy.state)

    sim.strategy.aggregate = checking
    sim.run()
    assert max(seen) > 0 and 0 in seen


def test_with_a_deadline_no_task_misses_semi_async_is_the_synchronous_run():
    sync = simulation(base_scenario(rounds=2, server={"deadline_s": 1e5}))
    sync.run()
    semi_run = simulation(base_scenario(rounds=2, server={"mode": "semi_async", "deadline_s": 1e5}))
    semi_run.run()
    for a, b in zip(sync.rows, semi_run.rows, strict=True):
        assert {k: v for k, v in a.items() if not k.startswith("host_")} == {
            k: v for k, v in b.items() if not k.startswith("host_") and k not in ("updates_applied", "staleness_mean", "staleness_max")
        }
        assert b["staleness_max"] == 0


def test_the_staleness_option_changes_only_the_late_updates_weight():
    base = simulation(semi(rounds=3))
    base.run()
    hinge = {"mode": "semi_async", "deadline_s": 10.0, "staleness": {"kind": "hinge", "a": 10, "b": 0}}
    other = simulation({**semi(rounds=3), "server": hinge})
    other.run()
    assert base.rows[0]["acc_full"] == other.rows[0]["acc_full"]  # round 1 has no late update yet
    assert any(a["acc_full"] != b["acc_full"] for a, b in zip(base.rows, other.rows, strict=True))
