"""The per-operator roofline cost model (fl/cost/opcost.py) against hand counts."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
import yaml
from conftest import BIG, base_scenario
from torch.utils.flop_counter import FlopCounterMode

from iotfl_sim.cli import main
from iotfl_sim.fl.cost import opcost
from iotfl_sim.fl.cost.opcost import OpRecorder, StepTrace
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec
from iotfl_sim.scenario.loader import available_profiles, load_profile
from iotfl_sim.scenario.profile import DeviceProfile


def record(fn) -> OpRecorder:
    rec = OpRecorder()
    with rec:
        fn()
    return rec


def price(rec: OpRecorder, f: float, b: float, o: float) -> float:
    import numpy as np

    return StepTrace(1, tuple(rec.names), np.asarray(rec.flops, float), np.asarray(rec.bytes, float)).time(f, b, o)


def test_gemm_roofline_matches_hand_count():
    a = torch.zeros(64, 128, device="meta")
    b = torch.zeros(128, 32, device="meta")
    rec = record(lambda: torch.mm(a, b))
    assert rec.names == ["mm"]
    # 2 x m x k x n; bytes: A (64x128) + B (128x32) read, C (64x32) written, fp32
    assert rec.flops == [2 * 64 * 128 * 32] == [524288]
    assert rec.bytes == [4 * (64 * 128 + 128 * 32 + 64 * 32)] == [57344]
    # memory-bound at 1 GFLOP/s and 0.1 GB/s: 57344 / 1e8 = 5.7344e-4 s, plus one 1 us overhead
    assert price(rec, 1e9, 1e8, 1e-6) == pytest.approx(5.7344e-4 + 1e-6, rel=1e-12)
    # compute-bound at 1 GB/s: 524288 / 1e9 = 5.24288e-4 s
    assert price(rec, 1e9, 1e9, 1e-6) == pytest.approx(5.24288e-4 + 1e-6, rel=1e-12)


def test_depthwise_conv_forward_roofline():
    x = torch.zeros(2, 8, 6, 6, device="meta")
    w = torch.zeros(8, 1, 3, 3, device="meta")
    rec = record(lambda: F.conv2d(x, w, padding=1, groups=8))
    assert rec.names == ["convolution_grouped"]  # priced as its own kind, not as a dense convolution
    # each of the 2*8*6*6 = 576 outputs is 1 channel x 3x3 = 9 MACs: 2 * 576 * 9 = 10368 FLOPs
    assert rec.flops == [10368]
    # x 576 + w 72 + out 576 floats = 1224 x 4 bytes
    assert rec.bytes == [4896]
    # 4896 B / 1e9 B/s = 4.896e-6 s > 10368 / 1e10 = 1.0368e-6 s: memory-bound, plus 2 us overhead
    assert price(rec, 1e10, 1e9, 2e-6) == pytest.approx(4.896e-6 + 2e-6, rel=1e-12)


def test_depthwise_conv_backward_flops_are_counted_per_group():
    x = torch.zeros(2, 8, 6, 6, device="meta", requires_grad=True)
    w = torch.zeros(8, 1, 3, 3, device="meta", requires_grad=True)
    y = F.conv2d(x, w, padding=1, groups=8)
    g = torch.zeros_like(y)
    rec = record(lambda: y.backward(g, retain_graph=True))
    assert rec.names == ["convolution_backward_grouped"]
    # grad_input: each of the 576 input elements gathers 9 MACs; grad_weight: each of the 72 weights
    # sums 2*6*6 = 72 products -> 72 * 72 = 5184 MACs. Together 2 * (576 * 9 + 5184) = 20736 FLOPs.
    assert rec.flops == [2 * (576 * 9 + 72 * 72)] == [20736]
    # grad_out, x, w read; grad_x, grad_w written: 4 * (576 + 576 + 72 + 576 + 72)
    assert rec.bytes == [4 * 1872]
    # torch's FlopCounterMode counts the depthwise weight gradient groups (8) times over
    counter = FlopCounterMode(display=False)
    with counter:
        y.backward(g)
    assert counter.get_total_flops() == 10368 + 8 * 10368 != 20736


def test_batch_norm_roofline():
    x = torch.zeros(4, 3, 5, 5, device="meta")
    w, b = torch.ones(3, device="meta"), torch.zeros(3, device="meta")
    rec = record(lambda: F.batch_norm(x, None, None, w, b, training=True))
    assert rec.names == ["native_batch_norm"]
    # no multiply-accumulate: one nominal FLOP per output element (300 normalised + 3 means + 3 inv-stds)
    assert rec.flops == [306]
    # x (300) + weight (3) + bias (3) read; out (300) + save_mean (3) + save_invstd (3) written
    assert rec.bytes == [4 * 612]
    assert price(rec, 1e9, 1e8, 0.0) == pytest.approx(2448 / 1e8, rel=1e-12)  # 306 / 1e9 is smaller


RECIPE = ModelRecipe("cnn_small", 10, 1, (8, 8))


def test_one_trace_per_spec_and_any_batch_priced_exactly(tmp_path, monkeypatch):
    monkeypatch.setenv("IOTFL_CACHE_DIR", str(tmp_path))  # an empty disk cache: this process traces
    spec = SubmodelSpec(0.75)
    opcost.affine_trace.cache_clear()
    opcost.step_trace.cache_clear()
    opcost.step_time.cache_clear()
    before = opcost.TRACE_CALLS["n"]
    for batch in (16, 5, 16):
        for rates in ((1e9, 1e9, 1e-5), (3e10, 8e9, 1.2e-5)):
            opcost.step_time(RECIPE, spec, batch, *rates)
    opcost.train_seconds(RECIPE, spec, 37, 2, 16, 1e9, 1e9, 1e-5)
    assert opcost.TRACE_CALLS["n"] - before == 2  # the two small batches of the affine table, once
    opcost.step_time(RECIPE, SubmodelSpec(0.5), 16, 1e9, 1e9, 1e-5)
    assert opcost.TRACE_CALLS["n"] - before == 4  # a new spec: traced once more
    # the affine table reproduces a direct trace at another batch size, op by op
    direct = opcost.trace_step_uncached(RECIPE, spec, 8)
    cached = opcost.step_trace(RECIPE, spec, 8)
    assert cached.names == direct.names
    assert cached.flops.tolist() == pytest.approx(direct.flops.tolist())
    assert cached.bytes.tolist() == pytest.approx(direct.bytes.tolist())


def test_training_time_is_steps_times_step_time():
    spec, rates = SubmodelSpec(1.0), (1e9, 2e9, 1e-5)
    full = opcost.step_time(RECIPE, spec, 16, *rates)
    part = opcost.step_time(RECIPE, spec, 5, *rates)
    # 37 samples at batch 16: two full batches and one of 5; two epochs
    assert opcost.train_seconds(RECIPE, spec, 37, 2, 16, *rates) == pytest.approx(2 * (2 * full + part))
    # 33 samples: the last batch of one sample is skipped, as train_local does
    assert opcost.train_seconds(RECIPE, spec, 33, 1, 16, *rates) == pytest.approx(2 * full)
    assert opcost.steps_of(33, 16) == (2, 0)
    # the traced FLOPs of a step are ~3x the forward FLOPs (backward 2x; no input gradient for the stem)
    fwd = RECIPE.cost(spec).flops_forward_per_sample * 16
    assert 2.5 * fwd < opcost.step_trace(RECIPE, spec, 16).total_flops < 3.2 * fwd


@pytest.mark.parametrize(
    ("family", "channels", "size", "batch"),
    [("resnet18", 3, (224, 224), 16), ("resnet18", 3, (32, 32), 32)],
)
def test_dense_cnn_predictions_move_less_than_10_percent(family, channels, size, batch):
    """The profiles' FLOP/s were sourced on dense ResNet-class training; the roofline must keep them."""
    recipe, spec = ModelRecipe(family, 10, channels, size), SubmodelSpec(1.0)
    old_flops = 3 * recipe.cost(spec).flops_forward_per_sample * batch
    for name in available_profiles():
        p = load_profile(name)
        if p.device_class == "server":
            # a GPU server does 10 FLOPs in the time it moves a byte (a Jetson 3): norms, activations and launches
            # add 12 % (224 px) to 26 % (32 px) to its FLOP-rule time, which is the point of pricing it per op
            continue
        for mode in [None, *(p.compute.power_modes or {})]:
            r = p.rates(mode)
            assert r.roofline, name
            new = opcost.step_time(recipe, spec, batch, r.flops, r.mem_bw, r.op_overhead_s)
            assert 0.97 < new / (old_flops / r.flops) < 1.10, (name, mode)


