"""The simulated fleet, kept as arrays (one entry per device) and advanced lazily.

Nothing ticks while a device is idle: idle energy is charged analytically up to the moment a
device's battery is read or spent, so a fleet of a million devices costs only what its active
devices do.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from iotfl_sim.scenario.loader import ResolvedGroup
from iotfl_sim.seeding import stream

MB = 1024.0 * 1024.0
ENERGY_KINDS = ("compute", "radio", "idle")
FAILURE_REASONS = ("oom", "depleted", "refused", "deadline")


@dataclass
class Fleet:
    groups: list[ResolvedGroup]
    seed: int
    group_of: np.ndarray  # int32 group index per device
    flops: np.ndarray  # sustained training FLOP/s
    jitter_sigma: np.ndarray
    jitter_dist: list[str]  # per group
    train_w: np.ndarray
    idle_w: np.ndarray
    tx_w: np.ndarray
    rx_w: np.ndarray
    capacity_j: np.ndarray  # inf = mains powered
    mem_free_b: np.ndarray  # declared typical free memory r_M, bytes
    mem_sigma_b: np.ndarray
    down_bps: np.ndarray  # bits per second
    up_bps: np.ndarray
    rtt_s: np.ndarray
    # dynamic state
    energy: dict[str, np.ndarray] = field(default_factory=dict)  # J used, by kind
    settled_at: np.ndarray = field(default_factory=lambda: np.zeros(0))
    depleted_at: np.ndarray = field(default_factory=lambda: np.zeros(0))
    busy: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    tasks: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    completed: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    failures: dict[str, np.ndarray] = field(default_factory=dict)

    @classmethod
    def build(cls, groups: list[ResolvedGroup], seed: int) -> Fleet:
        counts = [g.count for g in groups]
        n = int(sum(counts))
        group_of = np.repeat(np.arange(len(groups), dtype=np.int32), counts)

        def per_device(values: list[float]) -> np.ndarray:
            return np.asarray(values, dtype=np.float64)[group_of]

        modes = [g.profile.mode(g.power_mode) for g in groups]
        p = [g.profile for g in groups]
        fleet = cls(
            groups=groups,
            seed=seed,
            group_of=group_of,
            flops=per_device([m[0] for m in modes]),
            jitter_sigma=per_device([x.compute.jitter.sigma if x.compute.jitter.dist != "none" else 0.0 for x in p]),
            jitter_dist=[x.compute.jitter.dist for x in p],
            train_w=per_device([m[1] for m in modes]),
            idle_w=per_device([x.power.idle_w for x in p]),
            tx_w=per_device([x.power.tx_w for x in p]),
            rx_w=per_device([x.power.rx_w for x in p]),
            capacity_j=per_device([x.battery.joules for x in p]),
            mem_free_b=per_device([x.memory.free_mb * MB for x in p]),
            mem_sigma_b=per_device([x.memory.sigma_mb * MB for x in p]),
            down_bps=per_device([x.link.down_mbps * 1e6 for x in p]),
            up_bps=per_device([x.link.up_mbps * 1e6 for x in p]),
            rtt_s=per_device([x.link.rtt_ms / 1000.0 for x in p]),
        )
        fleet.energy = {k: np.zeros(n) for k in ENERGY_KINDS}
        fleet.settled_at = np.zeros(n)
        fleet.depleted_at = np.where(fleet.idle_w > 0, fleet.capacity_j / np.maximum(fleet.idle_w, 1e-300), np.inf)
        fleet.busy = np.zeros(n, dtype=bool)
        fleet.tasks = np.zeros(n, dtype=np.int64)
        fleet.completed = np.zeros(n, dtype=np.int64)
        fleet.failures = {r: np.zeros(n, dtype=np.int64) for r in FAILURE_REASONS}
        return fleet

    @property
    def n(self) -> int:
        return int(self.group_of.shape[0])

    # ------------------------------------------------------------ energy

    def used(self, d: int) -> float:
        return float(self.energy["compute"][d] + self.energy["radio"][d] + self.energy["idle"][d])

    def settle(self, d: int, t: float) -> None:
        """Charge idle draw from the last settled instant up to ``t`` (never past depletion)."""
        last = self.settled_at[d]
        if t <= last:
            return
        end = min(t, self.depleted_at[d])
        if end > last:
            self.energy["idle"][d] += self.idle_w[d] * (end - last)
        self.settled_at[d] = t

    def alive(self, d: int, t: float) -> bool:
        return bool(self.depleted_at[d] > t)

    def spend(self, d: int, t0: float, duration: float, power_w: float, kind: str) -> float | None:
        """Run an activity of ``duration`` s drawing ``power_w`` from ``t0``.

        Returns None if the battery lasts, else the instant it runs dry (the device is then offline
        for good). Idle draw is charged up to ``t0``. ``compute`` power is the whole board's and
        replaces idle power; ``radio`` power comes on top of idle power (the board stays awake while
        its radio sends or receives). So energy is the sum of power x time exactly.
        """
        self.settle(d, t0)
        base = self.idle_w[d] if kind == "radio" else 0.0
        total_w = power_w + base
        remaining = self.capacity_j[d] - self.used(d)
        need = total_w * duration
        if need <= remaining or not np.isfinite(remaining):
            self.energy[kind][d] += power_w * duration
            self.energy["idle"][d] += base * duration
            end = t0 + duration
            self.settled_at[d] = end
            left = remaining - need
            self.depleted_at[d] = end + left / self.idle_w[d] if self.idle_w[d] > 0 else np.inf
            return None
        dead = t0 + (remaining / total_w if total_w > 0 else 0.0)
        share = power_w / total_w if total_w > 0 else 1.0
        self.energy[kind][d] += max(remaining, 0.0) * share
        self.energy["idle"][d] += max(remaining, 0.0) * (1.0 - share)
        self.settled_at[d] = dead
        self.depleted_at[d] = dead
        return float(dead)

    def energy_total(self, t: float) -> np.ndarray:
        """Energy used by every device up to ``t`` (J), idle draw included, without mutating state."""
        used = self.energy["compute"] + self.energy["radio"] + self.energy["idle"]
        idle_more = self.idle_w * np.clip(np.minimum(t, self.depleted_at) - self.settled_at, 0.0, None)
        return used + idle_more

    def energy_by_kind(self, t: float) -> dict[str, float]:
        idle_more = self.idle_w * np.clip(np.minimum(t, self.depleted_at) - self.settled_at, 0.0, None)
        return {
            "compute": float(self.energy["compute"].sum()),
            "radio": float(self.energy["radio"].sum()),
            "idle": float(self.energy["idle"].sum() + idle_more.sum()),
        }

    def alive_mask(self, t: float) -> np.ndarray:
        return self.depleted_at > t

    # ------------------------------------------------------------ draws

    def sample_free_memory(self, d: int, rnd: int) -> float:
        """FlexFL's fluctuation: r = r_M - |u|, u ~ N(0, sigma^2), drawn per device and round."""
        sigma = self.mem_sigma_b[d]
        if sigma <= 0:
            return float(self.mem_free_b[d])
        u = stream(self.seed, "memory", d, rnd).normal(0.0, sigma)
        return float(max(0.0, self.mem_free_b[d] - abs(u)))

    def compute_time(self, d: int, flops: float, rnd: int) -> float:
        base = flops / self.flops[d]
        sigma = self.jitter_sigma[d]
        if sigma <= 0:
            return float(base)
        rng = stream(self.seed, "compute", d, rnd)
        if self.jitter_dist[self.group_of[d]] == "lognormal":
            return float(base * rng.lognormal(0.0, sigma))
        return float(base * max(0.05, rng.normal(1.0, sigma)))

    def transfer_time(self, d: int, nbytes: float, up: bool) -> float:
        """Air time of a message (s): bits / bandwidth + one round-trip of latency."""
        bps = self.up_bps[d] if up else self.down_bps[d]
        return float(nbytes * 8.0 / bps + self.rtt_s[d])

    def group_names(self) -> list[str]:
        return [g.name for g in self.groups]
