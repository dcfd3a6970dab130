"""Same seed, same numbers for the wave-2 methods (every metric but host time); another seed differs."""

from __future__ import annotations

import csv

import pytest
from conftest import base_scenario, relative_fleet

from iotfl_sim.cli import main

METHODS = {
    "adaptivefl": ({"name": "adaptivefl"}, "cnn_small"),
    "flexfl": ({"name": "flexfl", "proxy_fraction": 0.05, "pretrain_epochs": 1}, "cnn_small"),
    "scalefl": ({"name": "scalefl", "exit_head": "light", "levels": [{"width": 0.5, "depth": 2},
                                                                       {"width": 1.0, "depth": 4}]}, "conv"),
}


def run(tmp_path, write_scenario, name: str, algorithm: dict, family: str, seed: int) -> list[dict]:
    data = base_scenario(
        seed=seed,
        rounds=2,
        clients_per_round=4,
        fleet=relative_fleet((3, 3, 3)),
        model={"family": family, "scaler": False},
        algorithm=algorithm,
        server={"eval_every": 2, "bn_calibration_samples": 100},
        local={"epochs": 1, "batch_size": 32, "lr": 0.05},
    )
    out = tmp_path / name
    assert main(["run", str(write_scenario(data, f"{name}.yaml")), "--out", str(out), "--quiet"]) == 0
    (path,) = list(out.iterdir())
    rows = list(csv.DictReader((path / "rounds.csv").open()))
    return [{k: v for k, v in r.items() if not k.startswith("host_")} for r in rows]


@pytest.mark.parametrize("method", sorted(METHODS))
def test_same_seed_same_metrics(tmp_path, write_scenario, method):
    algorithm, family = METHODS[method]
    a = run(tmp_path, write_scenario, "a", algorithm, family, seed=5)
    b = run(tmp_path, write_scenario, "b", algorithm, family, seed=5)
    c = run(tmp_path, write_scenario, "c", algorithm, family, seed=6)
    assert a == b
    assert a[-1]["acc_full"] and float(a[-1]["acc_full"]) > 0
    assert a != c
