"""Executors: the process pool gives the same bits as the inline executor; the shared pieces by hand."""

from __future__ import annotations

import csv

import pytest
import torch
from conftest import base_scenario

from iotfl_sim.cli import main
from iotfl_sim.exec.base import EvalJob, NumericData, Worker, batch_aligned_slices
from iotfl_sim.fl.evaluate import evaluate, running_statistics
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec


def test_batch_aligned_slices_cover_everything_once_on_batch_boundaries():
    for n, bs, parts in [(1000, 64, 2), (10, 3, 4), (5, 10, 3), (100, 10, 7), (1, 1, 1)]:
        slices = batch_aligned_slices(n, bs, parts)
        assert slices[0][0] == 0 and slices[-1][1] == n
        assert all(a < b for a, b in slices) and len(slices) <= parts
        assert all(s[1] == t[0] for s, t in zip(slices, slices[1:], strict=False))
        assert all(a % bs == 0 for a, _ in slices)
    assert batch_aligned_slices(1000, 64, 2) == [(0, 512), (512, 1000)]  # 16 batches: 8 + 8


def test_worker_evaluation_matches_the_one_call_evaluation():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(90, 1, 8, 8, generator=g), torch.randint(0, 10, (90,), generator=g)
    recipe, spec = ModelRecipe("cnn_small", 10, 1, (8, 8)), SubmodelSpec(0.5)
    torch.manual_seed(1)
    state = recipe.build(spec).state_dict()
    want = evaluate(recipe, spec, state, x[:40], x[40:], y[40:], 16)
    w = Worker(NumericData(x[:40], y[:40], x[:40], x[40:], y[40:]), threads=1)
    job = EvalJob(recipe, spec, state, 16)
    assert w.evaluate([job]) == [want]
    # calibrating in two batch-aligned slices, or scoring in two and adding in order, gives the same bits
    stats = running_statistics(w.calibrate([job], 0, 40))
    split = running_statistics([w.calibrate([job], 0, 32)[0], w.calibrate([job], 32, 40)[0]])
    assert stats and all("running_" in k or "num_batches" in k for k in stats)
    assert stats.keys() == split.keys() and all(torch.equal(stats[k], split[k]) for k in stats)
    parts = w.score([job], [stats], 0, 32)[0] + w.score([job], [stats], 32, 50)[0]
    assert parts == w.score([job], [stats], 0, 50)[0]


def _rows(tmp_path, write_scenario, name: str, executor: dict) -> list[dict]:
    data = base_scenario(
        seed=3,
        rounds=2,
        clients_per_round=4,
        model={"family": "cnn_small"},
        algorithm={"name": "heterofl", "mode": "fix", "proportions": "a1-b1"},
        server={"eval_every": 1, "bn_calibration_samples": 200, "eval_batch_size": 128},
        local={"epochs": 1, "batch_size": 16, "lr": 0.05},
        executor=executor,
    )
    out = tmp_path / name
    assert main(["run", str(write_scenario(data, f"{name}.yaml")), "--out", str(out), "--quiet"]) == 0
    (path,) = list(out.iterdir())
    rows = list(csv.DictReader((path / "rounds.csv").open()))
    return [{k: v for k, v in r.items() if not k.startswith("host_")} for r in rows]


@pytest.mark.parametrize("kind", ["pool", "threads"])
def test_pool_and_thread_executors_give_the_inline_bits(tmp_path, write_scenario, kind):
    inline = _rows(tmp_path, write_scenario, "inline", {"kind": "inline"})
    parallel = _rows(tmp_path, write_scenario, kind, {"kind": kind, "workers": 2})
    assert inline == parallel
    assert float(inline[-1]["acc_avg"]) > 0 and inline[-1]["acc_a"] != inline[-1]["acc_b"]


def test_executor_config_errors(tmp_path, write_scenario, capsys):
    data = base_scenario(executor={"kind": "inline", "workers": 2})
    assert main(["validate", str(write_scenario(data))]) == 2
    err = capsys.readouterr().err
    assert "executor" in err and "kind: threads" in err
    data = base_scenario(executor={"kind": "gpu-cluster"})
    assert main(["validate", str(write_scenario(data))]) == 2
    assert "executor.kind" in capsys.readouterr().err


