"""AdaptiveFL: the (r_w, I) pool, the RL rewards and tables of Algorithm 1 (paper and official code),
device-side pruning, and short end-to-end runs."""

from __future__ import annotations

import copy
import csv
import json

import numpy as np
import pytest
from conftest import TINY, base_scenario, relative_fleet, strategy_context
from fake_view import MaskOnlyView
from pydantic import ValidationError

from iotfl_sim import methods
from iotfl_sim.algorithms.adaptivefl import (
    AdaptiveFL,
    combined_rewards,
    curiosity_rewards,
    resource_rewards,
    selection_probabilities,
    update_tables,
)
from iotfl_sim.algorithms.base import Assignment, DeviceState, Outcome
from iotfl_sim.cli import main
from iotfl_sim.fl.models.build import build_model
from iotfl_sim.fl.models.families import start_layer_rates
from iotfl_sim.fl.models.layers import count_params
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec
from iotfl_sim.scenario.algorithms import AdaptiveFLConfig

# the paper's pool layout: S3 S2 S1 | M3 M2 M1 | L1
LEVEL_OF = [0, 0, 0, 1, 1, 1, 2]
MEMBERS = [[0, 1, 2], [3, 4, 5], [6]]


class FakeView(MaskOnlyView):
    def __init__(self, n: int) -> None:
        self.num_devices = n
        self.mask = np.ones(n, dtype=bool)

    def selectable_mask(self) -> np.ndarray:
        return self.mask.copy()

    def selectable(self) -> np.ndarray:
        return np.flatnonzero(self.mask)


def make_strategy(n: int = 20, k: int = 5, family: str = "cnn_small", **cfg) -> AdaptiveFL:
    recipe = ModelRecipe(family, 10, 1, (8, 8))
    ctx = strategy_context(recipe, n, k, memory_need=lambda r, s: float(count_params(r.build(s))))
    s = AdaptiveFL(AdaptiveFLConfig(name="adaptivefl", **cfg))
    s.setup(ctx)
    return s


# ---------------------------------------------------------------- pool


def test_start_layer_rates_by_hand():
    # VGG16 (0.4, I=4): convs 0-3 full, convs 4-12 and both hidden FC layers at 0.4
    assert start_layer_rates("vgg16", 0.4, 4) == (1.0,) * 4 + (0.4,) * 9 + (0.4, 0.4)
    # the FC groups are cut by r_w even when I is past every conv
    assert start_layer_rates("vgg16", 0.66, 12) == (1.0,) * 12 + (0.66,) * 3
    assert start_layer_rates("conv", 0.66, 1) == (1.0, 0.66, 0.66, 0.66)
    assert start_layer_rates("resnet18", 0.4, 3) == (1.0, 1.0, 1.0, 0.4)
    with pytest.raises(ValueError):
        start_layer_rates("conv", 0.5, 4)
    with pytest.raises(ValueError):
        start_layer_rates("conv", 0.0, 1)


def test_vgg16_pool_has_table1_parameter_counts():
    table1 = {  # (r_w, I) -> #PARAMS (Table 1; official code's exact counts)
        (0.4, 4): 5_667_148, (0.4, 6): 6_483_040, (0.4, 8): 8_397_106,
        (0.66, 4): 14_839_789, (0.66, 6): 15_410_557, (0.66, 8): 16_814_977,
    }  # fmt: skip
    for (r, start), expect in table1.items():
        spec = SubmodelSpec(rate=r, layer_rates=start_layer_rates("vgg16", r, start), rounding="floor")
        model = build_model("vgg16", spec, num_classes=10, in_channels=3, image_size=(32, 32), scaler=False)
        assert count_params(model) == expect, (r, start)
    full = build_model("vgg16", SubmodelSpec(1.0, rounding="floor"), num_classes=10, in_channels=3,
                       image_size=(32, 32), scaler=False)  # fmt: skip
    assert count_params(full) == 33_646_666


def test_vgg16_strategy_pool_order_and_labels():
    recipe = ModelRecipe("vgg16", 10, 3, (32, 32))  # scaler on in the recipe: the strategy turns it off
    ctx = strategy_context(recipe, 2, 1, memory_need=lambda r, spec: float(count_params(r.build(spec))), weights=False)
    s = AdaptiveFL(AdaptiveFLConfig(name="adaptivefl"))
    s.setup(ctx)
    assert [p.name for p in s.pool] == ["S3", "S2", "S1", "M3", "M2", "M1", "L1"]
    assert s.sizes.tolist() == [5667148, 6483040, 8397106, 14839789, 15410557, 16814977, 33646666]
    assert s.recipe.scaler is False and all(p.rounding == "floor" for p in s.pool)
    assert s.level_of == LEVEL_OF and s.p == 3 and s.heads == {"S1", "M1", "L1"}


