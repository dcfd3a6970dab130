"""The scenario: every knob of a run, as typed and validated data."""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BeforeValidator,
    Discriminator,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    Tag,
    TypeAdapter,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError, core_schema

from iotfl_sim import methods
from iotfl_sim.core.catalog import DATASETS, MODEL_FAMILIES
from iotfl_sim.scenario.algorithms import MethodConfig, Staleness
from iotfl_sim.scenario.algorithms.base import MODES
from iotfl_sim.scenario.availability import AlwaysAvailability, AvailabilityConfig
from iotfl_sim.scenario.limits import (
    MAX_BATCH,
    MAX_BYTES,
    MAX_DEVICES,
    MAX_EPOCHS,
    MAX_INDEX,
    MAX_JITTER_SIGMA,
    MAX_LINK_MBPS,
    MAX_LR,
    MAX_POWER_W,
    MAX_ROUNDS,
    MAX_RTT_S,
    MAX_SAMPLES,
    MAX_SEED,
    MAX_WORKERS,
    MIN_FLOPS,
    MIN_LINK_MBPS,
)
from iotfl_sim.scenario.profile import Strict


class MemoryConfig(Strict):
    """How a group's free memory behaves (values in the fleet's memory_units)."""

    free: float | None = Field(None, gt=0, description="r_M: mean free memory (default: the profile's free_mb)")
    sigma: float | None = Field(None, ge=0, description="std of the fluctuation (default: the profile's sigma_mb)")
    sigma2: float | list[float] | None = Field(
        None, description="variance of u, or a list from which each device draws one (FlexFL Table I)"
    )
    process: Literal["gaussian", "ou"] = Field(
        "gaussian",
        description="gaussian: r = r_M - |u|, u ~ N(0, sigma^2), drawn when a task arrives; ou: free memory is an "
        "Ornstein-Uhlenbeck process with mean `free`, stationary std `sigma` and correlation time tau_s, and can "
        "fall below a task's need during training",
    )
    tau_s: float = Field(600.0, gt=0, description="OU correlation time (s)")

    @model_validator(mode="after")
    def _one_spread(self) -> MemoryConfig:
        if self.sigma is not None and self.sigma2 is not None:
            raise ValueError("give sigma or sigma2, not both")
        values = self.sigma2 if isinstance(self.sigma2, list) else [self.sigma2] if self.sigma2 is not None else []
        if any(v < 0 for v in values) or (isinstance(self.sigma2, list) and not self.sigma2):
            raise ValueError("sigma2 must be a non-negative number or a non-empty list of them")
        return self


class LoraConfig(Strict):
    """A LoRa PHY (fleet/lora.py): frames timed on air by Semtech's formula instead of bytes over the profile's rate."""

    sf: int = Field(7, ge=7, le=12, description="spreading factor")
    bandwidth_khz: Literal[125, 250, 500] = Field(125, description="channel bandwidth, kHz")
    coding_rate: int = Field(5, ge=5, le=8, description="the coding rate's denominator: 5 for 4/5 .. 8 for 4/8")
    preamble: int = Field(8, ge=6, le=65535, description="preamble symbols (8 in LoRaWAN)")


class PathLossConfig(Strict):
    """Log-distance path loss with log-normal shadowing: PL(d) = pl_d0_db + 10 n log10(d / d0_m) + N(0, sigma_db^2)."""

    pl_d0_db: float = Field(ge=0, le=250, description="path loss at the reference distance, dB")
    d0_m: float = Field(gt=0, le=1e5, description="reference distance, m")
    n: float = Field(gt=0, le=10, description="path-loss exponent (2: free space)")
    sigma_db: float = Field(0.0, ge=0, le=30, description="std of the static shadowing drawn per device, dB")


class PositionsConfig(Strict):
    """Where a group's devices are, in metres on a plane (the gateway at ``network.link.gateway_m``)."""

    kind: Literal["fixed", "disc", "rectangle", "file"] = Field(
        "disc", description="fixed: all at x_m, y_m; disc: uniform in a disc; rectangle: uniform in a box; file: a CSV"
    )
    x_m: float = Field(0.0, ge=-1e7, le=1e7, description="fixed: x; disc: the centre's x")
    y_m: float = Field(0.0, ge=-1e7, le=1e7, description="fixed: y; disc: the centre's y")
    radius_m: float | None = Field(None, gt=0, le=1e7, description="disc: its radius, m")
    width_m: float | None = Field(None, gt=0, le=1e7, description="rectangle: its width (x from x_m), m")
    height_m: float | None = Field(None, gt=0, le=1e7, description="rectangle: its height (y from y_m), m")
    path: str | None = Field(
        None, min_length=1, description="file: a device,x_m,y_m CSV (device: 0 .. count-1 within the group)"
    )

    @model_validator(mode="after")
    def _complete(self) -> PositionsConfig:
        need = {"disc": ("radius_m",), "rectangle": ("width_m", "height_m"), "file": ("path",), "fixed": ()}[self.kind]
        missing = [k for k in need if getattr(self, k) is None]
        if missing:
            raise ValueError(f"positions of kind {self.kind} need {' and '.join(missing)}")
        return self


PATH_LOSS_MODELS: tuple[str, ...] = ("bor2016_lora", "petajajarvi2015_oulu", "free_space_868", "free_space_2400")


def _path_loss_named(value: Any) -> Any:
    if isinstance(value, str) and value not in PATH_LOSS_MODELS:
        raise ValueError(
            f"{value!r} is not a path-loss model here; use one of {', '.join(PATH_LOSS_MODELS)} (docs/links.md), or "
            "give its parameters {pl_d0_db, d0_m, n, sigma_db}"
        )
    return value


