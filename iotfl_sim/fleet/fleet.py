"""The simulated fleet, kept as arrays (one entry per device) and advanced lazily.

Nothing ticks while a device is idle: idle energy is charged analytically up to the moment a
device's battery is read or spent, so a fleet of a million devices costs only what its active
devices do.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import heapq
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from iotfl_sim.core.catalog import FAILURE_REASONS
from iotfl_sim.core.errors import ScenarioError
from iotfl_sim.fleet import links as link_models
from iotfl_sim.fleet.bandwidth import link_transfer_end
from iotfl_sim.fleet.carbon import J_PER_KWH
from iotfl_sim.fleet.charging import plugged_when_online
from iotfl_sim.fleet.charging import schedules as charger_schedules
from iotfl_sim.fleet.harvest import Cell, Harvest, Step, depletion_time, walk
from iotfl_sim.fleet.irradiance import read_irradiance, solar_harvest
from iotfl_sim.fleet.lora import LoraPhy
from iotfl_sim.fleet.network import RADIO_PRESETS, RadioPreset, transfer_power
from iotfl_sim.fleet.observe import Observer
from iotfl_sim.fleet.periodic import Periodic, product_integral
from iotfl_sim.fleet.thermal import THERMAL_BOARDS, Phase, Thermal, cool, temperature_at, work_phases
from iotfl_sim.fleet.traces import load_table
from iotfl_sim.scenario.availability import TraceAvailability
from iotfl_sim.scenario.loader import ResolvedGroup
from iotfl_sim.scenario.profile import Battery, KernelRates, MeasuredSteps, Rates
from iotfl_sim.seeding import momentary, prime, stream

MB = 1024.0 * 1024.0
ENERGY_KINDS = ("compute", "radio", "idle")


@dataclass
class Fleet:
    groups: list[ResolvedGroup]
    seed: int
    group_of: np.ndarray  # int32 group index per device
    flops: np.ndarray  # sustained training FLOP/s
    mem_bw: np.ndarray  # achieved memory bandwidth, bytes/s (nan: no roofline, FLOPs / FLOP/s as before)
    op_overhead_s: np.ndarray  # seconds per dispatched operator
    jitter_sigma: np.ndarray
    jitter_dist: list[str]  # per group
    train_w: np.ndarray
    idle_w: np.ndarray
    tx_w: np.ndarray
    rx_w: np.ndarray
    capacity_j: np.ndarray  # inf = mains powered
    mem_free: np.ndarray  # declared typical free memory r_M, in memory units (bytes, or percent of the full model)
    mem_sigma: np.ndarray  # std of the fluctuation, same units
    down_bps: np.ndarray  # bits per second
    up_bps: np.ndarray
    rtt_s: np.ndarray
    memory_units: str = "mb"
    kernels: list[KernelRates] = field(default_factory=list)  # per group: per-kind operator costs
    measured_steps: list[MeasuredSteps] = field(default_factory=list)  # per group: real steps timed on the profile's machine
    # per group: the rates when training power depends on the work (fl.cost.energy), None for a constant train_w
    activity_power: list[Rates | None] = field(default_factory=list)
    class_names: list[str] = field(default_factory=list)
    harvests: list[tuple[Harvest, ...] | None] = field(default_factory=list)  # per group: its sources (chargers: many)
    source_of: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))  # which of its group's sources
    charger: list[bool] = field(default_factory=list)  # per group: the source is a charger on the grid
    charger_w: list[float] = field(default_factory=list)  # per group: the charger's power (0: none)
    cells: list[Cell] = field(default_factory=list)  # per group: the battery's chemistry
    tracked: list[bool] = field(default_factory=list)  # per group: the battery is a level (harvest, or a real cell)
    level: np.ndarray = field(default_factory=lambda: np.zeros(0))  # stored energy at settled_at (tracked groups)
    nominal_j: np.ndarray = field(default_factory=lambda: np.zeros(0))  # capacity before any ageing
    _drawn: dict[int, float] = field(default_factory=dict)  # stored energy drawn so far (ageing), where not 0
    radio: list[RadioPreset] = field(default_factory=list)  # per group
    preset_power: list[bool] = field(default_factory=list)  # per group: radio power from the preset
    lora: list[LoraPhy | None] = field(default_factory=list)  # per group: frames timed on air (radio lorawan)
    lora_sf: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))  # network.link: per-device SF (0: group's)
    out_of_range: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))  # network.link: no scheme closes
    distance_m: np.ndarray = field(default_factory=lambda: np.zeros(0))  # network.link: to the gateway (nan: no link)
    bandwidth: list[tuple[Periodic, Periodic] | None] = field(default_factory=list)  # per group: (up, down) bit/s
    bw_offset: np.ndarray = field(default_factory=lambda: np.zeros(0))  # where each device is in its trace, s
    link_jitter: np.ndarray = field(default_factory=lambda: np.zeros(0))
    link_loss: np.ndarray = field(default_factory=lambda: np.zeros(0))
    next_tx: np.ndarray = field(default_factory=lambda: np.zeros(0))  # duty cycle: earliest next transmission
    tail_until: np.ndarray = field(default_factory=lambda: np.zeros(0))  # end of the radio tail charged last
    ou_tau: np.ndarray = field(default_factory=lambda: np.zeros(0))  # >0: OU memory with this correlation time
    ou_value: np.ndarray = field(default_factory=lambda: np.zeros(0))  # last OU sample (nan: none yet)
    ou_time: np.ndarray = field(default_factory=lambda: np.zeros(0))
    ou_draws: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    thermals: list[Thermal | None] = field(default_factory=list)  # per group: heating and throttling (None: off)
    temp_c: np.ndarray = field(default_factory=lambda: np.zeros(0))  # with thermal groups: temperature at temp_at
    temp_at: np.ndarray = field(default_factory=lambda: np.zeros(0))
    last_clock: np.ndarray = field(default_factory=lambda: np.zeros(0))  # mean clock share of the last training (nan: none)
    switched: dict[int, tuple[str, Rates]] = field(default_factory=dict)  # devices out of their group's power mode
    mode_switches: int = 0
    carbon: Periodic | None = None  # the grid's carbon intensity, g/kWh (None: carbon not counted)
    grid: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))  # mains-powered devices (with carbon)
    # dynamic state
    energy: dict[str, np.ndarray] = field(default_factory=dict)  # J used, by kind
    settled_at: np.ndarray = field(default_factory=lambda: np.zeros(0))
    busy: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    tasks: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    completed: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    failures: dict[str, np.ndarray] = field(default_factory=dict)

    @classmethod
    def build(
        cls, groups: list[ResolvedGroup], seed: int, memory_units: str = "mb", base_dir: Path | None = None,
        carbon: Periodic | None = None,
    ) -> Fleet:
        """The fleet of ``groups``; ``base_dir``: the scenario's folder, where relative trace paths start;
        ``carbon``: the grid's intensity (g/kWh), to count the carbon of mains-powered devices."""
        with small_pages():
            fleet = cls._build(groups, seed, memory_units, base_dir)
        fleet._init_carbon(carbon)
        return fleet

    @classmethod
    def _build(cls, groups: list[ResolvedGroup], seed: int, memory_units: str, base_dir: Path | None) -> Fleet:
        counts = [g.count for g in groups]
        n = int(sum(counts))
        group_of = np.repeat(np.arange(len(groups), dtype=np.int32), counts)

        def per_device(values: list[float]) -> np.ndarray:
            return np.repeat(np.asarray(values, dtype=np.float64), counts)  # == values[group_of], groups contiguous

        rates = [g.profile.rates(g.power_mode) for g in groups]
        p = [g.profile for g in groups]
        mem_free, mem_sigma = memory_arrays(groups, seed, memory_units)
        fleet = cls(
            groups=groups,
            seed=seed,
            group_of=group_of,
            flops=per_device([r.flops for r in rates]),
            mem_bw=per_device([r.mem_bw if r.mem_bw is not None else np.nan for r in rates]),
            op_overhead_s=per_device([r.op_overhead_s for r in rates]),
            jitter_sigma=per_device([x.compute.jitter.sigma if x.compute.jitter.dist != "none" else 0.0 for x in p]),
            jitter_dist=[x.compute.jitter.dist for x in p],
            train_w=per_device([r.train_w for r in rates]),
            idle_w=per_device([x.power.idle_w for x in p]),
            tx_w=per_device([x.power.tx_w for x in p]),
            rx_w=per_device([x.power.rx_w for x in p]),
            capacity_j=per_device([x.battery.joules for x in p]),
            mem_free=mem_free,
            mem_sigma=mem_sigma,
            down_bps=per_device([x.link.down_mbps * 1e6 for x in p]),
            up_bps=per_device([x.link.up_mbps * 1e6 for x in p]),
            rtt_s=per_device([x.link.rtt_ms / 1000.0 for x in p]),
        )
        fleet.memory_units = memory_units
        fleet.kernels = [r.kernels for r in rates]  # per group
        fleet.measured_steps = [r.steps for r in rates]  # per group
        fleet.activity_power = [r if r.compute_w is not None else None for r in rates]
        fleet.radio = [RADIO_PRESETS[g.config.network.radio or g.profile.link.radio] for g in groups]
        fleet.preset_power = [g.config.network.power_model == "preset" for g in groups]
        fleet.lora = [_lora(i, g, fleet.radio[i]) for i, g in enumerate(groups)]
        fleet.link_jitter = per_device([g.config.network.jitter for g in groups])
        fleet.link_loss = per_device([g.config.network.loss for g in groups])
        link_models.apply(fleet, seed, base_dir)
        fleet.next_tx = np.zeros(n)
        fleet.tail_until = np.zeros(n)
        fleet.ou_tau = per_device([g.config.memory.tau_s if g.config.memory.process == "ou" else 0.0 for g in groups])
        fleet.ou_value = np.full(n, np.nan)
        fleet.ou_time = np.zeros(n)
        fleet.ou_draws = np.zeros(n, dtype=np.int64)
        fleet.energy = {k: np.zeros(n) for k in ENERGY_KINDS}
        fleet.settled_at = np.zeros(n)
        fleet._depleted_at = np.where(fleet.idle_w > 0, fleet.capacity_j / np.maximum(fleet.idle_w, 1e-300), np.inf)
        fleet.harvests = []
        fleet.source_of = np.zeros(n, dtype=np.int32)
        for i, g in enumerate(groups):
            sources, which = _sources(i, g, seed, base_dir, group_of)
            fleet.harvests.append(sources)
            if which is not None:
                fleet.source_of[group_of == i] = which
        fleet.charger = [g.config.harvest is not None and g.config.harvest.kind == "charger" for g in groups]
        fleet.charger_w = [g.config.harvest.power_w if c else 0.0 for g, c in zip(groups, fleet.charger, strict=True)]
        fleet.cells = [_cell(g.profile.battery) for g in groups]
        fleet.tracked = [
            bool(np.isfinite(g.profile.battery.joules)) and (h is not None or c != Cell(rated_w=c.rated_w))
            for g, h, c in zip(groups, fleet.harvests, fleet.cells, strict=True)
        ]
        fleet.level = fleet.capacity_j.copy()
        fleet.nominal_j = fleet.capacity_j.copy()
        for i, tracked in enumerate(fleet.tracked):
            if tracked:
                members = group_of == i
                cap, idle = float(fleet.capacity_j[members][0]), float(fleet.idle_w[members][0])
                sources = fleet.harvests[i] or (None,)
                ids = np.flatnonzero(members)
                by_source = np.argsort(fleet.source_of[ids], kind="stable")  # a source's devices: one slice each
                bounds = np.searchsorted(fleet.source_of[ids][by_source], np.arange(len(sources) + 1))
                for k, h in enumerate(sources):
                    same = ids[by_source[bounds[k] : bounds[k + 1]]]
                    fleet._depleted_at[same] = depletion_time(cap, cap, 0.0, idle, h, fleet.cells[i])
        fleet._init_thermal()
        fleet.busy = np.zeros(n, dtype=bool)
        fleet.tasks = np.zeros(n, dtype=np.int64)
        fleet.completed = np.zeros(n, dtype=np.int64)
        fleet.failures = {r: np.zeros(n, dtype=np.int64) for r in FAILURE_REASONS}
        classes = sorted({g.profile.device_class for g in groups})
        fleet.class_names = classes
        class_index = np.asarray([classes.index(g.profile.device_class) for g in groups], dtype=np.int64)
        fleet._init_ledger(class_index[group_of], len(classes))
        return fleet

    @functools.cached_property
    def observer(self) -> Observer:
        """The sampled physical state rows report (fleet/observe.py)."""
        return Observer(self)

    @property
    def n(self) -> int:
        return int(self.group_of.shape[0])

    # ------------------------------------------------------------ energy
    #
    # Per-device energy is stored up to ``settled_at``; after that a live device draws idle power.
    # Fleet-wide figures per device class are kept incrementally (``_used``, ``_idle_rate``,
    # ``_idle_settled``), and deaths are found from the depletion instants in (instant, device) order,
    # so the per-round figures cost O(classes + deaths) instead of O(devices). The instants known at
    # build time (idle draw only: a whole group at once) are one sorted array with a cursor; those set
    # later (after a task) go on a heap. Deaths due together are applied in one vectorised step that
    # adds into the per-class sums in the same order, with the same roundings, as one at a time.

    def _init_ledger(self, class_of: np.ndarray, num_classes: int) -> None:
        self.class_of = class_of
        self.num_classes = num_classes
        self.dead = np.zeros(self.n, dtype=bool)
        self._used = {k: np.zeros(num_classes) for k in ENERGY_KINDS}
        self._idle_rate = np.bincount(class_of, weights=self.idle_w, minlength=num_classes)
        self._idle_settled = np.zeros(num_classes)  # sum of idle_w * settled_at over live devices
        self._alive = np.bincount(class_of, minlength=num_classes).astype(np.int64)
        finite = np.flatnonzero(np.isfinite(self._depleted_at))
        order = np.argsort(self._depleted_at[finite], kind="stable")  # by (instant, device)
        self._due_d = finite[order]
        self._due_t = self._depleted_at[self._due_d]
        self._due_next = 0  # cursor into _due_t / _due_d
        self._heap: list[tuple[float, int]] = []  # instants set after build
        # tracked batteries whose depletion instant is still to find: (from when, surely alive before)
        self._unsolved: dict[int, tuple[float, float]] = {}
        self._deferred: dict[int, None] = {}  # devices deferred since the last _solve_due (a dict: each once)
        self._may_die: list[tuple[float, int, tuple[float, float]]] = []  # (bound, device, entry) of unsolved ones
        no_input = np.zeros(1)
        self._idle_drain = [  # per group: the fastest its idle draw empties a tracked battery (W of stored energy)
            -float(cell.stored_rates(no_input, g.profile.power.idle_w)[0]) if tracked else 0.0
            for g, cell, tracked in zip(self.groups, self.cells, self.tracked, strict=True)
        ]

    @property
    def depleted_at(self) -> np.ndarray:
        """When each device runs (or ran) dry (inf: never, at the draw it has now)."""
        if self._unsolved:
            self._solve_depletions()
        return self._depleted_at

    # ------------------------------------------------------------ heat
    #
    # A device's temperature is kept at its last training task's end (temp_c at temp_at) and cooled lazily, at idle
    # power, when the next task starts (fleet/thermal.py). Radio transfers count as idle for the heat.

    def _init_thermal(self) -> None:
        self.thermals = [_thermal(i, g) for i, g in enumerate(self.groups)]
        if not any(th is not None for th in self.thermals):
            return
        self.temp_c = np.full(self.n, np.nan)
        self.temp_at = np.zeros(self.n)
        self.last_clock = np.full(self.n, np.nan)
        for g, th in enumerate(self.thermals):
            if th is not None:
                members = self.group_of == g
                self.temp_c[members] = self.ambient_c(g, 0.0) + self.idle_w[members] * th.r_k_per_w  # idle, steady

    def ambient_c(self, g: int, t: float) -> float:
        """Group ``g``'s ambient temperature at ``t`` (°C)."""
        cfg = self.groups[g].config.thermal
        hour = (t / cfg.day_s * 24.0) % 24.0
        return cfg.ambient_c + 0.5 * cfg.daily_swing_c * math.cos(2.0 * math.pi * (hour - cfg.peak_hour) / 24.0)

    def temperature(self, d: int, t: float) -> float:
        """Device ``d``'s temperature at ``t``, idle since its last task (nan: no thermal model)."""
        th = self.thermals[self.group_of[d]] if self.thermals else None
        if th is None:
            return math.nan
        if t <= self.temp_at[d]:  # mid-task, or at its end: the temperature recorded then
            return float(self.temp_c[d])
        g = self.group_of[d]
        return cool(th, float(self.temp_c[d]), self.ambient_c(g, t), float(self.idle_w[d]), t - float(self.temp_at[d]))

    def hot_work(self, d: int, t0: float, work_s: float, power_w: float) -> tuple[Phase, ...] | None:
        """The phases of ``work_s`` seconds of full-clock training started at ``t0`` at ``power_w`` (full clock), as
        the device's heat slows it (None: no thermal model; the work takes ``work_s``)."""
        th = self.thermals[self.group_of[d]] if self.thermals else None
        if th is None or work_s <= 0.0:
            return None
        idle = float(self.idle_w[d])
        amb = self.ambient_c(self.group_of[d], t0)
        return work_phases(th, self.temperature(d, t0), amb, idle, max(power_w, idle), work_s)

    def cooled_to(self, d: int, t: float, phases: tuple[Phase, ...], t0: float) -> float:
        """Record device ``d``'s temperature at ``t``, along ``phases`` started at ``t0``; returns it."""
        c = temperature_at(phases, self.thermals[self.group_of[d]].tau_s, t - t0)
        self.temp_c[d], self.temp_at[d] = c, t
        done = sum(p.clock * max(0.0, min(p.duration_s, t - t0 - p.start_s)) for p in phases)
        self.last_clock[d] = done / (t - t0) if t > t0 else 1.0
        return c

    # ------------------------------------------------------------ carbon
    #
    # Mains-powered devices draw from the grid: their carbon is their power x the intensity, integrated over time
    # (C(t), the intensity's integral, in g/kWh x s). Charged activities add power x (C(end) - C(start)); idle draw
    # is kept lazily as energy is: per class, sum(idle_w) x C(t) - sum(idle_w x C(settled_at)). A battery's own
    # energy is not counted (its charge came from elsewhere).

    def _init_carbon(self, carbon: Periodic | None) -> None:
        self.carbon = carbon
        self._charger_carbon_on = [carbon is not None and c for c in self.charger]  # per group
        if carbon is None:
            return
        self.grid = ~np.isfinite(self.capacity_j)
        k = self.num_classes
        self._carbon_used = np.zeros(k)
        self._idle_rate_grid = np.bincount(self.class_of, weights=np.where(self.grid, self.idle_w, 0.0), minlength=k)
        # sum of idle_w x C(settled_at) over mains devices, every settled_at 0 now
        self._idle_settled_c = self._idle_rate_grid * carbon.cumulative(0.0)

    def _grid_draw(self, d: int, power_w: float, t0: float, t1: float) -> float | None:
        """Count the carbon of ``power_w`` drawn by mains-powered ``d`` over ``[t0, t1]``; returns the intensity's
        integral over the span (None where nothing was counted), which ``_move_settled`` reuses."""
        if self.grid[d] and t1 > t0:
            integral = self.carbon.integral(t0, t1)
            self._carbon_used[self.class_of[d]] += power_w * integral / J_PER_KWH
            return integral
        return None

    def _grid_lump(self, d: int, t: float, joules: float) -> None:
        if self.grid[d]:
            self._carbon_used[self.class_of[d]] += joules * self.carbon.value(t) / J_PER_KWH

    def _charger_carbon(self, d: int, g: int, h: Harvest, level: float, t0: float, t1: float, draw_w: float,
                        step: Step) -> None:
        """Count the grid energy device ``d``'s charger ``h`` delivered over ``[t0, t1]``, the battery going from
        ``level`` to ``step``'s: what ran the device while plugged in, min(charger, draw), plus the energy stored,
        before its charging losses; priced at the grid's mean intensity over the span's plugged-in time."""
        end = t1 if step.dead_at is None else step.dead_at
        plugged_j = h.integral(t0, end)  # the charger's full power x its time plugged in
        if plugged_j <= 0.0:
            return
        power = self.charger_w[g]
        stored = max(step.level - level + step.drawn_j, 0.0)
        grid_j = stored / self.cells[g].charge_efficiency + min(power, draw_w) * plugged_j / power
        intensity = product_integral(h, self.carbon, t0, end) / plugged_j
        self._carbon_used[self.class_of[d]] += grid_j * intensity / J_PER_KWH

    def carbon_g(self, t: float) -> float:
        """Grams of CO2(eq) the mains-powered devices have drawn from the grid up to ``t`` (0 without a carbon
        intensity)."""
        if self.carbon is None:
            return 0.0
        idle = (self._idle_rate_grid * self.carbon.cumulative(t) - self._idle_settled_c) / J_PER_KWH
        return float(np.sum(self._carbon_used + idle))

    def _add(self, d: int, kind: str, joules: float) -> None:
        self.energy[kind][d] += joules
        self._used[kind][self.class_of[d]] += joules

    def _move_settled(self, d: int, t: float, intensity_integral: float | None = None) -> None:
        """Move ``d``'s settled instant to ``t``; ``intensity_integral``: the carbon intensity's integral from the
        settled instant to ``t`` where the caller has it."""
        if not self.dead[d]:
            self._idle_settled[self.class_of[d]] += self.idle_w[d] * (t - self.settled_at[d])
            if self.carbon is not None and self.grid[d]:
                if intensity_integral is None:
                    intensity_integral = self.carbon.integral(self.settled_at[d], t)
                self._idle_settled_c[self.class_of[d]] += self.idle_w[d] * intensity_integral
        self.settled_at[d] = t

    def _set_depleted(self, d: int, when: float) -> None:
        self._unsolved.pop(d, None)
        self._depleted_at[d] = when
        if math.isfinite(when):
            heapq.heappush(self._heap, (float(when), d))

    # A tracked battery's depletion instant (a walk of its source to the end) is found only when something needs it:
    # a task's phases follow each other at once, and each would otherwise find one that the next replaces, and a
    # battery that lasts days need not be walked to its end at every round. The level and the instant it holds at
    # are those of the last activity (``_unsolved``; ``_depleted_at`` is inf meanwhile, so no earlier instant on the
    # heap matches it). Nothing can run a battery dry faster than its idle draw with nothing coming in: it holds
    # charge at least up to the bound kept beside that instant (half the time that rate would take, margin enough
    # for any rounding of the clock), and a question about an instant before it is answered without solving.
    # ``advance_to`` solves those that may die by its instant (a heap of those bounds), so the instants, and the
    # order deaths are applied in, are those found at once.

    def _defer_depletion(self, d: int, t: float) -> None:
        drain = self._idle_drain[self.group_of[d]]
        self._unsolved[d] = (t, math.inf if drain <= 0.0 else t + float(self.level[d]) / (2.0 * drain))
        self._depleted_at[d] = math.inf
        self._deferred[d] = None

    def _solve_depletion(self, d: int) -> None:
        entry = self._unsolved.get(d)
        if entry is not None:
            g = self.group_of[d]
            self._set_depleted(
                d,
                depletion_time(self.level[d], self.capacity_j[d], entry[0], self.idle_w[d], self.source(d), self.cells[g]),
            )

    def _solve_depletions(self) -> None:
        for d in list(self._unsolved):
            self._solve_depletion(d)
        self._deferred.clear()
        self._may_die.clear()

    def _solve_due(self, t: float) -> None:
        """Solve every deferred depletion that may fall at or before ``t``: after it, an unsolved device is alive
        at ``t``."""
        unsolved, heap = self._unsolved, self._may_die
        for d in self._deferred:  # since the last call: their bounds onto the heap (once per device and call)
            entry = unsolved.get(d)
            if entry is not None:
                heapq.heappush(heap, (entry[1], d, entry))
        self._deferred.clear()
        while heap and heap[0][0] <= t:
            _, d, entry = heapq.heappop(heap)
            if unsolved.get(d) is entry:  # else deferred again since (a new entry) or solved
                self._solve_depletion(d)

    def depleted_by(self, t: float) -> np.ndarray:
        """Each device's depletion instant where it is at or before ``t``, inf where it is later (or never)."""
        self._solve_due(t)
        return self._depleted_at  # an unsolved device's entry is inf, and it is alive at t

    def _kill_if_due(self, d: int, t: float) -> None:
        entry = self._unsolved.get(d)
        if entry is not None:
            if t < entry[1]:  # surely alive at t
                return
            self._solve_depletion(d)
        dep = self._depleted_at[d]
        if self.dead[d] or dep > t:
            return
        if dep > self.settled_at[d]:
            self._add(d, "idle", self.idle_w[d] * (dep - self.settled_at[d]))
            self._move_settled(d, dep)
        c = self.class_of[d]
        self.dead[d] = True
        self._idle_rate[c] -= self.idle_w[d]
        self._idle_settled[c] -= self.idle_w[d] * self.settled_at[d]
        self._alive[c] -= 1

    _BATCH_KILLS = 64  # this many deaths due together or more: one vectorised step

    def advance_to(self, t: float) -> None:
        """Process every death up to ``t`` (idle draw included) so fleet figures at ``t`` are exact."""
        if self._unsolved:
            self._solve_due(t)
        a = self._due_next
        b = a if a >= self._due_t.shape[0] or self._due_t[a] > t else int(np.searchsorted(self._due_t, t, side="right"))
        if b - a < self._BATCH_KILLS:
            while a < b or (self._heap and self._heap[0][0] <= t):  # merge the two, by (instant, device)
                if a < b and (not self._heap or (float(self._due_t[a]), int(self._due_d[a])) <= self._heap[0]):
                    dep, d = float(self._due_t[a]), int(self._due_d[a])
                    a += 1
                    self._due_next = a
                else:
                    dep, d = heapq.heappop(self._heap)
                if dep == self._depleted_at[d]:
                    self._kill_if_due(d, t)
            return
        popped = []
        while self._heap and self._heap[0][0] <= t:
            popped.append(heapq.heappop(self._heap))
        dep, dev = self._due_t[a:b], self._due_d[a:b]
        self._due_next = b
        if popped:
            dep = np.concatenate([dep, np.array([p[0] for p in popped])])
            dev = np.concatenate([dev, np.array([p[1] for p in popped], dtype=np.int64)])
            order = np.lexsort((dev, dep))
            dep, dev = dep[order], dev[order]
        self._kill_many(dep, dev, repeats=bool(popped))

    def _kill_many(self, dep: np.ndarray, dev: np.ndarray, repeats: bool) -> None:
        """``_kill_if_due`` for each (instant, device) in order, vectorised: stale entries (the device's
        instant has moved) and devices already dead are skipped, a device listed twice (possible only
        with ``repeats``) dies once."""
        live = (dep == self._depleted_at[dev]) & ~self.dead[dev]
        dep, dev = dep[live], dev[live]
        if repeats:
            _, first = np.unique(dev, return_index=True)
            if first.size < dev.size:
                keep = np.sort(first)
                dep, dev = dep[keep], dev[keep]
        if not dev.size:
            return
        w, settled = self.idle_w[dev], self.settled_at[dev]
        late = dep > settled  # idle draw still to charge, up to the instant of death
        x = np.where(late, w * (dep - settled), 0.0)
        self.energy["idle"][dev[late]] += x[late]
        settled = np.where(late, dep, settled)
        self.settled_at[dev] = settled
        self.dead[dev] = True
        cls = self.class_of[dev]
        for c in np.unique(cls).tolist():
            m = cls == c
            xs, lt, ws = x[m], late[m], w[m]
            # the scalar path's sequence on each class sum, accumulated left to right
            self._used["idle"][c] = _running_sum(self._used["idle"][c], xs[lt])
            steps = np.empty(2 * xs.size)
            steps[0::2] = xs  # _move_settled: + w (dep - settled), where late
            steps[1::2] = -(ws * settled[m])  # death: - w settled
            keep = np.ones(steps.size, dtype=bool)
            keep[0::2] = lt
            self._idle_settled[c] = _running_sum(self._idle_settled[c], steps[keep])
            self._idle_rate[c] = _running_sum(self._idle_rate[c], -ws)
            self._alive[c] -= int(m.sum())

    def used(self, d: int) -> float:
        return float(self.energy["compute"][d] + self.energy["radio"][d] + self.energy["idle"][d])

    def settle(self, d: int, t: float) -> None:
        """Charge idle draw from the last settled instant up to ``t`` (never past depletion)."""
        self._kill_if_due(d, t)
        last = self.settled_at[d]
        if self.dead[d] or t <= last:
            return
        g = self.group_of[d]
        if self.tracked[g]:
            self._step(d, g, float(last), t, float(self.idle_w[d]))
        self._add(d, "idle", self.idle_w[d] * (t - last))
        integral = None if self.carbon is None else self._grid_draw(d, self.idle_w[d], last, t)
        self._move_settled(d, t, integral)

    def _step(self, d: int, g: int, t0: float, t1: float, draw_w: float) -> Step:
        """Move device ``d``'s tracked battery from ``t0`` to ``t1`` at ``draw_w`` (group ``g``), its charger's grid
        energy and its ageing counted; returns the walk's step. Python floats in: numpy scalars cost several
        times as much in the walk's arithmetic, for the same IEEE results."""
        sources = self.harvests[g]
        h = None if sources is None else sources[self.source_of[d]]
        level = float(self.level[d])
        cell = self.cells[g]
        step = walk(level, float(self.capacity_j[d]), t0, t1, draw_w, h, cell)
        if self._charger_carbon_on[g]:
            self._charger_carbon(d, g, h, level, t0, t1, draw_w, step)
        level = step.level
        if cell.fade_per_cycle > 0.0 and step.drawn_j != 0.0:
            level = min(level, self._aged(d, cell.fade_per_cycle, step.drawn_j))
        self.level[d] = level
        return step

    def source(self, d: int) -> Harvest | None:
        """Device ``d``'s power source (None: none)."""
        sources = self.harvests[self.group_of[d]]
        return None if sources is None else sources[self.source_of[d]]

    def alive(self, d: int, t: float) -> bool:
        entry = self._unsolved.get(d)
        if entry is not None:
            if t < entry[1]:
                return True
            self._solve_depletion(d)
        return bool(self._depleted_at[d] > t)

    def spend(self, d: int, t0: float, duration: float, power_w: float, kind: str) -> float | None:
        """Run an activity of ``duration`` s drawing ``power_w`` from ``t0``.

        Returns None if the battery lasts, else the instant it runs dry (the device is then offline
        for good). Idle draw is charged up to ``t0``. ``compute`` power is the whole board's and
        replaces idle power; ``radio`` power comes on top of idle power (the board stays awake while
        its radio sends or receives). So energy is the sum of power x time exactly.
        """
        self.settle(d, t0)
        if self.dead[d]:
            return float(max(t0, self._depleted_at[d]))
        base = self.idle_w[d] if kind == "radio" else 0.0
        total_w = power_w + base
        if self.tracked[self.group_of[d]]:
            return self._spend_tracked(d, t0, duration, power_w, base, kind)
        remaining = self.capacity_j[d] - self.used(d)
        need = total_w * duration
        if need <= remaining or not np.isfinite(remaining):
            self._add(d, kind, power_w * duration)
            self._add(d, "idle", base * duration)
            end = t0 + duration
            integral = None
            if self.carbon is not None:
                integral = self._grid_draw(d, total_w, t0, end)
                if integral is not None and self.settled_at[d] != t0:
                    integral = None  # settled after t0 (an activity overlapping one before): its own span
            self._move_settled(d, end, integral)
            left = remaining - need
            idle = float(self.idle_w[d])  # Python floats: a tiny draw gives inf without numpy's overflow warning
            self._set_depleted(d, end + float(left) / idle if idle > 0 else np.inf)
            return None
        dead = t0 + (remaining / total_w if total_w > 0 else 0.0)
        share = power_w / total_w if total_w > 0 else 1.0
        self._add(d, kind, max(remaining, 0.0) * share)
        self._add(d, "idle", max(remaining, 0.0) * (1.0 - share))
        self._move_settled(d, dead)
        self._set_depleted(d, dead)
        self._kill_if_due(d, dead)
        return float(dead)

    def _spend_tracked(self, d: int, t0: float, duration: float, power_w: float, base: float, kind: str):
        step = self._step(d, self.group_of[d], t0, t0 + duration, float(power_w + base))
        dead = step.dead_at
        end = t0 + duration if dead is None else dead
        self._add(d, kind, power_w * (end - t0))
        self._add(d, "idle", base * (end - t0))
        self._move_settled(d, end)
        if dead is None:
            self._defer_depletion(d, end)
            return None
        self._set_depleted(d, dead)
        self._kill_if_due(d, dead)
        return float(dead)

    def charge_lump(self, d: int, t: float, joules: float, kind: str) -> float | None:
        """Charge energy that overlaps other activity (an LTE tail); returns the depletion instant if it empties the battery."""
        self.settle(d, t)
        if self.dead[d]:
            return float(max(t, self._depleted_at[d]))
        g = self.group_of[d]
        if self.tracked[g]:
            cell = self.cells[g]
            stored = joules / cell.discharge_efficiency  # a lump has no rate: no Peukert effect
            self.level[d] = min(self.level[d] - stored, self.capacity_j[d])  # a refund (< 0) never overfills
            if self.level[d] > 0:
                self._add(d, kind, joules)
                self._age(d, g, stored)  # a refund (< 0) takes back the cycles its tail was charged
                self._defer_depletion(d, t)
                return None
            self._add(d, kind, joules + self.level[d] * cell.discharge_efficiency)
            self._age(d, g, stored + float(self.level[d]))
            self.level[d] = 0.0
            self._set_depleted(d, t)
            self._kill_if_due(d, t)
            return t
        remaining = self.capacity_j[d] - self.used(d)
        if joules <= remaining or not np.isfinite(remaining):
            self._add(d, kind, joules)
            if self.carbon is not None:
                self._grid_lump(d, t, joules)
            left = remaining - joules
            idle = float(self.idle_w[d])
            self._set_depleted(d, float(self.settled_at[d]) + float(left) / idle if idle > 0 else np.inf)
            return None
        self._add(d, kind, max(remaining, 0.0))
        self._set_depleted(d, t)
        self._kill_if_due(d, t)
        return t

    def cut_tail(self, d: int, t: float, tail_w: float) -> None:
        """A transfer starting at ``t`` inside the tail charged after the last one ends that tail there (the radio
        stays connected and sends again): refund the part of the tail not spent, so one connected period is
        charged one tail, after its last transfer."""
        left = self.tail_until[d] - t
        if left > 0 and not self.dead[d]:
            self.tail_until[d] = t
            self.charge_lump(d, t, -tail_w * left, "radio")

    def energy_total(self, t: float) -> np.ndarray:
        """Energy used by every device up to ``t`` (J), idle draw included, without mutating state (O(devices))."""
        with small_pages():  # two arrays of the fleet's size instead of six (same operations, same bits)
            used = self.energy["compute"] + self.energy["radio"]
            used += self.energy["idle"]
            idle_more = np.minimum(self.depleted_by(t), t)
            idle_more -= self.settled_at
            np.clip(idle_more, 0.0, None, out=idle_more)
            idle_more *= self.idle_w
            used += idle_more
        return used

    def class_energy(self, t: float) -> dict[str, np.ndarray]:
        """Energy by kind and device class up to ``t`` (J), in O(classes + deaths since the last call)."""
        self.advance_to(t)
        out = {k: v.copy() for k, v in self._used.items()}
        out["idle"] += t * self._idle_rate - self._idle_settled
        return out

    def digest(self) -> list[float]:
        """Figures of the fleet that a faithful replay reproduces exactly (a resume compares them): the energy
        ledger, the idle accounts, the living devices per class, and the task counters."""
        ledger = [float(x) for k in sorted(self._used) for x in self._used[k]]
        if self.carbon is not None:  # only then: a checkpoint of a run without carbon keeps its digest
            ledger += [float(x) for x in self._carbon_used]
        counts = [float(a.sum()) for a in (self.busy, self.tasks, self.completed, *self.failures.values())]
        if self.mode_switches:  # only then: runs that never switch keep their digests
            counts.append(float(self.mode_switches))
        return [*ledger, *map(float, self._idle_settled), *map(float, self._alive), *counts]

    def alive_count(self, t: float) -> int:
        self.advance_to(t)
        return int(self._alive.sum())

    def alive_mask(self, t: float, devices: np.ndarray | None = None) -> np.ndarray:
        """Which devices (all, or those of the index array ``devices``) still have energy at ``t``."""
        dep = self.depleted_by(t)
        return dep > t if devices is None else dep[devices] > t

    def energy_left(self, t: float, devices: np.ndarray) -> np.ndarray:
        """Battery energy (J) the index array ``devices`` have left at ``t``: capacity minus every joule
        used, idle draw up to ``t`` included (inf: mains powered; 0 once depleted). A harvesting device's
        figure is its battery level at its last settled instant (harvest and idle draw since then not
        counted). Reads state only."""
        used = self.energy["compute"][devices] + self.energy["radio"][devices] + self.energy["idle"][devices]
        dep = self.depleted_by(t)[devices]
        idle_more = np.clip(np.minimum(dep, t) - self.settled_at[devices], 0.0, None)
        left = self.capacity_j[devices] - (used + idle_more * self.idle_w[devices])
        tracked = np.asarray(self.tracked, dtype=bool)
        if tracked.any():
            left = np.where(tracked[self.group_of[devices]], self.level[devices], left)
        return np.where(dep > t, np.maximum(left, 0.0), 0.0)

    def battery_left(self, d: int) -> float:
        """Device ``d``'s own reading of its battery at its last settled instant (J; inf: mains powered): its stored
        energy, or capacity minus energy used for a battery that is no level."""
        if self.tracked[self.group_of[d]]:
            return float(self.level[d])
        return float(self.capacity_j[d] - self.used(d))

    def reported_charge(self) -> np.ndarray:
        """Every device's state of charge (0-1 of its capacity) at its last settled instant, the last time it was
        in touch (1 for mains-powered devices, 0 once depleted): what devices that report it have told the server."""
        with np.errstate(invalid="ignore", divide="ignore"):
            used = self.energy["compute"] + self.energy["radio"] + self.energy["idle"]
            left = self.capacity_j - used
            tracked = np.asarray(self.tracked, dtype=bool)
            if tracked.any():
                left = np.where(tracked[self.group_of], self.level, left)
            soc = np.where(np.isfinite(self.capacity_j), left / self.capacity_j, 1.0)
        soc[self.dead] = 0.0
        return np.clip(np.nan_to_num(soc, nan=0.0), 0.0, 1.0)

    def on_power(self, t: float) -> np.ndarray:
        """Which devices run on power from outside at ``t``: mains-powered ones, and those whose charger is plugged
        in (a solar panel does not count: it is no supply a method can rely on)."""
        out = ~np.isfinite(self.capacity_j)
        for g, sources in enumerate(self.harvests):
            if sources is not None and self.charger[g]:
                members = np.flatnonzero(self.group_of == g)
                plugged = np.asarray([h.value(t) > 0.0 for h in sources])
                out[members] = plugged[self.source_of[members]]
        return out

    def _age(self, d: int, g: int, drawn_j: float) -> None:
        """Capacity fade: ``fade_per_cycle`` of the nominal capacity per equivalent full cycle drawn."""
        fade = self.cells[g].fade_per_cycle
        if fade <= 0.0 or drawn_j == 0.0:
            return
        cap = self._aged(d, fade, drawn_j)
        if self.level[d] > cap:
            self.level[d] = cap

    def _aged(self, d: int, fade: float, drawn_j: float) -> float:
        """Count ``drawn_j`` more stored energy drawn from ``d``'s battery (< 0: the unspent part of an LTE tail given
        back) and fade its capacity; returns the new capacity. The energy drawn so far is kept per device in a dict:
        read and written at every activity, where a numpy element costs several times a dict's."""
        drawn = self._drawn.get(d, 0.0) + drawn_j
        if drawn < 0.0:
            drawn = 0.0
        self._drawn[d] = drawn
        nominal = float(self.nominal_j[d])
        cap = nominal * max(0.0, 1.0 - fade * drawn / nominal)
        self.capacity_j[d] = cap
        return cap

    def task_energy(self, devices: np.ndarray) -> np.ndarray:
        """Energy (J) the index array ``devices`` have drawn for tasks so far: compute and radio, no idle."""
        return self.energy["compute"][devices] + self.energy["radio"][devices]

    # ------------------------------------------------------------ draws

    def sample_free_memory(self, d: int, t: float, rnd: int) -> float:
        """Free memory of device ``d`` when a task arrives at ``t`` (memory units).

        Gaussian (FlexFL): r = r_M - |u|, u ~ N(0, sigma^2), drawn per device and round.
        OU: the process's value at ``t``, advanced exactly from its last sample.
        """
        if self.ou_tau[d] > 0:
            return self._ou_advance(d, t)
        sigma = self.mem_sigma[d]
        if sigma <= 0:
            return float(self.mem_free[d])
        u = momentary(self.seed, "memory", d, rnd).normal(0.0, sigma)
        return float(max(0.0, self.mem_free[d] - abs(u)))

    PRIME_FROM = 8  # a batch of fewer tasks than this draws one by one (priming has a fixed cost of ~60 us)

    def prime_draws(self, devices: list[int], rnd: int) -> None:
        """Compute ahead, for a round's tasks on ``devices``, the states of the streams their memory and compute-jitter
        draws will use (``seeding.prime``): the same draws, several times cheaper than one by one."""
        if len(devices) < self.PRIME_FROM:
            return
        ids = np.asarray(devices, dtype=np.int64)
        memory = ids[(self.mem_sigma[ids] > 0) & ~(self.ou_tau[ids] > 0)]
        if memory.size:
            prime(self.seed, "memory", memory, rnd)
        jittered = ids[self.jitter_sigma[ids] > 0]
        if jittered.size:
            prime(self.seed, "compute", jittered, rnd)

    def max_free_memory(self) -> np.ndarray:
        """The most free memory each device can ever have when a task arrives (memory units): the declared
        r_M for Gaussian memory (r_M - |u| never exceeds it) and for a fixed one; unbounded (inf) for an OU
        process with a spread, whose value is Gaussian at every instant."""
        ou = (self.ou_tau > 0) & (self.mem_sigma > 0)
        return np.where(ou, np.inf, self.mem_free)

    def _ou_advance(self, d: int, t: float) -> float:
        mean, sd, tau = self.mem_free[d], self.mem_sigma[d], self.ou_tau[d]
        rng = momentary(self.seed, "memory_ou", d, int(self.ou_draws[d]))
        self.ou_draws[d] += 1
        if np.isnan(self.ou_value[d]):
            x = mean + sd * rng.standard_normal()  # stationary start
        else:
            decay = np.exp(-(t - self.ou_time[d]) / tau)
            x = mean + (self.ou_value[d] - mean) * decay + sd * np.sqrt(1.0 - decay * decay) * rng.standard_normal()
        self.ou_value[d], self.ou_time[d] = x, t
        return float(max(0.0, x))

    def memory_shortfall(self, d: int, t0: float, duration: float, need: float) -> float | None:
        """With OU memory: the first instant in [t0, t0 + duration] at which free memory falls below
        ``need`` (None if it never does, and always None for Gaussian memory, which holds per task).

        The path is sampled every min(tau / 20, duration / 50) seconds, exactly in distribution.
        """
        tau = self.ou_tau[d]
        if tau <= 0 or duration <= 0:
            return None
        step = min(tau / 20.0, duration / 50.0)
        t = t0
        while t < t0 + duration:
            t = min(t + step, t0 + duration)
            if self._ou_advance(d, t) < need:
                return t
        return None

    # ------------------------------------------------------------ power modes
    #
    # A device trains in its group's mode until a task asks for another (a method's Assignment.power_mode, or the
    # group's power_policy); then its per-device rates are the new mode's, and the few devices that switched keep
    # their Rates in ``switched`` (a dict: a million devices in their group's mode cost nothing).

    def power_mode(self, d: int) -> str | None:
        """Device ``d``'s current power mode (None: its profile has none)."""
        got = self.switched.get(d)
        if got is not None:
            return got[0]
        g = self.groups[self.group_of[d]]
        return g.power_mode or g.profile.compute.default_mode

    def set_power_mode(self, d: int, name: str) -> None:
        """Put device ``d`` in its profile's power mode ``name`` (a KeyError for a mode the profile lacks)."""
        g = self.groups[self.group_of[d]]
        r = g.profile.rates(name)
        self.switched[d] = (name, r)
        self.mode_switches += 1
        self.flops[d] = r.flops
        self.mem_bw[d] = r.mem_bw if r.mem_bw is not None else np.nan
        self.op_overhead_s[d] = r.op_overhead_s
        self.train_w[d] = r.train_w

    def activity_terms(self, d: int) -> Rates | None:
        """The activity-dependent training power terms of device ``d``'s mode (None: a constant train_w)."""
        got = self.switched.get(d)
        if got is not None:
            return got[1] if got[1].compute_w is not None else None
        return self.activity_power[self.group_of[d]] if self.activity_power else None

    def roofline(self, d: int) -> tuple[float, float, float, KernelRates, MeasuredSteps] | None:
        """(FLOP/s, bytes/s, seconds per op, per-kind kernel costs, measured steps) of device ``d`` for the
        per-operator roofline, or None when its profile has no memory bandwidth (then time is FLOPs / FLOP/s)."""
        bw = self.mem_bw[d]
        if np.isnan(bw):
            return None
        kernels = self.kernels[self.group_of[d]] if self.kernels else ()
        steps = self.measured_steps[self.group_of[d]] if self.measured_steps else ()
        got = self.switched.get(d)
        if got is not None:
            kernels, steps = got[1].kernels, got[1].steps
        return float(self.flops[d]), float(bw), float(self.op_overhead_s[d]), kernels, steps

    def jittered(self, d: int, base: float, rnd: int) -> float:
        """``base`` seconds times the device's compute jitter for round ``rnd``."""
        sigma = self.jitter_sigma[d]
        if sigma <= 0:
            return float(base)
        rng = momentary(self.seed, "compute", d, rnd)
        dist = self.jitter_dist[self.group_of[d]]
        if dist == "lognormal":
            return float(base * rng.lognormal(0.0, sigma))
        if dist == "exponential":
            return float(base * rng.exponential(1.0))
        return float(base * max(0.05, rng.normal(1.0, sigma)))

    def phy(self, d: int) -> LoraPhy | None:
        """Device ``d``'s LoRa PHY (its own spreading factor under ``network.link``), or None."""
        phy = self.lora[self.group_of[d]]
        if phy is None or not self.lora_sf.size or self.lora_sf[d] in (0, phy.sf):
            return phy
        return _with_sf(phy, int(self.lora_sf[d]))

    def traced_link(self, d: int, up: bool) -> tuple[Periodic, float] | None:
        """Device ``d``'s rate signal (bit/s) one way and where it is in it (its offset, s), or None: a fixed rate."""
        links = self.bandwidth[self.group_of[d]] if self.bandwidth else None
        if links is None:
            return None
        return links[0] if up else links[1], float(self.bw_offset[d]) if self.bw_offset.size else 0.0

    def air_time(self, d: int, up: bool, t: float, bits: float) -> float:
        """Seconds to move ``bits`` from ``t`` over device ``d``'s own link: at its fixed rate, or along its bandwidth
        trace (outages waited out)."""
        traced = self.traced_link(d, up)
        if traced is None:
            return bits / float(self.up_bps[d] if up else self.down_bps[d])
        link, shift = traced
        return link_transfer_end(link, t + shift, bits) - (t + shift)

    def rate_for(self, d: int, up: bool, t: float, bits: float) -> float:
        """Device ``d``'s mean link rate (bit/s) for ``bits`` sent from ``t``: its fixed rate, or what its trace gives
        over that transfer."""
        if self.traced_link(d, up) is None:
            return float(self.up_bps[d] if up else self.down_bps[d])
        return bits / max(self.air_time(d, up, t, bits), 1e-12)

    def radio_power(self, d: int, up: bool, throughput_bps: float) -> float:
        """Radio power (W, on top of idle) of device ``d`` while sending or receiving."""
        g = self.group_of[d]
        if self.preset_power[g]:
            return transfer_power(self.radio[g], up, throughput_bps)
        return float(self.tx_w[d] if up else self.rx_w[d])



