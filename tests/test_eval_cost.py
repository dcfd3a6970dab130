"""Evaluation costs its forward passes and little else (issue 22), and calibrating in slices keeps the bits.

Static-BN calibration is recorded per batch and accumulated afterwards (``fl.evaluate.running_statistics``), so the
pool can split it over workers: the accumulated statistics must equal what PyTorch's own BatchNorm keeps with
``momentum=None`` after one pass (the procedure evaluation used before, and HeteroFL's). The structural checks
count model constructions, weight loads and forward calls per evaluation (never wall time).
"""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch
from torch import nn

from iotfl_sim.exec.base import EvalJob, NumericData, Worker, batch_aligned_slices, parallel_evaluate
from iotfl_sim.fl import evaluate as evaluate_module
from iotfl_sim.fl.evaluate import batch_figures_group, eval_skeleton, running_statistics
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.scoring_model import scoring_model
from iotfl_sim.fl.submodel import SubmodelSpec, slice_state


def _native(model: nn.Module, batches: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """The statistics PyTorch's BatchNorm keeps over ``batches`` with momentum=None, the rest of the model in eval
    mode (the Scaler is then the identity): static-BN calibration as one sequential pass."""
    model = copy.deepcopy(model).eval()
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.reset_running_stats()
            m.momentum = None
            m.train()
    with torch.no_grad():
        for x in batches:
            model(x)
    return {k: v for k, v in model.state_dict().items() if "running_" in k or "num_batches_tracked" in k}


def _equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize(
    ("norm", "shape", "channels_last"),
    [
        (nn.BatchNorm2d, (7, 5, 3, 3), True),  # what evaluation runs: images in channels_last
        (nn.BatchNorm1d, (9, 6), False),  # fully connected heads
        (nn.BatchNorm1d, (9, 6, 4), False),  # 1-d convolutions
    ],
)
def test_calibrating_in_slices_keeps_pytorchs_own_statistics_bit_for_bit(norm, shape, channels_last):
    g = torch.Generator().manual_seed(0)
    channels = shape[1]
    # far from 0 mean / 1 variance, different per channel, and 11 batches so 1/t is inexact in float32
    batches = [torch.randn(*shape, generator=g) * 30 + torch.arange(channels).reshape(1, -1, *[1] * (len(shape) - 2)) * 7
               for _ in range(11)]
    if channels_last:
        batches = [b.contiguous(memory_format=torch.channels_last) for b in batches]
    model = nn.Sequential(norm(channels, momentum=None))
    want = _native(model, batches)
    x = torch.cat(batches)
    n = shape[0]
    for cuts in ([0, 11], [0, 5, 11], [0, 1, 2, 10, 11]):  # slices of whole batches, as the pool cuts them
        parts = [batch_figures_group([model], [{}], x[a * n : b * n], n)[0] for a, b in zip(cuts[:-1], cuts[1:], strict=False)]
        got = running_statistics(parts)
        assert _equal(got, want), cuts
    assert int(want["0.num_batches_tracked"]) == 11


class _Twice(nn.Module):
    """A BatchNorm layer run twice per batch and one never run: what the table of one row per batch cannot hold."""

    def __init__(self) -> None:
        super().__init__()
        self.norm, self.unused = nn.BatchNorm1d(4), nn.BatchNorm1d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.norm(x) * 3 + 1)


def test_a_layer_run_twice_per_batch_or_never_is_recorded_call_by_call_with_pytorchs_own_statistics():
    g = torch.Generator().manual_seed(2)
    batches = [torch.randn(6, 4, generator=g) * 5 + 2 for _ in range(3)]
    model = _Twice()
    got = running_statistics(batch_figures_group([model], [{}], torch.cat(batches), 6))
    want = _native(model, batches)
    assert int(want["norm.num_batches_tracked"]) == 6 and int(want["unused.num_batches_tracked"]) == 0
    assert _equal(got, want)