def test_non_ascending_start_layers_are_rejected():
    with pytest.raises(ValueError, match="not ascending"):
        make_strategy(family="conv", start_layers=[1, 2, 3])  # (0.4, 3) is larger than (0.66, 1)


def test_config_validation():
    with pytest.raises(ValidationError):
        AdaptiveFLConfig(name="adaptivefl", width_rates=[0.4, 0.66])  # no unpruned level
    with pytest.raises(ValidationError):
        AdaptiveFLConfig(name="adaptivefl", width_rates=[0.66, 0.4, 1.0])
    with pytest.raises(ValidationError):
        AdaptiveFLConfig(name="adaptivefl", start_layers=[6, 4])
    assert methods.method("adaptivefl").strategy_class() is AdaptiveFL


# ---------------------------------------------------------------- rewards


def test_resource_reward_by_hand():
    tr = np.array([[1, 1, 1, 1, 1, 1, 1], [2, 0, 1, 3, 0, 4, 5]], dtype=float)
    # row 0: suffix sums 7 6 5 4 3 2 1, total 7
    #   S = (7 + 6 + 5) / (3 * 7), M = (4 + 3 + 2) / (3 * 7), L = 1 / (3 * 7) (paper) or 1 / 7 (code)
    # row 1: suffix sums 15 13 13 12 9 9 5, total 15
    #   S = (15 + 13 + 13) / 45, M = (12 + 9 + 9) / 45, L = 5 / 45 (paper) or 5 / 15 (code)
    paper = resource_rewards(tr, MEMBERS, 3, "paper")
    code = resource_rewards(tr, MEMBERS, 3, "code")
    np.testing.assert_allclose(paper, [[18 / 21, 9 / 21, 1 / 21], [41 / 45, 30 / 45, 5 / 45]])
    np.testing.assert_allclose(code, [[18 / 21, 9 / 21, 1 / 7], [41 / 45, 30 / 45, 5 / 15]])
    # a row that was penalised to all zeros gets no resource reward (not a division by zero)
    assert resource_rewards(np.zeros((1, 7)), MEMBERS, 3).tolist() == [[0.0, 0.0, 0.0]]


def test_curiosity_and_combined_reward_by_hand():
    rc = curiosity_rewards(np.array([[1, 4, 9]]))
    np.testing.assert_allclose(rc, [[1.0, 0.5, 1 / 3]])
    rs_paper = np.array([[41 / 45, 30 / 45, 5 / 45]])
    rs_code = np.array([[41 / 45, 30 / 45, 5 / 15]])
    # R = min(0.5, R_s) * R_c
    np.testing.assert_allclose(combined_rewards(rs_paper, rc, True, True), [[0.5, 0.25, (5 / 45) / 3]])
    np.testing.assert_allclose(combined_rewards(rs_code, rc, True, True), [[0.5, 0.25, (1 / 3) / 3]])
    np.testing.assert_allclose(combined_rewards(rs_paper, rc, False, True), rs_paper)  # +S: R_s, uncapped
    np.testing.assert_allclose(combined_rewards(rs_paper, rc, True, False), rc)  # +C: R_c
    np.testing.assert_allclose(combined_rewards(rs_paper, rc, False, False), [[1.0, 1.0, 1.0]])
    np.testing.assert_allclose(combined_rewards(rs_paper, rc, True, True, cap=0.3), [[0.3, 0.15, (5 / 45) / 3]])


def test_selection_probability_by_hand():
    reward = np.array([0.5, 0.25, 0.25, 1.0])
    cand = np.array([True, True, False, True])  # client 2 is busy or already drawn this round
    np.testing.assert_allclose(selection_probabilities(reward, cand), [0.5 / 1.75, 0.25 / 1.75, 0.0, 1.0 / 1.75])
    np.testing.assert_allclose(selection_probabilities(np.zeros(4), cand), [1 / 3, 1 / 3, 0.0, 1 / 3])


# ---------------------------------------------------------------- Algorithm 1 table updates


