"""Round-level validation (issue 46 item 5): the scenario files validate, and the comparison arithmetic of
benchmarks/validation_rounds.py is right on hand-made rows."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from iotfl_sim.scenario.loader import load_scenario

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = sorted((ROOT / "scenarios" / "validation").glob("*.yaml"))


def _script():
    spec = importlib.util.spec_from_file_location(
        "validation_rounds", ROOT / "benchmarks" / "validation_rounds.py"
    )
    mod = importlib.util.module_from_spec(spec)
    sys.modules["validation_rounds"] = mod  # dataclasses resolve their module by name
    spec.loader.exec_module(mod)
    return mod


def test_there_are_two_experiments():
    assert {p.stem for p in SCENARIOS} == {"fedx_testbed", "pi4_fedavg_resnet18"}


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_each_scenario_validates_with_the_sourced_profiles(path):
    sc = load_scenario(path)
    assert sc.numerics == "none"  # system-only: time and energy need no training numerics
    text = path.read_text()
    assert "Source:" in text and "Assumed" in text  # the header says where the figures come from


def test_the_fedx_mixes_the_script_sets_validate():
    for level in ("small", "medium", "large"):
        load_scenario(
            ROOT / "scenarios" / "validation" / "fedx_testbed.yaml", sets=[f"algorithm.mix={{{level}: 1.0}}"]
        )


def test_relative_error_and_summary_by_hand():
    m = _script()
    assert m.rel_err(110.0, 100.0) == pytest.approx(0.10)
    assert m.rel_err(2.0, 8.0) == pytest.approx(-0.75)
    rows = [
        m.Row("A", "a", "training time", 110.0, 100.0),  # +10 %
        m.Row("A", "b", "training time", 70.0, 100.0),  # -30 %
        m.Row("B", "c", "training time", 160.0, 100.0),  # +60 %
        m.Row("B", "d", "training time", 1.0, 100.0, scored=False),  # -99 %, left out
        m.Row("A", "a", "energy", 5.0, 4.0),  # +25 %: exactly on the target
        m.Row("A", "a", "communication", 3.0, 2.0),  # +50 %, no target
    ]
    s = m.summarize(rows)
    n, med, worst, met = s["training time"]
    assert (n, round(med, 12), round(worst, 12), met) == (
        3,
        0.3,
        0.6,
        False,
    )  # median of 0.1, 0.3, 0.6 (mean 0.33)
    assert s["energy"] == (1, 0.25, 0.25, True)
    assert s["communication"][3] is None


def test_refuses_a_non_positive_published_figure():
    with pytest.raises(ValueError):
        _script().rel_err(1.0, 0.0)


def test_published_fedx_figures_are_read_from_the_corpus():
    pub = _script().fedx_published()
    # validation/fedx.csv rows qcs605-c10-large (49.8 s) and nano-gpu-c10-small (722 + 788 = 1510 mW)
    assert pub["qcs605"]["large"]["train_s"] == 49.8
    assert pub["nano"]["small"]["power_w"] == pytest.approx(1.510)
    assert "power_w" not in pub["pi5"]["small"]