def _heterofl(rates: tuple[float, ...]) -> tuple[ModelRecipe, list[EvalJob]]:
    """HeteroFL's nested submodels of one global model (BN, Scaler), each its slice of the global weights."""
    recipe = ModelRecipe("cnn_small", 10, 1, (8, 8), "bn", True)
    torch.manual_seed(0)
    full = recipe.build(SubmodelSpec(1.0)).state_dict()
    jobs = []
    for r in rates:
        spec = SubmodelSpec(r)
        jobs.append(EvalJob(recipe, spec, slice_state(full, recipe.shapes(spec)), 10))
    return recipe, jobs


def _data(calib: int = 50, test: int = 30) -> NumericData:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(calib + test, 1, 8, 8, generator=g) * 2 + 0.5
    y = torch.randint(0, 10, (calib + test,), generator=g)
    return NumericData(x[:calib], y[:calib], x[:calib], x[calib:], y[calib:])


def test_evaluation_calibrates_as_one_sequential_pass_of_pytorchs_batchnorm():
    # the numbers evaluation reported before issue 22, derived here with PyTorch's own BatchNorm update
    recipe, jobs = _heterofl((1.0, 0.5))
    d = _data()
    for job in jobs:
        model = eval_skeleton(recipe, job.spec)
        model.load_state_dict(job.state, strict=False)
        batches = [d.calib_x[s : s + 10].contiguous(memory_format=torch.channels_last) for s in range(0, 50, 10)]
        want = _native(model, batches)
        figures = Worker(d, 1).calibrate([job], 0, 50)
        assert _equal(running_statistics(figures), want)
        split = [Worker(d, 1).calibrate([job], a, b)[0] for a, b in batch_aligned_slices(50, 10, 2)]
        assert _equal(running_statistics(split), want)


class Counts:
    """Model constructions, weight loads and forward calls of every evaluation skeleton, while installed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, models: list[nn.Module]) -> None:
        self.builds = 0
        self.loads: dict[int, int] = {}
        self.forwards = {id(m): 0 for m in models}
        build, load, load_weights = ModelRecipe.build, nn.Module.load_state_dict, evaluate_module.load_weights

        def counted_build(recipe, *a, **k):
            self.builds += 1
            return build(recipe, *a, **k)

        def counted_load(module, *a, **k):
            self.loads[id(module)] = self.loads.get(id(module), 0) + 1
            return load(module, *a, **k)

        def counted_load_weights(module, *a, **k):
            self.loads[id(module)] = self.loads.get(id(module), 0) + 1
            return load_weights(module, *a, **k)

        monkeypatch.setattr(ModelRecipe, "build", counted_build)
        monkeypatch.setattr(nn.Module, "load_state_dict", counted_load)
        monkeypatch.setattr(evaluate_module, "load_weights", counted_load_weights)
        self._hooks = [m.register_forward_pre_hook(lambda mod, _: self._count(mod)) for m in models]

    def _count(self, module: nn.Module) -> None:
        self.forwards[id(module)] += 1

    def remove(self) -> None:
        for h in self._hooks:
            h.remove()


@pytest.mark.parametrize("parts", [1, 2])
def test_an_evaluation_builds_no_model_loads_each_once_per_task_and_runs_each_batch_once(monkeypatch, parts):
    """parts 1: the inline executor's path (one task per model: calibrate, then score); 2: the pool's, calibration
    and scoring each cut in two slices. Counts, not time: a regression that rebuilds a model, loads weights again or
    runs a batch twice fails here whatever the host's speed."""
    recipe, jobs = _heterofl((1.0, 0.5, 0.25))
    d = _data()
    w = Worker(d, 1)
    want = w.evaluate(jobs)  # builds and caches the evaluation skeletons and their scoring twins
    models = [eval_skeleton(recipe, j.spec) for j in jobs]
    twins = [scoring_model(m) for m in models]
    assert all(t is not m for t, m in zip(twins, models, strict=True))  # scored by their twins
    counts = Counts(monkeypatch, models + twins)
    try:
        got = parallel_evaluate(jobs, 50, 30, parts, w.map)
    finally:
        counts.remove()
    assert got == want
    assert counts.builds == 0
    calib_batches, test_batches = 5, 3  # 50 and 30 samples in batches of 10
    tasks_per_model = 1 if parts == 1 else 2 * parts  # evaluate_group, or calibration slices + scoring slices
    assert [counts.loads.get(id(m), 0) for m in models] == [tasks_per_model] * len(models)
    assert [counts.loads.get(id(t), 0) for t in twins] == [0] * len(twins)  # refilled in place (fl.scoring_model)
    assert [counts.forwards[id(m)] for m in models] == [calib_batches] * len(models)  # calibration: the skeleton
    assert [counts.forwards[id(t)] for t in twins] == [test_batches] * len(twins)  # scoring: its twin
    assert sum(counts.loads.values()) == tasks_per_model * len(models)  # no other module loaded


