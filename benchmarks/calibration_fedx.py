"""Calibration: the simulator's predicted training time for FedX's CIFAR-10 workloads vs FedX's measurements.

FedX (shared/seeds/fedx.txt, Tables I-III) times one local round, 750 CIFAR-10 samples at batch 32, of three
sub-networks of the Once-for-All MobileNetV3 supernet on a Raspberry Pi 5, a Jetson Nano (GPU and CPU) and a
Qualcomm QCS605 AI kit. This script rebuilds those sub-networks in plain torch (layout and kernel size as derived
in benchmarks/profile_derivations.md, "FedX workload"), counts their FLOPs the way ``iotfl_sim.fl.cost.footprint`` does
(``FlopCounterMode`` on the meta device, 2 FLOPs per multiply-add, training = 3 x forward x samples), predicts
time = training FLOPs / ``compute.flops`` of each device profile (the default power mode where a profile has
modes, as ``DeviceProfile.mode(None)`` does) and compares with the measured times. It then fits three one-number
corrections on the medium workload of each device and reports their error on the small and large ones.

Run from the repository root::

    python benchmarks/calibration_fedx.py            # prints the tables, writes benchmarks/calibration_fedx.md
    python benchmarks/calibration_fedx.py --no-write # print only
    python benchmarks/calibration_fedx.py --host     # also time the nets on this CPU (adds a host section)

Without ``--host`` nothing is trained and no data is read (everything runs on the meta device): a few seconds
on two CPU cores, and the output is deterministic. ``--host`` adds real training steps on this machine's CPU
and a per-layer-class time breakdown; those numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
import yaml
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import FlopCounterMode

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from iotfl_sim.fl.cost import opcost  # noqa: E402
from iotfl_sim.fl.models.fedx import (  # noqa: E402
    OFA_FINAL_EXPAND,
    OFA_LAST_CHANNEL,
    OFA_STAGES,
    OFA_STEM,
    make_divisible,
)  # fmt: skip
from iotfl_sim.scenario.profile import DeviceProfile, Rates  # noqa: E402

PROFILES = ROOT / "device_profiles"
OUT_MD = ROOT / "benchmarks" / "calibration_fedx.md"

# ---------------------------------------------------------------------------------------------------------------
# FedX setup (fedx.txt IV-A / IV-G; profile_derivations.md "FedX workload")
# ---------------------------------------------------------------------------------------------------------------
SAMPLES = 750
BATCH = 32
IMAGE = 32  # CIFAR-10 at native resolution
NUM_CLASSES = 10
STEPS = -(-SAMPLES // BATCH)  # 24 minibatches: 23 x 32 + 1 x 14
TOLERANCE = 0.25

# Sub-networks: the same depth d and expand ratio e in every one of the five stages.
WORKLOADS: dict[str, tuple[int, int]] = {"small": (2, 3), "medium": (3, 4), "large": (4, 6)}
KERNEL = 5  # the only OFA kernel size whose parameter counts match FedX's (profile_derivations.md)
FEDX_PARAMS_M = {"small": 2.41, "medium": 3.51, "large": 6.39}  # as reported (200-class Tiny-ImageNet head)
FEDX_PARAMS_HEAD = 200

# Measured seconds per 750-sample CIFAR-10 round (mean of 20), FedX Tables I-III.
MEASURED_S: dict[str, dict[str, float]] = {
    "raspberry_pi_5": {"small": 7.5, "medium": 11.6, "large": 14.5},  # Table II
    "jetson_nano": {"small": 5.6, "medium": 8.5, "large": 20.2},  # Table III, GPU training
    "jetson_nano_cpu": {"small": 87.4, "medium": 189.1, "large": 241.3},  # Table III, CPU training
    "qualcomm_ai_kit": {"small": 24.3, "medium": 38.0, "large": 49.8},  # Table I
}
DEVICES: list[tuple[str, str, str | None]] = [
    # (key in MEASURED_S, label, profile file stem or None when the simulator has no profile for it)
    ("raspberry_pi_5", "Raspberry Pi 5 (CPU)", "raspberry_pi_5"),
    ("jetson_nano", "Jetson Nano (GPU, default mode)", "jetson_nano"),
    ("jetson_nano_cpu", "Jetson Nano (CPU)", None),
    ("qualcomm_ai_kit", "Qualcomm QCS605 AI kit (CPU)", "qualcomm_ai_kit"),
]
FIT_ON = "medium"
# Nominal FP32 peak of the Jetson Nano CPU, GFLOP/s: 4 Cortex-A57 cores x 1.43 GHz x 8 FLOP/cycle (one 128-bit FMA).
A57_PEAK = 4 * 1.43 * 8

# OFA MobileNetV3 w1.0 layout: the simulator's own (fl/models/fedx.py), one place for the figures
STEM_WIDTH, STAGES, FINAL_EXPAND, LAST_CHANNEL = OFA_STEM, OFA_STAGES, OFA_FINAL_EXPAND, OFA_LAST_CHANNEL


# ---------------------------------------------------------------------------------------------------------------
# Model
# ---------------------------------------------------------------------------------------------------------------
def _act(name: str) -> nn.Module:
    return nn.ReLU(inplace=True) if name == "relu" else nn.Hardswish(inplace=True)


class SqueezeExcite(nn.Module):
    """OFA's SEModule: mean-pool, 1x1 conv to channels/4 (rounded to 8), ReLU, 1x1 conv back, hard sigmoid."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        mid = make_divisible(channels // 4)
        self.reduce = nn.Conv2d(channels, mid, 1, bias=True)
        self.expand = nn.Conv2d(mid, channels, 1, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.mean((2, 3), keepdim=True)
        y = F.hardsigmoid(self.expand(F.relu(self.reduce(y))))
        return x * y


class MBConv(nn.Module):
    """Inverted bottleneck: [1x1 expand, BN, act], kxk depthwise, BN, act, [SE], 1x1 project, BN; residual."""

    def __init__(
        self, cin: int, cout: int, kernel: int, stride: int, expand: int, act: str, se: bool
    ) -> None:
        super().__init__()
        mid = make_divisible(round(cin * expand))
        layers: list[nn.Module] = []
        if expand != 1:
            layers += [nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), _act(act)]
        layers += [
            nn.Conv2d(mid, mid, kernel, stride, kernel // 2, groups=mid, bias=False),
            nn.BatchNorm2d(mid),
            _act(act),
        ]
        if se:
            layers.append(SqueezeExcite(mid))
        layers += [nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        return x + y if self.residual else y


class OFAMobileNetV3(nn.Module):
    """A static OFA MobileNetV3 sub-network with depth ``depth`` and expand ratio ``expand`` in every stage."""

    def __init__(self, depth: int, expand: int, kernel: int = KERNEL, num_classes: int = NUM_CLASSES) -> None:
        super().__init__()
        blocks: list[nn.Module] = [
            nn.Sequential(
                nn.Conv2d(3, STEM_WIDTH, 3, 2, 1, bias=False),
                nn.BatchNorm2d(STEM_WIDTH),
                nn.Hardswish(inplace=True),
            ),
            MBConv(STEM_WIDTH, STEM_WIDTH, 3, 1, 1, "relu", False),  # OFA's fixed first block
        ]
        cin = STEM_WIDTH
        for width, stride, act, se in STAGES:
            for i in range(depth):
                blocks.append(MBConv(cin, width, kernel, stride if i == 0 else 1, expand, act, se))
                cin = width
        blocks.append(
            nn.Sequential(
                nn.Conv2d(cin, FINAL_EXPAND, 1, bias=False),
                nn.BatchNorm2d(FINAL_EXPAND),
                nn.Hardswish(inplace=True),
            )
        )
        self.features = nn.Sequential(*blocks)
        # After global pooling: 1x1 conv without BN or bias, h-swish, then the linear classifier.
        self.feature_mix = nn.Conv2d(FINAL_EXPAND, LAST_CHANNEL, 1, bias=False)
        self.classifier = nn.Linear(LAST_CHANNEL, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x).mean((2, 3), keepdim=True)
        x = F.hardswish(self.feature_mix(x))
        return self.classifier(torch.flatten(x, 1))


def build_workload(
    name: str, *, num_classes: int = NUM_CLASSES, device: str | torch.device = "meta"
) -> nn.Module:
    depth, expand = WORKLOADS[name]
    with torch.device(device):
        return OFAMobileNetV3(depth, expand, KERNEL, num_classes)


def count_params(model: nn.Module, *, bn_affine: bool = True) -> int:
    skip = set()
    if not bn_affine:
        skip = {id(p) for m in model.modules() if isinstance(m, nn.BatchNorm2d) for p in m.parameters()}
    return sum(p.numel() for p in model.parameters() if id(p) not in skip)


# ---------------------------------------------------------------------------------------------------------------
# Cost measurement (the iotfl_sim.fl.cost.footprint convention)
# ---------------------------------------------------------------------------------------------------------------
def forward_flops_per_sample(model: nn.Module, batch: int = BATCH, image: int = IMAGE) -> float:
    """FlopCounterMode FLOPs of one training-mode forward pass, per sample (as ``measure_cost``)."""
    model.train()
    x = torch.zeros(batch, 3, image, image, device="meta")
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(x)
    return counter.get_total_flops() / batch


class _OpCounter(TorchDispatchMode):
    """Counts dispatched ATen ops that do work (views and metadata-only ops excluded)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        returns = func._schema.returns
        is_view = bool(returns) and all(
            r.alias_info is not None and not r.alias_info.is_write for r in returns
        )
        if not is_view and func.__name__.split(".")[0] not in ("detach", "_to_copy", "lift_fresh"):
            self.count += 1
        return func(*args, **(kwargs or {}))


@dataclass(frozen=True)
class StepCost:
    # FlopCounterMode FLOPs of forward + backward, per sample. Inflated for depthwise layers: torch's
    # convolution_backward formula ignores `groups` for the weight gradient (see the report); not used for timing.
    fwd_bwd_flops_per_sample: float
    ops_per_step: int  # ATen ops of forward + loss + backward + SGD step, one minibatch


def training_step_cost(model: nn.Module, batch: int = BATCH, image: int = IMAGE) -> StepCost:
    """Counts one real training step (meta device): FLOPs of forward+backward and ATen ops incl. the SGD step."""
    model.train()
    x = torch.zeros(batch, 3, image, image, device="meta")
    y = torch.zeros(batch, dtype=torch.long, device="meta")
    opt = torch.optim.SGD(model.parameters(), lr=0.01, foreach=False)
    counter = FlopCounterMode(display=False)
    with counter:
        loss = F.cross_entropy(model(x), y)
        loss.backward()
    opt.zero_grad(set_to_none=True)
    ops = _OpCounter()
    with ops:
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    opt.zero_grad(set_to_none=True)
    return StepCost(counter.get_total_flops() / batch, ops.count)


@dataclass(frozen=True)
class Workload:
    name: str
    depth: int
    expand: int
    params: int  # CIFAR-10 head, BN included (what trains on the device)
    params_fedx_head: int  # 200-class head, BN affine excluded (how FedX's reported counts are matched)
    fwd_flops: float  # per sample
    step: StepCost

    @property
    def train_flops(self) -> float:
        """Simulator convention: 3 x forward FLOPs x samples."""
        return 3.0 * self.fwd_flops * SAMPLES

    @property
    def round_ops(self) -> int:
        return self.step.ops_per_step * STEPS


def measure_workloads() -> list[Workload]:
    out = []
    for name, (depth, expand) in WORKLOADS.items():
        model = build_workload(name)
        out.append(
            Workload(
                name=name,
                depth=depth,
                expand=expand,
                params=count_params(model),
                params_fedx_head=count_params(
                    build_workload(name, num_classes=FEDX_PARAMS_HEAD), bn_affine=False
                ),
                fwd_flops=forward_flops_per_sample(model),
                step=training_step_cost(model),
            )
        )
    return out


def load_flops(stem: str) -> tuple[float, str]:
    """Sustained training FLOP/s of a profile in its default power mode (what the simulator uses)."""
    data = yaml.safe_load((PROFILES / f"{stem}.yaml").read_text())
    prof = DeviceProfile.model_validate(data)
    flops, _ = prof.mode(None)
    mode = prof.compute.default_mode
    return float(flops), (f"{stem}.yaml, mode {mode}" if mode else f"{stem}.yaml")


# ---------------------------------------------------------------------------------------------------------------
# Comparison and one-parameter corrections
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    device: str
    label: str
    profile_flops: float | None
    source: str
    workload: Workload
    measured_s: float

    @property
    def predicted_s(self) -> float | None:
        return None if self.profile_flops is None else self.workload.train_flops / self.profile_flops

    @property
    def ratio(self) -> float | None:
        p = self.predicted_s
        return None if p is None else p / self.measured_s

    @property
    def effective_flops(self) -> float:
        """Training FLOP/s implied by the measurement (simulator FLOP convention)."""
        return self.workload.train_flops / self.measured_s


def build_rows(workloads: list[Workload]) -> list[Row]:
    rows = []
    for key, label, stem in DEVICES:
        flops, source = load_flops(stem) if stem else (None, "no profile")
        for w in workloads:
            rows.append(Row(key, label, flops, source, w, MEASURED_S[key][w.name]))
    return rows


# A correction model predicts t(workload) from the profile rate F and one parameter fitted on FIT_ON:
#   efficiency: t = W / (eta F)                   (one efficiency factor per device and architecture class)
#   per-step:   t = W / F + steps c               (fixed cost per minibatch; steps = 24 for every workload)
#   per-op:     t = W / F + steps n_ops c_op      (fixed cost per dispatched ATen op / kernel launch)
Model = tuple[str, str, Callable[[Row, Row], float]]


def _eff(r: Row, fit: Row) -> float:
    eta = fit.effective_flops / fit.profile_flops
    return r.workload.train_flops / (eta * r.profile_flops)


def _step(r: Row, fit: Row) -> float:
    c = (fit.measured_s - fit.predicted_s) / STEPS
    return r.predicted_s + STEPS * c


def _op(r: Row, fit: Row) -> float:
    c = (fit.measured_s - fit.predicted_s) / fit.workload.round_ops
    return r.predicted_s + r.workload.round_ops * c


MODELS: list[Model] = [
    ("efficiency", "t = W / (eta F)", _eff),
    ("per-step", "t = W / F + 24 c", _step),
    ("per-op", "t = W / F + 24 n_ops c", _op),
]


def fitted_parameter(model: str, fit: Row) -> str:
    gap = fit.measured_s - fit.predicted_s
    if model == "efficiency":
        return f"eta = {fit.effective_flops / fit.profile_flops:.3f}"
    if model == "per-step":
        return f"c = {gap / STEPS * 1e3:.0f} ms/step"
    return f"c_op = {gap / fit.workload.round_ops * 1e6:.0f} us/op"


def _affine_two_point(rows: list[Row]) -> tuple[float, float, float]:
    """Fit t = W / F_eff + C on small and large; return (F_eff, C, error on medium)."""
    by = {r.workload.name: r for r in rows}
    s, m, lg = by["small"], by["medium"], by["large"]
    slope = (lg.measured_s - s.measured_s) / (lg.workload.train_flops - s.workload.train_flops)
    const = s.measured_s - slope * s.workload.train_flops
    pred_m = const + slope * m.workload.train_flops
    return (1.0 / slope if slope > 0 else float("inf")), const, pred_m / m.measured_s - 1.0


# ---------------------------------------------------------------------------------------------------------------
# The per-operator roofline of the simulator (iotfl_sim.fl.cost.opcost), with held-out fits
# ---------------------------------------------------------------------------------------------------------------
LAST_BATCH = SAMPLES - (STEPS - 1) * BATCH  # 14: the last minibatch of a round, priced at its own size
# One free parameter per device, and which one follows how the device executes a PyTorch training step, not the
# FedX times: on a CPU every op runs synchronously on the host, so fixed per-op costs (dispatch, autograd, the
# thread pool's fork/join, small-tensor inefficiency) add up -> fit the per-op overhead; on a CUDA GPU launches
# are asynchronous and hide behind the kernels (FedX Table III: GPU 99.7% busy), so the time is the kernels'
# own, low-occupancy memory-bound work -> fit the achieved fraction of the memory bandwidth.
FIT_FORM = {"sbc": "overhead", "phone": "overhead", "server": "overhead", "edge_gpu": "bandwidth"}
FORM_TEXT = {
    "overhead": "per-op overhead o (F, B from the profile)",
    "bandwidth": "achieved-bandwidth fraction k: B_eff = k B (F, o from the profile)",
}


def roofline_traces() -> dict[str, tuple[opcost.StepTrace, opcost.StepTrace]]:
    """Per-op FLOPs and bytes of one full (32) and the last (14-sample) training step of each workload."""
    out = {}
    for name in WORKLOADS:
        build = lambda n=name: OFAMobileNetV3(*WORKLOADS[n], KERNEL, NUM_CLASSES)  # noqa: E731
        out[name] = (
            opcost.trace_module_step(build, (3, IMAGE, IMAGE), BATCH),
            opcost.trace_module_step(build, (3, IMAGE, IMAGE), LAST_BATCH),
        )
    return out


def round_seconds(tr: tuple[opcost.StepTrace, opcost.StepTrace], flops: float, bw: float, ov: float) -> float:
    full, last = tr
    return (STEPS - 1) * full.time(flops, bw, ov) + last.time(flops, bw, ov)


def roof_predict(form: str, rates: Rates, tr: tuple[opcost.StepTrace, opcost.StepTrace], p: float) -> float:
    if form == "overhead":
        return round_seconds(tr, rates.flops, rates.mem_bw, p)
    return round_seconds(tr, rates.flops, rates.mem_bw * p, rates.op_overhead_s)


def roof_fit(form: str, rates: Rates, cells: list[tuple[tuple[opcost.StepTrace, opcost.StepTrace], float]]) -> float:
    """The parameter minimising the squared log error over ``cells`` (traces, measured seconds)."""
    from scipy.optimize import minimize_scalar

    def loss(lp: float) -> float:
        return sum(math.log(roof_predict(form, rates, tr, math.exp(lp)) / m) ** 2 for tr, m in cells)

    return math.exp(minimize_scalar(loss, bounds=(-25.0, 5.0), method="bounded", options={"xatol": 1e-9}).x)


@dataclass(frozen=True)
class RoofRow:
    device: str
    label: str
    form: str
    workload: str
    sourced_s: float  # every number from the profile, nothing fitted
    param: float  # fitted on fit_on only
    fit_on: tuple[str, ...]
    predicted_s: float
    measured_s: float

    @property
    def ratio(self) -> float:
        return self.predicted_s / self.measured_s


def roofline_rows(traces: dict, form_of: Callable[[DeviceProfile], str] | None = None) -> list[RoofRow]:
    """Leave-one-workload-out: each cell is predicted with a parameter fitted on the device's other two cells."""
    rows = []
    for key, label, stem in DEVICES:
        if stem is None:
            continue
        prof = DeviceProfile.model_validate(yaml.safe_load((PROFILES / f"{stem}.yaml").read_text()))
        rates = prof.rates(None)
        form = form_of(prof) if form_of else FIT_FORM[prof.device_class]
        for w in WORKLOADS:
            others = tuple(x for x in WORKLOADS if x != w)
            p = roof_fit(form, rates, [(traces[x], MEASURED_S[key][x]) for x in others])
            sourced = round_seconds(traces[w], rates.flops, rates.mem_bw, rates.op_overhead_s)
            rows.append(
                RoofRow(key, label, form, w, sourced, p, others, roof_predict(form, rates, traces[w], p), MEASURED_S[key][w])
            )
    return rows


def _param_text(r: RoofRow) -> str:
    return f"o = {r.param * 1e6:.0f} us" if r.form == "overhead" else f"k = {r.param:.3f}"


def table_roofline(rows: list[RoofRow]) -> list[str]:
    lines = [
        "| device | workload | sourced-only s | fitted (on) | predicted s | measured s (FedX) | predicted / measured "
        "| within 25% |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.label} | {r.workload} | {r.sourced_s:.2f} | {_param_text(r)} ({' + '.join(r.fit_on)}) | "
            f"{r.predicted_s:.1f} | {r.measured_s:.1f} | {r.ratio:.2f} | {'yes' if abs(r.ratio - 1) <= TOLERANCE else 'no'} |"
        )
    return lines


def roofline_section(traces: dict) -> list[str]:
    rows = roofline_rows(traces)
    within = sum(abs(r.ratio - 1) <= TOLERANCE for r in rows)
    worst = max(rows, key=lambda r: max(r.ratio, 1 / r.ratio))
    src = [r.sourced_s / r.measured_s for r in rows]
    out = ["## The per-operator roofline (`iotfl_sim.fl.cost.opcost`), held out", ""]
    out.append(
        f"**{within} of {len(rows)} cells within 25%; worst cell {worst.label} {worst.workload}, predicted / measured "
        f"{worst.ratio:.2f}; no cell off by 2x or more: {all(0.5 < r.ratio < 2 for r in rows)}.** "
        "Split: leave one workload out per device - every cell is predicted with one parameter fitted (least "
        "squares in log time) on the same device's two other workloads only, never on the cell itself. "
        f"With every number from the profiles (sourced `mem_bw_gbs` and `op_overhead_us`, nothing fitted) the roofline "
        f"predicts {_span(src, '.2f')} of the measured times, against 0.05-0.13 for the old FLOPs / FLOP/s rule."
    )
    out.append("")
    out.append(
        "Each round is 23 steps at batch 32 and one at 14, each step traced once on the meta device (forward, "
        "cross-entropy, backward, SGD with momentum) and priced as sum over ATen ops of max(FLOPs / F, bytes / B) + "
        "n_ops x o. The fitted parameter depends on how the device executes a step, decided from the execution "
        "model, not from these times: on the CPUs (Pi 5, QCS605) " + FORM_TEXT["overhead"] + "; on the Nano GPU "
        + FORM_TEXT["bandwidth"] + ". Caveat: the earlier FLOPs-only study below had already shown that a per-op "
        "term suits the CPUs and a rate factor the GPU on these same cells, so the choice of form is not blind; "
        "the parameter values are."
    )
    out.append("")
    out += table_roofline(rows)
    out.append("")
    steps = {w: (t[0].n_ops, t[0].total_flops, t[0].bytes.sum()) for w, t in traces.items()}
    out.append(
        "Traced per full step (batch 32): "
        + "; ".join(f"{w} {n} ops, {f / 1e9:.2f} GFLOP, {b / 1e6:.0f} MB" for w, (n, f, b) in steps.items())
        + ". Backward FLOPs of depthwise convolutions are counted per group (see the FLOPs note below)."
    )
    out.append("")
    out.append("The same held-out procedure with one form for every device, for comparison:")
    out.append("")
    out.append("| form (all devices) | cells within 25% | held-out errors |")
    out.append("|---|---|---|")
    for form in ("overhead", "bandwidth"):
        alt = roofline_rows(traces, lambda _p, f=form: f)
        n = sum(abs(r.ratio - 1) <= TOLERANCE for r in alt)
        errs = ", ".join(f"{r.device.split('_')[0]} {r.workload} {r.ratio - 1:+.0%}" for r in alt)
        out.append(f"| {FORM_TEXT[form]} | {n} of {len(alt)} | {errs} |")
    out.append("")
    fitted = {}
    for r in rows:
        fitted.setdefault(r.label, []).append(r.param)
    out.append(
        "What the fitted numbers mean: "
        + "; ".join(
            f"{lab}: {_span([p * 1e6 for p in ps], '.0f')} us per op" if rows[0].form and any(
                x.label == lab and x.form == "overhead" for x in rows) else f"{lab}: k = {_span(ps, '.3f')}"
            for lab, ps in fitted.items()
        )
        + ". The CPUs' per-op costs are 20-100x the sourced dispatch overheads (12-15 us): what they stand for is "
        "per-layer work PyTorch does badly on these cores at batch 32 and 32x32 inputs (depthwise and 1x1 "
        "convolution backward, batch norm, element-wise on small maps), not Python dispatch. The Nano's k says its "
        "kernels move data at about a twentieth of the 17.9 GB/s the profile assumes. These values stay out of "
        "the profiles so FedX remains a held-out check; a scenario that wants FedX's timings can override "
        "`compute.op_overhead_us` / `compute.mem_bw_gbs` with them."
    )
    out.append("")
    return out


# ---------------------------------------------------------------------------------------------------------------
# FLOPs per byte: counted FLOPs against the tensor bytes each layer class reads and writes (deterministic, meta)
# ---------------------------------------------------------------------------------------------------------------
CLASSES = ("depthwise conv", "1x1 conv", "dense kxk conv", "linear", "batch norm", "element-wise / other")


def _layer_class(weight_shape: list[int]) -> str:
    cout, cin_per_group, *k = weight_shape
    if cin_per_group == 1 and cout > 1 and k != [1, 1]:
        return "depthwise conv"
    if k == [1, 1]:
        return "1x1 conv"
    return "dense kxk conv"


class _Traffic(TorchDispatchMode):
    """Per layer class: counted FLOPs (FlopCounterMode's rule) and fp32 bytes of every tensor an op reads or
    writes (a lower bound on memory traffic: each op touches its operands at least once)."""

    def __init__(self) -> None:
        super().__init__()
        self.flops: dict[str, float] = {}
        self.bytes: dict[str, float] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        returns = func._schema.returns
        if returns and all(r.alias_info is not None and not r.alias_info.is_write for r in returns):
            return out  # views move no data
        name = func.__name__.split(".")[0]
        ins = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        outs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor) and all(t is not i for i in ins)]
        nbytes = 4.0 * (sum(t.numel() for t in ins) + sum(t.numel() for t in outs))
        flops = 0.0
        if name == "convolution":
            w = args[1]
            cls = _layer_class(list(w.shape))
            flops = 2.0 * outs[0].numel() * w.shape[1] * w.shape[2] * w.shape[3]
        elif name in ("addmm", "mm"):
            cls = "linear"
            a, b = (args[1], args[2]) if name == "addmm" else (args[0], args[1])
            flops = 2.0 * a.shape[0] * a.shape[1] * b.shape[1]
        elif "batch_norm" in name:
            cls = "batch norm"
        else:
            cls = "element-wise / other"
        self.flops[cls] = self.flops.get(cls, 0.0) + flops
        self.bytes[cls] = self.bytes.get(cls, 0.0) + nbytes
        return out


