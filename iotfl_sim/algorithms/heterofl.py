"""HeteroFL (Diao et al., ICLR 2021), as in the paper and its reference code.

- Levels a-e with width rates 1, 1/2, 1/4, 1/8, 1/16; channel counts rounded up (ceil).
- The global model's rate is the rate of the first level of the mix; each submodel's Scaler divides
  by (level rate / global rate) in training only.
- ``fix``: a device keeps its level (by id: the first share of devices get the first level, and so on,
  leftovers the last level). ``dynamic``: every selected device re-draws its level from the mix.
  ``assign: by_capacity`` is this simulator's IoT variant: a device's level is the largest one of the
  mix that fits its declared free memory (dynamic mode draws among the levels that fit).
- Local training: masked cross-entropy (logits of absent classes filled with 0), fresh SGD per round,
  gradient clipping (from the scenario's ``local`` section).
- Aggregation: each entry is averaged over the clients that hold it, unweighted; classifier rows
  only over clients holding that label (also in IID runs); untouched entries keep their value.
- Evaluation with static BN (see ``fl.evaluate``).
- Not in the paper: ``upload_bits`` / ``download_bits`` < 32 send QSGD-quantized messages (``algorithms.wire``).
"""

from __future__ import annotations

import bisect

import numpy as np

from iotfl_sim.algorithms.base import (
    Assignment,
    Eligible,
    EvalTarget,
    FleetView,
    GlobalModel,
    LocalObjective,
    Strategy,
    Update,
    fixed_level_specs,
    select_uniform,
)
from iotfl_sim.algorithms.common import classifier_keys, contributions
from iotfl_sim.algorithms.wire import QsgdWire
from iotfl_sim.fl.aggregate import aggregate_nested
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec
from iotfl_sim.scenario.algorithms import HeteroFLConfig, parse_proportions


def fix_levels_by_id(num_devices: int, proportions: list[float]) -> np.ndarray:
    """HeteroFL's `fix` assignment: level index per device id, leftovers at the last level."""
    out = np.full(num_devices, len(proportions) - 1, dtype=np.int64)
    start = 0
    for i, p in enumerate(proportions):
        n = int(np.floor(num_devices * p + 1e-9))
        out[start : start + n] = i
        start += n
    return out


class HeteroFL(GlobalModel, Strategy):
    Config = HeteroFLConfig
    checkpointed = ("state", "wire")

    def __init__(self, cfg: HeteroFLConfig) -> None:
        super().__init__(cfg)
        self.cfg: HeteroFLConfig = cfg

    def setup(self, ctx) -> None:
        self.ctx = ctx
        self.wire = QsgdWire(ctx.seed, ctx.server_work, self.cfg)
        mix = parse_proportions(self.cfg.proportions)
        self.levels = list(mix)  # in the order written; the first sets the global rate
        self.props = np.array([mix[x] for x in self.levels])
        rates = self.cfg.level_rates
        self.global_rate = rates[self.levels[0]]
        self.recipe = self.recipe_at(self.global_rate)
        self.specs = {x: SubmodelSpec(rate=rates[x], name=x, rounding="ceil") for x in self.levels}
        self.global_spec = SubmodelSpec(rate=self.global_rate, name="full", rounding="ceil")
        self.state = ctx.initial_state(self.recipe, self.global_spec)
        self.classifier = classifier_keys(self.recipe, self.global_spec)
        n = ctx.num_devices
        fits = np.stack([self.fits(self.recipe, self.specs[x], ctx.declared_free_memory) for x in self.levels], 1)
        self.fits_level = fits  # (devices, levels)
        self._cdfs: dict[bytes | None, list[float]] = {}
        if self.cfg.assign == "by_id":
            self.fixed = fix_levels_by_id(n, list(self.props))
            self.eligible = np.ones(n, dtype=bool)
        else:
            order = np.argsort([-rates[x] for x in self.levels], kind="stable")
            self.fixed = np.full(n, -1, dtype=np.int64)
            for i in reversed(order):  # largest fitting level wins
                self.fixed[fits[:, i]] = i
            self.eligible = self.fixed >= 0

    def candidate_specs(self) -> list[tuple[ModelRecipe, SubmodelSpec]]:
        return [(self.recipe, self.specs[x]) for x in self.levels]

    def possible_specs(self) -> np.ndarray:
        """``fix``: each eligible device its one level; ``dynamic``: any level of the mix (with ``by_capacity``
        only the levels its declared memory holds)."""
        if self.cfg.mode == "fix":
            return fixed_level_specs(np.where(self.eligible, self.fixed, -1), len(self.levels))
        if self.cfg.assign == "by_capacity":
            return self.fits_level.copy()
        return np.broadcast_to(self.props > 0, (self.c.num_devices, len(self.levels))).copy()

    def selection_filter(self, fleet: FleetView) -> Eligible:
        """Which devices this method may select besides the view's selectable ones (``select_uniform``)."""
        return self.eligible

    def select(self, rnd: int, fleet: FleetView, rng: np.random.Generator) -> list[Assignment]:
        chosen = select_uniform(fleet, self.c.clients_per_round, rng, self.selection_filter(fleet))
        out = []
        for d in chosen:
            if self.cfg.mode == "fix":
                i = int(self.fixed[d])
            else:
                i = bisect.bisect_right(self._level_cdf(d), rng.random())
            x = self.levels[i]
            out.append(Assignment(int(d), self.specs[x], level=x, bits=self.wire.upload_bits))
        return out

    def _level_cdf(self, d: int) -> list[float]:
        """Device ``d``'s level distribution (the mix, restricted by capacity with ``by_capacity``) as the
        normalised CDF ``rng.choice(len(p), p=p)`` searches: ``bisect_right(cdf, rng.random())`` makes
        the same draw from the same random number, without choice's checks (~30 us a client)."""
        fits = self.fits_level[d] if self.cfg.assign == "by_capacity" else None
        key = None if fits is None else fits.tobytes()
        cdf = self._cdfs.get(key)
        if cdf is None:
            p = self.props.copy()
            if fits is not None:
                p = p * fits
            c = (p / p.sum()).cumsum()
            c /= c[-1]
            cdf = self._cdfs[key] = c.tolist()
        return cdf

    def local_objective(self, assignment: Assignment) -> LocalObjective:
        return LocalObjective("masked_ce" if self.cfg.masked_ce else "ce")

    def aggregate(self, rnd: int, updates: list[Update]) -> None:
        if not updates:
            return
        parts = contributions(updates, "count", self.cfg.label_restricted_classifier)
        self.state = aggregate_nested(self.state, parts, classifier_keys=self.classifier)

    def eval_targets(self) -> list[EvalTarget]:
        targets = [
            EvalTarget(x, self.specs[x], self.slice_for(self.state, self.recipe, self.specs[x]), self.recipe)
            for x in self.levels
        ]
        targets.append(EvalTarget("full", self.global_spec, self.state, self.recipe, is_level=False))
        return targets
