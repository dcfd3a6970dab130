"""End to end through the command line: the quickstart, its outputs, reproducibility, plots."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from iotfl_sim.cli import main

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"
# one worker runs this file's tests (pytest-xdist, --dist loadgroup), so that the 30-round quickstart of the
# module fixture below runs once, not once per worker that gets one of them
pytestmark = pytest.mark.xdist_group("e2e_quickstart")


def run_dir(parent: Path) -> Path:
    (d,) = [p for p in parent.iterdir() if p.is_dir()]
    return d


def read_rows(path: Path) -> list[dict[str, str]]:
    with open(path / "rounds.csv") as f:
        return list(csv.DictReader(f))


def without_host(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    return [{k: v for k, v in r.items() if not k.startswith("host_")} for r in rows]


@pytest.fixture(scope="module")
def quickstart_run(tmp_path_factory) -> Path:
    """The README's quickstart, unchanged: 30 rounds of HeteroFL on digits over 60 devices."""
    out = tmp_path_factory.mktemp("qs")
    assert main(["run", str(QUICKSTART), "--out", str(out), "--quiet"]) == 0
    return run_dir(out)


def test_quickstart_meets_acceptance(quickstart_run):
    summary = json.loads((quickstart_run / "summary.json").read_text())
    assert summary["rounds"] == 30 and summary["devices"] >= 50
    assert summary["final_accuracy"]["acc_full"] >= 0.85
    # simulation bookkeeping stays a small part of host time
    assert summary["host_other_fraction"] <= 0.10, summary["host_time_s"]
    groups = {r["group"] for r in csv.DictReader(open(quickstart_run / "devices.csv"))}
    assert len(groups) >= 3


def test_run_folder_contents(quickstart_run):
    for name in ("scenario.resolved.yaml", "rounds.csv", "devices.csv", "events.jsonl", "summary.json"):
        assert (quickstart_run / name).is_file(), name
    rows = read_rows(quickstart_run)
    assert [int(r["round"]) for r in rows] == list(range(1, 31))
    for col in ("acc_full", "acc_avg", "acc_a", "acc_e", "energy_j", "bytes_up", "failed_oom", "alive"):
        assert col in rows[0]
    times = [float(r["sim_time_s"]) for r in rows]
    assert times == sorted(times) and times[0] > 0
    events = [json.loads(x) for x in open(quickstart_run / "events.jsonl")]
    kinds = {e["event"] for e in events}
    assert {"dispatch", "arrive", "train_start", "train_end", "upload", "accepted"} <= kinds
    accepted = sum(1 for e in events if e["event"] == "accepted")
    assert accepted == sum(int(r["completed"]) for r in rows)


def test_resolved_scenario_reproduces_the_run(quickstart_run, tmp_path):
    resolved = quickstart_run / "scenario.resolved.yaml"
    assert main(["run", str(resolved), "--out", str(tmp_path), "--quiet", "--set", "rounds=2"]) == 0
    again = read_rows(run_dir(tmp_path))
    assert len(again) == 2 and without_host(again) == without_host(read_rows(quickstart_run))[:2]


def test_runs_never_overwrite(tmp_path):
    for _ in range(2):
        # system-only: the folders are the point, not the numbers
        assert main(["run", str(QUICKSTART), "--out", str(tmp_path), "--quiet", "--set", "rounds=1", "--set", "numerics=none"]) == 0
    assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == 2


def test_switching_algorithm_from_the_command_line(tmp_path, capsys):
    args = ["run", str(QUICKSTART), "--set", "rounds=2", "--set", "algorithm.name=fedavg", "--set", "numerics=none",
            "--out", str(tmp_path)]  # fmt: skip
    assert main([*args, "--quiet"]) == 0
    assert "dropped options" in capsys.readouterr().err
    summary = json.loads((run_dir(tmp_path) / "summary.json").read_text())
    assert summary["algorithm"] == "fedavg"


def test_plot_writes_figures(quickstart_run, tmp_path):
    assert main(["plot", str(quickstart_run), "--out", str(tmp_path)]) == 0
    names = {p.name for p in tmp_path.glob("*.png")}
    assert {"accuracy_vs_time.png", "accuracy_vs_energy.png", "bytes_per_round.png"} <= names
