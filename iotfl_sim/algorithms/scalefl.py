"""ScaleFL (Ilhan et al., CVPR 2023): width and depth scaled together, early exits, exit self-distillation.

As in the paper and its official code (git-disl/scale-fl), applied to this simulator's backbones:

- Model: the scenario's family with an exit after every stage (``fl.models.early_exit``): ``conv`` (4 conv
  units), ``resnet18`` (4 stages), ``vgg16`` (5 pool-delimited stages) or ``resnet110`` (the code's
  CIFAR ResNet110, ``fl.models.resnet_cifar``: its 4 segments end after residual blocks 30, 38, 46 and 54,
  the code's ``ee_layer_locations`` [30, 38, 46]) become ``<family>_ee`` (``exit_head: scalefl``, the
  code's 3 x [conv3x3 -> Scaler -> BN -> ReLU] -> avgpool -> fc heads) or ``<family>_ee_light``
  (``exit_head: light``, avgpool -> fc). A family already written as ``*_ee``/``*_ee_light`` in the
  scenario is used as written (``exit_head`` is then not consulted). The code's models are ResNet110
  and MSDNet24; AdaptiveFL and FlexFL ran ScaleFL's rules on their own VGG16/ResNet backbones, and so
  can this module. The full-depth model's last exit is the backbone's own classifier, as in the code.
- Levels: a list of (width, depth): each prunable layer keeps ``width * C`` channels truncated and
  the first ``depth`` stages with their exits. ``reference: code`` truncates exactly as the code's
  ``int(C * width)`` (``SubmodelSpec`` rounding ``int``: 0.29 x 100 = 28.999999999999996 keeps 28)
  and refuses, before the run, a level whose width leaves some layer with 0 channels (a scenario
  error naming ``algorithm.levels[i].width``). ``reference: paper``: the paper gives no arithmetic,
  so the truncation counts a product within 1e-9 of an integer as that integer and keeps at least
  one channel (rounding ``floor``). Default levels: the code's widths [0.7, 0.7, 0.75, 1] with exits
  [1, 2, 3, 4] for conv, resnet18 and resnet110, and with stages [2, 3, 4, 5] for vgg16 (4 levels over
  its 5 stages: the paper leaves the mapping open; an exit after VGG's first two 64-channel convs
  would be nearly useless). Level labels are ``l1``, ``l2``, ... smallest first.
- Assignment (``assign``; null: ``by_capacity`` for ``reference: paper``, ``permutation`` for
  ``code``): ``by_capacity`` (for IoT fleets): a device's fixed level is the largest that fits its
  *declared* free memory; devices that fit none are never selected. ``permutation``: the code's
  fixed level per device: a seeded permutation of the devices, cut into consecutive blocks by
  ``shares`` (equal by default, the code's 0.25 each), leftovers to the last level (the code's
  ``get_level`` returns -1 for them, which indexes the last level). ``reference: code`` draws it as
  the code's ``Federator.fed_train`` does: ``np.random.seed(seed)`` (numpy's legacy generator,
  seeded right before the draw) then ``np.random.permutation(devices)``, blocks of
  ``int(devices * share)`` with the shares as written (``permutation_levels_code``), so a seed puts
  the same clients in the same levels as the code run with ``--seed`` (read here from
  ``numpy.random.RandomState``, which leaves the global generator alone). ``reference: paper``
  draws the permutation from the run's ``scalefl-levels`` stream and cuts blocks of
  floor(devices x normalised share). Either way the level is fixed for the run and there is no
  device-side adaptation: a device whose current free memory is below its level's need fails the
  task as out-of-memory (ScaleFL has no such mechanism).
- Selection: ``clients_per_round`` devices uniformly without replacement among the selectable ones.
- Scaler: ScaleFL's, always on (train and eval) where the width rate is below 1 (option ``scaler``,
  which overrides the scenario's ``model.scaler``: HeteroFL's train-only Scaler is not ScaleFL's).
- Local objective (``fl.objectives`` ``exit_kd``): last exit CE x n, exit j (1-based) [CE + gamma T^2
  KL(p_last || p_j)] x j, over n(n+1)/2; T = 3. KD is on only in 0-based rounds r > ``kd_start`` x
  rounds (the code's 0.25, strict; the paper is silent on a warm-up, so both modes keep it).
  ``kd_gamma`` (null) is 0.05 with ``reference: paper`` (the paper's method has KD on and 0.05 is the
  only value the authors publish, their BERT command) and 0 with ``reference: code`` (the code's
  default KD_gamma, which its README's CIFAR command keeps: KD off).
  ``reference: paper``: KL per sample (batchmean) and the teacher (last exit) detached, so the KD
  term trains only the earlier exits: the paper writes the last exit's prediction as the target
  and leaves the gradient question open. ``reference: code``: ``nn.KLDivLoss()``'s 'mean' reduction
  (also divided by the number of classes) and the teacher not detached, exactly as the code.
- Aggregation: per tensor, the unweighted mean over the clients holding it of each client's prefix
  region; entries no client touched keep their value (``fl.aggregate``, count weighting, no label
  restriction of the classifier). The code counts a tensor for a client when it received a
  gradient; every tensor of a submodel lies on the path to one of its exits, so the two agree.
- ``server.mode: semi_async`` (not in the paper): a late update's count is its staleness weight (1 for the
  round's own updates), so each tensor is the staleness-weighted mean over the clients holding it. Its level (width
  and depth) is fixed per device for the run; a late submodel, trained from the weights its device downloaded in
  its own round and with that round's exit-KD switch (``kd_active`` of its own round), lands on its prefix region
  and its exits of the current global model. ScaleFL has no other server step per round.
- ``server.mode: async`` (not in the paper), in FedBuff's buffered form (``sim.buffered_async``): a version folds
  ``server.buffer_size`` submodels, a stale one moved onto the current model by its staleness-weighted delta, by the
  count mean above; the levels stay fixed per device. The exit-KD switch counts model versions (server steps), not
  dispatch waves: a task is trained with KD when the version it downloads, ``rounds`` minus the versions still to
  make (``ctx.run_left.versions``), is past ``kd_start`` x ``rounds`` (``rounds`` counts versions), as a round's
  task is by its round (round r trains from the model of r aggregations).
- ``hierarchy:`` (not in the paper): each gateway round is one of ScaleFL's rounds (numbered cloud round x k2 + j,
  ``ctx.rounds`` = rounds x k2), so exit KD starts after ``kd_start`` of all the gateway rounds; a gateway averages
  its devices' submodels into its copy of the global model as the flat server does, the cloud the gateways' copies.
- Evaluation: each level's submodel (its deepest exit) and the full model (``full``), with the
  simulator's static-BN recalibration (the code evaluates BN on batch statistics instead).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from iotfl_sim.algorithms.base import (
    Assignment,
    EvalTarget,
    FleetView,
    GlobalModel,
    LocalObjective,
    Strategy,
    Update,
    fixed_level_specs,
    select_uniform,
)
from iotfl_sim.algorithms.common import contributions, refuse_zero_widths
from iotfl_sim.core.errors import ScenarioError
from iotfl_sim.fl.aggregate import aggregate_nested
from iotfl_sim.fl.models.early_exit import split_family
from iotfl_sim.fl.models.families import EE_BASES, EE_FAMILIES, FULL_DEPTH
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec, truncation
from iotfl_sim.scenario.algorithms import ScaleFLConfig
from iotfl_sim.seeding import stream

CODE_WIDTHS = (0.7, 0.7, 0.75, 1.0)
DEFAULT_DEPTHS: dict[str, tuple[int, ...]] = {
    "conv": (1, 2, 3, 4), "resnet18": (1, 2, 3, 4), "vgg16": (2, 3, 4, 5), "resnet110": (1, 2, 3, 4),
}  # fmt: skip
LEGACY_SEEDS = 1 << 32  # numpy's legacy np.random.seed takes 0 .. 2**32 - 1


def default_levels(base: str) -> list[tuple[float, int]]:
    """The code's four levels (width, depth) mapped onto ``base``'s stages."""
    return list(zip(CODE_WIDTHS, DEFAULT_DEPTHS[base], strict=True))


def ee_family(family: str, exit_head: str) -> str:
    """The early-exit family ScaleFL trains for the scenario's ``family``."""
    if family in EE_FAMILIES:
        return family
    if family not in EE_BASES:
        raise ValueError(f"scalefl supports model families {EE_BASES} (or their _ee variants), got {family!r}")
    return f"{family}_ee" if exit_head == "scalefl" else f"{family}_ee_light"


