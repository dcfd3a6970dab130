"""The SimPy engine: a server loop runs rounds; each task is a device process on the simulated clock.

Simulated time comes only from the cost model (bytes, FLOPs, bandwidth, power). Real training runs
after the round's protocol has been simulated, for the accepted updates only, through the executor
(``sim.learning``): numerics depend on which device trains which submodel from which weights, never on
durations. The run's ``ServerLoop`` (``sim.server_loop``, one per server mode) plays the rounds with the round
toolkit (``sim.toolkit``); a ``sim.round.Round`` owns its tasks, the devices reach the engine through
``sim.device.TaskHost``, checkpoints and replay live in ``sim.checkpointing``.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy
import torch

from iotfl_sim import faults
from iotfl_sim.algorithms.base import Assignment, DeviceState, Strategy
from iotfl_sim.core.errors import CheckpointError
from iotfl_sim.fl.evaluate import forget_prototypes
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec
from iotfl_sim.fleet.fleet import Fleet
from iotfl_sim.fleet.network import SharedMedium
from iotfl_sim.output.run_dir import RunRecorder
from iotfl_sim.scenario.model import Scenario
from iotfl_sim.sim import checkpointing
from iotfl_sim.sim.async_server import AsyncServer
from iotfl_sim.sim.device import SILENT_FAILURES
from iotfl_sim.sim.hierarchy import GatewayTier
from iotfl_sim.sim.host import ExecutorFactory, Host
from iotfl_sim.sim.learning import Learning
from iotfl_sim.sim.memory import InfeasibleFleetError
from iotfl_sim.sim.semi_async import SemiAsyncLoop
from iotfl_sim.sim.server_loop import ServerLoop
from iotfl_sim.sim.summary import RunFigures, device_columns, summarize
from iotfl_sim.sim.sync_loop import SyncLoop
from iotfl_sim.sim.system import SystemModel
from iotfl_sim.sim.view import ServerView

if TYPE_CHECKING:
    from iotfl_sim.sim.setup import NumericsSetup

__all__ = ["ExecutorFactory", "InfeasibleFleetError", "Simulation"]


@dataclass
class RunStatus:
    """How the run stands: a stop asked for (Ctrl-C, SIGTERM), honoured, or a stall."""

    stalled: int | None = None  # the round the run stalled at: too few devices left to go on
    stop_requested: bool = False  # set by the first Ctrl-C / SIGTERM: stop at the end of the round
    stop_signal: int | None = None  # which signal asked (``summary.json``'s ``stopped_by``)
    interrupted: bool = False  # the run stopped early on that request


def make_loop(sim: Simulation) -> ServerLoop:
    """The loop of the run's server mode (``server.mode``, and ``hierarchy``, which runs synchronous rounds)."""
    if sim.sc.hierarchy is not None:
        return GatewayTier(sim)
    return {"async": AsyncServer, "semi_async": SemiAsyncLoop}.get(sim.sc.server.mode, SyncLoop)(sim)


