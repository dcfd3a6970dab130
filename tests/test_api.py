"""The Python API: iotfl_sim.run (path, dict, model inputs), load_run, load_study; with and without pandas."""

from __future__ import annotations

import builtins
import json

import pytest
import yaml
from conftest import base_scenario

import iotfl_sim
from iotfl_sim.scenario.loader import ScenarioError, load_scenario


@pytest.fixture
def no_pandas(monkeypatch):
    real = builtins.__import__

    def fake(name, *args, **kwargs):
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError("no pandas here")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake)


def test_run_from_dict_path_and_model(tmp_path, write_scenario, no_pandas):
    sc = base_scenario(numerics="none")
    a = iotfl_sim.run(sc, out=tmp_path / "runs", sets=["seed=5"])
    assert a.path.parent == tmp_path / "runs" and a.summary["status"] == "complete" and a.summary["seed"] == 5
    assert [r["round"] for r in a.rounds] == [1, 2] and isinstance(a.rounds[0]["energy_j"], float)

    b = iotfl_sim.run(write_scenario(dict(sc, seed=5)), out=tmp_path / "runs")
    c = iotfl_sim.run(load_scenario(write_scenario(sc, "m.yaml")), out=tmp_path / "runs", sets=["seed=5"])
    assert a.path != b.path != c.path
    strip = {"host_train_s", "host_eval_s", "host_aggregate_s", "host_other_s"}
    rows = [[{k: v for k, v in r.items() if k not in strip} for r in x.rounds] for x in (a, b, c)]
    assert rows[0] == rows[1] == rows[2]  # same scenario whichever way it is given

    with pytest.raises(ScenarioError, match="rounds"):
        iotfl_sim.run(sc, out=tmp_path / "runs", sets=["rounds=0"])
    with pytest.raises(ScenarioError, match="not int"):
        iotfl_sim.run(3)


def test_load_run_without_pandas(tmp_path, no_pandas):
    res = iotfl_sim.run(base_scenario(), out=tmp_path)  # real training: accuracy columns
    run = iotfl_sim.load_run(res.path)
    assert run.summary == res.summary and run.scenario["name"] == "t"
    assert isinstance(run.rounds, list) and run.rounds[-1]["acc_full"] == pytest.approx(res.summary["final_accuracy"]["acc_full"])
    assert len(run.devices) == 8 and run.devices[0]["device"] == 0 and run.devices[0]["depleted_at_s"] is None
    events = run.events()
    first = next(events)
    assert first["event"] == "dispatch" and first["round"] == 0
    assert sum(1 for _ in run.events()) == sum(1 for _ in (res.path / "events.jsonl").open())
    with pytest.raises(FileNotFoundError, match="not a run folder"):
        iotfl_sim.load_run(tmp_path)


def test_load_run_with_pandas(tmp_path):
    pd = pytest.importorskip("pandas")
    res = iotfl_sim.run(base_scenario(numerics="none"), out=tmp_path)
    run = iotfl_sim.load_run(res.path)
    assert isinstance(run.rounds, pd.DataFrame) and list(run.rounds["round"]) == [1, 2]
    assert isinstance(run.devices, pd.DataFrame) and len(run.devices) == 8


def test_load_study_table(tmp_path, no_pandas):
    """load_study reads a study folder's index; runs open lazily; table() has one row per run."""
    folder = tmp_path / "st"
    records = []
    for seed in (1, 2):
        res = iotfl_sim.run(base_scenario(numerics="none", seed=seed), out=tmp_path / "tmp")
        run_dir = folder / "runs" / f"seed={seed}"
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        res.path.rename(run_dir)
        records.append({"id": f"seed={seed}", "overrides": {"seed": seed}, "status": "done",
                        "run_dir": f"runs/seed={seed}", "error": None, "host_s": 1.5})  # fmt: skip
    records.append({"id": "seed=3", "overrides": {"seed": 3}, "status": "failed", "run_dir": "runs/seed=3",
                    "error": "RuntimeError: boom", "host_s": 0.1})  # fmt: skip
    (folder / "study.json").write_text(json.dumps({"name": "st", "runs": records}))
    study = iotfl_sim.load_study(folder)
    assert study.name == "st" and [r["id"] for r in study.records] == ["seed=1", "seed=2", "seed=3"]
    assert not study.runs._open  # nothing read yet
    assert study.runs["seed=2"].summary["seed"] == 2 and list(study.runs._open) == ["seed=2"]
    table = study.table()
    assert [row["seed"] for row in table] == [1, 2, 3]
    assert table[0]["status"] == "done" and table[0]["energy_j"] > 0 and table[0]["host_s"] == 1.5
    split = [table[0][f"energy_{k}_j"] for k in ("compute", "radio", "idle")]
    assert sum(split) == pytest.approx(table[0]["energy_j"]) and table[0]["bytes_wasted"] == 0.0
    assert table[2]["energy_j"] is None and table[2]["error"] == "RuntimeError: boom"
    assert iotfl_sim.load_study(folder / "study.json").name == "st"
    assert yaml.safe_load((folder / "runs/seed=1/scenario.resolved.yaml").read_text())["seed"] == 1