@pytest.mark.parametrize("reference", ["paper", "code"])
def test_tables_returned_whole(reference):
    # S2 (index 1) sent and trained whole: T_r[t] += 1 for t = S2..L1; paper: T_r[L1] += p - 1 = 2 more;
    # code: the extra goes to L1 only when L1 itself was accepted. T_c[S] += 1 twice (sent and back).
    tc, tr = np.ones(3), np.ones(7)
    update_tables(tc, tr, 1, 1, LEVEL_OF, 3, reference)
    assert tc.tolist() == [3, 1, 1]
    assert tr.tolist() == ([1, 2, 2, 2, 2, 2, 4] if reference == "paper" else [1, 2, 2, 2, 2, 2, 2])
    # L1 sent and trained whole: paper +1 +2 = +3, code +1 +3 = +4
    tc, tr = np.ones(3), np.ones(7)
    update_tables(tc, tr, 6, 6, LEVEL_OF, 3, reference)
    assert tc.tolist() == [1, 1, 3]
    assert tr.tolist() == [1, 1, 1, 1, 1, 1, 4 if reference == "paper" else 5]


@pytest.mark.parametrize("reference", ["paper", "code"])
def test_tables_pruned_back(reference):
    # L1 sent, M3 (index 3) came back: T_r[M3] += p = 3 -> 5, then tau = 0, 1, 2, 3 from M3 to L1:
    # M3 5 - 0 = 5, M2 2 - 1 = 1, M1 max(2 - 2, 0) = 0, L1 max(2 - 3, 0) = 0; T_c[L] += 1, T_c[M] += 1
    tc, tr = np.ones(3), np.full(7, 2.0)
    update_tables(tc, tr, 6, 3, LEVEL_OF, 3, reference)
    assert tr.tolist() == [2, 2, 2, 5, 1, 0, 0]
    assert tc.tolist() == [1, 2, 2]


def test_tables_refused_penalise_every_model():
    # nothing fits (paper): a virtual model below S3 came back: T_r[t] = max(T_r[t] - (t + 1), 0)
    tc, tr = np.ones(3), np.array([2, 2, 2, 5, 1, 0, 0], dtype=float)
    update_tables(tc, tr, 3, None, LEVEL_OF, 3)
    assert tr.tolist() == [1, 0, 0, 1, 0, 0, 0]
    assert tc.tolist() == [1, 2, 1]  # only the sent level counts


def test_code_fallback_below_smallest_is_a_pruned_update():
    # the code trains model 0 below the smallest size but books it as a reject, even when model 0 was sent
    tc, tr = np.ones(3), np.ones(7)
    update_tables(tc, tr, 0, 0, LEVEL_OF, 3, "code", accepted=False)
    assert tr.tolist() == [4, 0, 0, 0, 0, 0, 0]
    assert tc.tolist() == [3, 1, 1]


# ---------------------------------------------------------------- device side


def sized(reference: str = "paper") -> AdaptiveFL:
    s = make_strategy(reference=reference)  # cnn_small: pool S2 S1 M2 M1 L1 (start layers 0, 1)
    assert [p.name for p in s.pool] == ["S2", "S1", "M2", "M1", "L1"]
    s.sizes = np.array([10.0, 20.0, 30.0, 40.0, 100.0])  # hand sizes in memory units
    return s


def adapt(s: AdaptiveFL, sent: int, free: float):
    a = Assignment(3, s.pool[sent], level=s.pool[sent].name, extras={"model": sent})
    b = s.adapt(a, DeviceState(3, free, 1e9))
    return None if b is None else (b.extras["model"], b.extras["accepted"], b.spec.name)


@pytest.mark.parametrize("reference", ["paper", "code"])
def test_device_side_pruning(reference):
    s = sized(reference)
    assert adapt(s, 4, 100.0) == (4, True, "L1")  # Gamma >= size: kept whole (inclusive)
    assert adapt(s, 4, 35.0) == (2, False, "M2")  # argmax size s.t. size <= Gamma
    assert adapt(s, 3, 39.9) == (2, False, "M2")
    assert adapt(s, 1, 15.0) == (0, False, "S2")
    assert adapt(s, 1, 25.0) == (1, True, "S1")  # never grows past the received model
    if reference == "paper":
        assert adapt(s, 4, 5.0) is None  # nothing fits: refused
    else:
        assert adapt(s, 4, 5.0) == (0, False, "S2")  # the code still trains model 0
        assert adapt(s, 0, 5.0) == (0, False, "S2")


# ---------------------------------------------------------------- selection and observe


def test_select_draws_distinct_clients_and_is_seeded():
    s = make_strategy(n=20, k=5)
    view = FakeView(20)
    a = s.select(0, view, np.random.default_rng(7))
    b = s.select(0, view, np.random.default_rng(7))
    assert [(x.device, x.extras["model"]) for x in a] == [(x.device, x.extras["model"]) for x in b]
    assert len({x.device for x in a}) == 5
    view.mask[:17] = False  # only 3 selectable
    assert sorted(x.device for x in s.select(1, view, np.random.default_rng(1))) == [17, 18, 19]


