"""FedX: model sizes, nesting, the eq. 5 regulariser, quantized wire bytes (FedX, FedAvg, HeteroFL), end to end."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
from fake_view import MaskOnlyView

from iotfl_sim.algorithms.fedavg import FedAvg
from iotfl_sim.algorithms.heterofl import HeteroFL
from iotfl_sim.fl.models.fedx import build_fedx_model, level_specs
from iotfl_sim.fl.models.layers import count_params
from iotfl_sim.fl.quantize import encode_bucket, quantize_levels
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.server_train import l2_pull, nested_sgd
from iotfl_sim.fl.submodel import SubmodelSpec, shapes_of, slice_state
from iotfl_sim.scenario.algorithms import FedAvgConfig, FedXConfig, HeteroFLConfig
from iotfl_sim.seeding import int_seed
from tests.conftest import base_scenario, strategy_context

PAPER_OFA = {"small": 2.41e6, "medium": 3.51e6, "large": 6.39e6}  # 200-class head (Tiny-ImageNet), Sec. IV-C
PAPER_HAR = {"small": 76e3, "medium": 153e3, "large": 316e3}


@pytest.mark.parametrize(
    "family,classes,cin,size,paper",
    [("ofa_mbv3", 200, 3, (64, 64), PAPER_OFA), ("harwild", 6, 9, (1, 128), PAPER_HAR)],
)
def test_parameter_counts_within_one_percent_of_the_paper_and_nested(family, classes, cin, size, paper):
    specs = level_specs(family)
    big = build_fedx_model(family, specs["large"], num_classes=classes, in_channels=cin, image_size=size)
    for name, spec in specs.items():
        m = build_fedx_model(family, spec, num_classes=classes, in_channels=cin, image_size=size)
        assert abs(count_params(m) / paper[name] - 1) < 0.01, (name, count_params(m))
        # nested: the sub-network's tensors are prefixes of the global ones and load as such
        m.load_state_dict(slice_state(big.state_dict(), shapes_of(m.state_dict())), strict=True)
    assert count_params(big) == max(count_params(build_fedx_model(family, s, num_classes=classes, in_channels=cin,
                                                                  image_size=size)) for s in specs.values())  # fmt: skip


def test_l2_pull_gradient_is_gamma_times_the_difference():
    p = {"w": torch.tensor([1.0, -2.0, 0.5], requires_grad=True)}
    ref = {"w": torch.tensor([0.0, 1.0, 0.5])}
    l2_pull(p, ref, 0.3).backward()
    assert torch.allclose(p["w"].grad, torch.tensor([0.3, -0.9, 0.0]))
    assert float(l2_pull(p, ref, 0.3).detach()) == pytest.approx(0.15 * (1 + 9 + 0))


def test_fine_tuning_step_adds_lambda_gamma_times_the_pull():
    # One SGD step on the whole batch: theta' = theta - lr (grad CE + gamma (theta - ref)); the CE part is the
    # same with and without the pull, so their difference is -lr gamma (theta - ref), computed here by hand.
    recipe = ModelRecipe("mlp", 3, 1, (2, 2), norm="none", scaler=False)
    spec = SubmodelSpec(1.0)
    torch.manual_seed(0)
    theta = {k: v.detach().clone() for k, v in recipe.build(spec).state_dict().items()}
    ref = {k: v + 0.25 * torch.randn_like(v) for k, v in theta.items()}
    x, y = torch.randn(6, 1, 2, 2), torch.tensor([0, 1, 2, 0, 1, 2])
    kw = dict(epochs=1, batch_size=6, lr=0.1, seed=1, ref=ref)
    plain, _ = nested_sgd(recipe, [spec], theta, x, y, gamma=0.0, **kw)
    pulled, _ = nested_sgd(recipe, [spec], theta, x, y, gamma=0.5, **kw)
    for k in theta:
        assert torch.allclose(pulled[k] - plain[k], -0.1 * 0.5 * (theta[k] - ref[k]), atol=1e-6)


def _hand_bytes(state, bits, seed, rnd, device, bucket):
    """Encoded size built bit by bit with encode_bucket (not the vectorised length function)."""
    g = torch.Generator().manual_seed(int_seed(seed, "qsgd_down", rnd, device))
    total = 0
    for t in state.values():
        norms, signed, _ = quantize_levels(t, bits, g, bucket)
        v, step = signed.numpy(), bucket or t.numel()  # None: the whole tensor under one norm
        total += sum(len(encode_bucket(float(norms[i]), v[i * step : (i + 1) * step])) for i in range(len(norms)))
    return -(-total // 8)


@pytest.mark.parametrize("kind", ["fedavg", "heterofl"])
def test_upload_and_download_bits_set_the_bytes_on_the_wire(kind):
    recipe = ModelRecipe("cnn_small", 10, 1, (8, 8))
    ctx = strategy_context(recipe, n=6, k=3)
    if kind == "fedavg":
        s = FedAvg(FedAvgConfig(name="fedavg", upload_bits=32, download_bits=4, qsgd_bucket=64))
    else:
        s = HeteroFL(HeteroFLConfig(name="heterofl", proportions="a1-b1", upload_bits=32, download_bits=4, qsgd_bucket=64))
    s.setup(ctx)

    class View(MaskOnlyView):
        def selectable_mask(self):
            return np.ones(6, dtype=bool)

    assignments = s.select(0, View(), np.random.default_rng(0))
    s.wire.dispatch(0, assignments, s)
    for a in assignments:
        sub = slice_state(s.state, recipe.shapes(a.spec))
        assert s.wire.message_bytes(a, up=False) == _hand_bytes(sub, 4, 0, 0, a.device, 64)
        assert s.wire.message_bytes(a, up=True) == recipe.cost(a.spec).params * 4  # 32-bit upload: raw float32
        assert a.bits == 32
        q = s.wire.payload(a)
        assert any(not torch.equal(q[k], sub[k]) for k in q)  # the device trains the quantized weights
    off = FedAvg(FedAvgConfig(name="fedavg"))
    off.setup(ctx)
    assert off.wire.message_bytes(assignments[0], up=False) is None  # 32/32: the engine's params x 4 as before


def test_fedavg_wire_bytes_in_a_run(write_scenario, tmp_path):
    from iotfl_sim.cli import main

    sc = base_scenario(algorithm={"name": "fedavg", "upload_bits": 8, "download_bits": 32, "qsgd_bucket": 128},
                       rounds=1, output={"progress": False, "events": "all"})  # fmt: skip
    assert main(["run", str(write_scenario(sc)), "--out", str(tmp_path / "r"), "--quiet"]) == 0
    (run,) = list((tmp_path / "r").iterdir())
    row = (run / "rounds.csv").read_text().splitlines()
    cols = dict(zip(row[0].split(","), row[1].split(","), strict=True))
    events = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]
    params = ModelRecipe("cnn_small", 10, 1, (8, 8)).cost(SubmodelSpec(1.0, name="full")).params
    sent = [e for e in events if e["event"] == "dispatch"]
    assert float(cols["bytes_down"]) == len(sent) * (params * 4 + 1024)
    encoded = [e["bytes"] for e in events if e["event"] == "upload_encoded"]
    assert encoded and float(cols["bytes_up"]) == pytest.approx(sum(encoded))
    assert all(b < params * 4 for b in encoded)  # 8-bit QSGD is smaller than float32


def _fedx_run(write_scenario, tmp_path, name, rounds=2, **algo):
    from iotfl_sim.cli import main

    sc = base_scenario(
        model={"family": "harwild"},
        algorithm={"name": "fedx", "proxy_classes": [8, 9], "pretrain_epochs": 1, "finetune_samples": 64, **algo},
        rounds=rounds,
        output={"progress": False, "events": "all"},
    )
    assert main(["run", str(write_scenario(sc, f"{name}.yaml")), "--out", str(tmp_path / name), "--quiet"]) == 0
    (run,) = list((tmp_path / name).iterdir())
    events = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]
    return (run / "rounds.csv").read_text(), events


def test_fedx_end_to_end_is_deterministic_and_charges_its_server_work(write_scenario, tmp_path):
    a, ev = _fedx_run(write_scenario, tmp_path, "a")
    b, _ = _fedx_run(write_scenario, tmp_path, "b")
    def strip(text: str) -> list[list[str]]:  # every column but host times
        rows = [r.split(",") for r in text.splitlines()]
        keep = [i for i, c in enumerate(rows[0]) if not c.startswith("host_")]
        return [[r[i] for i in keep] for r in rows]
    assert strip(a) == strip(b)
    work = {e["what"] for e in ev if e["event"] == "server_work"}
    assert work == {"pretrain", "quantize", "dequantize", "aggregate", "fine_tune"}
    # every kind of server work comes in each round (the pretraining before the first): one round shows them
    _, ev = _fedx_run(write_scenario, tmp_path, "noft", rounds=1, fine_tune=False)
    assert {e["what"] for e in ev if e["event"] == "server_work"} == {"pretrain", "quantize", "dequantize", "aggregate"}
    _, ev = _fedx_run(write_scenario, tmp_path, "qfedavg", rounds=1, mix={"large": 1.0}, server_data=False)
    assert {e["what"] for e in ev if e["event"] == "server_work"} == {"quantize", "dequantize", "aggregate"}
    assert {e["level"] for e in ev if e["event"] == "dispatch"} == {"large"}


def test_fedx_config_errors_name_the_field():
    with pytest.raises(ValueError, match="bits"):
        FedXConfig(name="fedx", bits={"small": 0})
    with pytest.raises(ValueError, match="mix"):
        FedXConfig(name="fedx", mix={"small": 0.0})


# ---------------------------------------------------------------------------------------------- FedX itself

MLP = ModelRecipe("mlp", 3, 1, (2, 2), norm="none", scaler=False)  # generic levels: widths 50 / 100 / 200


class _AllSelectable(MaskOnlyView):
    def __init__(self, n: int) -> None:
        self.n = n

    def selectable_mask(self):
        return np.ones(self.n, dtype=bool)


def _fedx(n: int = 4, ctx_changes: dict | None = None, **cfg):
    from dataclasses import replace

    from iotfl_sim.algorithms.fedx import FedX

    torch.manual_seed(0)  # the context builds the initial weights from torch's global generator
    ctx = strategy_context(MLP, n=n, k=n)
    if ctx_changes:
        ctx = replace(ctx, **ctx_changes)
    s = FedX(FedXConfig(name="fedx", **cfg))
    s.setup(ctx)
    return s


def _update(s, device: int, level: str, value: float, samples: int = 10):
    from iotfl_sim.algorithms.base import Assignment, Update

    shapes = MLP.shapes(s.specs[level])
    a = Assignment(device, s.specs[level], level=level, bits=32)
    return Update(a, {k: torch.full(sh, value) for k, sh in shapes.items()}, samples, np.arange(3), 0.0)


def test_eq4_averages_each_entry_over_the_devices_holding_it_unweighted():
    s = _fedx(mix={"small": 0.5, "medium": 0.5}, server_data=False)
    before = {k: v.clone() for k, v in s.state.items()}
    # two small devices (1 and 5; the second with 100x the data) and one medium device (6)
    s.aggregate(0, [_update(s, 0, "small", 1.0), _update(s, 1, "small", 5.0, samples=1000), _update(s, 2, "medium", 6.0)])
    w = s.state["hidden.4.weight"]  # 200 x 200 global; small holds [:50, :50], medium [:100, :100]
    assert torch.all(w[:50, :50] == 4.0)  # (1 + 5 + 6) / 3, counts not data sizes (data-weighted: 5.0)
    assert torch.all(w[:100, :100][50:, :] == 6.0) and torch.all(w[:50, 50:100] == 6.0)  # medium alone
    assert torch.equal(w[100:, :], before["hidden.4.weight"][100:, :])  # nobody holds these: unchanged
    assert torch.equal(w[:, 100:], before["hidden.4.weight"][:, 100:])
    b = s.state["classifier.bias"]  # 3 entries, held by everyone
    assert torch.all(b == 4.0)


def _on_grid(q: torch.Tensor, ref: torch.Tensor, s: int) -> tuple[bool, bool]:
    """(every value of q is ||ref|| k / s for an integer k, some k is odd: q is not on the coarser s / 2 grid)."""
    k = q.double() / (float(ref.norm()) / s)
    ok = bool(torch.allclose(k, k.round(), atol=1e-3))
    return ok, bool((k.round().abs() % 2 == 1).any())


def test_each_level_bits_reach_the_wire_down_and_up():
    bits = {"small": 5, "medium": 3}
    s = _fedx(n=6, mix={"small": 0.5, "medium": 0.5}, bits=bits, server_data=False)
    assignments = s.select(0, _AllSelectable(6), np.random.default_rng(0))
    assert {a.level for a in assignments} == {"small", "medium"}
    s.wire.dispatch(0, assignments, s)
    for a in assignments:
        assert a.bits == bits[a.level]
        sub = slice_state(s.state, MLP.shapes(a.spec))
        q = s.wire.payload(a)
        for k in ("hidden.0.weight", "hidden.4.weight"):  # per tensor: s = 2^bits levels of the tensor's own norm
            assert _on_grid(q[k], sub[k], 2 ** bits[a.level]) == (True, True), (a.level, k)
        assert s.wire.message_bytes(a, up=False) == _hand_bytes(sub, bits[a.level], 0, 0, a.device, None)
        # the upload: trained weights quantized at the same level's bits on receipt
        trained = {k: v + 0.01 for k, v in sub.items()}
        from iotfl_sim.algorithms.base import Update

        up = Update(a, dict(trained), 10, np.arange(3), 0.0)
        s.wire.receive(0, up)
        assert _on_grid(up.state["hidden.4.weight"], trained["hidden.4.weight"], 2 ** bits[a.level]) == (True, True)


def _server_data(m: int = 96):
    from types import SimpleNamespace

    g = torch.Generator().manual_seed(4)
    x = torch.randn(m, 1, 2, 2, generator=g)
    y = x.reshape(m, 4)[:, :3].argmax(1)  # a learnable rule
    return {"data": SimpleNamespace(x_train=x, y_train=y), "proxy_indices": np.arange(m)}


def test_fine_tuning_fits_the_server_data_reaches_unheld_entries_and_gamma_pulls_back():
    import torch.nn.functional as F

    def run(**cfg):
        s = _fedx(ctx_changes=_server_data(), mix={"small": 1.0}, pretrain_epochs=0, finetune_samples=None,
                  finetune_epochs=5, finetune_lr=0.1, **cfg)  # fmt: skip
        ups = [_update(s, 0, "small", 0.02), _update(s, 1, "small", -0.01)]
        s.aggregate(0, ups)
        return s

    off, plain, pulled = run(fine_tune=False), run(gamma=0.0), run(gamma=5.0)
    agg = off.state  # eq. 4 alone: the small prefix is (0.02 - 0.01) / 2, the rest the initial weights
    assert torch.allclose(agg["hidden.4.weight"][:50, :50], torch.tensor(0.005))

    def loss(state):
        m = MLP.build(off.global_spec)
        m.load_state_dict(state)
        with torch.no_grad():
            return float(F.cross_entropy(m(off.server_x), off.server_y))

    assert loss(plain.state) < loss(agg) - 0.01  # eq. 5 fits the server's data
    # every entry of the global model trains, including those outside the only sub-network devices hold
    assert not torch.equal(plain.state["hidden.4.weight"][50:, 50:], agg["hidden.4.weight"][50:, 50:])

    def dist(state):
        return sum(float(((state[k] - agg[k]) ** 2).sum()) for k in agg) ** 0.5

    assert 0 < dist(pulled.state) < 0.8 * dist(plain.state)  # (gamma / 2) ||theta - theta_agg||^2 holds it back


def test_fine_tuning_is_charged_only_in_rounds_the_engine_aggregates():
    from iotfl_sim.algorithms.base import Assignment, Outcome

    s = _fedx(ctx_changes={"min_participants": 2}, mix={"small": 1.0})  # system-only: no data, nominal samples
    a = [Assignment(d, s.specs["small"], level="small") for d in range(3)]
    s.observe(0, [Outcome(a[0], "completed"), Outcome(a[1], "deadline")])  # 1 update < min_participants
    assert "fine_tune" not in [w for w, _ in s.c.server_work.drain()]
    s.observe(1, [Outcome(a[0], "completed"), Outcome(a[2], "completed")])
    assert "fine_tune" in [w for w, _ in s.c.server_work.drain()]


def test_public_fraction_gives_the_server_a_share_of_the_devices_classes_too():
    from iotfl_sim.scenario.loader import load_scenario
    from iotfl_sim.sim.setup import load_data, split_clients

    def split(**algo):
        data = base_scenario(algorithm={"name": "fedx", "proxy_classes": [8, 9], **algo})
        sc = load_scenario(text=json.dumps(data))
        ds = load_data(sc)
        return ds.y_train.numpy(), *split_clients(sc, ds, 8)

    y, _, proxy, parts = split(public_fraction=0.25)
    others = np.flatnonzero(~np.isin(y, [8, 9]))
    assert set(np.flatnonzero(np.isin(y, [8, 9]))) <= set(proxy)  # every sample of the server's classes
    assert len(proxy) - int(np.isin(y, [8, 9]).sum()) == round(0.25 * len(others))  # and a quarter of the rest
    clients = np.concatenate(parts)
    assert not set(clients) & set(proxy) and len(clients) + len(proxy) == len(y)
    _, _, proxy0, _ = split()
    assert len(proxy0) == int(np.isin(y, [8, 9]).sum())  # default: the server's classes only
    with pytest.raises(ValueError, match="public_fraction > 0 .* proxy_classes"):
        FedXConfig(name="fedx", public_fraction=0.1)


@pytest.mark.parametrize(
    "bad, words",
    [
        ({"mix": {"medium": 0.7, "small": 0.7}}, "the shares sum to 1.4"),  # a typo, not 50/50 in disguise
        ({"proxy_classes": []}, "[] names no class"),
        ({"proxy_classes": [4, 5, 4]}, "class 4 is named twice"),
    ],
)
def test_a_mix_or_server_classes_that_say_two_things_are_refused(bad, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        FedXConfig(name="fedx", **bad)
    FedXConfig(name="fedx", assign="eq2", mix={"small": 1.0, "medium": 1.0})  # eq2 reads only the names


def test_dadaquant_server_classes_named_once():
    from iotfl_sim.scenario.algorithms.quantized import DAdaQuantConfig

    with pytest.raises(ValueError, match="class 3 is named twice"):
        DAdaQuantConfig(name="dadaquant", proxy_classes=[3, 3])
