"""Semi-synchronous rounds (``server.mode: semi_async``): a late update joins a later round, staleness-weighted."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import BIG, TINY, base_scenario
from test_async import events, rows, run_dir, simulation
from test_engine import expected_task_time


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
    data = semi(rounds=5)
    data["server"]["eval_every"] = 5  # scores only the last round: what is checked is each aggregation, not accuracy
    sim = simulation(data)
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
    small = {"dataset": "digits", "train_samples": 256, "test_samples": 120}  # the equality holds at any size
    sync = simulation(base_scenario(rounds=2, server={"deadline_s": 1e5}, data=small))
    sync.run()
    semi_run = simulation(base_scenario(rounds=2, server={"mode": "semi_async", "deadline_s": 1e5}, data=small))
    semi_run.run()
    for a, b in zip(sync.rows, semi_run.rows, strict=True):
        assert {k: v for k, v in a.items() if not k.startswith("host_")} == {
            k: v for k, v in b.items() if not k.startswith("host_") and k not in ("updates_applied", "staleness_mean", "staleness_max")
        }
        assert b["staleness_max"] == 0


def test_the_staleness_option_changes_only_the_late_updates_weight():
    base = simulation(semi(rounds=2))
    base.run()
    hinge = {"mode": "semi_async", "deadline_s": 10.0, "staleness": {"kind": "hinge", "a": 10, "b": 0}}
    other = simulation({**semi(rounds=2), "server": hinge})
    other.run()
    assert base.rows[1]["staleness_max"] == 1  # round 2 aggregates a late update of round 1
    assert base.rows[0]["acc_full"] == other.rows[0]["acc_full"]  # round 1 has no late update yet
    assert any(a["acc_full"] != b["acc_full"] for a, b in zip(base.rows, other.rows, strict=True))


def late_device(algorithm: dict, numerics: str = "none", rounds: int = 2, **server) -> dict:
    """Two devices, both selected every round, ``min_participants`` 2: device 0 (TINY) misses every deadline and
    device 1 (BIG) makes it. A round's own tasks complete one update, below ``min_participants``; device 0 is busy
    at the next round's start, so the server waits (``retry_s``) until its late update has landed, then selects it
    again: from round 2 on, its late update lifts the round to two updates (and is received after its device's
    new dispatch)."""
    fast, slow = (expected_task_time(p, 718, 1) for p in (BIG, TINY))
    groups = [{"name": "slow", "count": 1, "profile": copy.deepcopy(TINY)}, {"name": "fast", "count": 1, "profile": copy.deepcopy(BIG)}]
    return base_scenario(
        numerics=numerics, rounds=rounds, clients_per_round=2, fleet={"groups": groups}, algorithm=algorithm,
        server={"mode": "semi_async", "deadline_s": (fast + slow) / 2, "min_participants": 2, "retry_s": 1.0, **server},
    )  # fmt: skip


def test_server_work_after_an_aggregation_late_updates_made_is_charged_in_that_round():
    from iotfl_sim.fl.recipe import ModelRecipe
    from iotfl_sim.fl.submodel import SubmodelSpec

    sim = simulation(late_device({"name": "fedopt"}, rounds=3, compute={"flops": 1e11}))
    sim.run()
    assert [r["completed"] for r in sim.rows] == [1, 1, 1]  # every round's own updates: below min_participants
    assert [r["updates_applied"] for r in sim.rows] == [0, 2, 4]  # rounds 2 and 3 aggregate with the late update
    params = ModelRecipe("cnn_small", 10, 1, (8, 8)).cost(SubmodelSpec(1.0)).params
    # FedOpt's server step (FedAdam): 13 FLOPs per parameter (delta 1, m 3, Delta^2 1, v 3, sqrt 1, + tau 1, / 1,
    # x eta 1, + x 1), at the server's 1e11 FLOP/s, after each aggregation only; the aggregation reads 2 updates
    step, aggregation = 13 * params / 1e11, 2 * params / 1e11
    assert sim.rows[0]["server_other_s"] == 0.0 and sim.rows[0]["server_time_s"] == 0.0
    for r in sim.rows[1:]:
        assert r["server_other_s"] == pytest.approx(step)
        assert r["server_aggregate_s"] == pytest.approx(aggregation)
        assert r["server_time_s"] == pytest.approx(step + aggregation)


def test_a_late_upload_received_after_its_devices_next_dispatch_keeps_the_price_it_was_sent_at(tmp_path):
    run = run_dir(late_device({"name": "fedavg", "upload_bits": 4}, numerics="torch", rounds=3), tmp_path)
    evs = events(run)
    sent = {d: [e["bytes"] for e in evs if e["event"] == "upload" and e["device"] == d] for d in (0, 1)}
    received = {d: [e for e in evs if e["event"] == "upload_encoded" and e["device"] == d] for d in (0, 1)}
    dispatched = {e["round"]: e["t"] for e in evs if e["event"] == "dispatch" and e["device"] == 0}
    late = [e for e in received[0] if e["round"] > 0]  # device 0's update of round r - 1, received in round r
    assert len(late) == 2 and all(dispatched[e["round"]] < e["t"] for e in late)  # after its device's new dispatch
    for d in (0, 1):  # a device's uploads land in order, and are received in order (one task at a time)
        assert [e["priced"] for e in received[d]] == sent[d][: len(received[d])]
    # by hand: an upload the server decoded counts its real encoded size, one it never received its price
    by_hand = sum(e["bytes"] for d in (0, 1) for e in received[d]) + sum(sum(sent[d][len(received[d]):]) for d in (0, 1))
    assert float(rows(run)[-1]["bytes_up"]) == by_hand
