"""`iotfl-sim profiles measure`: micro-benchmarks that turn the machine they run on into a device profile.

Three numbers feed the roofline of ``fl.cost.opcost``, each timed with PyTorch on this machine:

- ``compute.flops``: a dense 3x3 convolution's training work (forward + input and weight gradients),
  the operator class that dominates dense CNNs; FLOPs counted as ``fl.cost.opcost`` counts them;
- ``compute.mem_bw_gbs``: a streaming element-wise op on tensors far larger than any cache (bytes read +
  written per second);
- ``compute.op_overhead_us``: training steps of a network of 4-wide layers, whose time is all dispatch,
  autograd and optimizer bookkeeping, per traced op.

Each benchmark is warmed up and then repeated for its share of the time budget; the fastest repeat is
kept (the machine's uncontended capability: on a shared machine a median drifts with whatever else runs),
and the spread of the convolution's repeats gives the jitter. Per-kind kernel costs (``compute.kernels``)
come from calling each priced operator kind directly: on tiny tensors for its fixed cost, and for batch
norm and pooling on mid-size ones for their achieved rate. Optionally one real training step of a model
family is timed and set next to the roofline's prediction from the measured numbers, as a check.

``device="cuda"`` measures a GPU the same way (a server that trains on one): every tensor lives on the GPU and
each timed repeat ends with ``torch.cuda.synchronize()``, so a repeat is the work's wall time and not its launch.
The convolution and the streaming op are larger there (``GPU_CONV``, ``GPU_STREAM_VALUES``): a GPU reaches its
peak only on work that fills it, and the small calls are the kernel curves' job.
"""

from __future__ import annotations

import datetime as _dt
import math
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from iotfl_sim.fl.cost import opcost
from iotfl_sim.fl.torch_seed import seed_torch

FAMILY_SHAPES = {  # family -> (channels, height, width) of the dataset it is usually trained on here
    "cnn_small": (1, 8, 8),
    "conv": (1, 28, 28),
    "mlp": (1, 28, 28),
    "resnet18": (3, 32, 32),
    "mobilenetv2": (3, 32, 32),
    "vgg16": (3, 32, 32),
    "ofa_mbv3": (3, 32, 32),
}
CPU = torch.device("cpu")
GPU_CONV = (64, 256, 32)  # (batch, channels, side) of the peak-FLOPs convolution on a GPU: 30 GFLOP a step
GPU_STREAM_VALUES = 1 << 28  # 1 GiB of fp32 per tensor: microseconds of launch are noise against it


def _syncer(device: torch.device) -> Callable[[], None]:
    """What ends a timed repeat: waiting for the GPU's queue to drain, or nothing on a CPU."""
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def _repeat(fn: Callable[[], object], seconds: float, min_reps: int = 3, device: torch.device = CPU) -> list[float]:
    sync = _syncer(device)
    fn()  # warm-up: allocator, kernel selection, lazy init
    sync()
    times: list[float] = []
    end = time.perf_counter() + seconds
    while len(times) < min_reps or time.perf_counter() < end:
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return times


def conv_flops_per_s(seconds: float, device: torch.device = CPU) -> tuple[float, float, str]:
    """(FLOP/s, log-spread of the repeats, description) of a dense conv's forward + backward."""
    n, c, hw = GPU_CONV if device.type == "cuda" else (16, 64, 32)
    x = torch.randn(n, c, hw, hw, device=device, requires_grad=True)
    w = torch.randn(c, c, 3, 3, device=device, requires_grad=True)

    def step() -> None:
        y = F.conv2d(x, w, padding=1)
        y.backward(torch.ones_like(y))

    times = _repeat(step, seconds, device=device)
    fwd = opcost.conv_flops(x.shape, w.shape, (n, c, hw, hw), False)
    t = min(times)
    logs = [math.log(v) for v in times]
    sigma = statistics.pstdev(logs) if len(logs) > 1 else 0.0
    what = (
        f"conv2d 3x3 {c}->{c} on {n}x{c}x{hw}x{hw}, forward+backward = {3 * fwd / 1e9:.2f} GFLOP, "
        f"fastest of {len(times)}"
    )
    return 3 * fwd / t, sigma, what


def stream_bytes_per_s(seconds: float, device: torch.device = CPU) -> tuple[float, str]:
    """Bytes/s of ``y = x * 2`` on tensors far past the caches (read x, write y): 64 MiB, 1 GiB on a GPU."""
    n = GPU_STREAM_VALUES if device.type == "cuda" else 16 * 1024 * 1024
    x, y = torch.ones(n, device=device), torch.empty(n, device=device)
    times = _repeat(lambda: torch.mul(x, 2.0, out=y), seconds, device=device)
    nbytes = 2 * 4 * n
    return nbytes / min(times), f"torch.mul(x, 2, out=y) on {4 * n >> 20} MiB fp32, fastest of {len(times)}"


