"""Local objectives as plain data, and the one function that turns one into a loss.

A training job carries its objective as a small frozen dataclass (never a closure), so any executor
(inline, process pool, Ray) can run any method's jobs. ``objective_loss`` is the only interpreter.

Kinds:

- ``ce``: cross-entropy over all classes.
- ``masked_ce``: HeteroFL's masked CE, logits of classes the client does not hold filled with 0.
- ``self_kd``: FlexFL's self-distillation (eq. 4). The trained model is the student; each model in
  ``teachers`` (smaller pool models, nested inside the trained one) is cut from the student's
  *current* weights, run without gradient, and its softened output is the target:
  ``CE + weight * T^2 * sum_j KL(p_j || p_student) / divisor``.
- ``exit_kd``: ScaleFL's multi-exit loss for a model that returns one logit tensor per exit:
  ``[CE_last * n + sum_j (CE_j + weight * T^2 * KL(p_last || p_j)) * (j + 1)] / (n (n + 1) / 2)``
  with the last exit as teacher (``kd_active`` False leaves out the KL terms, as ScaleFL does in
  its first quarter of rounds; ``detach_teacher`` False lets the KD term train the last exit too,
  as its code does).

``prox_mu`` > 0 adds FedProx's proximal term ``(mu / 2) * ||w - w_start||^2`` over the trained model's
parameters to any kind's loss, ``w_start`` being the weights the device received (``fl.train.train_local``
adds it: the term needs the parameters, not the outputs).

``reduction`` of every KL term: ``batchmean`` (the true KL per sample, the default) or ``mean``
(PyTorch's ``KLDivLoss()`` default, which also divides by the number of classes, as the official
FlexFL and ScaleFL code do; pitfall 7 of the reference notes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

from iotfl_sim.fl.submodel import SubmodelSpec

OBJECTIVE_KINDS = ("ce", "masked_ce", "self_kd", "exit_kd")


@dataclass(frozen=True)
class LocalObjective:
    """How a device trains (see the module docstring for each kind)."""

    kind: Literal["ce", "masked_ce", "self_kd", "exit_kd"] = "ce"
    temperature: float = 1.0
    weight: float = 0.0  # lambda (self_kd) or gamma (exit_kd)
    teachers: tuple[SubmodelSpec, ...] = ()  # self_kd: pool models to cut from the student
    divisor: float = 1.0  # self_kd: the KD sum is divided by this (FlexFL: the trained model's pool index)
    reduction: Literal["batchmean", "mean"] = "batchmean"
    kd_active: bool = True  # exit_kd: False drops the KD terms (ScaleFL before its KD start round)
    detach_teacher: bool = True  # exit_kd: False lets the KD term train the teacher exit too
    prox_mu: float = 0.0  # FedProx: weight of the proximal term (mu / 2) ||w - w_start||^2 (0: none)

    def __post_init__(self) -> None:
        if self.kind not in OBJECTIVE_KINDS:
            raise ValueError(f"unknown objective kind {self.kind!r}; expected one of {OBJECTIVE_KINDS}")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be positive, got {self.temperature}")
        if self.divisor <= 0:
            raise ValueError(f"divisor must be positive, got {self.divisor}")
        if not self.prox_mu >= 0:
            raise ValueError(f"prox_mu must be >= 0, got {self.prox_mu}")

    @property
    def masked_labels(self) -> bool:
        return self.kind == "masked_ce"


def masked_cross_entropy(logits: torch.Tensor, target: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """HeteroFL's masked CE: logits of classes the client does not hold are filled with 0 (not -inf)."""
    mask = torch.zeros(logits.shape[1], dtype=torch.bool, device=logits.device)
    mask[keep] = True
    return F.cross_entropy(logits.masked_fill(~mask, 0.0), target)


def kd_term(student: torch.Tensor, teacher: torch.Tensor, temperature: float, reduction: str) -> torch.Tensor:
    """T^2 * KL(softmax(teacher / T) || softmax(student / T)), reduced per ``reduction``."""
    t = temperature
    kl = F.kl_div(F.log_softmax(student / t, dim=1), F.softmax(teacher / t, dim=1), reduction="sum")
    # 'mean' written out (PyTorch warns it will change 'mean' to mean 'batchmean')
    kl = kl / (student.numel() if reduction == "mean" else student.shape[0])
    return kl * (t * t)


def self_kd_loss(
    logits: torch.Tensor,
    target: torch.Tensor,
    teacher_logits: Sequence[torch.Tensor],
    objective: LocalObjective,
) -> torch.Tensor:
    """FlexFL eq. 4 given the student's and the (gradient-free) smaller models' logits."""
    loss = F.cross_entropy(logits, target)
    if not teacher_logits or objective.weight == 0:
        return loss
    kd = sum(kd_term(logits, z, objective.temperature, objective.reduction) for z in teacher_logits)
    return loss + objective.weight * kd / objective.divisor


def exit_kd_loss(outputs: Sequence[torch.Tensor], target: torch.Tensor, objective: LocalObjective) -> torch.Tensor:
    """ScaleFL's weighted multi-exit loss (the last exit is the teacher)."""
    n = len(outputs)
    last = outputs[-1]
    teacher = last.detach() if objective.detach_teacher else last
    total = F.cross_entropy(last, target) * n
    for j, z in enumerate(outputs[:-1]):
        term = F.cross_entropy(z, target)
        if objective.kd_active and objective.weight != 0:
            term = term + objective.weight * kd_term(z, teacher, objective.temperature, objective.reduction)
        total = total + term * (j + 1)
    return total / (n * (n + 1) / 2)


TeacherFn = Callable[[torch.Tensor], list[torch.Tensor]]


def objective_loss(
    objective: LocalObjective,
    outputs: torch.Tensor | Sequence[torch.Tensor],
    target: torch.Tensor,
    keep: torch.Tensor | None = None,
    teachers: TeacherFn | None = None,
    x: torch.Tensor | None = None,
) -> torch.Tensor:
    """The loss of one batch. ``teachers(x)`` gives the self-KD teachers' logits (self_kd only)."""
    if objective.kind == "exit_kd":
        if isinstance(outputs, torch.Tensor):
            outputs = [outputs]
        return exit_kd_loss(outputs, target, objective)
    logits = final_logits(outputs)
    if objective.kind == "masked_ce":
        if keep is None:
            raise ValueError("masked_ce needs the client's label set")
        return masked_cross_entropy(logits, target, keep)
    if objective.kind == "self_kd":
        teacher_logits = teachers(x) if teachers is not None and x is not None and objective.teachers else []
        return self_kd_loss(logits, target, teacher_logits, objective)
    return F.cross_entropy(logits, target)


def final_logits(outputs: torch.Tensor | Sequence[torch.Tensor]) -> torch.Tensor:
    """The prediction of a model: its logits, or the last exit's for a multi-exit model."""
    return outputs if isinstance(outputs, torch.Tensor) else outputs[-1]
