"""What the asynchronous server (``sim.async_server``) keeps besides its loop: its dispatch waves, the tasks in
flight with the instant it gives up on each, the updates it buffers, and its set-up checks against the method."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import simpy

from iotfl_sim.algorithms.base import Outcome, RunLeft
from iotfl_sim.core.errors import ScenarioError
from iotfl_sim.sim.round import Round, Task, start_task
from iotfl_sim.sim.toolkit import Toolkit

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
class InFlight:
    """The asynchronous server's dispatch: its waves, the tasks dispatched and not yet settled, each with the instant
    the server gives up on it (its deadline), and how many it dispatched since the last model version."""

    env: simpy.Environment
    retry_s: float
    deadline_s: float | None
    tasks: list[Task] = field(default_factory=list)
    deadline_at: dict[int, float] = field(default_factory=dict)  # id(task) -> instant the server gives up on it
    waves: int = 0
    dispatched: int = 0  # tasks dispatched since the last version

    def __len__(self) -> int:
        return len(self.tasks)

    def fill(
        self, kit: Toolkit, method: Any, free: int, version: int, row: Round, capture: bool
    ) -> Generator[Any, Any, None]:
        """Dispatch up to ``free`` tasks to selectable devices, chosen by ``method.select_some`` (the method, or its
        buffered form: ``sim.buffered_async``; none selectable: the slots stay free); each records
        the model ``version`` it downloads and, with ``capture`` and real numerics, the weights themselves."""
        sim = kit.sim
        wave = self.waves
        kit.stamp(wave)
        if not sim.view.has_selectable(1):
            return
        self.waves += 1
        assignments = kit.select(wave, k=free, some=method)
        yield from kit.serve(row)  # set-up work (first wave) and selection work
        owner = Wave(wave)
        capture = capture and sim.sc.numerics == "torch"
        self.dispatched += len(assignments)
        for a in assignments:
            task = start_task(sim.env, a, owner, sim.fleet, sim.system.tasks.run)
            task.version = version
            if capture:
                task.base = sim.learning.download(a)
            if self.deadline_s is not None:
                self.deadline_at[id(task)] = self.env.now + self.deadline_s
            self.tasks.append(task)

    def run_left(self, needed: int, versions: int) -> RunLeft:
        """What is left of the run (``algorithms.base.RunLeft``), which lacks ``needed`` updates besides those it has
        buffered and ``versions`` model versions: those the tasks in flight will not bring if none fails, those
        tasks, and the versions."""
        return RunLeft(needed - len(self.tasks), tuple(t.assignment for t in self.tasks), versions)

    def next_event(self, free_slots: bool) -> simpy.Event:
        """The first task to report, the first deadline, or (free slots, no device to fill them) ``retry_s``."""
        env = self.env
        waiting: list[simpy.Event] = [t.report for t in self.tasks]
        if self.deadline_at:
            waiting.append(env.timeout(max(0.0, min(self.deadline_at.values()) - env.now)))
        if free_slots:  # no device could fill a slot: look again later
            waiting.append(env.timeout(self.retry_s))
        return simpy.AnyOf(env, waiting)

    def settled(self) -> list[tuple[Task, str]]:
        """The tasks the server has heard from, or given up on, by now, in the order they finished (then of
        dispatch); each leaves the tasks in flight."""
        now = self.env.now
        done: list[tuple[float, int, Task, str]] = []
        keep = []
        for i, t in enumerate(self.tasks):
            if t.report.triggered:
                done.append((t.finished_at, i, t, t.status or "deadline"))
            elif self.deadline_at.get(id(t), float("inf")) <= now:
                status = t.status or "deadline"  # a silent failure, noticed at the deadline, or still running
                done.append((now if t.status is None else t.finished_at, i, t, status))
            else:
                keep.append(t)
        self.tasks = keep
        for _, _, t, _ in done:
            self.deadline_at.pop(id(t), None)
        return [(t, s) for _, _, t, s in sorted(done, key=lambda x: (x[0], x[1]))]


def no_progress(sc: Any, dispatched: int, version: int, now: float, ended: list[Outcome], buffered: int, need: int, limit: int) -> str:
    """The error of a run that dispatched ``limit`` tasks since its last version without making one."""
    srv = sc.server
    ends: dict[str, int] = {}
    for outcome in ended:
        ends[outcome.status] = ends.get(outcome.status, 0) + 1
    how = ", ".join(f"{n:,} {status}" for status, n in sorted(ends.items(), key=lambda x: -x[1])) or "none"
    fix = "raise server.deadline_s (tasks missed it)" if "deadline" in ends else "fix what makes the tasks fail"
    setting = "server.max_tasks_per_version" + ("" if srv.max_tasks_per_version is not None else f" (default {limit:,})")
    return (
        f"no progress: {dispatched:,} tasks dispatched since model version {version} made no new version "
        f"by simulated time {now:,.0f} s (ended: {how}; {buffered} of {need} "
        f"updates buffered); {fix}, or raise {setting} to wait longer"
    )


def buffer_setting(sc: Any) -> str:
    """Where the scenario sets the updates a version folds: a method's own (FedBuff's algorithm.buffer_size), or the
    server's for a round-based method in its buffered form."""
    return "algorithm.buffer_size" if "buffer_size" in type(sc.algorithm).model_fields else "server.buffer_size"


def check_server(sc: Any, strategy: Any) -> int:
    """The set-up checks of the asynchronous server against the method (``validate`` and ``run``); returns the
    most tasks dispatched since a version before the run stops for no progress (``server.max_tasks_per_version``)."""
    srv = sc.server
    k = strategy.buffer_size()
    c = srv.concurrency or sc.selection_size()
    slots = f"server.concurrency ({c}{'' if srv.concurrency else ', by default the selection size'})"
    if srv.dispatch == "after_update" and k > c:
        raise ScenarioError(
            f"server.dispatch: after_update refills slots only after a model update, but a version of "
            f"{sc.algorithm.name} needs {k} updates ({buffer_setting(sc)}) and {slots} devices send at most {c} "
            f"per wave, so every wave would be refilled before any update; raise server.concurrency to {k} or more, "
            f"lower {buffer_setting(sc)}, or use server.dispatch: continuous"
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
