"""benchmarks/claims_figures_adaptivefl.py: the level-spread figure on hand-made rounds.csv columns."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from claims_figures_adaptivefl import level_spread_run  # noqa: E402

nan = math.nan


def _cols(**cols):
    return {k: np.array(v, dtype=float) for k, v in cols.items()}


def test_spread_is_the_band_width_averaged_over_evaluated_rounds():
    # rounds 1-3; round 1 not evaluated. Round 2: heads 0.60 / 0.70 / 0.80 -> 0.20; round 3: 0.70 / 0.75 / 0.72
    # -> 0.05; mean 0.125. S2 (a pool member, not a level head) at 0.10 would widen both bands if counted.
    rounds = _cols(
        round=[1, 2, 3],
        acc_full=[nan, 0.8, 0.72],
        acc_avg=[nan, 0.7, 0.7233],
        acc_S1=[nan, 0.60, 0.70],
        acc_M1=[nan, 0.70, 0.75],
        acc_L1=[nan, 0.80, 0.72],
        acc_S2=[nan, 0.10, 0.10],
    )
    assert level_spread_run("adaptivefl", rounds) == pytest.approx(0.125)


def test_each_methods_levels():
    # HeteroFL levels a, b, c (acc_full is level a's model, acc_avg their mean: neither is a level)
    het = _cols(acc_full=[0.9], acc_avg=[0.5], acc_a=[0.9], acc_b=[0.6], acc_c=[0.3])
    assert level_spread_run("heterofl", het) == pytest.approx(0.6)
    assert level_spread_run("decoupled", het) == pytest.approx(0.6)
    sca = _cols(acc_full=[0.9], acc_l1=[0.4], acc_l2=[0.5], acc_l3=[0.7], acc_l4=[0.9])
    assert level_spread_run("scalefl", sca) == pytest.approx(0.5)
    flex = _cols(acc_full=[0.85], acc_small=[0.80], acc_medium=[0.83], acc_large=[0.85])
    assert level_spread_run("flexfl", flex) == pytest.approx(0.05)


def test_a_round_with_a_level_missing_is_skipped_and_no_levels_is_nan():
    rounds = _cols(
        acc_a=[0.9, 0.8], acc_b=[nan, 0.5], acc_c=[0.1, 0.6]
    )  # round 1 lacks b: only round 2 counts
    assert level_spread_run("heterofl", rounds) == pytest.approx(0.3)
    assert math.isnan(level_spread_run("fedavg", _cols(acc_full=[0.9])))  # All-Large: no levels
    assert math.isnan(level_spread_run("heterofl", _cols(acc_a=[0.9])))  # one level: no spread
    assert math.isnan(level_spread_run("heterofl", _cols(acc_a=[nan], acc_b=[0.5])))  # never all evaluated
