"""The simulated system beside the fleet: how a run prices it, and the figures it accumulates on the air and at
the server. Built once per run from the resolved scenario (``SystemModel.build``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from iotfl_sim.algorithms.base import ServerWork
from iotfl_sim.fl.cost import opcost
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fleet.availability import Availability
from iotfl_sim.fleet.fleet import Fleet
from iotfl_sim.fleet.network import SharedMedium
from iotfl_sim.scenario.loader import ResolvedGroup, resolve_server, resolved_compute
from iotfl_sim.scenario.model import Scenario
from iotfl_sim.sim.device import DeviceTasks
from iotfl_sim.sim.memory import MemoryNeed
from iotfl_sim.sim.server_cost import ServerCost
from iotfl_sim.sim.traffic import Traffic
from iotfl_sim.sim.training_time import TrainingTime

if TYPE_CHECKING:
    from iotfl_sim.sim.setup import NumericsSetup


@dataclass
class SystemModel:
    """When devices are online, how long they train and how much memory it takes, the gateway links they share,
    what the server's work costs; the bytes sent (``traffic``) and the server's simulated seconds so far."""

    env: simpy.Environment
    availability: Availability
    memory_need: MemoryNeed
    step_options: opcost.StepOptions
    training_time: TrainingTime
    server_cost: ServerCost
    gateway_of_group: list[Any]  # the fleet.gateways entry of each group (None: its devices' own links only)
    group_of: np.ndarray
    server_work: ServerWork = field(default_factory=ServerWork)
    traffic: Traffic = field(default_factory=Traffic)
    media: dict[tuple[str, int, bool], SharedMedium] = field(default_factory=dict)  # built when a transfer first crosses one
    server_time: float = 0.0  # simulated seconds the server spent computing, all rounds
    server_carbon_g: float = 0.0  # grams of CO2(eq) of that work (with fleet.carbon)
    memory_ignored: bool = False  # the method declares that memory does not bind it (``Strategy.ignores_memory``)
    recipe: ModelRecipe | None = None  # the model the run trains (set with the method's set-up)
    tasks: DeviceTasks = field(init=False)  # the device processes (set once the engine, their host, exists)

    @classmethod
    def build(
        cls, sc: Scenario, groups: list[ResolvedGroup], fleet: Fleet, availability: Availability, numerics: NumericsSetup,
        env: simpy.Environment, base_dir: Path | None,
    ) -> SystemModel:
        """The system of a run; resolves the server's (and the gateways') profile into ``sc`` first."""
        loc = sc.local
        step_options = opcost.StepOptions(loc.momentum, loc.weight_decay > 0, loc.clip_grad_norm is not None)
        training_time = TrainingTime(
            fleet, numerics.samples_per_device, sc.task_epochs(), loc.batch_size, step_options,
            roofline=sc.fleet.cost_model == "roofline",
        )  # fmt: skip
        if not resolved_compute(sc):
            resolve_server(sc, base_dir / "device_profiles" if base_dir is not None else None)
        gateways = {g.name: g for g in sc.fleet.gateways}
        return cls(
            env=env,
            availability=availability,
            memory_need=MemoryNeed(sc),
            step_options=step_options,
            training_time=training_time,
            server_cost=ServerCost.of(sc.server),
            gateway_of_group=[None if g.config.network.gateway is None else gateways[g.config.network.gateway] for g in groups],
            group_of=fleet.group_of,
        )

    def gateway_of(self, d: int) -> Any:
        """The ``fleet.gateways`` entry device ``d``'s group reports through (None: none)."""
        return self.gateway_of_group[self.group_of[d]]

    def medium(self, d: int, up: bool) -> SharedMedium | None:
        """The shared gateway direction device ``d``'s transfers cross (None: its own link only)."""
        gw = self.gateway_of(d)
        if gw is None:
            return None
        block = d // gw.devices_per_gateway if gw.devices_per_gateway else 0
        key = (gw.name, block, up)
        medium = self.media.get(key)
        if medium is None:
            cap = gw.up_mbps if up else gw.down_mbps
            medium = self.media[key] = SharedMedium(self.env, cap * 1e6, f"{gw.name}[{block}]" if block else gw.name)
        return medium
