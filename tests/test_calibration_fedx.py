"""Checks of benchmarks/calibration_fedx.py: the rebuilt FedX workloads and the comparison arithmetic."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cal():
    path = ROOT / "benchmarks" / "calibration_fedx.py"
    spec = importlib.util.spec_from_file_location("calibration_fedx", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    yield mod
    sys.modules.pop(spec.name, None)


# Multiply-adds of one 32x32 sample through the small net (d=2, e=3, k=5, 10 classes), written out layer by
# layer from the OFA MobileNetV3 layout by hand: output positions x input channels per group x kernel area.
# Spatial sizes: 32 -> 16 (stem) -> 8 (stage 24) -> 4 (stage 40) -> 2 (stage 80) -> 2 (stage 112) -> 1 (stage 160).
# SE mid widths: make_divisible(c // 4, 8) = 24 (c=72), 32 (120), 64 (240), 88 (336), 120 (480).
SMALL_MACS = [
    16 * 16 * 16 * 3 * 9,  # stem 3x3/2, 3 -> 16
    256 * 16 * 9, 256 * 16 * 16,  # first block: dw 3x3, 1x1 16 -> 16
    256 * 16 * 48, 64 * 48 * 25, 64 * 48 * 24,  # stage 24, block 1 (stride 2)
    64 * 24 * 72, 64 * 72 * 25, 64 * 72 * 24,  # stage 24, block 2
    64 * 24 * 72, 16 * 72 * 25, 2 * 72 * 24, 16 * 72 * 40,  # stage 40, block 1 (stride 2, SE)
    16 * 40 * 120, 16 * 120 * 25, 2 * 120 * 32, 16 * 120 * 40,  # stage 40, block 2
    16 * 40 * 120, 4 * 120 * 25, 4 * 120 * 80,  # stage 80, block 1 (stride 2)
    4 * 80 * 240, 4 * 240 * 25, 4 * 240 * 80,  # stage 80, block 2
    4 * 80 * 240, 4 * 240 * 25, 2 * 240 * 64, 4 * 240 * 112,  # stage 112, block 1 (SE)
    4 * 112 * 336, 4 * 336 * 25, 2 * 336 * 88, 4 * 336 * 112,  # stage 112, block 2
    4 * 112 * 336, 1 * 336 * 25, 2 * 336 * 88, 1 * 336 * 160,  # stage 160, block 1 (stride 2, SE)
    1 * 160 * 480, 1 * 480 * 25, 2 * 480 * 120, 1 * 480 * 160,  # stage 160, block 2
    160 * 960, 960 * 1280, 1280 * 10,  # final expand, feature mix (after pooling), classifier
]  # fmt: skip


def test_small_forward_flops_equal_hand_count(cal):
    assert sum(SMALL_MACS) == 4_180_176
    flops = cal.forward_flops_per_sample(cal.build_workload("small"))
    assert flops == 2 * sum(SMALL_MACS)  # 8.36 MFLOP, the profile_derivations.md figure


@pytest.mark.parametrize("name", ["small", "medium", "large"])
def test_params_match_fedx_reported_counts(cal, name):
    # FedX reports 2.41 / 3.51 / 6.39M; its counts match the 200-class head (profile_derivations.md).
    model = cal.build_workload(name, num_classes=200)
    reported = cal.FEDX_PARAMS_M[name] * 1e6
    assert abs(cal.count_params(model, bn_affine=False) / reported - 1) < 0.005
    assert abs(cal.count_params(model, bn_affine=True) / reported - 1) < 0.005


def test_predictions_follow_profiles_and_fits_are_exact_on_fit_point(cal):
    w = cal.Workload("medium", 3, 4, 1, 1, fwd_flops=14e6, step=cal.StepCost(0.0, 700))
    pi = yaml.safe_load((ROOT / "device_profiles" / "raspberry_pi_5.yaml").read_text())
    flops, _ = cal.load_flops("raspberry_pi_5")
    assert flops == float(pi["compute"]["flops"])
    nano = yaml.safe_load((ROOT / "device_profiles" / "jetson_nano.yaml").read_text())["compute"]
    assert cal.load_flops("jetson_nano")[0] == float(nano["power_modes"][nano["default_mode"]]["flops"])
    row = cal.Row("raspberry_pi_5", "Pi 5", flops, "", w, measured_s=11.6)
    assert row.predicted_s == pytest.approx(3 * 14e6 * 750 / flops)
    # the ratio reads predicted / measured: a device measured twice as slow as predicted gives 0.5
    slow = cal.Row("raspberry_pi_5", "Pi 5", 3.2e10, "", w, measured_s=2 * 0.984375)  # 3 x 14e6 x 750 / 3.2e10
    assert slow.ratio == pytest.approx(0.5)
    # each correction fitted on the medium row (W = 31.5 GFLOP, 700 ops/step, 11.6 s) and applied to a small
    # one of 3/4 the work (10.5 MFLOP forward) and half the ops (350), by hand with F = 3.2e10:
    #   W / F = 0.984375 (medium), 0.73828125 (small); gap to measured 11.6 - 0.984375 = 10.615625
    #   efficiency: t scales with the work, 11.6 x 3/4 = 8.7
    #   per-step:   0.73828125 + 10.615625 (same 24 steps) = 11.35390625
    #   per-op:     0.73828125 + 10.615625 / 2 (half the ops) = 6.04609375
    fit = cal.Row("raspberry_pi_5", "Pi 5", 3.2e10, "", w, measured_s=11.6)
    small = cal.Row(
        "raspberry_pi_5", "Pi 5", 3.2e10, "", cal.Workload("small", 2, 3, 1, 1, fwd_flops=10.5e6, step=cal.StepCost(0.0, 350)), 7.5
    )
    hand = {"efficiency": 8.7, "per-step": 11.35390625, "per-op": 6.04609375}
    for name, _, fn in cal.MODELS:
        assert fn(small, fit) == pytest.approx(hand[name]), name


# FedX's measured CIFAR-10 training times (s), copied by hand from shared/seeds/fedx.txt: Table I (QCS605),
# Table II (Pi 5), Table III (Jetson Nano, GPU training column).
FEDX_TABLES = {
    "qualcomm_ai_kit": {"small": 24.3, "medium": 38.0, "large": 49.8},
    "raspberry_pi_5": {"small": 7.5, "medium": 11.6, "large": 14.5},
    "jetson_nano": {"small": 5.6, "medium": 8.5, "large": 20.2},
}


def test_roofline_cells_are_judged_with_parameters_fitted_elsewhere(cal, monkeypatch):
    traces = cal.roofline_traces()
    rows = cal.roofline_rows(traces)
    assert len(rows) == 9
    for r in rows:
        assert r.workload not in r.fit_on and len(r.fit_on) == 2  # leave one workload out, same device
        assert r.measured_s == FEDX_TABLES[r.device][r.workload]  # each cell judged against its own paper cell
    # held out for real: a cell's own measurement does not move its prediction; it moves its device's others
    monkeypatch.setitem(cal.MEASURED_S["raspberry_pi_5"], "medium", 116.0)
    moved = {(r.device, r.workload): r.predicted_s for r in cal.roofline_rows(traces)}
    for r in rows:
        now = moved[(r.device, r.workload)]
        if r.device != "raspberry_pi_5" or r.workload == "medium":
            assert now == r.predicted_s, (r.device, r.workload)
        else:
            assert now > 1.5 * r.predicted_s, r.workload  # fitted on a 10x slower medium cell
    # a fit on a single cell reproduces that cell (the fit is a real inverse of the prediction)
    prof = cal.DeviceProfile.model_validate(yaml.safe_load((ROOT / "device_profiles" / "raspberry_pi_5.yaml").read_text()))
    rates = prof.rates(None)
    for form in ("overhead", "bandwidth"):
        p = cal.roof_fit(form, rates, [(traces["medium"], 11.6)])
        assert cal.roof_predict(form, rates, traces["medium"], p) == pytest.approx(11.6, rel=1e-6)
    # a round is 23 steps of 32 samples and one of 14 (750 samples)
    full, last = traces["small"]
    assert (full.batch, last.batch) == (32, 14) and 23 * 32 + 14 == cal.SAMPLES
    assert cal.round_seconds(traces["small"], 1e10, 1e10, 0.0) == pytest.approx(
        23 * full.time(1e10, 1e10, 0.0) + last.time(1e10, 1e10, 0.0)
    )
