"""Every shipped scenario validates, and runs one round of its protocol (system-only, no data needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import assert_validates

from iotfl_sim.cli import main

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted((ROOT / "scenarios").glob("*.yaml")) + sorted((ROOT / "benchmarks").glob("*.yaml"))


def run_whole_by_their_header() -> set[str]:
    """The scenarios whose own header command ``run scenarios/<it>.yaml`` test_docs_all_examples runs for real at
    landing (a run makes every check validate makes, then trains its rounds): their system-only round here is
    the full tier's."""
    from test_docs_all_examples import HEADER_COMMANDS, SHORT

    return {c.argv[1].removeprefix("scenarios/") for c in HEADER_COMMANDS if c.argv[0] == "run" and len(c.argv) == 2
            and c.argv[1].removeprefix("scenarios/") in SHORT}  # fmt: skip


COVERED = run_whole_by_their_header()


@pytest.mark.parametrize(
    "path", [pytest.param(p, marks=[pytest.mark.full] if p.name in COVERED else []) for p in SHIPPED], ids=lambda p: p.name
)
def test_shipped_scenario_validates_and_runs_a_round_of_its_protocol(path, tmp_path, capsys, data_root):
    assert_validates(path, capsys, data_root)
    out = tmp_path / "runs"
    args = ["run", str(path), "--set", "rounds=1", "--set", "numerics=none", "--out", str(out), "--quiet"]
    assert main(args) == 0, capsys.readouterr().err
    (run,) = list(out.iterdir())
    summary = json.loads((run / "summary.json").read_text())
    assert summary["rounds"] == 1 and summary["tasks"] > 0