class LinkConfig(Strict):
    """A link rate and loss from where each device is (fleet/link_quality.py): path loss, SNR, the fastest scheme of
    the group's radio that closes the link with ``margin_db`` (its rate replaces the profile's), and the packet error
    rate at that margin (replaces ``network.loss``)."""

    path_loss: Annotated[str | PathLossConfig, BeforeValidator(_path_loss_named)] = Field(
        description="a published model by name (PATH_LOSS_MODELS; docs/links.md) or its parameters"
    )
    positions: PositionsConfig = Field(description="where the group's devices are")
    gateway_m: tuple[float, float] = Field((0.0, 0.0), description="the gateway's (x, y), m")
    margin_db: float = Field(0.0, ge=0, le=40, description="link margin a scheme must leave (LoRaWAN ADR: ~10 dB)")


class BandwidthConfig(Strict):
    """Link rates that follow a measured trace (fleet/bandwidth.py) instead of the profile's fixed ones."""

    trace: str = Field(min_length=1, description="the trace file, relative to the scenario's folder")
    format: Literal["auto", "csv", "lumos5g", "hsdpa", "ghent"] = Field("auto", description="the trace's format")
    run: int | None = Field(None, ge=0, description="lumos5g: the run_num to replay (default: the file's first)")
    up_ratio: float | None = Field(
        None, gt=0, le=10, description="download-only formats: uplink = this x downlink (default 6/13, LTE medians)"
    )
    start_s: float = Field(0.0, ge=0, description="where in the trace the simulation's time 0 falls, s")
    offsets: Literal["same", "random"] = Field(
        "random", description="random: each device starts at its own point of the trace (seeded); same: all at start_s"
    )


class NetworkConfig(Strict):
    """A group's link behaviour beyond the profile's bandwidth and RTT."""

    radio: Literal["wifi", "lte", "nbiot", "lorawan", "ble", "ethernet"] | None = Field(
        None, description="radio technology (default: the profile's link.radio); sets tail energy and duty cycle"
    )
    power_model: Literal["profile", "preset"] = Field(
        "profile", description="profile: the profile's tx_w/rx_w; preset: the radio preset's power model (LTE: Huang)"
    )
    jitter: float = Field(0.0, ge=0, le=MAX_JITTER_SIGMA, description="lognormal sigma of a multiplicative noise on each transfer's time")
    loss: float = Field(0.0, ge=0, lt=1, description="packet loss probability; lost packets are retransmitted")
    gateway: str | None = Field(None, description="name of a fleet.gateways entry whose capacity this group shares")
    lora: LoraConfig | None = Field(
        None, description="with radio lorawan: time each LoRaWAN frame on air (SF, bandwidth, coding rate) instead of "
        "bytes over the profile's rate"
    )
    link: LinkConfig | None = Field(
        None, description="rate and loss from each device's distance to its gateway (path loss -> SNR -> scheme)"
    )
    bandwidth: BandwidthConfig | None = Field(None, description="rates over time from a measured trace")

    @model_validator(mode="after")
    def _one_rate_source(self) -> NetworkConfig:
        if self.link is not None and self.bandwidth is not None:
            raise ValueError("link and bandwidth both set the devices' rate: give one of them")
        if self.link is not None and self.loss != 0.0:
            raise ValueError("link sets each device's loss from its SNR: drop loss, or drop link")
        if self.bandwidth is not None and self.lora is not None:
            raise ValueError("lora times frames by the spreading factor, not a rate: drop bandwidth or lora")
        return self


class HarvestConfig(Strict):
    """Energy coming in during a daily window: a solar day, or a charger plugged in at night."""

    kind: Literal["window"] = Field("window", description="window (the default): constant power in a daily window")
    power_w: float = Field(gt=0, le=MAX_POWER_W, description="power harvested (or charging power) during the window, W")
    start_hour: float = Field(6.0, ge=0, lt=24, description="window start, hours after the start of a simulated day")
    hours: float = Field(12.0, gt=0, le=24, description="window length, hours")
    day_s: float = Field(86400.0, gt=0, description="length of a simulated day, s")


class SolarHarvestConfig(Strict):
    """A solar panel on an irradiance trace (fleet/irradiance.py: PVGIS, NSRDB, pvlib or time_s,w_m2 CSV)."""

    kind: Literal["solar"]
    area_m2: float = Field(gt=0, le=1000, description="panel area, m2")
    efficiency: float = Field(gt=0, le=1, description="share of the irradiance on the panel delivered to the battery")
    trace: str = Field(min_length=1, description="the irradiance CSV, relative to the scenario's folder")
    format: Literal["auto", "pvgis", "nsrdb", "pvlib", "csv"] = Field("auto", description="the trace's format")
    column: str | None = Field(None, description="the irradiance column (default: the format's global one)")
    start_hour: float = Field(
        0.0, ge=0, description="where in the trace the simulation's time 0 falls, hours after its first row"
    )


class ChargerConfig(Strict):
    """A charger plugged in on a daily schedule that varies from day to day and device to device (phones charged at
    night; fleet/charging.py, docs/energy.md). The device runs on the charger while plugged in and stores the rest."""

    kind: Literal["charger"]
    power_w: float = Field(gt=0, le=1000, description="power the charger delivers while plugged in, W")
    plugged: Literal["online"] | None = Field(
        None,
        description="null: the daily schedule below; online: whenever the group's availability trace has the device "
        "online (FedScale's traces record devices charging and on Wi-Fi)",
    )
    start_hour: float = Field(22.0, ge=0, lt=24, description="usual plug-in time, hours after the start of a simulated day")
    hours: float = Field(8.0, gt=0, le=24, description="usual time plugged in, hours")
    start_sd_hours: float = Field(1.0, ge=0, le=12, description="day-to-day spread (std) of the plug-in time, hours")
    hours_sd: float = Field(1.0, ge=0, le=12, description="day-to-day spread (std) of the time plugged in, hours")
    skip_probability: float = Field(0.0, ge=0, lt=1, description="chance that a device is not plugged in at all on a day")
    days: int = Field(7, ge=1, le=366, description="each device's schedule covers this many days, then repeats")
    variants: int = Field(
        64, ge=1, le=4096, description="distinct schedules drawn per group; each device follows one of them"
    )
    day_s: float = Field(86400.0, gt=0, description="length of a simulated day, s")

    @model_validator(mode="after")
    def _schedule_or_trace(self) -> ChargerConfig:
        schedule = sorted(self.model_fields_set - {"kind", "power_w", "plugged"})
        if self.plugged == "online" and schedule:
            raise ValueError(
                f"plugged: online follows the availability trace, so the schedule's {', '.join(schedule)} would be "
                "ignored; drop them, or drop plugged"
            )
        return self