def permutation_levels(num_devices: int, shares: list[float], rng: np.random.Generator) -> np.ndarray:
    """The code's fixed levels: devices in a seeded random order, cut into blocks of floor(n x share)
    per level in order; leftovers get the last level."""
    p = np.asarray(shares, dtype=float) / float(np.sum(shares))
    order = rng.permutation(num_devices)
    out = np.full(num_devices, len(p) - 1, dtype=np.int64)
    start = 0
    for i, share in enumerate(p):
        k = int(np.floor(num_devices * share + 1e-9))
        out[order[start : start + k]] = i
        start += k
    return out


def permutation_levels_code(num_devices: int, shares: list[float], seed: int) -> np.ndarray:
    """The code's fixed levels (fed.py, ``Federator.fed_train``): ``np.random.seed(seed)``, then
    ``np.random.permutation(num_devices)`` cut into consecutive blocks of ``int(num_devices * share)``
    with the shares as given; devices past the last block get the last level."""
    order = np.random.RandomState(seed).permutation(num_devices)  # the legacy global generator's draw
    out = np.full(num_devices, len(shares) - 1, dtype=np.int64)
    start = 0
    for i, share in enumerate(shares):
        end = start + int(num_devices * share)
        out[order[start:end]] = i
        start = end
    return out


