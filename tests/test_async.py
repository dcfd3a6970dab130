"""The asynchronous server (``server.mode: async``, FedAsync and FedBuff): dispatch, staleness, no clairvoyance,
and FedBuff's reduction to synchronous FedAvg."""

from __future__ import annotations

import copy
import csv
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from conftest import BIG, base_scenario
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats

from iotfl_sim.cli import main
from iotfl_sim.scenario.algorithms import Staleness
from iotfl_sim.scenario.loader import load_scenario, resolve_groups
from iotfl_sim.scenario.resolved import ResolvedScenario
from iotfl_sim.sim.engine import Simulation
from iotfl_sim.sim.runner import run_scenario
from iotfl_sim.sim.setup import build_simulation


def simulation(data: dict) -> Simulation:
    sc = load_scenario(text=yaml.safe_dump(data))
    return build_simulation(ResolvedScenario(sc, resolve_groups(sc)))


def run_dir(data: dict, tmp_path: Path) -> Path:
    sc = load_scenario(text=yaml.safe_dump(data))
    path, _ = run_scenario(sc, resolve_groups(sc), tmp_path, data)
    assert path is not None
    return path


def events(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]


def rows(run: Path) -> list[dict[str, str]]:
    with open(run / "rounds.csv") as f:
        return list(csv.DictReader(f))


def even_fleet(n: int, jitter: dict | None = None, **link) -> dict:
    """``n`` identical devices (BIG's profile) with the given compute jitter and link."""
    profile = copy.deepcopy(BIG)
    profile["compute"]["jitter"] = jitter or {"dist": "lognormal", "sigma": 0.5}
    profile["link"].update(link)
    return {"groups": [{"name": "big", "count": n, "profile": profile}]}


def test_staleness_weights_are_the_papers_functions():
    poly, hinge = Staleness(kind="polynomial", a=0.5), Staleness(kind="hinge", a=10, b=4)
    assert [poly.weight(s) for s in (0, 3, 8)] == [1.0, 0.5, 1 / 3]  # (s + 1)^-1/2
    assert [hinge.weight(s) for s in (0, 4, 5, 6)] == [1.0, 1.0, 1 / 11, 1 / 21]  # 1 / (10 (s - 4) + 1) past b
    assert Staleness(kind="constant").weight(50) == 1.0


def test_fedbuff_with_k_equal_to_concurrency_and_dispatch_after_each_update_is_synchronous_fedavg():
    """Every slot refilled only after a server step, K = concurrency = clients per round, no staleness scaling,
    server_lr 1, no momentum: each step averages the K models trained from the same version, which is FedAvg's
    plain mean; the tasks draw what a round's draw (keyed by wave = round)."""
    fedavg = simulation(base_scenario(rounds=2, algorithm={"name": "fedavg", "weighting": "count"}))
    fedavg.run()
    fedbuff = simulation(
        base_scenario(
            rounds=2,
            algorithm={"name": "fedbuff", "buffer_size": 4, "staleness": {"kind": "constant"}},
            server={"mode": "async", "dispatch": "after_update"},
        )
    )
    fedbuff.run()
    assert all(torch.equal(fedavg.strategy.state[k], fedbuff.strategy.state[k]) for k in fedavg.strategy.state)
    server_step = 0.0  # FedBuff's own step (the deltas, x - lr * mean) is the only extra server work
    for a, b in zip(fedavg.rows, fedbuff.rows, strict=True):
        for col in ("acc_full", "loss_full", "train_loss", "selected", "completed", "bytes_down", "bytes_up", "alive"):
            assert a[col] == b[col], col
        assert b["staleness_max"] == 0 and b["server_other_s"] > 0 == a["server_other_s"]
        server_step += b["server_other_s"]
        assert b["sim_time_s"] - a["sim_time_s"] == pytest.approx(server_step, rel=1e-9, abs=1e-12)


def version_at_dispatch(evs: list[dict]) -> dict[tuple[int, int], int]:
    """(wave, device) -> the model version when the task was dispatched, counted from the event log alone."""
    version, out = 0, {}
    for e in evs:
        if e["event"] == "apply":
            version = max(version, e["version"])
        elif e["event"] == "dispatch":
            out[(e["round"], e["device"])] = version
    return out


