"""Who can ever take part, by group, for every method (validate and run say it, and warn for a group that never
can), and the share of the fleet that trained (compare, report, load_study().table()): issue 44, item 13.

The fleet is the issue's in small: 3 ESP32 boards (the bundled profile declares 0.18 MB free) and 2 Jetson Orin
Nano boards (6,500 MB). cnn_small at batch 16 needs about 3 MB to train at full width and about 0.14 MB at 1/16
width (tests/test_memory_fit.py), so FedAvg's all_large model fits the two Jetsons only: 2 of 5 devices, 40 %.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from iotfl_sim.cli import main


def tiny_fleet(**over) -> dict:
    sc = {
        "name": "tiny", "seed": 1, "rounds": 2, "clients_per_round": 5, "numerics": "none",
        "fleet": {"groups": [{"profile": "esp32", "count": 3}, {"profile": "jetson_orin_nano", "count": 2}]},
        "data": {"dataset": "digits"}, "model": {"family": "cnn_small"}, "algorithm": {"name": "fedavg"},
        "local": {"epochs": 1, "batch_size": 16, "lr": 0.05}, "output": {"progress": False},
    }  # fmt: skip
    sc.update(over)
    return sc


def write(tmp_path: Path, sc: dict, name: str = "s.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(sc, sort_keys=False))
    return str(path)


def participation_lines(err: str) -> tuple[list[str], list[str]]:
    lines = err.splitlines()
    return ([x for x in lines if x.startswith("note: participation: ")],
            [x for x in lines if x.startswith("warning: participation: ")])  # fmt: skip


FEDAVG_NOTE = "note: participation: fedavg can ever give a task to 2 of 5 devices (esp32 0 of 3, jetson_orin_nano 2 of 2)"


def test_validate_counts_by_group_and_warns_for_the_group_that_never_trains(tmp_path, capsys):
    assert main(["validate", write(tmp_path, tiny_fleet())]) == 0
    notes, warnings = participation_lines(capsys.readouterr().err)
    assert notes == [FEDAVG_NOTE]
    (w,) = warnings
    assert w.startswith("warning: participation: group esp32 (3 devices) never trains under fedavg: ")
    assert "they have at most 0.18 MB free" in w and "memory.free_mb" in w


def test_run_prints_the_same_before_training(tmp_path, capsys):
    path = write(tmp_path, tiny_fleet())
    assert main(["validate", path]) == 0
    expected = participation_lines(capsys.readouterr().err)
    assert expected[0] == [FEDAVG_NOTE] and len(expected[1]) == 1
    assert main(["run", path, "--out", str(tmp_path / "runs"), "--quiet"]) == 0
    assert participation_lines(capsys.readouterr().err) == expected


def test_fedbuff_leaves_the_same_group_out(tmp_path, capsys):
    sc = tiny_fleet(algorithm={"name": "fedbuff", "buffer_size": 1}, server={"mode": "async", "concurrency": 2})
    assert main(["validate", write(tmp_path, sc)]) == 0
    notes, warnings = participation_lines(capsys.readouterr().err)
    assert notes == [FEDAVG_NOTE.replace("fedavg", "fedbuff")]
    assert len(warnings) == 1 and "group esp32 (3 devices) never trains under fedbuff" in warnings[0]


def test_a_method_that_fits_the_model_to_each_device_includes_everyone(tmp_path, capsys):
    """HeteroFL by capacity gives an ESP32 level e (0.14 MB <= 0.18 MB): no warning, 5 of 5."""
    sc = tiny_fleet(algorithm={"name": "heterofl", "assign": "by_capacity"})
    assert main(["validate", write(tmp_path, sc)]) == 0
    notes, warnings = participation_lines(capsys.readouterr().err)
    assert notes == ["note: participation: heterofl can ever give a task to 5 of 5 devices (esp32 3 of 3, jetson_orin_nano 2 of 2)"]
    assert warnings == []


def test_a_fixed_level_too_large_keeps_a_group_out_by_the_methods_rule(tmp_path, capsys):
    """HeteroFL by id, a1-b1-c1-d1-e1 over 5 devices: device i gets level i, so the ESP32s (0-2) get a, b and c,
    none of which fits 0.18 MB, although level e would: the method's rule, not memory, keeps them out."""
    sc = tiny_fleet(algorithm={"name": "heterofl", "assign": "by_id", "mode": "fix"})
    assert main(["validate", write(tmp_path, sc)]) == 0
    notes, warnings = participation_lines(capsys.readouterr().err)
    assert "2 of 5 devices (esp32 0 of 3, jetson_orin_nano 2 of 2)" in notes[0]
    (w,) = warnings
    assert "group esp32 (3 devices) never trains under heterofl: its assignment never gives them" in w