def test_rl_sends_large_models_only_where_they_fit():
    s = make_strategy(n=20, k=5)
    s.tr[5:, -1] = 0.0  # only clients 0-4 have ever trained L1: the others get R_s(L) = 0
    view = FakeView(20)
    for rnd in range(30):
        for a in s.select(rnd, view, np.random.default_rng(rnd)):
            if a.spec.name == "L1":
                assert a.device < 5


def test_greedy_and_random_variants():
    s = make_strategy(n=20, k=5, selection="greedy")
    out = s.select(0, FakeView(20), np.random.default_rng(0))
    assert {a.spec.name for a in out} == {"L1"}
    s = make_strategy(n=20, k=5, selection="random")
    s.tr[5:, -1] = 0.0  # ignored: clients are uniform
    seen = set()
    for rnd in range(40):
        seen |= {a.device for a in s.select(rnd, FakeView(20), np.random.default_rng(rnd)) if a.spec.name == "L1"}
    assert any(d >= 5 for d in seen)


def test_observe_updates_tables_from_outcomes():
    s = sized()
    whole = adapt_assignment(s, 0, 4, 100.0)
    pruned = adapt_assignment(s, 1, 4, 35.0)
    sent_refused = Assignment(2, s.pool[3], level="M1", extras={"model": 3})
    sent_late = Assignment(5, s.pool[4], level="L1", extras={"model": 4})
    s.observe(0, [
        Outcome(whole[0], "completed", whole[1]),
        Outcome(pruned[0], "completed", pruned[1]),
        Outcome(sent_refused, "refused", None),
        Outcome(sent_late, "deadline", sent_late),
    ])  # fmt: skip
    # 5 models, p = 2, levels S S M M L: accepted L1 -> T_r[L1] += 1 + (p - 1) = 3
    assert s.tr[0].tolist() == [1, 1, 1, 1, 3] and s.tc[0].tolist() == [1, 1, 3]
    # L1 sent, M2 back: T_r[M2] += 2 -> 3, M1 1 - 1 = 0, L1 max(1 - 2, 0) = 0
    assert s.tr[1].tolist() == [1, 1, 3, 0, 0] and s.tc[1].tolist() == [1, 2, 2]
    # refused: T_r[t] = max(1 - (t + 1), 0) = 0 everywhere; T_c[M] += 1
    assert s.tr[2].tolist() == [0, 0, 0, 0, 0] and s.tc[2].tolist() == [1, 2, 1]
    assert s.tr[5].tolist() == [1] * 5 and s.tc[5].tolist() == [1, 1, 1]  # a deadline says nothing
    assert s.history[-1] == {"sent": 4, "whole": 1, "pruned": 1, "refused": 1}


def adapt_assignment(s: AdaptiveFL, device: int, sent: int, free: float):
    a = Assignment(device, s.pool[sent], level=s.pool[sent].name, extras={"model": sent})
    return a, s.adapt(a, DeviceState(device, free, 1e9))


def test_eval_targets_and_avg_columns():
    s = make_strategy()
    labels = [(t.label, t.is_level) for t in s.eval_targets()]
    assert labels == [("S2", False), ("S1", True), ("M2", False), ("M1", True), ("L1", True), ("full", False)]
    s = make_strategy(avg_over="pool")
    assert [t.is_level for t in s.eval_targets()] == [True] * 5 + [False]


# ---------------------------------------------------------------- end to end


def run(tmp_path, write_scenario, name: str, **over) -> list[dict]:
    data = base_scenario(fleet=relative_fleet(), **over)
    out = tmp_path / name
    assert main(["run", str(write_scenario(data, f"{name}.yaml")), "--out", str(out), "--quiet"]) == 0
    (path,) = list(out.iterdir())
    json.loads((path / "summary.json").read_text())
    return list(csv.DictReader(open(path / "rounds.csv")))


def test_end_to_end_digits(tmp_path, write_scenario):
    rows = run(
        tmp_path, write_scenario, "torch",
        rounds=2, clients_per_round=4, algorithm={"name": "adaptivefl"},
        model={"family": "cnn_small", "scaler": False}, server={"eval_every": 2, "bn_calibration_samples": 100},
    )  # fmt: skip
    assert len(rows) == 2 and rows[0]["acc_full"] == ""  # evaluated at the last round only
    for r in rows[1:]:
        accs = {k: float(r[f"acc_{k}"]) for k in ("S2", "S1", "M2", "M1", "L1", "full")}
        assert all(0.0 <= v <= 1.0 for v in accs.values())
        assert float(r["acc_avg"]) == pytest.approx(np.mean([accs["S1"], accs["M1"], accs["L1"]]))
        assert accs["L1"] == accs["full"]
        assert r["comm_waste"] != "" and 0.0 <= float(r["comm_waste"]) <= 1.0


