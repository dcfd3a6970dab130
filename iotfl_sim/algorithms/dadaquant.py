"""DAdaQuant (Hönig, Zhao, Mullins, ICML 2022, "DAdaQuant: Doubly-adaptive quantization for communication-efficient
Federated Learning"): FedAvg whose client->server updates are Federated-QSGD-quantized at a level that adapts over
time and over clients. FedX compares against it (Section IV-D); no official code is public (reference notes).

What the paper fixes, followed here:

- Federated QSGD (Section 3.3): a client sends its update p_{t+1}^k - p_t (difference coding), quantized with q
  intervals per sign ("splits R>=0 and R<=0 into q intervals each"): Q_q(p / ||p||_2) with unbiased stochastic
  rounding, signs and the norm apart, then 0-run-length and Elias-omega coding. The server adds the weighted
  quantized updates: p_{t+1} = p_t + sum_k w_k Q_{q_k}(p_{t+1}^k - p_t), w_k proportional to |D_k|.
- Time-adaptive level (Section 3.4): q_1 = q_min; the loss estimate G^_t = sum_k w_k F_k(p_t) over the round's
  clients, its moving average G^^_t = psi G^^_{t-1} + (1 - psi) G^_t; when G^^_t >= G^^_{t+1-phi} (no decrease over
  a window of phi rounds) the level doubles, q <- min(2 q, q_max), and then stays fixed for at least phi rounds.
  Defaults as in its experiments: psi = 0.9, phi = 1/10 of the rounds, q_min = 1.
- Client-adaptive levels (Section 3.5, Theorem 1): for the round's level q and client weights w_i,
  q_i = max(1, round(sqrt(a / b) w_i^(2/3))) with a = sum_j w_j^(2/3), b = sum_j w_j^2 / q^2: the least
  sum_i q_i for which E[Var] = t^2/6 sum_i w_i^2 / q_i^2 equals static quantization's at q (scale-free in w).
- ``adapt``: both (DAdaQuant), time (DAdaQuant_time), clients (DAdaQuant_clients) or none (Federated QSGD at
  q_max, the static baseline). Downloads are float32 (the paper compresses the uplink only).

Choices the paper leaves open, made here:

- Normalisation: one L2 norm per parameter tensor (the paper's "vector p" is not said to be the whole model or a
  layer; its implementation trains with Flower, whose parameters are per-tensor arrays). Wire format per tensor:
  the norm as 32 bits, then for each non-zero level the zero run before it as Elias-omega(run + 1), a sign bit
  and Elias-omega(|level|), then the trailing zero run (``fl.quantize.encoded_bits`` with one group per tensor).
  The stochastic rounding is ``fl.quantize.stochastic_levels`` with s = q intervals for any natural q (the wire's
  ``quantize_levels`` takes bits, s = 2^bits, and q_i from Theorem 1 need not be a power of two).
- Weights w_k: |D_k| normalised over the round's selected clients for the levels (Theorem 1 does not depend on
  the scale of w) and over the updates that arrived for the aggregation (FedAvg's data weighting).
- F_k(p_t), the client's loss of the received model on its own data (the paper's "additional evaluation epoch"),
  is computed where the simulator keeps the client's data, after training, with static-BN calibration on that
  data (``fl.evaluate``); the device-side time and energy of that pass are not priced (the paper measures about
  1 % of training). G^^_1 = G^_1 (the paper does not say how the average starts); a round in which no update
  arrives leaves the schedule as it was. System-only runs have no losses: the level stays at q_min.
- ``hierarchy:`` (not in the paper): the cloud is DAdaQuant's server. Each gateway averages its devices' updates
  (decoded against the model it sent them, by a wire of its own) and keeps their loss terms |D_k| F_k(p) in its
  tier (``pooled``); at each cloud round the cloud averages the gateways' models weighted by the samples each
  aggregated (HierFAVG's), fine-tunes, and takes one schedule step on G^_t pooled over every update of the cloud
  round, so phi counts cloud rounds (a tenth of ``rounds``) and every gateway's clients use the cloud's level. Uploads
  are priced from the cloud's last update. One gateway with k1 = k2 = 1 is flat DAdaQuant.
- round() is half-up. The level a client uses is decided at selection, from the schedule after the last round.
- Upload size: the engine prices a message's air time at dispatch, before the update exists; the estimate is the
  encoded size of the last aggregated global update (the initial weights in round 1) at the client's level, and
  the real encoded size replaces it in ``bytes_up`` after training (as ``algorithms.wire`` does). System-only
  runs price (1 + ceil(log2(q + 1))) bits per value plus a 32-bit norm per tensor.
- Local training: plain FedAvg SGD (the paper runs FedProx with mu = 1 on Synthetic / FEMNIST / Sent140 and
  mu = 0 on CelebA; the proximal term is not part of DAdaQuant). The simulated system heterogeneity of its
  experiments (fewer epochs on 90 % of the clients) is the fleet's business here.

``server.mode: semi_async`` (not in the paper): a late update counts with its staleness weight times |D_k|. Its
device quantized p^k - p_{t-s}, the difference from what it downloaded in its own round, at the level q_k it was
given then (from that round's schedule and selection), with the draws of its own round; the server decodes it as
p_{t-s} + Q(p^k - p_{t-s}) (``UpdateWire.receive``), the model FedAvg averages. Its upload's air time is the one
priced at its dispatch. The loss estimate G^_t scores the current model p_t on the data of every client whose update
the round aggregates, late ones included, weighted by |D_k| (G^_t estimates the current model's loss; a late client's
data is as good a sample of it). Fine-tuning follows every aggregation, and is charged after every one, a round
aggregated only thanks to late updates included (``Strategy.aggregated``: the engine says so).

``server.mode: async`` (not in the paper), in FedBuff's buffered form (``sim.buffered_async``): the server's step is
the model version. A wave's devices get their levels from the schedule after the last version, Theorem 1 over the
wave's own clients (its ``clients_per_round`` free slots; a one-device wave gets q itself). Each upload is decoded
against the model its device downloaded (``update.base``, captured at dispatch), p_{v-s} + Q(p^k - p_{v-s}), with
the draws of that version, then moved onto the current model by its delta weighted by ``server.staleness``:
p_v + s(staleness) Q(p^k - p_{v-s}); a version averages its ``server.buffer_size`` updates by |D_k|, fine-tunes
(charged once), and takes one schedule step on G^_t over the buffer's clients (the current model's loss on their
data), so phi is a tenth of the run's versions (``rounds`` counts versions).

FedX's comparison runs DAdaQuant "where the server has data, fine-tunes without regularization" and with FedX's two
sub-networks (FedX Section IV-D). The first is an option here: ``proxy_classes`` gives the server those classes
(FedX's disjoint split; the devices get none of them) and ``finetune_epochs`` > 0 fine-tunes the aggregated model
on them after every aggregation (``fl.server_train.fine_tune`` with no L2 pull: FedX's eq. 5 at gamma = 0, the
same draw of ``finetune_samples`` per round, charged as server work ``fine_tune``); the loss estimate and levels
are DAdaQuant's, unchanged. No server pretraining (FedX names only fine-tuning for its baselines). The second is
not: FedX does not say how DAdaQuant's one quantizer is shared by two sub-networks, and a full model keeps it as
its own paper defines it. ``finetune_epochs: 0`` (default) is DAdaQuant as its own paper runs it.

AdaGQ (Liu, He, Cao, INFOCOM 2023; FedX's other quantization baseline) is not implemented, because it cannot be
done faithfully here yet: its rule consumes each client's measured local-training, upload and download times of
the last round and the round's elapsed time (eqs. 12-14), which the engine does not hand to strategies (they see
outcomes, not per-phase durations); every client evaluates the loss of the model after a quantized gradient step
at two levels (s_k and s_k / 2) each round, a gradient-upload protocol rather than FedAvg's local epochs; and the
per-client bits of eq. 13 are fixed relative to an anchor client under the condition that the mean level equals
s_{k+1}, without saying which client anchors or how the pair is solved and rounded. Adding it needs those
durations exposed to strategies and a stated solution of eq. 13.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from iotfl_sim.algorithms.base import (
    Assignment,
    EvalTarget,
    Exclusive,
    FleetView,
    GlobalModel,
    Outcome,
    Strategy,
    Tier,
    TrainWork,
    Update,
    Wire,
    average_tiers,
    select_uniform,
)
from iotfl_sim.algorithms.common import contributions
from iotfl_sim.algorithms.device_test import DeviceTest
from iotfl_sim.fl.aggregate import aggregate_nested
from iotfl_sim.fl.evaluate import evaluate
from iotfl_sim.fl.quantize import NORM_BITS, encoded_bits, stochastic_levels
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.server_train import fine_tune
from iotfl_sim.fl.submodel import SubmodelSpec
from iotfl_sim.scenario.algorithms import DAdaQuantConfig
from iotfl_sim.seeding import int_seed

State = dict[str, torch.Tensor]


def client_levels(weights: np.ndarray, q: float) -> np.ndarray:
    """Theorem 1, rounded: q_i = max(1, round(sqrt(a / b) w_i^(2/3))), a = sum w^(2/3), b = sum w^2 / q^2."""
    w = np.asarray(weights, dtype=np.float64)
    a = float(np.sum(w ** (2.0 / 3.0)))
    b = float(np.sum(w**2)) / float(q) ** 2
    return np.maximum(1, np.floor(math.sqrt(a / b) * w ** (2.0 / 3.0) + 0.5)).astype(np.int64)


@dataclass
class LevelSchedule:
    """DAdaQuant's time-adaptive level: ``q`` is the level of the next round; ``observe`` takes a round's loss
    estimate G^_t. ``averages`` holds G^^_1 .. G^^_t, ``held`` the rounds the current level has been used."""

    q_min: int
    q_max: int
    psi: float
    phi: int
    q: int = 0
    held: int = 0
    averages: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.q == 0:
            self.q = min(self.q_min, self.q_max)

    def observe(self, loss: float) -> int:
        """Fold in G^_t; double the level when G^^_t >= G^^_{t+1-phi} after at least phi rounds at it."""
        avg = loss if not self.averages else self.psi * self.averages[-1] + (1.0 - self.psi) * loss
        self.averages.append(float(avg))
        self.held += 1
        if self.held >= self.phi and self.q < self.q_max and avg >= self.averages[-self.phi]:
            self.q = min(2 * self.q, self.q_max)
            self.held = 0
        return self.q


def quantize_update(delta: State, q: int, generator: torch.Generator) -> tuple[State, int]:
    """(Q_q(delta), encoded bits): per floating tensor v, levels l in {0..q} by unbiased stochastic rounding of
    q |v_i| / ||v||_2, value ||v||_2 sgn(v_i) l_i / q; other tensors raw."""
    out: State = {}
    nbits = 0
    for k, t in delta.items():
        if not torch.is_floating_point(t):
            out[k] = t.clone()
            nbits += t.numel() * t.element_size() * 8
            continue
        norm, signed = stochastic_levels(t, q, generator, None)
        out[k] = (signed.to(torch.float32) * (norm / q)).reshape(t.shape).to(t.dtype)
        nbits += encoded_bits(signed, max(signed.numel(), 1))
    return out, nbits


class DAdaQuant(Exclusive, GlobalModel, Strategy):
    Config = DAdaQuantConfig
    checkpointed = ("state", "last_update", "schedule", "wire")
    tier_state = ("state", "pooled")  # under a hierarchy a gateway's model and its devices' loss terms

    def __init__(self, cfg: DAdaQuantConfig) -> None:
        super().__init__(cfg)
        self.cfg: DAdaQuantConfig = cfg

    def setup(self, ctx) -> None:
        self.ctx = ctx
        cfg = self.cfg
        self.recipe = self.recipe_at(1.0)
        self.spec = SubmodelSpec(rate=1.0, name="full")
        self.state = ctx.initial_state(self.recipe, self.spec)
        self.eligible = self.fits(self.recipe, self.spec, ctx.declared_free_memory)
        server_rounds = ctx.rounds // ctx.gateway_rounds  # the cloud's under a hierarchy, where the level is set
        phi = cfg.phi if cfg.phi is not None else max(1, math.floor(server_rounds / 10 + 0.5))  # a tenth, half-up
        q_min = cfg.q_min if cfg.adapt in ("both", "time") else cfg.q_max
        self.schedule = LevelSchedule(q_min, cfg.q_max, cfg.psi, phi)
        self.last_update: State = {}  # p_t - p_{t-1}: prices the next uploads
        self.pooled = (0.0, 0.0)  # under a hierarchy, a gateway's sum_k |D_k| F_k(p) and sum_k |D_k| (its tier)
        self.server_x = self.server_y = None
        if cfg.finetune_epochs > 0 and ctx.data is not None and ctx.proxy_indices is not None:
            self.server_x, self.server_y = ctx.data.x_train[ctx.proxy_indices], ctx.data.y_train[ctx.proxy_indices]
        self.wire = UpdateWire(ctx.seed)
        self.device_test = None
        if cfg.utility_test == "devices" and ctx.data is not None and ctx.parts is not None:
            self.device_test = DeviceTest(ctx, cfg.proxy_classes)

    def candidate_specs(self) -> list[tuple[ModelRecipe, SubmodelSpec]]:
        return [(self.recipe, self.spec)]

    def select(self, rnd: int, fleet: FleetView, rng: np.random.Generator) -> list[Assignment]:
        chosen = select_uniform(fleet, self.c.clients_per_round, rng, self.eligible)
        q = self.schedule.q
        if self.cfg.adapt in ("both", "clients") and len(chosen):
            levels = client_levels(self.c.samples_per_device[chosen].astype(np.float64), q)
        else:
            levels = np.full(len(chosen), q, dtype=np.int64)
        return [
            Assignment(int(d), self.spec, level="full", extras={"q": int(lv)}) for d, lv in zip(chosen, levels, strict=True)
        ]

    def aggregate(self, rnd: int, updates: list[Update]) -> None:
        if not updates:
            return
        total, weight = self._loss_terms(updates)
        self._step(rnd, aggregate_nested(self.state, contributions(updates, "data")), total, weight)

    def _step(self, rnd: int, new: State, total: float, weight: float) -> None:
        """The server's step from the average ``new``: fine-tuning, the update that prices the next uploads, and the
        level schedule fed G^_t = total / weight (none without data)."""
        if self.server_x is not None and len(self.server_x) > 1:
            cfg = self.cfg
            new = fine_tune(
                self.recipe, self.spec, new, self.server_x, self.server_y, samples=cfg.finetune_samples,
                epochs=cfg.finetune_epochs, batch_size=cfg.server_batch_size, lr=cfg.finetune_lr, gamma=0.0,
                seed=self.c.seed, tag="dadaquant", rnd=rnd,
            )  # fmt: skip
        self.last_update = {k: new[k] - self.state[k] for k in new}
        self.state = new
        if weight > 0:
            self.schedule.observe(total / weight)

    def gateway_aggregate(self, rnd: int, updates: list[Update]) -> None:
        """A gateway averages and adds its devices' loss terms to its tier's ``pooled``; the cloud does the rest."""
        total, weight = self._loss_terms(updates)
        self.pooled = (self.pooled[0] + total, self.pooled[1] + weight)
        self.state = aggregate_nested(self.state, contributions(updates, "data"))

    def combine(self, rnd: int, tiers: list[Tier]) -> None:
        """The cloud is DAdaQuant's server: the gateways' models averaged by the samples each aggregated, its
        fine-tuning, and one level-schedule step on G^_t pooled over every update of the cloud round."""
        if not tiers:
            return
        self._charge_fine_tune()
        if self.state:
            pooled = [t.values["pooled"] for t in tiers]
            self._step(rnd, average_tiers(self.state, tiers), sum(p[0] for p in pooled), sum(p[1] for p in pooled))

    def observe(self, rnd: int, outcomes: list[Outcome]) -> None:
        """Charge the round's fine-tuning (here, so that system-only runs price it too; a gateway's round: at the
        cloud, by ``combine``)."""
        if self.c.tier == "server" and self.aggregated(outcomes):
            self._charge_fine_tune()

    def _charge_fine_tune(self) -> None:
        cfg, n = self.cfg, self._server_samples()
        if cfg.finetune_epochs == 0 or n < 2:
            return
        k = n if cfg.finetune_samples is None else min(n, cfg.finetune_samples)
        self.c.server_work.charge("fine_tune", TrainWork(self.recipe, self.spec, k, cfg.finetune_epochs, cfg.server_batch_size))

    def _server_samples(self) -> int:
        """The server's samples: its classes' train samples; system-only, their share of the nominal train set
        (classes assumed balanced)."""
        if self.server_x is not None:
            return len(self.server_x)
        if self.c.data is None and self.cfg.proxy_classes:
            return round(int(self.c.samples_per_device.sum()) * len(self.cfg.proxy_classes) / self.c.num_classes)
        return 0

    def _loss_terms(self, updates: list[Update]) -> tuple[float, float]:
        """(sum_k |D_k| F_k(p_t), sum_k |D_k|) over the arrived updates, whose ratio is G^_t; (0, 0) without data."""
        c = self.c
        total, weight = 0.0, 0.0
        if c.data is None or c.parts is None or not self.state:
            return total, weight
        for u in updates:
            idx = torch.as_tensor(c.parts[u.assignment.device])
            x, y = c.data.x_train[idx], c.data.y_train[idx]
            _, f_k = evaluate(self.recipe, self.spec, self.state, x, x, y, self.cfg.loss_batch_size)
            total += u.num_samples * f_k
            weight += u.num_samples
        return total, weight

    def eval_targets(self) -> list[EvalTarget]:
        return [EvalTarget("full", self.spec, self.state, self.recipe)]

    def eval_labels(self) -> list[str]:
        return [DeviceTest.LABEL] if self.cfg.utility_test == "devices" else []

    def eval_figures(self) -> dict[str, float]:
        """acc_devices (``utility_test: devices``): FedX's utility for this one model, so that FedX's comparison
        scores both on the same per-device test data."""
        if self.device_test is None or not self.state:
            return {}
        return self.device_test.figures(self.recipe, [(self.spec, self.state)], np.where(self.eligible, 0, -1))


class UpdateWire(Wire):
    """DAdaQuant's messages: float32 downloads; each upload is the client's update quantized at its level q
    (``assignment.extras["q"]``), priced at dispatch from the last global update (the real encoded size
    replaces the estimate after training)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.base: State = {}  # p_t, the global state this round's updates are taken against
        # device -> its upload's bytes priced at dispatch, kept until its next dispatch (a late upload is a later round's)
        self.estimates: dict[int, float] = {}

    def dispatch(self, rnd: int, assignments: list[Assignment], strategy: Strategy) -> None:
        """Price each upload at its client's level (the real encoded size replaces it after training)."""
        assert isinstance(strategy, DAdaQuant)
        self.base = strategy.state
        ref = strategy.last_update or strategy.state
        for a in assignments:
            q = int(a.extras["q"])
            if ref:
                gen = torch.Generator().manual_seed(int_seed(self.seed, "dadaquant_price", rnd, a.device))
                self.estimates[a.device] = -(-quantize_update(ref, q, gen)[1] // 8)
            else:  # system-only
                recipe, spec = strategy.recipe, strategy.spec
                tensors, params = len(recipe.shapes(spec)), recipe.cost(spec).params
                self.estimates[a.device] = (params * (1 + math.ceil(math.log2(q + 1))) + NORM_BITS * tensors) / 8.0

    def message_bytes(self, assignment: Assignment, up: bool) -> float | None:
        nbytes = self.estimates.get(assignment.device) if up else None
        return None if nbytes is None else float(nbytes)

    def receive(self, rnd: int, update: Update) -> float | None:
        """Quantize the client's update p_{t+1}^k - p_t at its level; the update becomes p_t + Q(delta). p_t is
        what the device downloaded: this round's global state, or a late update's own round's (``update.base``);
        the quantizer's draws come from the stream of the round the task was dispatched in."""
        q = int(update.assignment.extras["q"])
        base = self.base if update.base is None else update.base
        delta = {k: update.state[k] - base[k] for k in update.state}
        own = rnd - update.staleness
        gen = torch.Generator().manual_seed(int_seed(self.seed, "dadaquant_up", own, update.assignment.device))
        qd, nbits = quantize_update(delta, q, gen)
        update.state = {k: base[k] + qd[k] for k in qd}
        return float(-(-nbits // 8))