def test_sweep_from_dict(tmp_path, monkeypatch, no_pandas):
    """iotfl_sim.sweep takes a study as a dict (inline base) and returns the opened study folder."""
    monkeypatch.chdir(tmp_path)
    study = iotfl_sim.sweep(
        {"name": "d", "base": base_scenario(numerics="none"), "grid": {"seed": [1, 2]}, "workers": 1}, out="st"
    )
    assert study.path.resolve() == tmp_path / "st" / "d" and [r["status"] for r in study.records] == ["done", "done"]
    assert [(row["seed"], row["status"]) for row in study.table()] == [(1, "done"), (2, "done")]
    assert study.runs["seed=2"].scenario["seed"] == 2


def test_load_study_gives_each_runs_target_crossings(tmp_path, no_pandas):
    """crossings(): one row per finished run and target; the runs' own targets unless given."""
    from study_fixtures import ACC, energy, make_study, sim_time

    folder = make_study(tmp_path / "st", targets={"fedavg": [0.6, 0.8], "heterofl": [0.6, 0.8]})
    rows = iotfl_sim.load_study(folder).crossings()
    assert len(rows) == 6 * 2 and {r["target"] for r in rows} == {0.6, 0.8}  # the failed run has no rows
    for r in rows:
        seed = r["seed"]
        accs = ACC[r["algorithm.name"]][seed]
        first = next((i + 1 for i, a in enumerate(accs) if a >= r["target"]), None)
        assert r["reached"] == (first is not None) and r["round"] == first
        if first is not None:
            assert r["sim_time_s"] == sim_time(first, seed) and r["energy_j"] == energy(first, seed)
        else:
            assert r["sim_time_s"] is None
    one = iotfl_sim.load_study(folder).crossings(targets=85)  # percent is read as a fraction
    assert {r["id"] for r in one if r["reached"]} == {"heterofl-s0", "heterofl-s2"}
    run = iotfl_sim.load_run(folder / "runs" / "fedavg-s2")
    assert [(r["target"], r["round"]) for r in run.crossings()] == [(0.6, 3), (0.8, 4)]


def test_compare_and_plot_are_in_the_api(tmp_path, no_pandas):
    from study_fixtures import make_study

    folder = make_study(tmp_path / "st")
    cmp = iotfl_sim.compare(folder, targets=[0.6])
    assert cmp.targets == (0.6,) and cmp.written == [] and "### Simulated time to reach" in cmp.markdown
    fed = next(r for r in cmp.tables["time_to_accuracy"] if r["method"] == "fedavg")
    assert fed["60% n"] == 3 and fed["60% mean"] == pytest.approx((30 + 21 + 32) / 3, rel=1e-5)  # 6 digits, as the CSV
    assert "energy" in cmp.tables and "waste_to_accuracy" in cmp.tables
    written = iotfl_sim.compare([folder], out=tmp_path / "cmp").written
    assert (tmp_path / "cmp" / "compare.md") in written
    figs = iotfl_sim.plot(folder, out=tmp_path / "figs", targets=[0.5, 0.7])
    assert (tmp_path / "figs" / "time_to_accuracy.png") in figs
    assert iotfl_sim.plot(folder / "runs" / "fedavg-s0", out=tmp_path / "one")  # a run folder: the run figures
    with pytest.raises(ScenarioError, match="no finished run"):
        iotfl_sim.compare(tmp_path / "cmp")