def kd_active(rnd: int, rounds: int, kd_start: float) -> bool:
    """The code's ``round_idx > 0.25 * num_rounds`` (0-based, strict)."""
    return rnd > kd_start * rounds


class ScaleFL(GlobalModel, Strategy):
    Config = ScaleFLConfig
    checkpointed = ("state",)

    def __init__(self, cfg: ScaleFLConfig) -> None:
        super().__init__(cfg)
        self.cfg: ScaleFLConfig = cfg

    def setup(self, ctx) -> None:
        self.ctx = ctx
        family = ee_family(ctx.recipe.family, self.cfg.exit_head)
        self.base, _ = split_family(family)
        self.recipe: ModelRecipe = replace(ctx.recipe, family=family, scaler=self.cfg.scaler, global_rate=1.0)
        if self.cfg.levels is None:
            levels = default_levels(self.base)
        else:
            levels = [(lv.width, lv.depth) for lv in self.cfg.levels]
        full = FULL_DEPTH[self.base]
        for _, d in levels:
            if d > full:
                raise ValueError(f"scalefl level depth {d} exceeds {family}'s {full} stages")
        code = self.cfg.reference == "code"
        rounding = truncation(self.cfg.reference)
        self.specs = [
            SubmodelSpec(rate=w, depth=None if d == full else d, rounding=rounding, name=f"l{i + 1}")
            for i, (w, d) in enumerate(levels)
        ]
        if code:
            fields = [f"algorithm.levels[{i}].width" if self.cfg.levels else "algorithm.levels" for i in range(len(levels))]
            refuse_zero_widths(self.recipe, list(zip(self.specs, fields, strict=True)))
        self.global_spec = SubmodelSpec(rate=1.0, rounding=rounding, name="full")
        self.state = ctx.initial_state(self.recipe, self.global_spec)
        n = ctx.num_devices
        if self.cfg.assignment == "permutation":
            equal = 1.0 / len(self.specs) if code else 1.0  # the code's 0.25 each; paper: normalised below
            shares = self.cfg.shares or [equal] * len(self.specs)
            if len(shares) != len(self.specs):
                raise ValueError(f"scalefl: {len(shares)} shares for {len(self.specs)} levels")
            if code:
                if ctx.seed >= LEGACY_SEEDS:
                    raise ScenarioError(
                        f"seed: {ctx.seed} is too large for reference: code's levels, drawn as the code's "
                        f"np.random.seed(seed), which takes 0 .. {LEGACY_SEEDS - 1}; use a smaller seed"
                    )
                self.fixed = permutation_levels_code(n, shares, ctx.seed)
            else:
                self.fixed = permutation_levels(n, shares, stream(ctx.seed, "scalefl-levels"))
            self.eligible = np.ones(n, dtype=bool)
        else:
            self.fixed = np.full(n, -1, dtype=np.int64)
            for i, spec in enumerate(self.specs):  # smallest first: the largest fitting level wins
                self.fixed[self.fits(self.recipe, spec, ctx.declared_free_memory)] = i
            self.eligible = self.fixed >= 0

    def candidate_specs(self) -> list[tuple[ModelRecipe, SubmodelSpec]]:
        return [(self.recipe, s) for s in self.specs]

    def possible_specs(self) -> np.ndarray:
        return fixed_level_specs(np.where(self.eligible, self.fixed, -1), len(self.specs))

    def select(self, rnd: int, fleet: FleetView, rng: np.random.Generator) -> list[Assignment]:
        chosen = select_uniform(fleet, self.c.clients_per_round, rng, self.eligible)
        left = self.c.run_left  # asynchronously (a dispatch wave, not a round): the model version downloaded
        version = rnd if left is None else self.c.rounds - left.versions
        out = []
        for d in chosen:
            spec = self.specs[int(self.fixed[d])]
            out.append(Assignment(int(d), spec, level=spec.name, extras={"round": version}))
        return out

    def local_objective(self, assignment: Assignment) -> LocalObjective:
        code = self.cfg.reference == "code"
        return LocalObjective(
            "exit_kd",
            temperature=self.cfg.temperature,
            weight=self.cfg.gamma,
            reduction="mean" if code else "batchmean",
            kd_active=kd_active(int(assignment.extras.get("round", 0)), self.c.rounds, self.cfg.kd_start),
            detach_teacher=not code,
        )

    def aggregate(self, rnd: int, updates: list[Update]) -> None:
        if not updates:
            return
        self.state = aggregate_nested(self.state, contributions(updates, "count"))

    def eval_targets(self) -> list[EvalTarget]:
        targets = [
            EvalTarget(s.name, s, self.slice_for(self.state, self.recipe, s), self.recipe) for s in self.specs
        ]
        targets.append(EvalTarget("full", self.global_spec, self.state, self.recipe, is_level=False))
        return targets