@dataclass(frozen=True)
class Traffic:
    label: str
    flops: dict[str, float]  # forward FLOPs per sample by class
    bytes: dict[str, float]  # forward tensor bytes per sample by class

    @property
    def total_flops(self) -> float:
        return sum(self.flops.values())

    @property
    def total_bytes(self) -> float:
        return sum(self.bytes.values())


def traffic(model: nn.Module, label: str, batch: int = BATCH, image: int = IMAGE) -> Traffic:
    """Forward pass (training mode) of ``model`` on the meta device, split by layer class, per sample."""
    model.train()
    mode = _Traffic()
    with torch.no_grad(), mode:
        model(torch.zeros(batch, 3, image, image, device="meta"))
    return Traffic(
        label,
        {k: v / batch for k, v in mode.flops.items()},
        {k: v / batch for k, v in mode.bytes.items()},
    )


TRAFFIC_REFS: tuple[tuple[str, str, int], ...] = (
    # dense CNNs of the kind the profiles' FLOP/s were fitted on, from iotfl_sim.fl.models.families: (family, label, input)
    ("conv", "dense 4-layer CNN (iotfl_sim `conv`), 32x32", IMAGE),
    ("resnet18", "ResNet18 (iotfl_sim `resnet18`), 32x32", IMAGE),
    ("resnet18", "ResNet18 (iotfl_sim `resnet18`), 224x224", 224),
)


