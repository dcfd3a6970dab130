"""Per-operator cost of one training step: a roofline with a dispatch overhead, traced once per spec.

One SGD-with-momentum training step (forward, cross-entropy, backward, optimizer update) of the real
submodel runs on the meta device under a ``TorchDispatchMode`` that records, for every non-view ATen
operator, its FLOPs and the bytes of the tensors it reads and writes. A device then prices the step as

    step_time = sum_i max(flops_i / F_i, bytes_i / B) + n_ops * overhead + sum_i extra_i

with F (FLOP/s), B (bytes/s) and the per-op overhead from its profile. A profile may list per-kind
kernel costs (``compute.kernels``, measured by ``profiles measure``): for those ATen ops F_i is the
kind's own achieved FLOP/s and extra_i its fixed cost beyond a generic op's (a oneDNN convolution sets
up a primitive on every call; pooling and batch norm run far below the dense-conv rate on CPUs);
every other op has F_i = F and extra_i = 0. The trace is independent of any
profile, so pricing a step for another device is a numpy reduction, memoised per (spec, batch, rates).

FLOPs count 2 per multiply-accumulate for matmuls and convolutions, with our own formulas so that
grouped and depthwise convolutions are right in the backward pass as well (torch 2.13's
FlopCounterMode counts a depthwise weight gradient ``groups`` times over); every other op is charged
one FLOP per output element, a nominal count that only matters where a device computes slower than it
moves memory. Bytes are a lower bound on memory traffic: each distinct input and output tensor once.

Every op's FLOPs and bytes are affine in the batch size, so a spec is traced at two small batch sizes
and any batch (a full one or the last, partial one) is priced exactly from the two traces.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from iotfl_sim.fl import disk_cache
from iotfl_sim.fl.cost.meta_memo import meta_call
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec

# Per-kind kernel costs: (ATen op name, extra seconds per call, ((FLOPs of a call, FLOP/s), ...) sorted, or
# () for the device's rate), as ``scenario.profile.Rates.kernels`` holds them (fl does not import scenario).
KernelRates = tuple[tuple[str, float, tuple[tuple[float, float], ...]], ...]
# Real training steps timed on the machine (``compute.measured_steps``): (family, (channels, height, width),
# batch, seconds). A model of that family and input shape is priced by the roofline times measured / roofline of
# the timed step, so the full-width step costs exactly what was measured and its sub-networks keep the roofline's
# ratios; the per-kind curves cannot see every shape a family uses (benchmarks/gpu_server.md).
MeasuredSteps = tuple[tuple[str, tuple[int, ...], int, float], ...]
MEASURED_CLASSES = 10  # the timed step's classifier (fl.cost.measure.training_step_check)
MEASURED_OPTIONS_MOMENTUM = 0.9

aten = torch.ops.aten

# A grouped convolution (depthwise, as MobileNets use) is its own kind, ``convolution_grouped`` and
# ``convolution_backward_grouped``: on CPUs it runs several times below a dense convolution of the same FLOPs
# (oneDNN's depthwise backward under 2 GFLOP/s where a dense one reaches 40), so a dense curve underprices it.
# A profile measured before these kinds existed prices them by the dense kind's entry (``base_kind``).
GROUPED = "_grouped"
_GROUPS_ARG = {aten.convolution: 8, aten._convolution: 8, aten.convolution_backward: 9}  # where `groups` sits


def base_kind(name: str) -> str:
    """The kind a profile's entry is looked up under when it has none for ``name`` itself."""
    return name.removesuffix(GROUPED)


# Metadata-only or allocation-only ops: no arithmetic, no traffic worth pricing.
_FREE = {
    aten.detach.default,
    aten.empty.memory_format,
    aten.empty_like.default,
    aten.empty_strided.default,
    aten.new_empty.default,
    aten.new_empty_strided.default,
    aten.lift_fresh.default,
    aten._local_scalar_dense.default,
    aten.sym_size.int,
    aten.sym_stride.int,
    aten.sym_numel.default,
}

# The two batch sizes a spec is traced at (BatchNorm refuses one sample in training mode).
_TRACE_BATCHES = (2, 4)


def _numel(shape: Sequence[int]) -> int:
    return int(math.prod(shape))


