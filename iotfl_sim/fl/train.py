"""Local training of one client: plain data in, a trained state out (no simulator state involved)."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from iotfl_sim.fl.batches import epoch_batches
from iotfl_sim.fl.data.images import Images
from iotfl_sim.fl.layout import batch_layout, model_layout, plain_state
from iotfl_sim.fl.objectives import LocalObjective, objective_loss
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.sgd import PlainSGD
from iotfl_sim.fl.submodel import SubmodelSpec, slice_state
from iotfl_sim.fl.torch_seed import seed_torch

State = dict[str, torch.Tensor]


@dataclass
class TrainJob:
    """Everything needed to train one client, picklable so any executor can run it."""

    key: int  # position in the round's job list
    recipe: ModelRecipe
    spec: SubmodelSpec
    weights: State
    indices: np.ndarray  # the client's train samples
    epochs: int
    batch_size: int
    lr: float
    momentum: float
    weight_decay: float
    clip_grad_norm: float | None
    label_mask: np.ndarray | None  # the client's classes (used by masked CE)
    seed: int
    objective: LocalObjective = field(default_factory=LocalObjective)


@dataclass
class TrainResult:
    key: int
    state: State
    num_samples: int
    loss: float


Skeleton = Callable[[ModelRecipe, SubmodelSpec], nn.Module]

# modules that draw from the global RNG, which train_local seeds per job (seed_torch(job.seed))
RANDOM_MODULES = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)


def draws_global_rng(model: nn.Module) -> bool:
    """Does training ``model`` draw from the process's one global RNG (a random module)? Two such jobs cannot run
    at once in one process and give the bits they give one after another."""
    return any(isinstance(m, RANDOM_MODULES) for m in model.modules())


def _teacher_fn(model: nn.Module, job: TrainJob, skeleton: Skeleton | None):
    """Self-KD teachers: the objective's smaller specs cut from the student's current weights, no gradient."""
    specs = job.objective.teachers
    if not specs:
        return None
    if skeleton is None:
        raise ValueError("a self_kd objective needs a skeleton builder for its teacher models")
    teachers = [(model_layout(skeleton(job.recipe, s)), job.recipe.shapes(s)) for s in specs]

    def run(xb: torch.Tensor) -> list[torch.Tensor]:
        out = []
        with torch.no_grad():
            current = model.state_dict()
            for teacher, shapes in teachers:
                teacher.load_state_dict(slice_state(current, shapes), strict=True)
                teacher.train()
                out.append(teacher(xb))
        return out

    return run


# Skeletons train_local has laid out: ``model_layout`` is a fixed point (a second call changes no stride and no
# storage: tests/test_layout.py checks every family) and ``load_weights`` copies into the tensors in place,
# keeping their strides, so a skeleton reused job after job is laid out at its first job only.
_LAID_OUT: weakref.WeakSet[nn.Module] = weakref.WeakSet()


def _laid_out(model: nn.Module) -> nn.Module:
    if model not in _LAID_OUT:
        model = model_layout(model)
        _LAID_OUT.add(model)
    return model


def load_weights(model: nn.Module, weights: State, *, partial: bool = False) -> dict[str, torch.Tensor]:
    """``model.load_state_dict(weights, strict=not partial)``, the same copies into the same tensors, without its
    walk of every module's hooks (0.11 ms a job against 0.05 on ``cnn_small``: most of a small model's per-job
    set-up). ``partial``: ``weights`` may leave tensors out (they keep their values; evaluation's states carry no
    BatchNorm statistics), never add one. Any difference in names or shapes goes to ``load_state_dict`` for its
    error. Returns the model's state tensors by name (parameters as parameters), which the job reads its trained
    state from."""
    slots = model.state_dict(keep_vars=True)
    names_fit = weights.keys() <= slots.keys() if partial else weights.keys() == slots.keys()
    if not names_fit or any(slots[k].shape != w.shape for k, w in weights.items()):
        result = model.load_state_dict(weights, strict=not partial)  # raises, naming what differs ...
        raise KeyError(f"state has tensors the model lacks: {result.unexpected_keys}")  # ... but a name too many
    with torch.no_grad():
        for k, w in weights.items():
            slots[k].copy_(w)
    return slots


def proximal_term(anchors: list[tuple[torch.Tensor, torch.Tensor]], mu: float) -> torch.Tensor:
    """FedProx's ``(mu / 2) * sum ||w - w_start||^2`` over (parameter, its weights at the task's start)."""
    return (mu / 2.0) * sum(((p - start) ** 2).sum() for p, start in anchors)


def train_local(
    model: nn.Module, job: TrainJob, x: Images, y: torch.Tensor, skeleton: Skeleton | None = None
) -> TrainResult:
    """Train ``model`` (a skeleton for job.spec, reused across jobs) from job.weights.

    A fresh SGD optimizer per job (HeteroFL resets momentum every round), shuffling from the job's
    own seed, gradient clipping when asked; a final batch of one sample is skipped (BatchNorm
    without running statistics cannot normalise a single sample). Images train in ``fl.layout``'s layout.
    """
    seed_torch(job.seed)  # dropout and any other module randomness
    gen = torch.Generator().manual_seed(job.seed)
    model = _laid_out(model)
    slots = load_weights(model, job.weights)
    model.train()
    params = list(model.parameters())
    opt = PlainSGD(params, lr=job.lr, momentum=job.momentum, weight_decay=job.weight_decay)
    idx = torch.as_tensor(job.indices, dtype=torch.long)
    keep = torch.as_tensor(job.label_mask, dtype=torch.long) if job.label_mask is not None else None
    teachers = _teacher_fn(model, job, skeleton)
    anchors = (
        [(p, job.weights[name].detach()) for name, p in model.named_parameters() if p.requires_grad]
        if job.objective.prox_mu > 0
        else []
    )
    total_loss, steps = 0.0, 0
    for _ in range(job.epochs):
        for batch in epoch_batches(idx, job.batch_size, gen):
            xb, yb = batch_layout(x[batch]), y[batch]
            loss = objective_loss(job.objective, model(xb), yb, keep=keep, teachers=teachers, x=xb)
            if anchors:
                loss = loss + proximal_term(anchors, job.objective.prox_mu)
            opt.zero_grad()
            loss.backward()
            if job.clip_grad_norm is not None:
                nn.utils.clip_grad_norm_(params, job.clip_grad_norm)
            opt.step()
            total_loss += float(loss.detach())
            steps += 1
    state = plain_state(slots)
    opt.zero_grad()  # the skeleton waits for its next job: no gradient copy of the model meanwhile
    return TrainResult(job.key, state, len(idx), total_loss / max(steps, 1))
