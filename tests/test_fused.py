"""FusedExecutor (iotfl_sim.exec.fused) against InlineExecutor, the per-client reference.

Fused groups must match inline training within float tolerance (atol 1e-5 on every state tensor and
on every loss, rtol 0: batched kernels sum in another order); fallbacks must be bitwise equal.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import iotfl_sim.fl.train as train_module
from iotfl_sim.exec.base import EvalJob, NumericData
from iotfl_sim.exec.fused import FusedExecutor, batch_schedule, fusable_model, group_key
from iotfl_sim.exec.inline import InlineExecutor
from iotfl_sim.fl.objectives import LocalObjective
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec
from iotfl_sim.fl.train import TrainJob, TrainResult

ATOL = 1e-5
CLASSES = 10
N = 240  # samples in the toy train set


def _data(size: int, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return torch.randn(N, 1, size, size, generator=gen, dtype=dtype), torch.randint(
        0, CLASSES, (N,), generator=gen
    )


@pytest.fixture(scope="module")
def data() -> tuple[torch.Tensor, torch.Tensor]:
    return _data(8)


def _jobs(
    recipe: ModelRecipe,
    spec: SubmodelSpec,
    counts: list[int],
    *,
    clip: float | None = None,
    objective: LocalObjective | None = None,
    momentum: float = 0.9,
    weight_decay: float = 5e-4,
    first_key: int = 0,
    seed: int = 7,
) -> list[TrainJob]:
    """One job per sample count, each with its own weights, disjoint data, label set and seed."""
    jobs = []
    start = 0
    for c, n in enumerate(counts):
        torch.manual_seed(seed + 1000 * c)
        weights = recipe.build(spec).state_dict()  # different weights per client
        jobs.append(
            TrainJob(
                key=first_key + c,
                recipe=recipe,
                spec=spec,
                weights=weights,
                indices=np.arange(start, start + n) % N,
                epochs=2,
                batch_size=8,
                lr=0.05,
                momentum=momentum,
                weight_decay=weight_decay,
                clip_grad_norm=clip,
                label_mask=np.array([c % CLASSES, (c + 3) % CLASSES, (c + 5) % CLASSES]),
                seed=seed + c,
                objective=objective or LocalObjective(),
            )
        )
        start += n
    return jobs


def _assert_close(fused: list[TrainResult], inline: list[TrainResult], jobs: list[TrainJob]) -> None:
    assert [r.key for r in fused] == [j.key for j in jobs]
    assert [r.key for r in inline] == [j.key for j in jobs]
    for f, i, j in zip(fused, inline, jobs, strict=True):
        assert f.num_samples == i.num_samples == len(j.indices)
        assert abs(f.loss - i.loss) <= ATOL
        assert list(f.state) == list(i.state)
        for k in i.state:
            assert f.state[k].shape == i.state[k].shape and f.state[k].dtype == i.state[k].dtype
            torch.testing.assert_close(f.state[k], i.state[k], atol=ATOL, rtol=0)


def _assert_bitwise(fused: list[TrainResult], inline: list[TrainResult]) -> None:
    for f, i in zip(fused, inline, strict=True):
        assert f.key == i.key and f.num_samples == i.num_samples and f.loss == i.loss
        assert all(torch.equal(f.state[k], i.state[k]) for k in i.state)


def _both(data, jobs: list[TrainJob], fused: bool = True) -> tuple[list[TrainResult], list[TrainResult]]:
    """Both executors' results; ``fused`` says whether the jobs (one group) must take the fused path."""
    x, y = data
    ex = FusedExecutor(x, y, cpu_max_step_flops=None)
    if len({group_key(j) for j in jobs}) == 1:
        assert ex.can_fuse(jobs) is fused
    return ex.run(jobs), InlineExecutor(NumericData(x, y, x, x, y), torch.get_num_threads()).run(jobs)


# Ragged: 17 = 2 full batches + 1 skipped single sample, 9 = 1 batch + a skipped single, 24 = 3 full,
# 3 = one batch of 3, 12 = a full batch then a batch of 4 (two different tail sizes at step 1).
RAGGED = [17, 9, 24, 3, 12]
FAMILY_CASES = [
    ("cnn_small", "bn"),
    ("cnn_small", "none"),
    ("conv", "bn"),
    ("conv", "ln"),
    ("mlp", "bn"),
    ("mlp", "none"),
]


