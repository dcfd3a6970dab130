"""Evaluating several submodels together (a shared ``features`` prefix run once) gives the same bits as one at a time."""

from __future__ import annotations

import torch

from iotfl_sim.exec.base import EvalJob, NumericData, Worker, sharing_groups
from iotfl_sim.fl.evaluate import evaluate, running_statistics, shared_layers
from iotfl_sim.fl.models.families import start_layer_rates
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec, slice_state


def _pool(family: str, starts: tuple[int, ...], norm: str = "bn", channels: int = 3):
    """AdaptiveFL's pool: for r in (0.25, 0.5) and each start layer a model keeping every channel below it; plus L."""
    recipe = ModelRecipe(family, 10, channels, (16, 16), norm, False)
    full = SubmodelSpec(1.0, rounding="floor")
    torch.manual_seed(0)
    global_state = recipe.build(full).state_dict()
    specs = [SubmodelSpec(rate=r, layer_rates=start_layer_rates(family, r, s), rounding="floor", name=f"{r}_{s}")
             for r in (0.25, 0.5) for s in starts] + [full]
    return recipe, [(spec, slice_state(global_state, recipe.shapes(spec))) for spec in specs]


def _data(channels: int = 3, train: int = 100, calib: int = 60, test: int = 50):
    g = torch.Generator().manual_seed(1)
    n = train + test
    x, y = torch.randn(n, channels, 16, 16, generator=g), torch.randint(0, 10, (n,), generator=g)
    return NumericData(x[:train], y[:train], x[:calib], x[train:], y[train:])


def test_adaptivefl_pool_shares_its_unpruned_prefix_and_scores_the_same_bits():
    recipe, pool = _pool("conv", (1, 2))
    data = _data()
    jobs = [EvalJob(recipe, spec, state, 16) for spec, state in pool]
    groups = sharing_groups(jobs)
    assert groups == [list(range(len(jobs)))]  # every model keeps the first layer group whole
    w = Worker(data, threads=1)
    together = w.evaluate(jobs)
    one_by_one = [evaluate(recipe, spec, state, data.calib_x, data.x_test, data.y_test, 16) for spec, state in pool]
    assert together == one_by_one
    # start layer 2 keeps groups 0 and 1: a ConvUnit, a max-pool, a ConvUnit, a max-pool are shared with L
    from iotfl_sim.fl.evaluate import eval_skeleton

    a, b = (eval_skeleton(recipe, spec) for spec, _ in (pool[1], pool[-1]))
    assert shared_layers(a, b, pool[1][1], pool[-1][1]) == 4
    c = eval_skeleton(recipe, pool[0][0])  # start 1: only group 0 (a ConvUnit and its max-pool)
    assert shared_layers(c, b, pool[0][1], pool[-1][1]) == 2


def test_models_with_different_first_weights_or_no_prefix_are_evaluated_apart():
    recipe, pool = _pool("conv", (0,))  # start 0 prunes the first layer too: nothing shared
    jobs = [EvalJob(recipe, spec, state, 16) for spec, state in pool]
    assert sharing_groups(jobs) == [[0], [1], [2]]
    spec, state = pool[-1]
    other = {k: v + 1 if k == "features.0.conv.weight" else v for k, v in state.items()}
    assert sharing_groups([EvalJob(recipe, spec, state, 16), EvalJob(recipe, SubmodelSpec(1.0, rounding="floor", name="x"), other, 16)]) == [[0], [1]]
    # the same (recipe, spec) twice (other weights) must not share a skeleton
    assert sharing_groups([EvalJob(recipe, spec, state, 16), EvalJob(recipe, spec, state, 16)]) == [[0], [1]]
    w = Worker(_data(), threads=1)
    d = w.data
    assert w.evaluate(jobs) == [evaluate(recipe, s, st, d.calib_x, d.x_test, d.y_test, 16) for s, st in pool]


def test_shared_prefix_statistics_equal_separate_calibration():
    # VGG16 is the costliest model here: grey images (its 256-wide head, not the 4096-wide one), calibration
    # on 20 samples (2 batches of 10, so statistics still accumulate across batches) and 10 test samples
    recipe, pool = _pool("vgg16", (4,), channels=1)
    data = _data(channels=1, train=20, calib=20, test=10)
    jobs = [EvalJob(recipe, spec, state, 10) for spec, state in pool]
    assert sharing_groups(jobs) == [[0, 1, 2]]
    w = Worker(data, threads=1)
    together = [running_statistics([f]) for f in w.calibrate(jobs, 0, 20)]
    for job, stats in zip(jobs, together, strict=True):
        alone = running_statistics(w.calibrate([job], 0, 20))
        assert stats.keys() == alone.keys() and all(torch.equal(stats[k], alone[k]) for k in stats)
    assert w.evaluate(jobs) == [w.evaluate([j])[0] for j in jobs]
