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
    assert "5 kept, 0 broken" in done.stdout, done.stdout


def test_a_numerics_module_importing_the_engine_breaks_a_contract(tmp_path):
    for pkg in ("iotfl_sim", "analysis"):
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    batches = tmp_path / "iotfl_sim" / "fl" / "batches.py"
    batches.write_text(batches.read_text() + "\n\ndef _late():\n    from iotfl_sim.sim import engine  # the violation\n")
    done = _lint(tmp_path)
    assert done.returncode != 0, done.stdout
    assert "numerics (fl) import neither the engine" in done.stdout and "BROKEN" in done.stdout, done.stdout
    assert "iotfl_sim.fl.batches -> iotfl_sim.sim.engine" in done.stdout, done.stdout