class Simulation:
    """One run: the fleet, the method, the simulated clock and the run's figures; ``run()`` plays it. Built by
    ``sim.setup.build_simulation`` from a ``scenario.resolved.ResolvedScenario``; it holds the parts it is given."""

    def __init__(
        self,
        sc: Scenario,
        *,
        fleet: Fleet,
        numerics: NumericsSetup,
        env: simpy.Environment,
        system: SystemModel,
        strategy: Strategy,
        host: Host,
        learning: Learning,
        view: ServerView,
        recorder: RunRecorder | None = None,
        progress: Any = None,
    ) -> None:
        self.sc = sc
        self.recorder = recorder
        self.progress = progress
        self.fleet = fleet
        self.numerics = numerics
        self.env = env
        self.system = system
        self.strategy = strategy
        self.host = host
        self.learning = learning
        self.view = view
        self.checkpointing = checkpointing.CheckpointState()  # with the tape, which run_scenario / resume_run turn on
        self.rows: list[dict[str, Any]] = []
        self.status = RunStatus()
        self.loop: ServerLoop = make_loop(self)  # the server mode, chosen once

    @property
    def seed(self) -> int:
        return self.sc.seed

    @property
    def memory_scale(self) -> float:
        """Bytes per unit of the event log's memory figures (``sim.device.TaskHost``)."""
        return self.system.memory_need.scale

    @property
    def recipe(self) -> ModelRecipe:
        """The model the run trains, as the method's context has it."""
        assert self.system.recipe is not None
        return self.system.recipe

    @property
    def stop_requested(self) -> bool:
        """A stop asked for (the runner's signal handler sets it): honoured at the loop's next safe point."""
        return self.status.stop_requested

    @stop_requested.setter
    def stop_requested(self, value: bool) -> None:
        self.status.stop_requested = value

    def predict_train_seconds(self, recipe: ModelRecipe, spec: SubmodelSpec) -> np.ndarray:
        """Seconds of one local round of ``spec`` for every device by its declared profile, without jitter."""
        return self.system.training_time.predict(recipe, spec)

    # ------------------------------------------------------------ the run

    def run(self) -> dict[str, Any]:
        if self.sc.numerics == "torch":
            # again here: another Simulation built meanwhile may have restored the caller's count at its end
            torch.set_num_threads(self.sc.executor.threads)
        proc = self.env.process(self.loop.run())
        try:
            self.env.run(until=proc)
        except BaseException as e:
            if not isinstance(e, KeyboardInterrupt):  # a second Ctrl-C stops at once: no waiting for an evaluation
                self.write_held_row(failing=True)  # the last round that ended keeps its row
            raise
        self.write_held_row()
        if self.checkpointing.pending is not None:  # the run ended (stalled) before the replay reached the checkpoint
            raise CheckpointError(
                f"checkpoint of round {self.checkpointing.resume_round}: replaying the run does not reproduce it (it "
                "stops earlier); the code or the data changed since the run started: start a new run"
            )
        status = self.status
        if not status.interrupted:
            faults.hit("summary")
        host_total = self.host.elapsed()  # set-up counts as bookkeeping
        figures = self.run_figures()
        summary = summarize(figures, host_total)
        summary["status"] = "interrupted" if status.interrupted else "complete"
        if status.interrupted and status.stop_signal is not None:
            summary["stopped_by"] = signal.Signals(status.stop_signal).name
        if self.recorder is not None:
            self.recorder.devices(device_columns(figures))
            self.recorder.summary(summary)
        if self.host.executor is not None:
            self.host.executor.close()
        forget_prototypes()
        torch.set_num_threads(self.host.threads_before)
        return summary

    def record(self, rnd: int, row: dict[str, Any]) -> None:
        """Evaluate when due (every ``eval_every`` rounds and after the last), add host times, write the row. With
        ``overlap_eval`` the row is held until its evaluation ends: written before the next round's row, a
        checkpoint, or the run's end, so every file gets the same lines in the same order."""
        self.write_held_row()
        sc, times = self.sc, self.host.times
        evaluation = None
        if sc.numerics == "torch" and ((rnd + 1) % sc.server.eval_every == 0 or rnd + 1 == sc.rounds):
            t0 = time.perf_counter()
            evaluation = self.learning.start_evaluation(overlap=self.host.overlap_eval and rnd + 1 < sc.rounds)
            times["eval"] += time.perf_counter() - t0
        host = {  # as at this round's end; host_eval_s is completed when the evaluation is
            "host_train_s": times["train"],
            "host_eval_s": 0.0,
            "host_aggregate_s": times["aggregate"],
            "host_other_s": self.host.elapsed() - sum(times.values()),
        }
        self.host.held = (row, host, evaluation)
        if evaluation is None or evaluation.pending.done():
            self.write_held_row()

    def write_held_row(self, failing: bool = False) -> None:
        """Write the row ``record`` holds, once its evaluation ended (waiting for it, which counts as evaluation
        time). ``failing``: the run is ending on an error; a failed evaluation then leaves the row out."""
        if self.host.held is None:
            return
        row, host, evaluation = self.host.held
        self.host.held = None
        if evaluation is not None:
            t0 = time.perf_counter()
            try:
                row.update(evaluation.result())
            except BaseException:
                if failing:
                    return
                raise
            self.host.times["eval"] += time.perf_counter() - t0
        row.update(host, host_eval_s=self.host.times["eval"])
        if self.recorder is not None:
            self.recorder.round_row(row)
        self.rows.append(row)
        if self.progress is not None:  # this round's figures first, so the bar draws them with its count
            acc = row.get("acc_full")
            post = {"sim": f"{row['sim_time_s']:,.0f}s"}
            if acc is not None:
                post["acc"] = f"{acc:.3f}"
            self.progress.set_postfix(post, refresh=False)
            self.progress.update(1)

    # ------------------------------------------------------------ what a device task asks (sim.device.TaskHost)

    def log(self, rnd: int, device: int, event: str, at: float | None = None, **fields: Any) -> None:
        if self.recorder is not None:
            self.recorder.event(self.env.now if at is None else at, rnd, device, event, **fields)

    def hold_log(self, t0: float) -> int | None:
        return self.recorder.hold(t0) if self.recorder is not None else None

    def release_log(self, hold: int) -> None:
        if self.recorder is not None:
            self.recorder.release(hold)

    def silent(self, reason: str) -> bool:
        """``depleted`` and ``offline`` are silent with a deadline (the server notices then); without one a silent
        failure would hold the round forever, so every failure reports at once."""
        return reason in SILENT_FAILURES and self.sc.server.deadline_s is not None

    def medium(self, d: int, up: bool) -> SharedMedium | None:
        return self.system.medium(d, up)

    def recipe_for(self, a: Assignment) -> ModelRecipe:
        return self.strategy.recipe_for(a)

    def wire_bytes(self, a: Assignment, recipe: ModelRecipe, up: bool) -> float:
        """Bytes of a task's download (``up`` False) or upload: the strategy's wire's encoded size when it has a
        wire (``algorithms.base.Wire``), else parameters x bits / 8 (32 bits down, ``a.bits`` up); plus the header."""
        if self.strategy.wire is None:
            return self.priced_bytes(a, recipe, up)
        return self.checkpointing.tape.answer("wire", lambda: self.priced_bytes(a, recipe, up))

    def priced_bytes(self, a: Assignment, recipe: ModelRecipe, up: bool) -> float:
        """``wire_bytes`` as the method's wire prices them now (not through the tape)."""
        wire = self.loop.wire_for(a.device, self.strategy.wire)
        nbytes = None if wire is None else wire.message_bytes(a, up)
        if nbytes is None:
            return recipe.cost(a.spec).params * (a.bits if up else 32) / 8.0 + self.sc.server.header_bytes
        return nbytes + self.sc.server.header_bytes

    def adapt(self, a: Assignment, state: DeviceState) -> Assignment | None:
        """The strategy's device-side hook (recorded: a resumed run replays it)."""
        return self.checkpointing.tape.answer("adapt", lambda: self.strategy.adapt(a, state))

    def training_memory(self, recipe: ModelRecipe, a: Assignment) -> float | None:
        return None if self.system.memory_ignored else self.system.memory_need(recipe, a.spec)

    # ------------------------------------------------------------ checkpoints and resume

    def digest(self) -> list[float]:
        """Figures of the fleet and the engine that a faithful replay reproduces exactly (a resume checks them)."""
        t = self.system.traffic
        engine = [self.env.now, t.down, t.up, self.system.server_time, t.params_sent, t.params_back]
        return [*engine, *self.fleet.digest(), float(self.view.known_gone.sum()), *self.loop.digest()]

    def checkpointed_run(self) -> checkpointing.CheckpointedRun:
        """What a checkpoint reads of the run and a resume writes back, as the run stands now."""
        return checkpointing.CheckpointedRun(
            self.checkpointing, self.strategy, self.loop, self.host, self.rows, self.view.oracle_users,
            self.system.server_work, self.recorder, self.digest(),
        )  # fmt: skip

    def checkpoint(self, done: int, step: int | None = None) -> None:
        """Write a checkpoint after ``done`` rounds, or at ``step`` after version ``done`` of an asynchronous run
        (``sim.checkpointing``), every row it counts written first."""
        self.write_held_row()
        checkpointing.write(self.checkpointed_run(), done, step)

    def resume_from(
        self, meta: dict[str, Any], state: dict[str, Any], tape: list[dict[str, list]], recorder: RunRecorder, source: Path
    ) -> None:
        """Set up a resumed run from the checkpoint whose state file is ``source`` (``sim.checkpointing.begin_resume``);
        ``recorder`` follows the replay (it skips the event lines already on disk; rows are not replayed)."""
        checkpointing.begin_resume(self.checkpointed_run(), meta, state, tape, source)
        self.recorder = recorder

    def end_replay(self) -> None:
        """The resume's replay reached the checkpoint: check it and restore the saved state (``sim.checkpointing``)."""
        checkpointing.end_replay(self.checkpointed_run())

    # ------------------------------------------------------------ the run's end

    def run_figures(self) -> RunFigures:
        """What ``summary.json`` and ``devices.csv`` read of the run."""
        sc, system, dataset = self.sc, self.system, self.numerics.dataset
        return RunFigures(
            name=sc.name,
            algorithm=sc.algorithm.name,
            server_mode=sc.server.mode,
            seed=sc.seed,
            target_accuracies=sc.server.target_accuracies,
            rows=self.rows,
            fleet=self.fleet,
            traffic=system.traffic,
            server_time=system.server_time,
            server_power_w=system.server_cost.power_w,
            host=self.host,
            stalled=self.status.stalled,
            oracle_users=self.view.oracle_users,
            samples_per_device=self.numerics.samples_per_device,
            data_notes=dataset.notes if dataset is not None else "",
            mode_summary=self.loop.summary(),
        )
