"""The thread executor (exec/threads.py): work really shared out over its threads, inline's bits, its own models per
thread, and the global RNG (dropout) kept as inline keeps it."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from test_resume import METHODS, by_method, method_scenario, only_run, rounds, summary

from iotfl_sim.cli import main
from iotfl_sim.exec.base import EvalJob, NumericData, Worker
from iotfl_sim.exec.inline import InlineExecutor
from iotfl_sim.exec.threads import ThreadExecutor
from iotfl_sim.fl.evaluate import eval_skeleton
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec
from iotfl_sim.fl.train import TrainJob, draws_global_rng


def _data() -> NumericData:
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(200, 3, 8, 8, generator=gen), torch.randint(0, 10, (200,), generator=gen)
    return NumericData(x, y, x[:64], x[100:180], y[100:180])


def _jobs(recipe: ModelRecipe, specs: list[SubmodelSpec]) -> list[TrainJob]:
    jobs = []
    for i, spec in enumerate(specs):
        torch.manual_seed(i)
        jobs.append(TrainJob(key=i, recipe=recipe, spec=spec, weights=recipe.build(spec).state_dict(),
                             indices=np.arange(10 * i, 10 * i + 12 + 3 * i), epochs=1, batch_size=4, lr=0.05,
                             momentum=0.9, weight_decay=5e-4, clip_grad_norm=1.0, label_mask=None, seed=100 + i))
    return jobs


def _same(a, b) -> bool:
    return [r.key for r in a] == [r.key for r in b] and all(
        x.loss == y.loss and x.state.keys() == y.state.keys() and all(torch.equal(x.state[k], y.state[k]) for k in x.state)
        for x, y in zip(a, b, strict=True)
    )


def _threads_used(monkeypatch) -> set[str]:
    names: set[str] = set()
    train = Worker.train

    def recording(self, job):
        names.add(threading.current_thread().name)
        return train(self, job)

    monkeypatch.setattr(Worker, "train", recording)
    return names


def test_training_is_shared_over_the_threads_and_gives_inline_bits(monkeypatch):
    data = _data()
    recipe = ModelRecipe("conv", 10, 3, (8, 8))  # BatchNorm, scaler: every per-job state path
    jobs = _jobs(recipe, [SubmodelSpec(1.0), SubmodelSpec(0.5), SubmodelSpec(1.0), SubmodelSpec(0.25)] * 2)
    want = InlineExecutor(data).run(jobs)
    names = _threads_used(monkeypatch)
    together = threading.Barrier(2, timeout=30)  # jobs 0 and 1 must be in training at the same time
    train = Worker.train

    def meeting(self, job):
        if job.key < 2:
            together.wait()  # one thread alone would hold job 0 here until the timeout breaks the barrier
        return train(self, job)

    monkeypatch.setattr(Worker, "train", meeting)
    ex = ThreadExecutor(data, workers=2)
    try:
        got = ex.run(jobs)
    finally:
        ex.close()
    assert _same(got, want)
    assert len(names) == 2 and all(n.startswith("iotfl-worker") for n in names)  # none on the calling thread


def test_evaluation_in_slices_over_threads_gives_inline_bits():
    data = _data()
    recipe = ModelRecipe("conv", 10, 3, (8, 8))
    torch.manual_seed(1)
    evals = [EvalJob(recipe, SubmodelSpec(r), recipe.build(SubmodelSpec(r)).state_dict(), 16) for r in (1.0, 0.5, 0.25)]
    want = InlineExecutor(data).evaluate(evals)
    ex = ThreadExecutor(data, workers=3)
    try:
        got = ex.evaluate(evals)
    finally:
        ex.close()
    assert got == want and len({acc for acc, _ in got}) > 1


def test_every_thread_evaluates_with_models_of_its_own():
    recipe, spec = ModelRecipe("cnn_small", 10, 1, (8, 8)), SubmodelSpec(0.5)
    here = eval_skeleton(recipe, spec)
    seen: list[torch.nn.Module] = []
    t = threading.Thread(target=lambda: seen.extend([eval_skeleton(recipe, spec), eval_skeleton(recipe, spec)]))
    t.start()
    t.join()
    assert seen[0] is seen[1] and seen[0] is not here and eval_skeleton(recipe, spec) is here


def test_a_round_with_dropout_trains_on_the_calling_thread_with_inline_bits_and_rng(monkeypatch):
    """vgg16's head has dropout, drawn from the global RNG that train_local seeds per job: two threads would
    interleave their draws. The round runs one job after another on the calling thread instead."""
    data = NumericData(*(lambda x, y: (x, y, x[:8], x[:8], y[:8]))(torch.randn(40, 3, 32, 32), torch.randint(0, 10, (40,))))
    recipe = ModelRecipe("vgg16", 10, 3, (32, 32))
    assert draws_global_rng(recipe.build(SubmodelSpec(0.125)))
    jobs = _jobs(recipe, [SubmodelSpec(0.125)] * 2)
    want = InlineExecutor(data).run(jobs)
    after_inline = torch.get_rng_state()
    names = _threads_used(monkeypatch)
    ex = ThreadExecutor(data, workers=2)
    try:
        got = ex.run(jobs)
        after_threads = torch.get_rng_state()
    finally:
        ex.close()
    assert _same(got, want)
    assert names == {threading.current_thread().name}
    assert torch.equal(after_threads, after_inline)


def test_after_a_round_the_global_rng_is_left_as_inline_leaves_it():
    data = _data()
    recipe = ModelRecipe("cnn_small", 10, 3, (8, 8))
    jobs = _jobs(recipe, [SubmodelSpec(1.0)] * 4)
    InlineExecutor(data).run(jobs)
    want = torch.get_rng_state()
    torch.manual_seed(12345)
    ex = ThreadExecutor(data, workers=2)
    try:
        ex.run(jobs)
    finally:
        ex.close()
    assert torch.equal(torch.get_rng_state(), want)


# At landing, one method of each numerics path a worker thread runs: plain SGD (fedavg), quantized uploads
# (fedavg_qsgd), a proximal term (fedprox), self-distillation (flexfl), exit heads (scalefl), the asynchronous
# loop (fedbuff) and late updates (fedavg_semi_async). The full tier adds the methods that run one of these paths
# on other weights (the width-sliced submodels of heterofl, heterofl_iot, adaptivefl and decoupled; dadaquant's
# quantized uploads; fedasync's loop; fedopt, whose own step is the server's) and the heavy model-pool methods;
# every method's numbers are pinned at landing by its golden digest (test_resume).
THREADS_AT_LANDING = ("fedavg", "fedavg_qsgd", "fedprox", "flexfl", "scalefl", "fedbuff", "fedavg_semi_async")


@pytest.mark.parametrize("method", by_method(METHODS, tuple(m for m in METHODS if m not in THREADS_AT_LANDING)))
def test_every_method_gives_inline_bits_on_worker_threads(tmp_path, write_scenario, method_run, method):
    """Each method's numerics path (self-KD teachers, exit KD, proximal terms, masked CE, quantized uploads,
    distillation, dropout prototypes, the asynchronous loops) on two worker threads, against inline (the run of
    the same scenario that tests/test_resume.py resumes: ``method_run``)."""
    data = method_scenario(method)
    # threads: evaluation beside the next round too (a round's evaluation overlaps the next one's training)
    data["executor"] = {"kind": "threads", "workers": 2, "overlap_eval": True}
    assert main(["run", str(write_scenario(data)), "--out", str(tmp_path / "threads"), "--quiet"]) == 0
    threads, inline = only_run(tmp_path / "threads"), method_run(method)
    assert rounds(threads) == rounds(inline), method
    assert summary(threads) == summary(inline), method
    assert (threads / "devices.csv").read_text() == (inline / "devices.csv").read_text(), method


def test_a_round_without_random_modules_keeps_no_model_on_the_calling_thread():
    data = _data()
    recipe = ModelRecipe("conv", 10, 3, (8, 8))
    jobs = _jobs(recipe, [SubmodelSpec(1.0), SubmodelSpec(0.5)])
    ex = ThreadExecutor(data, workers=2)
    try:
        ex.run(jobs)
        assert ex._caller._skeletons == {}  # asked whether the model draws random numbers, then dropped
        trained = [m for w in ex._made for m in w._skeletons.values()]
    finally:
        ex.close()
    assert trained and all(p.grad is None for m in trained for p in m.parameters())  # no gradient copy kept