def _tiny_net() -> torch.nn.Module:
    layers: list[torch.nn.Module] = []
    for _ in range(8):
        layers += [torch.nn.Linear(4, 4), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(4, 2))


def op_overhead_s(seconds: float, device: torch.device = CPU) -> tuple[float, str]:
    """Seconds per dispatched op of a training step whose arithmetic is negligible: SGD steps (momentum and
    weight decay, as the scenarios train) of a 17-layer network of 4-wide layers at batch 2, so module calls,
    autograd and the optimizer's per-parameter loop are in the figure; divided by the ATen ops its step
    dispatches (counted by the same tracer the cost model uses)."""
    opts = opcost.StepOptions(0.9, True, False)
    n_ops = opcost.trace_module_step(_tiny_net, (4,), 2, opts).n_ops
    seed_torch(0)
    net = _tiny_net().to(device)
    # foreach=False: the per-parameter loop the tracer counts (a GPU's default, foreach, fuses it)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4, foreach=False)
    x, y = torch.randn(2, 4, device=device), torch.tensor([0, 1], device=device)
    steps = 20

    def loop() -> None:
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(net(x), y).backward()
            opt.step()

    times = _repeat(loop, seconds, device=device)
    what = (
        f"SGD steps of a 17-layer 4-wide network at batch 2 ({n_ops} ATen ops per step, arithmetic negligible), "
        f"fastest of {len(times)} x {steps} steps"
    )
    return min(times) / steps / n_ops, what


aten = torch.ops.aten


def _loop_seconds(fn: Callable[[], object], seconds: float, inner: int, device: torch.device = CPU) -> float:
    """Fastest per-call time of ``fn`` over repeated loops of ``inner`` calls (the uncontended cost)."""
    times = _repeat(lambda: [fn() for _ in range(inner)], seconds, device=device)
    return min(times) / inner


