"""``executor: auto``: usable cores (affinity, cgroup quota), the choice and its why, and a default run that
takes worker threads computes inline's bits; pool workers never re-run an unguarded ``__main__`` script."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from conftest import base_scenario

from iotfl_sim.cli import main
from iotfl_sim.exec import auto
from iotfl_sim.exec import cores as cores_module
from iotfl_sim.exec.auto import HostWork, choose
from iotfl_sim.exec.cores import SHARE_ENV, Cores, available_cores, cgroup_quota
from iotfl_sim.study import read_study, sweep
from iotfl_sim.study.dispatch import run_environment

ROOT = Path(__file__).resolve().parents[1]


def _tree(tmp_path: Path, proc: str, files: dict[str, str]) -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (tmp_path / "proc_cgroup").write_text(proc)
    return root, tmp_path / "proc_cgroup"


def test_cgroup_v2_quota_is_the_tightest_level_on_the_process_path(tmp_path):
    root, proc = _tree(tmp_path, "0::/kubepods/pod1/c1\n", {
        "cpu.max": "max 100000",
        "kubepods/cpu.max": "400000 100000",  # 4 CPUs for the pods
        "kubepods/pod1/cpu.max": "150000 100000",  # 1.5 for this pod
        "kubepods/pod1/c1/cpu.max": "max 100000",
    })  # fmt: skip
    assert cgroup_quota(root, proc) == 1.5
    cores = available_cores(root, proc)
    assert cores.quota == 1.5 and cores.usable == 1  # 1.5 CPUs keep one single-thread worker busy, not two


def test_cgroup_v1_cpu_controller_and_no_limit(tmp_path):
    root, proc = _tree(tmp_path, "4:memory:/x\n3:cpu,cpuacct:/docker/abc\n", {
        "cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "200000",
        "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000",
        "cpu,cpuacct/cpu.cfs_quota_us": "-1",  # the root: no limit
        "cpu,cpuacct/cpu.cfs_period_us": "100000",
    })  # fmt: skip
    assert cgroup_quota(root, proc) == 2.0
    root2, proc2 = _tree(tmp_path / "b", "0::/\n", {"cpu.max": "max 100000"})
    assert cgroup_quota(root2, proc2) is None
    assert cgroup_quota(tmp_path / "nowhere", tmp_path / "no_proc_file") is None  # not Linux, or no cgroup fs
    cores = available_cores(root2, proc2)
    assert cores.quota is None and cores.usable == cores.affinity >= 1


def test_host_work_seconds_by_hand():
    w = HostWork(train_flops=4e10, train_steps=1000, eval_flops=2e10)
    assert w.seconds() == pytest.approx(6e10 / auto.HOST_FLOPS_PER_S + 1000 * auto.HOST_STEP_S)


def test_choice_by_cores_work_model_and_gpu():
    big = HostWork(auto.HOST_FLOPS_PER_S * 2 * auto.POOL_PAYS_AFTER_S, 0, 0)  # twice the pool's threshold
    medium = HostWork(auto.HOST_FLOPS_PER_S * 0.5 * auto.POOL_PAYS_AFTER_S, 0, 0)  # threads pay, a pool does not
    tiny = HostWork(auto.HOST_FLOPS_PER_S * 0.5 * auto.THREADS_PAY_AFTER_S, 0, 0)
    assert auto.THREADS_PAY_AFTER_S < 0.5 * auto.POOL_PAYS_AFTER_S
    four, one = Cores(4, 8, 4.0), Cores(1, 1, None)
    c = choose("auto", None, 1, False, four, medium)
    assert (c.kind, c.workers) == ("threads", 4) and "4 usable cores" in c.why and "cgroup CPU limit 4" in c.why
    assert choose("auto", None, 1, False, four, big).kind == "threads"
    assert (choose("auto", None, 2, False, four, big).workers) == 2  # 2 threads per job: 2 workers fill 4 cores
    assert choose("auto", None, 1, False, four, tiny).kind == "inline"
    # dropout: threads cannot share the global RNG, so a pool where it pays and inline where it does not
    random_big, random_medium = (HostWork(w.train_flops, 0, 0, draws_rng=True) for w in (big, medium))
    p = choose("auto", None, 1, False, four, random_big)
    assert (p.kind, p.workers) == ("pool", 4) and "random modules" in p.why
    assert choose("auto", None, 1, False, four, random_medium).kind == "inline"
    assert choose("auto", None, 1, False, one, big).kind == "inline"  # no room for a second worker
    assert choose("auto", None, 1, False, four, None).kind == "inline"  # nothing known: no workers
    long = HostWork(auto.HOST_FLOPS_PER_S * 4 * auto.FUSED_PAYS_AFTER_S, 0, 0)  # 4 cores: the GPU pays
    gpu = choose("auto", None, 1, True, four, long)  # fused, with a host thread per core beside
    assert (gpu.kind, gpu.workers) == ("fused", 4) and "CUDA" in gpu.why and "4 usable cores" in gpu.why
    assert choose("auto", None, 2, True, four, long).workers == 2
    small = choose("auto", None, 1, True, four, tiny)  # too little to pay for the GPU's start: the CPU's choice
    assert small.kind == "inline" and "Not the CUDA GPU's fused trainer" in small.why
    named = choose("pool", 3, 1, True, one, tiny)  # a kind the scenario names is kept as it is, with no why
    assert (named.kind, named.workers, named.why) == ("pool", 3, "")



def test_the_fused_trainer_on_a_cpu_records_its_worker_count_and_nothing_else_does():
    """On a CPU the fused trainer's pool cuts every group into one share per worker, so the count decides the bits:
    the run records it (``Choice.pinned``, written into scenario.resolved.yaml). Nowhere else does a count matter."""
    three, work = Cores(3, 4, None), HostWork(1e15, 1e4, 0)
    cpu = choose("fused", None, 1, False, three, work)
    assert (cpu.kind, cpu.workers, cpu.pinned()) == ("fused", 3, {"workers": 3})  # the usable cores, as pool's default
    assert choose("fused", 5, 1, False, three, work).pinned() == {"workers": 5}  # a count the scenario names is kept
    assert choose("fused", None, 1, True, three, work).pinned() == {}  # on CUDA the host threads give inline's bits
    for kind in ("inline", "threads", "pool", "auto"):
        assert choose(kind, None, 1, False, three, work).pinned() == {}, kind


def _job(forward_per_sample: float, samples: float, clients: int, rounds: int, batch: int) -> HostWork:
    """A job's estimate as the engine makes it (``Simulation._host_work``): 3x forward FLOPs per trained sample."""
    tasks = clients * rounds
    return HostWork(3 * forward_per_sample * samples * tasks, -(-samples // batch) * tasks, 0.0)


# the two jobs of benchmarks/fused_cuda.md (peers.py): forward FLOPs per sample from its trainer table (MFLOP per
# step / batch 10), samples per client as the runs split them (FEMNIST over 1,000 devices; MNIST over 100)
IOT = _job(58.26e6, 14.7, clients=100, rounds=5, batch=10)  # fused 1.23x (1.46x loaded) the threads' wall time
CONV = _job(79.95e6, 600, clients=10, rounds=3, batch=50)  # fused 1.01x (0.86x loaded)
H200_HOST = Cores(16, 16, None)


def test_on_cuda_auto_takes_the_fused_trainer_only_where_its_benchmark_shows_it_pays():
    # by hand: IoT 3 x 58.26e6 x 14.7 x 500 / 40e9 = 32.1 s + 1,000 steps x 2 ms = 34.1 s; on 16 threads 2.1 s;
    # conv 3 x 79.95e6 x 600 x 30 / 40e9 = 107.9 s + 360 x 2 ms = 108.7 s, on 16 threads 6.8 s; threshold 6 s
    assert IOT.train_seconds() == pytest.approx(34.1, abs=0.1) and CONV.train_seconds() == pytest.approx(108.7, abs=0.1)
    iot, conv = choose("auto", None, 1, True, H200_HOST, IOT), choose("auto", None, 1, True, H200_HOST, CONV)
    assert (iot.kind, iot.workers) == ("threads", 16) and "2.1 s on 16 host thread(s)" in iot.why
    assert (conv.kind, conv.workers) == ("fused", 16) and "6.8 s on 16 host thread(s)" in conv.why
    # fewer host cores train slower: on 4 the IoT job's 8.5 s of threads pays for the GPU's start
    assert choose("auto", None, 1, True, Cores(4, 4, None), IOT).kind == "fused"
    # a dropout model cannot be fused: the host's choice (a pool), however long the job
    random = HostWork(CONV.train_flops * 100, CONV.train_steps, 0.0, draws_rng=True)
    assert choose("auto", None, 1, True, H200_HOST, random).kind == "pool"


def test_a_sweeps_share_of_the_cores_does_not_change_auto_between_gpu_and_host():
    """A point and the same point alone must pick the same trainer (fused and threads differ in the last bits): the
    rule counts the cores a run alone gets, not its share in a sweep."""
    halved = Cores(8, 16, None, shared=2)
    assert halved.unshared == 16 and Cores(3, 8, 2.5).unshared == 2  # the quota rounded down, as usable is
    between = HostWork(auto.HOST_FLOPS_PER_S * 1.5 * 8 * auto.FUSED_PAYS_AFTER_S, 0, 0)  # 0.75x on 16, 1.5x on 8
    for work in (IOT, CONV, between):
        assert choose("auto", None, 1, True, halved, work).kind == choose("auto", None, 1, True, H200_HOST, work).kind
    assert choose("auto", None, 1, True, halved, between).kind == "threads"
    assert choose("auto", None, 1, True, halved, IOT).workers == 8  # its host threads do use only its share


def test_auto_never_takes_the_fused_trainer_on_a_cpu():
    for work in (None, IOT, CONV, HostWork(1e18, 1e9, 1e18), HostWork(1e18, 1e9, 1e18, draws_rng=True)):
        for cores in (Cores(1, 1, None), H200_HOST, Cores(64, 64, None)):
            assert choose("auto", None, 1, False, cores, work).kind != "fused"

def _run(tmp_path, write_scenario, name: str, executor: dict | None, quiet: bool = True) -> tuple[list[dict], dict]:
    extra = {} if executor is None else {"executor": executor}
    data = base_scenario(
        seed=5, rounds=2, clients_per_round=4, model={"family": "cnn_small"},
        algorithm={"name": "heterofl", "mode": "fix", "proportions": "a1-b1"},
        server={"eval_every": 1, "bn_calibration_samples": 200}, local={"epochs": 1, "batch_size": 16, "lr": 0.05},
        **extra,
    )  # fmt: skip
    out = tmp_path / name
    args = ["run", str(write_scenario(data, f"{name}.yaml")), "--out", str(out)]
    assert main([*args, "--quiet"] if quiet else args) == 0
    (path,) = list(out.iterdir())
    rows = [{k: v for k, v in r.items() if not k.startswith("host_")} for r in csv.DictReader((path / "rounds.csv").open())]
    return rows, json.loads((path / "summary.json").read_text())


def test_a_run_without_executor_block_says_why_inline(tmp_path, write_scenario, capsys):
    rows, summary = _run(tmp_path, write_scenario, "small", None, quiet=False)
    assert summary["executor"]["kind"] == "inline" and "estimated host work" in summary["executor"]["why"]
    assert capsys.readouterr().err.count("note: executor: auto: inline") == 1


@pytest.mark.skipif(available_cores().usable < 2, reason="auto takes worker threads only with 2 or more usable cores")
def test_a_default_run_that_takes_threads_gives_inline_bits(tmp_path, write_scenario, monkeypatch):
    monkeypatch.setattr(auto, "THREADS_PAY_AFTER_S", 0.0)  # this tiny run would pay: auto takes worker threads
    threaded, summary = _run(tmp_path, write_scenario, "auto", None)
    assert summary["executor"]["kind"] == "threads" and summary["executor"]["workers"] == available_cores().usable
    inline, _ = _run(tmp_path, write_scenario, "inline", {"kind": "inline"})
    assert threaded == inline and len(inline) == 2


def test_pool_workers_do_not_rerun_an_unguarded_main_script(tmp_path):
    """A script that makes a pool at top level (no ``if __name__ == "__main__":``): each worker would re-run it
    and start a pool of its own while bootstrapping (RuntimeError in every worker, the pool refilling forever)."""
    script = tmp_path / "unguarded.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        import torch
        from iotfl_sim.exec.base import NumericData
        from iotfl_sim.exec.pool import PoolExecutor
        x, y = torch.zeros(8, 1, 8, 8), torch.zeros(8, dtype=torch.long)
        pool = PoolExecutor(NumericData(x, y, x, x, y), 2, 1)
        print("squares", pool.pool.map(abs, [-1, -2, -3]))
        pool.close()
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("squares [1, 2, 3]") == 1 and "RuntimeError" not in done.stderr


def test_a_sweeps_parallel_runs_divide_the_usable_cores(tmp_path, monkeypatch):
    root, proc = _tree(tmp_path, "0::/\n", {"cpu.max": "max 100000"})
    monkeypatch.setattr(cores_module, "_affinity", lambda: 4)
    monkeypatch.setenv(SHARE_ENV, "2")
    c = available_cores(root, proc)
    assert (c.usable, c.shared) == (2, 2) and "shared by 2 parallel runs" in c.why()
    monkeypatch.setenv(SHARE_ENV, "8")
    assert available_cores(root, proc).usable == 1  # never fewer than one
    monkeypatch.setenv(SHARE_ENV, "two")
    assert available_cores(root, proc).usable == 4 and "shared" not in available_cores(root, proc).why()
    env = run_environment(3)
    assert env[SHARE_ENV] == "3" and env["PATH"] == os.environ["PATH"]


def test_runs_of_a_parallel_sweep_with_executor_auto_count_their_share(tmp_path):
    """Two runs at a time, each with executor: auto: each sizes its workers by half the cores (here that leaves
    one core each, so inline), not by all of them (2 runs x 2 threads on 2 cores)."""
    base = base_scenario(rounds=1)
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base, sort_keys=False))
    study = {"name": "share", "base": "base.yaml", "grid": {"seed": [1, 2]}, "workers": 2, "executor": {"kind": "auto"}}
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(study, sort_keys=False))
    res = sweep(read_study(tmp_path / "study.yaml"), tmp_path / "out", progress=False)
    assert [r["status"] for r in res.records] == ["done", "done"]
    for r in res.records:
        why = json.loads((res.folder / r["run_dir"] / "summary.json").read_text())["executor"]["why"]
        assert "shared by 2 parallel runs" in why, why