try:  # numpy >= 2
    from numpy._core.multiarray import _set_madvise_hugepage
except ImportError:  # pragma: no cover - numpy 1.x
    try:
        from numpy.core.multiarray import _set_madvise_hugepage
    except ImportError:
        _set_madvise_hugepage = None


@contextlib.contextmanager
def small_pages() -> Iterator[None]:
    """Allocate the arrays made inside without asking the kernel for transparent huge pages.

    numpy marks every array of 4 MB or more MADV_HUGEPAGE; under THP ``madvise`` a first touch then
    zeroes (and may first compact) 2 MB. A fleet's per-device arrays are written whole once at build
    and then touched a few devices at a time, where 4 KB pages are as fast and far cheaper to fault:
    building 10M devices took 7.8 s of kernel time with huge pages, 2.4 s without (one run each,
    load ~4). Only the setting during the block changes; the caller's is restored.
    """
    if _set_madvise_hugepage is None:
        yield
        return
    before = _set_madvise_hugepage(False)
    try:
        yield
    finally:
        _set_madvise_hugepage(before)


def _running_sum(start: float, terms: np.ndarray) -> float:
    """``start + terms[0] + terms[1] + ...`` added left to right (as a loop of ``+=`` would)."""
    if not terms.size:
        return start
    acc = np.empty(terms.size + 1)
    acc[0] = start
    acc[1:] = terms
    return float(np.add.accumulate(acc)[-1])


