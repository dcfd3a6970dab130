"""A study's point rerun alone from its ``scenario.resolved.yaml`` gives the study's numbers, whatever the executor.

In a sweep each run gets its share of the cores (``exec.cores``), alone all of them; the fused trainer on a CPU
cuts every fused group into one share per pool worker, so its numbers followed the worker count until the run
recorded it (``exec.auto.Choice.pinned``)."""

from __future__ import annotations

import csv
from pathlib import Path

import yaml
from conftest import base_scenario

from iotfl_sim.cli import main
from iotfl_sim.study import read_study, sweep

KINDS = ["inline", "threads", "pool", "fused"]


def _rows(run: Path, name: str) -> list[dict[str, str]]:
    with (run / name).open() as f:
        return [{k: v for k, v in row.items() if not k.startswith("host_")} for row in csv.DictReader(f)]


def test_every_point_of_a_two_worker_sweep_equals_its_resolved_scenario_run_alone(tmp_path):
    # batch 8: a cnn_small step on digits stays under the CPU's fusing limit, so the 4 clients of a round are fused
    base = base_scenario(rounds=1, local={"epochs": 1, "batch_size": 8, "lr": 0.05})
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base, sort_keys=False))
    study = {"name": "alone", "base": "base.yaml", "workers": 2, "grid": {"seed": [1], "executor.kind": KINDS}}
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(study, sort_keys=False))
    res = sweep(read_study(tmp_path / "study.yaml"), tmp_path / "out", progress=False)
    assert [r["status"] for r in res.records] == ["done"] * len(KINDS), res.records
    losses = {}
    for rec in res.records:
        point = res.folder / rec["run_dir"]
        kind = rec["overrides"]["executor.kind"]
        alone = tmp_path / "alone" / kind
        assert main(["run", str(point / "scenario.resolved.yaml"), "--out", str(alone), "--quiet"]) == 0
        (run,) = list(alone.iterdir())
        for name in ("rounds.csv", "devices.csv"):
            assert _rows(point, name) == _rows(run, name), (kind, name)
        losses[kind] = [r["train_loss"] for r in _rows(point, "rounds.csv")]
    # the fused point really fused (its losses are not inline's bits), so its equality above means something
    assert losses["fused"] != losses["inline"] == losses["threads"] == losses["pool"]
