"""The host side of a run: the executor that trains and evaluates (chosen here, ``Host.choose``), torch's thread
count to give back, the host seconds spent by phase, and the row held while its evaluation overlaps the next round."""

from __future__ import annotations

import math
import reprlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from iotfl_sim.algorithms.base import Strategy
from iotfl_sim.core.errors import ScenarioError
from iotfl_sim.exec.auto import Choice, HostWork, choose
from iotfl_sim.exec.base import NumericData, missing_methods, overlaps
from iotfl_sim.exec.cores import available_cores
from iotfl_sim.exec.glibc_heap import heap_tuning_pays, single_malloc_arena
from iotfl_sim.fl.train import draws_global_rng
from iotfl_sim.scenario.model import Executor as ExecutorConfig
from iotfl_sim.scenario.model import Scenario
from iotfl_sim.sim.learning import Evaluation

if TYPE_CHECKING:
    from iotfl_sim.sim.setup import NumericsSetup

# builds a run's executor from its data and the scenario's executor block (``iotfl_sim.run(..., executor=)``)
ExecutorFactory = Callable[[NumericData, ExecutorConfig], Any]


@dataclass
class Host:
    """Where a run's real numerics go and what they cost on the host (``summary.json``'s ``host_time_s``)."""

    executor: Any
    choice: Choice  # which executor and why (``exec.auto``)
    large_steps: bool  # freed heap pages are returned after each phase (``exec.glibc_heap``)
    overlap_eval: bool  # round r's evaluation runs while round r + 1 is simulated and trained
    threads_before: int  # the caller's torch thread count, given back at the run's end
    t_created: float  # host instant the run was created (set-up counts from here)
    times: dict[str, float] = field(default_factory=dict)  # host seconds by phase: setup, train, eval, aggregate
    held: tuple[dict[str, Any], dict[str, float], Evaluation | None] | None = None  # the row ``record`` holds

    @classmethod
    def choose(
        cls, sc: Scenario, numerics: NumericsSetup, strategy: Strategy, executor: Any, factory: ExecutorFactory | None,
        threads_before: int, t_created: float,
    ) -> Host:
        """The executor a run trains with: the caller's ``executor``, one its ``factory`` makes from the run's data,
        or the scenario's ``executor`` block (``kind: auto`` chosen by the estimated host work)."""
        choice = Choice("custom" if executor is not None or factory is not None else "none", None, "")
        large_steps = True  # unknown (a caller's executor): freed heap pages are returned after each phase
        if executor is None and sc.numerics != "none":
            if factory is not None:
                executor = factory(numerics.numeric_data(), sc.executor)
                check_made(factory, executor, threads_before)
            else:
                work = host_work(sc, numerics, strategy)
                choice = choose(
                    sc.executor.kind, sc.executor.workers, sc.executor.threads, torch.cuda.is_available(),
                    available_cores(), work,
                )  # fmt: skip
                large_steps = heap_tuning_pays(work.step_flops())
                if choice.kind == "threads" and large_steps:
                    single_malloc_arena()  # before the worker threads allocate (exec.glibc_heap: when and why)
                executor = numerics.make_executor(sc.executor, choice)
        overlap = sc.numerics == "torch" and overlaps(executor, sc.executor.overlap_eval)
        return cls(executor, choice, large_steps, overlap, threads_before, t_created)

    def elapsed(self) -> float:
        """Host seconds since the run was created."""
        return time.perf_counter() - self.t_created


def check_made(factory: ExecutorFactory, made: Any, threads_before: int) -> None:
    """Refuse, before any training, what a caller's executor factory returned when it is not an executor."""
    missing = missing_methods(made)
    if missing:
        torch.set_num_threads(threads_before)  # as before the run (the run ends here)
        name = getattr(factory, "__qualname__", None) or repr(factory)
        raise ScenarioError(
            f"run: executor: the factory {name} returned {reprlib.repr(made)} ({type(made).__name__}), not an "
            f"executor: it has no {', '.join(missing)}; return an object with run(jobs), evaluate(jobs) and "
            "close() (docs/add_an_executor_or_profile.md)"
        )


def host_work(sc: Scenario, numerics: NumericsSetup, strategy: Strategy) -> HostWork:
    """What the run will compute on the host, roughly (``exec.auto``: whether a worker pool pays)."""
    specs = strategy.candidate_specs()
    forward = float(np.mean([recipe.cost(spec).flops_forward_per_sample for recipe, spec in specs]))
    samples = float(np.mean(numerics.samples_per_device)) * sc.task_epochs()
    tasks = sc.rounds * sc.selection_size()
    steps_per_task = math.ceil(float(np.mean(numerics.samples_per_device)) / sc.local.batch_size) * sc.task_epochs()
    ds = numerics.dataset
    tested = 0 if ds is None else len(ds.y_test if numerics.test_subset is None else numerics.test_subset)
    evaluations = math.ceil(sc.rounds / sc.server.eval_every) * len(specs)
    one_per_recipe = {recipe: spec for recipe, spec in reversed(specs)}  # dropout is a family's, not a width's
    random = any(draws_global_rng(recipe.build(spec)) for recipe, spec in one_per_recipe.items())
    return HostWork(3.0 * forward * samples * tasks, steps_per_task * tasks, forward * tested * evaluations, random)
