"""The server's view of the fleet: what a strategy may know when it selects (``algorithms.base.FleetView``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from iotfl_sim.core.errors import ScenarioError
from iotfl_sim.fleet.fleet import Fleet
from iotfl_sim.fleet.selection import SAMPLED_SELECTION_MIN_DEVICES, SampleStats, sample_uniform
from iotfl_sim.seeding import stream


@dataclass
class ServerView:
    """What the server can know, stated once for every method.

    Known: each device's declared profile (declared free memory, compute, link), which devices are
    online now (devices check in when they come online, as in FedScale and real deployments), which
    are busy with an earlier task, and the history of outcomes (a device whose task failed with
    `depleted` is known to be gone). Not known: true current free memory, battery level, compute
    jitter; a method that uses them must call ``true_state``, which the run summary reports. What the scenario
    says devices report (``fleet.reports``) is known too: their state of charge at their last contact
    (``reported_battery``) and whether they are on power now (``on_power``).

    Selection at scale: fleets of at least ``sample_min_devices`` devices (default
    ``SAMPLED_SELECTION_MIN_DEVICES`` = 100,000) answer ``sample_selectable`` (the uniform selection of
    ``algorithms.base.select_uniform``) and ``has_selectable`` (the ``min_participants`` check) by lazy
    rejection sampling (``fleet.selection.sample_uniform``): only drawn ids are checked (known gone,
    busy, eligible, then availability on the survivors), so a round costs O(clients), not O(devices).
    Smaller fleets build the full mask, with the draws every recorded run and test was made with.
    """

    fleet: Fleet
    declared: np.ndarray
    known_gone: np.ndarray
    availability: Any
    now: float = 0.0
    rnd: int = 0
    oracle_users: set[str] = field(default_factory=set)
    members: np.ndarray | None = None  # every device (a gateway's view, sim.hierarchy.GatewayView, has its own)
    sample_min_devices: int = SAMPLED_SELECTION_MIN_DEVICES
    reports: frozenset[str] = frozenset()  # what devices report (fleet.reports): battery, power
    _stats: SampleStats = field(default_factory=SampleStats)  # sizes the sampler's checks only
    _warm: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))  # last ids found selectable

    @property
    def num_devices(self) -> int:
        return self.fleet.n

    def selectable_mask(self) -> np.ndarray:
        mask = ~(self.known_gone | self.fleet.busy)
        candidates = np.flatnonzero(mask)
        mask[candidates[~self.availability.online_mask(self.now, self.rnd, candidates)]] = False
        return mask

    def _admits(self, eligible: Any = None):
        """``accept`` for ``sample_uniform``: which of the (distinct) ``ids`` are selectable and eligible."""

        def accept(ids: np.ndarray) -> np.ndarray:
            ok = ~(self.known_gone[ids] | self.fleet.busy[ids])
            if eligible is not None:
                ok &= eligible[ids] if isinstance(eligible, np.ndarray) else eligible(ids)
            idx = np.flatnonzero(ok)
            ok[idx] = self.availability.online_mask(self.now, self.rnd, ids[idx])
            self._warm = ids[ok]  # witnesses for the next has_selectable (eligible or not, selectable)
            return ok

        return accept

    def sample_selectable(self, k: int, rng: np.random.Generator, eligible: Any = None) -> np.ndarray | None:
        """``k`` devices (sorted) uniformly among the selectable ones that are ``eligible`` (a bool array
        over devices, or a function of an id array), by sampling; None when the fleet is below
        ``sample_min_devices`` (then ``rng`` is untouched) or too few were found (use the mask)."""
        if self.fleet.n < self.sample_min_devices:
            return None
        return sample_uniform(self.fleet.n, k, rng, self._admits(eligible), stats=self._stats)

    def has_selectable(self, need: int) -> bool:
        """At least ``need`` devices are selectable now: at scale, shown by ``need`` witnesses (first the
        devices found selectable last time, whose availability is cheap to bring up to date, then a
        sample), else counted on the mask. Any witnesses give the same answer."""
        if need <= 0:
            return True
        if self.fleet.n >= self.sample_min_devices:
            if self._warm.size >= need and int(self._admits()(self._warm).sum()) >= need:
                return True
            rng = stream(self.fleet.seed, "participants", self.rnd)
            if sample_uniform(self.fleet.n, need, rng, self._admits()) is not None:
                return True
        return int(self.selectable_mask().sum()) >= need

    def selectable(self) -> np.ndarray:
        return np.flatnonzero(self.selectable_mask())

    def declared_free_memory(self) -> np.ndarray:
        return self.declared

    def reported_battery(self) -> np.ndarray:
        """Each device's state of charge (0-1) as it last reported it (``Fleet.reported_charge``); needs ``battery``
        in ``fleet.reports``."""
        self._require("battery", "reported_battery")
        return self.fleet.reported_charge()

    def on_power(self) -> np.ndarray:
        """Which devices say they are on mains or plugged into their charger now; needs ``power`` in
        ``fleet.reports``."""
        self._require("power", "on_power")
        return self.fleet.on_power(self.now)

    def _require(self, item: str, call: str) -> None:
        if item not in self.reports:
            raise ScenarioError(
                f"the method reads FleetView.{call}(), which devices report only when fleet.reports lists {item}; "
                f"add it (fleet: {{reports: [{item}]}}) or use a method that does not need it"
            )

    def true_state(self, strategy: str) -> Fleet:
        self.oracle_users.add(strategy)
        return self.fleet