def measure_traffic() -> list[Traffic]:
    from iotfl_sim.fl.models.build import build_model
    from iotfl_sim.fl.submodel import SubmodelSpec

    out = [traffic(build_workload(name), f"FedX {name}, 32x32") for name in WORKLOADS]
    for family, label, image in TRAFFIC_REFS:
        with torch.device("meta"):
            model = build_model(
                family, SubmodelSpec(), num_classes=NUM_CLASSES, in_channels=3, image_size=(image, image)
            )
        out.append(traffic(model, label, image=image))
    return out


# ---------------------------------------------------------------------------------------------------------------
# Host measurement: the same workloads and dense references timed on this machine's CPU
# ---------------------------------------------------------------------------------------------------------------
HOST_WARMUP = 2
HOST_STEPS = 5
HOST_REFS: tuple[tuple[str, str, int], ...] = (
    # (iotfl_sim family, label, timed steps): dense CNNs of the kind the profiles' FLOP/s were fitted on
    ("conv", "dense 4-layer CNN (iotfl_sim `conv`)", 5),
    ("resnet18", "ResNet18 (iotfl_sim `resnet18`)", 2),
)


def _time_steps(model: nn.Module, steps: int) -> float:
    """Fastest wall seconds of one SGD step on a random batch (real tensors, this CPU; the minimum is the
    least disturbed by other load on a shared machine)."""
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(BATCH, 3, IMAGE, IMAGE)
    y = torch.randint(0, NUM_CLASSES, (BATCH,))
    times = []
    for i in range(HOST_WARMUP + steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()
        if i >= HOST_WARMUP:
            times.append(time.perf_counter() - t0)
    return min(times)


@dataclass(frozen=True)
class HostResult:
    cpu: str
    threads: int
    rows: list[tuple[str, float, float]]  # (label, train FLOPs per step, seconds per step)
    breakdown: list[
        tuple[str, float, float]
    ]  # (layer class, share of counted FLOPs, share of op time), medium


def _cpu_name() -> str:
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _flops_by_class(model: nn.Module) -> dict[str, float]:
    """Forward FLOPs per sample by layer class (2 per multiply-add, groups respected)."""
    out: dict[str, float] = {}
    hooks = []

    def hook(mod: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        if isinstance(mod, nn.Conv2d):
            cls = _layer_class(list(mod.weight.shape))
            macs = (
                output.numel()
                / output.shape[0]
                * mod.weight.shape[1]
                * mod.weight.shape[2]
                * mod.weight.shape[3]
            )
        else:
            cls, macs = "linear", mod.in_features * mod.out_features
        out[cls] = out.get(cls, 0.0) + 2.0 * macs

    for mod in model.modules():
        if isinstance(mod, (nn.Conv2d, nn.Linear)):
            hooks.append(mod.register_forward_hook(hook))
    with torch.no_grad():
        model(torch.zeros(2, 3, IMAGE, IMAGE, device=next(model.parameters()).device))
    for h in hooks:
        h.remove()
    return out


def _time_by_class(model: nn.Module) -> dict[str, float]:
    """Self CPU time of one training step's ATen ops, grouped by the layer class they belong to."""
    from torch.profiler import ProfilerActivity, profile

    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(BATCH, 3, IMAGE, IMAGE)
    y = torch.randint(0, NUM_CLASSES, (BATCH,))

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()

    for _ in range(HOST_WARMUP):
        step()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(3):
            step()
    out: dict[str, float] = {}
    for ev in prof.events():
        t = float(ev.self_cpu_time_total)
        if ev.name in (
            "aten::mkldnn_convolution",
            "aten::convolution_backward",
            "aten::_slow_conv2d_forward",
            "aten::_slow_conv2d_backward",
            "aten::_conv_depthwise2d",
            "aten::thnn_conv2d",
        ):
            shapes = ev.input_shapes
            w = shapes[2] if ev.name == "aten::convolution_backward" else shapes[1]
            cls = _layer_class(list(w)) if len(w) == 4 else "element-wise / other"
        elif ev.name in ("aten::addmm", "aten::mm"):
            cls = "linear"
        elif "batch_norm" in ev.name:
            cls = "batch norm"
        else:
            cls = "element-wise / other"
        out[cls] = out.get(cls, 0.0) + t
    return out


def host_benchmark(ws: list[Workload]) -> HostResult:
    from iotfl_sim.fl.cost.footprint import measure_cost
    from iotfl_sim.fl.models.build import build_model
    from iotfl_sim.fl.submodel import SubmodelSpec

    torch.manual_seed(0)
    rows = []
    for w in ws:
        t = _time_steps(build_workload(w.name, device="cpu"), HOST_STEPS)
        rows.append((f"FedX {w.name}", 3.0 * w.fwd_flops * BATCH, t))
    spec = SubmodelSpec()
    for family, label, steps in HOST_REFS:
        kw = dict(num_classes=NUM_CLASSES, in_channels=3, image_size=(IMAGE, IMAGE))
        cost = measure_cost(family, spec, **kw)
        t = _time_steps(build_model(family, spec, **kw), steps)
        rows.append((label, 3.0 * cost.flops_forward_per_sample * BATCH, t))
    model = build_workload(FIT_ON, device="cpu")
    flops = _flops_by_class(model)
    times = _time_by_class(model)
    total_f, total_t = sum(flops.values()), sum(times.values())
    classes = list(CLASSES)
    breakdown = [(c, flops.get(c, 0.0) / total_f, times.get(c, 0.0) / total_t) for c in classes]
    return HostResult(_cpu_name(), torch.get_num_threads(), rows, breakdown)


# ---------------------------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------------------------
def _pct(x: float) -> str:
    return f"{x * 100:+.0f}%"


def table_workloads(ws: list[Workload]) -> list[str]:
    lines = [
        "| workload | d / e / k | params (CIFAR-10 head) | params (200-class head, no BN affine) vs FedX | "
        "fwd MFLOP/sample | train GFLOP / 750 samples | ATen ops / step |",
        "|---|---|---|---|---|---|---|",
    ]
    for w in ws:
        fedx = FEDX_PARAMS_M[w.name] * 1e6
        lines.append(
            f"| {w.name} | {w.depth} / {w.expand} / {KERNEL} | {w.params / 1e6:.3f}M | "
            f"{w.params_fedx_head / 1e6:.3f}M vs {FEDX_PARAMS_M[w.name]:.2f}M "
            f"({(w.params_fedx_head / fedx - 1) * 100:+.2f}%) | {w.fwd_flops / 1e6:.2f} | {w.train_flops / 1e9:.2f} | "
            f"{w.step.ops_per_step} |"
        )
    return lines


def table_comparison(rows: list[Row]) -> list[str]:
    lines = [
        "| device | profile FLOP/s | workload | params | fwd MFLOP/sample | train GFLOP | predicted s | "
        "measured s (FedX) | predicted / measured | within 25% | implied GFLOP/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        w = r.workload
        if r.profile_flops is None:
            prof, pred, ratio, within = "none", "n/a", "n/a", "n/a (no profile)"
        else:
            prof, pred, ratio = f"{r.profile_flops:.2g}", f"{r.predicted_s:.2f}", f"{r.ratio:.3f}"
            within = "yes" if abs(r.ratio - 1) <= TOLERANCE else "no"
        lines.append(
            f"| {r.label} | {prof} | {w.name} | {w.params / 1e6:.2f}M | {w.fwd_flops / 1e6:.2f} | "
            f"{w.train_flops / 1e9:.1f} | {pred} | {r.measured_s:.1f} | {ratio} | {within} | "
            f"{r.effective_flops / 1e9:.3g} |"
        )
    return lines


def table_corrections(rows: list[Row]) -> list[str]:
    lines = [
        f"| device | model | fitted on {FIT_ON} | small: predicted vs measured s (error) | "
        "large: predicted vs measured s (error) | held-out max abs error |",
        "|---|---|---|---|---|---|",
    ]
    for key, label, stem in DEVICES:
        if stem is None:
            continue
        dev = [r for r in rows if r.device == key]
        fit = next(r for r in dev if r.workload.name == FIT_ON)
        lines.append(
            f"| {label} | none: t = W / F | - | "
            + " | ".join(
                f"{r.predicted_s:.2f} vs {r.measured_s:.1f} ({_pct(r.ratio - 1)})"
                for r in dev
                if r.workload.name != FIT_ON
            )
            + f" | {max(abs(r.ratio - 1) for r in dev) * 100:.0f}% (all three) |"
        )
        for mname, formula, fn in MODELS:
            cells, errs = [], []
            for name in ("small", "large"):
                r = next(x for x in dev if x.workload.name == name)
                pred = fn(r, fit)
                err = pred / r.measured_s - 1
                errs.append(abs(err))
                cells.append(f"{pred:.1f} vs {r.measured_s:.1f} ({_pct(err)})")
            lines.append(
                f"| {label} | {mname}: {formula} | {fitted_parameter(mname, fit)} | {cells[0]} | {cells[1]} | "
                f"{max(errs) * 100:.0f}% |"
            )
    return lines


def table_affine(rows: list[Row]) -> list[str]:
    lines = [
        "| device | F_eff (GFLOP/s) | F_eff / profile | C (s per round) | medium: predicted error |",
        "|---|---|---|---|---|",
    ]
    for key, label, stem in DEVICES:
        dev = [r for r in rows if r.device == key]
        f_eff, const, err = _affine_two_point(dev)
        rel = "n/a" if stem is None else f"{f_eff / dev[0].profile_flops:.3f}"
        lines.append(f"| {label} | {f_eff / 1e9:.2f} | {rel} | {const:.1f} | {_pct(err)} |")
    return lines


def table_host(host: HostResult) -> list[str]:
    ref = next(r for r in host.rows if r[0].startswith("ResNet18"))
    ref_rate = ref[1] / ref[2]
    lines = [
        "| model (batch 32, 32x32) | train GFLOP / step | s / step (fastest of several) | achieved GFLOP/s | "
        "vs ResNet18 |",
        "|---|---|---|---|---|",
    ]
    for label, flops, t in host.rows:
        lines.append(
            f"| {label} | {flops / 1e9:.3f} | {t:.3f} | {flops / t / 1e9:.1f} | {flops / t / ref_rate:.3f} |"
        )
    return lines


def table_breakdown(host: HostResult) -> list[str]:
    lines = [
        "| layer class | share of counted FLOPs | share of op time (one training step) |",
        "|---|---|---|",
    ]
    for cls, f_share, t_share in host.breakdown:
        lines.append(f"| {cls} | {f_share * 100:.1f}% | {t_share * 100:.1f}% |")
    return lines


def _eff_of(rows: list[Row], device: str, workload: str) -> float:
    r = next(x for x in rows if x.device == device and x.workload.name == workload)
    return r.effective_flops / r.profile_flops


def _held_out(rows: list[Row], device: str, model: str) -> float:
    dev = [r for r in rows if r.device == device]
    fit = next(r for r in dev if r.workload.name == FIT_ON)
    fn = next(m[2] for m in MODELS if m[0] == model)
    return max(abs(fn(r, fit) / r.measured_s - 1) for r in dev if r.workload.name != FIT_ON)


def _span(vals: list[float], fmt: str) -> str:
    lo, hi = min(vals), max(vals)
    return format(lo, fmt) if format(lo, fmt) == format(hi, fmt) else f"{lo:{fmt}}-{hi:{fmt}}"


def table_traffic(tr: list[Traffic]) -> list[str]:
    cls_cols = ["depthwise conv", "1x1 conv", "dense kxk conv", "batch norm", "element-wise / other"]
    lines = [
        "| model (training-mode forward, batch 32) | fwd MFLOP/sample | tensor MB read+written/sample | "
        "counted FLOP per byte | " + " | ".join(f"bytes: {c}" for c in cls_cols) + " |",
        "|---|---|---|---|" + "---|" * len(cls_cols),
    ]
    for t in tr:
        shares = " | ".join(f"{t.bytes.get(c, 0.0) / t.total_bytes * 100:.0f}%" for c in cls_cols)
        lines.append(
            f"| {t.label} | {t.total_flops / 1e6:.1f} | {t.total_bytes / 1e6:.2f} | "
            f"{t.total_flops / t.total_bytes:.1f} | {shares} |"
        )
    return lines


def table_traffic_classes(t: Traffic) -> list[str]:
    lines = [
        "| layer class | share of counted FLOPs | share of tensor bytes | counted FLOP per byte |",
        "|---|---|---|---|",
    ]
    for c in CLASSES:
        f, b = t.flops.get(c, 0.0), t.bytes.get(c, 0.0)
        if b == 0:
            continue
        lines.append(
            f"| {c} | {f / t.total_flops * 100:.1f}% | {b / t.total_bytes * 100:.1f}% | {f / b:.1f} |"
        )
    return lines


def render(
    ws: list[Workload], rows: list[Row], tr: list[Traffic], host: HostResult | None, roof: list[str] | None = None
) -> str:
    prof_rows = [r for r in rows if r.profile_flops is not None]
    ratios = [r.ratio for r in prof_rows]
    n_within = sum(abs(x - 1) <= TOLERANCE for x in ratios)
    by = {(r.device, r.workload.name): r for r in rows}
    wl = list(WORKLOADS)
    eff = {d: [_eff_of(rows, d, w) for w in wl] for d, _, st in DEVICES if st}
    all_eff = [e for v in eff.values() for e in v]
    held = {(d, m): _held_out(rows, d, m) for d, _, st in DEVICES if st for m, _, _ in MODELS}
    profiled = [d for d, _, st in DEVICES if st]
    ws_by = {w.name: w for w in ws}
    sm, md, lg = ws_by["small"], ws_by["medium"], ws_by["large"]
    nano_cpu = [by[("jetson_nano_cpu", w)].effective_flops / 1e9 for w in wl]
    pi, nano, qc = "raspberry_pi_5", "jetson_nano", "qualcomm_ai_kit"
    cpu_held = [held[(d, "per-op")] for d in (pi, qc)]
    eff_held = [held[(d, "efficiency")] for d in profiled]
    step_held = [held[(d, "per-step")] for d in profiled]

    def c_op(device: str) -> float:
        fit = by[(device, FIT_ON)]
        return (fit.measured_s - fit.predicted_s) / fit.workload.round_ops

    sources = sorted({r.source for r in prof_rows})
    fb = [w.step.fwd_bwd_flops_per_sample / w.fwd_flops for w in ws]
    affine_err = [abs(_affine_two_point([r for r in rows if r.device == d])[2]) for d, _, _ in DEVICES]
    tr_by = {t.label: t for t in tr}
    fedx_tr = [tr_by[f"FedX {w}, 32x32"] for w in wl]
    dense_tr = [t for t in tr if not t.label.startswith("FedX") and t.label.endswith("32x32")]
    big_tr = [t for t in tr if t.label.endswith("224x224")]
    t_md = tr_by[f"FedX {FIT_ON}, 32x32"]
    fpb = [t.total_flops / t.total_bytes for t in fedx_tr]
    dense_fpb = [t.total_flops / t.total_bytes for t in dense_tr]

    def share(t: Traffic, cls: str, of: str = "bytes") -> float:
        d = t.bytes if of == "bytes" else t.flops
        return d.get(cls, 0.0) / sum(d.values())

    bn_ew = share(t_md, "batch norm") + share(t_md, "element-wise / other")
    dw_fpb = t_md.flops["depthwise conv"] / t_md.bytes["depthwise conv"]
    pw_fpb = t_md.flops["1x1 conv"] / t_md.bytes["1x1 conv"]

    out: list[str] = []
    add = out.append
    add("# Calibration against FedX: training time of the CIFAR-10 workloads")
    add("")
    cmd = "python benchmarks/calibration_fedx.py" + (" --host" if host is not None else "")
    add(f"Generated by `{cmd}`; the script overwrites this file, so edit the script, not this file.")
    add("Profiles read: " + ", ".join(sources) + " (`device_profiles/`, read with `yaml.safe_load`).")
    add(
        "Measurements: FedX (`shared/seeds/fedx.txt`) Tables I-III, CIFAR-10 rows, mean of 20 rounds of 750 samples."
    )
    add("")
    out += roof or []
    add("## Conclusion: the FLOPs-only rule (before the roofline)")
    add("")
    add(
        f"With the sourced profile FLOP/s, {n_within} of {len(ratios)} predictions land within 25% of FedX's "
        f"measurements: the simulator predicts FedX's CIFAR-10 rounds {1 / max(ratios):.0f}-{1 / min(ratios):.0f}x "
        "too short on the Pi 5, the Jetson Nano GPU and the QCS605 kit, so the 25% target is not met and the gap "
        "is explained here rather than tuned away. "
        "The gap is the workload, not the devices: the profiles' rates were fitted on dense ResNet-class CNNs, "
        "while FedX trains depthwise-separable MobileNetV3 sub-networks on 32x32 inputs, which do "
        f"{_span(fpb, '.1f')} counted FLOPs per byte of tensor traffic against {_span(dense_fpb, '.0f')} for dense "
        f"CNNs at the same input size and reach only {_span(all_eff, '.2f')} of the profile rates. "
        f"Fitted on the medium net and checked on small and large, one efficiency factor per device holds out "
        f"within 25% only on the Nano GPU ({held[(nano, 'efficiency')]:.0%}; {held[(pi, 'efficiency')]:.0%} on the "
        f"Pi 5, {held[(qc, 'efficiency')]:.0%} on the QCS605), while a per-op cost on top of the dense rate holds "
        f"out within {max(cpu_held):.0%} on both CPUs but misses the Nano GPU by {held[(nano, 'per-op')]:.0%}, so "
        "no single correction form covers all three devices; the profiles stay unchanged and a MobileNet-class "
        "term belongs in the cost model, not in `compute.flops`."
    )
    add("")
    add("## Workloads")
    add("")
    add(
        f"OFA MobileNetV3 sub-networks as derived in `profile_derivations.md` (FedX workload): depth d and expand "
        f"ratio e in all five stages, kernel {KERNEL}, {IMAGE}x{IMAGE} input, {NUM_CLASSES}-class head, batch "
        f"{BATCH}, {SAMPLES} samples = {STEPS} steps. FLOPs as `iotfl_sim.fl.cost.footprint`: FlopCounterMode on the meta "
        "device (convolutions and matmuls, 2 per multiply-add), training = 3 x forward x samples. The column next "
        "to FedX's counts rebuilds the nets with the 200-class head those counts match, as a check of the "
        "architecture. `ATen ops / step` counts the non-view operators one training step (forward, loss, "
        "backward, SGD update) dispatches."
    )
    add("")
    out += table_workloads(ws)
    add("")
    add(
        f"Note on the 3x rule: counting a real forward+backward pass with FlopCounterMode (torch "
        f"{torch.__version__}) gives {', '.join(f'{x:.1f}' for x in fb)} x forward instead of ~3, because its "
        "`convolution_backward` formula ignores `groups` for the weight gradient and so counts every depthwise "
        "layer's weight gradient C times over (a fix is proposed upstream in pytorch/pytorch PR #183405). The "
        "3 x forward rule is the right count here (2.99 x: the stem needs no input gradient) and stays the "
        "fallback for profiles without `mem_bw_gbs`; the roofline (`iotfl_sim.fl.cost.opcost`) counts the backward pass "
        "with its own `convolution_backward` formula, which respects `groups` (hand-checked in tests/test_opcost.py), "
        "never with FlopCounterMode's."
    )
    add("")
    add("## Predicted vs measured")
    add("")
    add(
        "Predicted = train FLOPs / profile `compute.flops` (jitter median 1; the Nano in its default 10 W mode). "
        "Implied GFLOP/s = train FLOPs / measured time, so predicted / measured is also the efficiency "
        "(implied / profile FLOP/s). The Jetson Nano CPU has no profile (`jetson_nano` is its GPU), so only its "
        "measurement and implied rate are listed."
    )
    add("")
    out += table_comparison(rows)
    add("")
    add(
        f"**{n_within} of {len(ratios)} within 25%.** Predicted / measured is {min(ratios):.3f}-{max(ratios):.3f}: "
        f"the profiles predict FedX's times {1 / max(ratios):.0f}-{1 / min(ratios):.0f}x too short."
    )
    add("")
    add("## FLOPs per byte: what the FLOP count does not see")
    add("")
    add(
        "Every ATen op of a training-mode forward pass (meta device, batch 32, per sample), grouped by layer class: "
        "counted FLOPs (the simulator's rule) and the fp32 bytes of the tensors each op reads and writes, a lower "
        "bound on its memory traffic. The dense references are `iotfl_sim.fl.models.families` families at the same 32x32 "
        "input, and ResNet18 at the 224x224 the profiles' ResNet measurements used (at least as many FLOPs per "
        f"byte: {_span([t.total_flops / t.total_bytes for t in big_tr], '.0f')})."
    )
    add("")
    out += table_traffic(tr)
    add("")
    add(f"By layer class, {FIT_ON} net:")
    add("")
    out += table_traffic_classes(t_md)
    add("")
    if host is not None:
        hb = {c: (f, t) for c, f, t in host.breakdown}
        add("## Same workloads timed on this machine's CPU (`--host`)")
        add("")
        add(
            f"Host: {host.cpu}, {host.threads} torch threads, torch {torch.__version__}. Real training steps "
            "(random data, SGD) of the three FedX nets and of two dense CNNs from `iotfl_sim.fl.models.families` at the "
            "same batch and input size, FLOPs by the simulator's rule. Times depend on the machine and on its "
            "load at the time; the ratios are the point."
        )
        add("")
        out += table_host(host)
        add("")
        add(
            f"Where one training step of the {FIT_ON} net spends its time (torch.profiler, self CPU time of ops):"
        )
        add("")
        out += table_breakdown(host)
        add("")
    add(f"## One-parameter corrections, fitted on {FIT_ON}, checked on small and large")
    add("")
    add(
        "Each model keeps the profile rate F and adds one parameter per device, fitted so the medium workload is "
        "exact; the error on small and large is a held-out check. `efficiency`: one factor per architecture class "
        'and device ("MobileNet-class nets train at eta x the dense FLOP/s"). `per-step`: a fixed cost per '
        f"minibatch ({STEPS} steps for every workload, so a constant per round). `per-op`: a fixed cost per "
        "dispatched ATen op, scaled by the op counts above (W = train FLOPs, F = profile FLOP/s)."
    )
    add("")
    out += table_corrections(rows)
    add("")
    add("Two-parameter check: t = W / F_eff + C through small and large, error on medium.")
    add("")
    out += table_affine(rows)
    add("")
    add("## Why the gap")
    add("")
    add(
        "1. **The profile FLOP/s are dense-CNN rates.** Every `compute.flops` comes from ResNet-class networks "
        "at 224x224, directly or through an anchor (Pi 4 ResNet18 training and Pi 5 = 2x Pi 4; Nano from "
        "ResNet18->34 and 50->101 marginal inference rates x 0.5; QCS605 from AI-Benchmark CPU scores anchored "
        "on the Pi 5). FedX trains a "
        "depthwise-separable MobileNetV3 with squeeze-excite and hard-swish at 32x32. Per byte of tensor "
        f"traffic it does {_span(fpb, '.1f')} counted FLOPs, against {_span(dense_fpb, '.0f')} for dense CNNs on "
        f"the same input: its depthwise convolutions manage {dw_fpb:.1f} FLOP/byte and its 1x1 convolutions "
        f"{pw_fpb:.1f}, and BatchNorm plus the element-wise ops (activations, SE scaling, residual adds), which "
        f"the counter scores at zero FLOPs, are {bn_ew * 100:.0f}% of the bytes. On CPUs and on the Nano's shared "
        "LPDDR4 such work runs at memory speed, not at the GEMM rate the profiles measure. The derivations "
        "already flagged this: on the Pi 4 the same source measured MobileNetV2 at 1/8.5 of ResNet18's FLOP/s "
        "(efficiency 0.12, at 224x224)."
        + (
            f" The `--host` timing above shows it directly: depthwise layers are "
            f"{hb['depthwise conv'][0] * 100:.0f}% of the counted FLOPs but {hb['depthwise conv'][1] * 100:.0f}% "
            f"of the op time, BatchNorm and the element-wise ops another "
            f"{(hb['batch norm'][1] + hb['element-wise / other'][1]) * 100:.0f}%, and the 1x1 convolutions do "
            f"{hb['1x1 conv'][0] * 100:.0f}% of the FLOPs in {hb['1x1 conv'][1] * 100:.0f}% of the time."
            if host is not None
            else ""
        )
    )
    add(
        f"2. **Implied efficiencies** (predicted / measured): Pi 5 {_span(eff[pi], '.3f')}, i.e. "
        f"{_span([by[(pi, w)].effective_flops / 1e9 for w in wl], '.1f')} GFLOP/s against 32, in line with the "
        f"Pi 4 MobileNetV2 factor; QCS605 {_span(eff[qc], '.3f')}, where FedX's Table I shows only 35-37% CPU use "
        "on the 8-core board (about 3 busy cores), so part of that gap is FedX's threading rather than the chip; "
        f"Nano GPU {_span(eff[nano], '.3f')}. The Nano CPU (no profile) implies {_span(nano_cpu, '.2f')} GFLOP/s "
        f"on four Cortex-A57 cores, {_span([x / A57_PEAK for x in nano_cpu], '.1%')} of a nominal "
        f"{A57_PEAK:.0f} GFLOP/s FP32 peak (assuming one 128-bit FMA per core and cycle). On both profiled CPUs "
        "the efficiency rises with model size (larger e makes the 1x1 convolutions wider, and the per-layer "
        "costs grow only with depth), so it is not one number per device."
    )
    add(
        "3. **Per-layer costs dominate tiny inputs.** Time grows far more slowly than FLOPs: small -> large is "
        f"{lg.train_flops / sm.train_flops:.2f}x the FLOPs and {lg.step.ops_per_step / sm.step.ops_per_step:.2f}x "
        f"the ops, and the Pi 5 took {by[(pi, 'large')].measured_s / by[(pi, 'small')].measured_s:.2f}x the time, "
        f"the QCS605 {by[(qc, 'large')].measured_s / by[(qc, 'small')].measured_s:.2f}x. That is why the per-op "
        f"model holds out within {max(cpu_held) * 100:.0f}% on both CPUs. Its fitted cost ({c_op(pi) * 1e6:.0f} us "
        f"per op on the Pi 5, {c_op(qc) * 1e6:.0f} us on the QCS605) is far above PyTorch's per-op dispatch "
        "overhead (microseconds to tens of microseconds), so it is not Python overhead: the op count stands in "
        "for the number of layers, each carrying memory-bound work (depthwise, BatchNorm, element-wise, and "
        "their backward) whose cost follows the layer count and activation sizes rather than the FLOPs."
    )
    add(
        f"4. **The Nano GPU behaves differently.** Its rounds are {by[(nano, 'small')].measured_s / STEPS * 1e3:.0f}-"
        f"{by[(nano, 'large')].measured_s / STEPS * 1e3:.0f} ms per minibatch for "
        f"{sm.train_flops / SAMPLES * BATCH / 1e9:.2f}-{lg.train_flops / SAMPLES * BATCH / 1e9:.2f} GFLOP, and "
        "their growth follows the FLOPs rather than the layer count (small : medium : large = 1 : "
        f"{by[(nano, 'medium')].measured_s / by[(nano, 'small')].measured_s:.2f} : "
        f"{by[(nano, 'large')].measured_s / by[(nano, 'small')].measured_s:.2f} in time, 1 : "
        f"{md.train_flops / sm.train_flops:.2f} : {lg.train_flops / sm.train_flops:.2f} in FLOPs, 1 : "
        f"{md.step.ops_per_step / sm.step.ops_per_step:.2f} : {lg.step.ops_per_step / sm.step.ops_per_step:.2f} "
        f"in ops), at an almost constant {_span(eff[nano], '.3f')} of the profile rate. So the efficiency factor "
        f"holds out ({held[(nano, 'efficiency')]:.0%}) and the per-op model does not "
        f"({held[(nano, 'per-op')]:.0%}). FedX's Table III reports the GPU 99.7% busy at only 0.7-1.1 W on the "
        "GPU rail (far below the 7 W profile): kernels are resident almost all the time but use little of the "
        "128 cores, which points to small, low-occupancy, memory-bound kernels (depthwise and 1x1 convolutions "
        "on 16x16 down to 1x1 maps, BatchNorm, element-wise) rather than to idle launch gaps. Caveat: FedX's GPU "
        "numbers are not fully self-consistent - its Tiny-ImageNet rounds (4.6 / 6.9 / 16.9 s) are shorter than "
        "its CIFAR-10 rounds for the same nets at about 3x the FLOPs - so a good fit on three of them is weak "
        "evidence."
    )
    add(
        "5. **Which correction suffices.** None for every device. The efficiency factor fixes the order of "
        f"magnitude everywhere but holds out within 25% only on the Nano GPU ({_span(eff_held, '.0%')} across "
        "devices: on the CPUs it scales time with FLOPs, which these workloads do not follow); a per-step "
        f"constant is worse everywhere ({_span(step_held, '.0%')}); a per-op cost plus the dense rate is within "
        f"{max(cpu_held):.0%} on the CPUs and {held[(nano, 'per-op')]:.0%} on the Nano GPU. Two free parameters "
        "(rate and constant, fitted through small and large) miss medium by "
        f"{_span(affine_err, '.0%')}. With three workloads per device, picking the form per device is "
        "description, not validation: a correction for MobileNet-class nets would need more workloads (FedX's "
        "FEMNIST and Tiny-ImageNet rows, other sources) before it goes into the simulator."
    )
    add(
        "6. **Consequences for simulations.** The profiles stay as they are: they are sourced dense-CNN rates and "
        "right for dense workloads. A scenario with MobileNet-class models at 32x32 runs "
        f"{1 / max(ratios):.0f}-{1 / min(ratios):.0f}x too fast with them, and it misranks devices: the profiles "
        f"make the Nano GPU {by[(nano, 'small')].profile_flops / by[(pi, 'small')].profile_flops:.1f}x faster "
        f"than the Pi 5, while FedX measured it {by[(pi, 'small')].measured_s / by[(nano, 'small')].measured_s:.2f}x"
        f" / {by[(pi, 'medium')].measured_s / by[(nano, 'medium')].measured_s:.2f}x faster for small / medium and "
        f"slower for large ({by[(nano, 'large')].measured_s:.1f} s vs {by[(pi, 'large')].measured_s:.1f} s). "
        "Reproducing FedX's timing needs an architecture-aware term in `iotfl_sim.fl.cost.footprint` on top of the dense "
        "rate (here a per-class efficiency fits the Nano GPU, a per-layer or bytes-based cost the CPUs), fitted "
        "per device on more workloads than these three."
    )
    add("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--no-write", action="store_true", help=f"print only; do not write {OUT_MD.name}")
    ap.add_argument(
        "--host",
        action="store_true",
        help="also time the workloads and dense references on this CPU (adds ~15-60 s; machine-dependent numbers)",
    )
    ap.add_argument("--out", type=Path, default=OUT_MD, help="markdown output path")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    ws = measure_workloads()
    rows = build_rows(ws)
    tr = measure_traffic()
    host = host_benchmark(ws) if args.host else None
    text = render(ws, rows, tr, host, roofline_section(roofline_traces()))
    print(text)
    if not args.no_write:
        args.out.write_text(text)
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