HARVEST_KINDS: tuple[str, ...] = ("window", "solar", "charger")


def _harvest_kind(value: Any) -> Any:
    kind = value.get("kind", "window") if isinstance(value, dict) else getattr(value, "kind", None)
    return kind if kind in HARVEST_KINDS else None


HarvestChoice = Annotated[
    Annotated[HarvestConfig, Tag("window")]
    | Annotated[SolarHarvestConfig, Tag("solar")]
    | Annotated[ChargerConfig, Tag("charger")],
    Discriminator(
        _harvest_kind,
        custom_error_type="harvest_kind",
        custom_error_message="harvest.kind must be window (the default), solar or charger",
    ),
]


THERMAL_BOARDS: tuple[str, ...] = ("raspberry_pi_4",)  # fleet/thermal.py's published boards


class ThermalConfig(Strict):
    """Turns on heating and throttling (fleet/thermal.py) in an ambient temperature that may swing daily:
    ``ambient_c + daily_swing_c / 2 x cos(2 pi (hour - peak_hour) / 24)``. The board's parameters: a published board
    by name (``board``), or the profile's ``thermal`` block."""

    board: Literal[THERMAL_BOARDS] | None = Field(  # type: ignore[valid-type]
        None, description="a board whose parameters are bundled (benchmarks/thermal_rpi4.md); null: the profile's thermal"
    )

    ambient_c: float = Field(25.0, ge=-60, le=80, description="mean ambient temperature, °C")
    daily_swing_c: float = Field(0.0, ge=0, le=60, description="peak-to-trough daily swing of the ambient, K")
    peak_hour: float = Field(15.0, ge=0, lt=24, description="hour of the day at which the ambient peaks")
    day_s: float = Field(86400.0, gt=0, description="length of a simulated day, s")


class CarbonConfig(Strict):
    """The grid's carbon intensity: what each joule drawn from the grid (by mains-powered devices and the server)
    costs in CO2 (fleet/carbon.py; docs/energy.md)."""

    g_per_kwh: float | None = Field(None, ge=0, le=3000, description="a constant intensity, g CO2(eq) per kWh")
    trace: str | None = Field(
        None, min_length=1, description="an intensity trace CSV (time_s,g_per_kwh or ISO timestamps), relative to the scenario"
    )
    format: Literal["auto", "csv", "timestamped"] = Field("auto", description="the trace's format")
    column: str | None = Field(None, description="the intensity column (default: the one named like a carbon intensity)")
    start_hour: float = Field(0.0, ge=0, description="where in the trace the simulation's time 0 falls, hours")

    @model_validator(mode="after")
    def _one_source(self) -> CarbonConfig:
        if (self.g_per_kwh is None) == (self.trace is None):
            raise ValueError("give g_per_kwh (a constant) or trace (a CSV over time), exactly one")
        return self


class Gateway(Strict):
    name: str
    down_mbps: float = Field(ge=MIN_LINK_MBPS, le=MAX_LINK_MBPS, description="capacity shared by all downloads through this gateway")
    up_mbps: float = Field(ge=MIN_LINK_MBPS, le=MAX_LINK_MBPS, description="capacity shared by all uploads through this gateway")
    devices_per_gateway: int | None = Field(
        None,
        ge=1,
        le=MAX_DEVICES,
        description="replicate this gateway: every block of this many consecutive device indices (groups are laid "
        "out in order) that names it shares its own copy (null: one gateway for every device that names it)",
    )


class PowerPolicy(Strict):
    """A device-side rule for the power mode of each task: ``low_mode`` while the battery's state of charge is below
    ``below``, else the group's ``power_mode`` (or the profile's default). A method's own choice
    (``Assignment.power_mode``) comes first."""

    low_mode: str = Field(min_length=1, description="the profile's power mode to train in when the battery is low")
    below: float = Field(gt=0, lt=1, description="state of charge (0-1) under which the low mode is used")


class Group(Strict):
    name: str | None = Field(None, description="label of the group in reports; defaults to the profile name")
    profile: Any = Field(description="a profile name from device_profiles/, or a whole profile written inline")
    count: int | None = Field(None, ge=0, le=MAX_DEVICES)
    fraction: float | None = Field(None, ge=0, le=1)
    power_mode: str | None = Field(None, description="one of the profile's power_modes")
    power_policy: PowerPolicy | None = Field(
        None, description="pick each task's power mode by the battery (e.g. the 5 W mode below 30 %)"
    )
    memory: MemoryConfig = MemoryConfig()
    network: NetworkConfig = NetworkConfig()
    harvest: HarvestChoice | None = Field(
        None,
        description="energy coming in (battery devices): a daily window, a solar panel on an irradiance trace, or a "
        "charger plugged in on a varying daily schedule",
    )
    availability: AvailabilityConfig = Field(
        default_factory=AlwaysAvailability, description="when devices are online (always, bernoulli, markov, diurnal, trace)"
    )
    thermal: ThermalConfig | None = Field(
        None,
        description="heat and throttling under sustained training (the profile's thermal parameters) in this "
        "ambient; null: devices never throttle",
    )
    overrides: dict[str, Any] = Field(
        default_factory=dict, description="partial profile merged over the named one, e.g. {memory: {sigma_mb: 50}}"
    )

    @field_validator("profile")
    @classmethod
    def _profile_kind(cls, v: Any) -> Any:
        if not isinstance(v, str | dict):
            raise ValueError("give a profile name (see `iotfl-sim profiles list`) or an inline profile mapping")
        return v

    @model_validator(mode="after")
    def _size(self) -> Group:
        if (self.count is None) == (self.fraction is None):
            raise ValueError("give exactly one of count or fraction")
        return self


