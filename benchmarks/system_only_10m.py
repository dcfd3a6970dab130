"""System-only benchmark: 10,000,000 devices with Markov availability and a shared gateway per 1,000 devices.

    python benchmarks/system_only_10m.py [--devices N] [--rounds R] [--out DIR]

The 1M benchmark's fleet mix and method (HeteroFL dynamic a-e by capacity on the ResNet18 / CIFAR-10 cost
model, 600 s deadline), 1,000 rounds of 100 clients, plus: every device's availability is a two-state Markov
chain (on 1 h, off 30 min on average), and every block of 1,000 devices shares one cell (20 Mbit/s down,
5 Mbit/s up; `devices_per_gateway: 1000`, 10,000 cells). Prints wall time and peak RSS of the whole
process. Target (issue 9): <= 60 s and <= 8 GB on 2 cores.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from system_only_1m import SCENARIO as ONE_MILLION  # noqa: E402
from system_only_1m import measure  # noqa: E402


def scenario(devices: int, rounds: int) -> str:
    """The 1M benchmark's scenario with Markov availability and a cell per 1,000 devices on every group."""
    sc = yaml.safe_load(ONE_MILLION.format(devices=devices, rounds=rounds))
    sc["name"] = "system_only_10m"
    sc["fleet"]["gateways"] = [{"name": "cell", "down_mbps": 20, "up_mbps": 5, "devices_per_gateway": 1000}]
    for group in sc["fleet"]["groups"]:
        group["availability"] = {"kind": "markov", "mean_on_s": 3600, "mean_off_s": 1800}
        group["network"] = {"gateway": "cell"}
    return yaml.safe_dump(sc, sort_keys=False)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--devices", type=int, default=10_000_000)
    ap.add_argument("--rounds", type=int, default=1000)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    print(yaml.safe_dump(measure(scenario(args.devices, args.rounds), args.out), sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
