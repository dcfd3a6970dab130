"""DAdaQuant: client-adaptive levels against Theorem 1's closed form, the time-adaptive schedule on a hand-made
loss sequence, Federated QSGD's levels and bits, and a two-round run."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import base_scenario

from iotfl_sim import methods
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
    assert methods.method("dadaquant").strategy_class() is DAdaQuant
    with pytest.raises(ValueError, match="q_min"):
        DAdaQuantConfig(name="dadaquant", q_min=16, q_max=8)


def test_a_run_follows_the_doubling_rule_on_a_scripted_loss_history(write_scenario, tmp_path, monkeypatch):
    """phi = 2, psi = 0.5, q_min = 1, q_max = 8, the loss estimates G^_1..G^_6 = 5, 3, 4, 4, 2, 6 (scripted: the
    rule is under test, not the loss). By hand: G^^ = 5, 4, 4, 4, 3, 4.5. After round 1 (held 1 < phi): 1. After
    round 2: 4 >= G^^_1 = 5? no: 1. After round 3: 4 >= G^^_2 = 4, held 3 >= 2: doubles to 2 (held 0). After round 4:
    4 >= 4 but held 1 < phi: 2. After round 5: 3 >= 4? no: 2. After round 6: 4.5 >= 3, held 3: 4. A round uses the
    level decided after the one before: rounds 1-7 at 1, 1, 1, 2, 2, 2, 4."""
    from iotfl_sim.cli import main

    scripted = iter([5.0, 3.0, 4.0, 4.0, 2.0, 6.0, 1.0])
    monkeypatch.setattr(DAdaQuant, "_loss_terms", lambda self, updates: (next(scripted), 1.0))  # G^_t = total / weight
    used: list[list[int]] = []
    select = DAdaQuant.select

    def spy(self, *args):
        out = select(self, *args)
        used.append([a.extras["q"] for a in out])
        return out

    monkeypatch.setattr(DAdaQuant, "select", spy)
    sc = base_scenario(
        algorithm={"name": "dadaquant", "adapt": "time", "phi": 2, "psi": 0.5, "q_min": 1, "q_max": 8},
        rounds=7, clients_per_round=2, server={"eval_every": 7}, output={"progress": False, "events": "all"},
    )  # fmt: skip
    assert main(["run", str(write_scenario(sc)), "--out", str(tmp_path / "r"), "--quiet"]) == 0
    assert used == [[q, q] for q in (1, 1, 1, 2, 2, 2, 4)]
    (run,) = list((tmp_path / "r").iterdir())
    rows = [r.split(",") for r in (run / "rounds.csv").read_text().splitlines()]
    cols = [dict(zip(rows[0], r, strict=True)) for r in rows[1:]]
    events = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]
    encoded = [(e["round"] + 1, e["bytes"]) for e in events if e["event"] == "upload_encoded"]  # events: 0-based
    assert len(encoded) == 14
    for r in range(1, 8):
        assert float(cols[r - 1]["bytes_up_round"]) == pytest.approx(sum(b for k, b in encoded if k == r))
    # more intervals, more non-zero levels to code: the q = 4 messages are longer than every q = 1 message, and
    # all far below float32 (cnn_small: 94,410 parameters of 4 bytes)
    assert max(b for k, b in encoded if k <= 3) < min(b for k, b in encoded if k == 7) < 4 * 94410 / 10


# ------------------------------------------------------------------- FedX's comparison setting: server data, plain FT

def _dadaquant(ctx_changes: dict | None = None, **cfg):
    from dataclasses import replace

    from iotfl_sim.fl.recipe import ModelRecipe
    from tests.conftest import strategy_context

    torch.manual_seed(0)
    ctx = strategy_context(ModelRecipe("mlp", 3, 1, (2, 2), norm="none", scaler=False), n=4, k=4)
    if ctx_changes:
        ctx = replace(ctx, **ctx_changes)
    s = DAdaQuant(DAdaQuantConfig(name="dadaquant", **cfg))
    s.setup(ctx)
    return s


def _server_data(m: int = 96) -> dict:
    from types import SimpleNamespace

    g = torch.Generator().manual_seed(4)
    x = torch.randn(m, 1, 2, 2, generator=g)
    y = x.reshape(m, 4)[:, :3].argmax(1)  # a learnable rule
    return {"data": SimpleNamespace(x_train=x, y_train=y), "proxy_indices": np.arange(m), "parts": None}


def _updates(s) -> list:
    """Two clients of 10 samples each, their models p_t + 0.01 and p_t + 0.02 (as received)."""
    from iotfl_sim.algorithms.base import Assignment, Update

    return [
        Update(Assignment(d, s.spec, level="full", extras={"q": 8}), {k: v + 0.01 * (d + 1) for k, v in s.state.items()},
               10, np.arange(3), 0.0)
        for d in (0, 1)
    ]  # fmt: skip


def test_server_fine_tuning_fits_the_server_data_without_a_pull_and_prices_the_next_upload_from_it():
    import torch.nn.functional as F

    cfg = dict(proxy_classes=[0, 1, 2], finetune_samples=None, finetune_lr=0.1, adapt="none")
    off = _dadaquant(_server_data(), **cfg)
    on = _dadaquant(_server_data(), finetune_epochs=5, **cfg)
    before = {k: v.clone() for k, v in on.state.items()}
    for s in (off, on):
        s.aggregate(0, _updates(s))
    # without fine-tuning the aggregate is p_t + the data-weighted mean of +0.01 and +0.02 (10 samples each)
    assert torch.allclose(off.state["classifier.bias"], before["classifier.bias"] + 0.015, atol=1e-6)

    def loss(state):
        m = on.recipe.build(on.spec)
        m.load_state_dict(state)
        with torch.no_grad():
            return float(F.cross_entropy(m(on.server_x), on.server_y))

    assert on.server_x is not None and off.server_x is None  # 0 epochs: the server's data is not even held
    assert loss(on.state) < loss(off.state) - 0.01  # the fine-tuning fits the server's classes
    # the next uploads are priced from p_{t+1} - p_t, the fine-tuned step, not the aggregate's
    step = {k: on.state[k] - before[k] for k in before}
    assert all(torch.equal(on.last_update[k], step[k]) for k in step)


def test_server_fine_tuning_is_charged_each_round_on_the_servers_share():
    from iotfl_sim.algorithms.base import Assignment, Outcome, TrainWork

    s = _dadaquant(_server_data(96), proxy_classes=[0, 1, 2], finetune_epochs=2, finetune_samples=64)
    done = [Outcome(Assignment(0, s.spec, level="full"), "completed")]
    s.observe(0, done)
    ((what, work),) = s.c.server_work.drain()
    assert what == "fine_tune" and isinstance(work, TrainWork)
    assert (work.samples, work.epochs, work.batch, work.l2_pull) == (64, 2, 32, False)  # min(96, 64); no pull
    # system-only: no data, so the server's classes' share of the nominal train set, classes balanced:
    # 4 devices x 10 samples = 40; 1 of 3 classes -> round(40 / 3) = 13 < finetune_samples
    s = _dadaquant(proxy_classes=[2], finetune_epochs=1)
    s.observe(0, done)
    ((_, work),) = s.c.server_work.drain()
    assert work.samples == 13
    s.observe(1, [])  # a round in which nothing completed fine-tunes nothing
    assert s.c.server_work.drain() == []



def test_fine_tuning_is_charged_only_in_rounds_the_engine_aggregates():
    """The engine aggregates (and so the server fine-tunes) only with min_participants updates; fewer completed
    tasks leave nothing to charge, in data runs and system-only runs alike (FedX's rule too)."""
    from dataclasses import replace

    from iotfl_sim.algorithms.base import Assignment, Outcome

    s = _dadaquant(proxy_classes=[2], finetune_epochs=1)
    s.ctx = replace(s.c, min_participants=2)
    ok, failed = (Outcome(Assignment(d, s.spec, level="full"), st) for d, st in ((0, "completed"), (1, "oom")))
    s.observe(0, [ok, failed])  # one update < 2: the round was not aggregated
    assert s.c.server_work.drain() == []
    s.observe(1, [ok, Outcome(Assignment(2, s.spec, level="full"), "completed")])
    assert [w for w, _ in s.c.server_work.drain()] == ["fine_tune"]


def test_fine_tuning_without_server_classes_is_refused_naming_both_fields():
    with pytest.raises(ValueError, match="finetune_epochs > 0 .* proxy_classes"):
        DAdaQuantConfig(name="dadaquant", finetune_epochs=1)