def test_mobilenet_costs_more_per_flop_than_a_dense_cnn():
    pi5 = load_profile("raspberry_pi_5").rates()
    rate = {}
    for family in ("mobilenetv2", "resnet18"):
        recipe, spec = ModelRecipe(family, 10, 3, (32, 32)), SubmodelSpec(1.0)
        t = opcost.step_time(recipe, spec, 32, pi5.flops, pi5.mem_bw, pi5.op_overhead_s)
        rate[family] = opcost.step_trace(recipe, spec, 32).total_flops / t
    assert rate["resnet18"] > 0.9 * pi5.flops
    # with the sourced (unfitted) Pi 5 figures; without the memory term both would run at ~F
    assert rate["mobilenetv2"] < 0.75 * rate["resnet18"]


def test_profile_without_new_fields_keeps_old_rule_and_validate_warns(capsys, write_scenario):
    plain = DeviceProfile.model_validate(BIG)
    assert plain.rates().mem_bw is None and not plain.rates().roofline
    assert "compute.mem_bw_gbs" in plain.cost_model_warnings()[0]
    assert main(["validate", str(write_scenario(base_scenario()))]) == 0
    err = capsys.readouterr().err  # the default roofline model warns about a profile it cannot price per op
    assert "warning: profile big: no compute.mem_bw_gbs" in err
    data = base_scenario()
    data["fleet"]["cost_model"] = "flops"
    assert main(["validate", str(write_scenario(data))]) == 0
    assert "warning" not in capsys.readouterr().err  # the FLOPs-only model needs no bandwidth
    # a mode's missing values fall back to the profile's, and a profile with both fields is silent
    full = copy.deepcopy(BIG)
    full["compute"].update(
        mem_bw_gbs=4.0,
        op_overhead_us=10.0,
        power_modes={"lo": {"flops": 5e9, "train_w": 3.0, "op_overhead_us": 20.0}},
    )
    p = DeviceProfile.model_validate(full)
    assert p.cost_model_warnings() == []
    r = p.rates("lo")
    assert (r.flops, r.train_w, r.mem_bw, r.op_overhead_s) == (5e9, 3.0, 4e9, pytest.approx(20e-6))
    assert yaml.safe_load(yaml.safe_dump(full))["compute"]["mem_bw_gbs"] == 4.0


