"""Evaluation beside the next round (``executor.overlap_eval``): it really runs while the next round trains, it
draws nothing from the global RNG a model with dropout trains from, and every file is what a run without it
writes, including when a later round fails."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
import torch
from conftest import base_scenario
from test_resume import HOST, only_run, rounds, summary
from test_thread_executor import _data, _jobs, _same

from iotfl_sim.cli import main
from iotfl_sim.exec.base import EvalJob, Worker, overlaps
from iotfl_sim.exec.inline import InlineExecutor
from iotfl_sim.exec.threads import ThreadExecutor
from iotfl_sim.fl import evaluate
from iotfl_sim.fl.evaluate import eval_prototype
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec
from iotfl_sim.sim.learning import Learning


def test_an_evaluation_started_later_runs_while_the_caller_trains_and_gives_inline_bits(monkeypatch):
    data = _data()  # 80 test samples: one slice at batch 100, so one worker evaluates and the other is free
    recipe = ModelRecipe("conv", 10, 3, (8, 8))
    torch.manual_seed(1)
    evals = [EvalJob(recipe, SubmodelSpec(1.0), recipe.build(SubmodelSpec(1.0)).state_dict(), 100)]
    jobs = _jobs(recipe, [SubmodelSpec(0.5)] * 3)
    want_eval, want_train = InlineExecutor(data).evaluate(evals), InlineExecutor(data).run(jobs)
    training = threading.Event()
    seen: list[bool] = []
    train, calibrate = Worker.train, Worker.calibrate

    def training_started(self, job):
        training.set()
        return train(self, job)

    def waits_for_training(self, *args):  # a synchronous evaluation would hold the caller: training never starts
        seen.append(training.wait(timeout=20))
        return calibrate(self, *args)

    monkeypatch.setattr(Worker, "train", training_started)
    monkeypatch.setattr(Worker, "calibrate", waits_for_training)
    ex = ThreadExecutor(data, workers=2)
    try:
        later = ex.evaluate_later(evals)
        got_train = ex.run(jobs)
        got_eval = later.result()
    finally:
        ex.close()
    assert seen == [True]
    assert got_eval == want_eval and _same(got_train, want_train)


def test_an_evaluation_started_later_draws_nothing_from_the_global_rng():
    """Building a model initialises it from the global RNG; the prototypes are built by the caller first, and the
    threads evaluate copies of them, so a model with dropout training meanwhile on the caller draws undisturbed."""
    data = _data()
    recipe = ModelRecipe("cnn_small", 10, 3, (8, 8))
    spec = SubmodelSpec(0.375)  # a spec no other test evaluates: no thread holds a skeleton of it yet
    evals = [EvalJob(recipe, spec, recipe.build(spec).state_dict(), 16)]
    eval_prototype(recipe, spec)
    ex = ThreadExecutor(data, workers=2)
    try:
        torch.manual_seed(7)
        before = torch.get_rng_state()
        later = ex.evaluate_later(evals)
        later.result()
        assert torch.equal(torch.get_rng_state(), before)
    finally:
        ex.close()


def _run(tmp_path, write_scenario, name: str, **executor) -> Path:
    data = base_scenario(rounds=3)
    data["data"]["train_samples"] = 256  # 32 a device: what is compared is the files, not how well it learns
    data["server"] = {"eval_every": 1, "bn_calibration_samples": 64}
    data["fleet"]["cost_model"] = "flops"
    data["model"] = {"family": "conv"}  # BatchNorm: calibration and scoring, two passes over the workers
    data["executor"] = {"kind": "threads", "workers": 2, **executor}
    data["output"] = {"progress": False, "events": "all", "checkpoint": {"every_rounds": 2, "every_s": None}}
    assert main(["run", str(write_scenario(data, f"{name}.yaml")), "--out", str(tmp_path / name), "--quiet"]) == 0
    return only_run(tmp_path / name)


def test_overlapped_evaluation_writes_the_files_a_run_without_it_writes(tmp_path, write_scenario, monkeypatch):
    later_calls = []
    evaluate_later = ThreadExecutor.evaluate_later
    monkeypatch.setattr(ThreadExecutor, "evaluate_later", lambda self, jobs: later_calls.append(1) or evaluate_later(self, jobs))
    built_off_the_caller = []  # evaluation models (track_bn) built on another thread: they would draw from the RNG
    build = ModelRecipe.build

    def recording_build(self, spec, *args, **kwargs):
        if kwargs.get("track_bn") and threading.current_thread() is not threading.main_thread():
            built_off_the_caller.append(threading.current_thread().name)
        return build(self, spec, *args, **kwargs)

    monkeypatch.setattr(ModelRecipe, "build", recording_build)
    alone = _run(tmp_path, write_scenario, "alone", overlap_eval=False)
    assert later_calls == []
    beside = _run(tmp_path, write_scenario, "beside", overlap_eval=True)
    # round 1's evaluation overlaps round 2; round 2's too, but its checkpoint writes its row first; the last
    # round has nothing to overlap
    assert len(later_calls) == 2 and built_off_the_caller == []
    assert rounds(beside) == rounds(alone) and summary(beside) == summary(alone)
    for name in ("devices.csv", "events.jsonl"):
        assert (beside / name).read_text() == (alone / name).read_text()
    assert evaluate._PROTOTYPES == {}  # a run's end drops the models it evaluated from
    said = [json.loads((r / "summary.json").read_text())["executor"]["overlap_eval"] for r in (beside, alone)]
    assert said == [True, False]
    header = (beside / "rounds.csv").read_text().splitlines()[0]
    assert header == (alone / "rounds.csv").read_text().splitlines()[0] and HOST <= set(header.split(","))


def test_a_round_that_fails_leaves_the_row_of_the_round_whose_evaluation_overlapped_it(tmp_path, write_scenario, monkeypatch):
    train_tasks = Learning.train_tasks
    calls = []

    def fails_in_round_2(self, tasks):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("round 2 breaks")
        return train_tasks(self, tasks)

    monkeypatch.setattr(Learning, "train_tasks", fails_in_round_2)
    with pytest.raises(RuntimeError, match="round 2 breaks"):
        _run(tmp_path, write_scenario, "failing", overlap_eval=True)
    (run,) = (tmp_path / "failing").iterdir()
    rows = rounds(run)
    assert [r["round"] for r in rows] == ["1"] and float(rows[0]["acc_full"]) > 0


def test_auto_overlaps_where_the_executor_says_it_pays():
    """The thread executor (the evaluation fills the workers' idle time between rounds, benchmarks/overlap_eval.md)
    and the fused trainer on CUDA say so; an executor that can overlap but does not say it pays (fused on a CPU)
    overlaps only when asked; the inline executor never."""
    ex = ThreadExecutor(_data(), workers=2)
    try:
        assert [overlaps(ex, s) for s in ("auto", True, False)] == [True, True, False]
    finally:
        ex.close()
    on_gpu = type("OnGpu", (), {"overlaps": True, "overlap_pays": True})()
    assert [overlaps(on_gpu, s) for s in ("auto", True, False)] == [True, True, False]
    shared = type("Shared", (), {"overlaps": True, "overlap_pays": False})()
    assert [overlaps(shared, s) for s in ("auto", True, False)] == [False, True, False]
    assert not overlaps(InlineExecutor(_data()), True)  # evaluates when asked, whatever the setting


def test_an_overlapped_evaluation_scores_its_own_rounds_weights_when_a_method_aggregates_in_place(
    tmp_path, write_scenario, monkeypatch
):
    """A method may write its new aggregate into its state's tensors in place. Round 1's evaluation is held here
    until round 2 has been aggregated; its jobs hold copies, so it still scores round 1's weights (the rows equal a
    run without overlap, where the evaluation ends before round 2 starts)."""
    from iotfl_sim.algorithms.fedavg import FedAvg

    aggregated = threading.Event()
    aggregate, score = FedAvg.aggregate, Worker.score

    def in_place(self, rnd, updates):
        before = self.state
        aggregate(self, rnd, updates)
        for k, v in before.items():
            v.copy_(self.state[k])
        self.state = before
        if rnd == 1:
            aggregated.set()

    def after_the_next_aggregation(self, *args):  # the test set is one slice: the other worker trains meanwhile
        assert aggregated.wait(timeout=30)
        return score(self, *args)

    monkeypatch.setattr(FedAvg, "aggregate", in_place)
    monkeypatch.setattr(Worker, "score", after_the_next_aggregation)

    def run(name: str, overlap: bool):
        data = base_scenario(rounds=2)
        data["server"] = {"eval_every": 1, "eval_batch_size": 400}  # digits' 360 test images: one slice
        data["fleet"]["cost_model"] = "flops"
        data["executor"] = {"kind": "threads", "workers": 2, "overlap_eval": overlap}
        assert main(["run", str(write_scenario(data, f"{name}.yaml")), "--out", str(tmp_path / name), "--quiet"]) == 0
        return rounds(only_run(tmp_path / name))

    aggregated.set()  # alone: each evaluation ends before the next round starts
    alone = run("alone", False)
    aggregated.clear()
    assert run("beside", True) == alone and alone[0]["acc_full"] != alone[1]["acc_full"]
