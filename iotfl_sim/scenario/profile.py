"""Device profiles: the declared characteristics of one kind of device, with their sources."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from iotfl_sim.scenario.limits import (
    MAX_ENERGY_J,
    MAX_JITTER_SIGMA,
    MAX_LINK_MBPS,
    MAX_MEMORY_MB,
    MAX_OVERHEAD_US,
    MAX_POWER_W,
    MAX_RTT_S,
    MIN_FLOPS,
    MIN_LINK_MBPS,
    MIN_MEM_BW_GBS,
)

DEVICE_CLASSES = ("mcu", "sbc", "edge_gpu", "phone", "server")
RADIOS = ("wifi", "lte", "nbiot", "lorawan", "ble", "ethernet")


class Strict(BaseModel):
    """Base for every config model: unknown keys are errors, fields are validated on assignment, and no
    number anywhere (list and mapping items included) may be NaN or infinite."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


class Jitter(Strict):
    dist: Literal["lognormal", "normal", "exponential", "none"] = Field(
        "lognormal",
        description="multiplicative noise on compute time: lognormal(0, sigma); normal(1, sigma) floored at 0.05; "
        "exponential: an Exp draw of mean 1 (memoryless task times, the textbook asynchronous fleet; sigma unused)",
    )
    sigma: float = Field(0.1, ge=0.0, le=MAX_JITTER_SIGMA, description="spread of the multiplicative noise on compute time (0: none)")


class ActivityPower(Strict):
    """Training power that depends on what the device is doing (``fl.cost.energy.training_power_w``): board power
    while the step is compute-bound, memory-bound, and dispatching operators. Set ``compute_w`` and ``memory_w``
    together, or neither (then training draws the constant ``train_w``)."""

    compute_w: float | None = Field(
        None, gt=0, le=MAX_POWER_W, description="board power while training ops are compute-bound (roofline), W; with memory_w"
    )
    memory_w: float | None = Field(
        None, gt=0, le=MAX_POWER_W, description="board power while training ops are memory-bound (roofline), W; with compute_w"
    )
    overhead_w: float | None = Field(
        None, gt=0, le=MAX_POWER_W, description="board power during per-op dispatch overhead, W (null: memory_w); needs compute_w"
    )

    @model_validator(mode="after")
    def _terms_together(self) -> ActivityPower:
        if (self.compute_w is None) != (self.memory_w is None):
            missing = "memory_w" if self.memory_w is None else "compute_w"
            raise ValueError(f"{missing} is missing: set compute_w and memory_w together, or neither")
        if self.overhead_w is not None and self.compute_w is None:
            raise ValueError("overhead_w needs compute_w and memory_w: set all three, or only train_w")
        return self

    def terms(self) -> tuple[float | None, float | None, float | None]:
        return self.compute_w, self.memory_w, self.overhead_w


class PowerMode(ActivityPower):
    flops: float = Field(ge=MIN_FLOPS, description="sustained training FLOP/s in this mode")
    train_w: float = Field(gt=0, le=MAX_POWER_W, description="board power while training in this mode, W")
    mem_bw_gbs: float | None = Field(None, ge=MIN_MEM_BW_GBS, description="achieved memory bandwidth in this mode, GB/s (null: the profile's)")
    op_overhead_us: float | None = Field(None, ge=0, le=MAX_OVERHEAD_US, description="per-operator dispatch overhead in this mode, us (null: the profile's)")


class KernelCost(Strict):
    """What one kind of operator costs beyond the generic roofline (measured by ``profiles measure``)."""

    overhead_us: float = Field(
        0.0, ge=0, le=MAX_OVERHEAD_US, description="extra fixed cost per call over a generic operator's overhead (e.g. oneDNN primitive setup), us"
    )
    flops: float | None = Field(
        None, ge=MIN_FLOPS, description="achieved FLOP/s of this operator kind, as fl.cost.opcost counts its FLOPs (null: compute.flops)"
    )
    flops_curve: list[tuple[float, float]] | None = Field(
        None,
        min_length=2,
        description="achieved FLOP/s by the call's size: [[FLOPs of the call, FLOP/s], ...], interpolated in log-log "
        "and held flat outside (small convolutions run well below the dense-conv peak); replaces flops",
    )

    @model_validator(mode="after")
    def _curve_points(self) -> KernelCost:
        """Each point a call size above 0 (the curve is interpolated in log-log) at a rate of at least MIN_FLOPS,
        each size once: a negative or zero rate gave NaN seconds."""
        curve = self.flops_curve or []
        for i, (size, rate) in enumerate(curve):
            if not size > 0:
                raise ValueError(f"flops_curve[{i}]: the call's FLOPs {size:g} must be above 0 (log-log interpolation)")
            if rate < MIN_FLOPS:
                raise ValueError(f"flops_curve[{i}]: the rate {rate:g} FLOP/s is below {MIN_FLOPS:g}; give the rate measured")
        sizes = [size for size, _ in curve]
        if len(set(sizes)) != len(sizes):
            raise ValueError("flops_curve: two points at the same call size; give each size once")
        return self

    def points(self) -> tuple[tuple[float, float], ...]:
        """The rate curve as sorted (FLOPs, FLOP/s) points; one point for a flat rate, none for the profile's."""
        if self.flops_curve:
            return tuple(sorted((float(f), float(r)) for f, r in self.flops_curve))
        return ((1.0, float(self.flops)),) if self.flops else ()


