"""The Python API: iotfl_sim.run (path, dict, model inputs), load_run, load_study; with and without pandas."""

from __future__ import annotations

import builtins
import json

import pytest
import yaml
from conftest import base_scenario

import iotfl_sim
from iotfl_sim.core.errors import ScenarioError
from iotfl_sim.scenario.loader import load_scenario


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


def _no_run_written(out):
    return not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize(
    "call, needles",
    [
        (lambda sc, out: iotfl_sim.run(sc, out=out, sets="rounds=2"), ["run: sets", "the str 'rounds=2'", "['rounds=2']"]),
        (lambda sc, out: iotfl_sim.run(sc, out=out, sets=["seed=1", 2]), ["run: sets", "item 1 is the int 2"]),
        (lambda sc, out: iotfl_sim.run(sc, out=3), ["run: out", "a path", "the int 3"]),
        (lambda sc, out: iotfl_sim.run(sc, out=out, progress="yes"), ["run: progress", "True or False"]),
        (lambda sc, out: iotfl_sim.run(sc, out=out, methods=iotfl_sim.Run), ["run: methods", "the class Run", "[Run]"]),
        (lambda sc, out: iotfl_sim.run(sc, out=out, executor=3), ["run: executor", "int is not callable"]),
        (lambda sc, out: iotfl_sim.run([sc], out=out), ["run: scenario", "not list"]),
        (lambda sc, out: iotfl_sim.load_run(None), ["load_run: path", "the NoneType None"]),
        (lambda sc, out: iotfl_sim.load_study(1.5), ["load_study: path", "the float 1.5"]),
        (lambda sc, out: iotfl_sim.sweep("s.yaml", out=out, workers=0), ["sweep: workers", "at least 1", "the int 0"]),
        (lambda sc, out: iotfl_sim.sweep({"name": "s"}, out=out, workers=2.5), ["sweep: workers", "the float 2.5"]),
        (lambda sc, out: iotfl_sim.compare(out, by="algorithm.name"), ["compare: by", "['algorithm.name']"]),
        (lambda sc, out: iotfl_sim.compare(7), ["compare: paths", "the int 7"]),
        (lambda sc, out: iotfl_sim.plot([out, None]), ["plot: paths[1]", "the NoneType None"]),
        (lambda sc, out: iotfl_sim.plot(out, targets="0.5"), ["targets", "a list of them", "'0.5'"]),
    ],
)
def test_an_argument_of_the_wrong_kind_is_one_exception_naming_it(tmp_path, call, needles):
    """A string where a list goes (``sets="rounds=2"`` was read one character at a time), a number where a path
    goes, ...: a TypeError (and a ScenarioError, the API's bad input) naming the argument and the fix; nothing
    is written."""
    out = tmp_path / "runs"
    with pytest.raises(TypeError) as got:
        call(base_scenario(numerics="none"), out)
    assert isinstance(got.value, ScenarioError)
    assert all(n in str(got.value) for n in needles), str(got.value)
    assert len(str(got.value).splitlines()) == 1
    assert _no_run_written(out)


@pytest.mark.parametrize("made", [None, "inline", object()])
def test_an_executor_factory_that_returns_no_executor_is_named_before_training(tmp_path, made):
    def my_factory(data, cfg):
        return made

    out = tmp_path / "runs"
    with pytest.raises(ScenarioError) as got:
        iotfl_sim.run(base_scenario(rounds=1), out=out, executor=my_factory)
    text = str(got.value)
    assert "run: executor: the factory" in text and "my_factory" in text and "not an executor" in text, text
    assert type(made).__name__ in text and "no run, evaluate, close" in text, text
    assert _no_run_written(out)


def test_an_executor_factory_returning_an_object_without_close_names_what_it_lacks(tmp_path):
    class Half:
        def run(self, jobs):
            return []

        def evaluate(self, jobs):
            return []

    with pytest.raises(ScenarioError, match=r"the factory .*<lambda> returned .*\(Half\), not an executor: it has no close;"):
        iotfl_sim.run(base_scenario(rounds=1), out=tmp_path / "runs", executor=lambda data, cfg: Half())


@pytest.fixture(scope="module")
def one_run(tmp_path_factory):
    return iotfl_sim.run(base_scenario(numerics="none"), out=tmp_path_factory.mktemp("one")).path


DAMAGE = {
    "summary_truncated": ("summary.json", lambda b: b[: len(b) // 2], "summary", "not readable JSON"),
    "summary_a_list": ("summary.json", lambda b: b"[1, 2]", "summary", "not a run summary"),
    "summary_deep": ("summary.json", lambda b: b"[" * 500 + b"]" * 500, "summary", "nested more than 100 levels"),
    "scenario_broken": ("scenario.resolved.yaml", lambda b: b"name: [unclosed\n", "scenario", "scenario.resolved.yaml"),
    "scenario_a_list": ("scenario.resolved.yaml", lambda b: b"- 1\n", "scenario", "not a scenario"),
    "rounds_not_text": ("rounds.csv", lambda b: b"\xff\xfe\x00garbage\x00" * 10, "rounds", "not a readable CSV table"),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_a_damaged_run_file_is_one_exception_naming_it(one_run, tmp_path, case):
    """load_run(run).summary on a truncated summary.json raised a raw JSONDecodeError naming no file."""
    import shutil

    name, damage, attribute, needle = DAMAGE[case]
    run = tmp_path / "run"
    shutil.copytree(one_run, run)
    (run / name).write_bytes(damage((run / name).read_bytes()))
    with pytest.raises(ValueError) as got:
        getattr(iotfl_sim.load_run(run), attribute)
    assert isinstance(got.value, ScenarioError)
    text = str(got.value)
    assert str(run / name) in text and needle in text and len(text.splitlines()) == 1, text


@pytest.mark.parametrize(
    "index, needle",
    [
        ('{"name": "st", "runs": [', "not readable JSON"),
        ('{"name": "st"}', "not a study index"),
        ('{"name": "st", "runs": [{"id": "a"}]}', "run record 0 is not a run record"),
    ],
)
def test_a_damaged_study_index_is_one_exception_naming_it(tmp_path, index, needle):
    (tmp_path / "study.json").write_text(index)
    with pytest.raises(ValueError, match=needle) as got:
        iotfl_sim.load_study(tmp_path)
    assert str(tmp_path / "study.json") in str(got.value) and isinstance(got.value, ScenarioError)
    with pytest.raises(FileNotFoundError, match="not a study folder"):
        iotfl_sim.load_study(tmp_path / "elsewhere")
