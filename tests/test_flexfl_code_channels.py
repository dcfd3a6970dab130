"""FlexFL's ``reference: code`` channel counts: the official code's int(C x rate) exactly, in the pool's models, the
search's size count and the cost model, and a searched rate that leaves some layer 0 channels refused before the run
writes anything; ``reference: paper`` keeps the tolerant floor with at least one channel."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import base_scenario, relative_fleet, strategy_context
from test_cli_errors import assert_one_clear_line, run_cli

from iotfl_sim.algorithms import flexfl as fx
from iotfl_sim.fl import apoz as ap
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec, ZeroWidthError
from iotfl_sim.scenario.algorithms import FlexFLConfig

CONV = ModelRecipe("conv", 62, 1, (28, 28), scaler=False)
CONV_HIDDEN = (64, 128, 256, 512)


def conv_group_params(widths) -> int:
    """CONV's layer-group parameters by hand (the code's size count, no classifier): a 3x3 conv with bias and BN,
    cin * cout * 9 + 3 cout per layer, on a 1-channel input."""
    cin, total = 1, 0
    for cout in widths:
        total, cin = total + cin * cout * 9 + 3 * cout, cout
    return total


def int_widths(rate: float) -> list[int]:
    return [int(c * rate) for c in CONV_HIDDEN]


def flexfl(monkeypatch, reference: str, apoz: float) -> fx.FlexFL:
    """FlexFL on CONV with every layer's APoZ at ``apoz`` (the value a system-only run uses in place of the measured
    one) and AdjW = 1, so every score is 1 - apoz and every layer of a pool model has the same rate."""
    monkeypatch.setattr(fx, "UNIFORM_APOZ", apoz)
    s = fx.FlexFL(FlexFLConfig(name="flexfl", reference=reference, adjustment=False, targets=[0.2, 0.5, 1.0]))
    s.setup(strategy_context(CONV, 10, 10, rounds=5, samples=100, weights=False))
    return s


def test_code_pool_keeps_int_channels_where_the_product_is_just_below_an_integer(monkeypatch):
    # APoZ 0.34: s = 1 - 0.34 = 0.6599999999999999 in floating point, and at gamma = 132 the code's rate is
    # s x 100 / 132 = 0.4999999999999999, so C x rate falls just below C / 2 in every layer: int() keeps
    # 31, 63, 127, 255 where the tolerant floor keeps 32, 64, 128, 256.
    s_l = 1.0 - 0.34
    assert s_l == 0.6599999999999999
    rate = s_l * 100.0 / 132
    assert rate == 0.4999999999999999
    assert [c * rate for c in CONV_HIDDEN] == [31.999999999999993, 63.999999999999986, 127.99999999999997, 255.99999999999994]
    assert int_widths(rate) == [31, 63, 127, 255]
    # M1 (target 0.2, window [0.15, 0.25]): the code's first gamma whose int-counted layer groups are <= 0.25 of
    # the full 1,551,744. gamma 131: rate 0.50381..., int widths 32, 64, 128, 257 -> 389,955 = 0.2513 (above);
    # gamma 132: 31, 63, 127, 255 -> 382,758 = 0.2467 (a hit). Counted with the floor, gamma 132 would give
    # 32, 64, 128, 256 -> 388,800 = 0.2506, above the window: the count must use int() too.
    full = conv_group_params(CONV_HIDDEN)
    assert full == 1_551_744
    assert int_widths(s_l * 100.0 / 131) == [32, 64, 128, 257]
    assert conv_group_params([32, 64, 128, 257]) == 389_955 and 389_955 / full > 0.25
    assert conv_group_params([31, 63, 127, 255]) == 382_758 and 0.15 <= 382_758 / full <= 0.25
    assert conv_group_params([32, 64, 128, 256]) == 388_800 and 388_800 / full > 0.25

    s = flexfl(monkeypatch, "code", 0.34)
    m1 = s.pool[0]
    assert m1.name == "M1" and m1.spec.layer_rates == (rate,) * 4
    assert [m1.spec.width(c, layer) for layer, c in enumerate(CONV_HIDDEN)] == [31, 63, 127, 255]
    assert s.recipe.shapes(m1.spec)["features.0.conv.weight"][0] == 31  # the model built has 31 channels
    # the cost model (memory need, FLOPs, wire size) counts the same model: the groups, then a 255 x 62 classifier
    assert s.recipe.cost(m1.spec).params == 382_758 + 255 * 62 + 62
    assert s.global_spec.rounding == "int"


def test_code_widths_are_int_and_equal_the_paper_rounding_wherever_they_agree(monkeypatch):
    s = flexfl(monkeypatch, "code", 0.34)
    differ = 0
    for p in s.pool[:-1]:
        floor = SubmodelSpec(1.0, layer_rates=p.spec.layer_rates, rounding="floor")
        for layer, c in enumerate(CONV_HIDDEN):
            product = c * p.spec.layer_rates[layer]
            assert p.spec.width(c, layer) == int(product)
            if int(product) == int(product + 1e-9):  # not within 1e-9 below an integer: the two rules agree
                assert p.spec.width(c, layer) == floor.width(c, layer)
            else:
                differ += 1
                assert p.spec.width(c, layer) == floor.width(c, layer) - 1
    assert differ == 4  # M1's four layers (the test above); M2', M2 and M3' land on plain fractions


def test_paper_mode_keeps_the_tolerant_floor(monkeypatch):
    s = flexfl(monkeypatch, "paper", 0.34)
    assert s.global_spec.rounding == "floor"
    assert all(p.spec.rounding == "floor" for p in s.pool)
    # a product just below an integer still counts as that integer in paper mode: 64 x 0.4999999999999999 -> 32
    assert SubmodelSpec(1.0, layer_rates=(0.4999999999999999,) * 4, rounding="floor").width(64, 0) == 32


def mean_rates_zero_below(limit: float):
    """A toy size function (the mean of the rates) that, like an int() count, raises for a rate under ``limit``."""

    def fraction(rates):
        if min(rates) < limit:
            raise ZeroWidthError(f"int(C x {min(rates):g}) = 0 channels at layer group 0")
        return float(np.mean(rates))

    return fraction


def test_code_search_passes_zero_channel_gammas_beyond_the_hit_and_refuses_one_before_it():
    # s = [0.2, 0.4]: rates 20/g and 40/g, mean 30/g; a rate under 0.15 has 0 channels, i.e. gamma >= 134
    # (20/133 = 0.1504, 20/134 = 0.1493). Target 0.3: the first mean <= 0.35 is at gamma 86 (30/86 = 0.3488,
    # gamma 85: 0.3529), below 134: the zero-channel gammas beyond it (199 among them) change nothing.
    frac = mean_rates_zero_below(0.15)
    assert ap.search_code(np.array([0.2, 0.4]), frac, 0.3) == pytest.approx((20 / 86, 40 / 86))
    # Target 0.12: the first mean <= 0.17 is at gamma 177 (30/177 = 0.1695; 30/176 = 0.1705), past 134: the
    # code's loop meets gamma 134 first, with a layer at 0 channels, and so would end with none.
    with pytest.raises(ZeroWidthError, match="= 0 channels"):
        ap.search_code(np.array([0.2, 0.4]), frac, 0.12)


def _dead_first_layer(reference: str) -> dict:
    # cnn_small's first layer has 32 channels; with its APoZ at 1 and AdjW = 1 its score is 0, so its rate is
    # clamp(0 x 100 / gamma) = 0.01 at every gamma, and int(32 x 0.01) = int(0.32) = 0 channels.
    return base_scenario(
        rounds=1,
        clients_per_round=3,
        fleet=relative_fleet((2, 2, 2)),
        model={"family": "cnn_small", "scaler": False},
        algorithm={"name": "flexfl", "reference": reference, "adjustment": False, "pretrain_epochs": 0,
                   "proxy_fraction": 0.05},
    )  # fmt: skip


def test_run_refuses_a_searched_rate_giving_zero_channels(capsys, monkeypatch, tmp_path, write_scenario):
    monkeypatch.setattr(ap, "layer_apoz", lambda *a, **k: [1.0, 0.3, 0.3])  # the measured APoZ, first layer dead
    out = tmp_path / "runs"
    out.mkdir()
    code, err = run_cli(capsys, "run", str(write_scenario(_dead_first_layer("code"))), "--out", str(out), "--quiet")
    # the checks run makes before it builds the simulation print their notes (memory fit, participation) first
    err = "".join(line for line in err.splitlines(True) if not line.startswith("note: "))
    assert_one_clear_line(
        code, err, "algorithm.targets[0]", "int(32 x 0.01) = 0 channels at layer group 0", "apoz: false",
        "reference: paper",
    )  # fmt: skip
    assert list(out.iterdir()) == []  # refused before the run folder is made
