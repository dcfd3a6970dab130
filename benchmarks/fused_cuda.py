"""On a CUDA machine: the fused trainer on the GPU (what ``executor: auto`` picks there) vs worker threads on every
host core (what ``auto`` picks on the same machine without its GPU), per model family and on whole runs.

Two parts, each interleaved (threads, fused, threads, fused, ...) after one untimed warm-up:

- *trainer*: ``executor.run(jobs)`` seconds for one round of N clients of the same submodel (the cases of
  ``benchmarks/fused_trainer.py``), ``ThreadExecutor`` (one single-thread worker per usable core, inline's bits)
  vs ``FusedExecutor(device="cuda")``; max |diff| is the largest absolute difference of any trained state
  entry, fused vs threads.
- *runs*: ``iotfl-sim run`` in a fresh process, wall seconds and accuracy after the last round, on the two jobs of
  ``benchmarks/peers.py`` (conv: MNIST, 100 devices, 10 per round, 3 rounds; IoT: FEMNIST, 1,000 devices, 100 per
  round, ``cnn_small``, 5 rounds) with no ``executor:`` block (auto: the fused trainer when a GPU is present) and
  with ``executor: {kind: threads}``.

Run from the repository root on the GPU machine (IOTFL_DATA must hold mnist/ and femnist/)::

    python benchmarks/fused_cuda.py            # writes benchmarks/fused_cuda.md
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]

from fused_trainer import CASES, make_jobs, max_state_diff, step_flops, time_runs  # noqa: E402
from peers import conv_scenario, iot_scenario  # noqa: E402

from iotfl_sim.exec.base import NumericData  # noqa: E402
from iotfl_sim.exec.cores import available_cores  # noqa: E402
from iotfl_sim.exec.fused import FusedExecutor  # noqa: E402
from iotfl_sim.exec.threads import ThreadExecutor  # noqa: E402

OUT_MD = HERE / "fused_cuda.md"
RUN_JOBS = {"conv": (conv_scenario, 3), "iot": (iot_scenario, 5)}


def fmt(times: list[float]) -> str:
    return f"{min(times):.3f}; {statistics.median(times):.3f}"


def trainer_rows(clients: list[int], repetitions: int, workers: int) -> list[str]:
    rows = []
    for case in CASES:
        for n in clients:
            jobs, x, y = make_jobs(case, n)
            nd = NumericData(x, y, x, x, y)
            execs = {"threads": ThreadExecutor(nd, workers, 1), "fused": FusedExecutor(x, y, device="cuda")}
            try:
                times, res = time_runs(execs, jobs, repetitions)
            finally:
                for ex in execs.values():
                    ex.close()
            diff = max_state_diff(res["fused"], res["threads"])
            step = step_flops(jobs[0])
            ratio = min(times["fused"]) / min(times["threads"])
            print(f"{case[0]:40s} N={n:3d} threads {min(times['threads']):.3f}s fused {min(times['fused']):.3f}s "
                  f"ratio {ratio:.2f} diff {diff:.1e}", flush=True)  # fmt: skip
            rows.append(f"| {case[0]} | {n} | {case[4]} x {case[5]}, {case[6]} | {step / 1e6:.1f} | "
                        f"{fmt(times['threads'])} | {fmt(times['fused'])} | **{ratio:.2f}** | {diff:.1e} |")  # fmt: skip
    return rows


def one_run(job: str, executor: dict, work: Path) -> tuple[float, float, dict, str]:
    make, rounds = RUN_JOBS[job]
    sc = make(rounds)
    if executor:
        sc["executor"] = executor
    work.mkdir(parents=True)
    path = work / "scenario.yaml"
    path.write_text(yaml.safe_dump(sc))
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "iotfl_sim.cli", "run", str(path), "--out", str(work / "out"), "--quiet"],
                   check=True, env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])})  # fmt: skip
    wall = time.perf_counter() - t0
    (run,) = list((work / "out").iterdir())
    with (run / "rounds.csv").open() as f:
        acc = float(list(csv.DictReader(f))[-1]["acc_full"])
    summary = json.loads((run / "summary.json").read_text())
    return wall, acc, summary.get("host_time_s", {}), summary.get("executor", {}).get("why", "?")


def run_rows(jobs: list[str], repetitions: int, workers: int) -> list[str]:
    rows = []
    variants = {"auto (no executor block)": {}, f"threads, {workers} workers": {"kind": "threads", "workers": workers}}
    with tempfile.TemporaryDirectory() as tmp:
        for job in jobs:
            walls: dict[str, list[float]] = {k: [] for k in variants}
            accs: dict[str, list[float]] = {k: [] for k in variants}
            host: dict[str, list[dict]] = {k: [] for k in variants}
            chose = {}
            for rep in range(repetitions):
                for i, (name, ex) in enumerate(variants.items()):
                    wall, acc, spent, chose[name] = one_run(job, ex, Path(tmp) / f"{job}-{i}-{rep}")
                    walls[name].append(wall)
                    accs[name].append(acc)
                    host[name].append(spent)
                    print(f"{job} {name}: {wall:.1f} s, accuracy {acc:.4f} ({chose[name]})", flush=True)
            auto, threads = list(variants)
            for name in variants:
                ratio = min(walls[name]) / min(walls[threads])
                train, evaluation = (statistics.median(h.get(k, float("nan")) for h in host[name]) for k in ("train", "eval"))
                rows.append(f"| {job} | {name} | {fmt(walls[name])} | {ratio:.2f} | {train:.2f} | {evaluation:.2f} | "
                            f"{', '.join(f'{a:.4f}' for a in accs[name])} | {chose[name]} |")  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--run-repetitions", type=int, default=2)
    parser.add_argument("--jobs", nargs="*", default=list(RUN_JOBS), choices=list(RUN_JOBS))
    parser.add_argument("--out", type=Path, default=OUT_MD)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("fused_cuda.py: PyTorch sees no CUDA GPU here; run it on a GPU machine")
    torch.set_num_threads(1)
    workers = available_cores().usable
    load_before = os.getloadavg()
    trainer = trainer_rows(args.clients, args.repetitions, workers)
    runs = run_rows(args.jobs, args.run_repetitions, workers) if args.jobs else []
    load_after = os.getloadavg()
    lines = [
        "# The fused trainer on a GPU vs worker threads on every host core",
        "",
        "Generated by `python benchmarks/fused_cuda.py` on a GPU machine; the script overwrites this file.",
        "",
        f"Host: {torch.cuda.get_device_name()}, {platform.machine()} host with {workers} usable cores, torch "
        f"{torch.__version__}; load average {' '.join(f'{v:.2f}' for v in load_before)} before, "
        f"{' '.join(f'{v:.2f}' for v in load_after)} after.",
        "",
        f"## Trainer: one round of N clients of one submodel (fastest; median of {args.repetitions} seconds)",
        "",
        "SGD lr 0.05, momentum 0.9, weight decay 5e-4, clipping at 1.0, plain CE, random data of the dataset's shape. "
        f"threads: `ThreadExecutor`, {workers} single-thread workers (inline's bits); fused: `FusedExecutor` on "
        "CUDA (fused / threads below 1 = the GPU is faster).",
        "",
        "| model | N | samples x epochs, batch | fwd MFLOP per step | threads s | fused (CUDA) s | fused / threads "
        "| max abs diff |",
        "|---|---|---|---|---|---|---|---|",
        *trainer,
    ]
    if runs:
        lines += [
            "",
            f"## Runs: `iotfl-sim run` in a fresh process (fastest; median of {args.run_repetitions} wall seconds)",
            "",
            "*host train s*, *host eval s*: the run's own accounting of its training and evaluation phases (summary.json's "
            "`host_time_s`, median); the wall time adds the process's start (imports, data loading) and end.",
            "",
            "| job | executor | wall s | / threads | host train s | host eval s | accuracy after the last round (each rep) "
            "| executor chosen |",
            "|---|---|---|---|---|---|---|---|",
            *runs,
        ]
    args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
