"""Every shipped scenario validates, and runs one round of its protocol (system-only, no data needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import assert_validates

from iotfl_sim.cli import main

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted((ROOT / "scenarios").glob("*.yaml")) + sorted((ROOT / "benchmarks").glob("*.yaml"))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_scenario_validates_and_runs_a_round_of_its_protocol(path, tmp_path, capsys, data_root):
    assert_validates(path, capsys, data_root)
    out = tmp_path / "runs"
    args = ["run", str(path), "--set", "rounds=1", "--set", "numerics=none", "--out", str(out), "--quiet"]
    assert main(args) == 0, capsys.readouterr().err
    (run,) = list(out.iterdir())
    summary = json.loads((run / "summary.json").read_text())
    assert summary["rounds"] == 1 and summary["tasks"] > 0
