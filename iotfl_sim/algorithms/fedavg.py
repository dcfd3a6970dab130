"""FedAvg baselines for heterogeneous fleets.

``all_large``: everyone trains the full model; devices whose declared memory cannot hold it are
excluded from selection (exclusive learning). ``memory: ignore`` drops the exclusion and the engine's
memory checks for this run (no task fails as ``oom``, no feasibility check): every device trains the
full model whatever its memory, AdaptiveFL's "All-Large" row (Table 2, "we trained the L_1 model with all
clients under the classic FedAvg"), an upper bound a real fleet cannot reach; ``exclude`` (default) is
the exclusive-learning baseline (AdapterFL's FedAvg S/M/L, the resource-respecting All-Large).
The device still draws the full model's compute time and energy. ``smallest``: every device trains the smallest model,
which is then the global model. ``upload_bits`` / ``download_bits`` < 32 send QSGD-quantized messages
(``algorithms.wire``: quantized FedAvg). ``family`` trains another model family than ``model.family``
(AdapterFL's "FedAvg S/M/L with exclusive learning": one prototype per run) and ``width`` narrows the
all_large model. ``prefer: on_power`` selects devices that report being on power first (mains, or a plugged-in
charger; FedScale's selection of charging devices), uniformly among them, and fills the round uniformly from the
others (``algorithms.base.select_on_power_first``); the server knows it only from what devices report
(``fleet.reports: [power]``).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from iotfl_sim.algorithms.base import (
    Assignment,
    EvalTarget,
    Exclusive,
    FleetView,
    GlobalModel,
    Strategy,
    Update,
    select_on_power_first,
    select_uniform,
)
from iotfl_sim.algorithms.common import contributions
from iotfl_sim.algorithms.wire import QsgdWire
from iotfl_sim.fl.aggregate import aggregate_nested
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec
from iotfl_sim.scenario.algorithms import FedAvgConfig


class FedAvg(Exclusive, GlobalModel, Strategy):
    Config = FedAvgConfig
    checkpointed = ("state", "wire")

    def __init__(self, cfg: FedAvgConfig) -> None:
        super().__init__(cfg)
        self.cfg: FedAvgConfig = cfg

    def setup(self, ctx) -> None:
        self.ctx = ctx
        self.wire = QsgdWire(ctx.seed, ctx.server_work, self.cfg)
        rate = self.cfg.width if self.cfg.flavour == "all_large" else self.cfg.small_rate
        self.recipe = self.recipe_at(rate)
        if self.cfg.family is not None:  # one prototype of a heterogeneous method (AdapterFL's FedAvg S/M/L)
            self.recipe = replace(self.recipe, family=self.cfg.family)
        self.spec = SubmodelSpec(rate=rate, name="full")
        self.state = ctx.initial_state(self.recipe, self.spec)
        self.eligible = (
            np.ones(ctx.num_devices, dtype=bool)
            if self.ignores_memory
            else self.fits(self.recipe, self.spec, ctx.declared_free_memory)
        )

    @property
    def ignores_memory(self) -> bool:
        """The engine skips every memory check for this method (``memory: ignore``)."""
        return self.cfg.memory == "ignore"

    def candidate_specs(self) -> list[tuple[ModelRecipe, SubmodelSpec]]:
        return [(self.recipe, self.spec)]

    def select(self, rnd: int, fleet: FleetView, rng: np.random.Generator) -> list[Assignment]:
        pick = select_on_power_first if self.cfg.prefer == "on_power" else select_uniform
        chosen = pick(fleet, self.c.clients_per_round, rng, self.eligible)
        return [Assignment(int(d), self.spec, level="full", bits=self.wire.upload_bits) for d in chosen]

    def aggregate(self, rnd: int, updates: list[Update]) -> None:
        if not updates:
            return
        self.state = aggregate_nested(self.state, contributions(updates, self.cfg.weighting))

    def eval_targets(self) -> list[EvalTarget]:
        return [EvalTarget("full", self.spec, self.state, self.recipe)]