# conv on 16x16 inputs: on 8x8 its last unit sees 1x1 maps, and BatchNorm over a batch of 3 or 4
# single values amplifies float32 rounding far beyond 1e-5 (see the float64 test below).
SIZE = {"conv": 16}


@pytest.mark.parametrize(("family", "norm"), FAMILY_CASES)
@pytest.mark.parametrize("clip", [None, 0.5])
def test_fused_equals_inline(data, family: str, norm: str, clip: float | None, monkeypatch) -> None:
    # the fused path trains in NCHW; the inline one here too, so that the gap measured is the fusing's alone
    # (channels_last's own rounding, up to ~2e-4 on conv-bn here, is tests/test_layout.py's concern)
    monkeypatch.setattr(train_module, "model_layout", lambda m: m)
    monkeypatch.setattr(train_module, "batch_layout", lambda b: b)
    size = SIZE.get(family, 8)
    recipe = ModelRecipe(family, CLASSES, 1, (size, size), norm=norm)
    jobs = _jobs(recipe, SubmodelSpec(0.25), RAGGED, clip=clip)
    _assert_close(*_both(data if size == 8 else _data(size), jobs), jobs)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the fused trainer's GPU path)")
@pytest.mark.parametrize(("family", "norm"), FAMILY_CASES)
def test_fused_on_cuda_equals_inline(data, family: str, norm: str, monkeypatch) -> None:
    """The GPU path (auto's choice on a CUDA machine) within the CPU path's tolerance, results back on the CPU."""
    monkeypatch.setattr(train_module, "model_layout", lambda m: m)
    monkeypatch.setattr(train_module, "batch_layout", lambda b: b)
    size = SIZE.get(family, 8)
    x, y = data if size == 8 else _data(size)
    jobs = _jobs(ModelRecipe(family, CLASSES, 1, (size, size), norm=norm), SubmodelSpec(0.25), RAGGED, clip=0.5)
    ex = FusedExecutor(x, y, device="cuda")
    assert ex.can_fuse(jobs)
    _assert_close(ex.run(jobs), InlineExecutor(NumericData(x, y, x, x, y), torch.get_num_threads()).run(jobs), jobs)
    assert torch.backends.cudnn.allow_tf32  # PyTorch's default, restored after training in full float32


