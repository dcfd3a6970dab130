"""FedX eq. 2: the search over (sub-network, q) on a toy device set derived by hand, the predicted training times
it filters by, and a one-round run with ``assign: eq2``."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from conftest import base_scenario

from iotfl_sim.algorithms.fedx_assign import search
from iotfl_sim.fl.models.fedx import level_specs
from iotfl_sim.scenario.algorithms import FedXConfig
from iotfl_sim.scenario.loader import load_scenario, resolve_groups
from iotfl_sim.sim.engine import Simulation

# utility drops, rows small / medium / large, columns q = 1, 2, 3
DROPS = np.array([[0.30, 0.12, 0.10], [0.25, 0.06, 0.04], [0.20, 0.05, 0.00]])
# predicted seconds per local round of small / medium / large for devices A (fast), B, C, D (slowest)
TIMES = np.array([[1.0, 2.0, 4.0], [3.0, 6.0, 12.0], [5.0, 11.0, 22.0], [20.0, 40.0, 80.0]])
MU = 10.0  # A: all three within mu; B: small and medium; C: small only; D: none


def test_eq2_argmin_on_a_toy_fleet():
    level, bits = search(DROPS, TIMES <= MU, max_bits=3)
    # A: least drop overall, large at 3 bits (0.00); B: best of small / medium, medium at 3 (0.04);
    # C: small only, at 3 (0.10); D: nothing fits mu, never assigned
    assert level.tolist() == [2, 1, 0, -1]
    assert bits.tolist() == [3, 3, 3, 0]


def test_eq2_q_max_caps_the_bits():
    level, bits = search(DROPS, TIMES <= MU, max_bits=2)
    assert level.tolist() == [2, 1, 0, -1] and bits.tolist() == [2, 2, 2, 0]  # 0.05, 0.06, 0.12


def test_eq2_early_termination_gives_small_networks_more_bits():
    # tolerance 0.06, larger sub-networks first, fewer bits first: A stops at large q=2 (0.05 after 0.20), B at
    # medium q=2 (0.06 after 0.25), C never meets it (0.30, 0.12, 0.10) and falls back to its argmin small q=3
    level, bits = search(DROPS, TIMES <= MU, max_bits=3, tolerance=0.06)
    assert level.tolist() == [2, 1, 0, -1] and bits.tolist() == [2, 2, 3, 0]


def test_eq2_ties_go_to_the_larger_network_then_fewer_bits():
    drops = np.array([[0.0, 0.0], [0.0, 0.0]])
    level, bits = search(drops, np.ones((1, 2), dtype=bool), max_bits=2)
    assert (level[0], bits[0]) == (1, 1)


def _scenario(**algo) -> dict:
    return base_scenario(
        model={"family": "harwild"},
        algorithm={"name": "fedx", "proxy_classes": [8, 9], "pretrain_epochs": 1, "finetune_samples": 64,
                   "assign": "eq2", "max_bits": 2, **algo},
        rounds=1, output={"progress": False, "events": "all"},
    )  # fmt: skip


def test_predicted_times_follow_the_declared_profile_and_filter_eq2():
    # mu between a tiny device's (1 GFLOP/s) small and medium rounds: harwild on 8x8 digits costs 220,480 (small)
    # and 658,752 (medium) forward FLOPs a sample, training 3x that, on about 145 samples a device: tiny small
    # ~0.1 s, tiny medium ~0.29 s, big (10 GFLOP/s) medium ~0.03 s
    sc = load_scenario(text=yaml.safe_dump(_scenario(time_threshold_s=0.15)))
    sim = Simulation(sc, resolve_groups(sc))
    fedx = sim.strategy
    n = sim.numerics.samples_per_device
    flops = np.array([1e9] * 4 + [1e10] * 4)
    for name, spec in level_specs("harwild").items():
        hand = 3 * sim.recipe.cost(spec).flops_forward_per_sample * n * sc.local.epochs / flops
        assert np.allclose(sim.predict_train_seconds(sim.recipe, spec), hand, rtol=1e-12), name
    assert fedx.levels == ["small", "medium"]  # eq2 searches the sub-networks named in mix
    assert (n[:4] * 3 * 220480 / 1e9 <= 0.15).all() and (n[:4] * 3 * 658752 / 1e9 > 0.15).all()
    assert [fedx.levels[j] for j in fedx.level_of[:4]] == ["small"] * 4  # tiny: medium is over mu
    # the whole assignment is eq. 2's search on the hand-computed feasibility (memory is plentiful here)
    specs = level_specs("harwild")
    feasible = np.stack([3 * sim.recipe.cost(specs[x]).flops_forward_per_sample * n / flops <= 0.15 for x in fedx.levels], 1)
    level, bits = search(fedx.utility_drop, feasible, max_bits=2)
    assert fedx.level_of.tolist() == level.tolist() and fedx.bits_of.tolist() == bits.tolist()
    assert (fedx.level_of >= 0).all() and set(fedx.bits_of.tolist()) <= {1, 2}
    assert fedx.utility_drop.shape == (2, 2)


def test_eq2_run_and_config_errors(write_scenario, tmp_path):
    from iotfl_sim.cli import main

    path = write_scenario(_scenario(time_threshold_s=0.15))
    assert main(["run", str(path), "--out", str(tmp_path / "r"), "--quiet"]) == 0
    (run,) = list((tmp_path / "r").iterdir())
    events = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]
    assert {e["level"] for e in events if e["event"] == "dispatch" and e["device"] < 4} <= {"small"}
    assert "assign" in {e["what"] for e in events if e["event"] == "server_work"}
    # no device meets mu: one line naming the option, exit status 2, nothing written
    path = write_scenario(_scenario(time_threshold_s=1e-6), "slow.yaml")
    assert main(["run", str(path), "--out", str(tmp_path / "slow"), "--quiet"]) == 2
    assert not (tmp_path / "slow").exists()
    with pytest.raises(ValueError, match="server_data"):
        FedXConfig(name="fedx", assign="eq2", server_data=False)
