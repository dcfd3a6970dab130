"""Fused multi-client trainer: clients that train the same submodel in a round train as one batched computation.

``FusedExecutor.run(jobs)`` reproduces ``train_local`` (``fl/train.py``) for every job, but jobs that
agree on everything except their weights, data, label set and seed are trained together: their
weights are stacked along a new leading client axis, and one ``torch.func.vmap`` over
``grad_and_value(functional_call(model, ...))`` computes every client's loss and gradients per step
(convolutions become grouped convolutions under vmap). Per client, exactly as ``train_local``:

- shuffling: ``torch.randperm(n, generator=torch.Generator().manual_seed(job.seed))`` once per epoch,
  batches of ``batch_size`` in that order, a final batch of one sample skipped (unless the client has
  a single sample, as in ``train_local``);
- SGD (PyTorch semantics): ``g += weight_decay * p``; momentum buffer = first ``g``, then
  ``buf = momentum * buf + g`` (dampening 0, no Nesterov); ``p -= lr * buf`` (or ``lr * g`` without
  momentum); a fresh optimizer per job;
- clipping (``clip_grad_norm_`` semantics per client): total 2-norm of the per-tensor 2-norms of the
  client's gradients, ``coef = min(1, max_norm / (norm + 1e-6))``;
- its loss average: the mean of its per-step losses, summed as Python floats in step order.

Ragged clients (different sample counts -> different batch counts and a differently sized last
batch) are exact: at every global step the clients still training are split by their batch size, and
each such subgroup runs its own vmapped step on the gathered rows of the stacked weights (normally
one subgroup holding every client; extra subgroups only in the tail). Padding is never used, so
BatchNorm's batch statistics see exactly the client's batch.

Fusable groups (same recipe, spec, epochs, batch_size, lr, momentum, weight_decay, clip_grad_norm and
objective) need: an objective of kind ``ce``, ``masked_ce`` (every job's label_mask set; the mask is
built per client outside vmap and applied with the same ``masked_fill(~mask, 0)``) or ``exit_kd``
(ScaleFL's multi-exit loss, ``objectives.exit_kd_loss`` itself under vmap) without a proximal term
(FedProx's jobs train one by one), at least two jobs, and a
model without buffers (BatchNorm is built with ``track_running_stats=False`` for training, so it has
none and uses batch statistics: plain ``F.batch_norm`` under vmap, no
``replace_all_batch_norm_modules_`` needed) and without random modules (``nn.Dropout``: vgg16's head
has two, whose draws from the global RNG seeded per job cannot be reproduced inside one vmap).
Everything else (``self_kd``, whose teachers are cut from the student's current weights, a group of
one, dropout models, models with buffers) runs through ``train_local`` exactly as ``InlineExecutor``
does, so those results are bitwise equal.

Parameters the loss never reaches (plain CE on an early-exit model reaches only the last exit) get
no ``.grad`` in ``train_local``, so PyTorch's SGD skips them (no weight decay) and clipping ignores
them; the fused path finds them once per (recipe, spec, objective) by one probe backward pass on two
samples and keeps them fixed.

``train_local`` seeds the global RNG with ``seed_torch(job.seed)`` (torch.manual_seed's states); the fused path draws
nothing from it (no module randomness), and after ``run`` the global RNG is left as the inline
executor leaves it for models without module randomness: seeded with the last job's seed.

Fused results equal inline ones within float tolerance, not bitwise: batched (grouped) kernels sum
in a different order, and the fused path trains in NCHW where ``train_local`` trains images in channels_last
(``fl.layout``), which rounds differently again (up to about 2e-4 on a small BatchNorm conv in tests).
Results come back on the CPU whatever ``device`` trains.

On a CPU, fusing pays only for tiny steps: it saves per-step Python and kernel dispatch, but a convolution
under vmap becomes a grouped convolution, which the CPU kernels run 1.4-1.6x slower per FLOP than N plain
ones (``benchmarks/fused_trainer.md``: conv on MNIST at width 0.5 and 1). So on a CPU a group is fused only
when one step's forward FLOPs (per sample x batch size) are at most ``CPU_FUSE_MAX_STEP_FLOPS``; larger ones
train one by one (inline's bits). On CUDA every fusable group is fused, and the run gives the executor a
``host``: worker threads on the host's usable cores (``exec.threads``) that train the jobs not fused and
evaluate, with inline's bits (before, evaluation ran on one host thread: the run pins its torch threads to
``executor.threads``; ``benchmarks/fused_cuda.md``).
``kind: fused`` on a CPU runs in a pool (``exec.pool``), each worker fusing its share of every group, so it uses
every core as the pool does. The per-step losses stay on the device until the group ends: reading one per step
would make the host wait for the GPU at every step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad_and_value, vmap

from iotfl_sim.exec.base import EvalJob, Executor, NumericData, Worker, overlaps
from iotfl_sim.fl.batches import epoch_batches
from iotfl_sim.fl.data.images import Images
from iotfl_sim.fl.objectives import LocalObjective, exit_kd_loss, final_logits
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec
from iotfl_sim.fl.torch_seed import seed_torch
from iotfl_sim.fl.train import TrainJob, TrainResult, draws_global_rng, train_local

FUSED_OBJECTIVES = ("ce", "masked_ce", "exit_kd")
# the measured break-even on one CPU thread (benchmarks/fused_trainer.md, 10 clients): conv on MNIST at width
# 0.125 (13 MFLOP per step) fused in 0.65x the time, cnn_small on digits (48) 0.72x, conv at width 0.25 (52)
# 1.09x, width 0.5 (202) 1.43x, width 1 (800) 1.58x
CPU_FUSE_MAX_STEP_FLOPS = 50e6
Tensors = dict[str, torch.Tensor]


@contextmanager
def full_fp32(device: torch.device) -> Iterator[None]:
    """cuDNN convolutions in full float32 while it lasts: PyTorch lets them use TF32 (10-bit mantissas) by default,
    which is far outside the fused trainer's tolerance against float32 training on a CPU."""
    if device.type != "cuda":
        yield
        return
    before = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32 = before