class Fleet(Strict):
    num_devices: int | None = Field(None, gt=0, le=MAX_DEVICES, description="total devices; needed when groups give fractions")
    memory_units: Literal["mb", "relative"] = Field(
        "mb",
        description="mb: memory in MB, needs measured from the real submodel; relative: FlexFL's units, percent of "
        "the full model's parameters (every group then gives memory.free)",
    )
    cost_model: Literal["flops", "roofline"] = Field(
        "roofline",
        description="roofline: each operator of the traced training step priced as max(FLOPs / compute.flops, "
        "bytes / compute.mem_bw_gbs) + compute.op_overhead_us (+ compute.kernels); a profile without "
        "compute.mem_bw_gbs falls back to flops, with a warning; flops: the old rule, training time = "
        "3 x forward FLOPs / compute.flops (what benchmarks recorded before 2026-11-23 used)",
    )
    groups: list[Group] = Field(min_length=1)
    gateways: list[Gateway] = Field(default_factory=list, description="shared access points / gateways")
    carbon: CarbonConfig | None = Field(
        None, description="the grid's carbon intensity: adds carbon_g (mains-powered devices and the server) to every row"
    )
    reports: list[Literal["battery", "power"]] | None = Field(
        None,
        description="what devices tell the server, so a method may use it: battery (state of charge at the device's "
        "last contact), power (whether it is on mains or plugged into its charger now); see docs/energy.md",
    )

    @model_validator(mode="after")
    def _sizes_add_up(self) -> Fleet:
        named: dict[str, int] = {}
        for i, g in enumerate(self.groups):
            if g.name is not None and named.setdefault(g.name, i) != i:
                raise ValueError(
                    f"groups[{named[g.name]}] and groups[{i}] are both named {g.name!r}: per-group outputs (devices.csv, "
                    "energy by group) would mix them; give each group its own name"
                )
        names = {g.name for g in self.gateways}
        for i, g in enumerate(self.groups):
            if g.network.gateway is not None and g.network.gateway not in names:
                known = ", ".join(sorted(names)) or "none defined"
                raise ValueError(f"groups[{i}].network.gateway {g.network.gateway!r} is not in fleet.gateways ({known})")
        if self.memory_units == "relative":
            missing = [i for i, g in enumerate(self.groups) if g.memory.free is None]
            if missing:
                raise ValueError(
                    f"memory_units is relative, so groups[{missing[0]}].memory.free (percent of the full model) is needed"
                )
        fractions = [g.fraction for g in self.groups if g.fraction is not None]
        if fractions and len(fractions) != len(self.groups):
            raise ValueError("mix of count and fraction: give every group a count, or every group a fraction")
        if fractions:
            if self.num_devices is None:
                raise ValueError("groups give fractions, so fleet.num_devices is needed")
            if abs(sum(fractions) - 1.0) > 1e-6:
                raise ValueError(f"group fractions add up to {sum(fractions):g}, not 1: fix the fractions")
        elif self.num_devices is not None and self.num_devices != sum(g.count or 0 for g in self.groups):
            raise ValueError(
                f"num_devices is {self.num_devices} but group counts add up to {sum(g.count or 0 for g in self.groups)}"
            )
        total = sum(self.counts())
        if total == 0:
            raise ValueError("every group has count 0, so the fleet has no devices; give a group a count of 1 or more")
        if total > MAX_DEVICES:
            raise ValueError(f"the groups add up to {total:,} devices, more than the limit of {MAX_DEVICES:,}")
        return self

    def counts(self) -> list[int]:
        """Devices per group; fractions are rounded by largest remainder so they sum to num_devices."""
        if self.groups[0].count is not None:
            return [int(g.count or 0) for g in self.groups]
        total = int(self.num_devices or 0)
        raw = [(g.fraction or 0.0) * total for g in self.groups]
        counts = [int(r) for r in raw]
        order = sorted(range(len(raw)), key=lambda i: raw[i] - counts[i], reverse=True)
        for i in order[: total - sum(counts)]:
            counts[i] += 1
        return counts


class Partition(Strict):
    method: Literal["iid", "dirichlet", "shards", "natural"] = "iid"
    alpha: float = Field(0.5, gt=0, description="Dirichlet concentration (dirichlet only)")
    classes_per_client: int = Field(2, ge=1, le=MAX_INDEX, description="label shards per client (shards only)")


class Data(Strict):
    dataset: Literal[DATASETS] = "digits"  # type: ignore[valid-type]
    root: str | None = Field(None, description="folder holding the dataset files; default: $IOTFL_DATA")
    partition: Partition = Partition()
    test_fraction: float = Field(0.2, gt=0, lt=1, description="held-out share for datasets without a test split")
    train_samples: int | None = Field(
        None, ge=1, le=MAX_SAMPLES, description="keep a seeded random subset of this many train samples (null: all; for quick runs)"
    )
    test_samples: int | None = Field(
        None, ge=1, le=MAX_SAMPLES, description="keep a seeded random subset of this many test samples (null: all; for quick runs)"
    )


class Model(Strict):
    family: Literal[MODEL_FAMILIES] = Field(  # type: ignore[valid-type]
        "cnn_small",
        description="model family; *_ee: early-exit variants (one exit per stage, ScaleFL); ofa_mbv3, harwild: "
        "FedX's OFA MobileNetV3 supernet and HAR-Wild CNN; cnn2: AdapterFL's 2-conv CNN (images of at least 16 px); "
        "resnet110: ScaleFL's CIFAR ResNet110 (resnet110_ee: its 4 exits after blocks 30, 38, 46, 54)",
    )  # fmt: skip
    norm: Literal["bn", "none"] = "bn"
    scaler: bool = Field(True, description="HeteroFL's train-only Scaler (output / rate)")


class LRSchedule(Strict):
    kind: Literal["constant", "multistep", "exponential"] = "constant"
    milestones: list[Annotated[int, Field(ge=0, le=MAX_ROUNDS)]] = Field(default_factory=list, description="rounds at which lr is multiplied by gamma")
    gamma: float = Field(0.1, gt=0)

    def lr_at(self, base: float, rnd: int) -> float:
        if self.kind == "multistep":
            return base * self.gamma ** sum(1 for m in self.milestones if rnd >= m)
        if self.kind == "exponential":
            return base * self.gamma**rnd
        return base