def test_weight_decay_adds_one_op_per_parameter_tensor():
    spec = SubmodelSpec(1.0)
    plain = opcost.trace_step_uncached(RECIPE, spec, 4, opcost.StepOptions(0.9, False, False))
    decay = opcost.trace_step_uncached(RECIPE, spec, 4, opcost.StepOptions(0.9, True, False))
    clip = opcost.trace_step_uncached(RECIPE, spec, 4, opcost.StepOptions(0.9, True, True))
    n_params = len(list(RECIPE.build(spec).parameters()))
    # SGD's weight decay is grad.add(param, alpha=wd): one add per parameter tensor
    assert decay.n_ops - plain.n_ops == n_params
    assert decay.names.count("add") - plain.names.count("add") == n_params
    assert clip.n_ops > decay.n_ops + n_params  # a norm per tensor and a scaling per tensor, at least


# ---------------------------------------------------------------- per-kind kernel costs (compute.kernels)


def test_kernel_curve_prices_by_log_log_interpolation_and_extra_overhead():
    import numpy as np

    names = ("convolution",) * 4 + ("add",)
    flops = np.array([1e5, 1e6, 1e7, 1e9, 1e3])
    trace = StepTrace(1, names, flops, np.zeros(5))
    curve = ((1e6, 1e9), (1e8, 1e10))  # FLOP/s grows 10x over two decades of call size
    kernels = (("convolution", 2e-6, curve),)
    f_generic = 5e9
    want = (
        1e5 / 1e9  # below the curve: held at the smallest call's rate
        + 1e6 / 1e9
        + 1e7 / 10**9.5  # halfway in log-log
        + 1e9 / 1e10  # above: the largest call's rate
        + 1e3 / f_generic  # other kinds: the device's FLOP/s
        + 4 * 2e-6  # the kind's extra fixed cost per call
        + 5 * 1e-6  # the generic per-op overhead, every op
    )
    assert trace.time(f_generic, 1e12, 1e-6, kernels) == pytest.approx(want, rel=1e-12)
    # without kernels: the plain roofline
    assert trace.time(f_generic, 1e12, 1e-6) == pytest.approx(flops.sum() / f_generic + 5e-6, rel=1e-12)
    # memory still bounds a kernel-priced op from below
    slow_mem = StepTrace(1, ("convolution",), np.array([1e6]), np.array([1e6]))
    assert slow_mem.time(f_generic, 1e6, 0.0, kernels) == pytest.approx(1.0 + 2e-6, rel=1e-12)


