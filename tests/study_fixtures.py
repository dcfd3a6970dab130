"""Synthetic study folders with known numbers (no simulator involved), shared by the study tests."""

from __future__ import annotations

import csv
import json
from pathlib import Path

# method -> seed -> acc_full per round (rounds 1..5)
ACC = {
    "fedavg": {
        0: [0.30, 0.50, 0.65, 0.70, 0.82],  # 0.6 at round 3, 0.8 at round 5
        1: [0.40, 0.62, 0.70, 0.75, 0.78],  # 0.6 at round 2, never 0.8
        2: [0.20, 0.40, 0.60, 0.81, 0.80],  # 0.6 at round 3 (exactly), 0.8 at round 4
    },
    "heterofl": {
        0: [0.50, 0.61, 0.70, 0.80, 0.85],  # 0.6 at 2, 0.8 at 4
        1: [0.55, 0.66, 0.72, 0.79, 0.84],  # 0.6 at 2, 0.8 at 5
        2: [0.58, 0.64, 0.75, 0.83, 0.86],  # 0.6 at 2, 0.8 at 4
    },
}
CLASSES = ("mcu", "sbc", "phone")


def sim_time(rnd: int, seed: int) -> float:
    return 10.0 * rnd + seed


def energy(rnd: int, seed: int) -> float:
    return 100.0 * rnd + 10 * seed


def bytes_down(rnd: int, seed: int) -> float:
    return 1000.0 * rnd


def bytes_up(rnd: int, seed: int) -> float:
    return 500.0 * rnd + seed


def waste_cum(rnd: int, seed: int) -> float:
    return round(0.1 * (seed + 1) + 0.01 * rnd, 4)


def bytes_wasted(rnd: int, seed: int) -> float:
    return 100.0 * rnd + seed


# energy(rnd, seed) split: compute, radio, idle shares
ENERGY_SHARES = {"compute": 0.2, "radio": 0.1, "idle": 0.7}


def write_run(path: Path, algorithm: str, seed: int, accs: list[float], levels: bool = True,
              status: str = "complete", failures: dict | None = None,
              level_names: tuple[str, ...] | None = None, targets: list[float] | None = None,
              carbon: bool = False) -> Path:  # fmt: skip
    """A complete run folder; ``level_names``: per-level columns acc_<name> = acc - 0.1 * i (default: a, b
    for heterofl only); ``targets``: the scenario's server.target_accuracies (None: not written)."""
    path.mkdir(parents=True)
    rows = []
    alive = 6
    for i, a in enumerate(accs):
        rnd = i + 1
        alive -= 1 if (rnd == 3 and seed == 1) else 0
        extra = {"carbon_g": 0.1 * energy(rnd, seed)} if carbon else {}
        row = {
            "round": rnd, "sim_time_s": sim_time(rnd, seed), "round_time_s": 10.0, "selected": 4, "completed": 3,
            "failed_oom": 1, "failed_depleted": 0, "alive": alive, "acc_full": a, "acc_avg": round(a - 0.05, 4),
            "energy_j": energy(rnd, seed), "bytes_down": bytes_down(rnd, seed), "bytes_up": bytes_up(rnd, seed),
            "bytes_down_round": 1000.0, "bytes_up_round": 500.0, "comm_waste_cum": waste_cum(rnd, seed),
            "bytes_wasted": bytes_wasted(rnd, seed),
            **{f"energy_{k}_j": share * energy(rnd, seed) for k, share in ENERGY_SHARES.items()},
            "server_time_s": 0.5 * (seed + 1) + (2.0 if rnd == 1 and algorithm == "heterofl" else 0.0),
            "server_aggregate_s": 0.5 * (seed + 1), "server_qsgd_s": 0.0,
            "server_train_s": 2.0 if rnd == 1 and algorithm == "heterofl" else 0.0, **extra,
        }  # fmt: skip
        names = level_names if level_names is not None else (("a", "b") if algorithm == "heterofl" else ())
        if levels:
            row.update({f"acc_{x}": round(a - 0.1 * i, 4) for i, x in enumerate(names)})
        rows.append(row)
    with open(path / "rounds.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    with open(path / "devices.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["device", "group", "device_class", "tasks", "energy_j", "energy_compute_j", "energy_radio_j",
                    "energy_idle_j"])  # fmt: skip
        for d in range(6):
            w.writerow([d, "g", CLASSES[d % 3], 3, 100.0 + seed, 60.0, 30.0, 10.0 + seed])
    summary = {
        "status": status,
        "name": "study",
        "algorithm": algorithm,
        "rounds": len(accs),  # as the simulator's summary: rounds.csv's rows
        "comm_waste": 0.1 * (seed + 1),
        "failures": failures if failures is not None else {"oom": 5 + seed, "depleted": seed},
    }
    (path / "summary.json").write_text(json.dumps(summary))
    (path / "scenario.resolved.yaml").write_text(
        f"name: study\nseed: {seed}\nalgorithm:\n  name: {algorithm}\n"
        + (f"server:\n  target_accuracies: {json.dumps(targets)}\n" if targets is not None else "")
    )
    return path


def make_study(root: Path, with_failed: bool = True, targets: dict[str, list[float]] | None = None) -> Path:
    """``targets``: algorithm -> the server.target_accuracies its runs' scenarios declare (None: none do)."""
    root.mkdir(parents=True, exist_ok=True)
    records = []
    for algo, seeds in ACC.items():
        for seed, accs in seeds.items():
            rid = f"{algo}-s{seed}"
            write_run(root / "runs" / rid, algo, seed, accs, targets=(targets or {}).get(algo))
            records.append({"id": rid, "overrides": {"algorithm.name": algo, "seed": seed}, "status": "done",
                            "run_dir": f"runs/{rid}", "error": None, "host_s": 1.5})  # fmt: skip
    if with_failed:
        records.append({"id": "fedavg-s3", "overrides": {"algorithm.name": "fedavg", "seed": 3}, "status": "failed",
                        "run_dir": "runs/fedavg-s3", "error": "ValueError: boom", "host_s": 0.25})  # fmt: skip
    base = {"name": "study", "rounds": 5, "algorithm": {"name": "fedavg"}, "data": {"dataset": "digits"}}
    study = {"name": "demo", "base": base, "grid": {"algorithm.name": ["fedavg", "heterofl"], "seed": [0, 1, 2]},
             "zip": {}, "runs": records}  # fmt: skip
    (root / "study.json").write_text(json.dumps(study, indent=1))
    with open(root / "index.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "overrides", "status", "run_dir", "error", "host_s"])
        for r in records:
            w.writerow(
                [
                    r["id"],
                    json.dumps(r["overrides"]),
                    r["status"],
                    r["run_dir"],
                    r["error"] or "",
                    r["host_s"],
                ]
            )
    return root
