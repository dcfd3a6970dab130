"""AdaptiveFL (Jia et al., DAC 2024): fine-grained width pruning and RL-based client selection.

What the paper specifies, and the choices it leaves open:

- Pool (Table 1, p = 3): for each r_w < 1 of ``width_rates`` (levels S, M) and each start layer I of
  ``start_layers`` a model whose prunable groups with 0-based index < I keep every channel and the
  others keep int(C * r_w) (``reference: code``: Python's int() exactly as the code, and a rate that
  leaves some layer 0 channels is refused before the run, naming ``algorithm.width_rates``;
  ``reference: paper``: ``rounding="floor"``, a product within 1e-9 of an integer counts as that
  integer and a layer keeps at least one channel, the paper giving no arithmetic). No Scaler: the
  strategy builds its recipe with ``scaler=False`` whatever the scenario says. VGG16's two hidden
  FC layers always get r_w
  (``models.start_layer_rates``). Plus L_1, the unpruned model. Pool order S_p..S_1, M_p..M_1, L_1
  (r_w ascending, then I ascending), which must be ascending in size (checked in ``setup``); the
  VGG16/CIFAR-10 pool has exactly Table 1's parameter counts. Default start layers: VGG16 {4, 6, 8}
  (paper, code); ResNet18 {1, 2, 3}, which is the code's stage index {2, 3, 4} (its index 0 is the
  stem, 1 the first stage; our group 0 holds the stem and the first stage); ``conv`` {0, 1, 2}: its
  last conv holds most parameters, so {1, 2, 3} is not ascending in size ((0.4, 3) = 53.9 % of the full
  model > (0.66, 1) = 44.7 %) while {0, 1, 2} gives 16.4 / 17.6 / 24.8 and 43.7 / 44.7 / 50.5 % (FEMNIST),
  the shape of Table 1, at the cost of tau = 0 (the smallest models also prune the first conv);
  ``mobilenetv2`` {3, 4, 5}, ``cnn_small`` {0, 1}, ``mlp`` {0} (p = 1), chosen the same way. tau (the
  minimum I) is the smallest start layer.
- Selection (Algorithm 1): each of the round's K slots draws a pool model uniformly (RandomSel; all K
  drawn first, as the code does), then a client for it, among the selectable devices not yet drawn this
  round, with P(m, c) = R(m, c) / sum_j R(m, j) (all rewards 0: uniform). R_s(m, c) = sum over the
  models k of level(m) of sum_{t >= k} T_r[t][c], divided by p x sum_t T_r[t][c] (a row summing to 0
  gives R_s = 0); R_c = 1 / sqrt(T_c[level(m)][c]) (MBIE-EB); R = min(0.5, R_s) x R_c.
  Variants (Sec. 4.4): ``curiosity: false`` -> +S (R = R_s, uncapped, as the code's RL+S line),
  ``resource: false`` -> +C (R = R_c), both false -> uniform; ``selection: random`` -> RandomSel and
  uniform clients (+Random); ``selection: greedy`` -> every slot gets L_1, clients uniform (+Greedy).
  The tables are kept (and updated) in every variant.
- Device side (Sec. 3.2): a device keeps the received model if its current free memory Gamma holds it,
  else trains argmax size over the pool s.t. size <= Gamma (sizes = the engine's ``memory_need``, so
  with ``memory_units: relative`` Gamma and sizes are percent of the full model's parameters). Pruning
  never grows a model, so candidates are also capped at the received size. Nothing fits: the device
  refuses (engine status ``refused``). Not every smaller pool model is a prefix of the received one
  (e.g. S1 = (0.4, 8) keeps every channel of groups 4-7, M3 = (0.66, 4) only 0.66 of them). Sec. 3.2
  prunes "the weight of the received model W", argmax over size(prune(W; r_w, I)), so ``reference:
  paper`` only considers pool models nested in the received one (every tensor a prefix slice of its
  tensors: ``fl.submodel.is_nested``): a device that received M3 and cannot hold it picks S3, never
  S1 or S2. ``reference: code`` keeps the official code's choice, the largest smaller pool model whatever
  its shape, cut from the global weights (the engine slices the server's payload; for a nested model
  the two cuts are the same weights).
- Table updates (Algorithm 1, lines 12-25), after the round, from each outcome the server can read:
  ``completed`` (m' = the trained model) and ``refused`` (no model came back: T_c[level(sent)] += 1 and
  T_r is penalised as if m' were a virtual model below the pool, T_r[t] = max(T_r[t] - (t + 1), 0));
  other failures (network, battery, deadline, OU memory lost mid-task) tell nothing about fit and
  leave the tables alone. Accepted (m' = m): T_r[t] += 1 for t = m..L_1, then T_r[L_1] += p - 1.
  Pruned: T_r[m'] += p, T_r[m' + j] = max(T_r[m' + j] - j, 0) for j >= 1. T_c[level(m)] += 1 and
  T_c[level(m')] += 1 in both cases.
- ``reference: code`` (mastlab-T3S/AdaptiveFL @488b514, utils/HeteroClients.py): accepted means
  Gamma >= size(sent); T_r[L_1] gets its extra p (the code's literal 3) only when the accepted model is
  L_1 (other accepts add nothing extra); R_s of a level divides by its own number of models (so the
  large level is T_r[L_1] / sum, not / (p x sum)); a device whose Gamma is below size(sent) trains the
  largest pool model with size <= Gamma (nested in the sent one or not), and below the smallest still model 0, which the table update
  treats as pruned (even when model 0 was sent). The simulator enforces memory, so that last case
  fails as ``oom``; the code variant still updates its tables from it as the code would (m' = model 0).
  In both references clients are drawn among the selectable devices (the code draws among all clients
  and would crash on an all-zero reward column; here that column falls back to uniform).
- Local training: plain CE. Aggregation (Algorithm 2): prefix regions weighted by client data size,
  untouched entries keep their values. Evaluation: every pool model (acc_S3 ... acc_L1) and ``full``;
  ``acc_avg`` is the mean over the level heads S_1, M_1, L_1 (Table 2's "avg"), or over the whole pool
  with ``avg_over: pool``. Per-round counts of models kept whole / pruned / refused are kept in
  ``AdaptiveFL.history`` (not in rounds.csv: the engine has no hook for strategy columns; the
  engine's comm_waste / comm_waste_cum already measure the waste from the sent and trained specs).
- ``server.mode: semi_async`` (not in the paper): a late update counts with its staleness weight times its data
  size. Its trained model is a pool model, whose shape the pool fixes at set-up, cut (on the device, as above) from
  the weights its device downloaded in its own round; it lands on its own prefix region of the current global
  model. Its outcome reaches ``observe`` in its own round as ``deadline`` (as for every method), which leaves the RL
  tables alone: they never learn that the model it trained fitted, and its device's T_c and T_r stay as if it had
  failed for a reason that tells nothing about fit.
- ``server.mode: async`` (not in the paper; ``sim/buffered_async.py``, FedBuff's buffered form): each wave's
  devices and models come from this ``select`` with the free slots as its ``k``; ``server.buffer_size`` updates make
  a version, a stale one moved onto the current model by its staleness-weighted delta before this aggregation; the
  RL tables learn, at each version, from every task that ended since the last (``observe``), and ``history`` gets
  one entry per version.
- ``hierarchy:`` (not in the paper): each gateway is Algorithm 1's server for the devices behind it, and each gateway
  round one of its rounds (numbered cloud round x k2 + j): it draws ``clients_per_round`` models and clients among
  its own selectable devices (P(m, c) normalised over them), updates the tables from its round's outcomes
  (``observe``) and aggregates into its copy of the global model; the cloud averages the copies. The tables are
  the strategy's, one for the fleet, but T_c and T_r hold a row per client (Algorithm 1 lines 1-2) and a gateway
  reads and writes only its own devices' rows, so the one table is every gateway's own, and learning from each
  gateway round as it ends (never deferred to the cloud round) is the flat server's learning after each round.
  Algorithm 1 counts no rounds (T only bounds its loop: no decay, no schedule; the code's lr x 0.998^round is
  ``local.lr_schedule``, the engine's, by the task's round key), so k2 changes nothing else here. ``history`` gets
  one entry per gateway round of each gateway, in the order they close on the simulated clock.
- Baselines (Sec. 4.2): All-Large "trained the L_1 model with all clients under the classic FedAvg",
  memory ignored: ``fedavg`` with ``memory: ignore`` (every device trains the full model, no task fails
  for memory: an upper bound). ``fedavg``'s default ``memory: exclude`` is the resource-respecting
  variant (only devices whose declared memory holds L_1 take part: exclusive learning). Decoupled,
  HeteroFL and ScaleFL are their own methods.
- Resources (paper Sec. 4.1 / code): Gaussian clipped, VGG 8+-1 [6, 11], 16+-1 [13, 19], 35+-2 [25, 40]
  M params. The fleet's model is r = r_M - |u|, u ~ N(0, sigma^2) (percent of the full model): the
  scenarios map each class to r_M = mean + sigma and the paper's sigma, in percent of 33.65 M (weak
  26.75 / 8.83, medium 50.53 / 8.83, strong 109.97 / 35.33 for r_M / sigma^2; see
  scenarios/adaptivefl_cifar10_vgg16.yaml). r_M = mean + sigma keeps every class able to train its
  level's largest model sometimes (S1 46 % vs the paper's 35 %, M1 15 % vs 21 %, L1 91 % vs 75 %);
  r_M = mean + sigma sqrt(2/pi) (same mean) would never let a medium device fit M1.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from iotfl_sim.algorithms.base import (
    Assignment,
    DeviceState,
    EvalTarget,
    FleetView,
    GlobalModel,
    LocalObjective,
    Outcome,
    Strategy,
    Update,
)
from iotfl_sim.algorithms.common import contributions, refuse_zero_widths
from iotfl_sim.fl.aggregate import aggregate_nested
from iotfl_sim.fl.models.families import LAYER_GROUPS, start_layer_rates
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec, is_nested, truncation
from iotfl_sim.scenario.algorithms import AdaptiveFLConfig

DEFAULT_START_LAYERS: dict[str, list[int]] = {
    "vgg16": [4, 6, 8],
    "resnet18": [1, 2, 3],
    "conv": [0, 1, 2],
    "mobilenetv2": [3, 4, 5],
    "cnn_small": [0, 1],
    "mlp": [0],
}


def resource_rewards(tr: np.ndarray, members: list[list[int]], p: int, reference: str = "paper") -> np.ndarray:
    """R_s per client (rows of ``tr``, clients x pool models) and level (``members[l]``: pool indices of
    level l). Paper: every level divides by p x row sum; code: by its own number of models x row sum."""
    tr = np.atleast_2d(np.asarray(tr, dtype=np.float64))
    suffix = np.cumsum(tr[:, ::-1], axis=1)[:, ::-1]  # suffix[:, k] = sum_{t >= k} T_r[t]
    total = suffix[:, 0]
    out = np.zeros((tr.shape[0], len(members)))
    for lvl, ks in enumerate(members):
        div = p if reference == "paper" else len(ks)
        with np.errstate(divide="ignore", invalid="ignore"):
            out[:, lvl] = np.where(total > 0, suffix[:, ks].sum(axis=1) / (div * total), 0.0)
    return out


def curiosity_rewards(tc: np.ndarray) -> np.ndarray:
    """R_c = 1 / sqrt(T_c) (MBIE-EB), per client and level."""
    return 1.0 / np.sqrt(np.asarray(tc, dtype=np.float64))


def combined_rewards(rs: np.ndarray, rc: np.ndarray, curiosity: bool, resource: bool, cap: float = 0.5) -> np.ndarray:
    """R = min(cap, R_s) x R_c (+CS); R_s alone (+S); R_c alone (+C); ones (neither)."""
    if curiosity and resource:
        return np.minimum(cap, rs) * rc
    if resource:
        return np.array(rs, dtype=np.float64)
    if curiosity:
        return np.array(rc, dtype=np.float64)
    return np.ones_like(rs, dtype=np.float64)


def selection_probabilities(reward: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """P(m, c) = R(m, c) / sum over the candidate clients (uniform if every reward is 0)."""
    r = np.where(candidates, np.asarray(reward, dtype=np.float64), 0.0)
    total = r.sum()
    if total <= 0:
        r = candidates.astype(np.float64)
        total = r.sum()
    return r / total


def update_tables(
    tc: np.ndarray,
    tr: np.ndarray,
    sent: int,
    back: int | None,
    level_of: list[int],
    p: int,
    reference: str = "paper",
    accepted: bool | None = None,
) -> None:
    """Algorithm 1 lines 12-25 for one client, in place on its rows ``tc`` (levels) and ``tr`` (pool).

    ``back`` None: nothing came back (the device refused). ``accepted`` defaults to ``back == sent``
    (the paper's test); the code variant passes its own (Gamma >= size(sent))."""
    last = len(tr) - 1
    tc[level_of[sent]] += 1
    if back is None:
        for t in range(last + 1):
            tr[t] = max(tr[t] - (t + 1), 0)
        return
    tc[level_of[back]] += 1
    if accepted is None:
        accepted = back == sent
    if accepted:
        tr[sent:] += 1
        if reference == "paper":
            tr[last] += p - 1
        elif sent == last:
            tr[last] += p
        return
    tr[back] += p
    for j, t in enumerate(range(back, last + 1)):
        tr[t] = max(tr[t] - j, 0)


class AdaptiveFL(GlobalModel, Strategy):
    Config = AdaptiveFLConfig
    checkpointed = ("state", "history", "tc", "tr")

    def __init__(self, cfg: AdaptiveFLConfig) -> None:
        super().__init__(cfg)
        self.cfg: AdaptiveFLConfig = cfg

    def setup(self, ctx) -> None:
        self.ctx = ctx
        self.recipe: ModelRecipe = replace(ctx.recipe, global_rate=1.0, scaler=False)
        family = self.recipe.family
        starts = self.cfg.start_layers or DEFAULT_START_LAYERS[family]
        if max(starts) >= LAYER_GROUPS[family]:
            raise ValueError(f"adaptivefl: start_layers {starts} out of range for {family!r}")
        rates = self.cfg.width_rates
        names = ["S", "M", "L"] if len(rates) == 3 else [f"W{i}" for i in range(len(rates))]
        self.p = len(starts)
        self.pool: list[SubmodelSpec] = []
        self.level_of: list[int] = []
        rounding = truncation(self.cfg.reference)
        for lvl, r in enumerate(rates[:-1]):
            for j, start in enumerate(starts):
                label = f"{names[lvl]}{self.p - j}"
                layer_rates = start_layer_rates(family, r, start)
                self.pool.append(SubmodelSpec(rate=r, layer_rates=layer_rates, rounding=rounding, name=label))
                self.level_of.append(lvl)
        if self.cfg.reference == "code":
            refuse_zero_widths(self.recipe, [(s, "algorithm.width_rates") for s in self.pool])
        self.pool.append(SubmodelSpec(1.0, rounding=rounding, name=f"{names[-1]}1"))
        self.level_of.append(len(rates) - 1)
        self.members = [[i for i, x in enumerate(self.level_of) if x == lvl] for lvl in range(len(rates))]
        self.sizes = np.array([ctx.memory_need(self.recipe, s) for s in self.pool], dtype=np.float64)
        shapes = [self.recipe.shapes(s) for s in self.pool]
        # nested[m, j]: pool model j can be cut from pool model m (every tensor a prefix slice of m's)
        self.nested = np.array([[is_nested(outer, inner) for inner in shapes] for outer in shapes])
        if np.any(np.diff(self.sizes) <= 0):
            raise ValueError(f"adaptivefl: pool sizes {self.sizes.tolist()} are not ascending; adjust start_layers")
        self.heads = {self.pool[ks[-1]].name for ks in self.members}  # S1, M1, L1
        self.global_spec = SubmodelSpec(1.0, rounding=rounding, name="full")
        self.state = ctx.initial_state(self.recipe, self.global_spec)
        n = ctx.num_devices
        self.tc = np.ones((n, len(rates)), dtype=np.float64)
        self.tr = np.ones((n, len(self.pool)), dtype=np.float64)
        self.history: list[dict[str, int]] = []  # per round: sent, kept whole, pruned, refused

    def candidate_specs(self) -> list[tuple[ModelRecipe, SubmodelSpec]]:
        return [(self.recipe, s) for s in self.pool]

    def rewards(self) -> np.ndarray:
        """R(level, client) for every client: (clients, levels)."""
        rs = resource_rewards(self.tr, self.members, self.p, self.cfg.reference)
        rc = curiosity_rewards(self.tc)
        return combined_rewards(rs, rc, self.cfg.curiosity, self.cfg.resource, self.cfg.success_cap)

    def select(self, rnd: int, fleet: FleetView, rng: np.random.Generator) -> list[Assignment]:
        cand = fleet.selectable_mask().copy()
        k = min(self.c.clients_per_round, int(cand.sum()))
        last = len(self.pool) - 1
        if self.cfg.selection == "greedy":
            models = np.full(k, last)
        else:
            models = rng.integers(0, len(self.pool), size=k)
        reward = self.rewards() if self.cfg.selection == "rl" else None
        out = []
        for m in models:
            m = int(m)
            if reward is None:
                prob = selection_probabilities(np.ones(len(cand)), cand)
            else:
                prob = selection_probabilities(reward[:, self.level_of[m]], cand)
            c = int(rng.choice(len(cand), p=prob))
            cand[c] = False
            out.append(Assignment(c, self.pool[m], level=self.pool[m].name, extras={"model": m}))
        return out

    def adapt(self, assignment: Assignment, device: DeviceState) -> Assignment | None:
        sent = int(assignment.extras["model"])
        gamma = device.free_memory_bytes
        if self.sizes[sent] <= gamma:
            back, accepted = sent, True
        else:
            fit = self.sizes <= min(gamma, self.sizes[sent])
            if self.cfg.reference == "paper":  # the device prunes what it received: only models nested in it
                fit &= self.nested[sent]
            fit = np.flatnonzero(fit)
            if len(fit):
                back = int(fit[np.argmax(self.sizes[fit])])
            elif self.cfg.reference == "code":
                back = 0
            else:
                return None
            accepted = False
        spec = self.pool[back]
        extras = {**assignment.extras, "model": back, "sent": sent, "accepted": accepted}
        return replace(assignment, spec=spec, level=spec.name, extras=extras)

    def local_objective(self, assignment: Assignment) -> LocalObjective:
        return LocalObjective("ce")

    def aggregate(self, rnd: int, updates: list[Update]) -> None:
        if updates:
            self.state = aggregate_nested(self.state, contributions(updates, self.cfg.weighting))

    def observe(self, rnd: int, outcomes: list[Outcome]) -> None:
        counts = {"sent": len(outcomes), "whole": 0, "pruned": 0, "refused": 0}
        for o in outcomes:
            sent, d = int(o.assignment.extras["model"]), o.assignment.device
            readable = o.status == "completed" or (o.status == "oom" and self.cfg.reference == "code")
            if readable and o.trained is not None:
                back, accepted = int(o.trained.extras["model"]), bool(o.trained.extras["accepted"])
                counts["whole" if accepted else "pruned"] += 1
                update_tables(self.tc[d], self.tr[d], sent, back, self.level_of, self.p, self.cfg.reference, accepted)
            elif o.status == "refused":
                counts["refused"] += 1
                update_tables(self.tc[d], self.tr[d], sent, None, self.level_of, self.p, self.cfg.reference)
        self.history.append(counts)

    def eval_targets(self) -> list[EvalTarget]:
        targets = [
            EvalTarget(
                s.name,
                s,
                self.slice_for(self.state, self.recipe, s),
                self.recipe,
                is_level=self.cfg.avg_over == "pool" or s.name in self.heads,
            )
            for s in self.pool
        ]
        targets.append(EvalTarget("full", self.global_spec, self.state, self.recipe, is_level=False))
        return targets