# (ATen op name, extra seconds per call, ((FLOPs, FLOP/s), ...) or () for the profile's rate) per kernel
# kind; hashable for memoising
KernelRates = tuple[tuple[str, float, tuple[tuple[float, float], ...]], ...]
# (family, (channels, height, width), batch, seconds) per measured step, as fl.cost.opcost.MeasuredSteps
MeasuredSteps = tuple[tuple[str, tuple[int, ...], int, float], ...]


@dataclass(frozen=True)
class Rates:
    """What the cost model needs of one device in one power mode."""

    flops: float  # FLOP/s
    train_w: float  # W while training
    mem_bw: float | None  # bytes/s; None = no roofline (training FLOPs / FLOP/s, as before)
    op_overhead_s: float  # seconds per dispatched operator
    kernels: KernelRates = ()
    steps: MeasuredSteps = ()  # real steps timed on the machine: the family's price is scaled to them
    # activity-dependent training power (fl.cost.energy.training_power_w); None: the constant train_w
    compute_w: float | None = None
    memory_w: float | None = None
    overhead_w: float | None = None

    @property
    def roofline(self) -> bool:
        return self.mem_bw is not None


class MeasuredStep(Strict):
    """One real training step timed on the machine (``profiles measure --family``): the cost model scales its
    price of that family, at that input shape, so the full-width step at ``batch`` costs what was measured."""

    family: str = Field(description="model family of the step (as model.family names it)")
    input: tuple[int, int, int] = Field(description="input shape [channels, height, width]")
    batch: int = Field(ge=1, description="samples in the timed step")
    seconds: float = Field(gt=0, le=MAX_OVERHEAD_US / 1e6, description="the fastest measured step (SGD with momentum 0.9, 10 classes), s")


class Compute(Strict):
    flops: float = Field(ge=MIN_FLOPS, description="sustained FP32 training throughput, FLOP/s (2 per multiply-add)")
    mem_bw_gbs: float | None = Field(
        None, ge=MIN_MEM_BW_GBS, description="achieved memory bandwidth, GB/s (1e9 bytes/s); enables the per-operator roofline"
    )
    op_overhead_us: float | None = Field(
        None, ge=0, le=MAX_OVERHEAD_US, description="fixed cost per dispatched operator (framework dispatch, kernel launch), microseconds"
    )
    kernels: dict[str, KernelCost] | None = Field(
        None,
        description="per-operator-kind costs by ATen name (convolution, native_batch_norm, max_pool2d_with_indices, ...): "
        "extra fixed overhead and achieved FLOP/s; kinds not listed use the generic roofline",
    )
    measured_steps: list[MeasuredStep] | None = Field(
        None,
        description="real training steps timed here (profiles measure --family): a model of the same family and "
        "input shape is priced by the roofline times measured / roofline of that step (ignored in a power mode)",
    )
    jitter: Jitter = Jitter()
    power_modes: dict[str, PowerMode] | None = None
    default_mode: str | None = None
    mode_switch_s: float | None = Field(
        None, ge=0, le=3600, description="time a change of power mode takes, s, at idle power (null: 0)"
    )

    @model_validator(mode="after")
    def _mode_known(self) -> Compute:
        if self.default_mode is not None and self.default_mode not in (self.power_modes or {}):
            known = ", ".join(self.power_modes or {}) or "none defined"
            raise ValueError(f"default_mode {self.default_mode!r} is not one of the power_modes ({known})")
        return self


def above_total(value_mb: float, total_mb: float, whose: str = "") -> str | None:
    """The words for a free memory or its fluctuation (MB) above a device's total, or None when it is within: a
    digit too many would silently give the device memory it lacks (the profile's own fields and a group's)."""
    return f"is more than {whose}total_mb {total_mb:g}, the device's whole memory" if value_mb > total_mb else None


