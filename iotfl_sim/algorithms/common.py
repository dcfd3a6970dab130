"""Defaults shared by the methods (Flower-style: a handful of plain methods, overridden where a method differs)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import torch
from torch import nn

from iotfl_sim.algorithms.base import (
    Assignment,
    DeviceState,
    LocalObjective,
    Outcome,
    State,
    StrategyContext,
    Update,
)
from iotfl_sim.fl.aggregate import Contribution
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec, ZeroWidthError, slice_state
from iotfl_sim.scenario.loader import ScenarioError


class StrategyBase:
    name = "base"

    def __init__(self) -> None:
        self.ctx: StrategyContext | None = None

    # -- defaults a method overrides where it differs

    def adapt(self, assignment: Assignment, device: DeviceState) -> Assignment | None:
        return assignment

    def local_objective(self, assignment: Assignment) -> LocalObjective:
        return LocalObjective()

    def observe(self, rnd: int, outcomes: list[Outcome]) -> None:
        return None

    # -- helpers

    @property
    def c(self) -> StrategyContext:
        assert self.ctx is not None, "setup() has not run"
        return self.ctx

    def aggregated(self, outcomes: list[Outcome]) -> bool:
        """Whether the engine aggregated the round these outcomes close: at least ``min_participants`` tasks
        completed (the engine's own condition; it holds in system-only runs too, where ``aggregate`` is not
        called), so work done after aggregation (fine-tuning, distillation) is charged only then."""
        return sum(o.status == "completed" for o in outcomes) >= self.c.min_participants

    def recipe_at(self, global_rate: float) -> ModelRecipe:
        return replace(self.c.recipe, global_rate=global_rate)

    def fits(self, recipe: ModelRecipe, spec: SubmodelSpec, free_bytes: np.ndarray) -> np.ndarray:
        """Which devices' declared free memory can hold a training task of ``spec``."""
        return free_bytes >= self.c.memory_need(recipe, spec)

    def largest_fitting(
        self, pool: Sequence[tuple[ModelRecipe, SubmodelSpec]], free: float, upto: int | None = None
    ) -> int | None:
        """Device-side adaptive pruning: the index of the largest pool model (``pool`` ordered by size,
        smallest first) whose training need fits ``free``, among ``pool[: upto + 1]``; None if none fits."""
        last = len(pool) - 1 if upto is None else upto
        for i in range(last, -1, -1):
            recipe, spec = pool[i]
            if self.c.memory_need(recipe, spec) <= free:
                return i
        return None

    @staticmethod
    def slice_for(state: State, recipe: ModelRecipe, spec: SubmodelSpec) -> State:
        return slice_state(state, recipe.shapes(spec))


def classifier_keys(recipe: ModelRecipe, spec: SubmodelSpec) -> tuple[str, ...]:
    """Names of the last Linear layer's tensors (the classifier, which keeps every class row)."""
    model = recipe.build(spec)
    last = None
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            last = name
    if last is None:
        return ()
    return tuple(k for k in model.state_dict() if k.rsplit(".", 1)[0] == last)


def refuse_zero_widths(recipe: ModelRecipe, specs: Sequence[tuple[SubmodelSpec, str]]) -> None:
    """Raise ScenarioError naming the option behind the first ``rounding="int"`` spec that would keep
    0 channels in some layer of ``recipe`` (``reference: code``: the official code would build such a
    layer with no channel; this simulator refuses it before the run rather than train another model).
    ``specs``: (spec, the scenario field it comes from)."""
    for spec, field in specs:
        try:
            with torch.device("meta"):  # the widths only: no weights allocated
                recipe.build(spec)
        except ZeroWidthError as e:
            raise ScenarioError(
                f"{field}: {e} of model.family {recipe.family}: reference: code keeps int(channels x rate) "
                "channels, as the official code, and refuses a layer with none; raise the rate or use "
                "reference: paper (at least one channel)"
            ) from None


def contributions(updates: Sequence[Update], weighting: str = "data", restrict_labels: bool = False) -> list[Contribution]:
    """One aggregation contribution per update, weighted by client data size (``data``) or uniformly
    (``count``); ``restrict_labels`` lets a client update only the classifier rows of labels it holds."""
    if weighting not in ("data", "count"):
        raise ValueError(f"weighting must be 'data' or 'count', got {weighting!r}")
    return [
        Contribution(
            u.state,
            float(u.num_samples) if weighting == "data" else 1.0,
            u.label_set if restrict_labels else None,
        )
        for u in updates
    ]


class WireMixin:
    """``upload_bits`` / ``download_bits`` for a strategy whose config derives from ``_Wire``: QSGD-quantized
    downloads cut from ``self.payload_for(assignment)`` at dispatch, uploads quantized on receipt
    (``algorithms.wire``). With both at 32 bits nothing changes: no hook quantizes and bytes stay params x 4."""

    def setup_wire(self, ctx: StrategyContext, cfg) -> None:
        from iotfl_sim.algorithms.wire import QuantizedWire

        self.wire_on = cfg.upload_bits < 32 or cfg.download_bits < 32
        self.wire = QuantizedWire(ctx.seed, ctx.server_work, cfg.qsgd_bucket)
        self.upload_bits = cfg.upload_bits
        self.download_bits = cfg.download_bits

    def dispatch(self, rnd: int, assignments: list[Assignment]) -> None:
        if not self.wire_on:
            return
        self.wire.sent.clear()
        for a in assignments:
            recipe = self.recipe_for(a)  # type: ignore[attr-defined]
            full = self.payload_for(a)  # type: ignore[attr-defined]
            state = self.slice_for(full, recipe, a.spec) if full else {}  # {}: system-only, priced by params
            self.wire.dispatch(rnd, a, state, self.download_bits, recipe)

    def payload(self, assignment: Assignment) -> State:
        if self.wire_on and assignment.device in self.wire.sent:
            return self.wire.payload(assignment.device)
        return self.payload_for(assignment)  # type: ignore[attr-defined]

    def wire_bytes(self, assignment: Assignment, up: bool) -> float | None:
        return self.wire.wire_bytes(assignment, up) if self.wire_on else None

    def receive(self, rnd: int, update: Update) -> float | None:
        return self.wire.receive(rnd, update) if self.wire_on else None
