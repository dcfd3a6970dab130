"""`iotfl-sim sweep`: grid x zip expansion, run ids, validation, the index, failures, kill and re-run."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import base_scenario

from iotfl_sim.cli import main
from iotfl_sim.core.errors import ScenarioError
from iotfl_sim.study import read_study, sweep
from iotfl_sim.study.spec import expand, run_id

ROOT = Path(__file__).resolve().parents[1]


def write_study(tmp_path: Path, study: dict, base: dict | None = None) -> Path:
    if base is not None:
        (tmp_path / "base.yaml").write_text(yaml.safe_dump(base, sort_keys=False))
    p = tmp_path / "study.yaml"
    p.write_text(yaml.safe_dump(study, sort_keys=False))
    return p


def test_grid_times_zip():
    pts = expand({"algorithm.name": ["fedavg", "heterofl"], "seed": [0, 1, 2]}, {"local.lr": [0.1, 0.2], "local.epochs": [1, 3]})
    assert len(pts) == 2 * 3 * 2
    assert pts[0] == {"algorithm.name": "fedavg", "seed": 0, "local.lr": 0.1, "local.epochs": 1}
    assert pts[1] == {"algorithm.name": "fedavg", "seed": 0, "local.lr": 0.2, "local.epochs": 3}
    assert pts[-1] == {"algorithm.name": "heterofl", "seed": 2, "local.lr": 0.2, "local.epochs": 3}
    assert len({json.dumps(p, sort_keys=True) for p in pts}) == len(pts)
    assert expand({}, {}) == [{}]
    assert expand({}, {"a": [1, 2], "b": [3, 4]}) == [{"a": 1, "b": 3}, {"a": 2, "b": 4}]


def test_run_ids_stable_unique_and_safe():
    assert run_id({"algorithm.name": "fedavg", "seed": 1}) == "algorithm.name=fedavg,seed=1"
    assert run_id({}) == "base"
    assert run_id({"x": True, "y": None}) == "x=true,y=null"
    a, b = run_id({"data.root": "a/b"}), run_id({"data.root": "a_b"})
    assert a != b and "/" not in a and a.startswith("data.root=a_b-")
    long = {"fleet.groups.0.overrides": {"memory": {"sigma_mb": 400}, "battery": {"capacity_wh": 10.5}}, "seed": 7}
    assert run_id(long) == run_id(dict(long)) and len(run_id(long)) <= 80
    # a whole algorithm block reads as its name; the hash keeps blocks that differ elsewhere apart
    fix, dyn = run_id({"algorithm": {"name": "heterofl", "mode": "fix"}}), run_id({"algorithm": {"name": "heterofl", "mode": "dynamic"}})
    assert fix.startswith("algorithm=heterofl-") and dyn.startswith("algorithm=heterofl-") and fix != dyn
    ids = [run_id(p) for p in expand({"local.lr": [0.1, 0.01, 1e-3], "seed": list(range(20))}, {})]
    assert len(set(ids)) == len(ids)
    assert all(len(i) <= 80 and not i.startswith(".") for i in ids)


def test_study_file_errors(tmp_path, capsys):
    write_study(tmp_path, {}, base_scenario(numerics="none"))
    cases = [
        ({"name": "s", "base": "base.yaml", "grid": {"seed": [1]}, "gird": 1}, "gird: unknown key"),
        ({"name": "s", "base": "base.yaml", "zip": {"seed": [1, 2], "rounds": [1]}}, "same length"),
        ({"name": "s", "base": "nope.yaml"}, "no scenario file"),
        ({"name": "a/b", "base": "base.yaml"}, "not a plain name"),
        ({"name": "s", "base": "base.yaml", "grid": {"seed": []}}, "at least one value"),
        ({"name": "s", "base": "base.yaml", "grid": {"seed": [1, 1]}}, "appears twice"),
        ({"name": "s", "base": "base.yaml", "grid": {"rounds": [2, -1]}}, "point rounds=-1: --set rounds: rounds:"),
        ({"name": "s", "base": "base.yaml", "grid": {"algorithm.name": ["fedavg", "fedsgd"]}},
         "point algorithm.name=fedsgd:"),
        ({"name": "s", "base": {"name": "x", "rounds": 0, "fleet": base_scenario()["fleet"], "algorithm": "fedavg"}},
         "study.yaml: base.rounds:"),
    ]  # fmt: skip
    for study, expected in cases:
        p = write_study(tmp_path, study)
        assert main(["sweep", str(p), "--out", str(tmp_path / "out"), "--quiet"]) == 2, study
        err = capsys.readouterr().err
        assert expected in err, (expected, err)
        assert all(line.startswith(("error: ", "note: ")) for line in err.splitlines()), err
    assert not (tmp_path / "out").exists()  # nothing ran, nothing was made


def test_index_failures_and_rerun(tmp_path, capsys):
    """A failing point is recorded with its message while the others finish; the index holds one record per
    run with the shared field names; a second sweep skips the complete runs and retries the failed ones."""
    bad = tmp_path / "bad_data" / "mnist"
    bad.mkdir(parents=True)
    for stem in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        (bad / f"{stem}.gz").write_bytes(b"not an idx file")
    base = base_scenario(rounds=1)
    base["data"] = {"dataset": "digits", "root": str(tmp_path / "bad_data")}
    p = write_study(tmp_path, {"name": "st", "base": "base.yaml", "grid": {"data.dataset": ["digits", "mnist"], "seed": [1, 2]},
                               "workers": 2}, base)  # fmt: skip
    study = read_study(p)
    res = sweep(study, tmp_path / "out", progress=False)
    folder = tmp_path / "out" / "st"
    assert res.folder == folder
    index = json.loads((folder / "study.json").read_text())
    assert index["name"] == "st"
    recs = index["runs"]
    assert [r["id"] for r in recs] == [
        "data.dataset=digits,seed=1", "data.dataset=digits,seed=2", "data.dataset=mnist,seed=1", "data.dataset=mnist,seed=2"
    ]  # fmt: skip
    for r in recs:
        assert set(r) == {"id", "overrides", "status", "run_dir", "error", "host_s"}
        assert r["run_dir"] == f"runs/{r['id']}"
        assert r["overrides"]["data.dataset"] in ("digits", "mnist") and r["overrides"]["seed"] in (1, 2)
        assert isinstance(r["host_s"], float) and r["host_s"] > 0
        if r["overrides"]["data.dataset"] == "digits":
            assert r["status"] == "done" and r["error"] is None
            summary = json.loads((folder / r["run_dir"] / "summary.json").read_text())
            assert summary["status"] == "complete"
            resolved = yaml.safe_load((folder / r["run_dir"] / "scenario.resolved.yaml").read_text())
            assert resolved["seed"] == r["overrides"]["seed"]
            assert resolved["executor"]["threads"] == 1
        else:
            assert r["status"] == "failed" and "idx" in r["error"], r["error"]
    rows = list(csv.DictReader((folder / "index.csv").open()))
    assert [row["id"] for row in rows] == [r["id"] for r in recs]
    assert list(rows[0])[:3] == ["id", "data.dataset", "seed"] and rows[0]["status"] == "done"
    assert (folder / "study.yaml").read_text() == p.read_text()
    resolved = yaml.safe_load((folder / "study.resolved.yaml").read_text())
    assert resolved["grid"] == {"data.dataset": ["digits", "mnist"], "seed": [1, 2]}
    assert resolved["base"]["fleet"]["groups"][0]["profile"]["name"] == "tiny"

    done = [folder / r["run_dir"] / "summary.json" for r in recs if r["status"] == "done"]
    before = [(s.stat().st_ino, s.stat().st_mtime_ns) for s in done]
    res2 = sweep(read_study(p), tmp_path / "out", progress=False)
    assert [(s.stat().st_ino, s.stat().st_mtime_ns) for s in done] == before
    assert [r["status"] for r in res2.records] == ["done", "done", "failed", "failed"]

    changed = dict(base, rounds=2)
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(changed))
    files = {f: f.read_bytes() for f in folder.rglob("*") if f.is_file()}
    with pytest.raises(ScenarioError, match=r"base scenario differs .*\(rounds: 1 -> 2\)"):
        sweep(read_study(p), tmp_path / "out", progress=False)
    # refused before any write: every file of the study folder as it was, none added
    assert {f: f.read_bytes() for f in folder.rglob("*") if f.is_file()} == files
    capsys.readouterr()
    assert main(["sweep", str(p), "--out", str(tmp_path / "out"), "--quiet"]) == 2  # the command: one line, exit 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "rounds: 1 -> 2" in err[0] and "Traceback" not in err[0], err
    assert {f: f.read_bytes() for f in folder.rglob("*") if f.is_file()} == files


def test_base_difference_names_the_first_changed_field_and_ignores_fields_added_unset():
    """A field a later version added with its unset default (None) is the recorded study, so a half-run study
    survives an upgrade; a value that changed, a field added with a value or a field removed is another study,
    named by its dotted path."""
    from iotfl_sim.study.folder import base_difference

    recorded = {"rounds": 5, "fleet": {"groups": [{"name": "a", "compute": {"flops": 1.0}}]}}
    added_unset = {"rounds": 5, "fleet": {"groups": [{"name": "a", "compute": {"flops": 1.0, "steps": None}}]}}
    assert base_difference(recorded, added_unset) is None
    changed = {"rounds": 5, "fleet": {"groups": [{"name": "a", "compute": {"flops": 2.0}}]}}
    assert base_difference(recorded, changed) == "fleet.groups.0.compute.flops: 1.0 -> 2.0"
    added_set = {"rounds": 5, "fleet": {"groups": [{"name": "a", "compute": {"flops": 1.0, "steps": 3}}]}}
    assert base_difference(recorded, added_set) == "fleet.groups.0.compute.steps: absent -> 3"
    assert base_difference({"rounds": 5, "x": None}, {"rounds": 5}) == "x: None -> absent"
    assert base_difference(recorded, {**recorded, "fleet": {"groups": []}}) == (
        "fleet.groups: [{'name': 'a', 'compute': {'flops': 1.0}}] -> []"
    )
    assert base_difference(None, recorded) == "base: None -> " + repr(recorded)[:57] + "..."


@pytest.mark.slow
def test_kill_half_way_then_rerun_completes_only_the_missing(tmp_path):
    """SIGKILL the sweep and its workers (one process group) once some runs are done; running the sweep
    again leaves the finished runs' folders untouched and completes every other run."""
    base = base_scenario(rounds=2)
    base["output"] = {"progress": False, "checkpoint": {"every_rounds": 1}}
    p = write_study(tmp_path, {"name": "k", "base": "base.yaml", "grid": {"seed": list(range(4))}, "workers": 2}, base)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "iotfl_sim.cli", "sweep", str(p), "--out", str(out), "--quiet"]
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    index = out / "k" / "study.json"
    deadline = time.monotonic() + 600
    done_before: list[str] = []
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                recs = json.loads(index.read_text())["runs"]
            except (OSError, ValueError):
                recs = []
            done_before = [r["id"] for r in recs if r["status"] == "done"]
            if done_before:
                break
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert done_before, proc.stderr.read().decode()
    recs = json.loads(index.read_text())["runs"]
    assert any(r["status"] != "done" for r in recs), "every run finished before the kill: nothing to prove"
    kept = {}
    for r in recs:
        if r["status"] == "done":
            s = out / "k" / r["run_dir"] / "summary.json"
            kept[r["id"]] = (s.stat().st_ino, s.stat().st_mtime_ns, (out / "k" / r["run_dir"] / "rounds.csv").read_text())
    rerun = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert rerun.returncode == 0, rerun.stderr
    final = json.loads(index.read_text())["runs"]
    assert [r["status"] for r in final] == ["done"] * 4
    for rid, (ino, mtime, rows) in kept.items():
        run = out / "k" / f"runs/{rid}"
        assert ((run / "summary.json").stat().st_ino, (run / "summary.json").stat().st_mtime_ns) == (ino, mtime)
        assert (run / "rounds.csv").read_text() == rows
    assert sorted(x.name for x in (out / "k" / "runs").iterdir()) == sorted(r["id"] for r in final)
    for r in final:
        rows = list(csv.DictReader((out / "k" / r["run_dir"] / "rounds.csv").open()))
        assert [int(x["round"]) for x in rows] == [1, 2]