def group_key(job: TrainJob) -> tuple:
    """Jobs with equal keys may be trained together (everything but weights, data, label set, seed)."""
    return (
        job.recipe,
        job.spec,
        job.epochs,
        job.batch_size,
        job.lr,
        job.momentum,
        job.weight_decay,
        job.clip_grad_norm,
        job.objective,
    )


def batch_schedule(job: TrainJob) -> list[torch.Tensor]:
    """The job's batches (sample indices), in train_local's order, skipped batches left out."""
    gen = torch.Generator().manual_seed(job.seed)
    idx = torch.as_tensor(job.indices, dtype=torch.long)
    batches: list[torch.Tensor] = []
    for _ in range(job.epochs):
        batches.extend(epoch_batches(idx, job.batch_size, gen))
    return batches


def fusable_model(model: nn.Module) -> bool:
    """No buffers (nothing mutated in the forward) and no random modules."""
    if any(True for _ in model.buffers()):
        return False
    return not draws_global_rng(model)


@dataclass
class _Group:
    """The stacked training state of one fused group (client axis first)."""

    jobs: list[TrainJob]
    params: Tensors  # trained parameters
    frozen: Tensors  # parameters the loss never reaches (SGD leaves them untouched)
    bufs: Tensors  # momentum buffers (empty without momentum)
    schedules: list[list[torch.Tensor]]
    masks: torch.Tensor | None  # masked_ce: [clients, classes] bool
    loss_sums: list[float]