def conv_flops(x_shape: Sequence[int], w_shape: Sequence[int], out_shape: Sequence[int], transposed: bool) -> int:
    """Forward FLOPs of a (grouped, strided, any-rank) convolution: 2 per multiply-accumulate.

    The weight is ``[C_out, C_in / groups, *k]`` (``[C_in, C_out / groups, *k]`` when transposed), so
    ``w_shape[1:]`` is exactly the multiply-accumulates per output (per input, transposed) element.
    """
    per_elem = _numel(w_shape[1:])
    return 2 * (_numel(x_shape) if transposed else _numel(out_shape)) * per_elem


def _mm_flops(a: Sequence[int], b: Sequence[int]) -> int:
    return 2 * _numel(a[:-1]) * a[-1] * b[-1]


def op_flops(func: Any, args: tuple, out: Any) -> int:
    """FLOPs of one ATen call (see the module docstring for the rules)."""
    packet = func.overloadpacket
    if packet in (aten.mm, aten.bmm):
        return _mm_flops(args[0].shape, args[1].shape)
    if packet is aten.addmm or packet is aten.baddbmm:
        return _mm_flops(args[1].shape, args[2].shape)
    if packet in (aten.convolution, aten._convolution):
        return conv_flops(args[0].shape, args[1].shape, out.shape, bool(args[6]))
    if packet is aten.convolution_backward:
        grad_out, x, w = args[0], args[1], args[2]
        transposed, mask = bool(args[7]), args[10]
        fwd = conv_flops(x.shape, w.shape, grad_out.shape, transposed)
        # grad_input and grad_weight each cost one forward; grad_bias is a reduction of grad_out.
        return fwd * (int(mask[0]) + int(mask[1])) + (_numel(grad_out.shape) if mask[2] else 0)
    return sum(t.numel() for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor))


def op_bytes(args: tuple, kwargs: dict, out: Any) -> int:
    """Bytes of the distinct tensors an op reads and writes (an in-place op's tensor counts twice)."""
    def distinct(xs: list[Any]) -> list[torch.Tensor]:
        seen: dict[int, torch.Tensor] = {}
        for t in xs:
            if isinstance(t, torch.Tensor):
                seen.setdefault(id(t), t)
        return list(seen.values())

    ins = distinct(tree_flatten((args, kwargs))[0])
    outs = distinct(tree_flatten(out)[0])
    return sum(t.numel() * t.element_size() for t in ins + outs)


def kind_of(func: Any, args: tuple) -> str:
    """The kind an ATen call is priced as: its op name, ``_grouped`` added for a grouped convolution."""
    packet = func.overloadpacket
    name = str(packet.__name__)
    at = _GROUPS_ARG.get(packet)
    if at is not None and len(args) > at and int(args[at]) > 1:
        return name + GROUPED
    return name


class OpRecorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []
        self.flops: list[int] = []
        self.bytes: list[int] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        out = meta_call(func, args, kwargs)
        if func.is_view or func in _FREE:
            return out
        self.names.append(kind_of(func, args))
        self.flops.append(op_flops(func, args, out))
        self.bytes.append(op_bytes(args, kwargs, out))
        return out


def _loss(out: Any, y: torch.Tensor) -> torch.Tensor:
    outs = out if isinstance(out, (list, tuple)) else [out]
    return sum(F.cross_entropy(o, y) for o in outs)


