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
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from iotfl_sim.core.errors import ScenarioError
from iotfl_sim.sim.async_tasks import Buffered, InFlight, check_server, no_progress
from iotfl_sim.sim.buffered_async import asynchronous_form
from iotfl_sim.sim.learning import TrainTask
from iotfl_sim.sim.round import (
    MODE_COLUMNS,
    Round,
    Task,
    WeightsCheck,
    capture_weights,
    restore_weights,
)
from iotfl_sim.sim.server_loop import ServerLoop
from iotfl_sim.sim.toolkit import MAX_WAITS, Toolkit

if TYPE_CHECKING:
    from iotfl_sim.algorithms.base import Outcome, RunLeft
    from iotfl_sim.sim.engine import Simulation


@dataclass
class AsyncServer(ServerLoop):
    """The asynchronous server: the model version, the tasks in flight, the buffer
    of arrived updates and what happened since the last row (``row``: a ``Round`` used as the interval's accumulator)."""

    sim: Simulation
    version: int = 0
    updates_applied: int = 0
    buffer: list[Buffered] = field(default_factory=list)
    ended: list[tuple[Task, Outcome]] = field(default_factory=list)
    settling: list[tuple[Task, str]] = field(default_factory=list)  # ended at this instant, not yet counted
    row: Round | None = None
    steps: int = 0  # passes through the loop's top (its safe point) so far

    columns = MODE_COLUMNS["async"]
    stop_note = "after this event"
    between_versions = True

    def __post_init__(self) -> None:
        self.method = asynchronous_form(self.sim.strategy, self.sim.sc, self._run_left)  # its rule for folding updates in
        self.max_tasks = check_server(self.sim.sc, self.method)
        self.kit = Toolkit(self.sim)
        self.in_flight = InFlight(self.sim.env, self.sim.sc.server.retry_s, self.sim.sc.server.deadline_s)
        self.slots = self.sim.sc.server.concurrency or self.sim.sc.selection_size()  # tasks training at once

    # ------------------------------------------------------------ the process

    def run(self) -> Generator[Any, Any, None]:
        """The server's process (``Simulation.run`` starts it in async mode)."""
        sim, sc = self.sim, self.sim.sc
        self.row = self.kit.new_round(0, wanted=0)
        may_fill, idle = True, 0
        while self.version < sc.rounds:
            if self._stop_here():
                return
            self.steps += 1
            free = self.slots - len(self.in_flight)
            if free > 0 and (may_fill or not self.in_flight):
                if self.in_flight.dispatched >= self.max_tasks:
                    raise ScenarioError(no_progress(
                        sc, self.in_flight.dispatched, self.version, sim.env.now, [o for _, o in self.ended],
                        len(self.buffer), self.method.buffer_size(), self.max_tasks,
                    ))  # fmt: skip
                assert self.row is not None
                yield from self.in_flight.fill(self.kit, self.method, free, self.version, self.row, capture=not self._replaying())
            may_fill = sc.server.dispatch == "continuous"
            if not self.in_flight:
                idle += 1
                if sim.view.known_gone.all() or idle > MAX_WAITS:
                    sim.status.stalled = self.version
                    return
                yield sim.env.timeout(sc.server.retry_s)
                continue
            idle = 0
            yield self.in_flight.next_event(free_slots=self.slots > len(self.in_flight))
            self.settling = self.in_flight.settled()
            while self.settling:
                task, status = self.settling.pop(0)
                updated = yield from self._settle(task, status)
                if updated:
                    may_fill = True
                    if self.version >= sc.rounds or sim.status.interrupted:
                        return

    def _run_left(self) -> RunLeft:  # what is left of the run at a dispatch, for the buffered form
        versions = self.sim.sc.rounds - self.version
        return self.in_flight.run_left(versions * self.method.buffer_size() - len(self.buffer), versions)

    def _stop_here(self) -> bool:
        """The loop's top, between two events: a resumed run's replay of a checkpoint taken at this step ends
        here; a stop request is honoured here (a checkpoint at this step, ``sim.checkpointing``). True: stop."""
        sim = self.sim
        ck = sim.checkpointing
        if ck.pending is not None:
            if ck.resume_step != self.steps:
                return False  # replaying, not yet at the checkpoint (or it is a version's: ``_update`` ends it)
            sim.end_replay()
        if not sim.status.stop_requested:
            return False
        sim.checkpoint(self.version, step=self.steps)
        sim.status.interrupted = True
        return True

    def _settle(self, task: Task, status: str) -> Generator[Any, Any, bool]:
        """Count a task's end; an update joins the buffer, and a full buffer makes a model version. Returns
        whether the model changed."""
        outcome = self.kit.settle(task, status)
        self.ended.append((task, outcome))
        if status != "completed":
            return False
        self.buffer.append(Buffered(task, outcome, self.version - task.version))
        if len(self.buffer) < self.method.buffer_size():
            return False
        yield from self._update()
        return True

    # ------------------------------------------------------------ a model version

    def _update(self) -> Generator[Any, Any, None]:
        sim, kit = self.sim, self.kit
        buffered, self.buffer = self.buffer, []
        replay = self._replaying()
        tasks = [TrainTask(b.outcome, b.task.rnd, b.task.base, b.staleness, upload_bytes=b.task.upload_bytes) for b in buffered]
        updates = kit.replayed_uploads(self.version) if replay else kit.train(self.version, tasks)
        kit.charge_aggregation([b.outcome for b in buffered], aggregated=True)
        if updates:
            t0 = time.perf_counter()
            self.method.apply(self.version + 1, updates)
            sim.host.times["aggregate"] += time.perf_counter() - t0
        losses = [u.loss for u in updates]
        del updates  # applied: their client states must not stay in memory through the evaluation
        self.version += 1
        self.in_flight.dispatched = 0
        self.updates_applied += len(buffered)
        for b in buffered:
            sim.log(b.task.rnd, b.task.assignment.device, "apply", staleness=b.staleness, version=self.version)
        ended, self.ended = self.ended, []
        kit.observe(self.version - 1, [o for _, o in ended], aggregated=True)  # a version is an aggregation
        assert self.row is not None
        rd = self.row
        rd.rnd = self.version - 1
        rd.tasks = [t for t, _ in ended]
        yield from kit.serve(rd)  # aggregation-side work
        row = kit.row(rd, [o for _, o in ended], losses)
        stale = [b.staleness for b in buffered]
        row.update(
            updates_applied=self.updates_applied,
            staleness_mean=sum(stale) / len(stale),
            staleness_max=max(stale),
            in_flight=len(self.in_flight),
        )
        self.row = kit.new_round(self.version, wanted=0)
        kit.end_round(self.version - 1, row, replay)  # recorded, checkpointed when due (Ctrl-C: interrupted)

    def _replaying(self) -> bool:
        return self.sim.checkpointing.pending is not None

    # ------------------------------------------------------------ checkpoints, figures

    def capture(self) -> dict[str, Any]:
        """The downloaded weights of every task in flight, ending now or buffered (``sim.round.capture_weights``)."""
        return {"in_flight": capture_weights(self._holding_weights())}

    def restore(self, state: dict[str, Any], check: Callable[[str], WeightsCheck]) -> None:
        restore_weights(self._holding_weights(), state.get("in_flight"), check("in_flight"))

    def _holding_weights(self) -> list[Task]:
        return [*self.in_flight.tasks, *(t for t, _ in self.settling), *(b.task for b in self.buffer)]
