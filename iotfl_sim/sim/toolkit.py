"""The round toolkit: what a server loop (``sim.server_loop.ServerLoop``) may do to the engine.

Every server loop (synchronous, semi-asynchronous, asynchronous, hierarchical) is written with these steps: wait
for participants, select through the tape, price and serve the server's work, dispatch, close at the deadline
(marking the depleted devices known gone), learn or replay, record a row and end the round. ``play_round`` is the
synchronous round itself, played by the flat server and by each gateway of a hierarchy.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from iotfl_sim.algorithms.base import AggregateWork, Assignment, FleetView, Outcome, QsgdWork, Update
from iotfl_sim.fleet.carbon import J_PER_KWH
from iotfl_sim.seeding import stream
from iotfl_sim.sim import checkpointing
from iotfl_sim.sim.console import stage
from iotfl_sim.sim.learning import TrainTask
from iotfl_sim.sim.round import Round, RoundStart, Task, settle
from iotfl_sim.sim.server_cost import ServerCost

if TYPE_CHECKING:
    from iotfl_sim.sim.engine import Simulation

Priced = list[tuple[str, str, float, float]]  # (what, kind, seconds, FLOPs) of each item of server work: the tape's
MAX_WAITS = 100_000  # retry_s waits for participants before a run counts as stalled


class Toolkit:
    """The steps of a round over one ``Simulation`` (its public members only)."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim

    # ------------------------------------------------------------ before dispatch

    def announce(self, rnd: int, replay: bool) -> None:
        sim = self.sim
        resume_round = sim.checkpointing.resume_round
        if rnd == 0 and replay:
            stage(sim.progress, f"replaying rounds 1-{resume_round} from the checkpoint (no training)")
        elif rnd == resume_round:
            stage(sim.progress, f"round {rnd + 1}: devices training, then evaluation")

    def round_start(self) -> RoundStart:
        sim = self.sim
        now = sim.env.now
        energy = float(sum(v.sum() for v in sim.fleet.class_energy(now).values()))
        return RoundStart(now, energy, sim.system.traffic.down, sim.system.traffic.up)

    def new_round(self, rnd: int, wanted: int | None = None) -> Round:
        """A round (or an asynchronous run's interval, ``wanted`` 0) starting now."""
        sim = self.sim
        return Round(sim.env, rnd, sim.sc.selection_size() if wanted is None else wanted, self.round_start())

    def stamp(self, rnd: int) -> None:
        """What the server's view knows of the present: the instant and the round (or wave)."""
        sim = self.sim
        sim.view.now, sim.view.rnd = sim.env.now, rnd

    def wait_for_participants(
        self, rnd: int, view: FleetView | None = None, need: int | None = None
    ) -> Generator[Any, Any, bool]:
        """Wait (retry_s at a time) until ``need`` (default min_participants) devices are selectable (in ``view``,
        default the server's); False if never."""
        sim = self.sim
        need = sim.sc.server.min_participants if need is None else need
        view = sim.view if view is None else view
        for _ in range(MAX_WAITS):
            self.stamp(rnd)
            if view.has_selectable(need):
                return True
            if view.known_gone.all():
                return False
            yield sim.env.timeout(sim.sc.server.retry_s)
        return False

    def select(
        self, rnd: int, view: FleetView | None = None, key: tuple[int, ...] = (), k: int | None = None, some: Any = None
    ) -> list[Assignment]:
        """The method's selection from ``view`` (default: the server's), through the tape: ``select`` with the
        stream of (rnd, *key), or ``some.select_some`` of ``k`` devices (an asynchronous wave: the method, or its
        buffered form); then the wire's dispatch."""
        sim = self.sim
        view = sim.view if view is None else view
        self.stamp(rnd)

        def choose() -> list[Assignment]:
            rng = stream(sim.sc.seed, "select", rnd, *key)
            strategy = sim.strategy
            assignments = strategy.select(rnd, view, rng) if k is None else some.select_some(rnd, view, rng, k)
            if strategy.wire is not None:  # e.g. quantize each device's download (server work, charged after selection)
                strategy.wire.dispatch(rnd, assignments, strategy)
            return assignments

        return sim.checkpointing.tape.answer("select", choose)

    # ------------------------------------------------------------ the server's work

    def price(self, cost: ServerCost) -> Priced:
        """Every pending item of server work priced by ``cost`` (the server's, a gateway's), through the tape."""
        sim = self.sim

        def priced() -> Priced:
            out = []
            for what, work in sim.system.server_work.drain():
                p = cost.price(work)
                out.append((what, p.kind, p.seconds, p.flops))
            return out

        return sim.checkpointing.tape.answer("serve", priced)

    def count_server_time(self, rd: Round, priced: Priced) -> None:
        """The server's seconds of ``priced`` work in round ``rd`` and in the run's total."""
        spent = 0.0
        for _what, kind, seconds, _flops in priced:
            spent += seconds
            rd.server_split[kind] += seconds
        rd.server_s += spent
        system = self.sim.system
        system.server_time += spent
        carbon = self.sim.fleet.carbon
        if carbon is not None and spent > 0:  # the items ran back to back, ending now
            now = self.sim.env.now
            system.server_carbon_g += system.server_cost.power_w * carbon.integral(now - spent, now) / J_PER_KWH

    def serve(self, rd: Round) -> Generator[Any, Any, None]:
        """Run the method's pending server work on the simulated clock, item by item (the round's server seconds)."""
        sim = self.sim
        priced = self.price(sim.system.server_cost)
        for what, kind, duration, flops in priced:
            sim.log(rd.rnd, -1, "server_work", what=what, kind=kind, flops=flops, duration=round(duration, 6))
            if duration > 0:
                yield sim.env.timeout(duration)
        self.count_server_time(rd, priced)

    # ------------------------------------------------------------ dispatch and close

    def dispatch(self, rd: Round, assignments: list[Assignment]) -> None:
        sim = self.sim
        sim.fleet.prime_draws([a.device for a in assignments], rd.rnd)
        rd.dispatch(assignments, sim.fleet, sim.system.tasks.run)

    def close(self, rd: Round) -> Generator[Any, Any, list[Outcome]]:
        """Wait for the round to close (every report, enough updates, or the deadline); each task's outcome."""
        sim = self.sim
        yield rd.closing(sim.sc.server.deadline_s)
        outcomes = rd.close(sim.fleet, sim.log)
        self.mark_gone(o.assignment.device for o in outcomes if o.status == "depleted")
        return outcomes

    def settle(self, task: Task, status: str) -> Outcome:
        """The server's verdict on one task (an asynchronous server's, as it ends)."""
        sim = self.sim
        outcome = settle(task, status, sim.fleet, sim.log)
        self.mark_gone([task.assignment.device] if status == "depleted" else [])
        return outcome

    def mark_gone(self, devices: Iterable[int]) -> None:
        """A depleted device never comes back: the server's view knows it from the task's end on."""
        for d in devices:
            self.sim.view.known_gone[d] = True

    # ------------------------------------------------------------ learn or replay

    def train(self, rnd: int, tasks: list[TrainTask]) -> list[Update]:
        """The tasks' updates trained for real and received (recorded on the tape: a replay reapplies them)."""
        sim = self.sim
        if sim.sc.numerics == "none" or not tasks:
            sim.checkpointing.tape.answer("receive", list)
            return []
        t0 = time.perf_counter()
        updates = sim.learning.train_tasks(tasks)
        receipts = self.receive_uploads(rnd, tasks, updates)
        sim.checkpointing.tape.answer("receive", lambda: receipts)
        sim.host.times["train"] += time.perf_counter() - t0
        return updates

    def aggregates(self, outcomes: list[Outcome], late: Sequence[TrainTask] = ()) -> bool:
        """The engine's rule for a round: it aggregates when at least ``min_participants`` updates were accepted,
        the round's own and (semi_async) the ``late`` ones of earlier rounds that join it."""
        return sum(o.status == "completed" for o in outcomes) + len(late) >= self.sim.sc.server.min_participants

    def learn(self, rnd: int, tasks: list[Task], outcomes: list[Outcome], late: Sequence[TrainTask] = ()) -> list[Update]:
        """The accepted updates of the round's ``tasks`` (and, semi_async, the ``late`` ones of earlier rounds)
        trained for real, received, charged and aggregated; the method observes every outcome of the round."""
        sim = self.sim
        fresh = [TrainTask(o, rnd, upload_bytes=t.upload_bytes) for t, o in zip(tasks, outcomes, strict=True) if o.status == "completed"]
        updates = self.train(rnd, fresh + list(late))
        aggregated = self.aggregates(outcomes, late)
        self.charge_aggregation([*outcomes, *(t.outcome for t in late)], aggregated)  # before the method's own work
        if aggregated and updates:
            t0 = time.perf_counter()  # the method's own numerics, as a bare FL loop would also spend
            strategy = sim.strategy
            (strategy.gateway_aggregate if strategy.c.tier == "gateway" else strategy.aggregate)(rnd, updates)
            sim.host.times["aggregate"] += time.perf_counter() - t0
        self.observe(rnd, outcomes, aggregated)
        return updates

    def observe(self, rnd: int, outcomes: list[Outcome], aggregated: bool) -> None:
        """The method's ``observe`` of a round (or model version), told whether the engine aggregated it: late
        updates may make a round aggregate that its own outcomes would not, an asynchronous version always does.
        ``ctx.round_aggregated`` holds it for the call, which ``Strategy.aggregated`` answers."""
        strategy = self.sim.strategy
        ctx = strategy.c
        ctx.round_aggregated = aggregated
        try:
            strategy.observe(rnd, outcomes)
        finally:
            ctx.round_aggregated = None

    def receive_uploads(self, rnd: int, tasks: list[TrainTask], updates: list[Update]) -> list[tuple[int, float, float]]:
        """Hand each update (of ``tasks``, in order) to the method's wire: a quantized upload's real encoded size
        replaces the bytes its upload was priced at (``TrainTask.upload_bytes``: not asked again, since the device
        of a late update may have been dispatched anew since, with a new price). Returns (device, real, priced) of
        each, which a replay reapplies."""
        sim = self.sim
        wire = sim.strategy.wire
        receipts: list[tuple[int, float, float]] = []
        if wire is None:
            return receipts
        for t, u in zip(tasks, updates, strict=True):
            real = wire.receive(rnd, u)
            if real is not None:
                real += sim.sc.server.header_bytes
                receipts.append((u.assignment.device, real, t.upload_bytes))
                self.apply_receipt(rnd, u.assignment.device, real, t.upload_bytes)
        return receipts

    def apply_receipt(self, rnd: int, device: int, real: float, priced: float) -> None:
        self.sim.system.traffic.repriced_upload(real, priced)
        self.sim.log(rnd, device, "upload_encoded", bytes=real, priced=priced)

    def replayed_uploads(self, rnd: int) -> list[Update]:
        """A replayed round: numerics are not redone, only their effect on the byte count and the event log."""
        for d, real, priced in self.sim.checkpointing.tape.answer("receive", list):
            self.apply_receipt(rnd, d, real, priced)
        return []

    def charge_aggregation(self, outcomes: list[Outcome], aggregated: bool) -> None:
        """Every method's receiving side: decoding each accepted quantized upload, then, when the engine
        ``aggregated`` them (``aggregates``; an asynchronous server's update always), the aggregation (the accepted
        updates' values read, the largest one's region of the global model written)."""
        sim = self.sim
        done = [o.trained or o.assignment for o in outcomes if o.status == "completed"]
        recipes = [sim.strategy.recipe_for(a) for a in done]
        sizes = [r.cost(a.spec).params for r, a in zip(recipes, done, strict=True)]
        tensors = [len(r.shapes(a.spec)) for r, a in zip(recipes, done, strict=True)]
        for a, n, t in zip(done, sizes, tensors, strict=True):
            if a.bits < 32:
                sim.system.server_work.charge("dequantize", QsgdWork(float(n), t, decode=True))
        if sizes and aggregated:
            sim.system.server_work.charge("aggregate", AggregateWork(float(sum(sizes)), float(max(sizes)), sum(tensors)))

    # ------------------------------------------------------------ the row and the round's end

    def row(self, rd: Round, outcomes: list[Outcome], losses: list[float]) -> dict[str, Any]:
        sim = self.sim
        row = rd.row(sim.env.now, outcomes, losses, sim.fleet, sim.system.traffic)
        row.update(rd.comm_waste(outcomes, sim.system.traffic, self.params))
        row["server_time_s"] = rd.server_s
        row.update({f"server_{k}_s": v for k, v in rd.server_split.items()})
        row["server_energy_j"] = sim.system.server_time * sim.system.server_cost.power_w
        self.add_carbon(row)
        return row

    def add_carbon(self, row: dict[str, Any]) -> None:
        """``carbon_g``: the grams of CO2(eq) the mains-powered devices and the server drew from the grid so far
        (only with ``fleet.carbon``)."""
        sim = self.sim
        if sim.fleet.carbon is not None:
            row["carbon_g"] = sim.fleet.carbon_g(sim.env.now) + sim.system.server_carbon_g
        row.update(sim.fleet.observer.row(sim.env.now))  # the physical state's columns (fleet/observe.py)

    def params(self, a: Assignment) -> int:
        return self.sim.strategy.recipe_for(a).cost(a.spec).params

    def end_round(self, rnd: int, row: dict[str, Any], replay: bool) -> bool:
        """A replayed round's bookkeeping, or the row recorded and a checkpoint when due; True: stop here (Ctrl-C)."""
        sim = self.sim
        if replay:
            if sim.progress is not None:
                sim.progress.update(1)
            ck = sim.checkpointing
            if rnd + 1 == ck.resume_round and ck.resume_step is None:  # a step's: the async server ends the replay
                sim.end_replay()
            return False
        sim.record(rnd, row)
        every = sim.sc.output.checkpoint
        if rnd + 1 < sim.sc.rounds and (sim.status.stop_requested or checkpointing.due(sim.checkpointing, every, rnd + 1)):
            sim.checkpoint(rnd + 1)
            if sim.status.stop_requested:
                sim.status.interrupted = True
                return True
        return False


