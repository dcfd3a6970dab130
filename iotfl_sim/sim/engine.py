"""The SimPy engine: a server process runs rounds; each task is a device process on the simulated clock.

Simulated time comes only from the cost model (bytes, FLOPs, bandwidth, power). Real training runs
after the round's protocol has been simulated, for the accepted updates only, through the executor
(``sim.learning``): numerics depend on which device trains which submodel from which weights, never on
durations. ``Simulation.server`` is the round, top to bottom; a ``sim.round.Round`` owns its tasks, the
devices reach the engine through ``sim.device.TaskHost``, checkpoints and replay live in ``sim.checkpointing``.
"""

from __future__ import annotations

import math
import reprlib
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import simpy
import torch

from iotfl_sim import faults
from iotfl_sim.algorithms import make_strategy
from iotfl_sim.algorithms.base import (
    Assignment,
    Asynchronous,
    DeviceState,
    ServerWork,
    StrategyContext,
)
from iotfl_sim.exec.auto import Choice, HostWork, choose
from iotfl_sim.exec.base import NumericData, missing_methods, overlaps
from iotfl_sim.exec.cores import available_cores
from iotfl_sim.exec.glibc_heap import heap_tuning_pays, single_malloc_arena
from iotfl_sim.fl.cost import opcost
from iotfl_sim.fl.evaluate import forget_prototypes
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec
from iotfl_sim.fl.torch_seed import seed_torch
from iotfl_sim.fl.train import draws_global_rng
from iotfl_sim.fleet.availability import build_availability
from iotfl_sim.fleet.fleet import Fleet
from iotfl_sim.fleet.network import SharedMedium
from iotfl_sim.output.codec import CheckpointError
from iotfl_sim.output.run_dir import RunRecorder
from iotfl_sim.scenario.loader import ResolvedGroup, ScenarioError, resolve_server, resolved_compute
from iotfl_sim.scenario.model import Executor as ExecutorConfig
from iotfl_sim.scenario.model import Scenario
from iotfl_sim.seeding import int_seed
from iotfl_sim.sim import checkpointing
from iotfl_sim.sim.console import stage
from iotfl_sim.sim.device import SILENT_FAILURES, DeviceTasks
from iotfl_sim.sim.learning import Evaluation, Learning
from iotfl_sim.sim.memory import InfeasibleFleetError, MemoryNeed
from iotfl_sim.sim.server_cost import ServerCost
from iotfl_sim.sim.server_loop import ServerLoop, make_loop
from iotfl_sim.sim.setup import NumericsSetup, prepare_numerics
from iotfl_sim.sim.summary import device_columns, summarize
from iotfl_sim.sim.tape import Tape
from iotfl_sim.sim.traffic import Traffic
from iotfl_sim.sim.training_time import TrainingTime
from iotfl_sim.sim.view import ServerView

# builds a run's executor from its data and the scenario's executor block (``iotfl_sim.run(..., executor=)``)
ExecutorFactory = Callable[[NumericData, ExecutorConfig], Any]

__all__ = ["ExecutorFactory", "InfeasibleFleetError", "Simulation"]