@settings(max_examples=12, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # the same examples on every run, for CI
@given(
    seed=st.integers(0, 10_000),
    k=st.integers(1, 3),
    concurrency=st.integers(1, 6),
    dispatch=st.sampled_from(["continuous", "after_update"]),
    deadline=st.sampled_from([None, 8.0]),
)
def test_events_are_in_time_order_and_staleness_counts_the_versions_applied_since_download(
    tmp_path_factory, seed, k, concurrency, dispatch, deadline
):
    fleet = even_fleet(8)  # devices come and go while they train (tasks take ~0.2 s)
    fleet["groups"][0]["availability"] = {"kind": "markov", "mean_on_s": 0.5, "mean_off_s": 0.2}
    if dispatch == "after_update":  # a smaller concurrency is refused (a test below)
        concurrency = max(concurrency, k)
    data = base_scenario(
        seed=seed, rounds=12, numerics="none", fleet=fleet, algorithm={"name": "fedbuff", "buffer_size": k},
        server={"mode": "async", "concurrency": concurrency, "dispatch": dispatch, "deadline_s": deadline},
    )  # fmt: skip
    run = run_dir(data, tmp_path_factory.mktemp("run"))
    evs = events(run)
    times = [e["t"] for e in evs]
    assert times == sorted(times)
    at_dispatch = version_at_dispatch(evs)
    applied = [e for e in evs if e["event"] == "apply"]
    assert applied
    for e in applied:  # version v holds the updates applied to make it: v - 1 versions existed before
        assert e["staleness"] == e["version"] - 1 - at_dispatch[(e["round"], e["device"])]
    table = rows(run)
    assert [int(r["updates_applied"]) for r in table] == [k * (i + 1) for i in range(len(table))]
    by_version = Counter(e["version"] for e in applied)
    assert set(by_version.values()) == {k}  # every version folds exactly K updates
    assert any(e["event"] == "offline" for e in evs)  # devices left mid-task, and the server went on
    in_flight = Counter()
    for e in evs:  # a device never has two tasks at once, and never more than `concurrency` are in flight
        if e["event"] == "dispatch":
            in_flight[e["device"]] += 1
            assert in_flight[e["device"]] == 1
            assert sum(in_flight.values()) <= concurrency
        elif e["event"] in ("upload", "oom", "refused", "depleted", "offline"):
            in_flight[e["device"]] -= 1


def test_staleness_of_a_fleet_with_exponential_task_times_is_geometric():
    """C tasks in flight, each taking an exponential time, a finished one replaced at once: whenever something
    finishes it is, by memorylessness, any of the C with probability 1/C, so a task sees s other updates land
    before it with probability (1 - 1/C)^s / C (FedAsync: every update is a version)."""
    c = 4
    data = base_scenario(
        seed=11, rounds=2500, numerics="none", clients_per_round=c,
        fleet=even_fleet(12, {"dist": "exponential"}, down_mbps=1e6, up_mbps=1e6, rtt_ms=0.0),
        algorithm={"name": "fedasync"}, server={"mode": "async"},
    )  # fmt: skip
    data["fleet"]["groups"][0]["profile"]["compute"]["flops"] = 1e6  # tasks of ~minutes: transfers, server work negligible
    data["output"]["events"] = "all"
    sim = simulation(data)
    seen: list[int] = []
    apply = sim.loop._update

    def recording():
        seen.extend(b.staleness for b in sim.loop.buffer)
        return (yield from apply())

    sim.loop._update = recording
    sim.run()
    assert len(seen) == 2500
    counts = np.bincount(seen, minlength=12)
    top = 10  # staleness 0..9 one bin each, the tail in one
    observed = [*counts[:top], counts[top:].sum()]
    p = [(1 - 1 / c) ** s / c for s in range(top)]
    expected = np.array([*p, 1 - sum(p)]) * len(seen)
    assert expected.min() > 5  # chi-square's rule of thumb
    assert stats.chisquare(observed, expected).pvalue > 0.001


def test_each_update_trains_from_the_model_its_device_downloaded():
    """FedAsync with several devices in flight: the weights an update trained from are the global model of the
    version it downloaded (kept by reference at dispatch), never a newer one."""
    sim = simulation(
        base_scenario(rounds=8, clients_per_round=3, fleet=even_fleet(6), algorithm={"name": "fedasync"}, server={"mode": "async"})
    )
    history = [sim.strategy.state]
    checked = []
    apply = sim.strategy.apply

    def recording(version, updates):
        for u in updates:
            assert u.base is history[version - 1 - u.staleness]
            checked.append(u.staleness)
        apply(version, updates)
        history.append(sim.strategy.state)

    sim.strategy.apply = recording
    sim.run()
    assert len(checked) == 8 and max(checked) > 0  # some updates were stale, so the check meant something
    assert not any(torch.equal(history[0][k], history[-1][k]) for k in history[0] if history[0][k].is_floating_point())


def test_a_run_stopped_earlier_is_the_prefix_of_a_longer_one():
    """No task's fate depends on anything after it: the first rows of a 5-version run equal a 2-version run's."""
    def table(n):
        sim = simulation(
            base_scenario(rounds=n, clients_per_round=3, fleet=even_fleet(6), algorithm={"name": "fedasync"}, server={"mode": "async"})
        )
        sim.run()
        return [{k: v for k, v in r.items() if not k.startswith("host_")} for r in sim.rows]

    assert table(5)[:2] == table(2)


def test_a_task_past_its_deadline_is_dropped_then_and_its_late_update_never_applied(tmp_path):
    """deadline_s counts from each task's dispatch: a slow device is dropped at dispatch + deadline (its slot
    refilled), and its upload, when it comes, is logged late and folded into nothing."""
    data = base_scenario(
        rounds=30, numerics="none", clients_per_round=4, algorithm={"name": "fedbuff", "buffer_size": 1},
        server={"mode": "async", "deadline_s": 10.0},
    )  # fmt: skip
    run = run_dir(data, tmp_path)
    evs = events(run)
    dispatched = {(e["round"], e["device"]): e["t"] for e in evs if e["event"] == "dispatch"}
    dropped = [e for e in evs if e["event"] == "dropped"]
    assert dropped and all(e["reason"] == "deadline" for e in dropped)
    for e in dropped:
        assert e["t"] == pytest.approx(dispatched[(e["round"], e["device"])] + 10.0)
    late = {(e["round"], e["device"]) for e in evs if e["event"] == "late"}
    applied = {(e["round"], e["device"]) for e in evs if e["event"] == "apply"}
    assert late and not late & applied
    assert {(e["round"], e["device"]) for e in dropped} >= late


def test_a_failed_task_is_replaced_at_the_instant_the_server_hears_of_it(tmp_path):
    """Continuous dispatch: an out-of-memory failure frees its slot and a new device is dispatched at once."""
    fleet = even_fleet(10)
    fleet["groups"][0]["profile"]["memory"] = {"total_mb": 4000, "free_mb": 6, "sigma_mb": 4}  # the model needs ~3.2
    data = base_scenario(
        rounds=10, numerics="none", clients_per_round=3, fleet=fleet, algorithm={"name": "fedasync"}, server={"mode": "async"},
    )
    run = run_dir(data, tmp_path)
    evs = events(run)
    ooms = [e for e in evs if e["event"] == "oom"]
    assert ooms
    dispatch_times = [e["t"] for e in evs if e["event"] == "dispatch"]
    for e in ooms:
        assert any(t == e["t"] for t in dispatch_times)
    # each row is written as its update is made: the other two still train, the finished slot is refilled next
    assert all(int(r["in_flight"]) == 2 for r in rows(run))


@pytest.mark.parametrize(
    ("server", "algorithm", "says"),
    [
        ({"mode": "async"}, "decoupled", "server.mode: async: algorithm decoupled runs only in sync"),
        ({}, "fedbuff", "server.mode: sync: algorithm fedbuff runs only in async"),
        ({"mode": "semi_async"}, "fedavg", "set server.deadline_s"),
        ({"mode": "async", "over_selection": 1.5}, "fedasync", "server.over_selection applies to rounds"),
        ({"concurrency": 3}, "fedavg", "server.concurrency and server.dispatch apply to server.mode: async"),
    ],
)
def test_a_mode_the_method_or_server_block_cannot_run_is_one_line_and_status_2(
    tmp_path, write_scenario, capsys, server, algorithm, says
):
    path = write_scenario(base_scenario(server=server, algorithm={"name": algorithm}))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and "Traceback" not in err


@pytest.mark.slow  # worker processes start
def test_the_pool_executor_gives_the_inline_numbers_in_async_mode():
    """FedBuff trains a buffer of updates from several model versions at once: worker processes must give the
    same bits as training inline (each job carries its own downloaded weights and seed)."""
    def final(executor):
        sim = simulation(
            base_scenario(
                rounds=4, clients_per_round=4, fleet=even_fleet(6), executor=executor,
                algorithm={"name": "fedbuff", "buffer_size": 2}, server={"mode": "async"},
            )  # fmt: skip
        )
        sim.run()
        return sim.strategy.state, [{k: v for k, v in r.items() if not k.startswith("host_")} for r in sim.rows]

    inline_state, inline_rows = final({"kind": "inline"})
    pool_state, pool_rows = final({"kind": "pool", "workers": 2})
    assert inline_rows == pool_rows and max(r["staleness_max"] for r in inline_rows) > 0
    assert all(torch.equal(inline_state[k], pool_state[k]) for k in inline_state)


def test_a_sweep_compares_the_server_modes_in_one_study(tmp_path):
    """One study: FedAvg in sync and semi_async, FedBuff (K = 10) in async, on the base fleet with a 10 s deadline.
    By hand from the profiles: a tiny device's task downloads cnn_small's 378,664 bytes (94,410 float32 and a
    1,024-byte header) at 1 Mb/s (3.03 s + 50 ms RTT), trains 2.57 GFLOPs (its train_start event's count) at 1 GFLOP/s
    and uploads at 0.5 Mb/s (6.06 s + 50 ms): 11.76 s, past the deadline; a big device's task takes 0.48 s. So sync
    drops every tiny task and applies nothing late; semi_async applies a tiny task of round r with round r + 1's
    aggregation (version r + 2, staleness 1), a big one with its own (version r + 1, staleness 0); FedBuff never
    applies a tiny task and makes a version of every 10 updates, each update's staleness the versions made between
    its dispatch and its arrival (read off the event log's order)."""
    import iotfl_sim

    base = base_scenario(rounds=3, numerics="none", server={"deadline_s": 10.0}, output={"progress": False, "events": "all"})
    study = iotfl_sim.sweep(
        {"name": "modes", "base": base, "workers": 1,
         "zip": {"algorithm.name": ["fedavg", "fedbuff", "fedavg"], "server.mode": ["sync", "async", "semi_async"]}},
        out=tmp_path,
    )  # fmt: skip
    assert [r["status"] for r in study.records] == ["done"] * 3
    runs = {r["overrides"]["server.mode"]: study.runs[r["id"]] for r in study.records}
    assert {mode: run.summary["server_mode"] for mode, run in runs.items()} == {m: m for m in ("sync", "async", "semi_async")}
    logs = {mode: events(run.path) for mode, run in runs.items()}
    tiny = set(range(4))  # base_scenario: devices 0-3 tiny, 4-7 big

    for evs in logs.values():  # the hand task times: a tiny task 11.76 s, a big one 0.48 s, from their dispatch
        start = {(e["round"], e["device"]): e["t"] for e in evs if e["event"] == "dispatch"}
        for e in (e for e in evs if e["event"] == "upload"):
            took = e["t"] - start[(e["round"], e["device"])]
            assert took == pytest.approx(11.757 if e["device"] in tiny else 0.478, abs=2e-3), e

    def applies(mode: str) -> list[dict]:
        return [e for e in logs[mode] if e["event"] == "apply"]

    # sync: every tiny task dropped at its deadline, every big one accepted, nothing applied late
    sync = logs["sync"]
    for e in (e for e in sync if e["event"] == "dispatch"):
        ends = [x for x in sync if x["event"] in ("dropped", "accepted") and (x["round"], x["device"]) == (e["round"], e["device"])]
        assert [x["event"] for x in ends] == (["dropped"] if e["device"] in tiny else ["accepted"])
    assert not applies("sync") and "staleness_mean" not in rows(runs["sync"].path)[0]

    # semi_async: the hand rule above, for every task dispatched before the last round
    semi = logs["semi_async"]
    got = {(e["round"], e["device"]): (e["staleness"], e["version"]) for e in applies("semi_async")}
    want = {
        (e["round"], e["device"]): (1, e["round"] + 2) if e["device"] in tiny else (0, e["round"] + 1)
        for e in semi if e["event"] == "dispatch" and (e["device"] not in tiny or e["round"] < 2)
    }  # fmt: skip
    assert got == want and any(s == 1 for s, _ in got.values())

    # async: versions in blocks of K = 10, in order; staleness = versions made between dispatch and arrival
    made, at_dispatch, seen = 0, {}, []
    for e in logs["async"]:
        if e["event"] == "dispatch":
            at_dispatch[(e["round"], e["device"])] = made
        elif e["event"] == "apply":
            assert e["device"] not in tiny
            seen.append(e["version"])
            assert e["staleness"] == e["version"] - 1 - at_dispatch[(e["round"], e["device"])], e
            made = e["version"]
    assert seen == [v for v in (1, 2, 3) for _ in range(10)]
    assert any(e["staleness"] > 0 for e in applies("async"))

    # each row carries its version's updates: cumulative count, mean and max staleness of those applied with it
    for mode in ("semi_async", "async"):
        for i, row in enumerate(rows(runs[mode].path)):
            mine = [e["staleness"] for e in applies(mode) if e["version"] == i + 1]
            assert int(row["updates_applied"]) == sum(e["version"] <= i + 1 for e in applies(mode))
            assert float(row["staleness_mean"]) == pytest.approx(sum(mine) / len(mine)) and int(row["staleness_max"]) == max(mine)


def test_the_summary_weights_each_rows_staleness_by_its_updates():
    from iotfl_sim.sim.summary import updates_summary

    rows = [
        {"updates_applied": 2, "staleness_mean": 0.0, "staleness_max": 0},
        {"updates_applied": 2, "staleness_mean": None, "staleness_max": None},  # a round that aggregated nothing
        {"updates_applied": 5, "staleness_mean": 2.0, "staleness_max": 3},
    ]
    assert updates_summary(rows, "semi_async") == {"updates_applied": 5, "staleness_mean": 6 / 5, "staleness_max": 3}
    assert updates_summary(rows, "sync") == {}


@pytest.mark.usefixtures("isolated_methods")  # the method registered here leaves the registry with the test
def test_a_method_whose_options_say_async_but_that_is_not_asynchronous_is_refused_in_one_line(tmp_path):
    from typing import ClassVar, Literal

    import iotfl_sim
    from iotfl_sim.algorithms.fedavg import FedAvg
    from iotfl_sim.core.errors import ScenarioError
    from iotfl_sim.scenario.algorithms import FedAvgConfig

    class NotAsyncConfig(FedAvgConfig):
        name: Literal["not_async"] = "not_async"  # type: ignore[assignment]
        server_modes: ClassVar[tuple[str, ...]] = ("async",)

    class NotAsync(FedAvg):
        Config = NotAsyncConfig
        name = "not_async"

    sc = base_scenario(numerics="none", algorithm={"name": "not_async"}, server={"mode": "async"})
    # refused when registered, before the scenario is read (``server_modes`` is the old spelling of ``modes``)
    with pytest.raises(ScenarioError, match=r"^run: methods: .*NotAsyncConfig declares async as its only server mode, but "
                       r"NotAsync does not subclass iotfl_sim.strategy.Asynchronous; write class NotAsync\(Asynchronous, "
                       r"Strategy\)"):
        iotfl_sim.run(sc, out=tmp_path, methods=[NotAsync])
    assert not any(tmp_path.iterdir())  # refused before a run folder was made


def stale_update(state: dict, staleness: int, base: dict | None = None):
    from iotfl_sim.algorithms.base import Assignment, Update
    from iotfl_sim.fl.submodel import SubmodelSpec

    return Update(Assignment(0, SubmodelSpec(1.0)), state, 10, np.arange(2), 0.0, staleness=staleness, base=base)


def test_fedasync_mixes_by_alpha_times_the_staleness_weight_by_hand():
    from iotfl_sim.algorithms.fedasync import FedAsync
    from iotfl_sim.scenario.algorithms import FedAsyncConfig

    m = FedAsync(FedAsyncConfig(name="fedasync", alpha=0.6))  # polynomial a = 0.5: s(3) = 4^-1/2 = 1/2
    m.state = {"w": torch.tensor([0.0, 10.0]), "n": torch.tensor(7)}
    m.apply(1, [stale_update({"w": torch.tensor([1.0, 20.0]), "n": torch.tensor(99)}, staleness=3)])
    # alpha_t = 0.6 * 0.5 = 0.3: (1 - 0.3) * x + 0.3 * x_new; integer counters keep the server's
    assert torch.allclose(m.state["w"], torch.tensor([0.3, 13.0])) and int(m.state["n"]) == 7


def test_fedbuff_steps_by_the_staleness_weighted_mean_delta_with_heavy_ball_momentum_by_hand():
    from iotfl_sim.algorithms.fedbuff import FedBuff
    from iotfl_sim.scenario.algorithms import FedBuffConfig

    cfg = FedBuffConfig(name="fedbuff", buffer_size=2, server_lr=0.5, server_momentum=0.9)
    m = FedBuff(cfg)
    x0 = torch.tensor([4.0])
    m.state = {"w": x0}
    base_a, base_b = {"w": torch.tensor([4.0])}, {"w": torch.tensor([2.0])}
    # deltas: base - trained = 4 - 1 = 3 (staleness 0, weight 1) and 2 - 0 = 2 (staleness 3, weight 1/2)
    m.apply(1, [stale_update({"w": torch.tensor([1.0])}, 0, base_a), stale_update({"w": torch.tensor([0.0])}, 3, base_b)])
    step1 = (1 * 3 + 0.5 * 2) / 2  # = 2, divided by K (not by the weights' sum)
    assert torch.allclose(m.state["w"], x0 - 0.5 * step1)  # 3.0
    assert m.state["w"] is not x0 and torch.equal(x0, torch.tensor([4.0]))  # rebound, never changed in place
    m.apply(2, [stale_update({"w": torch.tensor([3.0])}, 0, {"w": torch.tensor([3.0])}),
                stale_update({"w": torch.tensor([1.0])}, 0, {"w": torch.tensor([3.0])})])  # fmt: skip
    step2 = (0 + 2) / 2  # = 1
    assert torch.allclose(m.state["w"], torch.tensor([3.0 - 0.5 * (0.9 * step1 + step2)]))  # momentum: 0.9 * 2 + 1


def test_the_weights_of_tasks_in_flight_round_trip_a_checkpoint_and_a_mismatch_is_one_line():
    from types import SimpleNamespace

    from iotfl_sim.core.errors import CheckpointError
    from iotfl_sim.sim.round import capture_weights, restore_weights

    shared = {"w": torch.tensor([1.0, 2.0])}
    tasks = [SimpleNamespace(rnd=r, assignment=SimpleNamespace(device=d), base=shared) for r, d in ((0, 3), (1, 5))]
    saved = capture_weights(tasks)
    assert len(saved["tasks"]) == 2 and saved["tasks"][0][2] == saved["tasks"][1][2]  # one state, stored once
    replayed = [SimpleNamespace(rnd=t.rnd, assignment=t.assignment, base=None) for t in tasks]
    restore_weights(replayed, saved)
    assert all(torch.equal(t.base["w"], shared["w"]) for t in replayed) and replayed[0].base is replayed[1].base
    for bad in (None, {"tasks": [[9, 9, 0]], "states": saved["states"]}, {"tasks": [[0, 3, 4]], "states": saved["states"]}):
        with pytest.raises(CheckpointError, match="weights of the devices in flight do not match"):
            restore_weights(replayed, bad)


def test_every_model_version_charges_the_methods_server_step_whatever_min_participants():
    """A model version is an aggregation of ``buffer_size`` updates, however few that is next to
    ``min_participants`` (a synchronous round's rule): FedBuff's server step is charged at each."""
    from iotfl_sim.fl.recipe import ModelRecipe
    from iotfl_sim.fl.submodel import SubmodelSpec

    sim = simulation(base_scenario(
        numerics="none", rounds=3, fleet=even_fleet(4, {"dist": "none"}),
        algorithm={"name": "fedbuff", "buffer_size": 2},
        server={"mode": "async", "concurrency": 4, "min_participants": 3, "compute": {"flops": 1e11}},
    ))  # fmt: skip
    sim.run()
    params = ModelRecipe("cnn_small", 10, 1, (8, 8)).cost(SubmodelSpec(1.0)).params
    # FedBuff's step: 4 FLOPs per parameter (the delta 1, momentum 2, the step 1) at the server's 1e11 FLOP/s
    assert [r["server_other_s"] for r in sim.rows] == pytest.approx([4 * params / 1e11] * 3)