def test_readme_study_example_validates(tmp_path):
    import re

    text = (ROOT / "README.md").read_text()
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", text, flags=re.S) if "grid:" in b)
    data = yaml.safe_load(block)
    data["base"] = str(ROOT / data["base"])
    study = read_study(write_study(tmp_path, data))
    assert len(study.points) == 12
    assert study.points[1].id == "algorithm.name=fedavg,seed=0,local.lr=0.05,local.epochs=2"
    logging = next(b for b in re.findall(r"```yaml\n(.*?)```", text, flags=re.S) if "tensorboard: true" in b)
    from iotfl_sim.scenario.model import Output

    out = Output.model_validate(yaml.safe_load(logging)["output"])
    assert out.tensorboard and out.wandb is not None and out.wandb.mode == "offline"



def rounds_without_host_time(run_dir: Path) -> list[dict]:
    rows = list(csv.DictReader((run_dir / "rounds.csv").open()))
    return [{k: v for k, v in row.items() if not k.startswith("host")} for row in rows]


@pytest.mark.slow
@pytest.mark.xdist_group("ray")  # one local Ray cluster at a time
def test_ray_dispatch_runs_the_same_runs_as_processes(tmp_path, ray_cluster):
    """`dispatch: {kind: ray}` runs each point as a Ray task: same index, same results (rounds.csv bit for
    bit but host time) as worker processes; a failing point is recorded and the others finish."""
    pytest.importorskip("ray")
    base = base_scenario(rounds=2)
    study = {"name": "r", "base": "base.yaml", "grid": {"seed": [1, 2], "data.dataset": ["digits", "nope"]}, "workers": 2}
    p = write_study(tmp_path, study, base)
    with pytest.raises(ScenarioError, match="data.dataset"):  # an unknown dataset is caught before anything runs
        read_study(p)
    study["grid"] = {"seed": [1]}  # two runs each way (the seeds' rounds go through the same code)
    study["zip"] = {"local.lr": [0.05, 0.1]}
    p = write_study(tmp_path, {**study, "dispatch": {"kind": "ray"}})
    by_ray = sweep(read_study(p), tmp_path / "ray", progress=False)
    by_proc = sweep(read_study(p), tmp_path / "proc", progress=False, dispatch="processes")
    assert [r["status"] for r in by_ray.records] == ["done"] * 2, [r["error"] for r in by_ray.records]
    assert [r["id"] for r in by_ray.records] == [r["id"] for r in by_proc.records]
    for r in by_ray.records:
        a, b = by_ray.folder / r["run_dir"], by_proc.folder / r["run_dir"]
        assert rounds_without_host_time(a) == rounds_without_host_time(b), r["id"]
        assert r["host_s"] > 0
    # re-running through Ray skips what is done; a broken run is recorded as failed, the rest are untouched
    broken = by_ray.folder / by_ray.records[0]["run_dir"]
    (broken / "summary.json").unlink()
    (broken / "scenario.resolved.yaml").write_text("{not: [valid")
    again = sweep(read_study(p), tmp_path / "ray", progress=False)
    assert [r["status"] for r in again.records] == ["failed", "done"]
    assert again.records[0]["error"]


