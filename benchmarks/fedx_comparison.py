"""FedX vs Quantized FedAvg vs FedX without fine-tuning, on UCI HAR (natural subjects) and an image set.

Runs benchmarks/fedx_har.yaml (HAR-Wild) and benchmarks/fedx_digits.yaml (OFA MobileNetV3 on 8x8 digits) with
only the ``algorithm`` changed, for each seed, one run at a time with one torch thread; on HAR seed 0 it also
sweeps the share of medium-sub-network devices (0 / 50 / 100 %, Fig. 5's ablation). Writes
benchmarks/fedx_comparison.md (mean +- std over seeds: final accuracy of each method's sub-networks, bytes on the
wire, bytes and simulated time to a target accuracy) and benchmarks/fedx_comparison.png (accuracy against
bytes on the wire).

    IOTFL_DATA=../shared/datasets python benchmarks/fedx_comparison.py            # seeds 0-2
    IOTFL_DATA=../shared/datasets python benchmarks/fedx_comparison.py --seeds 0 --rounds 2 --out /tmp/fx

Numbers are recorded as they come out; nothing is tuned per method.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "benchmarks"
SETS = {"HAR (HAR-Wild)": HERE / "fedx_har.yaml", "digits (OFA MobileNetV3)": HERE / "fedx_digits.yaml"}
# label -> --set overrides of the base's algorithm (the bases hold FedX's bits and server classes)
METHODS: dict[str, list[str]] = {
    "FedX": [],
    "FedX w/o FT": ["algorithm.fine_tune=false"],
    "Quantized FedAvg-L": ["algorithm.mix={large: 1.0}", "algorithm.server_data=false"],
}
SPLITS = {"FedX 0% medium": ["algorithm.mix={small: 1.0}"], "FedX 100% medium": ["algorithm.mix={medium: 1.0}"]}
TARGET = {"HAR (HAR-Wild)": 0.5, "digits (OFA MobileNetV3)": 0.5}  # acc_avg for the to-target columns


def run_one(base: Path, label: str, sets: list[str], seed: int, rounds: int | None, out: Path) -> tuple[Path, float]:
    from iotfl_sim.cli import main

    where = out / f"{base.stem}-{label.replace(' ', '_').replace('%', 'pct').replace('/', '')}-s{seed}"
    done = sorted(where.glob("*/summary.json"))
    if done:  # a finished run of this exact configuration in --out: reuse it (--out is per benchmark run)
        return done[0].parent, float(json.loads(done[0].read_text())["host_time_s"]["total"])
    where.mkdir(parents=True, exist_ok=True)
    args = ["run", str(base), "--out", str(where), "--quiet", "--set", f"seed={seed}"]
    for x in sets + ([f"rounds={rounds}"] if rounds else []):
        args += ["--set", x]
    t0 = time.perf_counter()
    rc = main(args)
    if rc != 0:
        raise RuntimeError(f"{label} seed {seed}: exit {rc}")
    (run,) = list(where.iterdir())
    return run, time.perf_counter() - t0


def read_rows(run: Path) -> list[dict[str, float | None]]:
    with open(run / "rounds.csv") as f:
        return [{k: (float(v) if v not in ("", None) else None) for k, v in r.items()} for r in csv.DictReader(f)]


def bytes_total(r: dict) -> float:
    return float(r["bytes_down"] or 0) + float(r["bytes_up"] or 0)


def first(rows: list[dict], target: float, field: str) -> float | None:
    for r in rows:
        if r.get("acc_avg") is not None and r["acc_avg"] >= target:
            return r[field] if field != "bytes" else bytes_total(r)
    return None


def stats(vals: list[float | None], digits: int = 3, scale: float = 1.0) -> str:
    got = [v * scale for v in vals if v is not None]
    if not got:
        return "not reached"
    miss = f" ({len(vals) - len(got)} of {len(vals)} not reached)" if len(got) < len(vals) else ""
    if len(got) == 1:
        return f"{got[0]:.{digits}f}{miss}"
    return f"{np.mean(got):.{digits}f} +- {np.std(got):.{digits}f}{miss}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--out", type=Path, default=Path("/tmp/fedx_comparison"))
    ap.add_argument("--image-seeds", type=int, default=3, help="run the image set on the first N seeds only")
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    t_all = time.perf_counter()
    results: dict[tuple[str, str], list[tuple[int, list[dict], float]]] = {}
    for set_name, base in SETS.items():
        todo = list(METHODS.items()) + (list(SPLITS.items()) if "HAR" in set_name else [])
        for label, algo in todo:
            seeds = a.seeds if label in METHODS else a.seeds[:1]
            if "HAR" not in set_name:
                seeds = seeds[: a.image_seeds]
            for seed in seeds:
                run, host = run_one(base, label, algo, seed, a.rounds, a.out)
                rows = read_rows(run)
                results.setdefault((set_name, label), []).append((seed, rows, host))
                last = rows[-1]
                print(f"{set_name:26s} {label:20s} seed {seed}: acc_avg {last.get('acc_avg')}, "
                      f"bytes {bytes_total(last) / 1e6:.2f} MB, host {host:.0f} s", flush=True)  # fmt: skip
    total = time.perf_counter() - t_all
    if not a.no_write:
        write_md(results, a, total)
        write_png(results)


def write_md(results: dict, a: argparse.Namespace, total: float) -> None:
    lines = [
        "# FedX vs Quantized FedAvg vs FedX without fine-tuning",
        "",
        "Generated by `OMP_NUM_THREADS=1 IOTFL_DATA=../shared/datasets python benchmarks/fedx_comparison.py"
        + (f" --seeds {' '.join(map(str, a.seeds))}" if a.seeds != [0, 1, 2] else "")
        + (f" --rounds {a.rounds}" if a.rounds else "")
        + (f" --image-seeds {a.image_seeds}" if a.image_seeds != 3 else "")
        + "` (the script rewrites the tables and keeps the hand-written discussion below them).",
        f"Host: {platform.processor() or platform.machine()}, 1 torch thread, {total / 60:.1f} min in all.",
        "Bases: `benchmarks/fedx_har.yaml`, `benchmarks/fedx_digits.yaml` (scale and every setting in their headers).",
        "Accuracy: each sub-network of the method's mix on the whole test set (all classes), `acc_avg` = their mean;",
        "bytes: downloads + uploads on the wire, QSGD-encoded (real encoded lengths, headers included).",
        "",
    ]
    for set_name in SETS:
        tgt = TARGET[set_name]
        lines += [f"## {set_name}", "",
                  f"| method | seeds | final acc_avg | final acc_full | acc small / medium / large | MB on the wire | "
                  f"MB to acc_avg {tgt} | sim. s to acc_avg {tgt} | host s |",
                  "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for (s, label), runs in results.items():
            if s != set_name:
                continue
            last = [r[-1] for _, r, _ in runs]
            per = " / ".join(stats([x.get(f"acc_{lv}") for x in last]) if any(x.get(f"acc_{lv}") is not None for x in last)
                             else "-" for lv in ("small", "medium", "large"))  # fmt: skip
            lines.append(
                f"| {label} | {len(runs)} | {stats([x.get('acc_avg') for x in last])} | "
                f"{stats([x.get('acc_full') for x in last])} | {per} | {stats([bytes_total(x) for x in last], 2, 1e-6)} | "
                f"{stats([first(r, tgt, 'bytes') for _, r, _ in runs], 2, 1e-6)} | "
                f"{stats([first(r, tgt, 'sim_time_s') for _, r, _ in runs], 2)} | "
                f"{stats([h for _, _, h in runs], 0)} |"
            )
        lines.append("")
    md = HERE / "fedx_comparison.md"
    old = md.read_text() if md.exists() else ""
    # the discussion is written by hand from the numbers: a rerun keeps it (check it still holds)
    lines += (old[old.index("## Discussion") :] if "## Discussion" in old else DISCUSSION).splitlines()
    md.write_text("\n".join(lines) + "\n")


def write_png(results: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(SETS), figsize=(6 * len(SETS), 4))
    for ax, set_name in zip(np.atleast_1d(axes), SETS, strict=True):
        for (s, label), runs in results.items():
            if s != set_name:
                continue
            xs = [[bytes_total(r) / 1e6 for r in rows if r.get("acc_avg") is not None] for _, rows, _ in runs]
            ys = [[r["acc_avg"] for r in rows if r.get("acc_avg") is not None] for _, rows, _ in runs]
            n = min(len(x) for x in xs)
            ax.plot(np.mean([x[:n] for x in xs], 0), np.mean([y[:n] for y in ys], 0), marker="o", label=label)
        ax.set_title(set_name)
        ax.set_xlabel("MB on the wire (down + up, cumulative)")
        ax.set_ylabel("acc_avg (mean over seeds)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(HERE / "fedx_comparison.png", dpi=110)


DISCUSSION = """## Discussion

(filled in from the numbers above; see the section below)
"""

if __name__ == "__main__":
    main()
