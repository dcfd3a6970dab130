"""The SimPy engine: a server process runs rounds; each task is a device process on the simulated clock.

Simulated time comes only from the cost model (bytes, FLOPs, bandwidth, power). Real training runs
after the round's protocol has been simulated, for the accepted updates only, through the executor:
numerics depend on which device trains which submodel from which weights, never on durations.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import simpy
import torch

from iotfl_sim.algorithms import make_strategy
from iotfl_sim.algorithms.base import Assignment, DeviceState, Outcome, StrategyContext, Update
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec, slice_state
from iotfl_sim.fl.train import TrainJob
from iotfl_sim.fleet.fleet import FAILURE_REASONS, MB, Fleet
from iotfl_sim.output.run_dir import RunRecorder
from iotfl_sim.scenario.loader import ResolvedGroup, ScenarioError
from iotfl_sim.scenario.model import Scenario
from iotfl_sim.seeding import int_seed, stream
from iotfl_sim.sim.setup import NumericsSetup, prepare_numerics
from iotfl_sim.sim.summary import device_columns, summarize

SILENT_FAILURES = ("depleted",)  # the server hears nothing back; it notices at the deadline


class InfeasibleFleetError(ScenarioError):
    """No device of the fleet can hold any submodel the method would assign."""


@dataclass
class Task:
    assignment: Assignment
    report: simpy.Event
    status: str | None = None
    trained: Assignment | None = None
    finished_at: float = math.nan
    round_over: bool = False


@dataclass
class _View:
    """What the server can know: declared profiles and the history of outcomes (no true state)."""

    fleet: Fleet
    declared: np.ndarray
    known_gone: np.ndarray
    oracle_users: set[str] = field(default_factory=set)

    @property
    def num_devices(self) -> int:
        return self.fleet.n

    def selectable(self) -> np.ndarray:
        return np.flatnonzero(~(self.known_gone | self.fleet.busy))

    def declared_free_memory(self) -> np.ndarray:
        return self.declared

    def true_state(self, strategy: str) -> Fleet:
        self.oracle_users.add(strategy)
        return self.fleet


class Simulation:
    def __init__(
        self,
        sc: Scenario,
        groups: list[ResolvedGroup],
        recorder: RunRecorder | None = None,
        executor: Any = None,
        progress: Any = None,
    ) -> None:
        self._t_created = time.perf_counter()
        self.sc = sc
        self.fleet = Fleet.build(groups, sc.seed)
        self.recorder = recorder
        self.progress = progress
        self.numerics: NumericsSetup = prepare_numerics(sc, self.fleet.n)
        self.executor = executor if executor is not None or sc.numerics == "none" else self.numerics.make_executor()
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
            clients_per_round=sc.selection_size(),
            memory_need=self.memory_need,
            cost=lambda recipe, spec: recipe.cost(spec),
            declared_free_memory=self.fleet.mem_free_b,
            initial_state=self._initial_state,
        )
        self.strategy.setup(ctx)
        self._check_feasible()
        self.view = _View(self.fleet, self.fleet.mem_free_b, np.zeros(self.fleet.n, dtype=bool))
        self.env = simpy.Environment()
        self.bytes_down = 0.0
        self.bytes_up = 0.0
        self.host = {"train": 0.0, "eval": 0.0, "setup": time.perf_counter() - self._t_created}
        self.eval_cache: dict[tuple, tuple[float, float]] = {}

    # ------------------------------------------------------------ costs

    def memory_need(self, recipe: ModelRecipe, spec: SubmodelSpec) -> float:
        """Bytes a device needs to train ``spec``: weights, gradients, optimizer state, one batch of activations."""
        key = (recipe, spec)
        need = self._memory_cache.get(key)
        if need is None:
            slots = 1 if self.sc.local.momentum > 0 else 0
            need = self._memory_cache[key] = recipe.cost(spec).memory_bytes(self.sc.local.batch_size, slots)
        return need

    def message_bytes(self, recipe: ModelRecipe, spec: SubmodelSpec, bits: int) -> float:
        return recipe.cost(spec).params * bits / 8.0 + self.sc.server.header_bytes

    def _initial_state(self, recipe: ModelRecipe, spec: SubmodelSpec) -> dict[str, torch.Tensor]:
        torch.manual_seed(int_seed(self.sc.seed, "init"))
        return {k: v.detach().clone() for k, v in recipe.build(spec).state_dict().items()}

    def _check_feasible(self) -> None:
        specs = self.strategy.candidate_specs()
        needs = [self.memory_need(r, s) for r, s in specs]
        smallest = min(needs)
        fits = self.fleet.mem_free_b >= smallest
        if not fits.any():
            best = max(self.fleet.groups, key=lambda g: g.profile.memory.free_mb)
            raise InfeasibleFleetError(
                f"fleet: no device can hold any submodel of {self.sc.algorithm.name}: the smallest needs "
                f"{smallest / MB:.3g} MB to train, the roomiest group ({best.name}) declares "
                f"{best.profile.memory.free_mb:g} MB free; raise memory.free_mb, shrink local.batch_size or the model"
            )

    # ------------------------------------------------------------ events

    def _event(self, rnd: int, device: int, event: str, **fields: Any) -> None:
        if self.recorder is not None:
            self.recorder.event(self.env.now, rnd, device, event, **fields)

    def _fail(self, task: Task, rnd: int, reason: str, **fields: Any) -> None:
        d = task.assignment.device
        task.status = reason
        task.finished_at = self.env.now
        self._event(rnd, d, reason, **fields)
        if reason in SILENT_FAILURES and self.sc.server.deadline_s is not None:
            return  # the server only notices at the deadline
        if not task.report.triggered:
            task.report.succeed()

    def device_task(self, task: Task, rnd: int):
        """One device's part of a round: download, check memory, train, upload."""
        f, a = self.fleet, task.assignment
        d = a.device
        env = self.env
        try:
            recipe = self.strategy.recipe_for(a)
            self._event(rnd, d, "dispatch", level=a.level, rate=a.spec.rate)
            if not f.alive(d, env.now):
                self._fail(task, rnd, "depleted", phase="dispatch")
                return
            nbytes = self.message_bytes(recipe, a.spec, 32)
            dur = f.transfer_time(d, nbytes, up=False)
            dead = f.spend(d, env.now, dur, f.rx_w[d], "radio")
            self.bytes_down += nbytes
            if dead is not None:
                yield env.timeout(dead - env.now)
                self._fail(task, rnd, "depleted", phase="download")
                return
            yield env.timeout(dur)
            free = f.sample_free_memory(d, rnd)
            self._event(rnd, d, "arrive", free_mb=round(free / MB, 3))
            f.settle(d, env.now)
            state = DeviceState(d, free, float(f.capacity_j[d] - f.used(d)))
            b = self.strategy.adapt(a, state)
            if b is None:
                self._fail(task, rnd, "refused")
                return
            task.trained = b
            recipe_b = self.strategy.recipe_for(b)
            need = self.memory_need(recipe_b, b.spec)
            if need > free:
                self._fail(task, rnd, "oom", need_mb=round(need / MB, 3), free_mb=round(free / MB, 3))
                return
            samples = int(self.numerics.samples_per_device[d]) * self.sc.local.epochs
            flops = recipe_b.cost(b.spec).train_flops(samples)
            dur = f.compute_time(d, flops, rnd)
            self._event(rnd, d, "train_start", level=b.level, flops=flops)
            dead = f.spend(d, env.now, dur, f.train_w[d], "compute")
            if dead is not None:
                yield env.timeout(dead - env.now)
                self._fail(task, rnd, "depleted", phase="train")
                return
            yield env.timeout(dur)
            self._event(rnd, d, "train_end")
            nbytes = self.message_bytes(recipe_b, b.spec, b.bits)
            dur = f.transfer_time(d, nbytes, up=True)
            dead = f.spend(d, env.now, dur, f.tx_w[d], "radio")
            if dead is not None:
                yield env.timeout(dead - env.now)
                self._fail(task, rnd, "depleted", phase="upload")
                return
            yield env.timeout(dur)
            self.bytes_up += nbytes
            task.status = "completed"
            task.finished_at = env.now
            self._event(rnd, d, "upload", bytes=nbytes)
            if task.round_over:
                self._event(rnd, d, "late")
            elif not task.report.triggered:
                task.report.succeed()
        finally:
            f.busy[d] = False

    # ------------------------------------------------------------ rounds

    def server(self):
        sc = self.sc
        for rnd in range(sc.rounds):
            round_start = self.env.now
            e_before = float(self.fleet.energy_total(round_start).sum())
            down0, up0 = self.bytes_down, self.bytes_up
            assignments = self.strategy.select(rnd, self.view, stream(sc.seed, "select", rnd))
            tasks = []
            for a in assignments:
                task = Task(a, self.env.event())
                self.fleet.busy[a.device] = True
                self.fleet.tasks[a.device] += 1
                tasks.append(task)
                self.env.process(self.device_task(task, rnd))
            waiting = simpy.AllOf(self.env, [t.report for t in tasks])
            if sc.server.deadline_s is not None:
                yield waiting | self.env.timeout(sc.server.deadline_s)
            else:
                yield waiting
            round_end = self.env.now
            outcomes = self._close_round(tasks, rnd)
            updates = self._train(rnd, outcomes)
            if updates:
                self.strategy.aggregate(rnd, updates)
            self.strategy.observe(rnd, outcomes)
            row = self._row(rnd, round_start, round_end, outcomes, updates, e_before, down0, up0)
            if sc.numerics == "torch" and ((rnd + 1) % sc.server.eval_every == 0 or rnd + 1 == sc.rounds):
                row.update(self._evaluate())
            row["host_train_s"] = self.host["train"]
            row["host_eval_s"] = self.host["eval"]
            row["host_other_s"] = time.perf_counter() - self._t_created - sum(self.host.values())
            if self.recorder is not None:
                self.recorder.round_row(row)
            self.rows.append(row)
            if self.progress is not None:
                self.progress.update(1)
                acc = row.get("acc_full")
                post = {"sim": f"{round_end:,.0f}s"}
                if acc is not None:
                    post["acc"] = f"{acc:.3f}"
                self.progress.set_postfix(post, refresh=False)

    def _close_round(self, tasks: list[Task], rnd: int) -> list[Outcome]:
        outcomes = []
        for t in tasks:
            d = t.assignment.device
            if t.status == "completed":
                status = "completed"
                self.fleet.completed[d] += 1
                self._event(rnd, d, "accepted")
            else:
                status = t.status or "deadline"
                t.round_over = True
                if status == "deadline":
                    self._event(rnd, d, "dropped", reason="deadline")
                self.fleet.failures[status][d] += 1
                if status == "depleted":
                    self.view.known_gone[d] = True
            outcomes.append(Outcome(t.assignment, status, t.trained, t.finished_at))
        return outcomes

    def _train(self, rnd: int, outcomes: list[Outcome]) -> list[Update]:
        accepted = [o for o in outcomes if o.status == "completed"]
        if self.sc.numerics == "none" or not accepted:
            return []
        t0 = time.perf_counter()
        loc = self.sc.local
        jobs = []
        for i, o in enumerate(accepted):
            b = o.trained or o.assignment
            d = b.device
            recipe = self.strategy.recipe_for(b)
            weights = slice_state(self.strategy.payload(o.assignment), recipe.shapes(b.spec))
            masked = self.strategy.local_objective(b).masked_labels
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
                    label_mask=self.numerics.labels_per_device[d] if masked else None,
                    seed=int_seed(self.sc.seed, "train", d, rnd),
                )
            )
        results = self.executor.run(jobs)
        updates = [
            Update(o.trained or o.assignment, r.state, r.num_samples, self.numerics.labels_per_device[o.assignment.device], r.loss)
            for o, r in zip(accepted, results, strict=True)
        ]
        self.host["train"] += time.perf_counter() - t0
        return updates

    def _evaluate(self) -> dict[str, float]:
        t0 = time.perf_counter()
        out: dict[str, float] = {}
        levels = []
        cache: dict[tuple, tuple[float, float]] = {}
        for target in self.strategy.eval_targets():
            key = (target.recipe, target.spec, tuple(v.data_ptr() for v in target.state.values())[:4])
            if key not in cache:
                cache[key] = self.numerics.evaluate(target.recipe, target.spec, target.state, self.sc.server.eval_batch_size)
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
        by_kind = self.fleet.energy_by_kind(end)
        total = sum(by_kind.values())
        return {
            "round": rnd + 1,
            "sim_time_s": end,
            "round_time_s": end - start,
            "selected": len(outcomes),
            "completed": sum(o.status == "completed" for o in outcomes),
            **{f"failed_{r}": c for r, c in counts.items()},
            "alive": int(self.fleet.alive_mask(end).sum()),
            "train_loss": float(np.mean([u.loss for u in updates])) if updates else None,
            "energy_j": total,
            "energy_compute_j": by_kind["compute"],
            "energy_radio_j": by_kind["radio"],
            "energy_idle_j": by_kind["idle"],
            "energy_round_j": total - e_before,
            "bytes_down": self.bytes_down,
            "bytes_up": self.bytes_up,
            "bytes_down_round": self.bytes_down - down0,
            "bytes_up_round": self.bytes_up - up0,
        }

    # ------------------------------------------------------------ run

    def run(self) -> dict[str, Any]:
        self.rows: list[dict[str, Any]] = []
        proc = self.env.process(self.server())
        self.env.run(until=proc)
        host_total = time.perf_counter() - self._t_created  # set-up counts as bookkeeping
        summary = summarize(self, host_total)
        if self.recorder is not None:
            self.recorder.devices(device_columns(self))
            self.recorder.summary(summary)
        if self.executor is not None:
            self.executor.close()
        return summary


def run_scenario(
    sc: Scenario, groups: list[ResolvedGroup], out_parent: str | Path | None, resolved: dict, progress: bool | None = None
) -> tuple[Path | None, dict[str, Any]]:
    """Run a validated scenario into a new run folder under ``out_parent`` (None: write nothing)."""
    from tqdm import tqdm

    from iotfl_sim.output.run_dir import new_run_dir

    bar = tqdm(total=sc.rounds, desc=sc.name, unit="round", disable=None if progress is None else not progress)
    recorder = None
    path = None
    try:
        sim = Simulation(sc, groups, progress=bar)  # fails on bad input before any folder is made
        if out_parent is not None:
            path = new_run_dir(out_parent, sc.name)
            labels = [t.label for t in sim.strategy.eval_targets()] if sc.numerics == "torch" else []
            recorder = RunRecorder(path, labels, sc.output.events)
            recorder.scenario(resolved)
            sim.recorder = recorder
        summary = sim.run()
    finally:
        bar.close()
        if recorder is not None:
            recorder.close()
    return path, summary