@pytest.mark.parametrize("threads", [1, 2])
def test_inline_executor_pins_and_restores_threads(threads):
    from iotfl_sim.exec.inline import InlineExecutor

    before = torch.get_num_threads()
    x = torch.zeros(4, 1, 8, 8)
    ex = InlineExecutor(NumericData(x, torch.zeros(4, dtype=torch.long), x, x, torch.zeros(4, dtype=torch.long)), threads)
    assert torch.get_num_threads() == threads
    ex.close()
    assert torch.get_num_threads() == before


def test_a_run_whose_data_cannot_load_gives_the_callers_threads_back(tmp_path, monkeypatch):
    """The run pins torch's threads before loading its data (exec.glibc_heap: no early OpenMP arenas); a load that
    fails must not leave the caller's process pinned."""
    import yaml

    from iotfl_sim.core.errors import ScenarioError
    from iotfl_sim.scenario.loader import load_scenario, resolve_groups
    from iotfl_sim.scenario.resolved import ResolvedScenario
    from iotfl_sim.sim.setup import build_simulation

    monkeypatch.setenv("IOTFL_DATA", str(tmp_path))  # no MNIST files there
    sc = load_scenario(text=yaml.safe_dump(base_scenario(data={"dataset": "mnist"}, executor={"threads": 1})))
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with pytest.raises(ScenarioError, match="mnist"):
            build_simulation(ResolvedScenario(sc, resolve_groups(sc)))
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


@pytest.mark.xdist_group("ray")  # one local Ray cluster at a time (test_sweep's Ray tests)
def test_ray_executor_gives_the_inline_bits(tmp_path, write_scenario, ray_cluster):
    pytest.importorskip("ray")
    inline = _rows(tmp_path, write_scenario, "inline", {"kind": "inline"})
    on_ray = _rows(tmp_path, write_scenario, "ray", {"kind": "ray", "workers": 2})
    assert inline == on_ray


def test_eval_subset_scores_a_fixed_seeded_subset(tmp_path, write_scenario):
    from iotfl_sim.scenario.loader import load_scenario
    from iotfl_sim.sim.setup import prepare_numerics

    # inline named: on a CUDA machine the default (auto) may be the fused trainer, which holds its data otherwise
    data = base_scenario(server={"eval_subset": 50}, executor={"kind": "inline"})
    sc = load_scenario(write_scenario(data))
    a, b = prepare_numerics(sc, sc.num_devices()), prepare_numerics(sc, sc.num_devices())
    assert a.test_subset is not None and len(a.test_subset) == 50
    assert torch.equal(a.test_subset, b.test_subset) and len(set(a.test_subset.tolist())) == 50
    ex = a.make_executor(sc.executor)
    try:
        assert len(ex.worker.data.y_test) == 50
        assert torch.equal(ex.worker.data.y_test, a.dataset.y_test[a.test_subset])
    finally:
        ex.close()


def test_fused_executor_runs_a_scenario_close_to_inline(tmp_path, write_scenario):
    inline = _rows(tmp_path, write_scenario, "inline", {"kind": "inline"})
    fused = _rows(tmp_path, write_scenario, "fused", {"kind": "fused"})
    assert [r["round"] for r in fused] == [r["round"] for r in inline]
    for a, b in zip(inline, fused, strict=True):  # simulated columns are identical; metrics within tolerance
        assert a["sim_time_s"] == b["sim_time_s"] and a["energy_j"] == b["energy_j"]
        assert abs(float(a["acc_avg"]) - float(b["acc_avg"])) <= 0.02
        assert float(a["train_loss"]) == pytest.approx(float(b["train_loss"]), rel=1e-3)