def _sources(
    i: int, g: ResolvedGroup, seed: int, base_dir: Path | None, group_of: np.ndarray
) -> tuple[tuple[Harvest, ...] | None, np.ndarray | None]:
    """Group ``i``'s power sources, and which one each of its devices has (None: all the first)."""
    cfg = g.config.harvest
    if cfg is None or not np.isfinite(g.profile.battery.joules):
        return None, None
    if cfg.kind == "charger" and cfg.plugged == "online":
        avail = g.config.availability
        if not isinstance(avail, TraceAvailability):
            raise ScenarioError(
                f"fleet.groups[{i}].harvest.plugged: online follows the group's availability trace, and its "
                f"availability is {avail.kind}; give it availability: {{kind: trace, ...}} or drop plugged"
            )
        members = np.flatnonzero(group_of == i)
        return plugged_when_online(cfg.power_w, load_table(avail, base_dir), members, avail.mapping, seed)
    if cfg.kind == "charger":
        return charger_schedules(cfg, seed, i, g.count)
    return (_harvest(g, base_dir),), None


def _harvest(g: ResolvedGroup, base_dir: Path | None) -> Harvest:
    cfg = g.config.harvest
    if cfg.kind == "solar":
        path = Path(cfg.trace).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        trace = read_irradiance(path, cfg.format, cfg.column)
        return solar_harvest(trace, cfg.area_m2, cfg.efficiency, cfg.start_hour * 3600.0)
    hour = cfg.day_s / 24.0
    return Harvest.window(cfg.power_w, cfg.start_hour * hour, cfg.hours * hour, cfg.day_s)