def _kernel_calls(n: int, c: int, hw: int, device: torch.device = CPU) -> dict[str, Callable[[], object]]:
    """One call of each priced operator kind on ``n x c x hw x hw`` activations (3x3 conv c -> c)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, c, hw, hw, generator=g).to(device)
    w = torch.randn(c, c, 3, 3, generator=g).to(device)
    wd = torch.randn(c, 1, 3, 3, generator=g).to(device)  # depthwise: groups = c
    b = torch.randn(c, generator=g).to(device)
    y = aten.convolution(x, w, b, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    gy = torch.randn_like(y)
    bn_out, mean, invstd = aten.native_batch_norm(x, b, b, None, None, True, 0.1, 1e-5)
    pooled, idx = aten.max_pool2d_with_indices(x, [2, 2], [2, 2])
    a, m = torch.randn(n * 4, c, generator=g).to(device), torch.randn(c, c, generator=g).to(device)
    return {
        "convolution": lambda: aten.convolution(x, w, b, [1, 1], [1, 1], [1, 1], False, [0, 0], 1),
        "convolution_backward": lambda: aten.convolution_backward(
            gy, x, w, [c], [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, True, True]
        ),
        "convolution_grouped": lambda: aten.convolution(x, wd, b, [1, 1], [1, 1], [1, 1], False, [0, 0], c),
        "convolution_backward_grouped": lambda: aten.convolution_backward(
            gy, x, wd, [c], [1, 1], [1, 1], [1, 1], False, [0, 0], c, [True, True, True]
        ),
        "native_batch_norm": lambda: aten.native_batch_norm(x, b, b, None, None, True, 0.1, 1e-5),
        "native_batch_norm_backward": lambda: aten.native_batch_norm_backward(
            gy, x, b, None, None, mean, invstd, True, 1e-5, [True, True, True]
        ),
        "max_pool2d_with_indices": lambda: aten.max_pool2d_with_indices(x, [2, 2], [2, 2]),
        "max_pool2d_with_indices_backward": lambda: aten.max_pool2d_with_indices_backward(
            pooled, x, [2, 2], [2, 2], [0, 0], [1, 1], False, idx
        ),
        "addmm": lambda: aten.addmm(b, a, m),
        "mm": lambda: aten.mm(a, m),
        "add_": lambda: x.add_(bn_out, alpha=0.0),  # the generic element-wise reference
    }


# Kinds priced by their own measured time-vs-size curve instead of the generic roofline: on CPUs a
# convolution sets up a oneDNN primitive on every call and reaches the dense-conv peak only when large, a
# depthwise (grouped) one stays far below it at any size, and batch norm and pooling are limited by their loop
# structure, not by FLOPs or bandwidth.
CURVE_SIZES = {  # kind -> (batch, channels, side) of the calls timed for its curve (3x3 convolutions C -> C)
    "convolution": ((2, 2, 4), (10, 16, 8), (10, 32, 16), (16, 64, 32)),
    "convolution_backward": ((2, 2, 4), (10, 16, 8), (10, 32, 16), (16, 64, 32)),
    "convolution_grouped": ((2, 2, 4), (10, 16, 8), (10, 32, 16), (16, 64, 32)),
    "convolution_backward_grouped": ((2, 2, 4), (10, 16, 8), (10, 32, 16), (16, 64, 32)),
    "native_batch_norm": ((2, 2, 4), (10, 32, 16)),
    "native_batch_norm_backward": ((2, 2, 4), (10, 32, 16)),
    "max_pool2d_with_indices": ((2, 2, 4), (10, 32, 16)),
    "max_pool2d_with_indices_backward": ((2, 2, 4), (10, 32, 16)),
    "addmm": ((2, 2, 4), (10, 32, 16)),
    "mm": ((2, 2, 4), (10, 32, 16)),
}


def _counted_flops(fn: Callable[[], object]) -> float:
    rec = opcost.OpRecorder()
    with rec:
        fn()
    return float(sum(rec.flops))


def kernel_costs(seconds: float, device: torch.device = CPU) -> tuple[dict[str, dict], str]:
    """Per kind, a curve of (counted FLOPs of a call, FLOP/s achieved by that call) over the sizes in
    ``CURVE_SIZES``; a call's time is taken net of a generic element-wise op's (which every op pays as
    ``compute.op_overhead_us`` already), so a tiny call's point carries the kind's fixed cost."""
    sizes = sorted({z for zs in CURVE_SIZES.values() for z in zs})
    calls = {z: _kernel_calls(*z, device=device) for z in sizes}
    share = seconds / (1 + sum(len(zs) for zs in CURVE_SIZES.values()))
    generic = _loop_seconds(calls[sizes[0]]["add_"], share, 200, device)
    out: dict[str, dict] = {}
    for kind, zs in CURVE_SIZES.items():
        curve = []
        for z in zs:
            fn = calls[z][kind]
            flops = _counted_flops(fn)
            t = _loop_seconds(fn, share, 200 if z == sizes[0] else 1, device) - generic
            curve.append([float(f"{flops:.4g}"), float(f"{flops / max(t, 1e-7):.4g}")])
        out[kind] = {"flops_curve": curve}
    shapes = "; ".join(f"{k}: " + ", ".join(f"{n}x{c}x{h}x{h}" for n, c, h in zs) for k, zs in CURVE_SIZES.items())
    what = (
        "compute.kernels: each kind called directly on activations of these shapes (3x3 convolutions C -> C, "
        "dense or depthwise (grouped), "
        f"2x2 pooling, matmuls on (4N x C) @ (C x C)), fastest loop; FLOP/s = counted FLOPs / (time - "
        f"an element-wise add_'s time, {generic * 1e6:.2f} us): {shapes}"
    )
    return out, what


def training_step_check(
    family: str,
    batch: int,
    seconds: float,
    rates: tuple[float, float, float],
    kernels: dict[str, dict],
    device: torch.device = CPU,
) -> tuple[str, float]:
    """A real SGD step of ``family`` timed here, next to the roofline price from the measured rates: (the note,
    the measured seconds)."""
    from iotfl_sim.fl.recipe import ModelRecipe
    from iotfl_sim.fl.submodel import SubmodelSpec

    c, h, w = FAMILY_SHAPES[family]
    recipe, spec = ModelRecipe(family, opcost.MEASURED_CLASSES, c, (h, w)), SubmodelSpec(1.0)
    model = recipe.build(spec).to(device)
    model.train()
    momentum = opcost.MEASURED_OPTIONS_MOMENTUM
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=momentum, foreach=False)  # the loop the tracer counts
    x = torch.randn(batch, c, h, w, device=device)
    y = torch.randint(0, opcost.MEASURED_CLASSES, (batch,), device=device)

    def step() -> None:
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    times = _repeat(step, seconds, device=device)
    measured = min(times)
    from iotfl_sim.scenario.profile import KernelCost

    table = tuple((k, 0.0, KernelCost(**v).points()) for k, v in sorted(kernels.items()))
    predicted = opcost.step_time(recipe, spec, batch, *rates, kernels=table)
    return (
        f"check: one {family} training step at batch {batch} ({c}x{h}x{w}) measured {measured * 1e3:.2f} ms "
        f"(fastest of {len(times)}), roofline with these numbers predicts {predicted * 1e3:.2f} ms "
        f"({predicted / measured:.2f}x); compute.measured_steps records it, so the cost model prices {family} at "
        f"{c}x{h}x{w} {measured / predicted:.2f}x the roofline"
    ), measured


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)} (host: {_cpu_name()})"
    return _cpu_name()


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_mb(device: torch.device = CPU) -> tuple[float, float]:
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        return total / 2**20, free / 2**20
    try:
        info = {}
        with open("/proc/meminfo") as f:
            for line in f:
                k, v = line.split(":", 1)
                info[k] = float(v.split()[0]) / 1024.0
        return info["MemTotal"], info.get("MemAvailable", info["MemFree"])
    except (OSError, KeyError, ValueError):
        return 1024.0, 512.0


@dataclass
class Measured:
    flops: float
    mem_bw: float
    overhead_s: float
    sigma: float
    notes: list[str]
    kernels: dict[str, dict] = field(default_factory=dict)
    device: torch.device = CPU
    steps: list[dict] = field(default_factory=list)  # compute.measured_steps


def measure(
    seconds: float = 10.0, family: str | None = None, batch: int = 32, device: torch.device | str = "cpu"
) -> Measured:
    """Run the micro-benchmarks within about ``seconds`` (the training check takes a share when asked)."""
    device = torch.device(device)
    share = seconds / (5.0 if family else 4.0)
    flops, sigma, what_f = conv_flops_per_s(share, device)
    bw, what_b = stream_bytes_per_s(share, device)
    ov, what_o = op_overhead_s(share, device)
    kernels, what_k = kernel_costs(share, device)
    notes = [
        f"compute.flops: {what_f}",
        f"compute.mem_bw_gbs: {what_b}",
        f"compute.op_overhead_us: {what_o}",
        what_k,
        f"compute.jitter.sigma: std of log(time) over the conv repeats ({sigma:.3f})",
    ]
    steps = []
    if family:
        note, seconds = training_step_check(family, batch, share, (flops, bw, ov), kernels, device)
        notes.append(note)
        steps.append({"family": family, "input": list(FAMILY_SHAPES[family]), "batch": batch, "seconds": float(f"{seconds:.4g}")})
    return Measured(flops, bw, ov, sigma, notes, kernels, device, steps)


def profile_dict(m: Measured, name: str, device_class: str, idle_w: float | None, train_w: float | None) -> dict:
    """A DeviceProfile (as plain data) from the measurements, with ``sources`` saying how each was taken."""
    total, avail = _memory_mb(m.device)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    where = (
        f"measured by `iotfl-sim profiles measure` on {platform.node() or 'this machine'} ({_device_name(m.device)}, "
        f"{torch.get_num_threads()} torch threads, torch {torch.__version__}, {platform.system()} "
        f"{platform.machine()}) at {stamp}"
    )
    trains_on = "GPU training (fp32, CUDA)" if m.device.type == "cuda" else f"{torch.get_num_threads()} threads, CPU training"
    return {
        "name": name,
        "description": f"{_device_name(m.device)}, {trains_on} in PyTorch (measured)",
        "device_class": device_class,
        "compute": {
            "flops": float(f"{m.flops:.4g}"),
            "mem_bw_gbs": float(f"{m.mem_bw / 1e9:.4g}"),
            "op_overhead_us": float(f"{m.overhead_s * 1e6:.4g}"),
            **({"kernels": m.kernels} if m.kernels else {}),
            **({"measured_steps": m.steps} if m.steps else {}),
            "jitter": {"dist": "lognormal", "sigma": float(f"{max(m.sigma, 0.01):.3g}")},
        },
        "memory": {"total_mb": round(total, 1), "free_mb": round(max(avail, 1.0), 1), "sigma_mb": 0.0},
        "power": {
            "idle_w": 0.0 if idle_w is None else idle_w,
            "train_w": 0.0 if train_w is None else train_w,
            "tx_w": 0.0,
            "rx_w": 0.0,
        },
        "link": {"radio": "ethernet", "down_mbps": 100.0, "up_mbps": 100.0, "rtt_ms": 1.0},
        "sources": [
            where,
            *m.notes,
            "memory: " + ("torch.cuda.mem_get_info (the GPU's total and free memory)" if m.device.type == "cuda"
                          else "/proc/meminfo MemTotal and MemAvailable") + " at measurement time",
            "power: " + ("given on the command line" if train_w is not None else
                         "NOT MEASURED (0 W): set power.* (e.g. from a USB power meter) before reading energy figures"),
            "link: placeholder (100 Mb/s Ethernet, 1 ms), not measured: set it to the deployment's network",
        ],
    }


def default_name() -> str:
    node = (platform.node() or "host").split(".")[0].lower()
    return "".join(ch if ch.isalnum() else "_" for ch in node) or "host"
