"""FedX eq. 2: the search over (sub-network, q) on a toy device set derived by hand, the predicted training times
it filters by, and a one-round run with ``assign: eq2``."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from conftest import BIG, TINY, base_scenario

from iotfl_sim.algorithms import fedx as fedx_module
from iotfl_sim.algorithms.fedx_assign import search
from iotfl_sim.fl.models.fedx import level_specs
from iotfl_sim.scenario.algorithms import FedXConfig
from iotfl_sim.scenario.loader import load_scenario, resolve_groups
from iotfl_sim.scenario.resolved import ResolvedScenario
from iotfl_sim.sim.setup import build_simulation

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


def harwild_forward_flops(c: int, length: int, classes: int) -> int:
    """Forward FLOPs of one sample of HAR-Wild at c channels, by hand from its layers (``fl.models.fedx``), 2 per
    multiply-accumulate of the convolutions and linear layers (biases, BN, ReLU and pooling are not counted, as in
    the papers' FLOP figures): conv k7 1 -> c over ``length`` steps (same padding), pool 2; conv k1 c -> c over
    length / 2, pool 2; conv k3 c -> c / 2 over length / 4; FC (c / 2 x length / 4) -> 128 -> 32 -> 32 -> 16 ->
    classes. Digits (8 x 8 = 64 steps, 10 classes): small (c = 32) 2 x (14,336 + 32,768 + 24,576 + 256 x 128 +
    128 x 32 + 32 x 32 + 32 x 16 + 16 x 10) = 220,480; medium (c = 64) 658,752."""
    half, l2, l4 = c // 2, length // 2, length // 4
    macs = length * c * 7 + l2 * c * c + l4 * c * half * 3
    widths = [half * l4, 128, 32, 32, 16, classes]
    macs += sum(a * b for a, b in zip(widths[:-1], widths[1:], strict=True))
    return 2 * macs


def test_harwild_flops_by_hand():
    assert (harwild_forward_flops(32, 64, 10), harwild_forward_flops(64, 64, 10)) == (220_480, 658_752)


def test_eq2_search_equals_a_brute_force_on_random_tables():
    """The search (no tolerance) against an independent brute force: every feasible (sub-network, q <= max_bits)
    pair, the least drop, ties to the larger sub-network and then to fewer bits. Drops on a 0.1 grid make ties."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        m, qn, n = rng.integers(1, 4), rng.integers(1, 5), rng.integers(1, 7)
        drops = rng.integers(0, 4, size=(m, qn)) / 10
        feasible = rng.random((n, m)) < 0.6
        max_bits = int(rng.integers(1, qn + 2))
        level, bits = search(drops, feasible, max_bits=max_bits)
        for u in range(n):
            pairs = [(drops[j, q - 1], -j, q) for j in range(m) if feasible[u, j] for q in range(1, min(max_bits, qn) + 1)]
            want = (-min(pairs)[1], min(pairs)[2]) if pairs else (-1, 0)
            assert (level[u], bits[u]) == want, (drops, feasible[u], max_bits)


def _scenario(**algo) -> dict:
    return base_scenario(
        model={"family": "harwild"},
        algorithm={"name": "fedx", "proxy_classes": [8, 9], "pretrain_epochs": 1, "finetune_samples": 64,
                   "assign": "eq2", "max_bits": 2, **algo},
        rounds=1, output={"progress": False, "events": "all"},
    )  # fmt: skip


# utility drops by hand, rows small / medium, columns q = 1, 2: a device that can train both takes medium at 1 bit
# (0.02, the least); one that can train only small takes it at 2 bits (0.10 < 0.30)
HAND_DROPS = np.array([[0.30, 0.10], [0.02, 0.04]])


def test_predicted_times_follow_the_declared_profile_and_filter_eq2(monkeypatch):
    # mu = 0.15 s between a tiny device's (1 GFLOP/s) small and medium rounds: training is 3x the forward FLOPs
    # (harwild_forward_flops) on about 145 samples a device: tiny small ~0.1 s, tiny medium ~0.29 s, big
    # (10 GFLOP/s) medium ~0.03 s. The server's drop table is replaced by HAND_DROPS (eq. 2's choice is under test)
    calls = []

    def hand_drops(recipe, specs, global_spec, state, x, y, *, max_bits, **kw):
        calls.append(([s.rate for s in specs], max_bits))
        return HAND_DROPS.copy()

    monkeypatch.setattr(fedx_module, "utility_drops", hand_drops)
    sc = load_scenario(text=yaml.safe_dump(_scenario(time_threshold_s=0.15)))
    sim = build_simulation(ResolvedScenario(sc, resolve_groups(sc)))
    fedx = sim.strategy
    n = sim.numerics.samples_per_device
    device_flops = np.array([TINY["compute"]["flops"]] * 4 + [BIG["compute"]["flops"]] * 4)
    forward = {"small": harwild_forward_flops(32, 64, 10), "medium": harwild_forward_flops(64, 64, 10)}
    for name in ("small", "medium"):
        hand = 3 * forward[name] * n * sc.local.epochs / device_flops
        assert np.allclose(sim.predict_train_seconds(sim.recipe, level_specs("harwild")[name]), hand, rtol=1e-12), name
    assert calls == [([0.25, 0.5], 2)]  # eq2 scores the sub-networks named in mix, smallest first, q = 1 .. max_bits
    assert fedx.levels == ["small", "medium"]
    tiny_fits_medium = 3 * forward["medium"] * n[:4] / device_flops[:4] <= 0.15
    assert (3 * forward["small"] * n[:4] / device_flops[:4] <= 0.15).all() and not tiny_fits_medium.any()
    assert [fedx.levels[j] for j in fedx.level_of] == ["small"] * 4 + ["medium"] * 4
    assert fedx.bits_of.tolist() == [2] * 4 + [1] * 4


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
