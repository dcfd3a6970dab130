"""One round on the simulated clock: the tasks it dispatched, how many updates the server wants, how many came
back in time, and when that is enough; closing it turns each task into an ``Outcome`` and the round into its row."""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import simpy

from iotfl_sim.algorithms.base import Assignment, Outcome, State
from iotfl_sim.core.catalog import FAILURE_REASONS, SERVER_WORK_KINDS
from iotfl_sim.core.errors import CheckpointError
from iotfl_sim.fleet.fleet import Fleet
from iotfl_sim.output import codec
from iotfl_sim.sim.traffic import Traffic

# rounds.csv columns of each server mode beyond a synchronous round's: client updates folded in so far, the
# staleness (server versions) of this row's, and (async) the other tasks still training when the row's update is
# made (the slot just freed is refilled after it)
MODE_COLUMNS: dict[str, tuple[str, ...]] = {
    "sync": (),
    "semi_async": ("updates_applied", "staleness_mean", "staleness_max"),
    "async": ("updates_applied", "staleness_mean", "staleness_max", "in_flight"),
}


class TaskOwner(Protocol):
    """What a task belongs to: a synchronous ``Round``, or an asynchronous server's dispatch wave
    (``sim.async_server.Wave``). ``rnd`` keys the task's random draws and names it in the event log."""

    rnd: int

    def arrived_in_time(self, task: Task) -> None:
        """The task's update arrived while its owner still takes it."""


@dataclass
class Task:
    """One device's part of a round (or of an asynchronous dispatch): what it was asked to do and how it went."""

    assignment: Assignment
    report: simpy.Event  # succeeds when the server hears back (an update, or a failure it notices)
    owner: TaskOwner
    status: str | None = None
    trained: Assignment | None = None  # what the device actually trained (``Strategy.adapt`` may shrink it)
    finished_at: float = math.nan
    round_over: bool = False
    sent: bool = False  # the model went on the air (counts as sent for the communication waste)
    wire_bytes: float = 0.0  # bytes this task put on the air so far, as counted in ``Traffic``
    upload_bytes: float = math.nan  # its upload's bytes as priced when it went on the air (header included)
    hold: int | None = None  # the event log waits for this task's failure, settled in the past (transfer)
    version: int = 0  # asynchronous modes: the model version the device downloaded
    base: State | None = None  # asynchronous modes: those weights, captured at dispatch (None: system-only)

    @property
    def rnd(self) -> int:
        return self.owner.rnd


def start_task(env: simpy.Environment, a: Assignment, owner: TaskOwner, fleet: Fleet, run: Callable[[Task], Generator]) -> Task:
    """Start the device process (``run``) of assignment ``a``; the device is busy until it ends."""
    task = Task(a, env.event(), owner)
    fleet.busy[a.device] = True
    fleet.tasks[a.device] += 1
    env.process(run(task))
    return task


def settle(task: Task, status: str, fleet: Fleet, log: Callable[..., None]) -> Outcome:
    """The server's verdict on a task: accepted (``completed``) or failed for ``status``, counted on the fleet and
    logged (``accepted``, or ``dropped`` for a deadline or surplus); a task not accepted is over for its owner, so
    an update arriving later is ``late``."""
    d = task.assignment.device
    if status == "completed":
        fleet.completed[d] += 1
        log(task.rnd, d, "accepted")
    else:
        task.round_over = True
        if status in ("deadline", "surplus"):
            log(task.rnd, d, "dropped", reason=status)
        fleet.failures[status][d] += 1
    return Outcome(task.assignment, status, task.trained, task.finished_at)


@dataclass
class RoundStart:
    """The run's cumulative figures when a round began (its row reports the differences)."""

    at: float
    energy_j: float
    bytes_down: float
    bytes_up: float


