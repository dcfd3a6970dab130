"""An asynchronous run always ends (issue 44): a stop between two model versions checkpoints at that step and
resumes to the uninterrupted run's files; a run that makes no version stops with one line; a deadline no task could
meet is refused before the run (and a lower bound never refuses a feasible one); ``dispatch: after_update`` refills
slots only after a model update, and a buffer it could never fill from one wave is refused."""

from __future__ import annotations

import copy
import csv
import json
from pathlib import Path

import yaml
from conftest import BIG, base_scenario
from test_resume import assert_same_run, only_run

from iotfl_sim.cli import main
from iotfl_sim.scenario.loader import load_scenario, resolve_groups
from iotfl_sim.scenario.resolved import ResolvedScenario
from iotfl_sim.sim import async_server
from iotfl_sim.sim.engine import Simulation
from iotfl_sim.sim.setup import build_simulation
from iotfl_sim.sim.task_bound import fastest_task_s


def events(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]


def rows(run: Path) -> list[dict[str, str]]:
    with open(run / "rounds.csv") as f:
        return list(csv.DictReader(f))


def group(name: str, count: int, flops: float, jitter: dict | None = None, **link) -> dict:
    profile = copy.deepcopy(BIG)  # no compute jitter unless given, a clean link
    profile["compute"]["flops"] = flops
    if jitter is not None:
        profile["compute"]["jitter"] = jitter
    profile["link"].update(link)
    return {"name": name, "count": count, "profile": profile}


# training takes ~7 s, times a lognormal factor that could be as small as it likes: validate cannot refuse a 0.1 s
# deadline (the bound is the ~0.01 s of two round trips), though with sigma 0.1 no task ever meets it
NEVER_IN_TIME = {"groups": [group("slow", 30, 1e8, {"dist": "lognormal", "sigma": 0.1})]}


def test_a_stop_between_two_versions_checkpoints_that_step_and_resumes_to_the_uninterrupted_files(
    tmp_path, write_scenario, monkeypatch
):
    """Ctrl-C while updates sit in the buffer and others train: the run stops at the next event with a checkpoint
    of that step (the buffered and in-flight tasks' downloaded weights in it), exits 130, and its resume gives the
    files of a run never stopped."""
    data = base_scenario(
        rounds=4, algorithm={"name": "fedbuff", "buffer_size": 3, "server_momentum": 0.9},
        server={"mode": "async", "concurrency": 4, "bn_calibration_samples": 64},
    )  # fmt: skip
    data["fleet"]["cost_model"] = "flops"
    data["output"] = {"progress": False, "checkpoint": {"every_rounds": 1, "every_s": None}}
    path = write_scenario(data)
    assert main(["run", str(path), "--out", str(tmp_path / "whole"), "--quiet"]) == 0

    stop_here = async_server.AsyncServer._stop_here
    seen = {}

    def ctrl_c_mid_version(server):  # the first Ctrl-C, once version 1 exists and an update waits in the buffer
        if server.version >= 1 and server.buffer and server.in_flight and not server.sim.stop_requested:
            server.sim.stop_requested = True
            seen.update(version=server.version, step=server.steps, buffered=len(server.buffer), flying=len(server.in_flight))
        return stop_here(server)

    monkeypatch.setattr(async_server.AsyncServer, "_stop_here", ctrl_c_mid_version)
    assert main(["run", str(path), "--out", str(tmp_path / "cut"), "--quiet"]) == 130
    monkeypatch.setattr(async_server.AsyncServer, "_stop_here", stop_here)
    cut = only_run(tmp_path / "cut")
    assert seen and len(rows(cut)) == seen["version"] < 4
    meta = json.loads((cut / "checkpoints" / f"round-{seen['version']:06d}" / "meta.json").read_text())
    assert meta["step"] == seen["step"]
    assert json.loads((cut / "summary.json").read_text())["status"] == "interrupted"
    assert main(["run", "--resume", str(cut), "--quiet"]) == 0
    assert_same_run(only_run(tmp_path / "whole"), cut)


def test_a_run_that_makes_no_version_stops_after_max_tasks_per_version_in_one_line(tmp_path, write_scenario, capsys):
    """Every task misses its 0.1 s deadline (``NEVER_IN_TIME``): 4 waves of 3 (30 devices: always 3 free) reach the
    limit of 12, and the run ends with one line naming the setting, status 2, rows and events as far as it went."""
    data = base_scenario(
        rounds=3, numerics="none", fleet=NEVER_IN_TIME,
        algorithm={"name": "fedbuff", "buffer_size": 2},
        server={"mode": "async", "concurrency": 3, "deadline_s": 0.1, "max_tasks_per_version": 12},
    )  # fmt: skip
    path = write_scenario(data)
    assert main(["run", str(path), "--out", str(tmp_path), "--quiet"]) == 2
    err = "".join(line for line in capsys.readouterr().err.splitlines(True) if not line.startswith("note: "))
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err
    assert "12 tasks dispatched since model version 0" in err and "12 deadline" in err
    assert "raise server.deadline_s" in err and "server.max_tasks_per_version" in err
    run = only_run(tmp_path)
    evs = events(run)
    assert sum(e["event"] == "dispatch" for e in evs) == 12
    assert sum(e["event"] == "dropped" for e in evs) == 12
    assert rows(run) == [] and not (run / "summary.json").exists()