@dataclass(frozen=True)
class StepTrace:
    """Per-op FLOPs and bytes of one training step at one batch size."""

    batch: int
    names: tuple[str, ...]
    flops: np.ndarray
    bytes: np.ndarray

    @property
    def n_ops(self) -> int:
        return len(self.names)

    @cached_property
    def total_flops(self) -> float:  # cached: every task's FLOPs count asks for it (a frozen instance: one sum)
        return float(self.flops.sum())

    def time(self, flops_per_s: float, bytes_per_s: float, overhead_s: float, kernels: KernelRates = ()) -> float:
        """Roofline time of the step: sum over ops of max(compute, memory) plus the per-op overhead.

        ``kernels`` overrides, per ATen op kind, the FLOP/s (when non-zero) and adds a fixed cost per call.
        """
        if not kernels:
            return float(np.maximum(self.flops / flops_per_s, self.bytes / bytes_per_s).sum() + self.n_ops * overhead_s)
        return float(self.op_times(flops_per_s, bytes_per_s, overhead_s, kernels).sum())

    def op_times(
        self, flops_per_s: float, bytes_per_s: float, overhead_s: float, kernels: KernelRates = ()
    ) -> np.ndarray:
        """Each op's roofline seconds (``time`` is their sum), for breaking a step's price down by kind."""
        extra, _ = _kernel_arrays(self.names, kernels)
        rate = self._rates(flops_per_s, kernels)
        return np.maximum(self.flops / rate, self.bytes / bytes_per_s) + overhead_s + extra

    def parts(self, flops_per_s: float, bytes_per_s: float, overhead_s: float, kernels: KernelRates = ()) -> StepParts:
        """The step's roofline seconds split by what bounds each op (``StepParts``); the parts sum to ``time``."""
        extra, _ = _kernel_arrays(self.names, kernels)
        compute = self.flops / self._rates(flops_per_s, kernels)
        memory = self.bytes / bytes_per_s
        bound = compute >= memory  # a tie counts as compute-bound
        return StepParts(
            float(compute[bound].sum()), float(memory[~bound].sum()), float(self.n_ops * overhead_s + extra.sum())
        )

    def _rates(self, flops_per_s: float, kernels: KernelRates) -> np.ndarray:
        """Each op's FLOP/s: the device's, or its kind's own rate curve from ``kernels``."""
        _, curves = _kernel_arrays(self.names, kernels)
        rate = np.full(len(self.names), float(flops_per_s))
        for idx, pts in curves:
            f = np.log(np.maximum(self.flops[idx], 1.0))
            rate[idx] = np.exp(np.interp(f, np.log([p[0] for p in pts]), np.log([p[1] for p in pts])))
        return rate


@dataclass(frozen=True)
class StepParts:
    """Seconds of training split by what bounds them, as the roofline prices each op (``StepTrace.parts``).

    ``compute_s``: the ops whose FLOPs take at least as long as their bytes (sum of FLOPs / FLOP/s over them);
    ``memory_s``: the other ops (sum of bytes / bytes/s); ``overhead_s``: per-op dispatch and per-kind fixed costs.
    Training power that depends on the work (``fl.cost.energy``) weighs its levels by these times.
    """

    compute_s: float
    memory_s: float
    overhead_s: float

    @property
    def total_s(self) -> float:
        return self.compute_s + self.memory_s + self.overhead_s

    def __add__(self, other: StepParts) -> StepParts:
        return StepParts(self.compute_s + other.compute_s, self.memory_s + other.memory_s, self.overhead_s + other.overhead_s)

    def scaled(self, k: float) -> StepParts:
        return StepParts(self.compute_s * k, self.memory_s * k, self.overhead_s * k)

    def __rmul__(self, k: float) -> StepParts:  # k x parts, as k x seconds: what ``_over_batches`` writes
        return self.scaled(k)


@lru_cache(maxsize=1024)
def _kernel_arrays(names: tuple[str, ...], kernels: KernelRates) -> tuple[np.ndarray, list[tuple[np.ndarray, tuple]]]:
    """Per-op extra seconds, and (op positions, rate curve) per kind with its own rate, for an op sequence."""
    table = {name: (extra, pts) for name, extra, pts in kernels}
    names = tuple(n if n in table else base_kind(n) for n in names)
    extra = np.array([table[n][0] if n in table else 0.0 for n in names], np.float64)
    curves = []
    for name, (_, pts) in table.items():
        idx = np.array([i for i, n in enumerate(names) if n == name], np.int64)
        if pts and len(idx):
            curves.append((idx, pts))
    return extra, curves


TRACE_CALLS = {"n": 0}  # how many real traces ran (tests check the cache with it)


@dataclass(frozen=True)
class StepOptions:
    """The parts of a training step that add operators: SGD momentum, weight decay, gradient clipping, and an L2
    pull of every parameter towards a reference (FedX's regularised fine-tuning, ``fl.server_train.l2_pull``)."""

    momentum: float = 0.9
    weight_decay: bool = False
    clip_grad_norm: bool = False
    l2_pull: bool = False


