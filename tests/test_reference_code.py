"""``reference: code`` channel counts: the official code's ``int(channels * rate)`` exactly (no tolerance,
no minimum of one channel), refused before the run where it gives 0 channels; ``reference: paper`` keeps
the tolerant floor with at least one channel."""

from __future__ import annotations

import pytest
from conftest import base_scenario, strategy_context
from test_cli_errors import assert_one_clear_line, run_cli

from iotfl_sim.algorithms.scalefl import ScaleFL
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec, ZeroWidthError, truncation
from iotfl_sim.scenario.algorithms import ScaleFLConfig


def test_int_truncates_a_product_just_below_an_integer():
    # 3 / 47 x 47 is 3 in exact arithmetic, but in floating point 47 * (3 / 47) = 2.9999999999999996:
    # Python's int() gives 2, so the official code builds 2 channels.
    assert 47 * (3 / 47) == 2.9999999999999996
    assert SubmodelSpec(3 / 47, rounding="int").width(47) == 2
    assert SubmodelSpec(3 / 47, rounding="floor").width(47) == 3  # paper: within 1e-9 of 3 counts as 3
    # 100 x 0.29 = 28.999999999999996 (a share-like rate): code 28, paper 29
    assert 100 * 0.29 == 28.999999999999996
    assert SubmodelSpec(0.29, rounding="int").width(100) == 28
    assert SubmodelSpec(0.29, rounding="floor").width(100) == 29
    # exact and plainly fractional products agree: 64 x 0.75 = 48.0, 64 x 0.7 = 44.8 -> 44
    for rounding in ("int", "floor"):
        assert SubmodelSpec(0.75, rounding=rounding).width(64) == 48
        assert SubmodelSpec(0.7, rounding=rounding).width(64) == 44


def test_int_refuses_zero_channels_where_paper_keeps_one():
    # 49 x (1 / 49) = 0.9999999999999999 -> int() = 0; 16 x 0.05 = 0.8 -> 0
    assert 49 * (1 / 49) < 1
    for channels, rate in ((49, 1 / 49), (16, 0.05)):
        with pytest.raises(ZeroWidthError, match=rf"int\({channels} x .*\) = 0 channels"):
            SubmodelSpec(rate, rounding="int").width(channels)
    assert SubmodelSpec(1 / 49, rounding="floor").width(49) == 1
    assert SubmodelSpec(0.05, rounding="floor").width(16) == 1
    assert (truncation("code"), truncation("paper")) == ("int", "floor")


def _scalefl(reference: str) -> dict:
    # conv's first layer has 64 channels: 64 x 0.01 = 0.64 -> int() = 0 channels at level l1
    return base_scenario(
        model={"family": "conv", "scaler": False},
        algorithm={
            "name": "scalefl",
            "reference": reference,
            "exit_head": "light",
            "levels": [{"width": 0.01, "depth": 1}, {"width": 0.5, "depth": 2}, {"width": 1.0, "depth": 4}],
        },
    )


def test_validate_refuses_a_zero_channel_level_in_code_mode(capsys, write_scenario, data_root):
    code, err = run_cli(capsys, "validate", str(write_scenario(_scalefl("code"))))
    assert_one_clear_line(code, err, "algorithm.levels[0].width", "int(64 x 0.01) = 0 channels", "reference: paper")


def test_paper_mode_keeps_one_channel_and_its_widths():
    cfg = _scalefl("paper")["algorithm"]
    s = ScaleFL(ScaleFLConfig(**cfg))
    s.setup(strategy_context(ModelRecipe("conv", 10, 1, (8, 8), scaler=False), 4, 2, weights=False))
    assert [x.rounding for x in s.specs] == ["floor"] * 3
    assert [s.specs[0].width(c) for c in (64, 128, 256, 512)] == [1, 1, 2, 5]  # floor(C x 0.01), at least 1


def test_validate_refuses_a_zero_channel_adaptivefl_pool_model(capsys, write_scenario, data_root):
    data = base_scenario(
        model={"family": "conv"}, algorithm={"name": "adaptivefl", "reference": "code", "width_rates": [0.01, 0.5, 1.0]}
    )
    code, err = run_cli(capsys, "validate", str(write_scenario(data)))
    assert_one_clear_line(code, err, "algorithm.width_rates", "= 0 channels")
