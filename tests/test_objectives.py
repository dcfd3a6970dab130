"""Local objectives as data: each loss against a hand computation, and self-KD teachers cut from the student."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
import torch

from iotfl_sim.exec.base import NumericData
from iotfl_sim.exec.inline import InlineExecutor
from iotfl_sim.fl.objectives import LocalObjective, exit_kd_loss, kd_term, objective_loss, self_kd_loss
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec
from iotfl_sim.fl.train import TrainJob


def softmax(z, t=1.0):
    e = [math.exp(v / t) for v in z]
    s = sum(e)
    return [v / s for v in e]


def ce(z, y):
    return -math.log(softmax(z)[y])


def kl(p, q):  # KL(p || q)
    return sum(a * math.log(a / b) for a, b in zip(p, q, strict=True))


STUDENT = [[2.0, 0.5, -1.0], [0.1, 0.2, 0.3]]
TEACHER = [[1.0, 1.0, 0.0], [-0.5, 0.0, 2.0]]
Y = [0, 2]


def test_kd_term_is_t_squared_kl_teacher_to_student_batchmean_and_mean():
    t = 3.0
    hand = sum(kl(softmax(b, t), softmax(a, t)) for a, b in zip(STUDENT, TEACHER, strict=True)) / 2 * t * t
    got = kd_term(torch.tensor(STUDENT), torch.tensor(TEACHER), t, "batchmean")
    assert float(got) == pytest.approx(hand, rel=1e-6)
    # KLDivLoss()'s default 'mean' also divides by the 3 classes (the official codes' reduction)
    assert float(kd_term(torch.tensor(STUDENT), torch.tensor(TEACHER), t, "mean")) == pytest.approx(hand / 3, rel=1e-6)


def test_self_kd_loss_flexfl_eq4_hand_computed():
    obj = LocalObjective("self_kd", temperature=3.0, weight=10.0, divisor=2.0)
    teacher2 = [[0.0, 0.0, 0.0], [1.0, -1.0, 0.5]]
    got = self_kd_loss(torch.tensor(STUDENT), torch.tensor(Y), [torch.tensor(TEACHER), torch.tensor(teacher2)], obj)
    ce_hand = (ce(STUDENT[0], 0) + ce(STUDENT[1], 2)) / 2
    kd = 0.0
    for tz in (TEACHER, teacher2):
        kd += sum(kl(softmax(b, 3), softmax(a, 3)) for a, b in zip(STUDENT, tz, strict=True)) / 2 * 9
    assert float(got) == pytest.approx(ce_hand + 10.0 * kd / 2.0, rel=1e-6)


def test_exit_kd_loss_scalefl_weights_hand_computed():
    z1 = [[0.3, -0.2, 0.1], [0.0, 1.0, 0.0]]
    z2 = STUDENT
    z3 = TEACHER  # last exit = teacher
    obj = LocalObjective("exit_kd", temperature=3.0, weight=0.5)
    got = exit_kd_loss([torch.tensor(z) for z in (z1, z2, z3)], torch.tensor(Y), obj)

    def ce_b(z):
        return (ce(z[0], Y[0]) + ce(z[1], Y[1])) / 2

    def kd_b(z):
        return sum(kl(softmax(b, 3), softmax(a, 3)) for a, b in zip(z, z3, strict=True)) / 2 * 9

    hand = (ce_b(z3) * 3 + (ce_b(z1) + 0.5 * kd_b(z1)) * 1 + (ce_b(z2) + 0.5 * kd_b(z2)) * 2) / 6
    assert float(got) == pytest.approx(hand, rel=1e-6)
    off = LocalObjective("exit_kd", temperature=3.0, weight=0.5, kd_active=False)
    hand_off = (ce_b(z3) * 3 + ce_b(z1) + ce_b(z2) * 2) / 6
    assert float(exit_kd_loss([torch.tensor(z) for z in (z1, z2, z3)], torch.tensor(Y), off)) == pytest.approx(hand_off, rel=1e-6)


def test_exit_kd_teacher_gets_gradient_only_when_not_detached():
    z1 = torch.tensor(STUDENT, requires_grad=True)
    z2 = torch.tensor(TEACHER, requires_grad=True)
    for detach, teacher_grad_from_kd in ((True, False), (False, True)):
        z1.grad = z2.grad = None
        obj = LocalObjective("exit_kd", temperature=3.0, weight=1.0, detach_teacher=detach)
        exit_kd_loss([z1, z2], torch.tensor(Y), obj).backward()
        g_with = z2.grad.clone()
        z2.grad = None
        obj0 = LocalObjective("exit_kd", temperature=3.0, weight=0.0)
        exit_kd_loss([z1, z2], torch.tensor(Y), obj0).backward()
        assert (not torch.allclose(g_with, z2.grad)) == teacher_grad_from_kd


def test_masked_ce_fills_absent_classes_with_zero():
    z = torch.tensor(STUDENT)
    got = objective_loss(LocalObjective("masked_ce"), z, torch.tensor(Y), keep=torch.tensor([0, 2]))
    masked = [[2.0, 0.0, -1.0], [0.1, 0.0, 0.3]]
    assert float(got) == pytest.approx((ce(masked[0], 0) + ce(masked[1], 2)) / 2, rel=1e-6)


def test_objectives_are_plain_picklable_data():
    obj = LocalObjective("self_kd", temperature=3.0, weight=10.0, teachers=(SubmodelSpec(0.5, rounding="floor"),))
    assert pickle.loads(pickle.dumps(obj)) == obj
    with pytest.raises(ValueError, match="unknown objective"):
        LocalObjective("nope")  # type: ignore[arg-type]


def _job(objective: LocalObjective, seed: int = 1) -> tuple[TrainJob, torch.Tensor, torch.Tensor]:
    recipe = ModelRecipe("cnn_small", 10, 1, (8, 8), scaler=False)
    spec = SubmodelSpec(1.0, rounding="floor")
    torch.manual_seed(0)
    weights = {k: v.detach().clone() for k, v in recipe.build(spec).state_dict().items()}
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(40, 1, 8, 8, generator=gen)
    y = torch.randint(0, 10, (40,), generator=gen)
    job = TrainJob(0, recipe, spec, weights, np.arange(40), 1, 10, 0.05, 0.0, 0.0, None, None, seed, objective)
    return job, x, y


def test_self_kd_training_uses_teachers_and_differs_from_plain_ce():
    teachers = (SubmodelSpec(0.25, rounding="floor"), SubmodelSpec(0.5, rounding="floor"))
    plain, x, y = _job(LocalObjective("ce"))
    kd, _, _ = _job(LocalObjective("self_kd", temperature=3.0, weight=10.0, teachers=teachers, divisor=2.0))
    no_weight, _, _ = _job(LocalObjective("self_kd", temperature=3.0, weight=0.0, teachers=teachers))
    ex = InlineExecutor(NumericData(x, y, x, x, y))
    try:
        a, b, c = (ex.run([j])[0].state for j in (plain, kd, no_weight))
    finally:
        ex.close()
    assert all(torch.equal(a[k], c[k]) for k in a)  # lambda 0: exactly plain CE
    assert any(not torch.allclose(a[k], b[k]) for k in a)  # the teachers change the update