def trace_module_step(
    build: Callable[[], nn.Module], input_shape: Sequence[int], batch: int, options: StepOptions = StepOptions()
) -> StepTrace:
    """Trace one steady-state SGD step (momentum buffers already exist) of the module ``build()``
    makes on the meta device, at ``batch`` inputs of ``input_shape`` (channels, height, width)."""
    TRACE_CALLS["n"] += 1
    with torch.device("meta"):
        model = build()
    model.train()
    wd = 1e-4 if options.weight_decay else 0.0
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=options.momentum, weight_decay=wd, foreach=False)
    x = torch.zeros(batch, *input_shape, device="meta")
    y = torch.zeros(batch, dtype=torch.long, device="meta")
    refs = [torch.zeros_like(p) for p in model.parameters()] if options.l2_pull else []

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss = _loss(model(x), y)
        if refs:
            loss = loss + 0.5 * sum(((p - r) ** 2).sum() for p, r in zip(model.parameters(), refs, strict=True))
        loss.backward()
        if options.clip_grad_norm:
            nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=False)
        opt.step()

    if options.momentum:  # steady state without a warm-up step: what a first step would have created
        for p in model.parameters():
            opt.state[p]["momentum_buffer"] = torch.zeros_like(p)
    rec = OpRecorder()
    with rec:
        step()
    return StepTrace(batch, tuple(rec.names), np.asarray(rec.flops, np.float64), np.asarray(rec.bytes, np.float64))


def trace_module_forward(build: Callable[[], nn.Module], input_shape: Sequence[int], batch: int) -> StepTrace:
    """Trace one inference pass (eval mode, no autograd) of the module ``build()`` makes on the meta device."""
    TRACE_CALLS["n"] += 1
    with torch.device("meta"):
        model = build()
    model.eval()
    x = torch.zeros(batch, *input_shape, device="meta")
    rec = OpRecorder()
    with torch.no_grad(), rec:
        model(x)
    return StepTrace(batch, tuple(rec.names), np.asarray(rec.flops, np.float64), np.asarray(rec.bytes, np.float64))


def trace_step_uncached(
    recipe: ModelRecipe, spec: SubmodelSpec, batch: int, options: StepOptions = StepOptions(), forward_only: bool = False
) -> StepTrace:
    """Trace one training step (or, ``forward_only``, one inference pass) of ``recipe.build(spec)`` at ``batch``
    samples (no cache)."""
    shape = (recipe.in_channels, *recipe.image_size)
    if forward_only:
        return trace_module_forward(lambda: recipe.build(spec), shape, batch)
    return trace_module_step(lambda: recipe.build(spec), shape, batch, options)


@dataclass(frozen=True)
class AffineTrace:
    """Per-op FLOPs and bytes as ``base + slope x batch``, from two traces of the same op sequence."""

    names: tuple[str, ...]
    flops0: np.ndarray
    flops1: np.ndarray
    bytes0: np.ndarray
    bytes1: np.ndarray

    FIELDS = ("flops0", "flops1", "bytes0", "bytes1")

    def arrays(self) -> dict[str, np.ndarray]:
        return {f: getattr(self, f) for f in self.FIELDS}

    def at(self, batch: int) -> StepTrace:
        return StepTrace(batch, self.names, self.flops0 + self.flops1 * batch, self.bytes0 + self.bytes1 * batch)


@lru_cache(maxsize=256)
def affine_trace(
    recipe: ModelRecipe, spec: SubmodelSpec, options: StepOptions = StepOptions(), forward_only: bool = False
) -> AffineTrace:
    """The cached, profile-independent op table of ``spec`` (two traces, once per (recipe, spec, options, mode)
    on this machine: kept on disk by ``fl.disk_cache`` for the next process)."""
    name = disk_cache.key("affine_trace", recipe, spec, options, forward_only, _TRACE_BATCHES)
    kept = disk_cache.load("traces", name, _valid_table)
    if kept is not None:
        return AffineTrace(tuple(str(n) for n in kept.pop("names")), **kept)
    b0, b1 = _TRACE_BATCHES
    t0 = trace_step_uncached(recipe, spec, b0, options, forward_only)
    t1 = trace_step_uncached(recipe, spec, b1, options, forward_only)
    if t0.names != t1.names:  # a batch-dependent op sequence: not expected for the built-in families
        raise RuntimeError(f"{recipe.family}: the op sequence depends on the batch size; cannot price it affinely")
    slope_f = (t1.flops - t0.flops) / (b1 - b0)
    slope_b = (t1.bytes - t0.bytes) / (b1 - b0)
    table = AffineTrace(t0.names, t0.flops - slope_f * b0, slope_f, t0.bytes - slope_b * b0, slope_b)
    disk_cache.store("traces", name, {"names": np.array(table.names, dtype=np.str_), **table.arrays()})
    return table