def test_a_grouped_convolution_uses_its_own_curve_and_falls_back_to_the_dense_one():
    import numpy as np

    trace = StepTrace(1, ("convolution", "convolution_grouped"), np.array([1e6, 1e6]), np.zeros(2))
    dense = ("convolution", 1e-6, ((1.0, 1e10),))
    grouped = ("convolution_grouped", 5e-6, ((1.0, 1e9),))
    # only the dense kind measured (a profile from before grouped kinds): both calls at 1e10 FLOP/s, both pay 1 us
    assert trace.time(5e9, 1e12, 0.0, (dense,)) == pytest.approx(2 * (1e6 / 1e10 + 1e-6), rel=1e-12)
    # both measured: the grouped call at its own 1e9 FLOP/s and 5 us
    assert trace.time(5e9, 1e12, 0.0, (dense, grouped)) == pytest.approx(
        1e6 / 1e10 + 1e-6 + 1e6 / 1e9 + 5e-6, rel=1e-12
    )
    # a dense call never takes the grouped entry
    only_dense_call = StepTrace(1, ("convolution",), np.array([1e6]), np.zeros(1))
    assert only_dense_call.time(5e9, 1e12, 0.0, (grouped,)) == pytest.approx(1e6 / 5e9, rel=1e-12)


def test_a_convolution_with_one_group_stays_dense():
    x = torch.zeros(2, 8, 6, 6, device="meta")
    w1, w2 = torch.zeros(8, 8, 3, 3, device="meta"), torch.zeros(8, 4, 3, 3, device="meta")
    assert record(lambda: F.conv2d(x, w1, padding=1)).names == ["convolution"]
    # groups=2 is grouped too (ResNeXt-style): any groups > 1
    assert record(lambda: F.conv2d(x, w2, groups=2)).names == ["convolution_grouped"]