def test_fused_equals_inline_float64_ill_conditioned_bn() -> None:
    """conv on 8x8 with BatchNorm over 1x1 maps: in float32 the two differ by up to ~1e-2 (rounding
    blown up by normalising 3-4 nearly equal values), in float64 they agree to 1e-10, so the
    semantics are the same and the float32 gap is conditioning, not a different computation."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        recipe = ModelRecipe("conv", CLASSES, 1, (8, 8), norm="bn")
        jobs = _jobs(recipe, SubmodelSpec(0.25), RAGGED, clip=0.5)
        fused, inline = _both(_data(8, torch.float64), jobs)
    finally:
        torch.set_default_dtype(previous)
    for f, i in zip(fused, inline, strict=True):
        assert f.state["classifier.weight"].dtype == torch.float64
        assert abs(f.loss - i.loss) <= 1e-10
        for k in i.state:
            torch.testing.assert_close(f.state[k], i.state[k], atol=1e-10, rtol=0)


@pytest.mark.parametrize("family", ["cnn_small", "mlp"])
def test_fused_masked_ce_equals_inline(data, family: str) -> None:
    recipe = ModelRecipe(family, CLASSES, 1, (8, 8))
    jobs = _jobs(recipe, SubmodelSpec(0.25), RAGGED, clip=1.0, objective=LocalObjective("masked_ce"))
    fused, inline = _both(data, jobs)
    _assert_close(fused, inline, jobs)
    # the label masks differ per client: the same clients under plain CE end elsewhere
    plain = _jobs(recipe, SubmodelSpec(0.25), RAGGED, clip=1.0)
    other = FusedExecutor(*data, cpu_max_step_flops=None).run(plain)
    assert not torch.allclose(other[0].state["classifier.weight"], fused[0].state["classifier.weight"])


def test_fused_resnet18_tiny_equals_inline(data) -> None:
    recipe = ModelRecipe("resnet18", CLASSES, 1, (8, 8))
    jobs = _jobs(recipe, SubmodelSpec(0.0625), [10, 6, 16], clip=0.5)
    _assert_close(*_both(data, jobs), jobs)


def test_fused_without_momentum_or_weight_decay(data) -> None:
    recipe = ModelRecipe("cnn_small", CLASSES, 1, (8, 8))
    jobs = _jobs(recipe, SubmodelSpec(0.25), RAGGED, momentum=0.0, weight_decay=0.0)
    _assert_close(*_both(data, jobs), jobs)


def test_clipping_binds_in_the_clipped_cases(data) -> None:
    """clip=0.5 must change training, else the clipping cases above test nothing."""
    recipe = ModelRecipe("cnn_small", CLASSES, 1, (8, 8))
    clipped = FusedExecutor(*data, cpu_max_step_flops=None).run(_jobs(recipe, SubmodelSpec(0.25), [16, 16], clip=0.5))
    free = FusedExecutor(*data, cpu_max_step_flops=None).run(_jobs(recipe, SubmodelSpec(0.25), [16, 16]))
    assert not torch.allclose(clipped[0].state["classifier.weight"], free[0].state["classifier.weight"])


def test_empty_and_single_sample_clients(data) -> None:
    """0 samples: no step, weights back, loss 0. 1 sample: train_local trains that batch of one."""
    recipe = ModelRecipe("cnn_small", CLASSES, 1, (8, 8))
    jobs = _jobs(recipe, SubmodelSpec(0.25), [0, 1, 9])
    fused, inline = _both(data, jobs)
    _assert_close(fused, inline, jobs)
    assert fused[0].loss == 0.0 and all(
        torch.equal(fused[0].state[k], jobs[0].weights[k]) for k in jobs[0].weights
    )
    assert not torch.equal(fused[1].state["classifier.weight"], jobs[1].weights["classifier.weight"])


def test_unreached_parameters_stay_untouched(data) -> None:
    """Plain CE on an early-exit model reaches only the last exit: the other heads get no gradient,
    so PyTorch's SGD skips them (no weight decay either) and they come back unchanged."""
    recipe = ModelRecipe("conv_ee_light", CLASSES, 1, (8, 8))
    jobs = _jobs(recipe, SubmodelSpec(0.25), [16, 9], weight_decay=0.01)
    fused, inline = _both(data, jobs)
    _assert_close(fused, inline, jobs)
    unchanged = [k for k in jobs[0].weights if torch.equal(inline[0].state[k], jobs[0].weights[k])]
    assert unchanged, "the probe case needs parameters the loss does not reach"
    for k in unchanged:
        assert torch.equal(fused[0].state[k], jobs[0].weights[k])