@dataclass
class Round:
    """A round's tasks and the server's wait for them (``wanted`` updates: the selection size before
    over-selection); ``server_s`` and ``server_split`` are the server's simulated seconds in this round."""

    env: simpy.Environment
    rnd: int
    wanted: int
    start: RoundStart
    tasks: list[Task] = field(default_factory=list)
    arrived: int = 0
    enough: simpy.Event | None = None
    server_s: float = 0.0
    server_split: dict[str, float] = field(default_factory=lambda: dict.fromkeys(SERVER_WORK_KINDS, 0.0))

    def dispatch(self, assignments: list[Assignment], fleet: Fleet, run: Callable[[Task], Generator]) -> None:
        """Start one device process (``run``) per assignment; the devices are busy until it ends."""
        self.enough = self.env.event()
        for a in assignments:
            self.tasks.append(start_task(self.env, a, self, fleet, run))

    def closing(self, deadline_s: float | None) -> simpy.Event:
        """The event that closes the round: every task reported, enough updates arrived, or the deadline
        (counted from dispatch, not from any wait for devices)."""
        assert self.enough is not None
        waiting = [simpy.AllOf(self.env, [t.report for t in self.tasks]), self.enough]
        if deadline_s is not None:
            waiting.append(self.env.timeout(deadline_s))
        return simpy.AnyOf(self.env, waiting)

    def arrived_in_time(self, task: Task) -> None:
        """An update arrived before the round closed: report it, and end the round once enough are in."""
        assert self.enough is not None
        self.arrived += 1
        if not task.report.triggered:
            task.report.succeed()
        if self.arrived >= self.wanted and not self.enough.triggered:
            self.enough.succeed()

    def close(self, fleet: Fleet, log: Callable[..., None]) -> list[Outcome]:
        """Each task's outcome: the first ``wanted`` updates to arrive are used (over-selection keeps the first
        k); a later one is ``surplus``; a task still running is dropped at the ``deadline`` (``surplus`` when the
        round closed because enough had arrived). Counts them on the fleet and logs accepts and drops."""
        in_time = sorted((t for t in self.tasks if t.status == "completed"), key=lambda t: t.finished_at)
        kept = {id(t) for t in in_time[: self.wanted]}
        ended_early = self.enough is not None and self.enough.triggered
        outcomes = []
        for t in self.tasks:
            if id(t) in kept:
                status = "completed"
            else:
                status = "surplus" if t.status == "completed" else t.status or ("surplus" if ended_early else "deadline")
            outcomes.append(settle(t, status, fleet, log))
        return outcomes

    def comm_waste(self, outcomes: list[Outcome], traffic: Traffic, params: Callable[[Assignment], int]) -> dict[str, Any]:
        """The round's waste columns (``Traffic.comm_waste``). Sent: every model put on the air (a task whose
        download started). Returned: the models the server accepted, at the size the device actually trained
        (smaller after on-device pruning). A task that failed or came too late returns nothing, so its whole
        model counts as waste."""
        unused = sum(t.wire_bytes for t, o in zip(self.tasks, outcomes, strict=True) if o.status != "completed")
        sent = sum(params(t.assignment) for t in self.tasks if t.sent)
        back = sum(params(o.trained or o.assignment) for o in outcomes if o.status == "completed")
        return traffic.comm_waste(sent, back, unused)

    def row(self, end: float, outcomes: list[Outcome], losses: list[float], fleet: Fleet, traffic: Traffic) -> dict[str, Any]:
        """The round's figures of the system (``rounds.csv``): time, tasks by outcome, energy, bytes; ``losses``: the
        local training loss of each update the round received."""
        counts = dict.fromkeys(FAILURE_REASONS, 0)
        for o in outcomes:
            if o.status in counts:
                counts[o.status] += 1
        kinds = fleet.class_energy(end)
        by_kind = {k: float(v.sum()) for k, v in kinds.items()}
        by_class = sum(kinds.values())
        total = float(by_class.sum())
        s = self.start
        return {
            "round": self.rnd + 1,
            "sim_time_s": end,
            "round_time_s": end - s.at,
            "selected": len(outcomes),
            "completed": sum(o.status == "completed" for o in outcomes),
            **{f"failed_{r}": c for r, c in counts.items()},
            "alive": fleet.alive_count(end),
            "train_loss": float(np.mean(losses)) if losses else None,
            "energy_j": total,
            "energy_compute_j": by_kind["compute"],
            "energy_radio_j": by_kind["radio"],
            "energy_idle_j": by_kind["idle"],
            "energy_round_j": total - s.energy_j,
            **{f"energy_{c}_j": float(v) for c, v in zip(fleet.class_names, by_class, strict=True)},
            "bytes_down": traffic.down,
            "bytes_up": traffic.up,
            "bytes_down_round": traffic.down - s.bytes_down,
            "bytes_up_round": traffic.up - s.bytes_up,
        }


WeightsCheck = Callable[[Task, Any, str], str | None]  # (task, its saved weights, their entry) -> problem


def capture_weights(tasks: list[Task]) -> dict[str, Any]:
    """The downloaded weights of ``tasks`` for a checkpoint (a replay rebuilds the tasks, not the weights), each
    distinct state once: {"tasks": [[rnd, device, index]], "states": [...]}."""
    index: dict[int, int] = {}
    states: list[State] = []
    keys = []
    for t in tasks:
        if t.base is None:
            continue
        i = index.setdefault(id(t.base), len(states))
        if i == len(states):
            states.append(t.base)
        keys.append([t.rnd, t.assignment.device, i])
    return {"tasks": keys, "states": codec.encode(states)}


def restore_weights(tasks: list[Task], saved: Any, check: WeightsCheck | None = None) -> None:
    """Give replayed ``tasks`` their downloaded weights back (``capture_weights``); a checkpoint whose record does
    not match the replayed tasks, or whose weights ``check`` finds wrong for their task (its words, naming
    ``states[i]``), is refused in one line (``CheckpointError``) before anything is written."""
    try:
        states = codec.decode(saved["states"])
        by_key = {(t.rnd, t.assignment.device): t for t in tasks}
        placed = [(by_key[(rnd, device)], i) for rnd, device, i in saved["tasks"]]
        for task, i in placed:
            task.base = states[i]
    except (KeyError, IndexError, TypeError, ValueError):
        raise CheckpointError("the saved weights of the devices in flight do not match the replayed run") from None
    for task, i in placed if check is not None else ():
        problem = check(task, task.base, f"['states'][{i}]")
        if problem is not None:
            raise CheckpointError(f"{problem} (the weights device {task.assignment.device} downloaded at dispatch {task.rnd})")

