"""System-only benchmark: 1,000,000 devices, 1,000 rounds, 100 clients per round, costs only.

    python benchmarks/system_only_1m.py [--devices N] [--rounds R] [--out DIR]

Prints wall time and peak memory (RSS) of the whole process, and writes the run folder (no event
log) when --out is given. Target: <= 60 s and <= 4 GB on 2 cores.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time

import yaml

from iotfl_sim.scenario.loader import load_scenario, resolve_groups, resolved_dict
from iotfl_sim.sim.runner import run_scenario

SCENARIO = """
name: system_only_1m
seed: 0
rounds: {rounds}
clients_per_round: 100
numerics: none
fleet:
  num_devices: {devices}
  groups:
    - {{profile: phone_low, fraction: 0.3}}
    - {{profile: phone_midrange, fraction: 0.3}}
    - {{profile: raspberry_pi_4b, fraction: 0.2}}
    - {{profile: jetson_nano, fraction: 0.1}}
    - {{profile: esp32, fraction: 0.1, memory: {{sigma2: [0.0001, 0.0004]}}}}
data: {{dataset: cifar10}}
model: {{family: resnet18}}
algorithm: {{name: heterofl, mode: dynamic, proportions: a1-b1-c1-d1-e1, assign: by_capacity}}
local: {{epochs: 1, batch_size: 32}}
server: {{deadline_s: 600}}
output: {{events: none, progress: false}}
"""


def measure(text: str, out: str | None) -> dict:
    """Run the scenario ``text``; wall time from loading it to the last file written, and the process's peak RSS."""
    t0 = time.perf_counter()
    sc = load_scenario(text=text)
    groups = resolve_groups(sc)
    path, summary = run_scenario(sc, groups, out, resolved_dict(sc, groups), progress=False)
    wall = time.perf_counter() - t0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "devices": sc.num_devices(),
        "rounds": summary["rounds"],
        "tasks": summary["tasks"],
        "completed": summary["completed"],
        "failures": summary["failures"],
        "sim_time_s": round(summary["sim_time_s"], 1),
        "wall_s": round(wall, 1),
        "host_time_s": {k: round(v, 2) for k, v in summary["host_time_s"].items()},
        "peak_rss_mb": round(peak_mb),
        "run": str(path) if path else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--devices", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=1000)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    result = measure(SCENARIO.format(devices=args.devices, rounds=args.rounds), args.out)
    print(yaml.safe_dump(result, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