def test_batch_schedule_by_hand() -> None:
    recipe = ModelRecipe("mlp", CLASSES, 1, (8, 8))
    counts = [17, 9, 24, 3, 12, 1, 0]
    jobs = _jobs(recipe, SubmodelSpec(0.25), counts)
    # batch size 8, 2 epochs; a trailing batch of one is skipped unless it is the client's only sample
    expected = [[8, 8] * 2, [8] * 2, [8, 8, 8] * 2, [3] * 2, [8, 4] * 2, [1] * 2, []]
    for job, sizes in zip(jobs, expected, strict=True):
        sched = batch_schedule(job)
        assert [len(b) for b in sched] == sizes
        if sched:  # every epoch is a permutation drawn from the job's seed
            first_epoch = torch.cat(sched[: len(sizes) // 2])
            assert set(first_epoch.tolist()) <= set(job.indices.tolist())
    gen = torch.Generator().manual_seed(jobs[4].seed)
    order = torch.as_tensor(jobs[4].indices)[torch.randperm(12, generator=gen)]
    assert torch.equal(batch_schedule(jobs[4])[0], order[:8])


def test_order_preserved_across_groups_and_fallbacks(data) -> None:
    """Interleaved jobs of two specs, an unsupported objective and a lone job: results in job order."""
    recipe = ModelRecipe("cnn_small", CLASSES, 1, (8, 8))
    a = _jobs(recipe, SubmodelSpec(0.25), [12, 9, 16], first_key=0)
    b = _jobs(recipe, SubmodelSpec(0.5), [10, 8], first_key=10, seed=50)
    kd = LocalObjective("self_kd", weight=1.0, teachers=(SubmodelSpec(0.25),))
    c = _jobs(recipe, SubmodelSpec(0.5), [9, 11], first_key=20, seed=90, objective=kd)
    lone = _jobs(recipe, SubmodelSpec(0.125), [10], first_key=30, seed=99)
    jobs = [b[0], a[0], c[0], lone[0], a[1], b[1], c[1], a[2]]
    _assert_close(*_both(data, jobs), jobs)


@pytest.mark.parametrize("detach", [True, False])
def test_fused_exit_kd_equals_inline(detach: bool) -> None:
    """ScaleFL's multi-exit loss with its KD terms on, on a depth-truncated early-exit model."""
    recipe = ModelRecipe("conv_ee_light", CLASSES, 1, (16, 16))
    spec = SubmodelSpec(0.25, depth=3)
    objective = LocalObjective("exit_kd", weight=0.5, temperature=2.0, detach_teacher=detach)
    jobs = _jobs(recipe, spec, [12, 9, 16], clip=0.5, objective=objective)
    _assert_close(*_both(_data(16), jobs), jobs)


def test_fallbacks_are_bitwise_inline(data) -> None:
    recipe = ModelRecipe("cnn_small", CLASSES, 1, (8, 8))
    lone = _jobs(recipe, SubmodelSpec(0.25), [11], clip=0.5)
    kd = LocalObjective("self_kd", weight=1.0, teachers=(SubmodelSpec(0.125),))
    self_kd = _jobs(recipe, SubmodelSpec(0.25), [10, 9], objective=kd, first_key=5)
    for jobs in (lone, self_kd):
        _assert_bitwise(*_both(data, jobs, fused=False))


class _Recording:
    """An executor that records what it is given and hands it to another."""

    def __init__(self, inner) -> None:
        self.inner, self.trained, self.evaluated, self.closed = inner, [], [], False

    def run(self, jobs):
        self.trained.append([j.key for j in jobs])
        return self.inner.run(jobs)

    def evaluate(self, jobs):
        self.evaluated.append(len(jobs))
        return self.inner.evaluate(jobs)

    @property
    def overlaps(self) -> bool:
        return self.inner.overlaps

    def evaluate_later(self, jobs):
        self.evaluated.append(len(jobs))
        return self.inner.evaluate_later(jobs)

    def close(self) -> None:
        self.closed = True
        self.inner.close()


def test_a_host_executor_trains_what_is_not_fused_and_evaluates(data) -> None:
    """On CUDA the run hands the fused trainer worker threads: the unfused jobs (in job order, one call) go to
    them, with inline's bits, the fused group never does, and evaluation is theirs."""
    from iotfl_sim.exec.threads import ThreadExecutor

    x, y = data
    nd = NumericData(x, y, x, x, y)
    recipe = ModelRecipe("cnn_small", CLASSES, 1, (8, 8))
    fused_group = _jobs(recipe, SubmodelSpec(0.25), [12, 9, 16])
    kd = LocalObjective("self_kd", weight=1.0, teachers=(SubmodelSpec(0.125),))
    self_kd = _jobs(recipe, SubmodelSpec(0.25), [10, 9], objective=kd, first_key=5)
    lone = _jobs(recipe, SubmodelSpec(0.5), [11], first_key=9)
    jobs = [self_kd[0], fused_group[0], lone[0], fused_group[1], self_kd[1], fused_group[2]]
    host = _Recording(ThreadExecutor(nd, 2, 1))
    ex = FusedExecutor(x, y, cpu_max_step_flops=None, host=host)
    got = ex.run(jobs)
    assert host.trained == [[5, 9, 6]]
    inline = InlineExecutor(nd, 1)  # the host's workers run one torch thread each
    ref = inline.run(jobs)
    _assert_close(got, ref, jobs)
    unfused = [i for i, j in enumerate(jobs) if j.key in (5, 6, 9)]
    _assert_bitwise([got[i] for i in unfused], [ref[i] for i in unfused])
    evals = [EvalJob(recipe, SubmodelSpec(0.25), r.state, 16) for r in ref[:2]]
    assert ex.evaluate(evals) == inline.evaluate(evals) and host.evaluated == [2]
    # beside the next round's training (engine: overlap_eval) the host's threads evaluate too; alone, nothing can
    assert ex.overlaps and ex.evaluate_later(evals).result() == inline.evaluate(evals) and host.evaluated == [2, 2]
    assert not FusedExecutor(x, y, cpu_max_step_flops=None).overlaps
    assert ex._skeletons == {}  # the host trained what is not fused: no CPU model kept here to ask about it
    ex.close()
    inline.close()
    assert host.closed


def test_dropout_model_falls_back_bitwise(data) -> None:
    recipe = ModelRecipe("vgg16", CLASSES, 1, (8, 8))
    spec = SubmodelSpec(0.0625)
    assert not fusable_model(recipe.build(spec))  # its head has nn.Dropout
    assert fusable_model(ModelRecipe("cnn_small", CLASSES, 1, (8, 8)).build(spec))
    _assert_bitwise(*_both(data, _jobs(recipe, spec, [9, 10]), fused=False))


def test_global_rng_left_as_inline_leaves_it(data) -> None:
    recipe = ModelRecipe("mlp", CLASSES, 1, (8, 8))
    jobs = _jobs(recipe, SubmodelSpec(0.25), [9, 10, 8])
    x, y = data
    InlineExecutor(NumericData(x, y, x, x, y), torch.get_num_threads()).run(jobs)
    after_inline = torch.random.get_rng_state()
    torch.manual_seed(12345)
    FusedExecutor(x, y, cpu_max_step_flops=None).run(jobs)
    assert torch.equal(torch.random.get_rng_state(), after_inline)


def test_fused_is_deterministic(data) -> None:
    recipe = ModelRecipe("cnn_small", CLASSES, 1, (8, 8))
    jobs = _jobs(recipe, SubmodelSpec(0.25), RAGGED, clip=0.5)
    x, y = data
    ex = FusedExecutor(x, y, cpu_max_step_flops=None)
    _assert_bitwise(ex.run(jobs), FusedExecutor(x, y, cpu_max_step_flops=None).run(jobs))
    _assert_bitwise(ex.run(jobs), ex.run(jobs))  # cached skeletons change nothing
    ex.close()


def test_on_a_cpu_only_tiny_steps_are_fused(data) -> None:
    """A step above the CPU limit trains one by one (inline's bits); at or below it, fused."""
    from iotfl_sim.exec import fused

    x, y = data
    recipe = ModelRecipe("cnn_small", CLASSES, 1, (8, 8))
    jobs = _jobs(recipe, SubmodelSpec(1.0), [16, 16])
    step = recipe.cost(SubmodelSpec(1.0)).flops_forward_per_sample * jobs[0].batch_size
    assert FusedExecutor(x, y, cpu_max_step_flops=step).can_fuse(jobs)
    big = FusedExecutor(x, y, cpu_max_step_flops=step * 0.99)
    assert not big.can_fuse(jobs)
    _assert_bitwise(big.run(jobs), InlineExecutor(NumericData(x, y, x, x, y), torch.get_num_threads()).run(jobs))
    assert FusedExecutor(x, y).cpu_max_step_flops == fused.CPU_FUSE_MAX_STEP_FLOPS


def test_fused_shares_cut_every_fusable_group_evenly_in_job_order() -> None:
    from iotfl_sim.exec.pool import fused_shares

    a, half = ModelRecipe("cnn_small", CLASSES, 1, (8, 8)), SubmodelSpec(0.5)
    jobs = _jobs(a, SubmodelSpec(1.0), [4] * 5) + _jobs(a, half, [4] * 2, first_key=5)
    # interleave the two groups: positions 0..6 hold full, half, full, half, full, full, full
    order = [0, 5, 1, 6, 2, 3, 4]
    jobs = [jobs[i] for i in order]
    everything = lambda group: True  # noqa: E731
    # group full = positions [0, 2, 4, 5, 6] -> 3 + 2; group half = [1, 3] -> 1 + 1
    assert fused_shares(jobs, 2, everything) == [[0, 1, 2, 4], [3, 5, 6]]
    assert fused_shares(jobs[:1], 3, everything) == [[0]]  # empty shares are left out
    # a group not fused: each of its jobs is a task of its own, after the fused shares
    only_full = lambda group: group[0].spec == SubmodelSpec(1.0)  # noqa: E731
    assert fused_shares(jobs, 2, only_full) == [[0, 2, 4], [5, 6], [1], [3]]


def test_fused_pool_trains_close_to_inline_in_job_order(data) -> None:
    from iotfl_sim.exec.pool import PoolExecutor

    x, y = data
    recipe = ModelRecipe("cnn_small", CLASSES, 1, (8, 8))
    jobs = _jobs(recipe, SubmodelSpec(1.0), RAGGED) + _jobs(recipe, SubmodelSpec(0.5), [16, 9], first_key=5)
    nd = NumericData(x, y, x, x, y)
    pool = PoolExecutor(nd, 2, 1, fuse=True)
    try:
        pooled = pool.run(jobs)
    finally:
        pool.close()
    _assert_close(pooled, InlineExecutor(nd, 1).run(jobs), jobs)