def _valid_table(arrays: disk_cache.Arrays) -> bool:
    fields = {"names": ("U", 1), **{f: ("f", 1) for f in AffineTrace.FIELDS}}
    return disk_cache.has(arrays, fields) and len({len(a) for a in arrays.values()}) == 1


@lru_cache(maxsize=4096)
def step_trace(recipe: ModelRecipe, spec: SubmodelSpec, batch: int, options: StepOptions = StepOptions()) -> StepTrace:
    """One training step of ``spec`` at ``batch`` samples (cached)."""
    return affine_trace(recipe, spec, options).at(batch)


@lru_cache(maxsize=65536)
def step_time(
    recipe: ModelRecipe,
    spec: SubmodelSpec,
    batch: int,
    flops_per_s: float,
    bytes_per_s: float,
    overhead_s: float,
    options: StepOptions = StepOptions(),
    kernels: KernelRates = (),
    steps: MeasuredSteps = (),
) -> float:
    """Roofline seconds of one training step (memoised per spec, batch, rates and options)."""
    t = step_trace(recipe, spec, batch, options).time(flops_per_s, bytes_per_s, overhead_s, kernels)
    return t * measured_scale(recipe, flops_per_s, bytes_per_s, overhead_s, kernels, steps)


@lru_cache(maxsize=1024)
def measured_scale(
    recipe: ModelRecipe,
    flops_per_s: float,
    bytes_per_s: float,
    overhead_s: float,
    kernels: KernelRates = (),
    steps: MeasuredSteps = (),
) -> float:
    """measured / roofline seconds of the timed step of ``recipe``'s family and input shape; 1 without one."""
    shape = (recipe.in_channels, *recipe.image_size)
    for family, inp, batch, seconds in steps:
        if family == recipe.family and tuple(inp) == shape:
            timed = ModelRecipe(family, MEASURED_CLASSES, shape[0], tuple(shape[1:]))
            opts = StepOptions(MEASURED_OPTIONS_MOMENTUM, False, False)
            priced = step_trace(timed, SubmodelSpec(1.0), batch, opts).time(flops_per_s, bytes_per_s, overhead_s, kernels)
            return seconds / priced
    return 1.0


def steps_of(samples: int, batch: int) -> tuple[int, int]:
    """(full batches, size of the last partial batch) of one epoch, as ``fl.train.train_local`` runs it.

    A final batch of one sample is skipped there (BatchNorm cannot train on it), so it is not priced.
    """
    full, rest = divmod(int(samples), int(batch))
    if rest == 1 and samples > 1:
        rest = 0
    return full, rest


def _over_batches(price: Callable[[int], Any], samples: int, epochs: int, batch: int, zero: Any) -> Any:
    """``epochs`` x (full batches x ``price(batch)`` + ``price`` of the last partial batch), batches as
    ``steps_of`` cuts them: the one rule by which training seconds, their ``StepParts`` and FLOPs add up over a
    local round (a float or ``StepParts``, ``zero`` of the same type; the same operations in the same order
    either way, so each total keeps its bits)."""
    full, rest = steps_of(samples, batch)
    total = full * price(batch) if full else zero
    if rest:
        total = total + price(rest)
    return epochs * total


def train_seconds(
    recipe: ModelRecipe,
    spec: SubmodelSpec,
    samples: int,
    epochs: int,
    batch: int,
    flops_per_s: float,
    bytes_per_s: float,
    overhead_s: float,
    options: StepOptions = StepOptions(),
    kernels: KernelRates = (),
    steps: MeasuredSteps = (),
) -> float:
    """Roofline training time of ``epochs`` passes over ``samples`` samples at ``batch`` per step."""
    rates = (flops_per_s, bytes_per_s, overhead_s, options, kernels, steps)
    return _over_batches(lambda b: step_time(recipe, spec, b, *rates), samples, epochs, batch, 0.0)