@dataclass
class Played:
    """What ``play_round`` leaves for its caller: the round, its outcomes, the loss of each update it received,
    the late updates it folded in (semi_async), whether it aggregated (``Toolkit.aggregates``; a replayed round's
    too) and the samples it aggregated (0 when it did not, or trained nothing)."""

    rd: Round
    outcomes: list[Outcome]
    losses: list[float]
    late: list[TrainTask] = field(default_factory=list)
    aggregated: bool = False
    samples: float = 0.0


Serve = Callable[[Round, "list[Outcome] | None"], Generator[Any, Any, None]]  # (round, None before dispatch / outcomes)


def play_round(
    kit: Toolkit, rnd: int, replay: bool, serve: Serve, *, view: FleetView | None = None, key: tuple[int, ...] = (),
    holding: Callable[[], AbstractContextManager[Any]] = nullcontext, late: Any = None,
) -> Generator[Any, Any, Played | None]:
    """One synchronous round, played by the flat server or a gateway: wait, select, serve, dispatch, close, learn or
    replay, serve. ``serve``: the server work on the clock (the server's, a gateway's); ``view`` and ``key``: the
    devices a gateway selects from and its selection stream; ``holding``: the model the method works on while it
    selects and aggregates (a gateway's copy); ``late``: semi_async's ``LateUpdates``. None: never enough devices."""
    sim = kit.sim
    rd = kit.new_round(rnd)
    if not (yield from kit.wait_for_participants(rnd, view)):
        return None
    with holding():
        assignments = kit.select(rnd, view, key)
    yield from serve(rd, None)  # set-up work (first round) and selection work
    kit.dispatch(rd, assignments)
    if late is not None and sim.sc.numerics == "torch" and not replay:
        for t in rd.tasks:  # a late update trains from what its device downloaded in this round
            t.base = sim.learning.download(t.assignment)
    outcomes = yield from kit.close(rd)
    arrived = late.arrived(rnd) if late is not None else []
    aggregated = kit.aggregates(outcomes, arrived)
    samples = 0.0
    if replay:
        updates = kit.replayed_uploads(rnd)
    else:
        with holding():
            updates = kit.learn(rnd, rd.tasks, outcomes, arrived)
        if aggregated:
            samples = float(sum(u.num_samples for u in updates))
    # only the losses outlive the aggregation: the updates' client states would otherwise stay in memory through
    # the evaluation and the next round's training
    losses = [u.loss for u in updates]
    del updates
    yield from serve(rd, outcomes)  # aggregation-side work
    return Played(rd, outcomes, losses, arrived, aggregated, samples)