class Memory(Strict):
    total_mb: float = Field(gt=0, le=MAX_MEMORY_MB)
    free_mb: float = Field(gt=0, description="memory typically free for the FL task (r_M); at most total_mb")
    sigma_mb: float = Field(
        0.0, ge=0, description="std of u in r = r_M - |u|, u ~ N(0, sigma^2); at most total_mb"
    )

    @model_validator(mode="after")
    def _within_total(self) -> Memory:
        for name in ("free_mb", "sigma_mb"):
            problem = above_total(getattr(self, name), self.total_mb)
            if problem:
                raise ValueError(f"{name} {getattr(self, name):g} {problem}; lower {name} or raise total_mb")
        return self


class Power(ActivityPower):
    idle_w: float = Field(ge=0, le=MAX_POWER_W)
    train_w: float = Field(ge=0, le=MAX_POWER_W)
    tx_w: float = Field(ge=0, le=MAX_POWER_W)
    rx_w: float = Field(ge=0, le=MAX_POWER_W)


IDEAL_CELL = {"charge_efficiency": 1.0, "discharge_efficiency": 1.0, "peukert": 1.0, "rated_hours": 5.0, "fade_per_cycle": 0.0}


class Battery(Strict):
    capacity_j: float | None = Field(None, gt=0, le=MAX_ENERGY_J, description="joules; null = mains powered")
    capacity_wh: float | None = Field(
        None, gt=0, le=MAX_ENERGY_J / 3600, description="watt-hours (alternative to capacity_j)"
    )
    # the chemistry: null is the ideal cell (IDEAL_CELL), so a study recorded before these fields existed resumes
    charge_efficiency: float | None = Field(
        None, gt=0, le=1, description="share of the energy put in that is stored (null: 1)"
    )
    discharge_efficiency: float | None = Field(
        None, gt=0, le=1, description="share of the stored energy drawn that is delivered (null: 1)"
    )
    peukert: float | None = Field(
        None,
        ge=1,
        le=2,
        description="Peukert exponent: above the rated power, drawing P costs (P / rated) ** (k - 1) more (null: 1)",
    )
    rated_hours: float | None = Field(
        None, gt=0, description="the capacity is rated at the power that empties it in this time (null: 5)"
    )
    fade_per_cycle: float | None = Field(
        None, ge=0, lt=1, description="share of the nominal capacity lost per equivalent full cycle, ageing (null: 0)"
    )

    @model_validator(mode="after")
    def _one_unit(self) -> Battery:
        if self.capacity_j is not None and self.capacity_wh is not None:
            raise ValueError("give capacity_j or capacity_wh, not both")
        chemistry = ("charge_efficiency", "discharge_efficiency", "peukert", "fade_per_cycle")
        changed = [k for k in chemistry if getattr(self, k) is not None]
        if self.capacity_j is None and self.capacity_wh is None and changed:
            raise ValueError(
                f"a mains-powered device (no capacity_j or capacity_wh) has no battery chemistry to set ({', '.join(changed)}); "
                "give the battery a capacity_wh or capacity_j, or drop those fields"
            )
        return self

    def chemistry(self, name: str) -> float:
        """A chemistry field's value, the ideal cell's where it is null."""
        value = getattr(self, name)
        return IDEAL_CELL[name] if value is None else value

    @property
    def joules(self) -> float:
        if self.capacity_wh is not None:
            return self.capacity_wh * 3600.0
        return float("inf") if self.capacity_j is None else self.capacity_j


class Link(Strict):
    radio: Literal["wifi", "lte", "nbiot", "lorawan", "ble", "ethernet"] = "wifi"
    down_mbps: float = Field(ge=MIN_LINK_MBPS, le=MAX_LINK_MBPS)
    up_mbps: float = Field(ge=MIN_LINK_MBPS, le=MAX_LINK_MBPS)
    rtt_ms: float = Field(0.0, ge=0, le=MAX_RTT_S * 1000)


class ServerWorkRates(Strict):
    """What a server does besides training and inference, as rates of this project's own code on that machine
    (``iotfl-sim profiles measure --server`` times them)."""

    aggregate_gbs: float = Field(
        ge=MIN_MEM_BW_GBS,
        description="averaging rate, GB/s (1e9 bytes/s) of float32 values: every received value read once and every "
        "global value written once, as fl.aggregate.aggregate_nested does it",
    )
    aggregate_tensor_us: float = Field(0.0, ge=0, le=MAX_OVERHEAD_US, description="fixed cost per received tensor of the averaging, us")
    qsgd_encode_values_per_s: float = Field(
        ge=MIN_FLOPS, description="QSGD values quantized and encoded per second (fl.quantize.quantize_state at 8 bits)"
    )
    qsgd_encode_tensor_us: float = Field(0.0, ge=0, le=MAX_OVERHEAD_US, description="fixed cost per tensor of quantizing and encoding, us")
    qsgd_decode_values_per_s: float = Field(
        ge=MIN_FLOPS, description="QSGD values decoded per second (levels and norms back to float32)"
    )
    qsgd_decode_tensor_us: float = Field(0.0, ge=0, le=MAX_OVERHEAD_US, description="fixed cost per tensor of decoding, us")


