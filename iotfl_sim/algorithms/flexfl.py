"""FlexFL (Chen et al., "FlexFL: Heterogeneous Federated Learning via APoZ-Guided Flexible Pruning in
Uncertain Scenarios"), from the paper, with ``reference: code`` for the official code's numbers
(mastlab-T3S/FlexFL @cec0e6c). Mechanics live in ``fl.apoz`` (APoZ, eq. 3, Algorithm 1).

Pre-processing (Algorithm 2 lines 1-5), once in ``setup``:

- Proxy set: the engine holds ``proxy_fraction`` (default 1 %, Table III) of the train set out of the
  clients' data. It is split by a seeded permutation into ``proxy_train_share`` (80 %) for
  pretraining and the rest for APoZ, as the paper and the code do.
- Pretraining: the paper names no optimizer; the code's is the default: Adam, lr 1e-3, batch 50,
  100 epochs, a fresh optimizer every epoch, plain CE, from the run's seeded initial weights. Its
  FLOPs (3 x forward x samples x epochs) are charged as server work "pretrain", the APoZ pass's
  forward FLOPs as "apoz": both appear as server time in round 1. Line 3 (Reset(M)): the global model
  then starts from the seeded initial weights, not the pretrained ones.
- APoZ: forward hooks on every ReLU (ReLU6 for MobileNetV2) with the modules in eval mode
  (``apoz_mode``; the code uses eval; BatchNorm has no running statistics here, so it normalises
  with batch statistics either way); per sample the fraction of zero outputs, averaged over the
  proxy test part (eq. 1) and over the ReLUs of a layer group (eq. 2). Groups: ``fl.apoz``.
- Scores s_l = 1 - A_l * AdjW_l (eq. 3, log of group parameter counts). Ablations: ``apoz: false``
  ("w/o APoZ: only the adjustment weight guides pruning") replaces every A_l by 0.5 (the code's own
  HeteroFL-like preset), so rates follow AdjW alone, and uniform when ``adjustment: false`` too;
  ``adjustment: false`` sets AdjW = 1; without APoZ nothing is pretrained (and nothing charged).
  System-only runs (no data) use A_l = 0.5 but still charge the pretraining and APoZ FLOPs a real
  run would spend (proxy size = ``proxy_fraction`` of the nominal train set). A real run with APoZ
  and no proxy set (``proxy_fraction: 0``) is an error.
- Pool (Algorithm 1 per target): paper: gamma = 0, 0.01, ... until |p - size(M')| <= epsilon
  (``search_epsilon`` 0.01 of size(M); the paper gives no value), size = all parameters; code:
  gamma = 1..199 with rates clamp(s x 100 / gamma), the first fraction in target +- 0.05, counted over
  the layer groups only (no classifier). Targets [0.25, 0.5, 1]; the last level (target 1) is the
  global model itself (no search). Adaptive models (Sec. III-C, IV-A: "the adaptive models are M2'
  and M3'") at target - Gamma for every level but the smallest: pool M1, M2', M2, M3', M3 (by size),
  or M1, M2, M3 with ``adaptive_models: false``. Gamma must stay below the smallest gap between
  targets (the paper's requirement).
- Channels (``fl.submodel.truncation``, in every model, size count, memory need and wire size): paper:
  int(C x rate) with a product within 1e-9 of an integer counted as that integer, at least one channel
  (rounding ``floor``); code: the official code's int(C x rate) exactly (rounding ``int``), in the
  search's size count too. A layer whose searched rate leaves it int(C x rate) = 0 channels (a rate
  below 1 / C, as when APoZ x AdjW near 1 clamps it at 0.01 in a layer of fewer than 100 channels) is
  refused in the set-up, naming the target behind the pool model, where the official code would build
  it with none. The rates come from the APoZ, so with real APoZ the refusal comes after pretraining,
  when ``run`` builds the simulation (before any file is written); ``validate`` sees the system-only
  APoZ of 0.5, whose rates (>= 0.5 x 100 / 199) keep channels in every family.

FL training (lines 6-20):

- DevSel: the paper's server keeps a table of requested (declared) resources; here
  ``FleetView.declared_free_memory`` (r_M in relative units). Clients: K uniformly at random among
  selectable devices whose declared resource holds M1; each gets the largest *level* model (M1, M2,
  M3) its declared resource holds: adaptive models are never dispatched, as in the code. (The code
  draws a model uniformly per slot and then a device by hard-coded id ranges; not reproduced.)
- AdaPrune (``adapt``, on the device, with its current r = r_M - |u|): the largest pool model not
  above the dispatched one whose need (percent of the full model's parameters in relative units)
  is <= r, tried in the order M3', M2, M2', M1; below M1 the device refuses (the task fails as
  ``refused``): the paper does not say, and the code trains M1 anyway. Both references decide by
  the models' true sizes (the code compares with nominal thresholds 40/50/90/100).
- Self-KD (eq. 4, tau = 3, lambda = 10): paper: the teachers of a trained model are the level models
  smaller than it (M1..M_{i-1} of the pool P = {M1, M2, M3}), the KD sum divided by their number.
  Code: every smaller model of the 5-model pool (adaptive ones included), divided by the trained
  model's index in that pool. Teachers are cut from the student's current weights each step and run
  in train mode without gradient.
- KL reduction (``kd_reduction``, independent of ``reference``): eq. 4 writes a per-sample KL sum,
  which is ``batchmean``; the official code, which produced the paper's numbers and under which
  lambda = 10 was tuned (Fig. 8), uses ``KLDivLoss()``, whose default ``'mean'`` divides by batch x
  classes. The default is ``mean``: the authors' effective weight of the KD term. ``batchmean`` makes
  the term C times stronger with C classes (10x on CIFAR-10, 62x on FEMNIST).
  A model with no smaller teacher (M1) trains with plain CE; ``self_kd: false`` is CE everywhere.
- Aggregation: data-size weighted prefix averaging (untouched entries keep their value).
- ``server.mode: semi_async`` (not in the paper): a late update counts with its staleness weight times its data
  size. The APoZ pruning runs once, in the set-up, so the pool does not change between rounds: a late model (its
  AdaPrune choice made on the device in its own round, cut from the weights its device downloaded then) is a pool
  model of the current pool and lands on its own prefix region of the current global model. FlexFL has no other
  server step per round.
- ``server.mode: async`` (not in the paper; ``sim/buffered_async.py``, FedBuff's buffered form): ``server.buffer_size``
  updates make a version; for the same reason a stale update (its delta from the weights its device downloaded,
  weighted by ``server.staleness``) lands on its own prefix region of the current global model.
- Evaluation: small/medium/large = M1, M2, M3 (``acc_avg`` is their mean, the paper's "average
  accuracy of the 25 %, 50 % and 100 % models") plus ``full`` (the global model, = large; kept for
  columns comparable across methods, not in the average).
- Models have no HeteroFL Scaler (VGG/ResNet/MobileNet in FlexFL's code have none): the recipe forces
  ``scaler: false`` whatever the scenario says.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from iotfl_sim.algorithms.base import (
    Assignment,
    DeviceState,
    EvalTarget,
    FleetView,
    GlobalModel,
    InferWork,
    LocalObjective,
    Strategy,
    TrainWork,
    Update,
    select_uniform,
)
from iotfl_sim.algorithms.common import contributions, zero_widths_refused
from iotfl_sim.fl import apoz as ap
from iotfl_sim.fl.aggregate import aggregate_nested
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec, truncation
from iotfl_sim.scenario.algorithms import FlexFLConfig
from iotfl_sim.seeding import int_seed, stream

UNIFORM_APOZ = 0.5
EVAL_LABELS = ("small", "medium", "large")


@dataclass(frozen=True)
class PoolModel:
    name: str  # M1, M2', M2, ...
    spec: SubmodelSpec
    level: int  # index of its level model (M2' and M2 -> 1)
    adaptive: bool
    target: float


def pool_names(n_levels: int, adaptive: bool) -> list[tuple[str, int, bool]]:
    """(name, level, adaptive) in ascending size: M1, M2', M2, M3', M3 (no M1', as in the paper)."""
    out = []
    for i in range(n_levels):
        if adaptive and i > 0:
            out.append((f"M{i + 1}'", i, True))
        out.append((f"M{i + 1}", i, False))
    return out


def zero_width_advice(level: int, adaptive: bool, name: str) -> tuple[str, str]:
    """The field behind pool model ``name``'s searched rates and the fix, for a ``reference: code`` layer the
    search leaves with int(C x rate) = 0 channels (the rate follows the layer's APoZ and adjustment weight)."""
    field = f"algorithm.targets[{level}]" + (" - algorithm.adaptive_gamma" if adaptive else "")
    fix = (
        f"raise algorithm.targets[{level}] (a smaller gamma keeps more channels; a layer whose APoZ is near 1 keeps "
        "0.01 at every gamma), set apoz: false"
    )
    return f"{field} (pool model {name}, searched layer rates)", fix


class FlexFL(GlobalModel, Strategy):
    Config = FlexFLConfig
    checkpointed = ("state",)

    def __init__(self, cfg: FlexFLConfig) -> None:
        super().__init__(cfg)
        self.cfg: FlexFLConfig = cfg

    # ------------------------------------------------------------ pre-processing

    def setup(self, ctx) -> None:
        self.ctx = ctx
        cfg = self.cfg
        gaps = np.diff(cfg.targets)
        if cfg.adaptive_models and len(gaps) and cfg.adaptive_gamma >= gaps.min():
            raise ValueError(
                f"flexfl: adaptive_gamma {cfg.adaptive_gamma} must be below the smallest target gap"
            )
        self.recipe = replace(ctx.recipe, global_rate=1.0, scaler=False)
        self.rounding = truncation(cfg.reference)
        self.global_spec = SubmodelSpec(1.0, rounding=self.rounding, name="full")
        self.state = ctx.initial_state(self.recipe, self.global_spec)
        with torch.device("meta"):
            skeleton = self.recipe.build(self.global_spec)
        self.group_sizes = ap.group_param_counts(skeleton, self.recipe.family)
        self.apoz = self._apoz() if cfg.apoz else [UNIFORM_APOZ] * len(self.group_sizes)
        self.adjw = (
            ap.adjustment_weights(self.group_sizes) if cfg.adjustment else [1.0] * len(self.group_sizes)
        )
        self.scores = ap.layer_scores(self.apoz, self.adjw)
        self.pool = self._build_pool()
        self.levels = [p for p in self.pool if not p.adaptive]
        self.index = {p.name: i for i, p in enumerate(self.pool)}

    def _apoz(self) -> list[float]:
        """Pretrain a copy of the global model on the proxy train part; APoZ on the test part."""
        ctx, cfg = self.c, self.cfg
        if ctx.data is not None and (ctx.proxy_indices is None or len(ctx.proxy_indices) == 0):
            raise ValueError("flexfl: APoZ needs a proxy set; set algorithm.proxy_fraction > 0 (or apoz: false)")
        if ctx.data is None:
            n = int(round(cfg.proxy_fraction * float(np.sum(ctx.samples_per_device))))
            n_train = int(np.floor(cfg.proxy_train_share * n))
            self._charge_apoz(n_train, n - n_train)
            return [UNIFORM_APOZ] * len(self.group_sizes)
        proxy = np.asarray(ctx.proxy_indices)
        order = proxy[stream(ctx.seed, "flexfl_proxy_split").permutation(len(proxy))]
        n_train = int(np.floor(cfg.proxy_train_share * len(order)))
        train, test = order[:n_train], order[n_train:]
        if len(test) == 0:
            raise ValueError("flexfl: the proxy set is too small to leave a test part for APoZ")
        model = self.recipe.build(self.global_spec)
        model.load_state_dict(self.state)
        x, y = ctx.data.x_train, ctx.data.y_train
        ti = torch.as_tensor(train, dtype=torch.long)
        ap.pretrain(
            model, x[ti], y[ti], epochs=cfg.pretrain_epochs, batch_size=cfg.pretrain_batch_size,
            lr=cfg.pretrain_lr, optimizer=cfg.pretrain_optimizer, seed=int_seed(ctx.seed, "flexfl_pretrain"),
        )  # fmt: skip
        result = ap.layer_apoz(
            model, self.recipe.family, x[torch.as_tensor(test, dtype=torch.long)], mode=cfg.apoz_mode
        )
        self._charge_apoz(len(train), len(test))
        return result

    def _charge_apoz(self, n_train: int, n_test: int) -> None:
        """Server pretraining on the proxy's train part (Adam priced as SGD with momentum: one state buffer
        where Adam keeps two), then APoZ's forward passes over its test part (``fl.apoz.layer_apoz``'s batches)."""
        cfg = self.cfg
        momentum = 0.9 if cfg.pretrain_optimizer == "adam" else 0.0
        work = TrainWork(self.recipe, self.global_spec, n_train, cfg.pretrain_epochs, cfg.pretrain_batch_size, momentum)
        self.c.server_work.charge("pretrain", work)
        self.c.server_work.charge("apoz", InferWork(self.recipe, self.global_spec, n_test, ap.APOZ_BATCH))

    def _build_pool(self) -> list[PoolModel]:
        cfg = self.cfg
        code = cfg.reference == "code"
        fraction = ap.size_fraction(self.recipe, groups_only=code, rounding=self.rounding)
        out = []
        for name, level, adaptive in pool_names(len(cfg.targets), cfg.adaptive_models):
            target = cfg.targets[level] - (cfg.adaptive_gamma if adaptive else 0.0)
            if target >= 1.0:
                rates = None  # the global model itself
            elif code:
                with zero_widths_refused(self.recipe, *zero_width_advice(level, adaptive, name)):
                    rates = ap.search_code(self.scores, fraction, target, cfg.code_tolerance)
            else:
                rates = ap.search_paper(self.scores, fraction, target, cfg.search_epsilon, cfg.search_step)
            out.append(PoolModel(name, SubmodelSpec(1.0, layer_rates=rates, rounding=self.rounding, name=name),
                                 level, adaptive, target))  # fmt: skip
        return out

    def candidate_specs(self) -> list[tuple[ModelRecipe, SubmodelSpec]]:
        return [(self.recipe, p.spec) for p in reversed(self.pool)]  # largest (the global model) first

    def possible_specs(self) -> np.ndarray:
        """A device is sent the largest level its declared resource holds, and AdaPrune may cut it down to any
        pool model up to that one."""
        level = self.level_of(np.asarray(self.c.declared_free_memory, dtype=np.float64))
        top = np.array([self.index[p.name] for p in self.levels] + [-1])[level]  # level -1: index -1, nothing
        pool = np.array([self.index[p.name] for p in reversed(self.pool)])  # candidate_specs' order
        return pool[None, :] <= top[:, None]

    def level_of(self, free: np.ndarray) -> np.ndarray:
        """Largest level model each declared resource in ``free`` holds (-1: none)."""
        level = np.full(len(free), -1, dtype=np.int64)
        for i, p in enumerate(self.levels):
            level[self.fits(self.recipe, p.spec, free)] = i
        return level

    # ------------------------------------------------------------ rounds

    def select(self, rnd: int, fleet: FleetView, rng: np.random.Generator) -> list[Assignment]:
        declared = np.asarray(fleet.declared_free_memory(), dtype=np.float64)
        chosen = select_uniform(fleet, self.c.clients_per_round, rng, lambda ids: self.level_of(declared[ids]) >= 0)
        out = []
        for d, lv in zip(chosen, self.level_of(declared[chosen]), strict=True):
            p = self.levels[int(lv)]
            out.append(Assignment(int(d), p.spec, level=p.name, extras={"dispatched": p.name}))
        return out

    def adapt(self, assignment: Assignment, device: DeviceState) -> Assignment | None:
        """AdaPrune: the largest pool model up to the dispatched one that fits the current resource."""
        pairs = [(self.recipe, p.spec) for p in self.pool]
        i = self.largest_fitting(pairs, device.free_memory_bytes, upto=self.index[assignment.level])
        if i is None:
            return None
        p = self.pool[i]
        return replace(assignment, spec=p.spec, level=p.name)

    def teachers(self, name: str) -> tuple[list[PoolModel], float]:
        """Self-KD teachers of the pool model ``name`` and the divisor of their KD sum."""
        i = self.index[name]
        if self.cfg.reference == "code":
            return list(self.pool[:i]), float(i)
        smaller = [p for p in self.levels if self.index[p.name] < i]
        return smaller, float(len(smaller))

    def local_objective(self, assignment: Assignment) -> LocalObjective:
        cfg = self.cfg
        teachers, divisor = self.teachers(assignment.level)
        if not cfg.self_kd or not teachers:
            return LocalObjective("ce")
        return LocalObjective(
            "self_kd",
            temperature=cfg.kd_temperature,
            weight=cfg.kd_lambda,
            teachers=tuple(p.spec for p in teachers),
            divisor=divisor,
            reduction=cfg.kd_reduction,
        )

    def aggregate(self, rnd: int, updates: list[Update]) -> None:
        if not updates:
            return
        self.state = aggregate_nested(self.state, contributions(updates, self.cfg.weighting))

    def eval_targets(self) -> list[EvalTarget]:
        labels = EVAL_LABELS if len(self.levels) == 3 else [p.name for p in self.levels]
        targets = [
            EvalTarget(label, p.spec, self.slice_for(self.state, self.recipe, p.spec), self.recipe)
            for label, p in zip(labels, self.levels, strict=True)
        ]
        targets.append(EvalTarget("full", self.global_spec, self.state, self.recipe, is_level=False))
        return targets