class Local(Strict):
    epochs: int = Field(1, ge=1, le=MAX_EPOCHS)
    batch_size: int = Field(10, ge=1, le=MAX_BATCH)
    optimizer: Literal["sgd"] = "sgd"
    lr: float = Field(0.01, gt=0, le=MAX_LR)
    momentum: float = Field(0.9, ge=0, lt=1)
    weight_decay: float = Field(5e-4, ge=0, le=MAX_LR)
    lr_schedule: LRSchedule = LRSchedule()
    clip_grad_norm: float | None = Field(1.0, gt=0, description="clip gradients to this norm (null: no clipping)")


class ServerCompute(Strict):
    """The server priced by the old FLOP rule: every piece of its work takes FLOPs / ``flops`` seconds. Kept for
    scenarios written before server profiles; ``validate`` warns (FLOPs alone price server work far too fast)."""

    flops: float = Field(
        1.0e13, ge=MIN_FLOPS, description="sustained training FLOP/s of the server (default: one data-centre GPU, ~10 TFLOP/s)"
    )
    power_w: float = Field(300.0, ge=0, le=MAX_POWER_W, description="server power while it computes, W (reported as server_energy_j)")


DEFAULT_SERVER_PROFILE = "gpu_server_titan_xp"


def one_compute_model(holder: Any, key: str) -> Any:
    """``holder`` (the server, or the gateways under ``hierarchy``) priced by a profile or by the FLOP rule, not both."""
    if holder.profile is not None and holder.compute is not None:
        raise ValueError(f"give {key}.profile or {key}.compute, not both (compute is the old FLOP rule)")
    if holder.power_mode is not None and holder.compute is not None:
        raise ValueError(f"{key}.power_mode picks a mode of {key}.profile; the FLOP rule ({key}.compute) has none")
    return holder


class Server(Strict):
    mode: Literal["sync", "async", "semi_async"] = Field(
        "sync",
        description="sync: rounds, late updates dropped; semi_async: rounds close at deadline_s and a late update joins "
        "a later round's aggregation with weight staleness(s); async: no rounds, the method (fedasync, fedbuff) folds "
        "updates as they arrive while `concurrency` devices train",
    )
    deadline_s: float | None = Field(
        None, gt=0, description="round deadline in simulated seconds (null: none); in async mode each task's, from its dispatch"
    )
    concurrency: int | None = Field(
        None, ge=1, le=MAX_DEVICES, description="async: devices training at once (null: the selection size, clients_per_round)"
    )
    dispatch: Literal["continuous", "after_update"] = Field(
        "continuous",
        description="async: continuous: a device is dispatched the moment one finishes or fails; after_update: free "
        "slots are filled only after a server model update, or when none is in flight (every task of the last wave "
        "failed); after_update needs concurrency >= the method's buffer size (one wave must be able to make a version)",
    )
    max_tasks_per_version: int | None = Field(
        None,
        ge=1,
        le=MAX_DEVICES * MAX_ROUNDS,
        description="async: stop the run (an error, exit status 2) when this many tasks were dispatched since the "
        "last model version without making the next one: a run in which no update can arrive would dispatch forever "
        "(null: 100 x max(concurrency, the method's buffer size); at least max(concurrency, buffer size))",
    )
    staleness: Staleness = Field(
        Staleness(),
        description="semi_async: the weight of an update s rounds late; async with a round-based method (its "
        "buffered form): the weight of the delta of an update s versions stale (default polynomial (s+1)^-0.5)",
    )
    buffer_size: int | None = Field(
        None,
        ge=1,
        le=MAX_DEVICES,
        description="async with a round-based method (heterofl, fedavg, fedprox, adaptivefl, flexfl: FedBuff's buffer over the method's "
        "own aggregation, sim/buffered_async.py): updates per model version (null: the selection size)",
    )
    over_selection: float = Field(
        1.0, ge=1.0, description="select ceil(k * this) devices and keep the first k updates to arrive (FedScale's over-commitment)"
    )
    min_participants: int = Field(
        1, ge=1, le=MAX_DEVICES, description="wait (retry_s at a time) until this many devices can be selected; aggregate only if this many updates arrive"
    )
    retry_s: float = Field(60.0, gt=0, description="how long the server waits before retrying when too few devices are online")
    eval_every: int = Field(
        1,
        ge=1,
        le=MAX_ROUNDS,
        description="evaluate every this many rounds and after the last (host time only: simulated time, energy and "
        "bytes do not change); other rows have no accuracy, so time/energy/bytes-to-accuracy read the first evaluated "
        "round at or above a target, up to eval_every - 1 rounds after the round that first reached it",
    )
    eval_batch_size: int = Field(
        100,
        ge=1,
        le=MAX_BATCH,
        description="batch size of evaluation and static-BN calibration (on CPU about 100 is fastest: activations "
        "stay in cache; measured 1.4-2.4x faster than 1,000)",
    )
    eval_subset: int | None = Field(
        None,
        ge=1,
        le=MAX_SAMPLES,
        description="score every evaluation on this many test samples, a fixed seeded subset (null: all): scoring costs "
        "m/N of the full test pass; the accuracy is a sample estimate with standard error sqrt(p(1-p)/m * (N-m)/(N-1)) "
        "<= 1/(2 sqrt(m)) (m = 2,000: at most 1.1 points), the same subset every round",
    )
    bn_calibration_samples: Annotated[int, Field(ge=1, le=MAX_SAMPLES)] | Literal["all"] = Field(
        2000,
        description="training samples (a fixed seeded draw) that recompute static BN statistics before each evaluation; "
        "'all' is HeteroFL's full pass. 2,000 kept every level within 0.07 points of the full pass on MNIST "
        "(benchmarks/bn_calibration_cap.md) from a 30th of the samples",
    )
    target_accuracies: list[float] = Field(default_factory=lambda: [0.5, 0.7, 0.8, 0.9, 0.95])
    header_bytes: int = Field(1024, ge=0, le=MAX_BYTES, description="fixed per-message overhead on the wire")
    profile: str | dict[str, Any] | None = Field(
        None,
        description="the server's profile (a device profile with a server_work section), by name or path, or inline: "
        "its work (training, inference, aggregation, QSGD) is priced by the per-operator cost model; "
        f"null: {DEFAULT_SERVER_PROFILE} unless server.compute is given",
    )
    power_mode: str | None = Field(None, description="a power mode of the server profile (null: its default)")
    compute: ServerCompute | None = Field(
        None,
        description="the old FLOP rule instead of a profile: {flops, power_w}; every piece of server work takes "
        "FLOPs / flops seconds (far too fast for anything but large dense kernels)",
    )

    @model_validator(mode="after")
    def _one_server_model(self) -> Server:
        return one_compute_model(self, "server")


