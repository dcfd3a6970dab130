"""The SimPy engine: a server process runs rounds; each task is a device process on the simulated clock.

Simulated time comes only from the cost model (bytes, FLOPs, bandwidth, power). Real training runs
after the round's protocol has been simulated, for the accepted updates only, through the executor:
numerics depend on which device trains which submodel from which weights, never on durations.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import simpy
import torch

from iotfl_sim import faults
from iotfl_sim.algorithms import make_strategy
from iotfl_sim.algorithms.base import (
    SERVER_WORK_KINDS,
    AggregateWork,
    Assignment,
    Outcome,
    QsgdWork,
    ServerWork,
    StrategyContext,
    Update,
)
from iotfl_sim.exec.base import EvalJob
from iotfl_sim.fl.cost import opcost
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec, slice_state
from iotfl_sim.fl.train import TrainJob
from iotfl_sim.fleet.availability import build_availability
from iotfl_sim.fleet.fleet import FAILURE_REASONS, MB, Fleet
from iotfl_sim.fleet.network import SharedMedium
from iotfl_sim.output.checkpoint import CheckpointStore
from iotfl_sim.output.codec import CheckpointError
from iotfl_sim.output.run_dir import (
    RunRecorder,
)
from iotfl_sim.scenario.loader import ResolvedGroup, ScenarioError, resolve_server
from iotfl_sim.scenario.model import Scenario
from iotfl_sim.seeding import int_seed, stream
from iotfl_sim.sim import checkpointing
from iotfl_sim.sim.console import stage
from iotfl_sim.sim.device import DeviceTasks, Task, declared_train_seconds
from iotfl_sim.sim.server_cost import ServerCost
from iotfl_sim.sim.setup import NumericsSetup, prepare_numerics
from iotfl_sim.sim.summary import device_columns, summarize
from iotfl_sim.sim.tape import Tape
from iotfl_sim.sim.view import ServerView


class InfeasibleFleetError(ScenarioError):
    """No device of the fleet can hold any submodel the method would assign."""


class Simulation:
    def __init__(
        self,
        sc: Scenario,
        groups: list[ResolvedGroup],
        recorder: RunRecorder | None = None,
        executor: Any = None,
        progress: Any = None,
        base_dir: Path | None = None,
    ) -> None:
        self.t_created = time.perf_counter()
        self.sc = sc
        self.fleet = Fleet.build(groups, sc.seed, sc.fleet.memory_units)
        self.memory_scale = MB if sc.fleet.memory_units == "mb" else 1.0
        self.availability = build_availability(
            [g.config.availability for g in groups], self.fleet.group_of, sc.seed, base_dir
        )
        self.recorder = recorder
        self.progress = progress
        if sc.numerics == "torch":
            stage(progress, f"loading {sc.data.dataset} and splitting it over {self.fleet.n} devices")
        self.numerics: NumericsSetup = prepare_numerics(sc, self.fleet.n)
        # Server-side numerics (pretraining, distillation, fine-tuning, evaluation on the inline executor)
        # run in this process: pin its torch threads too, so results do not depend on the executor kind.
        self._threads_before = torch.get_num_threads()
        if sc.numerics == "torch":
            torch.set_num_threads(sc.executor.threads)
        self.executor = executor if executor is not None or sc.numerics == "none" else self.numerics.make_executor(sc.executor)
        self.strategy = make_strategy(sc.algorithm)
        self.recipe = ModelRecipe(
            sc.model.family,
            self.numerics.num_classes,
            self.numerics.in_channels,
            self.numerics.image_size,
            sc.model.norm,
            sc.model.scaler,
        )
        self._memory_cache: dict[tuple[ModelRecipe, SubmodelSpec], float] = {}
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
            server_work=ServerWork(),
            data=self.numerics.dataset,
            parts=self.numerics.parts or None,
            proxy_indices=self.numerics.proxy,
            predict_train_seconds=self.predict_train_seconds,
        )
        self.server_work = ctx.server_work
        if sc.server.compute is None and not isinstance(sc.server.profile, dict):
            resolve_server(sc, base_dir / "device_profiles" if base_dir is not None else None)
        self.server_cost = ServerCost.of(sc.server)
        stage(progress, f"setting up {sc.algorithm.name}: building its models")
        self.strategy.setup(ctx)
        # a method may declare that memory does not bind it (fedavg's memory: ignore, an upper bound):
        # then no task fails for memory and no feasibility check applies
        self.memory_ignored = bool(self.strategy.ignores_memory)
        self._check_feasible()
        self.view = ServerView(self.fleet, self.fleet.mem_free, np.zeros(self.fleet.n, dtype=bool), self.availability)
        self.env = simpy.Environment()
        self.tasks = DeviceTasks(self)
        gateways = {g.name: g for g in sc.fleet.gateways}
        self._gateway_of = [None if g.config.network.gateway is None else gateways[g.config.network.gateway] for g in groups]
        self.media: dict[tuple[str, int, bool], SharedMedium] = {}  # built when a transfer first crosses one
        self.bytes_down = 0.0
        self.bytes_up = 0.0
        self.server_time = 0.0  # simulated seconds the server spent computing, all rounds
        self.server_split = dict.fromkeys(SERVER_WORK_KINDS, 0.0)  # the current round's server seconds by kind of work
        self.params_sent = 0.0  # model sizes (parameters) dispatched / accepted back: communication waste
        self.params_back = 0.0
        self.bytes_wasted = 0.0  # bytes on the air (down and up) of tasks whose update the server did not use
        self.host = {"train": 0.0, "eval": 0.0, "aggregate": 0.0, "setup": time.perf_counter() - self.t_created}
        self.tape = Tape(recording=False)  # run_scenario / resume_run turn it on with checkpoints
        self.checkpoints: CheckpointStore | None = None
        self.resume_round = 0  # rounds before this one are replayed from the tape (``resume``)
        self.pending_resume: tuple[dict[str, Any], dict[str, Any]] | None = None
        self.last_checkpoint = (0, time.perf_counter())  # (round, host instant)
        self.tape_from = 0  # round the current tape chunk starts at
        self.tape_files: list[dict[str, Any]] = []  # tape chunks written so far (listed in each checkpoint)
        self.stop_requested = False  # set by the first Ctrl-C / SIGTERM: stop at the end of the round
        self.interrupted = False

    def medium(self, d: int, up: bool) -> SharedMedium | None:
        """The shared gateway direction device ``d``'s transfers cross (None: its own link only)."""
        gw = self._gateway_of[self.fleet.group_of[d]]
        if gw is None:
            return None
        block = d // gw.devices_per_gateway if gw.devices_per_gateway else 0
        key = (gw.name, block, up)
        medium = self.media.get(key)
        if medium is None:
            cap = gw.up_mbps if up else gw.down_mbps
            medium = self.media[key] = SharedMedium(self.env, cap * 1e6, f"{gw.name}[{block}]" if block else gw.name)
        return medium

    # ------------------------------------------------------------ costs

    def memory_need(self, recipe: ModelRecipe, spec: SubmodelSpec) -> float:
        """Memory a device needs to train ``spec``, in the fleet's memory units.

        MB units: bytes of weights, gradients, optimizer state and one batch of activations, measured
        from the real submodel. Relative units (FlexFL): percent of the full model's parameters.
        """
        key = (recipe, spec)
        need = self._memory_cache.get(key)
        if need is None:
            if self.sc.fleet.memory_units == "relative":
                full = replace(recipe, global_rate=1.0).cost(SubmodelSpec(1.0, rounding=spec.rounding)).params
                need = 100.0 * recipe.cost(spec).params / full
            else:
                slots = 1 if self.sc.local.momentum > 0 else 0
                need = recipe.cost(spec).memory_bytes(self.sc.local.batch_size, slots)
            self._memory_cache[key] = need
        return need

    def message_bytes(self, recipe: ModelRecipe, spec: SubmodelSpec, bits: int) -> float:
        return recipe.cost(spec).params * bits / 8.0 + self.sc.server.header_bytes

    def wire_bytes(self, a: Assignment, recipe: ModelRecipe, up: bool) -> float:
        """Bytes of a task's download (``up`` False) or upload: the strategy's wire's encoded size when it has a
        wire (``algorithms.base.Wire``), else parameters x bits / 8 (32 bits down, ``a.bits`` up); plus the header."""
        if self.strategy.wire is None:
            return self.message_bytes(recipe, a.spec, a.bits if up else 32)
        return self.tape.answer("wire", lambda: self._priced_bytes(a, recipe, up))

    def _priced_bytes(self, a: Assignment, recipe: ModelRecipe, up: bool) -> float:
        nbytes = self.strategy.wire.message_bytes(a, up)
        if nbytes is None:
            return self.message_bytes(recipe, a.spec, a.bits if up else 32)
        return nbytes + self.sc.server.header_bytes

    def adapt(self, a: Assignment, state: Any) -> Assignment | None:
        """The strategy's device-side hook (recorded: a resumed run replays it)."""
        return self.tape.answer("adapt", lambda: self.strategy.adapt(a, state))

    def _initial_state(self, recipe: ModelRecipe, spec: SubmodelSpec) -> dict[str, torch.Tensor]:
        if self.sc.numerics == "none":
            return {}  # system-only: no weights exist
        torch.manual_seed(int_seed(self.sc.seed, "init"))
        return {k: v.detach().clone() for k, v in recipe.build(spec).state_dict().items()}

    def predict_train_seconds(self, recipe: ModelRecipe, spec: SubmodelSpec) -> np.ndarray:
        """Seconds of one local round of ``spec`` for every device, by its declared profile without jitter
        (``sim.device.declared_train_seconds``), computed once per distinct (compute rates, group, samples)."""
        f = self.fleet
        bw = np.nan_to_num(f.mem_bw, nan=-1.0)
        keys = np.stack([f.flops, bw, f.op_overhead_s, f.group_of, self.numerics.samples_per_device], axis=1)
        _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
        seconds = np.array([declared_train_seconds(self, recipe, spec, int(d)) for d in first])
        return seconds[inverse.reshape(-1)]

    @property
    def step_options(self) -> opcost.StepOptions:
        loc = self.sc.local
        return opcost.StepOptions(loc.momentum, loc.weight_decay > 0, loc.clip_grad_norm is not None)

    def _check_feasible(self) -> None:
        specs = self.strategy.candidate_specs()
        if self.sc.fleet.cost_model == "roofline":
            # the one-time model analysis belongs to set-up (as memory_need's does), not to the first round
            for recipe, spec in specs:
                opcost.affine_trace(recipe, spec, self.step_options)
        if self.memory_ignored:
            return
        needs = [self.memory_need(r, s) for r, s in specs]
        smallest = min(needs)
        if not (self.fleet.mem_free >= smallest).any():
            unit = "MB" if self.sc.fleet.memory_units == "mb" else "% of the full model"
            best = int(np.argmax(self.fleet.mem_free))
            group = self.fleet.groups[self.fleet.group_of[best]].name
            raise InfeasibleFleetError(
                f"fleet: no device can hold any submodel of {self.sc.algorithm.name}: the smallest needs "
                f"{smallest / self.memory_scale:.3g} {unit} to train, the roomiest group ({group}) declares "
                f"{self.fleet.mem_free[best] / self.memory_scale:.3g}; raise memory.free_mb (or the group's memory.free), "
                "shrink local.batch_size or the model"
            )

    # ------------------------------------------------------------ events

    def event(self, rnd: int, device: int, event: str, at: float | None = None, **fields: Any) -> None:
        if self.recorder is not None:
            self.recorder.event(self.env.now if at is None else at, rnd, device, event, **fields)

    def on_completed(self, task: Task) -> None:
        """An update arrived in time: report it, and end the round early once enough are in."""
        self._arrived += 1
        if not task.report.triggered:
            task.report.succeed()
        if self._arrived >= self._wanted and not self._enough.triggered:
            self._enough.succeed()

    def _serve(self, rnd: int):
        """Run the strategy's pending server work on the simulated clock; returns the seconds spent."""
        spent = 0.0
        for what, kind, duration, flops in self.tape.answer("serve", self._price_server_work):
            self.event(rnd, -1, "server_work", what=what, kind=kind, flops=flops, duration=round(duration, 6))
            if duration > 0:
                yield self.env.timeout(duration)
            spent += duration
            self.server_split[kind] += duration
        self.server_time += spent
        return spent

    def _price_server_work(self) -> list[tuple[str, str, float, float]]:
        """(what, kind, seconds, FLOPs) of every pending item of server work (what the tape records)."""
        out = []
        for what, work in self.server_work.drain():
            p = self.server_cost.price(work)
            out.append((what, p.kind, p.seconds, p.flops))
        return out

    def _charge_aggregation(self, outcomes: list[Outcome]) -> None:
        """Every method's receiving side: decoding each accepted quantized upload, then the aggregation (the
        accepted updates' values read, the largest one's region of the global model written)."""
        done = [o.trained or o.assignment for o in outcomes if o.status == "completed"]
        recipes = [self.strategy.recipe_for(a) for a in done]
        sizes = [r.cost(a.spec).params for r, a in zip(recipes, done, strict=True)]
        tensors = [len(r.shapes(a.spec)) for r, a in zip(recipes, done, strict=True)]
        for a, n, t in zip(done, sizes, tensors, strict=True):
            if a.bits < 32:
                self.server_work.charge("dequantize", QsgdWork(float(n), t, decode=True))
        if sizes and len(sizes) >= self.sc.server.min_participants:
            self.server_work.charge("aggregate", AggregateWork(float(sum(sizes)), float(max(sizes)), sum(tensors)))

    # ------------------------------------------------------------ rounds

    def server(self):
        sc = self.sc
        k = sc.selection_size()
        for rnd in range(sc.rounds):
            replay = rnd < self.resume_round
            if rnd == 0 and replay:
                stage(self.progress, f"replaying rounds 1-{self.resume_round} from the checkpoint (no training)")
            elif rnd == self.resume_round:
                stage(self.progress, f"round {rnd + 1}: devices training, then evaluation")
            round_start = self.env.now
            self.server_split = dict.fromkeys(SERVER_WORK_KINDS, 0.0)
            e_before = self._fleet_energy(round_start)
            down0, up0 = self.bytes_down, self.bytes_up
            waited = yield from self._wait_for_participants(rnd)
            if not waited:
                self.stalled = rnd
                return
            self.view.now, self.view.rnd = self.env.now, rnd
            assignments = self.tape.answer("select", lambda r=rnd: self._select(r))
            server_s = yield from self._serve(rnd)  # set-up work (first round) and selection work
            self._wanted, self._arrived, self._enough = k, 0, self.env.event()
            tasks = []
            for a in assignments:
                task = Task(a, self.env.event(), rnd)
                self.fleet.busy[a.device] = True
                self.fleet.tasks[a.device] += 1
                tasks.append(task)
                self.env.process(self.tasks.run(task))
            waiting = [simpy.AllOf(self.env, [t.report for t in tasks]), self._enough]
            if sc.server.deadline_s is not None:  # counted from dispatch, not from any wait for devices
                waiting.append(self.env.timeout(sc.server.deadline_s))
            yield simpy.AnyOf(self.env, waiting)
            outcomes = self._close_round(tasks, rnd)
            if replay:  # numerics are not redone: only their effect on the byte count and the event log
                updates = []
                for d, real, priced in self.tape.answer("receive", list):
                    self.bytes_up += real - priced
                    self.event(rnd, d, "upload_encoded", bytes=real, priced=priced)
            else:
                updates = self._train(rnd, outcomes)
                self._charge_aggregation(outcomes)  # on the clock before what the method does with the average
                if len(updates) >= sc.server.min_participants:
                    t0 = time.perf_counter()  # the method's own numerics, as a bare FL loop would also spend
                    self.strategy.aggregate(rnd, updates)
                    self.host["aggregate"] += time.perf_counter() - t0
                self.strategy.observe(rnd, outcomes)
            server_s += yield from self._serve(rnd)  # aggregation-side work
            round_end = self.env.now
            row = self._row(rnd, round_start, round_end, outcomes, updates, e_before, down0, up0)
            row.update(self._comm_waste(tasks, outcomes))
            row["server_time_s"] = server_s
            row.update({f"server_{k}_s": v for k, v in self.server_split.items()})
            row["server_energy_j"] = self.server_time * self.server_cost.power_w
            if replay:
                if self.progress is not None:
                    self.progress.update(1)
                if rnd + 1 == self.resume_round:
                    checkpointing.end_replay(self)
                continue
            if sc.numerics == "torch" and ((rnd + 1) % sc.server.eval_every == 0 or rnd + 1 == sc.rounds):
                row.update(self._evaluate())
            row["host_train_s"] = self.host["train"]
            row["host_eval_s"] = self.host["eval"]
            row["host_aggregate_s"] = self.host["aggregate"]
            row["host_other_s"] = time.perf_counter() - self.t_created - sum(self.host.values())
            if self.recorder is not None:
                self.recorder.round_row(row)
            self.rows.append(row)
            if self.progress is not None:  # this round's figures first, so the bar draws them with its count
                acc = row.get("acc_full")
                post = {"sim": f"{round_end:,.0f}s"}
                if acc is not None:
                    post["acc"] = f"{acc:.3f}"
                self.progress.set_postfix(post, refresh=False)
                self.progress.update(1)
            if rnd + 1 < sc.rounds and (self.stop_requested or checkpointing.due(self, rnd + 1)):
                self.checkpoint(rnd + 1)
                if self.stop_requested:
                    self.interrupted = True
                    return

    def _select(self, rnd: int) -> list[Assignment]:
        assignments = self.strategy.select(rnd, self.view, stream(self.sc.seed, "select", rnd))
        if self.strategy.wire is not None:  # e.g. quantize each device's download (server work, charged after selection)
            self.strategy.wire.dispatch(rnd, assignments, self.strategy)
        return assignments

    def _comm_waste(self, tasks: list[Task], outcomes: list[Outcome]) -> dict[str, float | None]:
        """AdaptiveFL's communication waste rate, 1 - sum size(returned) / sum size(sent), in parameters.

        Sent: every model put on the air (a task whose download started). Returned: the models the
        server accepted, at the size the device actually trained (smaller after on-device pruning).
        A task that failed or came too late returns nothing, so its whole model counts as waste.
        ``bytes_wasted`` (cumulative) is the same idea on the wire: the bytes downloaded and uploaded for tasks
        whose update was not used (failed, dropped at the deadline, surplus; a late upload when it lands).
        """
        self.bytes_wasted += sum(t.wire_bytes for t, o in zip(tasks, outcomes, strict=True) if o.status != "completed")
        sent = sum(self._params(t.assignment) for t in tasks if t.sent)
        back = sum(self._params(o.trained or o.assignment) for o in outcomes if o.status == "completed")
        self.params_sent += sent
        self.params_back += back
        return {
            "comm_waste": 1.0 - back / sent if sent > 0 else None,
            "comm_waste_cum": 1.0 - self.params_back / self.params_sent if self.params_sent > 0 else None,
            "bytes_wasted": self.bytes_wasted,
        }

    def _params(self, a) -> int:
        return self.strategy.recipe_for(a).cost(a.spec).params

    def _fleet_energy(self, t: float) -> float:
        return float(sum(v.sum() for v in self.fleet.class_energy(t).values()))

    def _wait_for_participants(self, rnd: int):
        """Wait (retry_s at a time) until min_participants devices are selectable; False if never."""
        need = self.sc.server.min_participants
        for _ in range(100_000):
            self.view.now, self.view.rnd = self.env.now, rnd
            if self.view.has_selectable(need):
                return True
            if self.view.known_gone.all():
                return False
            yield self.env.timeout(self.sc.server.retry_s)
        return False

    def _close_round(self, tasks: list[Task], rnd: int) -> list[Outcome]:
        outcomes = []
        in_time = sorted((t for t in tasks if t.status == "completed"), key=lambda t: t.finished_at)
        kept = {id(t) for t in in_time[: self._wanted]}  # over-selection keeps the first k to arrive
        for t in tasks:
            d = t.assignment.device
            if id(t) in kept:
                status = "completed"
                self.fleet.completed[d] += 1
                self.event(rnd, d, "accepted")
            else:
                status = "surplus" if t.status == "completed" else t.status or ("surplus" if self._enough.triggered else "deadline")
                t.round_over = True
                if status in ("deadline", "surplus"):
                    self.event(rnd, d, "dropped", reason=status)
                self.fleet.failures[status][d] += 1
                if status == "depleted":
                    self.view.known_gone[d] = True
            outcomes.append(Outcome(t.assignment, status, t.trained, t.finished_at))
        return outcomes

    def _train(self, rnd: int, outcomes: list[Outcome]) -> list[Update]:
        accepted = [o for o in outcomes if o.status == "completed"]
        if self.sc.numerics == "none" or not accepted:
            self.tape.answer("receive", list)
            return []
        t0 = time.perf_counter()
        loc = self.sc.local
        jobs = []
        for i, o in enumerate(accepted):
            b = o.trained or o.assignment
            d = b.device
            recipe = self.strategy.recipe_for(b)
            weights = slice_state(self._download(o.assignment), recipe.shapes(b.spec))
            jobs.append(
                TrainJob(
                    key=i,
                    recipe=recipe,
                    spec=b.spec,
                    weights={k: v.clone() for k, v in weights.items()},
                    indices=self.numerics.parts[d],
                    epochs=loc.epochs,
                    batch_size=loc.batch_size,
                    lr=loc.lr_schedule.lr_at(loc.lr, rnd),
                    momentum=loc.momentum,
                    weight_decay=loc.weight_decay,
                    clip_grad_norm=loc.clip_grad_norm,
                    label_mask=self.numerics.labels_per_device[d],
                    seed=int_seed(self.sc.seed, "train", d, rnd),
                    objective=self.strategy.local_objective(b),
                )
            )
        faults.hit("round_train")
        results = self.executor.run(jobs)
        updates = [
            Update(o.trained or o.assignment, r.state, r.num_samples, self.numerics.labels_per_device[o.assignment.device], r.loss)
            for o, r in zip(accepted, results, strict=True)
        ]
        wire = self.strategy.wire
        receipts = []  # (device, real, priced) byte counts, replayed on resume
        if wire is not None:
            # quantized uploads: their real encoded size replaces the size priced at dispatch in the byte count
            for u in updates:
                real = wire.receive(rnd, u)
                if real is not None:
                    priced = self._priced_bytes(u.assignment, self.strategy.recipe_for(u.assignment), up=True)
                    real += self.sc.server.header_bytes
                    self.bytes_up += real - priced
                    receipts.append((u.assignment.device, real, priced))
                    self.event(rnd, u.assignment.device, "upload_encoded", bytes=real, priced=priced)
        self.tape.answer("receive", lambda: receipts)
        self.host["train"] += time.perf_counter() - t0
        return updates

    def _download(self, a: Assignment) -> dict[str, torch.Tensor]:
        """The weights a task's device receives: what its wire sends, else the strategy's payload."""
        sent = self.strategy.wire.payload(a) if self.strategy.wire is not None else None
        return self.strategy.payload(a) if sent is None else sent

    def _evaluate(self) -> dict[str, float]:
        t0 = time.perf_counter()
        out: dict[str, float] = {}
        levels = []
        targets = self.strategy.eval_targets()
        keys, jobs = [], {}
        for target in targets:
            # the same weights under another name (HeteroFL's level a is the full model) are evaluated once
            weights = tuple((v.data_ptr(), tuple(v.shape)) for v in target.state.values())
            key = (target.recipe, replace(target.spec, name=""), weights)
            keys.append(key)
            if key not in jobs:
                jobs[key] = EvalJob(target.recipe, target.spec, target.state, self.sc.server.eval_batch_size)
        cache = dict(zip(jobs, self.executor.evaluate(list(jobs.values())), strict=True))
        for target, key in zip(targets, keys, strict=True):
            acc, loss = cache[key]
            out[f"acc_{target.label}"] = acc
            if target.label == "full":
                out["loss_full"] = loss
            if target.is_level:
                levels.append(acc)
        if levels:
            out["acc_avg"] = float(np.mean(levels))
        self.host["eval"] += time.perf_counter() - t0
        return out

    def _row(self, rnd, start, end, outcomes, updates, e_before, down0, up0) -> dict[str, Any]:
        counts = {r: 0 for r in FAILURE_REASONS}
        for o in outcomes:
            if o.status in counts:
                counts[o.status] += 1
        kinds = self.fleet.class_energy(end)
        by_kind = {k: float(v.sum()) for k, v in kinds.items()}
        by_class = sum(kinds.values())
        total = float(by_class.sum())
        return {
            "round": rnd + 1,
            "sim_time_s": end,
            "round_time_s": end - start,
            "selected": len(outcomes),
            "completed": sum(o.status == "completed" for o in outcomes),
            **{f"failed_{r}": c for r, c in counts.items()},
            "alive": self.fleet.alive_count(end),
            "train_loss": float(np.mean([u.loss for u in updates])) if updates else None,
            "energy_j": total,
            "energy_compute_j": by_kind["compute"],
            "energy_radio_j": by_kind["radio"],
            "energy_idle_j": by_kind["idle"],
            "energy_round_j": total - e_before,
            **{f"energy_{c}_j": float(v) for c, v in zip(self.fleet.class_names, by_class, strict=True)},
            "bytes_down": self.bytes_down,
            "bytes_up": self.bytes_up,
            "bytes_down_round": self.bytes_down - down0,
            "bytes_up_round": self.bytes_up - up0,
        }

    # ------------------------------------------------------------ checkpoints and resume

    def digest(self) -> list[float]:
        """Figures of the fleet and the engine that a faithful replay reproduces exactly (a resume checks them)."""
        fleet = self.fleet.digest()
        engine = [self.env.now, self.bytes_down, self.bytes_up, self.server_time, self.params_sent, self.params_back]
        return [*engine, *fleet, float(self.view.known_gone.sum())]

    def checkpoint(self, done: int) -> None:
        """Write a checkpoint after ``done`` rounds (``sim.checkpointing``)."""
        checkpointing.write(self, done)

    def resume_from(self, meta: dict[str, Any], state: dict[str, Any], tape: list[dict[str, list]], recorder: RunRecorder) -> None:
        """Set up a resumed run (``sim.checkpointing.begin_resume``)."""
        checkpointing.begin_resume(self, meta, state, tape, recorder)

    # ------------------------------------------------------------ run

    def run(self) -> dict[str, Any]:
        self.rows: list[dict[str, Any]] = []
        self.stalled: int | None = None
        if self.sc.numerics == "torch":
            # again here: another Simulation built meanwhile may have restored the caller's count at its end
            torch.set_num_threads(self.sc.executor.threads)
        proc = self.env.process(self.server())
        self.env.run(until=proc)
        if self.pending_resume is not None:  # the run ended (stalled) before the replay reached the checkpoint
            raise CheckpointError(
                f"checkpoint of round {self.resume_round}: replaying the run does not reproduce it (it stops "
                "earlier); the code or the data changed since the run started: start a new run"
            )
        if not self.interrupted:
            faults.hit("summary")
        host_total = time.perf_counter() - self.t_created  # set-up counts as bookkeeping
        summary = summarize(self, host_total)
        summary["status"] = "interrupted" if self.interrupted else "complete"
        if self.recorder is not None:
            self.recorder.devices(device_columns(self))
            self.recorder.summary(summary)
        if self.executor is not None:
            self.executor.close()
        torch.set_num_threads(self._threads_before)
        return summary