def test_profile_kernels_reach_the_cost_model(write_scenario):
    from iotfl_sim.scenario.loader import load_scenario, resolve_groups
    from iotfl_sim.scenario.resolved import ResolvedScenario
    from iotfl_sim.sim.setup import build_simulation

    full = copy.deepcopy(BIG)
    full["compute"].update(mem_bw_gbs=4.0, op_overhead_us=10.0)
    flat = DeviceProfile.model_validate(full)
    assert flat.rates().kernels == ()
    full["compute"]["kernels"] = {
        "convolution": {"overhead_us": 1000.0},
        "native_batch_norm": {"flops": 1e8},
        "convolution_backward": {"flops_curve": [[1e8, 2e10], [1e6, 1e9]]},
    }
    p = DeviceProfile.model_validate(full)
    assert p.rates().kernels == (
        ("convolution", pytest.approx(1e-3), ()),
        ("convolution_backward", 0.0, ((1e6, 1e9), (1e8, 2e10))),  # sorted by call size
        ("native_batch_norm", 0.0, ((1.0, 1e8),)),
    )
    # a simulated device whose profile adds 1 ms per convolution call pays exactly that over one without
    full["compute"]["kernels"] = {"convolution": {"overhead_us": 1000.0}}
    data = base_scenario(numerics="none", rounds=1, clients_per_round=2)
    data["fleet"] = {
        "groups": [
            {"name": "with", "profile": {**full, "name": "with"}, "count": 1},
            {"name": "without", "profile": {**full, "name": "without", "compute": {**full["compute"], "kernels": None}},
             "count": 1},
        ]
    }
    data["fleet"]["groups"][1]["profile"]["compute"]["jitter"] = {"dist": "none"}
    data["fleet"]["groups"][0]["profile"]["compute"]["jitter"] = {"dist": "none"}
    sc = load_scenario(write_scenario(data))
    sim = build_simulation(ResolvedScenario(sc, resolve_groups(sc)))
    assert sim.fleet.roofline(0)[3] == (("convolution", pytest.approx(1e-3), ()),) and sim.fleet.roofline(1)[3] == ()
    recipe, spec = sim.recipe, SubmodelSpec(1.0)
    t_with = sim.system.training_time.task_cost(recipe, spec, 0, 1)[1]
    t_without = sim.system.training_time.task_cost(recipe, spec, 1, 1)[1]
    loc = sc.local
    opts = opcost.StepOptions(loc.momentum, loc.weight_decay > 0, loc.clip_grad_norm is not None)
    samples = int(sim.numerics.samples_per_device[0])
    full_steps, rest = opcost.steps_of(samples, loc.batch_size)
    trace = opcost.step_trace(recipe, spec, loc.batch_size, opts)
    n_conv = trace.names.count("convolution")
    assert n_conv >= 1
    steps = loc.epochs * (full_steps + (1 if rest else 0))
    r = flat.rates()

    def base(d: int) -> float:
        n = int(sim.numerics.samples_per_device[d])
        return opcost.train_seconds(recipe, spec, n, loc.epochs, loc.batch_size, r.flops, r.mem_bw, r.op_overhead_s, opts)

    assert t_without == pytest.approx(base(1), rel=1e-9)
    assert t_with - base(0) == pytest.approx(steps * n_conv * 1e-3, rel=1e-9)


def test_a_measured_step_scales_its_family_and_input_shape_only():
    from iotfl_sim.fl.cost.opcost import StepOptions, infer_seconds, step_trace, train_seconds
    from iotfl_sim.fl.recipe import ModelRecipe
    from iotfl_sim.fl.submodel import SubmodelSpec

    rates = (1e9, 1e9, 5e-6)
    timed = ModelRecipe("cnn_small", 10, 1, (8, 8))
    roofline_step = step_trace(timed, SubmodelSpec(1.0), 4, StepOptions(0.9, False, False)).time(*rates)
    steps = (("cnn_small", (1, 8, 8), 4, 3.0 * roofline_step),)  # the machine ran the step 3x slower
    half, opts = SubmodelSpec(0.5), StepOptions(0.0, True, False)
    # any width, batch, class count and optimizer of the family at that input shape: 3x the roofline
    user = ModelRecipe("cnn_small", 62, 1, (8, 8))
    plain = train_seconds(user, half, 50, 2, 8, *rates, opts)
    assert train_seconds(user, half, 50, 2, 8, *rates, opts, (), steps) == pytest.approx(3.0 * plain, rel=1e-12)
    plain_inf = infer_seconds(user, half, 20, 8, *rates)
    assert infer_seconds(user, half, 20, 8, *rates, (), steps) == pytest.approx(3.0 * plain_inf, rel=1e-12)
    # another input shape or another family: the roofline as it is
    other_shape = ModelRecipe("cnn_small", 10, 3, (8, 8))
    assert train_seconds(other_shape, half, 50, 1, 8, *rates, opts, (), steps) == pytest.approx(
        train_seconds(other_shape, half, 50, 1, 8, *rates, opts), rel=1e-12
    )
    mlp = ModelRecipe("mlp", 10, 1, (8, 8))
    assert train_seconds(mlp, half, 50, 1, 8, *rates, opts, (), steps) == train_seconds(mlp, half, 50, 1, 8, *rates, opts)


