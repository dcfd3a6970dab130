"""FedDF (server ensemble distillation over S/M/L prototypes) and FedAvg per prototype."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import strategy_context
from pydantic import ValidationError

from iotfl_sim.algorithms.base import Assignment, Update
from iotfl_sim.algorithms.fedavg import FedAvg
from iotfl_sim.algorithms.feddf import FedDF
from iotfl_sim.fl.data.datasets import load_dataset
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.scenario.algorithms import FedAvgConfig, FedDFConfig
from iotfl_sim.sim.server_cost import ServerCost

RECIPE = ModelRecipe("cnn_small", 10, 1, (8, 8))
# width 0.125 (see tests/test_adapterfl.py for why not narrower with ResNet18 on 1-channel images)
GROUP = {"prototypes": ["mobilenetv2", "resnet18", "vgg16"], "width": 0.125}


def _feddf(**over) -> FedDF:
    cfg = FedDFConfig(name="feddf", **{**GROUP, **over})
    s = FedDF(cfg)
    ctx = strategy_context(RECIPE, n=8, k=4)
    ds = load_dataset("digits")
    ctx.data = ds
    ctx.proxy_indices = np.arange(40)
    s.setup(ctx)
    return s


def _update(s: FedDF, label: str, seed: int) -> Update:
    torch.manual_seed(seed)
    state = {k: v.detach().clone() for k, v in s.recipes[label].build(s.specs[label]).state_dict().items()}
    return Update(Assignment(0, s.specs[label], level=label), state, 10, np.arange(10), 0.0)


def test_ensemble_is_the_mean_of_the_teachers_logits() -> None:
    s = _feddf()
    ups = [_update(s, "S", 1), _update(s, "L", 2)]
    x = s.c.data.x_train[:40]
    got = s.ensemble_logits(ups, x)
    want = []
    for u in ups:
        m = s.recipes[u.assignment.level].build(s.specs[u.assignment.level])
        m.load_state_dict(u.state)
        m.eval()
        with torch.no_grad():
            want.append(torch.cat([m(x[i : i + 64]) for i in range(0, 40, 64)]))
    assert torch.allclose(got, (want[0] + want[1]) / 2, atol=1e-5)


def test_distillation_moves_each_student_toward_the_ensemble_and_is_charged() -> None:
    steps = 3
    s = _feddf(distill_steps=steps, distill_batch_size=20, distill_lr=1e-2)
    ups = [_update(s, "S", 1), _update(s, "M", 2), _update(s, "L", 3)]
    x = s.c.data.x_train[torch.as_tensor(s.c.proxy_indices)]
    teacher = s.ensemble_logits(ups, x)

    def kl(label: str) -> float:
        m = s.recipes[label].build(s.specs[label])
        m.load_state_dict(s.states[label])
        m.eval()  # no dropout; BN without running statistics normalises by the batch either way
        with torch.no_grad():
            logp = torch.log_softmax(m(x), 1)
        p = torch.softmax(teacher, 1)
        return float((p * (torch.log(p) - logp)).sum(1).mean())

    s.states = {x_: ups[i].state for i, x_ in enumerate(["S", "M", "L"])}  # FedAvg of one model each
    before = {x_: kl(x_) for x_ in s.labels}
    s.c.server_work.drain()
    s.distill(0, ups)
    after = {x_: kl(x_) for x_ in s.labels}
    assert all(after[x_] < before[x_] for x_ in s.labels), (before, after)
    work = s.c.server_work.drain()
    assert {what for what, _ in work} == {"distill"}
    fwd = {x_: s.recipes[x_].cost(s.specs[x_]).flops_forward_per_sample for x_ in s.labels}
    # each teacher's forward passes over the 40 proxy samples, each student's 10 steps of 20 samples
    flops = sum(ServerCost(None, flops=1.0).price(w).seconds for _, w in work)
    assert flops == pytest.approx(sum(fwd.values()) * 40 + sum(3 * f * 20 * steps for f in fwd.values()))
    assert sorted((type(w).__name__, w.samples) for _, w in work) == [("InferWork", 40)] * 3 + [("TrainWork", 20 * steps)] * 3


def test_aggregate_averages_each_prototype_before_distilling() -> None:
    s = _feddf(distill_steps=0)
    a, b = _update(s, "M", 1), _update(s, "M", 2)
    b.num_samples = 30
    s.aggregate(0, [a, b])
    k = next(k for k, v in a.state.items() if v.is_floating_point())
    assert torch.allclose(s.states["M"][k], (a.state[k] * 10 + b.state[k] * 30) / 40)


def test_feddf_needs_a_proxy_set() -> None:
    with pytest.raises(ValidationError, match="proxy_fraction"):
        FedDFConfig(name="feddf", proxy_fraction=0)
    s = FedDF(FedDFConfig(name="feddf", **GROUP))
    ctx = strategy_context(RECIPE, n=4, k=2)
    ctx.data = load_dataset("digits")
    with pytest.raises(ValueError, match="proxy set"):
        s.setup(ctx)


def test_fedavg_per_prototype_trains_that_family_on_the_devices_it_fits() -> None:
    need = {"cnn2": 1.0, "resnet18": 5.0}
    ctx = strategy_context(ModelRecipe("conv", 10, 3, (32, 32)), n=6, k=3, weights=False,
                           memory_need=lambda r, s: need[r.family], declared=[1, 1, 1, 6, 6, 6])  # fmt: skip
    s = FedAvg(FedAvgConfig(name="fedavg", family="resnet18", width=0.5))
    s.setup(ctx)
    assert s.recipe.family == "resnet18" and s.spec.rate == 0.5 and s.recipe.global_rate == 0.5
    assert s.eligible.tolist() == [False] * 3 + [True] * 3


# FedDF's end-to-end run (its S / M / L columns) is tests/test_resume.py's feddf case.


def test_data_subsets_are_seeded_and_sized() -> None:
    from iotfl_sim.sim.setup import subset_dataset as subset

    ds = load_dataset("digits")
    a, b = subset(ds, 300, 50, seed=1), subset(ds, 300, 50, seed=1)
    assert len(a.y_train) == 300 and len(a.y_test) == 50
    assert torch.equal(a.x_train[:], b.x_train[:]) and torch.equal(a.y_test, b.y_test)
    assert not torch.equal(subset(ds, 300, None, seed=2).y_train, a.y_train)
    assert subset(ds, None, 10**6, seed=1) is ds  # nothing to cut
    # every kept sample is one of the originals, none twice
    rows = {tuple(r.flatten().tolist()) for r in ds.x_train}
    kept = [tuple(r.flatten().tolist()) for r in a.x_train]
    assert set(kept) <= rows
