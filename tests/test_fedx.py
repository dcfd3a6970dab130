"""FedX: model sizes, nesting, the eq. 5 regulariser, quantized wire bytes (FedX, FedAvg, HeteroFL), end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from iotfl_sim.algorithms.fedavg import FedAvg
from iotfl_sim.algorithms.heterofl import HeteroFL
from iotfl_sim.fl.fedx_models import build_fedx_model, level_specs
from iotfl_sim.fl.models import count_params
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
        v = signed.numpy()
        total += sum(len(encode_bucket(float(norms[i]), v[i * bucket : (i + 1) * bucket])) for i in range(len(norms)))
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

    class View:
        def selectable_mask(self):
            return np.ones(6, dtype=bool)

    assignments = s.select(0, View(), np.random.default_rng(0))
    s.dispatch(0, assignments)
    for a in assignments:
        sub = slice_state(s.state, recipe.shapes(a.spec))
        assert s.wire_bytes(a, up=False) == _hand_bytes(sub, 4, 0, 0, a.device, 64)
        assert s.wire_bytes(a, up=True) == recipe.cost(a.spec).params * 4  # 32-bit upload: raw float32
        assert a.bits == 32
        q = s.payload(a)
        assert any(not torch.equal(q[k], sub[k]) for k in q)  # the device trains the quantized weights
    off = FedAvg(FedAvgConfig(name="fedavg"))
    off.setup(ctx)
    assert off.wire_bytes(assignments[0], up=False) is None  # 32/32: the engine's params x 4 as before


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


def _fedx_run(write_scenario, tmp_path, name, **algo):
    from iotfl_sim.cli import main

    sc = base_scenario(
        model={"family": "harwild"},
        algorithm={"name": "fedx", "proxy_classes": [8, 9], "pretrain_epochs": 1, "finetune_samples": 64, **algo},
        rounds=2,
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
    _, ev = _fedx_run(write_scenario, tmp_path, "noft", fine_tune=False)
    assert {e["what"] for e in ev if e["event"] == "server_work"} == {"pretrain", "quantize", "dequantize", "aggregate"}
    _, ev = _fedx_run(write_scenario, tmp_path, "qfedavg", mix={"large": 1.0}, server_data=False)
    assert {e["what"] for e in ev if e["event"] == "server_work"} == {"quantize", "dequantize", "aggregate"}
    assert {e["level"] for e in ev if e["event"] == "dispatch"} == {"large"}


def test_fedx_config_errors_name_the_field():
    with pytest.raises(ValueError, match="bits"):
        FedXConfig(name="fedx", bits={"small": 0})
    with pytest.raises(ValueError, match="mix"):
        FedXConfig(name="fedx", mix={"small": 0.0})