DEFAULT_GATEWAY_PROFILE = "cloud_cpu_2vcpu"


class Backhaul(Strict):
    """A gateway's own link to the cloud (not shared with other gateways). Defaults: 4G LTE, the median 13 Mb/s
    down / 6 Mb/s up and 44-66 ms RTT of Huang et al. (MobiSys 2012), with the radio power of their linear model
    (438.39 mW/Mbps up, 51.97 mW/Mbps down, plus 1288.04 mW) at those rates."""

    up_mbps: float = Field(6.0, ge=MIN_LINK_MBPS, le=MAX_LINK_MBPS, description="gateway -> cloud bandwidth, Mb/s (default: LTE median uplink)")
    down_mbps: float = Field(13.0, ge=MIN_LINK_MBPS, le=MAX_LINK_MBPS, description="cloud -> gateway bandwidth, Mb/s (default: LTE median downlink)")
    rtt_s: float = Field(0.055, ge=0, le=MAX_RTT_S, description="round-trip time added to every transfer, s (default: LTE, 44-66 ms)")
    tx_w: float = Field(3.92, ge=0, le=MAX_POWER_W, description="radio power while uploading, W (default: Huang's LTE model at 6 Mb/s)")
    rx_w: float = Field(1.96, ge=0, le=MAX_POWER_W, description="radio power while downloading, W (default: Huang's LTE model at 13 Mb/s)")


class Hierarchy(Strict):
    """Device -> gateway -> cloud aggregation (HierFAVG; ``sim/hierarchy.py``). Every fleet group names a
    ``network.gateway``; each copy of that gateway (``devices_per_gateway`` blocks) aggregates its own devices."""

    device_rounds: int = Field(
        1, ge=1, le=MAX_EPOCHS,
        description="k1: local rounds (local.epochs epochs each) a device trains between two aggregations at its "
        "gateway, in one task (HierFAVG's kappa_1)",
    )  # fmt: skip
    gateway_rounds: int = Field(
        1, ge=1, le=MAX_ROUNDS,
        description="k2: gateway aggregations per cloud aggregation (HierFAVG's kappa_2); `rounds` counts cloud rounds",
    )  # fmt: skip
    profile: str | dict[str, Any] | None = Field(
        None,
        description="the gateways' compute, a profile with a server_work section (by name or path, or inline) "
        f"pricing their aggregation like the server's; null: {DEFAULT_GATEWAY_PROFILE} (a 2-vCPU edge server) "
        "unless compute is given",
    )
    power_mode: str | None = Field(None, description="a power mode of the gateway profile (null: its default)")
    compute: ServerCompute | None = Field(
        None, description="the old FLOP rule instead of a profile: {flops, power_w} (as server.compute)"
    )
    idle_w: float | None = Field(
        None, ge=0, le=MAX_POWER_W, description="each gateway's power while it neither computes nor transmits, W (null: not counted)"
    )
    backhaul: Backhaul = Field(default_factory=Backhaul, description="each gateway's link to the cloud")

    @model_validator(mode="after")
    def _one_compute_model(self) -> Hierarchy:
        return one_compute_model(self, "hierarchy")


class Checkpoint(Strict):
    """When the run writes a checkpoint (``iotfl-sim run --resume RUN_DIR`` continues from the last one).
    A checkpoint is written when either interval has passed since the last; both null: never."""

    every_rounds: int | None = Field(None, ge=1, description="after this many rounds (null: by host time only)")
    every_s: float | None = Field(
        300.0, gt=0, description="after this many host seconds of running (null: by rounds only); checkpoints never change results"
    )
    keep: int = Field(2, ge=1, description="how many of the newest checkpoints to keep")


class Wandb(Strict):
    """A Weights & Biases run mirroring rounds.csv (``pip install 'iotfl-sim[wandb]'``)."""

    project: str = Field(min_length=1, max_length=128, description="W&B project")
    mode: Literal["offline", "online", "disabled"] = Field(
        "offline", description="offline: written under <run>/wandb/ (upload later with `wandb sync`); online: needs a login"
    )
    entity: str | None = Field(None, max_length=128, description="W&B entity (team or user); null: the default")


class Output(Strict):
    dir: str = "runs"
    events: Literal["all", "failures", "none"] = "all"
    progress: bool | None = Field(None, description="progress bar; null: only when writing to a terminal")
    checkpoint: Checkpoint = Checkpoint()
    tensorboard: bool = Field(
        False,
        description="also write each rounds.csv row as TensorBoard scalars under <run>/tensorboard/, and the resolved "
        "scenario as text (pip install 'iotfl-sim[tensorboard]'); never changes results",
    )
    wandb: Wandb | None = Field(
        None, description="also log each round to a W&B run, config = the resolved scenario (null: off); never changes results"
    )