def _lora(i: int, g: ResolvedGroup, radio: RadioPreset) -> LoraPhy | None:
    cfg = g.config.network.lora
    if cfg is None:
        return None
    name = g.config.network.radio or g.profile.link.radio
    if radio is not RADIO_PRESETS["lorawan"]:
        raise ScenarioError(
            f"fleet.groups[{i}].network.lora: the group's radio is {name}, not lorawan; set network.radio: lorawan "
            "or drop network.lora"
        )
    return LoraPhy(cfg.sf, cfg.bandwidth_khz * 1e3, cfg.coding_rate, cfg.preamble)


def _thermal(i: int, g: ResolvedGroup) -> Thermal | None:
    if g.config.thermal is None:
        return None
    if g.config.thermal.board is not None:
        return THERMAL_BOARDS[g.config.thermal.board]
    p = g.profile.thermal
    if p is None:
        raise ScenarioError(
            f"fleet.groups[{i}].thermal: profile {g.profile.name} has no thermal parameters; name a published board "
            "(thermal: {board: raspberry_pi_4}) or give them (overrides: {thermal: {r_k_per_w, tau_s, soft_clock, "
            "hard_clock}})"
        )
    return Thermal(p.r_k_per_w, p.tau_s, p.soft_c, p.hard_c, p.soft_clock, p.hard_clock)