class FusedExecutor:
    """Executor that trains same-submodel clients together (see the module docstring)."""

    def __init__(
        self,
        x_train: Images,
        y_train: torch.Tensor,
        device: str | torch.device = "cpu",
        data: NumericData | None = None,
        cpu_max_step_flops: float | None = CPU_FUSE_MAX_STEP_FLOPS,
        host: Executor | None = None,
    ) -> None:
        """``cpu_max_step_flops``: on a CPU, fuse only groups whose step is at most this many forward FLOPs
        (None: fuse every fusable group, as on CUDA). ``host``: the executor that trains the jobs not fused and
        evaluates (on CUDA, worker threads on the host's cores); None: this thread, one job after another, and
        evaluation only with ``data``."""
        self.cpu_max_step_flops = cpu_max_step_flops
        self.x = x_train
        self.y = y_train
        self._host = host
        self._eval = Worker(data, torch.get_num_threads()) if data is not None and host is None else None
        self.device = torch.device(device)
        self._skeletons: dict[tuple[ModelRecipe, SubmodelSpec], nn.Module] = {}
        self._fused: dict[tuple[ModelRecipe, SubmodelSpec], nn.Module] = {}
        self._fusable: dict[tuple[ModelRecipe, SubmodelSpec], bool] = {}
        self._unused: dict[tuple[ModelRecipe, SubmodelSpec, LocalObjective], frozenset[str]] = {}
        self._data_on_device: tuple[torch.Tensor, torch.Tensor] | None = None

    # -- skeletons ---------------------------------------------------------------------------

    def _skeleton(self, recipe: ModelRecipe, spec: SubmodelSpec) -> nn.Module:
        """The CPU skeleton for the inline fallback (as InlineExecutor caches it)."""
        key = (recipe, spec)
        model = self._skeletons.get(key)
        if model is None:
            model = self._skeletons[key] = recipe.build(spec)
        return model

    def _fused_model(self, recipe: ModelRecipe, spec: SubmodelSpec) -> nn.Module:
        """A skeleton on ``device`` used only as the structure for functional_call."""
        key = (recipe, spec)
        model = self._fused.get(key)
        if model is None:
            model = self._fused[key] = recipe.build(spec).to(self.device)
            model.train()
        return model

    def _data(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self._data_on_device is None:
            self._data_on_device = (self.x.to(self.device), self.y.to(self.device))
        return self._data_on_device

    # -- run -----------------------------------------------------------------------------------

    def can_fuse(self, group: list[TrainJob]) -> bool:
        """Whether these jobs (one group_key) train fused; False means train_local per job."""
        first = group[0]
        if len(group) < 2 or first.objective.kind not in FUSED_OBJECTIVES or first.objective.prox_mu > 0:
            return False
        if first.objective.kind == "masked_ce" and any(j.label_mask is None for j in group):
            return False  # train_local raises its own error for these
        if self.device.type == "cpu" and self.cpu_max_step_flops is not None:
            step_flops = first.recipe.cost(first.spec).flops_forward_per_sample * first.batch_size
            if step_flops > self.cpu_max_step_flops:
                return False
        key = (first.recipe, first.spec)
        if key not in self._fusable:  # asked of a model built for the question and dropped (a host trains the rest)
            self._fusable[key] = fusable_model(first.recipe.build(first.spec))
        return self._fusable[key]

    def run(self, jobs: list[TrainJob]) -> list[TrainResult]:
        groups: dict[tuple, list[int]] = {}
        for i, job in enumerate(jobs):
            groups.setdefault(group_key(job), []).append(i)
        results: list[TrainResult | None] = [None] * len(jobs)
        fallback: list[int] = []
        for positions in groups.values():
            group = [jobs[i] for i in positions]
            if self.can_fuse(group):
                for i, res in zip(positions, self._train_group(group), strict=True):
                    results[i] = res
            else:
                fallback.extend(positions)
        # job order, so the last inline job (when it is the last job) leaves the global RNG as inline does
        fallback.sort()
        if self._host is not None and fallback:
            for i, res in zip(fallback, self._host.run([jobs[i] for i in fallback]), strict=True):
                results[i] = res
        elif fallback:
            for i in fallback:
                j = jobs[i]
                results[i] = train_local(self._skeleton(j.recipe, j.spec), j, self.x, self.y, self._skeleton)
        if jobs and (len(jobs) - 1) not in fallback:
            seed_torch(jobs[-1].seed)
        return [r for r in results if r is not None]

    def evaluate(self, jobs: list[EvalJob]) -> list[tuple[float, float]]:
        """Evaluation is not fused: the host executor's, else the inline executor's per-model evaluation."""
        if self._host is not None:
            return self._host.evaluate(jobs)
        if self._eval is None:
            raise RuntimeError("FusedExecutor was built without data= (test set), so it cannot evaluate")
        return self._eval.evaluate(jobs)

    @property
    def overlaps(self) -> bool:
        """Evaluation can run beside the next round's fused training where the host executor's can (on CUDA: the
        GPU trains while the host's threads evaluate)."""
        return self._host is not None and overlaps(self._host)

    @property
    def overlap_pays(self) -> bool:
        """The GPU trains while the host's threads evaluate: no processor shared (``exec.base.overlaps``)."""
        return self.device.type != "cpu"

    def evaluate_later(self, jobs: list[EvalJob]) -> Future:
        if self._host is None:
            raise RuntimeError("FusedExecutor evaluates beside training only with a host executor (see overlaps)")
        return self._host.evaluate_later(jobs)

    def close(self) -> None:
        if self._host is not None:
            self._host.close()
        self._skeletons.clear()
        self._fused.clear()
        self._fusable.clear()
        self._unused.clear()
        self._data_on_device = None

    # -- one fused group -----------------------------------------------------------------------

    def _train_group(self, jobs: list[TrainJob]) -> list[TrainResult]:
        first = jobs[0]
        model = self._fused_model(first.recipe, first.spec)
        names = [n for n, _ in model.named_parameters()]
        unused = self._unused_params(first.recipe, first.spec, first.objective)
        dev = self.device
        stacked = {n: torch.stack([j.weights[n] for j in jobs]).to(dev) for n in names}
        params = {n: v for n, v in stacked.items() if n not in unused}
        frozen = {n: v for n, v in stacked.items() if n in unused}
        masks = None
        if first.objective.kind == "masked_ce":
            classes = first.recipe.num_classes
            masks = torch.zeros(len(jobs), classes, dtype=torch.bool)
            for c, j in enumerate(jobs):
                masks[c, torch.as_tensor(j.label_mask, dtype=torch.long)] = True
            masks = masks.to(dev)
        bufs = {n: torch.zeros_like(p) for n, p in params.items()} if first.momentum != 0 else {}
        g = _Group(jobs, params, frozen, bufs, [batch_schedule(j) for j in jobs], masks, [0.0] * len(jobs))
        step_fn = self._step_fn(model, first.objective, masks is not None)
        x, y = self._data()
        longest = max(len(s) for s in g.schedules)
        losses: list[tuple[list[int], torch.Tensor]] = []  # read once at the end: a read per step waits for a GPU
        with full_fp32(dev):
            for t in range(longest):
                by_size: dict[int, list[int]] = {}
                for c, sched in enumerate(g.schedules):
                    if t < len(sched):
                        by_size.setdefault(len(sched[t]), []).append(c)
                for clients in by_size.values():
                    losses.append((clients, self._step(g, clients, t, step_fn, x, y)))
        for clients, step_losses in losses:  # step order: each client's sum adds its losses as train_local does
            for c, v in zip(clients, step_losses.tolist(), strict=True):
                g.loss_sums[c] += v
        results = []
        for c, j in enumerate(jobs):
            state = {n: (g.params.get(n, g.frozen.get(n)))[c].detach().to("cpu", copy=True) for n in names}
            steps = len(g.schedules[c])
            results.append(TrainResult(j.key, state, len(j.indices), g.loss_sums[c] / max(steps, 1)))
        return results

    def _unused_params(
        self, recipe: ModelRecipe, spec: SubmodelSpec, objective: LocalObjective
    ) -> frozenset[str]:
        """Parameters the loss does not reach (e.g. the exit heads of an early-exit model under plain CE).

        ``train_local`` leaves their ``.grad`` None, so SGD skips them (no weight decay, no momentum)
        and clipping ignores them; found once per submodel by one probe backward pass on two samples.
        """
        key = (recipe, spec, objective)
        found = self._unused.get(key)
        if found is None:
            model = self._fused_model(recipe, spec)
            x, y = self._data()
            named = list(model.named_parameters())
            loss = _loss(objective, model(x[:2]), y[:2], None)
            grads = torch.autograd.grad(loss, [p for _, p in named], allow_unused=True)
            found = self._unused[key] = frozenset(
                n for (n, _), gr in zip(named, grads, strict=True) if gr is None
            )
        return found

    def _step_fn(self, model: nn.Module, objective: LocalObjective, masked: bool) -> Callable:
        def loss_fn(
            params: Tensors, frozen: Tensors, xb: torch.Tensor, yb: torch.Tensor, mask: torch.Tensor | None
        ) -> torch.Tensor:
            return _loss(objective, functional_call(model, {**params, **frozen}, (xb,)), yb, mask)

        return vmap(grad_and_value(loss_fn), in_dims=(0, 0, 0, 0, 0 if masked else None))

    def _step(
        self, g: _Group, clients: list[int], t: int, step_fn: Callable, x: torch.Tensor, y: torch.Tensor
    ) -> torch.Tensor:
        """One SGD step of ``clients`` (their batch ``t``); returns their losses (on ``device``)."""
        job = g.jobs[0]
        whole = len(clients) == len(g.jobs)
        sel = None if whole else torch.as_tensor(clients, dtype=torch.long, device=self.device)
        batch = torch.stack([g.schedules[c][t] for c in clients]).to(self.device)
        params = g.params if sel is None else {n: p[sel] for n, p in g.params.items()}
        frozen = g.frozen if sel is None else {n: p[sel] for n, p in g.frozen.items()}
        mask = None if g.masks is None else (g.masks if sel is None else g.masks[sel])
        with torch.no_grad():
            grads, losses = step_fn(
                {n: p.detach() for n, p in params.items()}, frozen, x[batch], y[batch], mask
            )
            if job.clip_grad_norm is not None:
                _clip_(grads, job.clip_grad_norm)
            for n, p in params.items():
                d = grads[n]
                if job.weight_decay != 0:
                    d = d.add(p, alpha=job.weight_decay)
                if job.momentum != 0:
                    if t == 0:  # every client's first step is global step 0: buffer = first gradient
                        buf = d.clone()
                    else:
                        buf = g.bufs[n] if sel is None else g.bufs[n][sel]
                        buf.mul_(job.momentum).add_(d)
                    d = buf
                    if sel is None:
                        g.bufs[n] = buf
                    else:
                        g.bufs[n][sel] = buf
                p.add_(d, alpha=-job.lr)
                if sel is not None:
                    g.params[n][sel] = p
        return losses


def _loss(
    objective: LocalObjective,
    outputs: torch.Tensor | list[torch.Tensor],
    target: torch.Tensor,
    mask: torch.Tensor | None,
) -> torch.Tensor:
    """objective_loss for the fused kinds, with masked CE's mask given as a boolean row (vmap-able)."""
    if objective.kind == "exit_kd":
        return exit_kd_loss([outputs] if isinstance(outputs, torch.Tensor) else outputs, target, objective)
    logits = final_logits(outputs)
    if mask is not None:
        logits = logits.masked_fill(~mask, 0.0)
    return F.cross_entropy(logits, target)


def _clip_(grads: Tensors, max_norm: float) -> None:
    """clip_grad_norm_ per client: grads carry the client axis first."""
    norms = [torch.linalg.vector_norm(gr.reshape(gr.shape[0], -1), 2.0, dim=1) for gr in grads.values()]
    total = torch.linalg.vector_norm(torch.stack(norms, dim=1), 2.0, dim=1)
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for gr in grads.values():
        gr.mul_(coef.view(-1, *([1] * (gr.dim() - 1))))