def test_rl_wastes_less_than_greedy(tmp_path, write_scenario):
    common = dict(rounds=25, clients_per_round=4, numerics="none", model={"family": "cnn_small"})
    waste = {}
    for sel in ("rl", "greedy"):
        rows = run(tmp_path, write_scenario, sel, algorithm={"name": "adaptivefl", "selection": sel}, **common)
        waste[sel] = float(rows[-1]["comm_waste_cum"])
    # greedy sends L1 to weak and medium devices too, which prune it (about half the fleet)
    assert waste["rl"] < waste["greedy"]
    rows = run(tmp_path, write_scenario, "code", algorithm={"name": "adaptivefl", "reference": "code"}, **common)
    assert len(rows) == 25


# ---------------------------------------------------------------- nested-only pruning (paper) vs any smaller (code)


def test_nesting_of_the_pool_by_hand():
    # cnn_small (32, 64, 128 channels), int() rounding: S2 = (0.4, I=0) -> 12/25/51, S1 = (0.4, I=1) -> 32/25/51,
    # M2 = (0.66, 0) -> 21/42/84, M1 = (0.66, 1) -> 32/42/84, L1 -> 32/64/128. S1 keeps all 32 channels of the
    # first conv, M2 only 21: S1 is smaller than M2 (fewer parameters) but cannot be cut from it
    s = make_strategy()
    assert s.nested.tolist() == [  # rows: the model received; columns: the model cut from it
        [True, False, False, False, False],
        [True, True, False, False, False],
        [True, False, True, False, False],
        [True, True, True, True, False],
        [True, True, True, True, True],
    ]


@pytest.mark.parametrize("reference,expect", [("paper", (0, False, "S2")), ("code", (1, False, "S1"))])
def test_paper_prunes_only_to_models_nested_in_the_received_one(reference, expect):
    # received M2 (size 30) with Gamma = 25: the largest smaller pool model is S1 (20), which the official
    # code trains (cut from the global weights); the paper's device prunes M2 itself and can only reach S2 (10)
    s = sized(reference)
    assert adapt(s, 2, 25.0) == expect
    # where the largest smaller model is nested the two agree: M1 (40) with Gamma 25 -> S1 in both
    assert adapt(s, 3, 25.0) == (1, False, "S1")


# ---------------------------------------------------------------- the unconstrained All-Large baseline


def all_large_run(tmp_path, write_scenario, memory: str, numerics: str = "torch") -> tuple[int, object]:
    small = copy.deepcopy(TINY)
    small["memory"] = {"total_mb": 1, "free_mb": 0.01, "sigma_mb": 0.0}  # 10 kB: cnn_small needs far more
    data = base_scenario(
        rounds=1,
        clients_per_round=3,
        numerics=numerics,
        fleet={"groups": [{"name": "small", "count": 3, "profile": small}]},
        algorithm={"name": "fedavg", "memory": memory},
        server={"eval_every": 1, "bn_calibration_samples": 100},
        output={"progress": False, "events": "all"},
    )
    out = tmp_path / memory
    code = main(["run", str(write_scenario(data, f"{memory}.yaml")), "--out", str(out), "--quiet"])
    return code, out


def test_unconstrained_all_large_trains_the_full_model_where_memory_cannot_hold_it(tmp_path, write_scenario, capsys):
    # exclusive All-Large: no device of this fleet can hold the model, so the run is refused before training
    code, _ = all_large_run(tmp_path, write_scenario, "exclude")
    assert code == 2 and "no device can hold any submodel of fedavg" in capsys.readouterr().err
    # unconstrained All-Large (memory: ignore): all three devices train the full model and it comes back
    code, out = all_large_run(tmp_path, write_scenario, "ignore")
    assert code == 0
    (path,) = list(out.iterdir())
    events = [json.loads(x) for x in open(path / "events.jsonl")]
    trained = {e["device"] for e in events if e["event"] == "train_start" and e["level"] == "full"}
    arrived = [e["free"] for e in events if e["event"] == "arrive"]
    assert trained == {0, 1, 2} and arrived == [pytest.approx(0.01)] * 3
    summary = json.loads((path / "summary.json").read_text())
    assert summary["completed"] == 3 and summary["failures"]["oom"] == 0
    assert 0.0 < summary["final_accuracy"]["acc_full"] <= 1.0
