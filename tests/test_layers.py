"""The architecture's layer rules (pyproject.toml's [tool.importlinter] contracts) hold, and a deliberate
violation of one of them is caught."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("importlinter")


def _lint(root: Path) -> subprocess.CompletedProcess:
    """import-linter over the packages under ``root`` (first on the path), with this project's contracts."""
    code = "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports(config_filename=sys.argv[1], no_cache=True))"
    return subprocess.run(
        [sys.executable, "-c", code, str(ROOT / "pyproject.toml")],
        cwd=root, capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(root), "PATH": ""},
    )  # fmt: skip


def test_the_layer_contracts_hold():
    done = _lint(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    contracts = (ROOT / "pyproject.toml").read_text().count("[[tool.importlinter.contracts]]")
    assert contracts >= 10
    assert f"{contracts} kept, 0 broken" in done.stdout, done.stdout


@pytest.mark.parametrize(
    ("module", "planted", "contract", "reported"),
    [
        ("fl/batches.py", "from iotfl_sim.sim import engine", "numerics (fl) import neither the engine",
         "iotfl_sim.fl.batches -> iotfl_sim.sim.engine"),
        ("output/run_dir.py", "from analysis import rundir", "output (run folder, checkpoints) imports neither",
         "iotfl_sim.output.run_dir -> analysis.rundir"),
        ("core/errors.py", "import torch", "core (errors, safe_json, catalog) imports nothing",
         "iotfl_sim.core.errors -> torch"),
    ],
)  # fmt: skip
def test_a_planted_violation_breaks_its_contract(tmp_path, module, planted, contract, reported):
    for pkg in ("iotfl_sim", "analysis"):
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    path = tmp_path / "iotfl_sim" / module
    path.write_text(path.read_text() + f"\n\ndef _late():\n    {planted}  # the violation\n")
    done = _lint(tmp_path)
    assert done.returncode != 0, done.stdout
    assert contract in done.stdout and "BROKEN" in done.stdout, done.stdout
    assert reported in done.stdout, done.stdout