def test_fluctuating_memory_does_not_let_fedavg_select_a_device_whose_declared_memory_is_short(tmp_path, capsys):
    """OU memory can rise above any need at some instant, but FedAvg selects only the devices whose declared
    memory holds its model: the ESP32s still never train (the method's rule), and memory: ignore lets them."""
    sc = tiny_fleet()
    sc["fleet"]["groups"][0]["memory"] = {"process": "ou", "sigma": 0.05, "tau_s": 60}
    assert main(["validate", write(tmp_path, sc)]) == 0
    notes, warnings = participation_lines(capsys.readouterr().err)
    assert notes == [FEDAVG_NOTE] and "its assignment never gives them" in warnings[0]
    sc["algorithm"] = {"name": "fedavg", "memory": "ignore"}
    assert main(["validate", write(tmp_path, sc)]) == 0
    notes, warnings = participation_lines(capsys.readouterr().err)
    assert "5 of 5 devices" in notes[0] and warnings == []


def test_the_most_free_memory_is_the_declared_one_unless_it_follows_an_ou_process():
    from iotfl_sim.fleet.fleet import Fleet

    fleet = Fleet.__new__(Fleet)
    fleet.mem_free, fleet.mem_sigma = np.array([1.0, 2.0, 3.0, 4.0]), np.array([0.5, 0.0, 0.5, 0.0])
    fleet.ou_tau = np.array([0.0, 0.0, 60.0, 60.0])  # Gaussian, fixed, OU with a spread, OU without one
    assert fleet.max_free_memory().tolist() == [1.0, 2.0, np.inf, 4.0]


SOUNDNESS_METHODS = [
    {"name": "fedavg"},
    {"name": "heterofl"},
    {"name": "heterofl", "mode": "dynamic"},
    {"name": "heterofl", "assign": "by_capacity", "mode": "dynamic"},
    {"name": "heterofl_iot", "selection": "proportional", "mode": "dynamic"},
    {"name": "decoupled"},
    {"name": "fedx"},
    {"name": "adaptivefl"},
    {"name": "dadaquant"},
    {"name": "fedprox"},
]


@pytest.mark.parametrize("algorithm", SOUNDNESS_METHODS, ids=lambda a: "-".join(str(v) for v in a.values()))
def test_no_device_counted_out_ever_completes_a_task(algorithm, tmp_path):
    """Soundness: over a run whose every device is offered tasks (all selected each round), the devices that
    completed one are among those counted in; a fleet where memory binds in between (a group at 0.5 MB)."""
    from iotfl_sim.scenario.loader import load_scenario, resolve_groups
    from iotfl_sim.sim.participation import can_take_part
    from iotfl_sim.sim.preflight import preflight

    sc = tiny_fleet(rounds=4, clients_per_round=7, algorithm=algorithm)
    sc["fleet"]["groups"].insert(1, {"name": "half", "profile": "esp32", "count": 2, "memory": {"free": 0.5}})
    path = write(tmp_path, sc)
    scenario = load_scenario(path)
    groups = resolve_groups(scenario, tmp_path / "device_profiles", path)
    can = can_take_part(preflight(scenario, groups, tmp_path, path))
    assert main(["run", path, "--out", str(tmp_path / "runs"), "--quiet"]) == 0
    (run,) = (tmp_path / "runs").iterdir()
    from analysis.rundir import read_devices

    completed = read_devices(run / "devices.csv", ["completed"])["completed"] > 0
    assert completed.any()
    assert not (completed & ~can).any(), f"devices {np.flatnonzero(completed & ~can)} trained though counted out"


# ---------------------------------------------------------------- the share that trained, from a real sweep


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    """FedAvg on the tiny fleet over two seeds, swept: every round selects both Jetsons (the only eligible
    devices, 5 slots), which complete; the ESP32s never get a task. Hand count: 2 of 5 devices, 40 %."""
    tmp = tmp_path_factory.mktemp("participation")
    write(tmp, tiny_fleet(), "base.yaml")
    (tmp / "st.yaml").write_text(yaml.safe_dump({
        "name": "tinyst", "base": "base.yaml", "grid": {"seed": [1, 2]}, "zip": {"local.lr": [0.05]}, "workers": 1,
    }, sort_keys=False))  # fmt: skip
    assert main(["sweep", str(tmp / "st.yaml"), "--out", str(tmp / "studies")]) == 0
    return tmp / "studies" / "tinyst"


