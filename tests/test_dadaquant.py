"""DAdaQuant: client-adaptive levels against Theorem 1's closed form, the time-adaptive schedule on a hand-made
loss sequence, Federated QSGD's levels and bits, and a two-round run."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import base_scenario

from iotfl_sim.algorithms import REGISTRY
from iotfl_sim.algorithms.dadaquant import DAdaQuant, LevelSchedule, client_levels, quantize_update
from iotfl_sim.scenario.algorithms import DAdaQuantConfig


def test_client_levels_match_theorem_1():
    # w = 1, 8, 27: w^(2/3) = 1, 4, 9, a = 14; q = 4: b = (1 + 64 + 729) / 16 = 49.625; sqrt(a / b) = 0.53115;
    # q_i = 0.531, 2.125, 4.780 -> max(1, round(.)) = 1, 2, 5
    assert client_levels(np.array([1.0, 8.0, 27.0]), 4).tolist() == [1, 2, 5]
    # the closed form is scale-free in w
    assert client_levels(np.array([10.0, 80.0, 270.0]), 4).tolist() == [1, 2, 5]
    # equal weights: a = K w^(2/3), b = K w^2 / q^2, so every q_i = q (static quantization)
    assert client_levels(np.full(5, 37.0), 8).tolist() == [8] * 5
    # q = 16, w = 1, 1, 8: a = 6, b = 66 / 256; sqrt(a / b) = 4.8239; q_i = 4.82, 4.82, 19.30 -> 5, 5, 19
    assert client_levels(np.array([1.0, 1.0, 8.0]), 16).tolist() == [5, 5, 19]


def test_time_adaptive_level_on_a_hand_made_loss_sequence():
    s = LevelSchedule(q_min=1, q_max=4, psi=0.5, phi=2)
    losses = [4, 2, 2, 3, 3, 3, 1, 5]
    levels = [s.observe(x) for x in losses]
    # moving averages by hand: 4 (first), 3, 2.5, 2.75, 2.875, 2.9375, 1.96875, 3.484375
    assert s.averages == [4, 3, 2.5, 2.75, 2.875, 2.9375, 1.96875, 3.484375]
    # round 4: 2.75 >= 2.5 (the average phi - 1 = 1 round earlier) after 4 rounds at q = 1: double to 2;
    # round 5 rises too but q = 2 has been held 1 < phi rounds; round 6: 2.9375 >= 2.875 after 2 rounds: 4;
    # round 8 rises again but q is at q_max
    assert levels == [1, 1, 1, 2, 2, 4, 4, 4]


def test_federated_qsgd_levels_and_bits():
    # v = (0, 5), q = 2: |v| / ||v|| * q = (0, 2) exactly, so levels (0, 2) and Q(v) = v with no randomness;
    # wire: 32-bit norm + Elias-omega(run 1 + 1) "100" + sign bit + Elias-omega(2) "100" = 39 bits
    out, nbits = quantize_update({"w": torch.tensor([0.0, 5.0])}, 2, torch.Generator().manual_seed(0))
    assert torch.equal(out["w"], torch.tensor([0.0, 5.0])) and nbits == 39
    # unbiased with q = 1: each value is +-||v|| with probability |v_i| / ||v||; the mean of many draws is v
    v = torch.tensor([3.0, -4.0, 0.0])
    g = torch.Generator().manual_seed(1)
    draws = torch.stack([quantize_update({"w": v}, 1, g)[0]["w"] for _ in range(4000)])
    assert set(draws.abs().unique().tolist()) <= {0.0, 5.0}
    assert torch.allclose(draws.mean(0), v, atol=0.25)


def test_config_and_registry():
    assert REGISTRY["dadaquant"] is DAdaQuant
    with pytest.raises(ValueError, match="q_min"):
        DAdaQuantConfig(name="dadaquant", q_min=16, q_max=8)


def test_two_round_run_books_the_encoded_uploads(write_scenario, tmp_path):
    from iotfl_sim.cli import main

    sc = base_scenario(algorithm={"name": "dadaquant", "phi": 1}, rounds=2, clients_per_round=2,
                       output={"progress": False, "events": "all"})  # fmt: skip
    assert main(["run", str(write_scenario(sc)), "--out", str(tmp_path / "r"), "--quiet"]) == 0
    (run,) = list((tmp_path / "r").iterdir())
    rows = [r.split(",") for r in (run / "rounds.csv").read_text().splitlines()]
    cols = [dict(zip(rows[0], r, strict=True)) for r in rows[1:]]
    events = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]
    encoded = [(e["round"] + 1, e["bytes"]) for e in events if e["event"] == "upload_encoded"]  # events: 0-based
    assert len(encoded) == 4
    for r in (1, 2):
        assert float(cols[r - 1]["bytes_up_round"]) == pytest.approx(sum(b for k, b in encoded if k == r))
    # phi = 1 doubles the level every round (G^^_t >= G^^_t): round 2's levels are higher, its messages longer,
    # and both far below float32 (cnn_small: 94,410 parameters of 4 bytes)
    assert max(b for k, b in encoded if k == 1) < min(b for k, b in encoded if k == 2) < 4 * 94410 / 10
