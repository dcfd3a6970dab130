"""FedX (Lai, Jiang et al., "Adaptive Model Decomposition and Quantization for IoT Federated Learning").

No public code exists; this follows the paper's Section III and IV. Choices it leaves open:

- Sub-networks: FedX's three (Section IV-C): ``ofa_mbv3`` small (d2, e3), medium (d3, e4), large (d4, e6),
  ``harwild`` 32 / 64 / 128 channels (``fl.models.fedx``); any other family gets width rates 0.25 / 0.5 / 1.
  The global model is the large one; every sub-network is a prefix of it (nested, Fig. 1).
- Assignment (done once, Alg. 1 line 6, after pretraining), ``assign``:
  ``shuffle`` (default): ``mix`` gives the share of devices per sub-network and devices get them by a seeded
  permutation, ``bits`` per sub-network. This is what the paper's experiments run (Section IV-E: "half of the
  devices use the same small sub-network and half uses the medium one", bits fixed per sub-network, and the
  Fig. 5 sweep of the medium share), so it stays the default; eq. 2 is its system design (Section III-A).
  ``eq2``: the paper's selection (``algorithms.fedx_assign``): first the sub-networks of ``mix`` (Theta; the
  shares are unused) whose predicted training time T(theta_u) is at most mu_u = ``time_threshold_s``, then the
  brute-force search over (theta_u, q in [1, ``max_bits``]) for the least utility drop P(theta, D_S) -
  P(Q(theta_u, q), D_S) on the server's data. Open choices: T is the device's own local round (its samples and
  epochs; the paper writes T(theta_u, D_S), timed on a "backup device" of the same type) predicted from its
  declared profile by the simulator's cost model (``Simulation.predict_train_seconds``: the roofline or
  FLOPs / FLOP/s, without the jitter only the run reveals); mu_u and q_u^max are the same for every device
  (profiles declare no processor bit width; the paper's examples: 10 s per local round, 16 bits); a sub-network
  whose training memory the device does not declare is also dropped (the paper's "resource capabilities");
  P is top-1 accuracy after static-BN calibration on the server's data, Q one seeded QSGD draw per
  (sub-network, q) at the wire's normalisation; the drops are measured once (every device of a round shares
  them) and charged as server work ``assign``; ties go to the larger sub-network, then to fewer bits; the
  paper's early termination "when the utility drops below an acceptable level" is ``drop_tolerance`` (first
  pair within it, larger sub-networks and fewer bits visited first; none: eq. 2's exact argmin); a device with
  no feasible sub-network is never selected (none in the fleet: an error naming ``time_threshold_s``). The
  download and upload of a device use its q_u. System-only runs cannot score, so a device takes its largest
  feasible sub-network at ``max_bits`` (the argmin when drops fall with size and bits).
  In both modes a device whose declared memory cannot hold its sub-network is never selected.
- Bits (``shuffle``): ``bits`` per sub-network (smaller sub-networks more bits), used for download and upload. QSGD with
  s = 2^q intervals, signs and norms apart, Elias-omega / zero-run encoded (``fl.quantize``, which states the
  wire format); bytes on the wire are the real encoded lengths (``algorithms.wire`` explains how the upload
  is priced at dispatch and booked at its real length after training).
- QSGD normalisation (``qsgd_bucket``): null by default, each parameter tensor by its own L2 norm (the paper's
  Q(theta / ||theta||_2), read per tensor: one float32 norm per tensor, no padding), so that 8-11 bits leave a
  real quantization error and the size-vs-bits trade-off of Figs. 4-5 can show (``fl.quantize`` gives the
  error energies of both modes). An int gives QSGD's buckets of that many values. FedX has no official code
  (``shared/reference/official_code_notes.md``), so there is no ``reference: code`` mode; the notes name
  bucketing as an option, and it stays one.
- Devices train the quantized sub-network in full precision with plain cross-entropy (eq. 3); the server
  quantizes each device's download (charged as ``quantize``); uploads are quantized at the same bits and
  dequantized before aggregation.
- Aggregation (eq. 4): every entry averaged over the devices whose sub-network holds it (unweighted counts,
  the mask H_M); entries nobody holds keep their value.
- ``server.mode: semi_async`` (not in the paper): a late update's count is its staleness weight. Its download was
  quantized in its own round (the weights its device trained from) and its upload comes back at its device's bits,
  quantized with the draws of its own round (``algorithms.wire``) and decoded on receipt like any other: QSGD
  codes the weights themselves, not a difference, so decoding does not depend on the current model. The
  sub-network assignment is made once; the fine-tuning follows every aggregation, late updates included, and is
  charged from ``observe`` after every one: ``Strategy.aggregated`` gives the engine's answer, so a round aggregated
  only because late updates made up ``min_participants`` is charged too.
- ``server.mode: async`` (not in the paper), in FedBuff's buffered form (``sim.buffered_async``): each wave's devices
  get their fixed sub-network and bits, and their downloads are quantized at dispatch (the weights a device trains
  from, captured then); an upload is decoded at its device's bits, with the draws of the version it downloaded, to
  the weights it codes, and a stale one is moved onto the current model by its delta from that quantized download
  weighted by ``server.staleness``. A version aggregates its ``server.buffer_size`` updates by eq. 4 (a count per
  entry), then fine-tunes (eq. 5) once, charged once: the server's step is the version, as it is the round.
- ``hierarchy:`` (not in the paper): each gateway aggregates its devices' updates by eq. 4 and quantizes its
  devices' messages with a wire of its own; the server's data, its fine-tuning (eq. 5, charged there) and the
  one-time pretraining and assignment are the cloud's: at each cloud round the cloud averages the gateways' models
  weighted by the samples each aggregated (HierFAVG's), then fine-tunes. One gateway with k1 = k2 = 1 is flat FedX.
- Server data: ``proxy_classes`` (the paper's disjoint class split) or a random ``proxy_fraction``. One-time
  pretraining (Alg. 1 line 5) trains the sub-networks of the mix and the global model jointly (one CE per
  sub-network per batch on shared weights, as CompOFA trains its nested sub-networks), ``pretrain_epochs`` of SGD.
- Fine-tuning (eq. 5) of the aggregated global model theta_agg: ``finetune_epochs`` of SGD (lr lambda, batch 32)
  on ``finetune_samples`` (750) of the server's samples, a fresh seeded draw each round (Table IV times the
  fine-tuning on a fixed sample size; all of them when null) with loss CE + (gamma / 2) ||theta - theta_agg||^2. The paper writes gamma ||.||_2 in eq. 5
  but its convergence analysis steps by lambda gamma (theta - G), the gradient of the squared form used here.
- Server work on the simulated clock: ``pretrain`` (once), ``assign`` (once, eq2: two forward passes over the
  server's data per scored model and a QSGD pass per quantized sub-network), ``quantize`` (per download), ``aggregate`` (one
  FLOP per value per contribution, a stated assumption), ``fine_tune`` (3 x forward FLOPs per sample).
- Quantized FedAvg-S/M/L (baselines): ``server_data: false`` and a one-sub-network mix: no pretraining, no
  fine-tuning, quantization still on the server. The clients keep the same data (the server's classes then
  reach nobody).
- Evaluation: each sub-network of the mix on the whole test set (``acc_<level>``, averaged in ``acc_avg``) and
  the global model; with ``utility_test: devices`` (default) also ``acc_devices``, the paper's utility (Section
  IV-D, fedx.txt:213): the mean over the devices that hold a sub-network of its accuracy on the device's own test
  data (``algorithms.device_test`` says how that data is defined); ``global`` leaves it out.
- DAdaQuant is a method of its own (``algorithms.dadaquant``: one full model; with ``proxy_classes`` and
  ``finetune_epochs`` it gets this module's server data and fine-tuning without regularisation, the setting of
  FedX's comparison); AdaGQ is not implemented (why: that module's docstring).
"""