class Simulation:
    """One run: the fleet, the method, the simulated clock and the run's figures; ``run()`` plays it."""

    def __init__(
        self,
        sc: Scenario,
        groups: list[ResolvedGroup],
        recorder: RunRecorder | None = None,
        executor: Any = None,
        progress: Any = None,
        base_dir: Path | None = None,
        executor_factory: ExecutorFactory | None = None,
    ) -> None:
        """``executor``: an executor to train and evaluate with (default: the scenario's ``executor`` block);
        ``executor_factory``: or one made from the run's data, ``factory(NumericData, scenario.executor)``."""
        self.t_created = time.perf_counter()
        self.sc = sc
        self.recorder = recorder
        self.progress = progress
        self.seed = sc.seed
        self.fleet = Fleet.build(groups, sc.seed, sc.fleet.memory_units)
        self.availability = build_availability(
            [g.config.availability for g in groups], self.fleet.group_of, sc.seed, base_dir
        )
        # Server-side numerics (pretraining, distillation, fine-tuning, evaluation on the inline executor)
        # run in this process: pin its torch threads too, so results do not depend on the executor kind. Pinned
        # before the data are loaded: a torch op on several threads starts OpenMP threads, whose first
        # allocations give each a malloc arena that the one-arena limit (exec.glibc_heap) could not take back.
        self._threads_before = torch.get_num_threads()
        if sc.numerics == "torch":
            torch.set_num_threads(sc.executor.threads)
            stage(progress, f"loading {sc.data.dataset} and splitting it over {self.fleet.n} devices")
        try:
            self.numerics: NumericsSetup = prepare_numerics(sc, self.fleet.n)
        except BaseException:  # data that cannot be loaded: the caller's thread count back, as before the run
            torch.set_num_threads(self._threads_before)
            raise
        self.memory_need = MemoryNeed(sc)
        self.memory_scale = self.memory_need.scale
        loc = sc.local
        self.step_options = opcost.StepOptions(loc.momentum, loc.weight_decay > 0, loc.clip_grad_norm is not None)
        self.training_time = TrainingTime(
            self.fleet, self.numerics.samples_per_device, sc.task_epochs(), loc.batch_size, self.step_options,
            roofline=sc.fleet.cost_model == "roofline",
        )
        if not resolved_compute(sc):
            resolve_server(sc, base_dir / "device_profiles" if base_dir is not None else None)
        self.server_cost = ServerCost.of(sc.server)
        self.server_work = ServerWork()
        self.strategy = make_strategy(sc.algorithm)
        self._set_up_strategy()
        self.executor_choice = Choice("custom" if executor is not None or executor_factory is not None else "none", None, "")
        large_steps = True  # unknown (a caller's executor): freed heap pages are returned after each phase
        if executor is None and sc.numerics != "none":
            if executor_factory is not None:
                executor = executor_factory(self.numerics.numeric_data(), sc.executor)
                self._check_made(executor_factory, executor)
            else:
                work = self._host_work()
                self.executor_choice = choose(
                    sc.executor.kind, sc.executor.workers, sc.executor.threads, torch.cuda.is_available(),
                    available_cores(), work,
                )  # fmt: skip
                large_steps = heap_tuning_pays(work.step_flops())
                if self.executor_choice.kind == "threads" and large_steps:
                    single_malloc_arena()  # before the worker threads allocate (exec.glibc_heap: when and why)
                executor = self.numerics.make_executor(sc.executor, self.executor_choice)
        self.executor = executor
        self.learning = Learning(sc, self.numerics, self.strategy, self.executor, trim_heap=large_steps)
        # round r's evaluation runs while round r + 1 is simulated and trained; its row waits for it (_record)
        self.overlap_eval = sc.numerics == "torch" and overlaps(executor, sc.executor.overlap_eval)
        self._unwritten: tuple[dict[str, Any], dict[str, float], Evaluation | None] | None = None
        self.view = ServerView(self.fleet, self.fleet.mem_free, np.zeros(self.fleet.n, dtype=bool), self.availability)
        self.env = simpy.Environment()
        self.traffic = Traffic()
        self.tasks = DeviceTasks(self.env, self.fleet, self.availability, self, self.traffic, self.training_time)
        gateways = {g.name: g for g in sc.fleet.gateways}
        self._gateway_of = [None if g.config.network.gateway is None else gateways[g.config.network.gateway] for g in groups]
        self.media: dict[tuple[str, int, bool], SharedMedium] = {}  # built when a transfer first crosses one
        self.server_time = 0.0  # simulated seconds the server spent computing, all rounds
        self.host = {"train": 0.0, "eval": 0.0, "aggregate": 0.0, "setup": time.perf_counter() - self.t_created}
        self.tape = Tape(recording=False)  # run_scenario / resume_run turn it on with checkpoints
        self.checkpointing = checkpointing.CheckpointState()
        self.rows: list[dict[str, Any]] = []
        self.stalled: int | None = None  # the round the run stalled at: too few devices left to go on
        self.stop_requested = False  # set by the first Ctrl-C / SIGTERM: stop at the end of the round
        self.stop_signal: int | None = None  # which signal asked (``summary.json``'s ``stopped_by``)
        self.interrupted = False
        self.loop: ServerLoop = make_loop(self)  # the server mode, chosen once

    def _check_made(self, factory: ExecutorFactory, made: Any) -> None:
        """Refuse, before any training, what a caller's executor factory returned when it is not an executor."""
        missing = missing_methods(made)
        if missing:
            torch.set_num_threads(self._threads_before)  # as before the run (the run ends here)
            name = getattr(factory, "__qualname__", None) or repr(factory)
            raise ScenarioError(
                f"run: executor: the factory {name} returned {reprlib.repr(made)} ({type(made).__name__}), not an "
                f"executor: it has no {', '.join(missing)}; return an object with run(jobs), evaluate(jobs) and "
                "close() (docs/add_an_executor_or_profile.md)"
            )

    def _set_up_strategy(self) -> None:
        """The method's ``setup``, then the set-up checks of what it will assign (models analysed, memory)."""
        sc = self.sc
        self.recipe = ModelRecipe(
            sc.model.family, self.numerics.num_classes, self.numerics.in_channels, self.numerics.image_size,
            sc.model.norm, sc.model.scaler,
        )
        ctx = StrategyContext(
            recipe=self.recipe,
            num_devices=self.fleet.n,
            samples_per_device=self.numerics.samples_per_device,
            labels_per_device=self.numerics.labels_per_device,
            num_classes=self.numerics.num_classes,
            seed=sc.seed,
            rounds=sc.rounds,
            clients_per_round=math.ceil(sc.selection_size() * sc.server.over_selection),
            min_participants=sc.server.min_participants,
            memory_need=self.memory_need,
            declared_free_memory=self.fleet.mem_free,
            initial_state=self._initial_state,
            server_work=self.server_work,
            data=self.numerics.dataset,
            parts=self.numerics.parts or None,
            proxy_indices=self.numerics.proxy,
            predict_train_seconds=self.training_time.predict,
            calib_x=self.numerics.calib_x,
        )
        stage(self.progress, f"setting up {sc.algorithm.name}: building its models")
        # the engine gives the method its context (a setup that forgets ``self.ctx = ctx``, or an __init__ that
        # skips Strategy's, still has ``self.c``, during setup as after it); a setup may replace it with its own
        self.strategy.ctx = ctx
        self.strategy.setup(ctx)
        if self.strategy.ctx is None:
            self.strategy.ctx = ctx
        if (sc.server.mode == "async") != isinstance(self.strategy, Asynchronous):
            kind = type(self.strategy).__name__
            raise ScenarioError(
                f"algorithm {sc.algorithm.name}: server.mode async needs an asynchronous method, but {kind} does not "
                "subclass iotfl_sim.strategy.Asynchronous; use fedasync or fedbuff, or another server.mode"
                if sc.server.mode == "async"
                else f"algorithm {sc.algorithm.name}: {kind} subclasses iotfl_sim.strategy.Asynchronous, which runs only "
                f"with server.mode: async (this is {sc.server.mode})"
            )
        # a method may declare that memory does not bind it (fedavg's memory: ignore, an upper bound):
        # then no task fails for memory and no feasibility check applies
        self.memory_ignored = bool(self.strategy.ignores_memory)
        specs = self.strategy.candidate_specs()
        if sc.fleet.cost_model == "roofline":
            # the one-time model analysis belongs to set-up (as memory_need's does), not to the first round
            for recipe, spec in specs:
                opcost.affine_trace(recipe, spec, self.step_options)
        if not self.memory_ignored:
            self.memory_need.check_feasible(self.fleet, specs, sc.algorithm.name)

    def _host_work(self) -> HostWork:
        """What the run will compute on the host, roughly (``exec.auto``: whether a worker pool pays)."""
        sc = self.sc
        specs = self.strategy.candidate_specs()
        forward = float(np.mean([recipe.cost(spec).flops_forward_per_sample for recipe, spec in specs]))
        samples = float(np.mean(self.numerics.samples_per_device)) * sc.task_epochs()
        tasks = sc.rounds * sc.selection_size()
        steps_per_task = math.ceil(float(np.mean(self.numerics.samples_per_device)) / sc.local.batch_size) * sc.task_epochs()
        ds = self.numerics.dataset
        tested = 0 if ds is None else len(ds.y_test if self.numerics.test_subset is None else self.numerics.test_subset)
        evaluations = math.ceil(sc.rounds / sc.server.eval_every) * len(specs)
        one_per_recipe = {recipe: spec for recipe, spec in reversed(specs)}  # dropout is a family's, not a width's
        random = any(draws_global_rng(recipe.build(spec)) for recipe, spec in one_per_recipe.items())
        return HostWork(3.0 * forward * samples * tasks, steps_per_task * tasks, forward * tested * evaluations, random)

    def _initial_state(self, recipe: ModelRecipe, spec: SubmodelSpec) -> dict[str, torch.Tensor]:
        if self.sc.numerics == "none":
            return {}  # system-only: no weights exist
        seed_torch(int_seed(self.sc.seed, "init"))
        return {k: v.detach().clone() for k, v in recipe.build(spec).state_dict().items()}

    def predict_train_seconds(self, recipe: ModelRecipe, spec: SubmodelSpec) -> np.ndarray:
        """Seconds of one local round of ``spec`` for every device by its declared profile, without jitter."""
        return self.training_time.predict(recipe, spec)

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
                self._write_held_row(failing=True)  # the last round that ended keeps its row
            raise
        self._write_held_row()
        if self.checkpointing.pending is not None:  # the run ended (stalled) before the replay reached the checkpoint
            raise CheckpointError(
                f"checkpoint of round {self.checkpointing.resume_round}: replaying the run does not reproduce it (it "
                "stops earlier); the code or the data changed since the run started: start a new run"
            )
        if not self.interrupted:
            faults.hit("summary")
        host_total = time.perf_counter() - self.t_created  # set-up counts as bookkeeping
        summary = summarize(self, host_total)
        summary["status"] = "interrupted" if self.interrupted else "complete"
        if self.interrupted and self.stop_signal is not None:
            summary["stopped_by"] = signal.Signals(self.stop_signal).name
        if self.recorder is not None:
            self.recorder.devices(device_columns(self))
            self.recorder.summary(summary)
        if self.executor is not None:
            self.executor.close()
        forget_prototypes()
        torch.set_num_threads(self._threads_before)
        return summary

    def record(self, rnd: int, row: dict[str, Any]) -> None:
        """Evaluate when due (every ``eval_every`` rounds and after the last), add host times, write the row. With
        ``overlap_eval`` the row is held until its evaluation ends: written before the next round's row, a
        checkpoint, or the run's end, so every file gets the same lines in the same order."""
        self._write_held_row()
        sc = self.sc
        evaluation = None
        if sc.numerics == "torch" and ((rnd + 1) % sc.server.eval_every == 0 or rnd + 1 == sc.rounds):
            t0 = time.perf_counter()
            evaluation = self.learning.start_evaluation(overlap=self.overlap_eval and rnd + 1 < sc.rounds)
            self.host["eval"] += time.perf_counter() - t0
        host = {  # as at this round's end; host_eval_s is completed when the evaluation is
            "host_train_s": self.host["train"],
            "host_eval_s": 0.0,
            "host_aggregate_s": self.host["aggregate"],
            "host_other_s": time.perf_counter() - self.t_created - sum(self.host.values()),
        }
        self._unwritten = (row, host, evaluation)
        if evaluation is None or evaluation.pending.done():
            self._write_held_row()

    def _write_held_row(self, failing: bool = False) -> None:
        """Write the row ``_record`` holds, once its evaluation ended (waiting for it, which counts as evaluation
        time). ``failing``: the run is ending on an error; a failed evaluation then leaves the row out."""
        if self._unwritten is None:
            return
        row, host, evaluation = self._unwritten
        self._unwritten = None
        if evaluation is not None:
            t0 = time.perf_counter()
            try:
                row.update(evaluation.result())
            except BaseException:
                if failing:
                    return
                raise
            self.host["eval"] += time.perf_counter() - t0
        row.update(host, host_eval_s=self.host["eval"])
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

    def gateway_of(self, d: int) -> Any:
        """The ``fleet.gateways`` entry device ``d``'s group reports through (None: none)."""
        return self._gateway_of[self.fleet.group_of[d]]

    def medium(self, d: int, up: bool) -> SharedMedium | None:
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

    def recipe_for(self, a: Assignment) -> ModelRecipe:
        return self.strategy.recipe_for(a)

    def wire_bytes(self, a: Assignment, recipe: ModelRecipe, up: bool) -> float:
        """Bytes of a task's download (``up`` False) or upload: the strategy's wire's encoded size when it has a
        wire (``algorithms.base.Wire``), else parameters x bits / 8 (32 bits down, ``a.bits`` up); plus the header."""
        if self.strategy.wire is None:
            return self.priced_bytes(a, recipe, up)
        return self.tape.answer("wire", lambda: self.priced_bytes(a, recipe, up))

    def priced_bytes(self, a: Assignment, recipe: ModelRecipe, up: bool) -> float:
        """``wire_bytes`` as the method's wire prices them now (not through the tape)."""
        wire = self.strategy.wire
        nbytes = None if wire is None else wire.message_bytes(a, up)
        if nbytes is None:
            return recipe.cost(a.spec).params * (a.bits if up else 32) / 8.0 + self.sc.server.header_bytes
        return nbytes + self.sc.server.header_bytes

    def adapt(self, a: Assignment, state: DeviceState) -> Assignment | None:
        """The strategy's device-side hook (recorded: a resumed run replays it)."""
        return self.tape.answer("adapt", lambda: self.strategy.adapt(a, state))

    def training_memory(self, recipe: ModelRecipe, a: Assignment) -> float | None:
        return None if self.memory_ignored else self.memory_need(recipe, a.spec)

    # ------------------------------------------------------------ checkpoints and resume

    def digest(self) -> list[float]:
        """Figures of the fleet and the engine that a faithful replay reproduces exactly (a resume checks them)."""
        t = self.traffic
        engine = [self.env.now, t.down, t.up, self.server_time, t.params_sent, t.params_back]
        return [*engine, *self.fleet.digest(), float(self.view.known_gone.sum()), *self.loop.digest()]

    def checkpoint(self, done: int, step: int | None = None) -> None:
        """Write a checkpoint after ``done`` rounds, or at ``step`` after version ``done`` of an asynchronous run
        (``sim.checkpointing``), every row it counts written first."""
        self._write_held_row()
        checkpointing.write(self, done, step)

    def resume_from(
        self, meta: dict[str, Any], state: dict[str, Any], tape: list[dict[str, list]], recorder: RunRecorder, source: Path
    ) -> None:
        """Set up a resumed run from the checkpoint whose state file is ``source`` (``sim.checkpointing.begin_resume``)."""
        checkpointing.begin_resume(self, meta, state, tape, recorder, source)
