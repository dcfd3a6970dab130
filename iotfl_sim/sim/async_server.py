"""The asynchronous server (``server.mode: async``): no rounds; ``concurrency`` devices train at once and the
method (``algorithms.base.Asynchronous``: FedAsync, FedBuff) folds their updates into the model as they arrive.

The loop, on the simulated clock:

1. **Fill the free slots.** ``continuous`` dispatch fills a slot the moment a task ends (completed or failed,
   the instant the server hears of it); ``after_update`` only after a server model update, or when nothing is in
   flight (every task of the last wave failed); so it needs ``concurrency`` >= the method's buffer size, else no
   wave could make a version and every one would be refilled before an update (refused at set-up). The method picks ``k`` = free slots among the selectable devices (``select_some``), with a stream
   keyed by the dispatch wave; each task records the model version it downloads and, with real numerics, the
   weights themselves (captured at dispatch: a device trains from what it downloaded, never a newer model).
2. **Wait** for the first task to report, or a task's deadline (``server.deadline_s``, counted from its
   dispatch: a silent failure or a task still running is dropped then), or, with free slots and no device to
   fill them, ``server.retry_s``. Nothing about a task's end is known before it happens.
3. **Settle** what happened at this instant, in finishing order: a failure frees its slot; an update joins the
   buffer with its staleness (versions applied since its download). When the buffer holds ``buffer_size``
   updates they are trained for real (from their captured weights), charged, applied (version + 1), and the
   row is written: one ``rounds.csv`` row per model version.

A task's random draws (link, memory, compute jitter, training seed) are keyed by (device, wave), as a round's
are by (device, round): a dispatch that fills every slot after each update (``after_update``, concurrency =
buffer size) draws exactly what a synchronous round does.

The top of the loop is the run's safe point: nothing is half settled there, so a stop request (Ctrl-C, SIGTERM)
is honoured at the next one, with a checkpoint at that step (``steps``) even when no version is coming, and a
resumed run's replay of such a checkpoint ends there. A run that dispatched ``server.max_tasks_per_version``
tasks since its last version without making the next one (every task late, failing, ...) ends with an error.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import simpy

from iotfl_sim.algorithms.base import Asynchronous, Outcome, Update
from iotfl_sim.core.errors import ScenarioError
from iotfl_sim.seeding import stream
from iotfl_sim.sim import checkpointing
from iotfl_sim.sim.learning import TrainTask
from iotfl_sim.sim.round import (
    Round,
    Task,
    WeightsCheck,
    capture_weights,
    restore_weights,
    settle,
    start_task,
)

if TYPE_CHECKING:
    from iotfl_sim.sim.engine import Simulation

MAX_IDLE_RETRIES = 100_000  # as a synchronous round's wait for participants
TASKS_PER_VERSION = 100  # default server.max_tasks_per_version, per slot or buffered update


@dataclass
class Wave:
    """One dispatch of the asynchronous server: the owner of its tasks (``sim.round.TaskOwner``)."""

    rnd: int  # the wave's index: keys its tasks' draws and names them in the event log

    def arrived_in_time(self, task: Task) -> None:
        if not task.report.triggered:
            task.report.succeed()


@dataclass
class Buffered:
    task: Task
    outcome: Outcome
    staleness: int


@dataclass
class AsyncServer:
    """The asynchronous server's state: the model version, the tasks in flight, the buffer of arrived updates
    and what happened since the last row (``row``: a ``Round`` used as the interval's accumulator)."""

    sim: Simulation
    version: int = 0
    waves: int = 0
    updates_applied: int = 0
    in_flight: list[Task] = field(default_factory=list)
    deadline_at: dict[int, float] = field(default_factory=dict)  # id(task) -> instant the server gives up on it
    buffer: list[Buffered] = field(default_factory=list)
    ended: list[tuple[Task, Outcome]] = field(default_factory=list)
    settling: list[tuple[Task, str]] = field(default_factory=list)  # ended at this instant, not yet counted
    row: Round | None = None
    steps: int = 0  # passes through the loop's top (its safe point) so far
    dispatched: int = 0  # tasks dispatched since the last version

    def __post_init__(self) -> None:
        self.max_tasks = check_server(self.sim.sc, self.strategy)

    @property
    def strategy(self) -> Asynchronous:
        return self.sim.strategy  # type: ignore[return-value]

    def concurrency(self) -> int:
        sc = self.sim.sc
        return sc.server.concurrency or sc.selection_size()

    # ------------------------------------------------------------ the process

    def run(self):
        """The server's process (``Simulation.run`` starts it in async mode)."""
        sim, sc = self.sim, self.sim.sc
        self.row = Round(sim.env, 0, 0, sim._round_start())
        may_fill, idle = True, 0
        while self.version < sc.rounds:
            if self._stop_here():
                return
            self.steps += 1
            free = self.concurrency() - len(self.in_flight)
            if free > 0 and (may_fill or not self.in_flight):
                if self.dispatched >= self.max_tasks:
                    raise ScenarioError(self._no_progress())
                yield from self._fill(free)
            may_fill = sc.server.dispatch == "continuous"
            if not self.in_flight:
                if sim.view.known_gone.all():
                    sim.stalled = self.version
                    return
                idle += 1
                if idle > MAX_IDLE_RETRIES:
                    sim.stalled = self.version
                    return
                yield sim.env.timeout(sc.server.retry_s)
                continue
            idle = 0
            yield self._next_event(free_slots=self.concurrency() > len(self.in_flight))
            self.settling = self._settled()
            while self.settling:
                task, status = self.settling.pop(0)
                updated = yield from self._settle(task, status)
                if updated:
                    may_fill = True
                    if self.version >= sc.rounds or sim.interrupted:
                        return

    def _stop_here(self) -> bool:
        """The loop's top, between two events: a resumed run's replay of a checkpoint taken at this step ends
        here; a stop request is honoured here (a checkpoint at this step, ``sim.checkpointing``). True: stop."""
        sim = self.sim
        ck = sim.checkpointing
        if ck.pending is not None:
            if ck.resume_step != self.steps:
                return False  # replaying, not yet at the checkpoint (or it is a version's: ``_update`` ends it)
            checkpointing.end_replay(sim)
        if not sim.stop_requested:
            return False
        sim.checkpoint(self.version, step=self.steps)
        sim.interrupted = True
        return True

    def _no_progress(self) -> str:
        """The error of a run that dispatched ``max_tasks`` tasks since its last version without making one."""
        sim, srv = self.sim, self.sim.sc.server
        ends: dict[str, int] = {}
        for _, outcome in self.ended:
            ends[outcome.status] = ends.get(outcome.status, 0) + 1
        how = ", ".join(f"{n:,} {status}" for status, n in sorted(ends.items(), key=lambda x: -x[1])) or "none"
        fix = "raise server.deadline_s (tasks missed it)" if "deadline" in ends else "fix what makes the tasks fail"
        setting = "server.max_tasks_per_version" + ("" if srv.max_tasks_per_version is not None else f" (default {self.max_tasks:,})")
        return (
            f"no progress: {self.dispatched:,} tasks dispatched since model version {self.version} made no new version "
            f"by simulated time {sim.env.now:,.0f} s (ended: {how}; {len(self.buffer)} of {self.strategy.buffer_size()} "
            f"updates buffered); {fix}, or raise {setting} to wait longer"
        )

    def _fill(self, free: int):
        """Dispatch up to ``free`` tasks to selectable devices (none selectable: the slots stay free)."""
        sim = self.sim
        wave = self.waves
        sim.view.now, sim.view.rnd = sim.env.now, wave
        if not sim.view.has_selectable(1):
            return
        self.waves += 1
        assignments = sim.tape.answer("select", lambda: self._select(wave, free))
        assert self.row is not None
        yield from sim._serve(self.row)  # set-up work (first wave) and selection work
        owner = Wave(wave)
        capture = sim.sc.numerics == "torch" and not self._replaying()
        deadline = sim.sc.server.deadline_s
        self.dispatched += len(assignments)
        for a in assignments:
            task = start_task(sim.env, a, owner, sim.fleet, sim.tasks.run)
            task.version = self.version
            if capture:
                task.base = sim.learning.download(a)
            if deadline is not None:
                self.deadline_at[id(task)] = sim.env.now + deadline
            self.in_flight.append(task)

    def _select(self, wave: int, k: int):
        sim = self.sim
        assignments = self.strategy.select_some(wave, sim.view, stream(sim.seed, "select", wave), k)
        if sim.strategy.wire is not None:
            sim.strategy.wire.dispatch(wave, assignments, sim.strategy)
        return assignments

    def _next_event(self, free_slots: bool) -> simpy.Event:
        env = self.sim.env
        waiting: list[simpy.Event] = [t.report for t in self.in_flight]
        if self.deadline_at:
            waiting.append(env.timeout(max(0.0, min(self.deadline_at.values()) - env.now)))
        if free_slots:  # no device could fill a slot: look again later
            waiting.append(env.timeout(self.sim.sc.server.retry_s))
        return simpy.AnyOf(env, waiting)

    def _settled(self) -> list[tuple[Task, str]]:
        """The tasks the server has heard from, or given up on, by now, in the order they finished (then of
        dispatch); each leaves the tasks in flight."""
        now = self.sim.env.now
        done: list[tuple[float, int, Task, str]] = []
        keep = []
        for i, t in enumerate(self.in_flight):
            if t.report.triggered:
                done.append((t.finished_at, i, t, t.status or "deadline"))
            elif self.deadline_at.get(id(t), float("inf")) <= now:
                status = t.status or "deadline"  # a silent failure, noticed at the deadline, or still running
                done.append((now if t.status is None else t.finished_at, i, t, status))
            else:
                keep.append(t)
        self.in_flight = keep
        for _, _, t, _ in done:
            self.deadline_at.pop(id(t), None)
        return [(t, s) for _, _, t, s in sorted(done, key=lambda x: (x[0], x[1]))]

    def _settle(self, task: Task, status: str):
        """Count a task's end; an update joins the buffer, and a full buffer makes a model version. Returns
        whether the model changed."""
        sim = self.sim
        outcome = settle(task, status, sim.fleet, sim.log)
        self.ended.append((task, outcome))
        if status == "depleted":
            sim.view.known_gone[task.assignment.device] = True
        if status != "completed":
            return False
        self.buffer.append(Buffered(task, outcome, self.version - task.version))
        if len(self.buffer) < self.strategy.buffer_size():
            return False
        yield from self._update()
        return True

    # ------------------------------------------------------------ a model version

    def _update(self):
        sim = self.sim
        buffered, self.buffer = self.buffer, []
        replay = self._replaying()
        updates = self._train(buffered, replay)
        outcomes = [b.outcome for b in buffered]
        sim._charge_aggregation(outcomes, force=True)
        if updates:
            t0 = time.perf_counter()
            self.strategy.apply(self.version + 1, updates)
            sim.host["aggregate"] += time.perf_counter() - t0
        losses = [u.loss for u in updates]
        del updates  # applied: their client states must not stay in memory through the evaluation
        self.version += 1
        self.dispatched = 0
        self.updates_applied += len(buffered)
        for b in buffered:
            sim.log(b.task.rnd, b.task.assignment.device, "apply", staleness=b.staleness, version=self.version)
        ended, self.ended = self.ended, []
        sim.strategy.observe(self.version - 1, [o for _, o in ended])
        assert self.row is not None
        rd = self.row
        rd.rnd = self.version - 1
        rd.tasks = [t for t, _ in ended]
        yield from sim._serve(rd)  # aggregation-side work
        row = sim._row(rd, [o for _, o in ended], losses)
        stale = [b.staleness for b in buffered]
        row.update(
            updates_applied=self.updates_applied,
            staleness_mean=sum(stale) / len(stale),
            staleness_max=max(stale),
            in_flight=len(self.in_flight),
        )
        self.row = Round(sim.env, self.version, 0, sim._round_start())
        sim._end_round(self.version - 1, row, replay)  # recorded, checkpointed when due (Ctrl-C: interrupted)

    def _train(self, buffered: list[Buffered], replay: bool) -> list[Update]:
        sim = self.sim
        if replay:
            sim._replayed_uploads(self.version)
            return []
        if sim.sc.numerics == "none":
            sim.tape.answer("receive", list)
            return []
        t0 = time.perf_counter()
        updates = sim.learning.train_tasks(
            [TrainTask(b.outcome, b.task.rnd, b.task.base, b.staleness) for b in buffered]
        )
        receipts = sim._receive_uploads(self.version, updates)
        sim.tape.answer("receive", lambda: receipts)
        sim.host["train"] += time.perf_counter() - t0
        return updates

    def _replaying(self) -> bool:
        return self.sim.checkpointing.pending is not None

    # ------------------------------------------------------------ checkpoints

    def captured(self) -> dict[str, Any]:
        """The downloaded weights of every task in flight, ending now or buffered (``sim.round.capture_weights``)."""
        return capture_weights(self._holding_weights())

    def restore(self, saved: Any, check: WeightsCheck | None = None) -> None:
        restore_weights(self._holding_weights(), saved, check)

    def _holding_weights(self) -> list[Task]:
        return [*self.in_flight, *(t for t, _ in self.settling), *(b.task for b in self.buffer)]


def check_server(sc: Any, strategy: Asynchronous) -> int:
    """The set-up checks of the asynchronous server against the method (``validate`` and ``run``); returns the
    most tasks dispatched since a version before the run stops for no progress (``server.max_tasks_per_version``)."""
    srv = sc.server
    k = strategy.buffer_size()
    c = srv.concurrency or sc.selection_size()
    slots = f"server.concurrency ({c}{'' if srv.concurrency else ', by default the selection size'})"
    if srv.dispatch == "after_update" and k > c:
        raise ScenarioError(
            f"server.dispatch: after_update refills slots only after a model update, but a version of "
            f"{sc.algorithm.name} needs {k} updates (algorithm.buffer_size) and {slots} devices send at most {c} "
            f"per wave, so every wave would be refilled before any update; raise server.concurrency to {k} or more, "
            "lower algorithm.buffer_size, or use server.dispatch: continuous"
        )
    least = max(c, k)
    limit = srv.max_tasks_per_version
    if limit is None:
        return TASKS_PER_VERSION * least
    if limit < least:
        raise ScenarioError(
            f"server.max_tasks_per_version: {limit} is below what one version may need: max({slots}, "
            f"the {k} updates a version of {sc.algorithm.name} folds); set it to {least} or more (or remove it: "
            f"default {TASKS_PER_VERSION * least:,})"
        )
    return limit
