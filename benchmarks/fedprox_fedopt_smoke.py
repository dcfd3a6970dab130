"""FedProx and FedOpt against FedAvg on their smoke scenarios (digits, Dirichlet 0.3, 40 devices, 10 rounds):
the final and best accuracy, simulated time and energy of each, as they come (seed 0 only: a smoke check
that the methods learn, not a comparison to stake a claim on).

    python benchmarks/fedprox_fedopt_smoke.py          # about 3 minutes on 2 CPU cores
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import iotfl_sim  # noqa: E402

CASES = [
    ("fedavg (fedprox mu=0)", "fedprox_smoke.yaml", ["algorithm.mu=0"]),
    ("fedprox mu=0.01", "fedprox_smoke.yaml", []),
    ("fedprox mu=0.1", "fedprox_smoke.yaml", ["algorithm.mu=0.1"]),
    ("fedopt adam", "fedopt_smoke.yaml", []),
    ("fedopt yogi", "fedopt_smoke.yaml", ["algorithm.server_optimizer=yogi"]),
    ("fedopt adagrad", "fedopt_smoke.yaml", ["algorithm.server_optimizer=adagrad"]),
]


def main() -> None:
    print("| method | final acc_full | best acc_full | simulated s | energy J |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as out:
        for label, scenario, sets in CASES:
            res = iotfl_sim.run(ROOT / "scenarios" / scenario, out=out, sets=sets)
            s = res.summary
            print(f"| {label} | {s['final_accuracy']['acc_full']:.4f} | {s['best_acc_full']:.4f} | "
                  f"{s['sim_time_s']:.1f} | {s['energy_j']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