from __future__ import annotations

import numpy as np

from iotfl_sim.algorithms.base import (
    Assignment,
    EvalTarget,
    FleetView,
    GlobalModel,
    Outcome,
    ServerWork,
    State,
    Strategy,
    Tier,
    TrainWork,
    Update,
    Wire,
    average_tiers,
    fixed_level_specs,
    select_uniform,
)
from iotfl_sim.algorithms.common import contributions
from iotfl_sim.algorithms.device_test import DeviceTest
from iotfl_sim.algorithms.fedx_assign import search, search_work, utility_drops
from iotfl_sim.algorithms.wire import QuantizedWire
from iotfl_sim.fl.aggregate import aggregate_nested
from iotfl_sim.fl.models.fedx import FEDX_FAMILIES, level_specs
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.server_train import fine_tune, nested_sgd
from iotfl_sim.fl.submodel import SubmodelSpec
from iotfl_sim.scenario.algorithms import FedXConfig
from iotfl_sim.seeding import int_seed, stream

LEVELS = ("small", "medium", "large")
GENERIC_RATES = {"small": 0.25, "medium": 0.5, "large": 1.0}


def fedx_levels(family: str) -> dict[str, SubmodelSpec]:
    if family in FEDX_FAMILIES:
        return level_specs(family)
    return {k: SubmodelSpec(rate=r, name=k) for k, r in GENERIC_RATES.items()}