class ThermalParams(Strict):
    """How the board heats and throttles (fleet/thermal.py: one RC node, the firmware's two throttle levels); used
    only where a fleet group turns the thermal model on (its ``thermal`` block)."""

    r_k_per_w: float = Field(gt=0, le=1000, description="thermal resistance, junction to ambient, K/W")
    tau_s: float = Field(gt=0, le=1e6, description="thermal time constant R x C, s")
    soft_c: float = Field(80.0, gt=0, le=200, description="temperature at which the clock drops to soft_clock, °C")
    hard_c: float = Field(85.0, gt=0, le=200, description="temperature at which the clock drops to hard_clock, °C")
    soft_clock: float = Field(gt=0, le=1, description="share of the full clock between soft_c and hard_c")
    hard_clock: float = Field(gt=0, le=1, description="share of the full clock at and above hard_c")

    @model_validator(mode="after")
    def _ordered(self) -> ThermalParams:
        if not self.soft_c < self.hard_c:
            raise ValueError(f"soft_c ({self.soft_c:g}) must be below hard_c ({self.hard_c:g})")
        if not self.hard_clock <= self.soft_clock:
            raise ValueError(f"hard_clock ({self.hard_clock:g}) must not exceed soft_clock ({self.soft_clock:g})")
        return self


class DeviceProfile(Strict):
    name: str
    description: str = ""
    device_class: Literal["mcu", "sbc", "edge_gpu", "phone", "server"]
    compute: Compute
    memory: Memory
    power: Power
    battery: Battery = Battery()
    link: Link
    thermal: ThermalParams | None = Field(None, description="heating and throttling (null: never throttles)")
    server_work: ServerWorkRates | None = Field(
        None, description="a server's rates for aggregation and QSGD; required where the profile is used as server.profile"
    )
    sources: list[str] = Field(default_factory=list)

    def mode(self, name: str | None) -> tuple[float, float]:
        """(FLOP/s, training power in W) in power mode ``name`` (None = the profile's default)."""
        name = name or self.compute.default_mode
        if name is None:
            return self.compute.flops, self.power.train_w
        modes = self.compute.power_modes or {}
        if name not in modes:
            raise KeyError(name)
        return modes[name].flops, modes[name].train_w

    def rates(self, name: str | None = None) -> Rates:
        """The cost-model rates in power mode ``name`` (a mode's null fields fall back to the profile's)."""
        flops, train_w = self.mode(name)
        name = name or self.compute.default_mode
        m = (self.compute.power_modes or {}).get(name) if name is not None else None
        bw = m.mem_bw_gbs if m is not None and m.mem_bw_gbs is not None else self.compute.mem_bw_gbs
        ov = m.op_overhead_us if m is not None and m.op_overhead_us is not None else self.compute.op_overhead_us
        kernels = tuple(
            (k, v.overhead_us * 1e-6, v.points()) for k, v in sorted((self.compute.kernels or {}).items())
        )
        steps = () if m is not None else tuple(
            (s.family, tuple(s.input), s.batch, s.seconds) for s in self.compute.measured_steps or ()
        )
        terms = (m if m is not None else self.power).terms()  # a mode's operating point has its own levels
        return Rates(flops, train_w, None if bw is None else bw * 1e9, (ov or 0.0) * 1e-6, kernels, steps, *terms)

    def power_warnings(self) -> list[str]:
        """Power figures of 0 W: such devices spend no energy on that activity (``profiles measure`` writes 0 W
        where it was given no power figures), so energy results would silently leave them out."""
        zero = [k for k in ("idle_w", "train_w", "tx_w", "rx_w") if getattr(self.power, k) == 0]
        if not zero or self.device_class == "server" and zero == ["tx_w", "rx_w"]:
            return []
        return [
            f"profile {self.name}: power.{', power.'.join(zero)} {'is' if len(zero) == 1 else 'are'} 0 W, so its devices "
            "spend no energy there; set measured figures (e.g. from a USB power meter, or profiles measure --train-w "
            "/ --idle-w)"
        ]

    def cost_model_warnings(self) -> list[str]:
        """Why this profile is priced by the old FLOPs-only rule, if it is (shown by ``validate``)."""
        c = self.compute
        if c.mem_bw_gbs is None:
            return [
                f"profile {self.name}: no compute.mem_bw_gbs, so training time is FLOPs / compute.flops "
                "(MobileNet-class models will be priced too fast); add compute.mem_bw_gbs and compute.op_overhead_us"
            ]
        if c.op_overhead_us is None:
            return [f"profile {self.name}: no compute.op_overhead_us, so operators are priced with no dispatch overhead"]
        return []