@pytest.mark.slow
@pytest.mark.xdist_group("ray")  # one local Ray cluster at a time
def test_ray_dispatch_stops_on_ctrl_c_and_a_rerun_finishes(tmp_path, ray_cluster):
    """Ctrl-C to a Ray-dispatched sweep: no new runs start, the running ones (Ray cancels them, which they
    get as Ctrl-C) checkpoint and are marked interrupted; the next sweep resumes them and runs the rest."""
    pytest.importorskip("ray")
    import threading

    base = base_scenario(rounds=12)
    base["output"] = {"progress": False, "checkpoint": {"every_rounds": 1}}
    p = write_study(tmp_path, {"name": "c", "base": "base.yaml", "grid": {"seed": [1, 2, 3]}, "workers": 2,
                               "dispatch": {"kind": "ray"}}, base)  # fmt: skip
    runs = tmp_path / "out" / "c" / "runs"

    def interrupt_after_first_checkpoint() -> None:
        deadline = time.time() + 300
        while time.time() < deadline and not list(runs.glob("*/checkpoints/round-*")):
            time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_after_first_checkpoint, daemon=True).start()
    res = sweep(read_study(p), tmp_path / "out", progress=False)
    assert res.stopped
    statuses = [r["status"] for r in res.records]
    assert statuses.count("interrupted") >= 1 and statuses.count("done") + statuses.count("interrupted") <= 2
    assert "pending" in statuses  # the third run never started
    interrupted = [runs.parent / r["run_dir"] for r in res.records if r["status"] == "interrupted"]
    # the run whose checkpoint triggered the stop has one; another, stopped still in its set-up, may not
    # (the re-run then starts it over)
    assert any(list(d.glob("checkpoints/round-*")) for d in interrupted)
    again = sweep(read_study(p), tmp_path / "out", progress=False)
    assert [r["status"] for r in again.records] == ["done"] * 3
    for d in interrupted:
        assert json.loads((d / "summary.json").read_text())["status"] == "complete"