@pytest.mark.parametrize("kind", ["pool", "threads"])
def test_make_executor_builds_the_configured_pool_and_it_matches_inline_job_by_job(write_scenario, kind):
    """The scenario-level test above would pass if `kind: pool` (or threads) silently ran inline; this one checks
    the class and compares the executor's own results, job by job, with the inline executor's."""
    import numpy as np

    from iotfl_sim.exec.inline import InlineExecutor
    from iotfl_sim.exec.pool import PoolExecutor
    from iotfl_sim.exec.threads import ThreadExecutor
    from iotfl_sim.fl.train import TrainJob
    from iotfl_sim.scenario.loader import load_scenario
    from iotfl_sim.scenario.model import Executor as ExecutorConfig
    from iotfl_sim.sim.setup import prepare_numerics

    sc = load_scenario(write_scenario(base_scenario(server={"bn_calibration_samples": 100})))
    num = prepare_numerics(sc, sc.num_devices())
    recipe, spec = ModelRecipe("cnn_small", 10, 1, (8, 8)), SubmodelSpec(0.5)
    torch.manual_seed(0)
    w = recipe.build(spec).state_dict()
    jobs = [
        TrainJob(key=i, recipe=recipe, spec=spec, weights=w, indices=np.asarray(num.parts[i]), epochs=1, batch_size=16,
                 lr=0.05, momentum=0.9, weight_decay=5e-4, clip_grad_norm=1.0, label_mask=None, seed=10 + i)
        for i in range(3)
    ]
    evals = [EvalJob(recipe, spec, w, 64), EvalJob(recipe, SubmodelSpec(1.0), recipe.build(SubmodelSpec(1.0)).state_dict(), 64)]
    pool = num.make_executor(ExecutorConfig(kind=kind, workers=2))
    try:
        assert isinstance(pool, {"pool": PoolExecutor, "threads": ThreadExecutor}[kind]) and pool.workers == 2
        got, got_eval = pool.run(jobs), pool.evaluate(evals)
    finally:
        pool.close()
    inline = num.make_executor(ExecutorConfig(kind="inline"))
    try:
        assert isinstance(inline, InlineExecutor)
        want, want_eval = inline.run(jobs), inline.evaluate(evals)
    finally:
        inline.close()
    assert [r.key for r in got] == [0, 1, 2]
    for a, b in zip(got, want, strict=True):
        assert a.loss == b.loss and all(torch.equal(a.state[k], b.state[k]) for k in a.state)
    assert got_eval == want_eval
    assert got[0].state["classifier.weight"].shape == want[0].state["classifier.weight"].shape
    assert not torch.equal(got[0].state["classifier.weight"], got[1].state["classifier.weight"])  # jobs differ


def test_bn_calibration_cap_draws_a_seeded_subset_and_all_is_the_full_pass(write_scenario):
    from iotfl_sim.scenario.loader import load_scenario
    from iotfl_sim.sim.setup import prepare_numerics

    def calib(**server):
        sc = load_scenario(write_scenario(base_scenario(server=server)))
        num = prepare_numerics(sc, sc.num_devices())
        return num.calib_x, num.dataset.x_train

    capped, x_train = calib(bn_calibration_samples=300)
    assert len(capped) == 300 and len(x_train) > 300
    rows = {tuple(r.flatten().tolist()) for r in x_train}
    assert all(tuple(r.flatten().tolist()) in rows for r in capped)  # real training samples
    assert torch.equal(calib(bn_calibration_samples=300)[0][:], capped[:])  # same seed, same draw
    full, x_train = calib(bn_calibration_samples="all")
    assert torch.equal(full[:], x_train[:])
    default, x_train = calib()  # digits has fewer training samples than the default cap: all of them
    assert len(x_train) < 2000 and torch.equal(default[:], x_train[:])


def test_evaluation_layout_does_not_change_the_scores():
    """Scoring runs channels_last; the same model in the default layout gives the same predictions."""
    from iotfl_sim.fl.evaluate import accuracy, prepared

    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(64, 1, 8, 8, generator=g), torch.randint(0, 10, (64,), generator=g)
    recipe, spec = ModelRecipe("cnn_small", 10, 1, (8, 8), norm="none"), SubmodelSpec(1.0)
    torch.manual_seed(2)
    state = recipe.build(spec).state_dict()
    model = prepared(recipe, spec, state)
    assert model.features[0].conv.weight.is_contiguous(memory_format=torch.channels_last)
    plain = recipe.build(spec, track_bn=True)
    plain.load_state_dict(state)
    plain.eval()
    with torch.inference_mode():
        want = plain(x).argmax(1)
    acc, _ = accuracy(model, x, y, 16)
    assert acc == float((want == y).float().mean())


def test_executor_config_refuses_workers_without_a_worker_kind():
    from iotfl_sim.scenario.model import Executor as ExecutorConfig

    assert ExecutorConfig().kind == "auto"
    with pytest.raises(ValueError, match="workers is for kind: threads, pool or ray"):
        ExecutorConfig(workers=2)