def assign_by_share(num_devices: int, names: list[str], shares: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Index into ``names`` per device: floor(share x n) devices each (leftovers to the first), randomly placed."""
    counts = np.floor(shares / shares.sum() * num_devices + 1e-9).astype(int)
    counts[0] += num_devices - counts.sum()
    levels = np.repeat(np.arange(len(names)), counts)
    return levels[rng.permutation(num_devices)]


class FedX(GlobalModel, Strategy):
    Config = FedXConfig
    checkpointed = ("state", "wire")

    def __init__(self, cfg: FedXConfig) -> None:
        super().__init__(cfg)
        self.cfg: FedXConfig = cfg

    def setup(self, ctx) -> None:
        self.ctx = ctx
        cfg = self.cfg
        self.recipe = self.recipe_at(1.0)
        self.specs = fedx_levels(self.recipe.family)
        self.global_spec = self.specs["large"]
        self.levels = [x for x in LEVELS if cfg.mix.get(x, 0) > 0]
        need = np.array([self.c.memory_need(self.recipe, self.specs[x]) for x in self.levels])
        self.state = ctx.initial_state(self.recipe, self.global_spec)
        self.wire = FedXWire(ctx.seed, ctx.server_work, cfg.qsgd_bucket)
        self.server_x = self.server_y = None
        if ctx.data is not None and ctx.proxy_indices is not None and cfg.server_data:
            idx = ctx.proxy_indices
            self.server_x, self.server_y = ctx.data.x_train[idx], ctx.data.y_train[idx]
        self.device_test = None
        if cfg.utility_test == "devices" and ctx.data is not None and ctx.parts is not None:
            self.device_test = DeviceTest(ctx, cfg.proxy_classes)
        if self._server_samples() > 1:
            self._pretrain(self._server_samples())
        if cfg.assign == "eq2":
            self.level_of, self.bits_of = self._assign_eq2(need)
            self.eligible = self.level_of >= 0
        else:
            shares = np.array([cfg.mix[x] for x in self.levels], dtype=float)
            self.level_of = assign_by_share(ctx.num_devices, self.levels, shares, stream(ctx.seed, "fedx_assign"))
            self.bits_of = np.array([cfg.bits.get(x, 32) for x in self.levels], dtype=np.int64)[self.level_of]
            self.eligible = ctx.declared_free_memory >= need[self.level_of]

    def _assign_eq2(self, need: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Eq. 2 (Alg. 1 line 6, once, after pretraining): feasibility by predicted time and declared memory,
        then the search over (sub-network, q) on the server's data (``algorithms.fedx_assign``)."""
        cfg, ctx = self.cfg, self.c
        if ctx.predict_train_seconds is None:
            raise ValueError("fedx: assign: eq2 needs the simulator's predicted training times (ctx.predict_train_seconds)")
        specs = [self.specs[x] for x in self.levels]
        times = np.stack([np.asarray(ctx.predict_train_seconds(self.recipe, s), dtype=np.float64) for s in specs], 1)
        mu = np.inf if cfg.time_threshold_s is None else cfg.time_threshold_s
        feasible = (times <= mu) & (ctx.declared_free_memory[:, None] >= need[None, :])
        if not feasible.any():
            raise ValueError(
                f"fedx: assign: eq2: no device trains any of {self.levels} within time_threshold_s="
                f"{cfg.time_threshold_s} s and its declared memory (fastest predicted: {times.min():.3g} s); raise "
                "algorithm.time_threshold_s or use assign: shuffle"
            )
        if self.server_x is not None and self.state:
            drops = utility_drops(
                self.recipe, specs, self.global_spec, self.state, self.server_x, self.server_y, max_bits=cfg.max_bits,
                bucket=cfg.qsgd_bucket, seed=ctx.seed, batch_size=cfg.server_batch_size,
            )  # fmt: skip
        else:  # system-only: nothing to score; drops that fall with size and bits, the search priced as if run
            m = len(specs)
            drops = (np.arange(m, 0, -1)[:, None] * 1.0 + 1.0 / np.arange(1, cfg.max_bits + 1)[None, :]) / (m + 1)
        n = self._server_samples()
        for work in search_work(self.recipe, specs, self.global_spec, n, max_bits=cfg.max_bits, batch_size=cfg.server_batch_size):
            ctx.server_work.charge("assign", work)
        self.utility_drop = drops  # kept for inspection (rows: self.levels, columns: q = 1 .. max_bits)
        return search(drops, feasible, cfg.max_bits, cfg.drop_tolerance)

    def _server_samples(self) -> int:
        if not self.cfg.server_data:
            return 0
        if self.c.data is None:  # system-only: price the server's work on a nominal data set
            return self.cfg.system_only_server_samples
        return 0 if self.c.proxy_indices is None else len(self.c.proxy_indices)

    def _pretrain(self, n: int) -> None:
        cfg = self.cfg
        if cfg.pretrain_epochs == 0:
            return
        specs = [self.specs[x] for x in self.levels if x != "large"] + [self.global_spec]
        for s in specs:  # nested_sgd: one plain-SGD step of every sub-network per batch
            self.c.server_work.charge("pretrain", TrainWork(self.recipe, s, n, cfg.pretrain_epochs, cfg.server_batch_size))
        if self.server_x is None or not self.state:
            return  # system-only: the work is charged, nothing is trained
        self.state, _ = nested_sgd(
            self.recipe, specs, self.state, self.server_x, self.server_y, epochs=cfg.pretrain_epochs,
            batch_size=cfg.server_batch_size, lr=cfg.pretrain_lr, seed=int_seed(self.c.seed, "fedx_pretrain"),
        )  # fmt: skip

    def candidate_specs(self) -> list[tuple[ModelRecipe, SubmodelSpec]]:
        return [(self.recipe, self.specs[x]) for x in self.levels]

    def possible_specs(self) -> np.ndarray:
        return fixed_level_specs(np.where(self.eligible, self.level_of, -1), len(self.levels))

    def select(self, rnd: int, fleet: FleetView, rng: np.random.Generator) -> list[Assignment]:
        chosen = select_uniform(fleet, self.c.clients_per_round, rng, self.eligible)
        out = []
        for d in chosen:
            x = self.levels[int(self.level_of[d])]
            out.append(Assignment(int(d), self.specs[x], level=x, bits=int(self.bits_of[d])))
        return out

    def aggregate(self, rnd: int, updates: list[Update]) -> None:
        if not updates:
            return
        self.gateway_aggregate(rnd, updates)
        if self._fine_tunes() and self.server_x is not None:
            self._fine_tune(rnd)

    def gateway_aggregate(self, rnd: int, updates: list[Update]) -> None:
        """Eq. 4 only: under a hierarchy the server's data and its fine-tuning are the cloud's (``combine``)."""
        self.state = aggregate_nested(self.state, contributions(updates, "count"))

    def combine(self, rnd: int, tiers: list[Tier]) -> None:
        """The cloud: the gateways' models averaged by the samples each aggregated, then eq. 5's fine-tuning."""
        if not tiers:
            return
        self._charge_fine_tune()
        if self.state:
            self.state = average_tiers(self.state, tiers)
            if self._fine_tunes() and self.server_x is not None:
                self._fine_tune(rnd)

    def _fine_tunes(self) -> bool:
        cfg = self.cfg
        return cfg.fine_tune and cfg.finetune_epochs > 0 and self._server_samples() > 1

    def observe(self, rnd: int, outcomes: list[Outcome]) -> None:
        """Charge the round's fine-tuning (here, so that system-only runs price it too; the engine charges the
        aggregation)."""
        if self.c.tier == "server" and self.aggregated(outcomes):  # a gateway's round: combine charges the cloud's
            self._charge_fine_tune()

    def _charge_fine_tune(self) -> None:
        if self._fine_tunes():
            cfg = self.cfg
            pull = cfg.gamma > 0  # eq. 5's regulariser adds its ops to every step
            work = TrainWork(self.recipe, self.global_spec, self._finetune_size(), cfg.finetune_epochs, cfg.server_batch_size, 0.0, pull)
            self.c.server_work.charge("fine_tune", work)

    def _finetune_size(self) -> int:
        n = self._server_samples()
        return n if self.cfg.finetune_samples is None else min(n, self.cfg.finetune_samples)

    def _fine_tune(self, rnd: int) -> None:
        cfg = self.cfg
        assert self.server_x is not None and self.server_y is not None
        self.state = fine_tune(
            self.recipe, self.global_spec, self.state, self.server_x, self.server_y, samples=cfg.finetune_samples,
            epochs=cfg.finetune_epochs, batch_size=cfg.server_batch_size, lr=cfg.finetune_lr, gamma=cfg.gamma,
            seed=self.c.seed, tag="fedx", rnd=rnd,
        )  # fmt: skip

    def eval_targets(self) -> list[EvalTarget]:
        out = [
            EvalTarget(x, self.specs[x], self.slice_for(self.state, self.recipe, self.specs[x]), self.recipe)
            for x in self.levels
        ]
        out.append(EvalTarget("full", self.global_spec, self.state, self.recipe, is_level=False))
        return out


    def eval_labels(self) -> list[str]:
        return [DeviceTest.LABEL] if self.cfg.utility_test == "devices" else []

    def eval_figures(self) -> dict[str, float]:
        """acc_devices: the paper's utility (fedx.txt:213), each device scored with the sub-network it holds."""
        if self.device_test is None or not self.state:
            return {}
        models = [(self.specs[x], self.slice_for(self.state, self.recipe, self.specs[x])) for x in self.levels]
        return self.device_test.figures(self.recipe, models, np.where(self.eligible, self.level_of, -1))


class FedXWire(Wire):
    """Alg. 1 line 10: the server quantizes each device's sub-network at the device's own bits (the
    assignment's), and each upload comes back at the same bits, through one QSGD channel."""

    def __init__(self, seed: int, server_work: ServerWork, bucket: int | None) -> None:
        self.channel = QuantizedWire(seed, server_work, bucket)

    def dispatch(self, rnd: int, assignments: list[Assignment], strategy: Strategy) -> None:
        assert isinstance(strategy, FedX)
        self.channel.sent.clear()
        for a in assignments:
            sub = strategy.slice_for(strategy.state, strategy.recipe, a.spec) if strategy.state else {}  # {}: system-only
            self.channel.dispatch(rnd, a, sub, a.bits, strategy.recipe)

    def payload(self, assignment: Assignment) -> State | None:
        return self.channel.payload(assignment.device)

    def message_bytes(self, assignment: Assignment, up: bool) -> float | None:
        return self.channel.wire_bytes(assignment, up)

    def receive(self, rnd: int, update: Update) -> float | None:
        return self.channel.receive(rnd, update)