# The roofline rates of one device, as ``fleet.Fleet.roofline`` gives them: (FLOP/s, bytes/s, seconds per op,
# per-kind kernel costs, measured steps); None prices training by the FLOPs-only rule.
Roofline = tuple[float, float, float, KernelRates, MeasuredSteps]


def device_train_seconds(
    recipe: ModelRecipe,
    spec: SubmodelSpec,
    samples: int,
    epochs: int,
    batch: int,
    flops_per_s: float,
    roofline: Roofline | None,
    options: StepOptions = StepOptions(),
) -> float:
    """Seconds of a device's local training before jitter, as the engine prices it (``sim.training_time``) and
    ``profiles check`` predicts it: the per-operator roofline when the device has rates for it, else the old rule,
    3 x forward FLOPs / FLOP/s."""
    if roofline is None:
        return float(recipe.cost(spec).train_flops(samples * epochs) / flops_per_s)
    flops_s, bw, overhead, kernels, steps = roofline
    return train_seconds(recipe, spec, samples, epochs, batch, flops_s, bw, overhead, options, kernels, steps)


@lru_cache(maxsize=65536)
def step_parts(
    recipe: ModelRecipe,
    spec: SubmodelSpec,
    batch: int,
    flops_per_s: float,
    bytes_per_s: float,
    overhead_s: float,
    options: StepOptions = StepOptions(),
    kernels: KernelRates = (),
    steps: MeasuredSteps = (),
) -> StepParts:
    """``step_time`` split by what bounds each op; a measured step's scale applies to every part alike.

    Not folded into ``step_time`` (as ``step_parts(...).total_s``): ``StepTrace.time`` sums max(compute, memory)
    over all ops in one reduction and then adds the overhead, where the parts sum the compute-bound and
    memory-bound subsets apart; the totals agree to rounding but not bit for bit, and every training time (the
    golden digests) is priced by ``step_time``."""
    parts = step_trace(recipe, spec, batch, options).parts(flops_per_s, bytes_per_s, overhead_s, kernels)
    return parts.scaled(measured_scale(recipe, flops_per_s, bytes_per_s, overhead_s, kernels, steps))


def device_train_parts(
    recipe: ModelRecipe,
    spec: SubmodelSpec,
    samples: int,
    epochs: int,
    batch: int,
    flops_per_s: float,
    roofline: Roofline | None,
    options: StepOptions = StepOptions(),
) -> StepParts:
    """``device_train_seconds`` split by what bounds the time (``StepParts``): batch by batch as ``train_seconds``
    prices them. The FLOPs-only rule (no roofline) knows only arithmetic, so all of its time is compute-bound."""
    if roofline is None:
        return StepParts(device_train_seconds(recipe, spec, samples, epochs, batch, flops_per_s, None, options), 0.0, 0.0)
    flops_s, bw, overhead, kernels, steps = roofline
    rates = (flops_s, bw, overhead, options, kernels, steps)
    return _over_batches(lambda b: step_parts(recipe, spec, b, *rates), samples, epochs, batch, StepParts(0.0, 0.0, 0.0))


def train_flops(
    recipe: ModelRecipe, spec: SubmodelSpec, samples: int, epochs: int, batch: int, options: StepOptions = StepOptions()
) -> float:
    """Traced FLOPs of the same training (forward, backward and optimizer of every step)."""
    return _over_batches(lambda b: step_trace(recipe, spec, b, options).total_flops, samples, epochs, batch, 0.0)


def infer_seconds(
    recipe: ModelRecipe,
    spec: SubmodelSpec,
    samples: int,
    batch: int,
    flops_per_s: float,
    bytes_per_s: float,
    overhead_s: float,
    kernels: KernelRates = (),
    steps: MeasuredSteps = (),
) -> float:
    """Roofline time of inference over ``samples`` samples at ``batch`` per pass (the last pass partial); a
    measured training step of the family scales it as it scales training (its forward pass, same kernels)."""
    full, rest = divmod(int(samples), int(batch))
    table = affine_trace(recipe, spec, StepOptions(), True)
    t = full * table.at(batch).time(flops_per_s, bytes_per_s, overhead_s, kernels) if full else 0.0
    if rest:
        t += table.at(rest).time(flops_per_s, bytes_per_s, overhead_s, kernels)
    return t * measured_scale(recipe, flops_per_s, bytes_per_s, overhead_s, kernels, steps)