def test_workers_see_the_environment_of_the_sweep_not_of_the_fork_server(tmp_path, monkeypatch):
    """Workers fork from a server that keeps the environment it started with (``forkserver.worker_context``); each
    task carries the sweep's. Two sweeps in one process, the second with $IOTFL_PROFILES pointing at another
    folder whose profile "edge" is twice as fast: the second study's run, which resolves its profile in the
    worker, must have the second folder's figure (with the server's environment it would have the first's,
    or, with a server started before either, no "edge" at all and fail)."""
    import copy

    from conftest import TINY

    folders = {}
    for tag, flops in (("a", 1.0e9), ("b", 2.0e9)):
        prof = copy.deepcopy(TINY)
        prof.update(name="edge", compute={"flops": flops, "jitter": {"dist": "none"}})
        folders[tag] = tmp_path / f"profiles_{tag}"
        folders[tag].mkdir()
        (folders[tag] / "edge.yaml").write_text(yaml.safe_dump(prof))
    base = base_scenario(rounds=1)
    base["fleet"] = {"groups": [{"name": "g", "count": 4, "profile": "edge"}]}
    base["numerics"] = "none"
    for tag in ("a", "b"):
        monkeypatch.setenv("IOTFL_PROFILES", str(folders[tag]))
        study = tmp_path / tag
        study.mkdir()
        p = write_study(study, {"name": f"env_{tag}", "base": "base.yaml", "grid": {"seed": [1, 2]}, "workers": 2}, base)
        res = sweep(read_study(p), tmp_path / "out", progress=False)
        assert [r["status"] for r in res.records] == ["done", "done"], res.records
        for r in res.records:
            resolved = yaml.safe_load((tmp_path / "out" / f"env_{tag}" / r["run_dir"] / "scenario.resolved.yaml").read_text())
            assert resolved["fleet"]["groups"][0]["profile"]["compute"]["flops"] == {"a": 1.0e9, "b": 2.0e9}[tag]