@functools.lru_cache(maxsize=64)
def _with_sf(phy: LoraPhy, sf: int) -> LoraPhy:
    return dataclasses.replace(phy, sf=sf)


def _cell(b: Battery) -> Cell:
    c = b.chemistry
    rated = b.joules / (c("rated_hours") * 3600.0) if np.isfinite(b.joules) else np.inf
    return Cell(c("charge_efficiency"), c("discharge_efficiency"), c("peukert"), rated, c("fade_per_cycle"))


def memory_arrays(groups: list[ResolvedGroup], seed: int, units: str) -> tuple[np.ndarray, np.ndarray]:
    """Per-device mean free memory and fluctuation std, in the fleet's units.

    A group's ``memory.sigma2`` list gives each device one variance drawn uniformly from the list.
    """
    scale = MB if units == "mb" else 1.0
    free_parts, sigma_parts = [], []
    for i, g in enumerate(groups):
        m = g.config.memory
        free = m.free if m.free is not None else (g.profile.memory.free_mb if units == "mb" else 0.0)
        if isinstance(m.sigma2, list):
            choice = stream(seed, "memory_sigma", i).choice(np.asarray(m.sigma2, dtype=float), size=g.count)
            sigma = np.sqrt(choice)
        elif m.sigma2 is not None:
            sigma = np.full(g.count, np.sqrt(m.sigma2))
        elif m.sigma is not None:
            sigma = np.full(g.count, m.sigma)
        else:
            sigma = np.full(g.count, g.profile.memory.sigma_mb if units == "mb" else 0.0)
        free_parts.append(np.full(g.count, free * scale))
        sigma_parts.append(sigma * scale)
    return np.concatenate(free_parts), np.concatenate(sigma_parts)
