"""FlexFL: APoZ (eq. 1-2), adjustment weight (eq. 3), Algorithm 1's search (paper and code rules), the
pool, DevSel on declared resources, AdaPrune, the self-KD wiring, and short end-to-end runs."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
import torch
from conftest import base_scenario, relative_fleet, strategy_context
from fake_view import MaskOnlyView

from iotfl_sim import methods
from iotfl_sim.algorithms.base import DeviceState
from iotfl_sim.algorithms.flexfl import FlexFL, pool_names
from iotfl_sim.cli import main
from iotfl_sim.fl import apoz as ap
from iotfl_sim.fl.objectives import objective_loss
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec
from iotfl_sim.scenario.algorithms import FlexFLConfig
from iotfl_sim.sim.server_cost import ServerCost

# The official code's stored APoZ preset for VGG16 on CIFAR-10 (Training_FlexFL.py, --apoz 9).
VGG_CIFAR10_APOZ = [
    0.5064863739013672, 0.5133746032714843, 0.6503060302734375, 0.6177527160644531, 0.6347842559814453,
    0.5949074096679687, 0.5648363647460938, 0.6065169677734376, 0.6035700073242187, 0.5883703002929688,
    0.5890387573242187, 0.8103564453125, 0.96360400390625, 0.9940224609375, 0.8050889892578125,
]  # fmt: skip
VGG = ModelRecipe("vgg16", 10, 3, (32, 32), scaler=False)
CONV = ModelRecipe("conv", 62, 1, (28, 28), scaler=False)


# ---------------------------------------------------------------- APoZ


def test_zero_fraction_on_a_hand_made_activation():
    act = torch.tensor([[[0.0, 1.0], [2.0, 0.0]], [[0.0, 0.0], [0.0, 3.0]]])  # 2 samples, N = 4
    assert ap.zero_fraction_per_sample(act).tolist() == [0.5, 0.75]
    # eq. 1: (2 + 3) zeros / (2 samples x 4) = 0.625 = the mean of the per-sample fractions
    assert float(ap.zero_fraction_per_sample(act).mean()) == 0.625


def test_layer_apoz_of_an_mlp_with_hand_set_weights():
    model = ModelRecipe("mlp", 10, 1, (2, 2), norm="none", scaler=False).build(SubmodelSpec())
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.hidden[0].bias[:50] = 1.0  # 50 of 200 units positive: APoZ 150/200
        model.hidden[0].bias[50:] = -1.0
        model.hidden[4].bias[:] = -1.0  # every unit of layer 2 negative: APoZ 1
    out = ap.layer_apoz(model, "mlp", torch.randn(7, 1, 2, 2))
    assert out == pytest.approx([0.75, 1.0])


def test_block_apoz_is_the_mean_over_its_relus_eq2():
    torch.manual_seed(0)
    recipe = ModelRecipe("resnet18", 10, 3, (8, 8), scaler=False)
    model = recipe.build(SubmodelSpec(0.25))
    groups = ap.relus_by_group(model, "resnet18")
    assert [len(g) for g in groups] == [4, 4, 4, 5]  # 2 blocks x 2 ReLUs; stage 4 adds the head's ReLU
    seen: dict[int, list[float]] = {}
    for g in groups:
        for m in g:
            m.register_forward_hook(
                lambda mod, i, o: seen.setdefault(id(mod), []).append(float((o == 0).float().mean()))
            )
    x = torch.randn(6, 3, 8, 8)
    got = ap.layer_apoz(model, "resnet18", x, batch_size=6)
    want = [sum(seen[id(m)][0] for m in g) / len(g) for g in groups]
    assert got == pytest.approx(want)


# ---------------------------------------------------------------- eq. 3


def test_adjustment_weight_on_conv_groups_by_hand():
    sizes = ap.group_param_counts(CONV.build(SubmodelSpec()), "conv")
    # conv block: cin * cout * 9 weights + cout bias + 2 cout BN affine
    assert sizes == [1 * 64 * 9 + 3 * 64, 64 * 128 * 9 + 3 * 128, 128 * 256 * 9 + 3 * 256, 256 * 512 * 9 + 3 * 512]
    assert sizes == [768, 74112, 295680, 1181184]
    adj = ap.adjustment_weights(sizes)
    assert adj == pytest.approx([math.log(768) / math.log(1181184), math.log(74112) / math.log(1181184),
                                 math.log(295680) / math.log(1181184), 1.0])  # fmt: skip
    assert adj[0] == pytest.approx(0.47517, abs=1e-5)  # 6.64379 / 13.98202
    s = ap.layer_scores([0.5, 0.2, 0.4, 0.8], adj)
    assert s[3] == pytest.approx(1 - 0.8) and s[0] == pytest.approx(1 - 0.5 * 0.47517, abs=1e-5)


def test_vgg16_groups_are_13_convs_and_2_fc_blocks():
    with torch.device("meta"):
        sizes = ap.group_param_counts(VGG.build(SubmodelSpec()), "vgg16")
    assert len(sizes) == 15
    assert sizes[0] == 3 * 64 * 9 + 3 * 64 and sizes[12] == 512 * 512 * 9 + 3 * 512
    assert sizes[13:] == [512 * 4096 + 4096, 4096 * 4096 + 4096]  # Linear + bias


# ---------------------------------------------------------------- Algorithm 1


def mean_rates(rates):  # a toy size function: fraction = mean of the rates
    return float(np.mean(rates))


def test_paper_search_by_hand():
    # rates = clamp(s * gamma, 0.01, 1), s = [0.5, 1]: mean = 0.75 gamma; first |0.3 - mean| <= 0.01 at
    # gamma = 0.39 (0.2925; gamma = 0.38 gives 0.285)
    rates = ap.search_paper(np.array([0.5, 1.0]), mean_rates, 0.3, eps=0.01, step=0.01)
    assert rates == pytest.approx((0.195, 0.39))
    # a size that jumps over the window: the paper's loop would never stop
    with pytest.raises(ap.SearchError):
        ap.search_paper(np.array([1.0]), lambda r: round(r[0] * 4) / 4, 0.3, eps=0.01)


def test_code_search_by_hand():
    # rates = clamp(s * 100 / gamma), s = [0.2, 0.4]: mean = 30 / gamma (gamma >= 40); the first gamma
    # with mean in [0.25, 0.35] is 86 (30/86 = 0.3488; gamma 85 gives 0.3529): near the window's top
    rates = ap.search_code(np.array([0.2, 0.4]), mean_rates, 0.3, tol=0.05)
    assert rates == pytest.approx((20 / 86, 40 / 86))
    with pytest.raises(ap.SearchError):
        ap.search_code(np.array([0.0001, 0.0001]), mean_rates, 0.9)  # even gamma = 1 is too small


def test_bisection_equals_the_linear_scan_on_a_real_model():
    scores = ap.layer_scores([0.3, 0.5, 0.6, 0.8], ap.adjustment_weights([768, 74112, 295680, 1181184]))
    frac = ap.size_fraction(CONV, groups_only=False)
    k = 0
    while abs(frac(ap.clamp_rates(scores * k * 0.01)) - 0.5) > 0.01:  # the paper's loop, literally
        k += 1
    assert ap.search_paper(scores, frac, 0.5, 0.01) == pytest.approx(ap.clamp_rates(scores * (k * 0.01)))
    frac_code = ap.size_fraction(CONV, groups_only=True)
    g = next(g for g in range(1, 200) if 0.2 <= frac_code(ap.clamp_rates(scores * 100 / g)) <= 0.3)
    assert ap.search_code(scores, frac_code, 0.25) == ap.clamp_rates(scores * 100 / g)


# ---------------------------------------------------------------- the strategy


def relative_need(recipe: ModelRecipe, spec: SubmodelSpec) -> float:
    full = ap.param_count(recipe, None, False)
    return 100.0 * ap.param_count(recipe, spec.layer_rates, False) / full


def make(recipe: ModelRecipe = CONV, n: int = 10, declared=None, state: bool = False, **cfg) -> FlexFL:
    declared = np.array([35.0] * 4 + [60.0] * 3 + [110.0] * 3) if declared is None else declared
    ctx = strategy_context(
        recipe, n, n, rounds=5, samples=100, memory_need=relative_need, declared=declared, weights=state
    )
    s = FlexFL(FlexFLConfig(name="flexfl", **cfg))
    s.setup(ctx)
    return s


def test_registered():
    assert methods.method("flexfl").strategy_class() is FlexFL
    assert [x[0] for x in pool_names(3, True)] == ["M1", "M2'", "M2", "M3'", "M3"]
    assert [x[0] for x in pool_names(3, False)] == ["M1", "M2", "M3"]


def conv_params(rates, groups_only: bool = False) -> int:
    """CONV's parameters by hand: group l is a 3x3 conv int(C_l x rate) channels wide with bias and BN
    (cin * cout * 9 + 3 cout), C = 64, 128, 256, 512 on a 1-channel input; then the classifier
    cout * 62 + 62 (outside the layer groups)."""
    cin, total = 1, 0
    for c, r in zip((64, 128, 256, 512), rates, strict=True):
        cout = max(1, int(c * r))
        total, cin = total + cin * cout * 9 + 3 * cout, cout
    return total if groups_only else total + cin * 62 + 62


def test_pool_paper_rule_by_a_hand_count():
    s = make(CONV)
    assert [p.name for p in s.pool] == ["M1", "M2'", "M2", "M3'", "M3"]
    assert s.pool[-1].spec.layer_rates is None  # M3 is the global model
    full = conv_params((1, 1, 1, 1))
    assert full == 1_583_550
    # targets 0.25, 0.5 and the adaptive models at target - Gamma: 0.5 - 0.1, 1 - 0.1
    for p, target in zip(s.pool[:-1], (0.25, 0.4, 0.5, 0.9), strict=True):
        rates = np.array(p.spec.layer_rates)
        free = (rates > 0.01) & (rates < 1)  # rates = clamp(s x gamma): gamma from an unclamped one
        k = round(float(rates[free][0] / s.scores[free][0]) / 0.01)
        assert rates == pytest.approx(np.clip(s.scores * k * 0.01, 0.01, 1))
        assert abs(conv_params(rates) / full - target) <= 0.01  # Algorithm 1's stop, by the hand count
        prev = np.clip(s.scores * (k - 1) * 0.01, 0.01, 1)  # and gamma is the first grid point that stops
        assert conv_params(prev) / full < target - 0.01
    for a, b in zip(s.pool[:-2], s.pool[1:-1], strict=True):  # nested: rates never shrink up the pool
        assert all(x <= y for x, y in zip(a.spec.layer_rates, b.spec.layer_rates, strict=True))


def test_pool_code_rule_on_the_official_vgg_preset():
    scores = ap.layer_scores(VGG_CIFAR10_APOZ, ap.adjustment_weights(
        ap.group_param_counts(VGG.build(SubmodelSpec()), "vgg16")))  # fmt: skip
    frac = ap.size_fraction(VGG, groups_only=True)
    for target in (0.25, 0.4, 0.5, 0.9):
        rates = ap.search_code(scores, frac, target)
        got = frac(rates)
        assert target - 0.05 <= got <= target + 0.05
        g = next(g for g in range(1, 200) if ap.clamp_rates(scores * 100 / g) == rates)
        assert frac(ap.clamp_rates(scores * 100 / (g - 1))) > target + 0.05  # the first gamma that lands


def test_pool_code_rule_counts_groups_only():
    s = make(CONV, reference="code")
    full = conv_params((1, 1, 1, 1), groups_only=True)
    assert full == 1_551_744  # without the classifier's 512 * 62 + 62
    for p, target in zip(s.pool[:-1], (0.25, 0.4, 0.5, 0.9), strict=True):
        rates = np.array(p.spec.layer_rates)
        free = (rates > 0.01) & (rates < 1)  # rates = clamp(s x 100 / g): the integer g from an unclamped one
        g = round(float(100 * s.scores[free][0] / rates[free][0]))
        assert rates == pytest.approx(np.clip(s.scores * 100 / g, 0.01, 1))
        # the code's window, on the layer groups only, by the hand count; g - 1 is still above it
        assert target - 0.05 <= conv_params(rates, groups_only=True) / full <= target + 0.05
        prev = np.clip(s.scores * 100 / (g - 1), 0.01, 1)
        assert conv_params(prev, groups_only=True) / full > target + 0.05


def test_ablations_change_the_scores():
    s = make(CONV, apoz=False)
    adj = ap.adjustment_weights([768, 74112, 295680, 1181184])
    assert s.scores.tolist() == pytest.approx([1 - 0.5 * a for a in adj])  # w/o APoZ: AdjW alone
    s = make(CONV, apoz=False, adjustment=False)
    for p in s.pool[:-1]:  # uniform rates
        assert len(set(p.spec.layer_rates)) == 1
    s = make(CONV, adjustment=False)
    assert s.adjw == [1.0] * 4
    assert [p.name for p in make(CONV, adaptive_models=False).pool] == ["M1", "M2", "M3"]


def test_system_only_charges_pretraining_and_apoz_flops():
    s = make(CONV)
    work = dict(s.c.server_work.drain())
    cost = s.recipe.cost(s.global_spec)
    # proxy = 1 % of 10 x 100 samples = 10; 8 train x 100 epochs (Adam, batch 50: the code's), 2 for APoZ
    pre, apoz = work["pretrain"], work["apoz"]
    assert (pre.spec, pre.samples, pre.epochs, pre.batch) == (s.global_spec, 8, 100, 50)
    assert (apoz.spec, apoz.samples) == (s.global_spec, 2)
    flop_rule = ServerCost(None, flops=1.0)  # the old count: 3 x forward FLOPs per trained sample, 1 x per scored one
    assert flop_rule.price(pre).seconds == pytest.approx(3 * cost.flops_forward_per_sample * 8 * 100)
    assert flop_rule.price(apoz).seconds == pytest.approx(cost.flops_forward_per_sample * 2)
    assert s.apoz == [0.5] * 4


class View(MaskOnlyView):
    def __init__(self, declared):
        self.declared = np.asarray(declared, dtype=float)
        self.num_devices = len(declared)

    def selectable_mask(self):
        return np.ones(self.num_devices, dtype=bool)

    def declared_free_memory(self):
        return self.declared

    def true_state(self, strategy):
        raise AssertionError("FlexFL uses declared resources only")


def test_devsel_dispatches_the_largest_level_model_by_declared_resource():
    declared = [35.0] * 4 + [60.0] * 3 + [110.0] * 2 + [20.0]
    s = make(CONV, declared=np.array(declared))
    out = s.select(0, View(declared), np.random.default_rng(0))
    assert {a.device: a.level for a in out} == {**dict.fromkeys(range(4), "M1"), **dict.fromkeys(range(4, 7), "M2"),
                                                 7: "M3", 8: "M3"}  # fmt: skip
    assert 9 not in {a.device for a in out}  # 20 % holds no model


def test_adaprune_order_and_refusal():
    s = make(CONV)
    (m1, m2a, m2, m3a, m3) = s.pool
    a = s.select(0, View([110.0] * 10), np.random.default_rng(0))[0]
    assert a.level == "M3"
    need = {p.name: relative_need(CONV, p.spec) for p in s.pool}

    def adapt(free):
        b = s.adapt(a, DeviceState(a.device, free, 1.0))
        return None if b is None else b.level

    assert adapt(100.0) == "M3"
    assert adapt(99.0) == "M3'"  # M3' ~ 90 %
    assert adapt(need["M3'"] - 0.01) == "M2"
    assert adapt(need["M2"] - 0.01) == "M2'"
    assert adapt(need["M2'"] - 0.01) == "M1"
    assert adapt(need["M1"] - 0.01) is None  # refused
    b = s.adapt(a, DeviceState(a.device, 45.0, 1.0))
    assert b.spec == m2a.spec and b.extras["dispatched"] == "M3"
    # a dispatched M2 never grows
    a2 = s.select(0, View([60.0] * 10), np.random.default_rng(0))[0]
    assert s.adapt(a2, DeviceState(0, 500.0, 1.0)).level == "M2"
    # without adaptive models M3 falls to M2
    s = make(CONV, adaptive_models=False)
    a = s.select(0, View([110.0] * 10), np.random.default_rng(0))[0]
    assert s.adapt(a, DeviceState(0, 95.0, 1.0)).level == "M2"


def test_self_kd_wiring_paper_and_code():
    s = make(CONV)
    spec = {p.name: p.spec for p in s.pool}
    a = s.select(0, View([110.0] * 10), np.random.default_rng(0))[0]

    def obj(name):
        return s.local_objective(s.adapt(a, DeviceState(0, relative_need(CONV, spec[name]), 1.0)))

    # hand-made logits (2 samples, 3 classes) and 4 distinct teachers: the loss eq. 4 gives with the official code's
    # tau = 3, lambda = 10 and KLDivLoss()'s mean over batch x classes (official_code_notes.md:51), in numpy
    student = torch.tensor([[3.0, 0.0, 0.0], [0.0, 1.5, -1.5]], dtype=torch.float64)
    y = torch.tensor([0, 2])
    zs = [torch.tensor(z, dtype=torch.float64) for z in ([[0, 0, 0], [1, 0, 0]], [[2, 1, 0], [0, 0, 3]],
                                                          [[-1, 2, 0], [0.5, 0.5, 0]], [[0, 0, 4], [1, -1, 0]])]  # fmt: skip

    def by_hand(k: int, divisor: float) -> float:
        def soft(z, t):
            e = np.exp(z / t - z.max(1, keepdims=True) / t)
            return e / e.sum(1, keepdims=True)

        zn = student.numpy()
        ce = -np.mean(np.log(soft(zn, 1.0))[np.arange(2), y.numpy()])
        ps = soft(zn, 3.0)
        kd = sum(9.0 * np.mean(soft(z.numpy(), 3.0) * np.log(soft(z.numpy(), 3.0) / ps)) for z in zs[:k])
        return float(ce + 10.0 * kd / divisor)

    def loss(o) -> float:
        return float(objective_loss(o, student, y, teachers=lambda x: zs[: len(o.teachers)], x=torch.zeros(2, 1)))

    o = obj("M3")
    assert (o.kind, o.teachers, o.divisor, o.reduction) == ("self_kd", (spec["M1"], spec["M2"]), 2.0, "mean")
    assert loss(o) == pytest.approx(by_hand(2, 2.0), rel=1e-12)  # the defaults' eq. 4: M1 and M2 teach, / 2
    assert obj("M3'").teachers == (spec["M1"], spec["M2"]) and obj("M3'").divisor == 2.0
    assert obj("M2").teachers == (spec["M1"],) and obj("M2").divisor == 1.0
    assert obj("M2'").teachers == (spec["M1"],) and obj("M2'").divisor == 1.0
    assert obj("M1").kind == "ce"
    s = make(CONV, reference="code")
    spec = {p.name: p.spec for p in s.pool}
    o = obj("M3")
    assert o.teachers == (spec["M1"], spec["M2'"], spec["M2"], spec["M3'"]) and o.divisor == 4.0
    assert loss(o) == pytest.approx(by_hand(4, 4.0), rel=1e-12)  # the code's four teachers, / 4, KL mean-reduced
    assert obj("M2").teachers == (spec["M1"], spec["M2'"]) and obj("M2").divisor == 2.0
    # the reduction is its own option, whichever reference picks the teachers
    for reference in ("paper", "code"):
        s = make(CONV, reference=reference, kd_reduction="batchmean")
        spec = {p.name: p.spec for p in s.pool}
        assert obj("M3").reduction == "batchmean"
    s = make(CONV, self_kd=False)
    assert obj("M3").kind == "ce"


def test_kd_reduction_mean_is_batchmean_over_the_classes_by_hand():
    # FEMNIST's 62 classes, T = 3, lambda = 10, M2's one teacher M1 (divisor 1). Teacher logits 0: its
    # softened distribution is uniform, 1/62. Student logits [3 ln 2, 0, ..., 0]: softened by T = 3,
    # softmax([ln 2, 0, ...]) = [2/63, 1/63, ..., 1/63].
    # KL(teacher || student) = 1/62 ln((1/62) / (2/63)) + 61/62 ln((1/62) / (1/63)) per sample.
    c = 62
    kl = math.log(63 / 124) / 62 + 61 / 62 * math.log(63 / 62)
    student = torch.zeros(2, c, dtype=torch.float64)  # float64: the KL here is a small difference of logs
    student[:, 0] = 3 * math.log(2)  # the same two samples: batchmean = the per-sample value
    teacher = torch.zeros(2, c, dtype=torch.float64)
    y = torch.tensor([0, 5])
    # CE: -log softmax(student)[y]; softmax at T = 1 of [3 ln 2, 0, ...] = [8/69, 1/69, ...]
    ce = (-math.log(8 / 69) - math.log(1 / 69)) / 2
    kd = {}
    for reduction in ("mean", "batchmean"):
        s = make(CONV, kd_reduction=reduction)
        spec = {p.name: p.spec for p in s.pool}
        a = s.select(0, View([110.0] * 10), np.random.default_rng(0))[0]
        o = s.local_objective(s.adapt(a, DeviceState(0, relative_need(CONV, spec["M2"]), 1.0)))
        assert (o.teachers, o.divisor, o.weight, o.temperature) == ((spec["M1"],), 1.0, 10.0, 3.0)
        loss = float(objective_loss(o, student, y, teachers=lambda x: [teacher], x=torch.zeros(2, 1)))
        kd[reduction] = (loss - ce) / 10.0
    assert kd["batchmean"] == pytest.approx(9 * kl, rel=1e-9)  # T^2 x KL per sample
    assert kd["mean"] == pytest.approx(9 * kl / c, rel=1e-9)  # KLDivLoss(): / batch x classes
    assert kd["batchmean"] / kd["mean"] == pytest.approx(c, rel=1e-9)  # 62x stronger on FEMNIST


def test_config_rejects_gamma_above_the_target_gap():
    with pytest.raises(ValueError, match="adaptive_gamma"):
        make(CONV, adaptive_gamma=0.3)


# ---------------------------------------------------------------- end to end


@pytest.mark.parametrize("reference", ["paper", "code"])
def test_end_to_end_digits(tmp_path, write_scenario, reference):
    data = base_scenario(
        rounds=2,
        clients_per_round=3,
        fleet=relative_fleet((4, 3, 3), strong_sigma2=[30]),
        model={"family": "cnn_small", "scaler": False},
        algorithm={"name": "flexfl", "reference": reference, "proxy_fraction": 0.05, "pretrain_epochs": 1},
        server={"eval_every": 2, "bn_calibration_samples": 100},
        local={"epochs": 1, "batch_size": 32, "lr": 0.05},
    )
    out = tmp_path / "runs"
    assert main(["run", str(write_scenario(data)), "--out", str(out), "--quiet"]) == 0
    (path,) = list(out.iterdir())
    rows = list(csv.DictReader((path / "rounds.csv").open()))
    for col in ("acc_small", "acc_medium", "acc_large", "acc_full", "acc_avg"):
        assert 0.0 < float(rows[-1][col]) <= 1.0
    avg = np.mean([float(rows[-1][c]) for c in ("acc_small", "acc_medium", "acc_large")])
    assert float(rows[-1]["acc_avg"]) == pytest.approx(avg, abs=1e-4)
    # pretraining and APoZ run once, before the first dispatch; later rounds' server work is the aggregation only
    assert float(rows[0]["server_train_s"]) > 0 and float(rows[0]["server_infer_s"]) > 0
    assert float(rows[1]["server_train_s"]) == 0 and float(rows[1]["server_infer_s"]) == 0
    assert float(rows[1]["server_time_s"]) == pytest.approx(float(rows[1]["server_aggregate_s"]))
    events = [json.loads(x) for x in (path / "events.jsonl").read_text().splitlines()]
    assert {e["what"] for e in events if e["event"] == "server_work"} == {"pretrain", "apoz", "aggregate"}
    levels = {e["level"] for e in events if e["event"] == "train_start"}
    assert levels <= {"M1", "M2'", "M2", "M3'", "M3"} and levels
    summary = json.loads((path / "summary.json").read_text())
    assert not summary.get("oracle_knowledge")
