"""Shared fixtures: small inline fleets that need no profile files and no dataset files."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
import yaml

SHARED_DATA = Path(os.environ.get("IOTFL_TEST_DATA", Path(__file__).resolve().parents[2] / "shared" / "datasets"))

TINY = {
    "name": "tiny",
    "device_class": "mcu",
    "compute": {"flops": 1.0e9, "jitter": {"dist": "none"}},
    "memory": {"total_mb": 64, "free_mb": 32, "sigma_mb": 0.0},
    "power": {"idle_w": 0.1, "train_w": 1.0, "tx_w": 0.8, "rx_w": 0.3},
    "battery": {"capacity_j": 5000.0},
    "link": {"down_mbps": 1.0, "up_mbps": 0.5, "rtt_ms": 50.0},
}
BIG = {
    "name": "big",
    "device_class": "sbc",
    "compute": {"flops": 1.0e10, "jitter": {"dist": "none"}},
    "memory": {"total_mb": 4000, "free_mb": 2000, "sigma_mb": 0.0},
    "power": {"idle_w": 3.0, "train_w": 6.0, "tx_w": 1.0, "rx_w": 1.0},
    "link": {"down_mbps": 50.0, "up_mbps": 20.0, "rtt_ms": 5.0},
}


def base_scenario(**over) -> dict:
    sc = {
        "name": "t",
        "seed": 3,
        "rounds": 2,
        "clients_per_round": 4,
        "fleet": {
            "groups": [
                {"name": "tiny", "count": 4, "profile": copy.deepcopy(TINY)},
                {"name": "big", "count": 4, "profile": copy.deepcopy(BIG)},
            ]
        },
        "data": {"dataset": "digits"},
        "model": {"family": "cnn_small"},
        "algorithm": {"name": "fedavg"},
        "local": {"epochs": 1, "batch_size": 16, "lr": 0.05},
        "output": {"progress": False},
    }
    for k, v in over.items():
        sc[k] = v
    return sc


@pytest.fixture
def write_scenario(tmp_path):
    def write(data: dict, name: str = "scenario.yaml") -> Path:
        p = tmp_path / name
        p.write_text(yaml.safe_dump(data, sort_keys=False))
        return p

    return write