def test_compare_report_and_table_show_the_share_of_the_fleet_that_trained(study, tmp_path, capsys):
    import iotfl_sim
    from analysis.compare import build_tables
    from analysis.study import select

    tables = {t.name: t for t in build_tables(select([study]))}
    row = tables["participation"].rows["0.05"]
    assert row["trained (% of fleet)"].values == [40.0, 40.0]
    assert row["devices trained"].values == [2.0, 2.0] and row["fleet"].values == [5.0, 5.0]
    assert main(["compare", str(study), "--out", str(tmp_path / "cmp")]) == 0
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "| trained (% of fleet) | devices trained | fleet |" in md and "| 0.05 | 2 | 40 ± 0 | 2 ± 0 | 5 ± 0 |" in md
    assert main(["report", str(study), "--out", str(tmp_path / "r.html")]) == 0
    html = (tmp_path / "r.html").read_text()
    part = html[html.index('data-table="participation"') :]
    assert "<td>40 ± 0</td><td>2 ± 0</td><td>5 ± 0</td>" in part[: part.index("</table>")]
    rows = iotfl_sim.load_study(study).table()
    rows = rows.to_dict("records") if hasattr(rows, "to_dict") else rows
    assert [(r["devices_trained"], r["trained_share"]) for r in rows] == [(2, 0.4), (2, 0.4)]


def test_the_report_shows_the_studys_grid_zip_and_base(study, tmp_path):
    """study.json keeps the definition; the report's Grid and Resolved base scenario show it (issue 44, item 14)."""
    index = json.loads((study / "study.json").read_text())
    assert index["grid"] == {"seed": [1, 2]} and index["zip"] == {"local.lr": [0.05]}
    assert index["base"]["fleet"]["groups"][0]["name"] == "esp32" and index["base"]["clients_per_round"] == 5
    assert main(["report", str(study), "--out", str(tmp_path / "r.html")]) == 0
    html = (tmp_path / "r.html").read_text()
    grid = html[html.index('data-block="grid">') :].split("</pre>")[0]
    assert yaml.safe_load(grid.split(">", 1)[1]) == {"grid": {"seed": [1, 2]}, "zip": {"local.lr": [0.05]}}
    base = html[html.index('data-block="base">') :].split("</pre>")[0]
    assert "name: tiny" in base and "clients_per_round: 5" in base and "profile: esp32" not in base
    assert "name: esp32" in base and "family: cnn_small" in base  # the resolved base: profiles inlined
    assert "Not recorded" not in html


def test_an_old_study_folder_resumes_and_its_study_json_then_records_the_definition(study, tmp_path, capsys):
    """A study folder from before study.json kept base, grid and zip: reported without them, and a sweep of
    the same study file reopens it (its runs done, nothing rerun) and records them."""
    old = tmp_path / "studies" / "tinyst"
    shutil.copytree(study, old)
    index = json.loads((old / "study.json").read_text())
    (old / "study.json").write_text(json.dumps({"name": index["name"], "runs": index["runs"]}))
    assert main(["report", str(old), "--out", str(tmp_path / "r.html")]) == 0
    html = (tmp_path / "r.html").read_text()
    assert html.count('data-block="not-recorded"') == 2 and "grid: {}" not in html and "<pre data-block=\"base\">" not in html
    mtimes = {p: p.stat().st_mtime_ns for p in old.glob("runs/*/rounds.csv")}
    shutil.copy(study.parent.parent / "st.yaml", tmp_path / "st.yaml")
    shutil.copy(study.parent.parent / "base.yaml", tmp_path / "base.yaml")
    assert main(["sweep", str(tmp_path / "st.yaml"), "--out", str(tmp_path / "studies")]) == 0
    assert {p: p.stat().st_mtime_ns for p in old.glob("runs/*/rounds.csv")} == mtimes  # nothing rerun
    assert json.loads((old / "study.json").read_text())["grid"] == {"seed": [1, 2]}


@pytest.mark.usefixtures("isolated_methods")
def test_a_user_method_whose_possible_specs_has_the_wrong_shape_is_one_line(tmp_path, capsys):
    (tmp_path / "odd_shape.py").write_text(
        "import numpy as np\n"
        "from iotfl_sim.strategy import Strategy, SubmodelSpec\n\n"
        "class OddShape(Strategy):\n"
        "    def setup(self, ctx):\n"
        "        self.ctx = ctx\n"
        "        self.spec = SubmodelSpec(1.0, name='full')\n"
        "    def possible_specs(self):\n"
        "        return np.ones((3, 4), dtype=bool)  # 5 devices, 1 candidate\n"
        "    def select(self, rnd, fleet, rng):\n        return []\n"
        "    def payload(self, a):\n        return {}\n"
        "    def aggregate(self, rnd, updates):\n        pass\n"
        "    def eval_targets(self):\n        return []\n"
    )
    assert main(["validate", write(tmp_path, tiny_fleet(algorithm={"name": "odd_shape:OddShape"}))]) == 2
    err = capsys.readouterr().err
    (line,) = [x for x in err.splitlines() if x.startswith("error: ")]  # (other lines: what is imported from where)
    assert line.startswith("error: algorithm odd_shape:OddShape: possible_specs() gave an array of shape (3, 4)")
    assert "(5, 1)" in line and "Traceback" not in err