class Executor(Strict):
    """Where the real training and evaluation run (``iotfl_sim.exec``); never changes a result."""

    kind: Literal["auto", "inline", "threads", "pool", "ray", "fused"] = Field(
        "auto",
        description="auto: fused when a CUDA GPU is present; else one single-thread worker per usable core (CPU "
        "affinity and cgroup limit): threads of this process, or a pool of processes for models with dropout; "
        "inline for a run too short to gain (the choice and why are printed at the start and kept in summary.json); "
        "inline: one job after another in this process; threads: worker threads of this process (PyTorch releases "
        "the GIL in its kernels; one process in memory); pool: parallel worker processes on this machine; ray: Ray actors (a local Ray, or the cluster at address; pip install 'iotfl-sim[ray]'); "
        "fused: clients of the same submodel trained as one vmapped computation (on CUDA when present; on a CPU "
        "a pool whose workers each fuse their share, tiny steps only; equal to inline within float tolerance, not bitwise)",
    )
    workers: int | None = Field(
        None, ge=1, le=MAX_WORKERS,
        description="threads, pool, ray, fused on a CPU: worker threads / processes / actors (null: one per usable core or "
        "cluster CPU)",
    )
    address: str | None = Field(None, description="ray: address of an existing cluster (null: start a local Ray)")
    threads: int = Field(
        1,
        ge=1,
        le=MAX_WORKERS,
        description="torch threads per training or evaluation job, in every executor (results depend on it in the "
        "last bits, so it is pinned: the same seed then gives the same bits whichever executor runs)",
    )
    overlap_eval: bool | Literal["auto"] = Field(
        "auto",
        description="evaluate round r while the server simulates and trains round r + 1: true where the executor "
        "can (threads, and fused on CUDA, whose host threads evaluate); auto: where it measured faster (threads: "
        "0.98x the wall time on many small clients, 1.00x on few large ones; fused on CUDA); false: never. "
        "Every result and file is the same bits either way (round r's row is written when its evaluation ends); "
        "host_eval_s then counts only the time the server waited for evaluations",
    )

    @model_validator(mode="after")
    def _workers_for_pool(self) -> Executor:
        if self.workers is not None and self.kind in ("auto", "inline"):
            raise ValueError(
                f"workers is for kind: threads, pool or ray (kind {self.kind} "
                f"{'chooses its own' if self.kind == 'auto' else 'runs one job at a time'}); drop it or set kind: threads"
            )
        if self.address is not None and self.kind != "ray":
            raise ValueError("address is for kind: ray; drop it or set kind: ray")
        return self



def able(mode: str) -> list[str]:
    """The registered methods that run in ``mode`` (one of ``MODES``)."""
    return [m.name for m in methods.registered() if mode in m.config.modes]


def method_options(value: Any) -> type[MethodConfig] | None:
    """The options class of the registered method an ``algorithm:`` block names, or None (no such method)."""
    name = value.get("name") if isinstance(value, dict) else None
    found = methods.registered_method(name) if isinstance(name, str) else None
    return found.config if found is not None else None


def _validate_algorithm(value: Any) -> MethodConfig:
    """``algorithm`` in two steps: its ``name`` names a registered method (``iotfl_sim.methods``; the loader has
    registered an import path or entry point it names), then the block is validated by that method's options class
    (its errors keep their place under ``algorithm``). The loader words both errors (name, line, did-you-mean)."""
    if isinstance(value, MethodConfig):
        return value
    if not isinstance(value, dict) or value.get("name") is None:
        raise PydanticCustomError("method_missing", "algorithm.name is missing (one of {names})",
                                  {"names": ", ".join(methods.method_names())})  # fmt: skip
    options = method_options(value)
    if options is None:
        raise PydanticCustomError("method_unknown", "unknown algorithm {tag!r}", {"tag": str(value["name"])})
    return options.model_validate(value)


class RegisteredMethod:
    """What ``Scenario.algorithm`` is: validated by ``_validate_algorithm``; its JSON schema is the union of the
    registered methods' options (``iotfl-sim schema``), told apart by ``name``."""

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        # serialized as what it is: the method's own options class, with all its fields
        return core_schema.no_info_plain_validator_function(
            _validate_algorithm, serialization=core_schema.simple_ser_schema("any")
        )

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler) -> Any:
        choices = tuple(Annotated[m.config, Tag(m.name)] for m in methods.registered())
        union = Annotated[Union[choices], Discriminator(_method_name)]  # noqa: UP007
        return handler(TypeAdapter(union).core_schema)


def _method_name(value: Any) -> Any:
    return value.get("name") if isinstance(value, dict) else getattr(value, "name", None)


def plain_name(v: str, names: str, example: str) -> str:
    """``v`` if it can name a folder inside another (``names`` says which), else a ValueError that says why."""
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", v):
        raise ValueError(
            f"{v!r} is not a plain name: it names {names}, so use only letters, digits, '_', '-' and '.' "
            f"(no '/', '\\', spaces, or leading '.' or '-'); e.g. name: {example}"
        )
    return v