def test_measured_steps_reach_the_rates_outside_power_modes_only():
    from iotfl_sim.scenario.profile import DeviceProfile

    full = copy.deepcopy(BIG)
    full["compute"]["measured_steps"] = [{"family": "conv", "input": [1, 28, 28], "batch": 32, "seconds": 0.02}]
    assert DeviceProfile.model_validate(full).rates().steps == (("conv", (1, 28, 28), 32, 0.02),)
    full["compute"]["power_modes"] = {"low": {"flops": 1e9, "train_w": 1.0}}
    # measured in the default state: a power mode changes the machine, so the measurement does not carry over
    assert DeviceProfile.model_validate(full).rates("low").steps == ()
    with pytest.raises(Exception, match="seconds"):
        full["compute"]["measured_steps"][0]["seconds"] = 0.0
        DeviceProfile.model_validate(full)


def test_the_cpu_boards_depthwise_rate_prices_a_depthwise_call_as_profile_derivations_says():
    """benchmarks/profile_derivations.md#raspberry_pi_4b: the Pi 4's grouped-convolution rate is
    1.7287e9 FLOP / (15.274 - 2.348 - 34 x 30 us) s = 1.34e8 FLOP/s (jafermarq's Pi 4 MobileNetV2 step); the
    Pi 5's is 2x it (as its flops), the QCS605 kit's its flops x the Pi 4's 1.34e8 / 1.6e10."""
    import numpy as np

    pi4, pi5, kit = (load_profile(n).rates() for n in ("raspberry_pi_4b", "raspberry_pi_5", "qualcomm_ai_kit"))
    assert 1.7287e9 / (15.274 - 2.348 - 34 * 30e-6) == pytest.approx(1.34e8, rel=5e-3)
    # one depthwise 3x3 call, 96 channels at 56x56, batch 16 (a MobileNetV2 stage-2 shape), forward and backward
    x = torch.empty(16, 96, 56, 56, device="meta", requires_grad=True)
    w = torch.empty(96, 1, 3, 3, device="meta", requires_grad=True)
    rec = record(lambda: F.conv2d(x, w, padding=1, groups=96).sum().backward())
    macs = 16 * 96 * 56 * 56 * 9  # one 3x3 window per output element, one input channel per group
    for rates, rate in ((pi4, 1.34e8), (pi5, 2 * 1.34e8), (kit, 1.5e10 * 1.34e8 / 1.6e10)):
        t = StepTrace(1, tuple(rec.names), np.array(rec.flops, float), np.array(rec.bytes, float))
        times = dict(zip(rec.names, t.op_times(rates.flops, rates.mem_bw, rates.op_overhead_s, rates.kernels), strict=True))
        # forward: 2 x MACs at the grouped rate (compute-bound: 0.0385 GB at 5-8.5 GB/s is < 8 ms) plus the op overhead
        assert times["convolution_grouped"] == pytest.approx(2 * macs / rate + rates.op_overhead_s, rel=5e-3)
        # backward: grad_input and grad_weight, one forward's FLOPs each
        assert times["convolution_backward_grouped"] == pytest.approx(4 * macs / rate + rates.op_overhead_s, rel=5e-3)
        # a dense call of the same FLOPs stays at the profile's dense rate
        dense = StepTrace(1, ("convolution",), np.array([2.0 * macs]), np.zeros(1))
        assert dense.time(rates.flops, rates.mem_bw, 0.0, rates.kernels) == pytest.approx(2 * macs / rates.flops)
