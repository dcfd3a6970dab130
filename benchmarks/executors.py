"""Executors vs the bare PyTorch loop a researcher would write: host seconds per round, identical metrics.

Two jobs (issue 9):
- fedavg: FedAvg on MNIST, 100 IID devices, 10 per round, E=1, B=50, the `conv` model without norm, SGD lr
  0.05 momentum 0.9 (a plain CNN without norm barely moves in 3 rounds without momentum). The bare
  loop trains the same clients (same partition, same lr) one after another with PyTorch's default threads and
  evaluates on the test set, as a researcher would write it by hand.
- heterofl: `scenarios/heterofl_mnist_a2b8.yaml` shortened to E=1 (B=10 as in the paper), 2,000 BN calibration
  samples, evaluation every round (levels a and b).
`iotfl-sim run` runs each with every executor: inline (1 thread, the pinned default, and the machine's thread
count), pool over a range of worker counts (the scaling curve), Ray, and fused. Every variant runs in this one
process, back to back, so the ratios compare like with like.

    IOTFL_DATA=/work/shared/datasets python benchmarks/executors.py [--rounds 3] [--workers 1 2 3]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
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
from iotfl_sim.fl.data.datasets import load_dataset  # noqa: E402
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
        "local": {"epochs": 1, "batch_size": 50, "lr": 0.05, "momentum": 0.9, "weight_decay": 0.0},
        "server": {"eval_every": 1},
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
            opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
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


def heterofl_scenario(rounds: int, executor: dict) -> dict:
    sc = yaml.safe_load((ROOT / "scenarios" / "heterofl_mnist_a2b8.yaml").read_text())
    sc.update(rounds=rounds, executor=executor, output={"progress": False, "events": "none"})
    sc["local"] = {**sc["local"], "epochs": 1}
    sc["server"] = {**sc["server"], "eval_every": 1}
    return sc


JOBS = {"fedavg": scenario, "heterofl": heterofl_scenario}


def run_sim(rounds: int, executor: dict, tmp: Path, job: str = "fedavg") -> tuple[float, list[dict], dict]:
    tmp.mkdir(parents=True, exist_ok=True)
    name = job + "-" + ("-".join(f"{k}{v}" for k, v in executor.items()) or "default")
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(JOBS[job](rounds, executor)))
    out = tmp / name
    t0 = time.perf_counter()
    assert cli(["run", str(path), "--out", str(out), "--quiet"]) == 0
    wall = time.perf_counter() - t0
    (run,) = list(out.iterdir())
    rows = [{k: v for k, v in r.items() if not k.startswith("host_")} for r in csv.DictReader((run / "rounds.csv").open())]
    summary = json.loads((run / "summary.json").read_text())
    if not executor:
        print(f"{job} default: {summary['executor']['why']}", file=sys.stderr)
    return wall, rows, summary.get("host_time_s", {})


def acc_gap(rows: list[dict], reference: list[dict]) -> float:
    """Largest |accuracy difference| over rounds and accuracy columns, in points."""
    cols = [k for k in reference[0] if k.startswith("acc_") and reference[0][k] != ""]
    return max(abs(float(a[k]) - float(b[k])) * 100 for a, b in zip(rows, reference, strict=True) for k in cols)


def variants(workers: list[int], extras: bool = True, default_only: bool = False) -> list[dict]:
    """The executor blocks to run; ``{}`` is no block at all (the default, ``kind: auto``)."""
    if default_only:  # with the pool, the default before worker threads (issue 22)
        return [{"kind": "inline"}, {}, {"kind": "pool", "workers": max(workers)}]
    out: list[dict] = [{"kind": "inline"}, {}, {"kind": "inline", "threads": torch.get_num_threads()}]
    out += [{"kind": "threads", "workers": w} for w in workers]
    out += [{"kind": "pool", "workers": w} for w in workers]
    if not extras:
        return out
    try:
        import ray  # noqa: F401

        out.append({"kind": "ray", "workers": max(workers)})
    except ImportError:
        print("ray is not installed: no Ray row (pip install 'iotfl-sim[ray]')", file=sys.stderr)
    out.append({"kind": "fused"})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--jobs", nargs="+", default=list(JOBS), choices=list(JOBS))
    ap.add_argument("--repeat", type=int, default=1, help="run the bare loop and every variant this many times, "
                    "interleaved, and keep the fastest (a shared machine's noise only ever slows a run down)")
    ap.add_argument("--no-extras", action="store_true", help="inline and pool only (no Ray, no fused)")
    ap.add_argument("--default-only", action="store_true", help="inline, the default (no executor block) and the pool only")
    ap.add_argument("--out", type=Path, default=OUT_MD)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    load = open("/proc/loadavg").read().split()[:3]
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    bare = None
    tables: dict[str, list] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeat):
            if "fedavg" in args.jobs:
                t = bare_loop(args.rounds)
                bare = t if bare is None else min(bare, t)
            for job in args.jobs:
                results = tables.setdefault(job, [])
                for i, ex in enumerate(variants(args.workers, not args.no_extras, args.default_only)):
                    wall, rows, host = run_sim(args.rounds, ex, Path(tmp) / f"r{rep}", job)
                    if rep == 0:
                        results.append((ex, wall, rows, host))
                    else:
                        assert rows == results[i][2], f"{ex}: metrics changed between repetitions"
                        results[i] = (ex, min(wall, results[i][1]), rows, host)
                    ratio = f" ({bare / wall:.2f}x the bare loop)" if job == "fedavg" and bare else ""
                    print(f"{job} {ex}: {wall:.1f} s{ratio}", file=sys.stderr)
    lines = [
        "# Executors vs the bare PyTorch loop",
        "",
        "Generated by `python benchmarks/executors.py`; the script overwrites this file. "
        f"Started {started}, load average at the start: {' '.join(load)}; {os.cpu_count()} cores. "
        + (f"Every variant and the bare loop ran {args.repeat} times, interleaved; the fastest is shown." if args.repeat > 1 else ""),
        "Wall time is the whole `iotfl-sim run` (set-up, dataset load, worker start-up, every round's training and "
        "evaluation). Pool and Ray workers run one torch thread each. *Metrics* compares every accuracy, loss, energy, "
        "time and byte column with the inline executor at 1 thread (the pinned default): bitwise, or the largest "
        "accuracy gap in points.",
    ]
    for job, results in tables.items():
        reference = results[0][2]
        if job == "fedavg":
            lines += [
                "", f"## FedAvg, MNIST, 100 IID devices, 10 per round, E=1, B=50, `conv` without norm, SGD lr 0.05 momentum 0.9, {args.rounds} rounds", "",
                f"Bare PyTorch loop (default {torch.get_num_threads()} threads, same data and model, batch 1,000 "
                f"test passes): **{bare:.1f} s** ({bare / args.rounds:.2f} s per round).", "",
            ]
        else:
            lines += ["", f"## HeteroFL MNIST a2-b8 (conv, sBN, Scaler), E=1, B=10, {args.rounds} rounds", ""]
        lines += [
            "| executor | wall s | s per round | " + ("speed vs bare loop | " if job == "fedavg" else "speed vs inline | ")
            + "metrics vs inline, 1 thread |",
            "|---|---|---|---|---|",
        ]
        for ex, wall, rows, _ in results:
            same = "bitwise" if rows == reference else f"max acc gap {acc_gap(rows, reference):.2f} pts"
            base = bare if job == "fedavg" else results[0][1]
            desc = ", ".join(f"{k}: {v}" for k, v in ex.items()) or "**no executor block** (kind: auto)"
            lines.append(f"| {desc} | {wall:.1f} | {wall / args.rounds:.2f} | {base / wall:.2f}x | {same} |")
    lines.append("")
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