class Scenario(Strict):
    name: str = Field(
        max_length=100, description="names the run folder, <output.dir>/<name>-<timestamp>: letters, digits, _ - ."
    )
    description: str = ""
    seed: int = Field(0, ge=0, le=MAX_SEED)
    rounds: int = Field(ge=1, le=MAX_ROUNDS)
    clients_per_round: int | None = Field(None, ge=1, le=MAX_DEVICES)
    clients_fraction: float | None = Field(None, gt=0, le=1)
    numerics: Literal["torch", "none"] = Field(
        "torch", description="torch: real training; none: costs and protocol only (system-only mode)"
    )
    fleet: Fleet
    data: Data = Data()
    model: Model = Model()
    algorithm: Annotated[MethodConfig, RegisteredMethod]  # the options of the method its name names
    local: Local = Local()
    server: Server = Server()
    output: Output = Output()
    executor: Executor = Executor()
    hierarchy: Hierarchy | None = Field(
        None, description="device -> gateway -> cloud aggregation (null: every device reports to the server)"
    )

    @field_validator("name")
    @classmethod
    def _plain_name(cls, v: str) -> str:
        return plain_name(v, "the run folder <output.dir>/<name>-<timestamp>", "my_study")

    @model_validator(mode="after")
    def _one_selection_size(self) -> Scenario:
        if self.clients_per_round is not None and self.clients_fraction is not None:
            raise ValueError("give clients_per_round or clients_fraction, not both")
        return self

    @model_validator(mode="after")
    def _enough_devices(self) -> Scenario:
        if self.server.min_participants > self.num_devices():
            raise ValueError(
                f"server.min_participants: {self.server.min_participants} is more than the fleet's "
                f"{self.num_devices()} devices, so no round could ever start; lower it"
            )
        return self

    @model_validator(mode="after")
    def _flower_app_runs_itself(self) -> Scenario:
        """A Flower app (``algorithm.name: flower``) does all the training in its own ClientApp (iotfl-sim's own
        numerics stay off: ``numerics: none``, what its resolved scenario says), waits for replies as its own
        ServerApp decides (its timeouts, not ``server.deadline_s``) and keeps state in its own code, which no
        checkpoint can hold."""
        if self.algorithm.name != "flower":
            return self
        if "numerics" in self.model_fields_set and self.numerics == "torch":
            raise ValueError(
                "numerics: torch: a Flower app trains in its own ClientApp and iotfl-sim's own training stays off; "
                "remove numerics (a flower run has numerics: none)"
            )
        if self.server.deadline_s is not None:
            raise ValueError(
                "server.deadline_s: a Flower app's ServerApp waits for replies as it decides (the timeout of its "
                "send_and_receive, in simulated seconds); remove server.deadline_s"
            )
        if self.output.checkpoint != Checkpoint():  # the defaults, as a resolved scenario writes them, say nothing
            raise ValueError(
                "output.checkpoint: a Flower app's state (its ServerApp's main, its ClientApps' context.state) lives "
                "in the app's own code, which no checkpoint can hold, so a flower run is never resumed; remove "
                "output.checkpoint"
            )
        object.__setattr__(self, "numerics", "none")
        return self

    @model_validator(mode="after")
    def _algorithm_fits_the_scenario(self) -> Scenario:
        problem = self.algorithm.problem(numerics=self.numerics) or self._mode_problem()
        if problem is not None:
            raise ValueError(problem)
        return self

    def _mode_problem(self) -> str | None:
        """What makes ``server.mode`` unusable with the method or the rest of the server block, or None."""
        mode, alg, srv = self.server.mode, self.algorithm, self.server
        why = alg.why_not_in(mode)
        if why is not None:
            runs = [m for m in MODES if m in alg.modes and m != "hierarchical"]
            return (
                f"server.mode: {mode}: algorithm {alg.name} runs only in {', '.join(runs)} ({why}); set server.mode "
                f"to {' or '.join(runs)}, or use a method made for {mode} ({', '.join(able(mode)) or 'none registered'})"
            )
        if self.hierarchy is not None and (why := alg.why_not_in("hierarchical")) is not None:
            return (
                f"hierarchy: method {alg.name} cannot run hierarchically ({why}); use one of "
                f"{', '.join(able('hierarchical'))}, or drop hierarchy"
            )
        if mode != "sync" and self.hierarchy is not None:
            return f"hierarchy runs synchronous rounds at every tier: set server.mode: sync (not {mode}), or drop hierarchy"
        if mode == "semi_async" and srv.deadline_s is None:
            return "server.mode: semi_async closes each round at its deadline: set server.deadline_s"
        if mode == "async" and srv.over_selection != 1.0:
            return "server.over_selection applies to rounds; async mode has none: remove it or set server.mode: sync"
        if mode != "async" and (srv.concurrency is not None or srv.dispatch != "continuous"):
            return f"server.concurrency and server.dispatch apply to server.mode: async (this is {mode}): remove them"
        if mode != "async" and srv.max_tasks_per_version is not None:
            return f"server.max_tasks_per_version applies to server.mode: async (this is {mode}): remove it"
        if srv.buffer_size is not None and (mode != "async" or "sync" not in alg.modes):
            if mode != "async":
                return f"server.buffer_size applies to server.mode: async (this is {mode}): remove it"
            return (
                f"server.buffer_size applies to a round-based method run asynchronously; {alg.name} is asynchronous "
                "itself: give its own algorithm.buffer_size, or remove server.buffer_size"
            )
        return None

    @model_validator(mode="after")
    def _reports_what_the_method_reads(self) -> Scenario:
        if getattr(self.algorithm, "prefer", None) == "on_power" and "power" not in (self.fleet.reports or ()):
            raise ValueError(
                "algorithm.prefer: on_power picks devices that report being on power, and fleet.reports does not list "
                "power; add it (fleet: {reports: [power]}) or drop algorithm.prefer"
            )
        return self

    @model_validator(mode="after")
    def _hierarchy_fits(self) -> Scenario:
        if self.hierarchy is None:
            return self
        for i, g in enumerate(self.fleet.groups):
            if g.network.gateway is None:
                label = f" ({g.name})" if g.name else ""
                raise ValueError(
                    f"hierarchy: fleet.groups[{i}]{label} has no network.gateway, so its devices report to no "
                    "gateway; give it network.gateway naming a fleet.gateways entry, or drop hierarchy"
                )
        return self

    def task_epochs(self) -> int:
        """Epochs a device trains per task: ``local.epochs``, times ``hierarchy.device_rounds`` under a hierarchy."""
        return self.local.epochs * (self.hierarchy.device_rounds if self.hierarchy is not None else 1)

    def num_devices(self) -> int:
        return sum(self.fleet.counts())

    def warnings(self) -> list[str]:
        """What is allowed but probably not what was meant (``validate`` and ``run`` print these)."""
        out = []
        n = self.num_devices()
        if self.clients_per_round is not None and self.clients_per_round > n:
            out.append(
                f"clients_per_round: {self.clients_per_round} is more than the fleet's {n} devices, so every round "
                f"selects the whole fleet; lower it, or say so with clients_fraction: 1.0"
            )
        return out

    def selection_size(self) -> int:
        n = self.num_devices()
        if self.clients_per_round is not None:
            return min(self.clients_per_round, n)
        return max(1, math.ceil((self.clients_fraction or 0.1) * n))
