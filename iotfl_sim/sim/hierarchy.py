"""Device -> gateway -> cloud aggregation on the simulated clock (``hierarchy:``), after HierFAVG (Liu et al.,
"Client-Edge-Cloud Hierarchical Federated Learning", ICC 2020).

Each copy of a fleet gateway (``fleet.gateways`` entry, one per ``devices_per_gateway`` block, as
``Simulation.medium`` shares links) is an aggregation node for the devices behind it. A cloud round (one
``rounds.csv`` row; ``rounds`` counts them) runs every gateway in parallel on the simulated clock:

1. ``gateway_rounds`` (k2) gateway rounds, each a flat round restricted to the gateway's devices: wait for
   ``server.min_participants`` of them, select ``clients_per_round`` of them (per gateway), download from the
   gateway, train, upload, close at the deadline or when enough arrived (``sim.round.Round``), then the gateway
   aggregates them into its own copy of the model; its work (the aggregation, QSGD decoding) is priced by the
   gateway profile (``hierarchy.profile``, like the server's by ``sim/server_cost.py``) and costs its power.
   Each gateway round's tasks use the round key ``rnd * k2 + j`` for their seeds, link draws and events.
2. The gateway uploads its model (the method's ``Strategy.tier_size``) over its own backhaul (float32 weights plus
   ``server.header_bytes``; duration bytes / bandwidth + RTT, energy ``tx_w`` x air time). The cloud waits for every
   gateway, folds their models (``Strategy.combine``; default: averaged, weighted by the samples each aggregated
   since the last cloud round, ``fl.aggregate.aggregate_nested``), priced by the server profile, and sends the result
   down every backhaul (``rx_w`` at the gateway).

``device_rounds`` (k1) is HierFAVG's kappa_1, the local work between two gateway aggregations: a task trains
``k1 x local.epochs`` epochs in one go (one download, one upload; one optimizer, as kappa_1 local SGD steps). Read
literally as "k1 device rounds per gateway round", each device round ending in a gateway aggregation, a gateway
round would mark no event and only k1 x k2 would matter; so k1 is read as HierFAVG's local work and k2 as its edge
aggregations per cloud aggregation. With k1 = k2 = 1 and one gateway the
numbers are flat FedAvg's bit for bit (gateway 0 draws its selection from the flat stream; a one-gateway cloud
average of a float32 model weighted by an integer sample count returns it exactly).

The numerics: the engine owns each gateway's model. The method declares what that is (``Strategy.tier_state``,
default its ``state``); each gateway node holds a ``Tier`` of those attributes, set from the cloud's at a cloud
round's start, and a copy of the method's wire (it encodes its own devices' messages, so quantized downloads work
over any number of gateways). While the engine calls the method for a gateway (selection, payloads, the
gateway's aggregation ``Strategy.gateway_aggregate``) it binds that tier and wire to the method and sets
``ctx.tier`` to "gateway", never across a ``yield``, so parallel gateways cannot see each other's copy; every other
attribute is the fleet's, one for all gateways (AdaptiveFL's per-device tables, which a gateway touches only for
its own devices; HeteroFL-IoT's budget pacing, which it keeps per gateway itself, keyed by the devices of the view
it selects from, ``FleetView.members``). At the cloud round's end the cloud folds the tiers with ``Strategy.combine`` (default: the
samples-weighted average of their ``state``; FedOpt steps its optimizer there, on that average). Each gateway round
is one of the method's rounds, ``ctx.rounds`` = rounds x k2. HeteroFL's gateway copies are full global models and
the cloud averages them whole, so an entry no device of a gateway trained counts there at its last cloud value.
Which methods run hierarchically, and why the others cannot, is ``docs/methods_and_modes.md`` (their options'
``modes`` and ``why_not``; ``Scenario._mode_problem`` refuses the rest at validate).

Every gateway takes the cloud's model and a fresh copy of the wire at each cloud round's start, so a checkpoint
needs nothing beyond the strategy's state; a resume replays the system part (the gateways' rounds, backhaul and aggregation times come from the tape
like the flat engine's) and ``digest`` adds the backhaul bytes and the gateways' energy to the checked figures.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from iotfl_sim.algorithms.base import AggregateWork, Outcome, Strategy, Tier, Wire
from iotfl_sim.sim.round import Round, Task
from iotfl_sim.sim.server_cost import ServerCost
from iotfl_sim.sim.server_loop import ServerLoop
from iotfl_sim.sim.toolkit import Toolkit, play_round
from iotfl_sim.sim.view import ServerView

if TYPE_CHECKING:
    from iotfl_sim.sim.engine import Simulation

State = dict[str, Any]
COLUMNS = ("bytes_backhaul_down", "bytes_backhaul_up", "energy_gateway_j")  # rounds.csv's, cumulative


@dataclass
class GatewayNode:
    """One aggregation node: a gateway copy, the devices behind it, its copy of the method's model (``Tier``) and
    of the method's wire (it encodes its own devices' messages)."""

    index: int
    label: str  # name, or name[block] for a gateway with devices_per_gateway
    members: np.ndarray  # bool mask over devices
    tier: Tier
    wire: Wire | None = None

    @property
    def state(self) -> State:
        return self.tier.state

    def start_from(self, strategy: Strategy) -> None:
        """A cloud round's start: the cloud's model (the method's ``tier_state``) and a wire of its own."""
        self.tier.values = {name: getattr(strategy, name) for name in strategy.tier_state}
        self.tier.samples = 0.0
        self.wire = None if strategy.wire is None else own_copy(strategy, strategy.wire)

    @contextmanager
    def bound(self, strategy: Strategy) -> Iterator[None]:
        """The method holds this node's tier and wire inside, ``ctx.tier`` "gateway" (never across a ``yield``); what
        it aggregates stays in the tier."""
        names = strategy.tier_state
        cloud = [getattr(strategy, name) for name in names], strategy.wire
        for name in names:
            setattr(strategy, name, self.tier.values[name])
        strategy.wire, strategy.c.tier = self.wire, "gateway"
        try:
            yield
        finally:
            self.tier.values = {name: getattr(strategy, name) for name in names}
            for name, value in zip(names, cloud[0], strict=True):
                setattr(strategy, name, value)
            strategy.wire, strategy.c.tier = cloud[1], "server"


class GatewayView:
    """The server's view (``sim.view.ServerView``) restricted to one gateway's devices: what the method selects
    from at that gateway (``algorithms.base.FleetView``). Always answers with the mask (no sampled selection)."""

    def __init__(self, inner: ServerView, members: np.ndarray) -> None:
        self.inner = inner
        self.members = members

    @property
    def num_devices(self) -> int:
        return self.inner.num_devices

    @property
    def now(self) -> float:
        return self.inner.now

    @property
    def rnd(self) -> int:
        return self.inner.rnd

    @property
    def known_gone(self) -> np.ndarray:
        return self.inner.known_gone[self.members]

    def selectable_mask(self) -> np.ndarray:
        return self.inner.selectable_mask() & self.members

    def selectable(self) -> np.ndarray:
        return np.flatnonzero(self.selectable_mask())

    def sample_selectable(self, k: int, rng: np.random.Generator, eligible: Any = None) -> None:
        return None

    def has_selectable(self, need: int) -> bool:
        return int(self.selectable_mask().sum()) >= need

    def declared_free_memory(self) -> np.ndarray:
        return self.inner.declared_free_memory()

    def reported_battery(self) -> np.ndarray:
        return self.inner.reported_battery()

    def on_power(self) -> np.ndarray:
        return self.inner.on_power()

    def true_state(self, strategy: str) -> Any:
        return self.inner.true_state(strategy)


@dataclass
class GatewayRun:
    """What one gateway did in a cloud round: its tasks and their outcomes (in order), the training loss of each
    update it received (the updates themselves are dropped once aggregated)."""

    tasks: list[Task] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    rounds: int = 0  # gateway rounds it could start (0: none of its devices ever became selectable)


@dataclass
class TierFigures:
    """What the gateways did, all together: backhaul bytes, energy (compute and backhaul radio), busy seconds."""

    bytes_up: float = 0.0
    bytes_down: float = 0.0
    energy_j: float = 0.0
    busy_s: float = 0.0  # gateway-seconds spent computing or on the air (idle power is charged on the rest)

    def busy(self, seconds: float, power_w: float) -> None:
        self.energy_j += seconds * power_w
        self.busy_s += seconds

    def digest(self) -> list[float]:
        return [self.bytes_up, self.bytes_down, self.energy_j, self.busy_s]


def gateway_nodes(n: int, gateway_of: Callable[[int], Any]) -> list[GatewayNode]:
    """One node per gateway copy, ``(name, block)``, in the order of its first device."""
    members: dict[tuple[str, int], list[int]] = {}
    labels: dict[tuple[str, int], str] = {}
    for d in range(n):
        gw = gateway_of(d)
        assert gw is not None  # Scenario._hierarchy_fits: every group names a gateway
        block = d // gw.devices_per_gateway if gw.devices_per_gateway else 0
        members.setdefault((gw.name, block), []).append(d)
        labels[(gw.name, block)] = f"{gw.name}[{block}]" if gw.devices_per_gateway else gw.name
    nodes = []
    for i, key in enumerate(sorted(members, key=lambda k: members[k][0])):
        mask = np.zeros(n, dtype=bool)
        mask[members[key]] = True
        nodes.append(GatewayNode(i, labels[key], mask, Tier(labels[key])))
    return nodes


def own_copy(strategy: Strategy, thing: Any) -> Any:
    """A deep copy of ``thing`` (a method's wire) for one gateway, sharing what the engine owns (the method, its
    context and the server work it charges to) instead of copying it."""
    ctx = strategy.c
    return copy.deepcopy(thing, {id(strategy): strategy, id(ctx): ctx, id(ctx.server_work): ctx.server_work})


class GatewayTier(ServerLoop):
    """The gateways of a hierarchical run and the cloud above them. A checkpoint needs nothing of theirs: at a cloud
    round's end every gateway holds the cloud's model, the strategy's state."""

    columns = COLUMNS

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.kit = Toolkit(sim)
        assert sim.sc.hierarchy is not None
        self.cfg = cfg = sim.sc.hierarchy
        self.cost = ServerCost.of(cfg)
        self.nodes = gateway_nodes(sim.fleet.n, sim.system.gateway_of)
        self.node_of = np.zeros(sim.fleet.n, dtype=np.int64)  # device -> index of its gateway's node
        for node in self.nodes:
            self.node_of[node.members] = node.index
        self.model_params, self.model_tensors = sim.strategy.tier_size()  # the model every gateway holds
        self.figures = TierFigures()

    # ------------------------------------------------------------ the run

    def run(self):
        """The server process of a hierarchical run: one cloud round per ``rounds``."""
        sim, kit = self.sim, self.kit
        for rnd in range(sim.sc.rounds):
            replay = rnd < sim.checkpointing.resume_round
            kit.announce(rnd, replay)
            row = yield from self.cloud_round(rnd, replay)
            if row is None:
                sim.status.stalled = rnd
                return
            if kit.end_round(rnd, row, replay):
                return

    def cloud_round(self, rnd: int, replay: bool):
        """Every gateway's k2 rounds and backhaul upload in parallel, the cloud's average, the downloads; the
        round's row, or None when no gateway could start a round (the run stalls)."""
        sim, kit = self.sim, self.kit
        rd = kit.new_round(rnd)
        for node in self.nodes:
            node.start_from(sim.strategy)
        yield from kit.serve(rd)  # the cloud's set-up work (first round)
        procs = [sim.env.process(self._gateway(node, rnd, replay)) for node in self.nodes]
        yield simpy.AllOf(sim.env, procs)
        runs: list[GatewayRun] = [p.value for p in procs]
        if not any(r.rounds for r in runs):
            return None
        yield from self._cloud_aggregate(rd, rnd, replay)
        yield simpy.AllOf(sim.env, [sim.env.process(self._backhaul(node, rnd, up=False)) for node in self.nodes])
        rd.tasks = [t for r in runs for t in r.tasks]
        outcomes = [o for r in runs for o in r.outcomes]
        row = kit.row(rd, outcomes, [loss for r in runs for loss in r.losses])
        row.update(zip(COLUMNS, (self.figures.bytes_down, self.figures.bytes_up, self.gateway_energy()), strict=True))
        return row

    def _gateway(self, node: GatewayNode, rnd: int, replay: bool):
        """One gateway's part of cloud round ``rnd``: its k2 rounds (``sim.toolkit.play_round``), then its model up
        the backhaul."""
        run = GatewayRun()
        view = GatewayView(self.sim.view, node.members)
        k2 = self.cfg.gateway_rounds

        def serve(grd: Round, outcomes: list[Outcome] | None):
            if outcomes is None:  # e.g. QSGD encoding of the downloads
                return self._work(node, grd, "gateway_work")
            return self._work(node, grd, "gateway_aggregate", updates=sum(o.status == "completed" for o in outcomes))

        for j in range(k2):
            key = rnd * k2 + j
            played = yield from play_round(
                self.kit, key, replay, serve, view=view, key=(node.index,) if node.index else (), holding=lambda: node.bound(self.sim.strategy)
            )
            if played is None:
                break
            run.rounds += 1
            node.tier.samples += played.samples
            run.losses += played.losses
            run.tasks += played.rd.tasks
            run.outcomes += played.outcomes
        yield from self._backhaul(node, rnd, up=True)
        return run

    def wire_for(self, device: int, wire: Wire | None) -> Wire | None:
        """The wire of ``device``'s gateway (a copy of the method's ``wire``): it prices the device's messages."""
        return self.nodes[int(self.node_of[device])].wire

    def _work(self, node: GatewayNode, grd: Round, event: str, **fields: Any):
        """The pending server work, done by the gateway: priced by its profile (recorded on the tape), logged at its
        start, on the clock, at its power."""
        sim = self.sim
        priced = self.kit.price(self.cost)
        duration = sum(p[2] for p in priced)
        if not priced and event != "gateway_aggregate":
            return
        sim.log(grd.rnd, -1, event, gateway=node.label, duration=round(duration, 6), **fields)
        if duration > 0:
            yield sim.env.timeout(duration)
        self.figures.busy(duration, self.cost.power_w)

    def _backhaul(self, node: GatewayNode, rnd: int, up: bool):
        """The gateway's model over its backhaul, up to the cloud or back down: float32 weights and a header."""
        sim, link = self.sim, self.cfg.backhaul
        nbytes = self.model_params * 4.0 + sim.sc.server.header_bytes
        air = nbytes * 8.0 / ((link.up_mbps if up else link.down_mbps) * 1e6)
        duration = air + link.rtt_s
        if up:
            self.figures.bytes_up += nbytes
        else:
            self.figures.bytes_down += nbytes
        sim.log(rnd, -1, "backhaul", gateway=node.label, up=up, bytes=nbytes, duration=round(duration, 6))
        yield sim.env.timeout(duration)
        self.figures.busy(air, link.tx_w if up else link.rx_w)

    def _cloud_aggregate(self, rd: Round, rnd: int, replay: bool):
        """The cloud averages the gateways' models, weighted by the samples each aggregated since the last cloud
        round, priced by the server profile (the server's time in the row)."""
        sim = self.sim
        n = len(self.nodes)
        if not replay:  # a replay's prices come from the tape
            values = float(self.model_params)
            sim.system.server_work.charge("cloud_aggregate", AggregateWork(values * n, values, self.model_tensors * n))
            sim.strategy.combine(rnd, [node.tier for node in self.nodes if node.tier.samples > 0])  # its own work too
        priced = self.kit.price(sim.system.server_cost)
        duration = sum(p[2] for p in priced)
        sim.log(rnd, -1, "cloud_aggregate", duration=round(duration, 6), gateways=n)
        if duration > 0:
            yield sim.env.timeout(duration)
        self.kit.count_server_time(rd, priced)

    # ------------------------------------------------------------ figures

    def gateway_energy(self) -> float:
        """Cumulative energy of all gateways: compute and backhaul radio, plus idle power on the rest of the time."""
        idle = self.cfg.idle_w or 0.0
        return self.figures.energy_j + idle * max(len(self.nodes) * self.sim.env.now - self.figures.busy_s, 0.0)

    def digest(self) -> list[float]:
        """The figures a faithful replay reproduces (added to ``Simulation.digest``)."""
        return self.figures.digest()

    def summary(self) -> dict[str, Any]:
        tiers = {"gateways": len(self.nodes), "device_rounds": self.cfg.device_rounds, "gateway_rounds": self.cfg.gateway_rounds}
        return {"hierarchy": tiers}