def test_eval_every_thins_the_accuracy_rows_and_delays_crossings_to_the_next_evaluated_round(tmp_path, write_scenario):
    import csv
    import json

    from conftest import base_scenario

    from iotfl_sim.cli import main

    def run(every: int) -> tuple[list[dict], dict]:
        data = base_scenario(rounds=4, server={"eval_every": every, "target_accuracies": [0.0, 0.3, 0.99]},
                             executor={"kind": "inline"})
        data["data"].update(train_samples=256, test_samples=120)  # the rows' equality and the crossings hold at any size
        out = tmp_path / f"every{every}"
        assert main(["run", str(write_scenario(data, f"every{every}.yaml")), "--out", str(out), "--quiet"]) == 0
        (path,) = list(out.iterdir())
        return list(csv.DictReader((path / "rounds.csv").open())), json.loads((path / "summary.json").read_text())

    each, each_summary = run(1)
    thin, thin_summary = run(3)
    evaluated = {3, 4}  # every third round and the last
    for a, b in zip(each, thin, strict=True):
        for k in a:
            if k.startswith(("acc_", "loss_")):
                assert b[k] == (a[k] if int(a["round"]) in evaluated else ""), (a["round"], k)
            elif not k.startswith("host_"):  # evaluation is host time only: every simulated figure is the same
                assert a[k] == b[k], k
    for t, got in thin_summary["to_accuracy"]["acc_full"].items():
        # the first evaluated row at or above the target, whatever the unevaluated rows held
        first = next((r for r in each if int(r["round"]) in evaluated and float(r["acc_full"]) >= float(t)), None)
        assert got["round"] == (None if first is None else int(first["round"])), t
        assert got["sim_time_s"] == (None if first is None else pytest.approx(float(first["sim_time_s"]), abs=1e-6)), t
    assert each_summary["to_accuracy"]["acc_full"]["0"]["round"] == 1  # reached at once when every round is scored
    assert thin_summary["to_accuracy"]["acc_full"]["0"]["round"] == 3


def test_a_pool_task_travels_as_the_same_bytes_and_a_sliced_view_only_with_its_own_elements():
    import pickle

    from iotfl_sim.exec.pool import _compact_jobs, _packed

    _, jobs = _heterofl((1.0, 0.5))
    stats = [{"n.running_mean": torch.tensor([1.5, -2.0]), "n.num_batches_tracked": torch.tensor(7)}]
    task = (jobs, stats, 10, 30)
    got_jobs, got_stats, start, stop = pickle.loads(_packed((tuple, pickle.dumps(task))))  # tuple(x): x itself
    assert (start, stop) == (10, 30) and got_stats[0].keys() == stats[0].keys()
    for a, b in zip(jobs, got_jobs, strict=True):
        assert (a.recipe, a.spec, a.batch_size) == (b.recipe, b.spec, b.batch_size)
        assert all(a.state[k].dtype == b.state[k].dtype and torch.equal(a.state[k], b.state[k]) for k in a.state)
    big = torch.arange(100_000, dtype=torch.float32)
    view = replace(jobs[0], state={"w": big[:10]})  # a submodel's slice of a global tensor
    (compact,) = _compact_jobs([view])
    assert torch.equal(compact.state["w"], big[:10])
    assert len(pickle.dumps(compact)) < len(pickle.dumps(view)) - 300_000  # not the 400 kB storage