def test_without_a_limit_the_default_is_a_hundred_tasks_per_slot(tmp_path, write_scenario, capsys):
    data = base_scenario(
        rounds=3, numerics="none", fleet=NEVER_IN_TIME, algorithm={"name": "fedasync"},
        server={"mode": "async", "concurrency": 3, "deadline_s": 0.1},
    )  # fmt: skip
    assert main(["run", str(write_scenario(data)), "--out", str(tmp_path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "300 tasks dispatched" in err and "server.max_tasks_per_version (default 300)" in err


def simulation(data: dict) -> Simulation:
    sc = load_scenario(text=yaml.safe_dump(data))
    return build_simulation(ResolvedScenario(sc, resolve_groups(sc)))


def test_the_fastest_task_bound_is_below_every_real_task_and_refuses_only_deadlines_under_it(tmp_path, write_scenario, capsys):
    """Clean links and no compute jitter: every task's dispatch-to-upload time is at least the bound (which leaves
    the upload's payload out: an update may be quantized), so a deadline at the fastest real task is accepted and
    makes versions, and one just under the bound is refused at validate in one line."""
    fleet = {"groups": [group("fast", 3, 4e9, rtt_ms=20.0), group("slow", 3, 1e9, down_mbps=5.0, rtt_ms=80.0)]}
    data = base_scenario(
        rounds=4, numerics="none", fleet=fleet, algorithm={"name": "fedasync"}, server={"mode": "async", "concurrency": 4}
    )
    sim = simulation(data)
    bound = fastest_task_s(sim, real_numerics=False)
    path = write_scenario(data)
    assert main(["run", str(path), "--out", str(tmp_path / "free"), "--quiet"]) == 0
    evs = events(only_run(tmp_path / "free"))
    sent = {(e["round"], e["device"]): e["t"] for e in evs if e["event"] == "dispatch"}
    took = [e["t"] - sent[(e["round"], e["device"])] for e in evs if e["event"] == "upload"]
    assert took and min(took) >= bound > 0.04  # two round trips of the fast group at least
    fastest = min(took)
    data["server"]["deadline_s"] = fastest
    assert main(["run", str(write_scenario(data)), "--out", str(tmp_path / "tight"), "--quiet"]) == 0
    assert len(rows(only_run(tmp_path / "tight"))) == 4
    data["server"]["deadline_s"] = bound * 0.99
    capsys.readouterr()
    assert main(["validate", str(write_scenario(data))]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "server.deadline_s" in err and f"{bound:.4g} s at least" in err


def test_lognormal_compute_jitter_leaves_training_out_of_the_bound():
    """A lognormal factor can be as small as it likes: the bound is then the transfers alone, whatever the FLOPs."""
    def bound(flops: float, jitter: dict) -> float:
        g = group("g", 2, flops)
        g["profile"]["compute"]["jitter"] = jitter
        data = base_scenario(numerics="none", fleet={"groups": [g]}, algorithm={"name": "fedasync"}, server={"mode": "async"})
        return fastest_task_s(simulation(data), real_numerics=False)

    lognormal = {"dist": "lognormal", "sigma": 0.3}
    assert bound(1e6, lognormal) == bound(1e10, lognormal) < bound(1e10, {"dist": "none"}) < bound(1e6, {"dist": "none"})
    normal = {"dist": "normal", "sigma": 0.3}  # floored at 0.05 of the declared time
    assert bound(1e10, lognormal) < bound(1e6, normal) < bound(1e6, {"dist": "none"})


def test_after_update_refills_slots_only_after_a_model_update(tmp_path, write_scenario):
    """K = 2, concurrency 4, four devices: A trains in t, B in 2t, C and D in 10t (transfers small beside t). By
    hand, after_update: A's update waits in the buffer until B's makes version 1 (no dispatch in between), then A and
    B go again together; versions 1-3 each fold A's and B's updates with C and D still training (2 in flight).
    Continuous refills A the moment it reports: version 1 then finds A, C and D training (3 in flight)."""
    fleet = {"groups": [group("a", 1, 2e9), group("b", 1, 1e9), group("slow", 2, 2e8)]}
    table = {}
    for dispatch in ("after_update", "continuous"):
        data = base_scenario(
            rounds=3, numerics="none", fleet=fleet, algorithm={"name": "fedbuff", "buffer_size": 2},
            server={"mode": "async", "concurrency": 4, "dispatch": dispatch},
        )  # fmt: skip
        out = tmp_path / dispatch
        assert main(["run", str(write_scenario(data)), "--out", str(out), "--quiet"]) == 0
        run = only_run(out)
        table[dispatch] = [(int(r["selected"]), int(r["completed"]), int(r["in_flight"])) for r in rows(run)]
        if dispatch == "after_update":
            evs = events(run)
            first_apply = next(e["t"] for e in evs if e["event"] == "apply")
            assert sum(e["event"] == "dispatch" and e["t"] < first_apply for e in evs) == 4  # the first wave only
    assert table["after_update"] == [(2, 2, 2)] * 3
    assert table["continuous"][0] == (2, 2, 3)


def test_after_update_with_a_buffer_larger_than_the_concurrency_is_refused_in_one_line(write_scenario, capsys):
    """K = 9 updates per version, 4 devices per wave: no wave could make a version, so every one would be refilled
    before an update, which is not what after_update says it does (tests/bad_inputs has the case too)."""
    data = base_scenario(
        fleet={"groups": [group("g", 12, 1e9)]}, algorithm={"name": "fedbuff", "buffer_size": 9},
        server={"mode": "async", "concurrency": 4, "dispatch": "after_update"},
    )  # fmt: skip
    assert main(["validate", str(write_scenario(data))]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "server.dispatch: after_update" in err and "algorithm.buffer_size" in err
    assert "server.concurrency (4)" in err and "raise server.concurrency to 9" in err
    data["server"]["concurrency"] = 9  # one wave can make a version: accepted
    assert main(["validate", str(write_scenario(data))]) == 0
