"""AdapterFL (Liu et al., "AdapterFL: Adaptive Heterogeneous Federated Learning for Resource-constrained
Mobile Computing Systems") and FedBase, its baseline without block-wise aggregation.

No public code exists; this follows the paper's text, and every choice it leaves open is stated here.

- Prototypes S, M, L (``prototypes``, default 2-conv CNN ``cnn2``, ``mobilenetv2``, ``resnet18``; the
  second group is mobilenetv2, resnet18, vgg16), optionally narrowed by ``width`` (a width rate for
  every prototype, for runs on small machines; the paper uses 1).
- Partition (eq. 3, ``fl.models.reassemble``): each prototype is a sequence of stages; the candidate cuts
  leave at least one stage on the feature side and one non-head stage on the adaptation side (so
  ``cnn2`` has the single cut after conv1). Linear CKA on flattened representations of a probe batch
  of ``probe_samples`` images: the server's proxy set when ``proxy_fraction`` > 0, else a seeded sample
  of the train set (the same server-side data the static-BN calibration already reads); in
  system-only runs a seeded Gaussian batch. The prototypes are probed at their seeded initialisation
  (the paper does not say whether they are pretrained; nothing else in the method pretrains them).
  The forward passes are charged as server work ``partition``. ``cuts`` fixes the cuts instead;
  Table II's sizes imply cnn2 1, mobilenetv2 4, resnet18 3. On untrained prototypes CKA favours
  early cuts (the representations are still close to the input), so the criterion and Table II's
  cuts need not agree; the run summary does not record the chosen cuts, ``AdapterFL.partition`` does.
- Reassembly (eq. 5): the extractor prototype's (``extractor``, default L, the paper's preferred
  choice; Algorithm 1 picks it at random) feature-extraction block with each prototype's adaptation
  block, joined by a two-conv adapter (``fl.models.reassemble.Adapter``): the group ``<X>-S``, ``<X>-M``,
  ``<X>-L``.
- Which device fits which model (``fit``). The selector's "table of the hardware resource of each
  device" is the declared profiles (no oracle access). Sec. IV-C states the rule as |m_ij| <= Gamma_k
  with |m_ij| "the required memory for the deployment of m_ij" and Gamma_k "the available memory of
  the k-th device"; Sec. IV-E (Algorithm 1) says |m_ij| "means the number of parameters". The paper
  thus equates the memory a model needs with its parameter count, by a constant it does not state.
  ``params`` (default, the paper's reading): need(m) = beta x |m| against the declared free memory,
  i.e. capacity Gamma_k = free memory / beta parameters, with beta the largest training memory per
  parameter among the pool's models (``bytes_per_param``: max over m of ``ctx.memory_need(m)`` / |m|,
  in the fleet's memory units). That beta is the smallest constant under which the reading never
  gives a device a model its declared memory cannot train (memory_need(m) <= beta |m| for every m);
  4 bytes (the float32 weights alone) would not do: the weights are a small part of training memory
  at batch 50, so every device that can train anything would fit the largest model. Models are then
  ordered by parameters, the paper's S < M < L, and the largest (L) is the scarce one. With the
  Table II prototypes at batch 50 beta is L-S's (443 B per parameter, activations dominating the
  small models), so L-S, L-M, L-L need 383, 1215, 4734 MB of declared free memory
  (``scenarios/adapterfl_cifar10.yaml``).
  ``memory``: a model fits when its training memory need (``ctx.memory_need``) is at most the
  declared free memory, models ordered by that need; activations make MobileNetV2's blocks the most
  memory-hungry, so L-M, not L-L, is then the scarce model.
  Either way a device whose current memory has dropped below the model's training need fails the
  task as out-of-memory.
- Model & client selector (Sec. IV-C): every selectable device that fits at least the smallest model
  is eligible; its *level* is the largest model it fits. The round's k slots are shared among the
  models in proportion to how many selectable devices have that level (largest remainder), and
  every model that some selectable device fits gets at least one slot (taken from the model with
  the most). Models are filled largest
  first, from devices of their own level, then from unchosen devices of higher levels; unfilled
  slots pass to the next smaller model. With 40/40/20 % of the devices at levels S/M/L, 10 slots
  become 4/4/2, as in the paper ("we will also deliver these heterogeneous models according to this
  ratio").
- Local training: plain cross-entropy with the scenario's ``local`` settings (paper: SGD lr 0.01,
  decay 0.998, momentum 0.5, weight decay 1e-3, batch 50, 5 epochs).
- Block-wise aggregation (eqs. 6, 7): the group's global state holds the feature-extraction block
  once (``ex.*``) and each model's adapter and adaptation block under its label
  (``L-S/adapter.*``, ``L-S/ad.*``); every tensor is averaged over the updates that hold it
  (``fl.aggregate.aggregate_nested`` after renaming, ``fl.models.reassemble.to_group``): the shared block
  over every client of the round, the others over the clients that trained that model. The paper's
  means are unweighted (``weighting: count``); ``data`` weights by client data size.
- FedBase (``fedbase``): the same models, selector and training, but nothing is shared: every model,
  its feature-extraction block included, is averaged only over its own clients (FedAvg per
  reassembled model with exclusive learning). The paper trains each reassembled model in a separate
  FedAvg run; sharing the rounds isolates the one thing AdapterFL changes, the block-wise
  aggregation.
- ``server.mode: semi_async`` (not in the paper): a late update counts with its staleness weight times its
  weight, in the shared block and in its own model's blocks alike; the partition and the group are fixed at
  set-up, so its state (its model as its device downloaded it in its own round, then trained) renames onto the
  current group state. FedBase the same, per model.
- ``hierarchy:`` (not in the paper): a gateway holds the group state (``tier_state``: ``state``) and aggregates its
  devices' updates block-wise as the flat server does; beside it it keeps, per model, the total weight of the
  updates it averaged into that model since the cloud round began (``label_weights``: their number under the
  paper's ``weighting: count``, their samples under ``data``). The cloud averages each tensor over the gateways as
  the flat server averages it over clients: the shared block weighted by each gateway's total over all models, a
  model's own blocks by each gateway's weight for that model (a gateway that trained none of it takes no part). So
  with one gateway round per cloud round every tensor is the flat round's weighted average over all that cloud
  round's clients (up to float rounding), and one gateway with k1 = k2 = 1 is flat AdapterFL bit for bit; the
  partition and the group are the cloud's, fixed at set-up. The backhaul carries the whole group (``tier_size``:
  the shared block once, each model's own blocks). FedBase the same, with no shared block.
- Evaluation: every model of the group (columns ``acc_L-S``, ``acc_L-M``, ``acc_L-L``; ``acc_avg``
  their mean) and ``acc_full``, the group's largest model.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from iotfl_sim.algorithms.base import Assignment, EvalTarget, FleetView, InferWork, Strategy, Tier, Update
from iotfl_sim.algorithms.common import contributions
from iotfl_sim.fl.aggregate import Contribution, aggregate_nested
from iotfl_sim.fl.models.reassemble import (
    Partition,
    candidate_cuts,
    centered_gram,
    cut_features,
    from_group,
    group_key,
    partition_by_similarity,
    reassembled_family,
    to_group,
)
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec
from iotfl_sim.fl.torch_seed import seed_torch
from iotfl_sim.fleet.fleet import MB
from iotfl_sim.scenario.algorithms import AdapterFLConfig, FedBaseConfig
from iotfl_sim.seeding import int_seed, stream

LETTERS = ("S", "M", "L")


def apportion(k: int, weights: np.ndarray) -> np.ndarray:
    """Split k slots in proportion to ``weights`` by largest remainder (ties: lower index first)."""
    w = np.asarray(weights, dtype=float)
    if k <= 0 or w.sum() <= 0:
        return np.zeros(len(w), dtype=np.int64)
    raw = k * w / w.sum()
    out = np.floor(raw + 1e-9).astype(np.int64)
    order = sorted(range(len(w)), key=lambda i: (-(raw[i] - out[i]), i))
    for i in order[: k - int(out.sum())]:
        out[i] += 1
    return out


def select_by_fit(pool: np.ndarray, level: np.ndarray, k: int, num_models: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    """The model & client selector (see the module docstring): (device, model index) pairs, models
    indexed smallest first; ``level[d]`` is the largest model device d fits (-1: none)."""
    pool = np.asarray(pool)
    pool = pool[level[pool] >= 0]
    k = min(k, len(pool))
    counts = np.array([(level[pool] == j).sum() for j in range(num_models)])
    fits = np.array([(level[pool] >= j).sum() for j in range(num_models)])
    quota = apportion(k, counts)
    for j in range(num_models - 1, -1, -1):
        if quota[j] == 0 and fits[j] > 0:
            donor = int(np.argmax(quota))
            if quota[donor] > 1:
                quota[donor] -= 1
                quota[j] = 1
    taken = np.zeros(len(pool), dtype=bool)
    out: list[tuple[int, int]] = []
    carry = 0
    for j in range(num_models - 1, -1, -1):
        want = int(quota[j]) + carry
        for source in (level[pool] == j, level[pool] > j):
            cand = np.flatnonzero(source & ~taken)
            n = min(want, len(cand))
            if n > 0:
                pick = np.sort(cand[rng.choice(len(cand), size=n, replace=False)])
                taken[pick] = True
                out += [(int(pool[p]), j) for p in pick]
                want -= n
        carry = want
    return sorted(out)


class ModelPoolRounds(Strategy):
    """Rounds over a labelled pool of models (``labels``, ``recipes``, ``specs``), each device given the
    largest model its level fits (``level``, ``select_by_fit``): shared by AdapterFL, FedBase and FedDF."""

    def order_pool(self, models: list[tuple[str, ModelRecipe, SubmodelSpec]]) -> None:
        """Order the pool smallest first by ``cfg.fit`` and give each device its level: the largest model
        whose need (``need``, in the fleet's memory units) its declared free memory holds (-1: none).
        ``params``: need = beta x parameters with beta (``bytes_per_param``) the largest training memory
        per parameter among the pool's models; ``memory``: each model's training memory (module docstring)."""
        ctx = self.c
        params = np.array([r.cost(s).params for _, r, s in models], dtype=np.float64)
        memory = np.array([ctx.memory_need(r, s) for _, r, s in models], dtype=np.float64)
        if self.cfg.fit == "params":
            self.bytes_per_param: float | None = float(np.max(memory / params))
            need = self.bytes_per_param * params
        else:
            self.bytes_per_param = None
            need = memory
        order = sorted(range(len(models)), key=lambda j: (float(need[j]), j))
        self.labels = [models[j][0] for j in order]
        self.recipes = {models[j][0]: models[j][1] for j in order}
        self.specs = {models[j][0]: models[j][2] for j in order}
        self.need = [float(need[j]) for j in order]
        declared = np.asarray(ctx.declared_free_memory, dtype=np.float64)
        self.level = (declared[:, None] >= np.asarray(self.need)[None, :]).sum(1) - 1  # needs ascend: a prefix fits
        if self.cfg.fit == "params" and not (self.level >= 0).any():
            raise ValueError(
                f"fit params: no device's declared free memory holds the smallest model {self.labels[0]} "
                f"({int(params[order[0]])} parameters x {self.bytes_per_param:.4g} B = {self.need[0] / MB:.4g} MB); "
                "raise the groups' memory.free or set algorithm.fit: memory"
            )

    def candidate_specs(self) -> list[tuple[ModelRecipe, SubmodelSpec]]:
        return [(self.recipes[x], self.specs[x]) for x in self.labels]

    def possible_specs(self) -> np.ndarray:
        """A device of level L may be given any model up to L (``select_by_fit`` fills a slot from above)."""
        return np.arange(len(self.labels))[None, :] <= self.level[:, None]

    def select(self, rnd: int, fleet: FleetView, rng: np.random.Generator) -> list[Assignment]:
        pool = np.flatnonzero(fleet.selectable_mask())
        pairs = select_by_fit(pool, self.level, self.c.clients_per_round, len(self.labels), rng)
        return [Assignment(d, self.specs[self.labels[j]], level=self.labels[j]) for d, j in pairs]

    def recipe_for(self, assignment: Assignment) -> ModelRecipe:
        return self.recipes[assignment.level]


class AdapterFL(ModelPoolRounds):
    Config = AdapterFLConfig
    checkpointed = ("state",)
    tier_state = ("state", "label_weights")  # under a hierarchy a gateway's group state and each model's weight
    shared_blocks: tuple[str, ...] = ("ex",)

    def __init__(self, cfg: AdapterFLConfig) -> None:
        super().__init__(cfg)
        self.cfg: AdapterFLConfig = cfg
        self.partition: Partition | None = None

    def prototype_recipe(self, family: str) -> ModelRecipe:
        return replace(self.c.recipe, family=family, global_rate=self.cfg.width)

    def setup(self, ctx) -> None:
        self.ctx = ctx
        cfg = self.cfg
        cuts = list(cfg.cuts) if cfg.cuts is not None else list(self.choose_cuts())
        self.cuts = cuts
        i = LETTERS.index(cfg.extractor)
        models = []
        for j, fam in enumerate(cfg.prototypes):
            label = f"{LETTERS[i]}-{LETTERS[j]}"
            recipe = replace(
                ctx.recipe, family=reassembled_family(cfg.prototypes[i], cuts[i], fam, cuts[j]), global_rate=cfg.width
            )
            models.append((label, recipe, SubmodelSpec(rate=cfg.width, name=label)))
        self.order_pool(models)
        self.state: dict[str, torch.Tensor] = {}
        self.keys: dict[str, list[str]] = {}
        for label in self.labels:
            init = ctx.initial_state(self.recipes[label], self.specs[label])
            self.keys[label] = list(init)
            for k, v in to_group(init, label, self.shared_blocks).items():
                self.state.setdefault(k, v)  # the shared block: one copy (every model's is the same seeded init)
        self.largest = max(self.labels, key=lambda x: self.recipes[x].cost(self.specs[x]).params)
        self.label_weights: dict[str, float] = {}  # under a hierarchy, a gateway's per model (its tier); never the cloud's

    # -- partition (eq. 3)

    def probe_batch(self) -> torch.Tensor:
        ctx, n = self.c, self.cfg.probe_samples
        rng = stream(ctx.seed, "adapterfl_probe")
        if ctx.data is None:
            shape = (n, ctx.recipe.in_channels, *ctx.recipe.image_size)
            return torch.randn(shape, generator=torch.Generator().manual_seed(int_seed(ctx.seed, "adapterfl_probe")))
        pool = ctx.proxy_indices if ctx.proxy_indices is not None and len(ctx.proxy_indices) else np.arange(len(ctx.data.x_train))
        pick = np.sort(rng.choice(pool, size=min(n, len(pool)), replace=False))
        return ctx.data.x_train[torch.as_tensor(pick)]

    def choose_cuts(self) -> tuple[int, ...]:
        """Eq. 3 on the seeded initial prototypes (see the module docstring)."""
        x = self.probe_batch()
        candidates, feats, outs = [], [], []
        for i, fam in enumerate(self.cfg.prototypes):
            recipe, spec = self.prototype_recipe(fam), SubmodelSpec(rate=self.cfg.width)
            with torch.random.fork_rng():
                seed_torch(int_seed(self.c.seed, "adapterfl_partition", i))
                model = recipe.build(spec)
            cands = candidate_cuts(fam)
            f, out = cut_features(model, x, cands)
            candidates.append(cands)
            feats.append([centered_gram(t) for t in f])
            outs.append(centered_gram(out))
            self.c.server_work.charge("partition", InferWork(recipe, spec, len(x), len(x)))
        self.partition = partition_by_similarity(candidates, feats, centered_gram(x), outs)
        return self.partition.cuts

    # -- rounds


    def payload(self, assignment: Assignment):
        return self.model_state(assignment.level)

    def model_state(self, label: str) -> dict[str, torch.Tensor]:
        return from_group(self.state, self.keys[label], label, self.shared_blocks)

    def aggregate(self, rnd: int, updates: list[Update]) -> None:
        self._average(updates)

    def _average(self, updates: list[Update]) -> dict[str, float]:
        """Block-wise aggregation (eqs. 6, 7); the total weight each model's updates took."""
        weights: dict[str, float] = {}
        if not updates:
            return weights
        parts = []
        for u, c in zip(updates, contributions(updates, self.cfg.weighting), strict=True):
            parts.append(Contribution(to_group(c.state, u.assignment.level, self.shared_blocks), c.weight))
            weights[u.assignment.level] = weights.get(u.assignment.level, 0.0) + c.weight
        self.state = aggregate_nested(self.state, parts)
        return weights

    def gateway_aggregate(self, rnd: int, updates: list[Update]) -> None:
        """The flat aggregation, and each model's weight added to the gateway's ``label_weights``."""
        done = self._average(updates)
        self.label_weights = {x: self.label_weights.get(x, 0.0) + done.get(x, 0.0) for x in self.labels}

    def combine(self, rnd: int, tiers: list[Tier]) -> None:
        """Each tensor averaged over the gateways: the shared block by each gateway's total weight, a model's own
        blocks by the weight the gateway gave that model."""
        parts = []
        for t in tiers:
            weights = t.values["label_weights"]
            own: dict[str, dict[str, torch.Tensor]] = {x: {} for x in self.labels}
            shared: dict[str, torch.Tensor] = {}
            for k, v in t.state.items():
                owner = k.split("/", 1)[0]
                (own[owner] if owner in own else shared)[k] = v
            parts += [Contribution(own[x], weights[x]) for x in self.labels if weights.get(x, 0.0) > 0]
            if shared and sum(weights.values()) > 0:
                parts.append(Contribution(shared, sum(weights.values())))
        if parts:
            self.state = aggregate_nested(self.state, parts)

    def tier_size(self) -> tuple[int, int]:
        """The group: the shared block once, each model's own blocks."""
        params: dict[str, int] = {}
        tensors: set[str] = set()
        with torch.random.fork_rng():  # building a model draws its initial weights
            for x in self.labels:
                model = self.recipes[x].build(self.specs[x])
                params.update({group_key(k, x, self.shared_blocks): p.numel() for k, p in model.named_parameters()})
                tensors |= {group_key(k, x, self.shared_blocks) for k in model.state_dict()}
        return sum(params.values()), len(tensors)

    def eval_targets(self) -> list[EvalTarget]:
        out = [EvalTarget(x, self.specs[x], self.model_state(x), self.recipes[x]) for x in self.labels]
        x = self.largest
        out.append(EvalTarget("full", self.specs[x], self.model_state(x), self.recipes[x], is_level=False))
        return out


class FedBase(AdapterFL):
    """AdapterFL's reassembled models, each averaged only over its own clients (nothing shared)."""

    Config = FedBaseConfig
    shared_blocks = ()
