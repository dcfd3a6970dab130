"""Executors vs the bare PyTorch loop a researcher would write: host seconds per round, identical metrics.

The job (issue 9): FedAvg on MNIST, 100 IID devices, 10 per round, E=1, B=50, the `conv` model without
norm, 5 rounds. The bare loop trains the same clients (same partition, same lr) one after another with
PyTorch's default threads and evaluates on the test set; `iotfl-sim run` runs the scenario with each
executor. Every variant runs in this one process, back to back, so the ratios compare like with like.

    IOTFL_DATA=/work/shared/datasets python benchmarks/executors.py [--rounds 5] [--workers 1 2]
"""

from __future__ import annotations

import argparse
import csv
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from iotfl_sim.cli import main as cli  # noqa: E402
from iotfl_sim.fl.data import load_dataset  # noqa: E402
from iotfl_sim.fl.recipe import ModelRecipe  # noqa: E402
from iotfl_sim.fl.submodel import SubmodelSpec  # noqa: E402

OUT_MD = ROOT / "benchmarks" / "executors.md"


def scenario(rounds: int, executor: dict) -> dict:
    return {
        "name": "executors_fedavg_mnist",
        "seed": 0,
        "rounds": rounds,
        "clients_per_round": 10,
        "fleet": {"groups": [{"name": "pi4", "profile": "raspberry_pi_4b", "count": 100}]},
        "data": {"dataset": "mnist", "partition": {"method": "iid"}},
        "model": {"family": "conv", "norm": "none", "scaler": False},
        "algorithm": {"name": "fedavg"},
        "local": {"epochs": 1, "batch_size": 50, "lr": 0.05, "momentum": 0.0, "weight_decay": 0.0},
        "server": {"eval_every": 1, "eval_batch_size": 1000},
        "output": {"progress": False, "events": "none"},
        "executor": executor,
    }


def bare_loop(rounds: int) -> float:
    """What a researcher writes by hand: sample 10 of 100 IID shards, train each, average, test."""
    ds = load_dataset("mnist", None)
    recipe = ModelRecipe("conv", 10, 1, (28, 28), "none", False)
    torch.manual_seed(0)
    model = recipe.build(SubmodelSpec(1.0))
    shards = np.array_split(np.random.default_rng(0).permutation(len(ds.y_train)), 100)
    rng = np.random.default_rng(1)
    t0 = time.perf_counter()
    for _ in range(rounds):
        glob = {k: v.clone() for k, v in model.state_dict().items()}
        acc = {k: torch.zeros_like(v) for k, v in glob.items()}
        for c in rng.choice(100, 10, replace=False):
            model.load_state_dict(glob)
            opt = torch.optim.SGD(model.parameters(), lr=0.05)
            idx = torch.as_tensor(shards[c])[torch.randperm(len(shards[c]))]
            for s in range(0, len(idx), 50):
                b = idx[s : s + 50]
                opt.zero_grad()
                F.cross_entropy(model(ds.x_train[b]), ds.y_train[b]).backward()
                opt.step()
            for k, v in model.state_dict().items():
                acc[k] += v / 10
        model.load_state_dict(acc)
        with torch.inference_mode():
            correct = sum(
                int((model(ds.x_test[s : s + 1000]).argmax(1) == ds.y_test[s : s + 1000]).sum())
                for s in range(0, len(ds.y_test), 1000)
            )
    print(f"bare loop: final accuracy {correct / len(ds.y_test):.4f}", file=sys.stderr)
    return time.perf_counter() - t0


def run_sim(rounds: int, executor: dict, tmp: Path) -> tuple[float, list[dict], dict]:
    name = "-".join(f"{k}{v}" for k, v in executor.items())
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(scenario(rounds, executor)))
    out = tmp / name
    t0 = time.perf_counter()
    assert cli(["run", str(path), "--out", str(out), "--quiet"]) == 0
    wall = time.perf_counter() - t0
    (run,) = list(out.iterdir())
    rows = [{k: v for k, v in r.items() if not k.startswith("host_")} for r in csv.DictReader((run / "rounds.csv").open())]
    import json

    summary = json.loads((run / "summary.json").read_text())
    return wall, rows, summary.get("host_time_s", {})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    load = open("/proc/loadavg").read().split()[:3]
    bare = bare_loop(args.rounds)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        variants = [{"kind": "inline", "threads": torch.get_num_threads()}, {"kind": "inline"}]
        variants += [{"kind": "pool", "workers": w} for w in args.workers]
        for ex in variants:
            wall, rows, host = run_sim(args.rounds, ex, Path(tmp))
            results.append((ex, wall, rows, host))
            print(f"{ex}: {wall:.1f} s ({bare / wall:.2f}x the bare loop)", file=sys.stderr)
    reference = results[1][2]  # inline at 1 thread: the pinned default every executor must reproduce
    lines = [
        "# Executors vs the bare PyTorch loop",
        "",
        "Generated by `python benchmarks/executors.py`; the script overwrites this file.",
        f"Job: FedAvg, MNIST, 100 IID devices, 10 per round, E=1, B=50, `conv` without norm, {args.rounds} rounds, "
        f"evaluation every round on the 10,000 test images. Load average at the start: {' '.join(load)}.",
        "",
        f"Bare PyTorch loop (default {torch.get_num_threads()} threads, same data and model): **{bare:.1f} s**.",
        "",
        "| executor | wall s (whole `iotfl-sim run`) | s per round | speed vs bare loop | metrics = inline, 1 thread |",
        "|---|---|---|---|---|",
    ]
    for ex, wall, rows, _ in results:
        same = "yes (bitwise)" if rows == reference else "no (other thread count: last bits differ)"
        desc = ", ".join(f"{k}: {v}" for k, v in ex.items())
        lines.append(f"| {desc} | {wall:.1f} | {wall / args.rounds:.2f} | {bare / wall:.2f}x | {same} |")
    lines += [
        "",
        "Wall time includes set-up (dataset load, worker start-up) and every round's evaluation. Pool workers run "
        "one torch thread each.",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        OUT_MD.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
