"""Writes iot_fleet_availability.csv, the availability trace of scenarios/async_iot_fleet*.yaml.

../shared/traces holds no availability trace (only FLASH's link speeds and device benchmarks; FedScale's
client_behave_trace is not redistributable there), so this one is synthetic, drawn once with a fixed seed and
shipped: 50 clients over 12 simulated hours, each alternating online and offline sessions with lognormal
lengths (median 5 min online, 5 min offline, sigma 1: many short sessions and a heavy tail; devices that come
and go every few minutes, as phones picked up and put down or duty-cycled nodes do), starting at a random
phase. Format: the `trace` availability kind's csv (device,online_from,online_until in seconds, not repeated:
every device is offline after 12 h).

    python scenarios/traces/make_iot_fleet_availability.py     # rewrites the CSV (identical bytes)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

CLIENTS = 50
HORIZON_S = 12 * 3600.0
MEDIAN_ON_S, MEDIAN_OFF_S, SIGMA = 300.0, 300.0, 1.0
SEED = 20261127


def sessions(rng: np.random.Generator) -> list[tuple[float, float]]:
    online = bool(rng.random() < MEDIAN_ON_S / (MEDIAN_ON_S + MEDIAN_OFF_S))
    t, out = 0.0, []
    while t < HORIZON_S:
        length = float(rng.lognormal(np.log(MEDIAN_ON_S if online else MEDIAN_OFF_S), SIGMA))
        if online:
            out.append((t, min(t + length, HORIZON_S)))
        t += length
        online = not online
    return out


def main() -> None:
    rng = np.random.default_rng(SEED)
    lines = ["device,online_from,online_until"]
    for device in range(CLIENTS):
        lines += [f"{device},{a:.1f},{b:.1f}" for a, b in sessions(rng)]
    Path(__file__).with_name("iot_fleet_availability.csv").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
