"""What `iotfl-sim run` says on the terminal: the bar's figures, the stage lines, the end summary."""

from __future__ import annotations

from pathlib import Path

import yaml
from conftest import base_scenario

from iotfl_sim.scenario.loader import load_scenario, resolve_groups
from iotfl_sim.scenario.resolved import ResolvedScenario
from iotfl_sim.sim.console import end_summary, say
from iotfl_sim.sim.setup import build_simulation


class RecordingBar:
    """Stands in for tqdm: records what the bar would draw at each step."""

    disable = False

    def __init__(self) -> None:
        self.n = 0
        self.postfix: dict = {}
        self.drawn: list[tuple[int, dict]] = []
        self.stages: list[str] = []

    def set_postfix(self, post: dict, refresh: bool = True) -> None:
        self.postfix = dict(post)

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        self.stages.append(text)

    def update(self, k: int = 1) -> None:  # tqdm draws the count with the postfix set so far
        self.n += k
        self.drawn.append((self.n, dict(self.postfix)))


def test_the_bar_draws_each_round_with_that_rounds_figures_and_says_what_it_sets_up() -> None:
    sc = load_scenario(text=yaml.safe_dump(base_scenario(numerics="none", rounds=3)))
    bar = RecordingBar()
    sim = build_simulation(ResolvedScenario(sc, resolve_groups(sc)), progress=bar)
    sim.run()
    assert [n for n, _ in bar.drawn] == [1, 2, 3]
    for (n, post), row in zip(bar.drawn, sim.rows, strict=True):
        assert post["sim"] == f"{row['sim_time_s']:,.0f}s", (n, post, row["sim_time_s"])  # not the round before
    assert bar.stages[0] == "setting up fedavg: building its models" and bar.stages[-1].startswith("round 1:")


def test_stage_lines_only_when_the_bar_is_shown(capsys) -> None:
    say("quick", "loading PyTorch", True)
    say("quick", "loading PyTorch", False)
    assert capsys.readouterr().err == "quick: loading PyTorch ...\n"


def test_end_summary_gives_targets_energy_split_failures_waste_and_the_plot_command() -> None:
    summary = {
        "final_accuracy": {"acc_full": 0.81, "acc_avg": 0.7},
        "best_acc_full": 0.83,
        "to_accuracy": {"acc_full": {
            "0.5": {"round": 3, "sim_time_s": 12.5, "energy_j": 400.0},
            "0.9": {"round": None, "sim_time_s": None, "energy_j": None},
        }},
        "sim_time_s": 300.0, "energy_j": 2000.0,
        "energy_by_kind_j": {"compute": 300.0, "radio": 100.0, "idle": 1600.0},
        "tasks": 50, "completed": 44, "failures": {"oom": 4, "depleted": 0, "deadline": 2},
        "comm_waste": 0.125, "bytes_wasted": 3.0e6, "bytes_down": 20.0e6, "bytes_up": 10.0e6,
        "host_time_s": {"total": 9.0, "setup": 1.0, "train": 5.0, "eval": 2.0, "other": 1.0},
    }  # fmt: skip
    lines = end_summary(Path("runs/my run"), summary).splitlines()
    assert lines[0] == "run: runs/my run"
    assert lines[1] == "accuracy full=0.8100, avg=0.7000"
    assert lines[2] == "targets (full model): 50% at round 3 (12.5 s simulated, 400.0 J), 90% not reached; best 83.0%"
    assert lines[3] == "simulated 5.0 min, energy 2000.0 J (compute 15%, radio 5%, idle 80%)"
    assert lines[4] == "tasks 50: 44 completed; failed: 4 out of memory, 2 missed the deadline"
    assert lines[5] == "communication waste 12.5% of the parameters sent, 3.00 MB of 30.00 MB on the air"
    assert lines[-1] == "figures: iotfl-sim plot 'runs/my run'"  # quoted: the command pastes as is
