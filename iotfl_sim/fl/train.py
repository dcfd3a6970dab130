"""Local training of one client: plain data in, a trained state out (no simulator state involved)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec

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
    label_mask: np.ndarray | None  # classes kept in the logits (masked CE), None: plain CE
    seed: int


@dataclass
class TrainResult:
    key: int
    state: State
    num_samples: int
    loss: float


def masked_cross_entropy(logits: torch.Tensor, target: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """HeteroFL's masked CE: logits of classes the client does not hold are filled with 0 (not -inf)."""
    mask = torch.zeros(logits.shape[1], dtype=torch.bool, device=logits.device)
    mask[keep] = True
    return F.cross_entropy(logits.masked_fill(~mask, 0.0), target)


def train_local(model: nn.Module, job: TrainJob, x: torch.Tensor, y: torch.Tensor) -> TrainResult:
    """Train ``model`` (a skeleton for job.spec, reused across jobs) from job.weights.

    A fresh SGD optimizer per job (HeteroFL resets momentum every round), shuffling from the job's
    own seed, gradient clipping when asked; a final batch of one sample is skipped (BatchNorm
    without running statistics cannot normalise a single sample).
    """
    torch.manual_seed(job.seed)  # dropout and any other module randomness
    gen = torch.Generator().manual_seed(job.seed)
    model.load_state_dict(job.weights, strict=True)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=job.lr, momentum=job.momentum, weight_decay=job.weight_decay)
    idx = torch.as_tensor(job.indices, dtype=torch.long)
    keep = torch.as_tensor(job.label_mask, dtype=torch.long) if job.label_mask is not None else None
    total_loss, steps = 0.0, 0
    for _ in range(job.epochs):
        order = idx[torch.randperm(len(idx), generator=gen)]
        for start in range(0, len(order), job.batch_size):
            batch = order[start : start + job.batch_size]
            if len(batch) < 2 and len(order) > 1:
                continue
            xb, yb = x[batch], y[batch]
            logits = model(xb)
            loss = masked_cross_entropy(logits, yb, keep) if keep is not None else F.cross_entropy(logits, yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if job.clip_grad_norm is not None:
                nn.utils.clip_grad_norm_(model.parameters(), job.clip_grad_norm)
            opt.step()
            total_loss += float(loss.detach())
            steps += 1
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return TrainResult(job.key, state, len(idx), total_loss / max(steps, 1))
