"""Prunable model families (iotfl_sim.fl.models.families) and their cost model (iotfl_sim.fl.cost.footprint)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from iotfl_sim.fl.cost.footprint import ModelCost, measure_cost
from iotfl_sim.fl.models.build import build_model
from iotfl_sim.fl.models.families import FAMILIES, LAYER_GROUPS
from iotfl_sim.fl.models.layers import Scaler, count_params, stage_blocks
from iotfl_sim.fl.models.plain_nets import InvertedResidual, MobileNetV2, mobilenetv2_blocks
from iotfl_sim.fl.submodel import SubmodelSpec, check_nested, shapes_of, slice_state

# family -> (in_channels, image_size, number of layer groups); small inputs keep the tests fast.
SHAPES = {
    "conv": (1, (28, 28), 4),
    "resnet18": (3, (16, 16), 4),
    "vgg16": (3, (32, 32), 15),
    "mobilenetv2": (3, (32, 32), 9),
    "cnn_small": (1, (8, 8), 3),
    "mlp": (1, (8, 8), 2),
}
HETEROFL_RATES = (1.0, 0.5, 0.25, 0.125, 0.0625)


def _build(family: str, spec: SubmodelSpec, **kwargs) -> nn.Module:
    cin, size, _ = SHAPES[family]
    return build_model(family, spec, num_classes=10, in_channels=cin, image_size=size, **kwargs)


def _meta_params(family: str, spec: SubmodelSpec, in_channels: int, size: tuple[int, int]) -> int:
    with torch.device("meta"):  # shapes only: no allocation or initialisation
        model = build_model(family, spec, num_classes=10, in_channels=in_channels, image_size=size)
    return count_params(model)


def _adaptivefl_spec(rate: float, start: int) -> SubmodelSpec:
    """AdaptiveFL pool model: layers with index >= start keep int(C * rate) channels."""
    return SubmodelSpec(rate=rate, layer_rates=(1.0,) * start + (rate,) * (15 - start), rounding="floor")


# --- official parameter counts ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("rate", "expected"), zip(HETEROFL_RATES, (1_556_874, 391_370, 98_922, 25_274, 6_594), strict=True)
)
def test_heterofl_conv_mnist_param_counts(rate: float, expected: int) -> None:
    assert _meta_params("conv", SubmodelSpec(rate), 1, (28, 28)) == expected


@pytest.mark.parametrize(
    ("rate", "expected"),
    zip(HETEROFL_RATES, (11_172_170, 2_796_714, 701_018, 176_178, 44_510), strict=True),
)
def test_heterofl_resnet18_cifar10_param_counts(rate: float, expected: int) -> None:
    assert _meta_params("resnet18", SubmodelSpec(rate), 3, (32, 32)) == expected


@pytest.mark.parametrize(
    ("rate", "start", "expected"),
    [
        (0.4, 4, 5_667_148),
        (0.4, 6, 6_483_040),
        (0.4, 8, 8_397_106),
        (0.66, 4, 14_839_789),
        (0.66, 6, 15_410_557),
        (0.66, 8, 16_814_977),
        (1.0, 0, 33_646_666),
    ],
)
def test_adaptivefl_vgg16_pool_param_counts(rate: float, start: int, expected: int) -> None:
    # AdaptiveFL (paper Table 1, M params): 5.67, 6.48, 8.39, 14.84, 15.41, 16.81, 33.65.
    assert _meta_params("vgg16", _adaptivefl_spec(rate, start), 3, (32, 32)) == expected


@pytest.mark.parametrize(
    ("rate", "expected"), zip(HETEROFL_RATES, (2_236_682, 587_178, 160_802, 47_208, 15_328), strict=True)
)
def test_mobilenetv2_cifar10_param_counts(rate: float, expected: int) -> None:
    # Rate 1.0 equals torchvision's mobilenet_v2(num_classes=10): strides change no parameter count.
    assert _meta_params("mobilenetv2", SubmodelSpec(rate), 3, (32, 32)) == expected


# --- nested prefix invariant -----------------------------------------------------------------


@pytest.fixture(scope="module")
def global_models() -> dict[str, nn.Module]:
    torch.manual_seed(0)
    return {f: _build(f, SubmodelSpec(1.0, rounding="floor" if f == "vgg16" else "ceil")) for f in FAMILIES}


def _sub_specs(family: str) -> list[SubmodelSpec]:
    groups = SHAPES[family][2]
    rounding = "floor" if family == "vgg16" else "ceil"
    ramp = tuple(1.0 - 0.9 * i / max(1, groups - 1) for i in range(groups))
    mixed = tuple((0.3, 0.8, 0.55)[i % 3] for i in range(groups))
    return [
        SubmodelSpec(1.0, rounding=rounding),
        SubmodelSpec(0.5, rounding=rounding),
        SubmodelSpec(0.33, rounding=rounding),
        SubmodelSpec(0.0625, rounding=rounding),
        SubmodelSpec(0.5, layer_rates=ramp, rounding=rounding),
        SubmodelSpec(0.5, layer_rates=mixed, rounding=rounding),
    ]


def _assert_loads(global_model: nn.Module, sub: nn.Module, family: str) -> None:
    gstate, sstate = global_model.state_dict(), sub.state_dict()
    assert set(sstate) <= set(gstate)
    check_nested(shapes_of(gstate), shapes_of(sstate))
    sub.load_state_dict(slice_state(gstate, shapes_of(sstate)))
    cin, size, _ = SHAPES[family]
    sub.train()
    out = sub(torch.randn(4, cin, *size))
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("family", FAMILIES)
def test_submodels_nest_in_global_model(family: str, global_models: dict[str, nn.Module]) -> None:
    gmodel = global_models[family]
    for spec in _sub_specs(family):
        sub = _build(family, spec)
        if spec.depth is None:
            assert set(sub.state_dict()) == set(gmodel.state_dict()), spec
        _assert_loads(gmodel, sub, family)


@pytest.mark.parametrize("family", FAMILIES)
def test_nesting_below_a_reduced_global_rate_with_tracked_bn(family: str) -> None:
    g = _build(family, SubmodelSpec(0.5), global_rate=0.5, track_bn=True)
    assert any(k.endswith("running_mean") for k in g.state_dict())
    for rate in (0.5, 0.25, 0.1):
        _assert_loads(g, _build(family, SubmodelSpec(rate), global_rate=0.5, track_bn=True), family)


@pytest.mark.parametrize(
    ("family", "depths"),
    [("conv", (1, 2, 3)), ("resnet18", (1, 2, 3)), ("vgg16", (1, 3, 4)), ("mobilenetv2", (1, 4, 6))],
)
def test_depth_truncation_keeps_a_key_subset(
    family: str, depths: tuple[int, ...], global_models: dict[str, nn.Module]
) -> None:
    gkeys = set(global_models[family].state_dict())
    previous: set[str] = set()
    for depth in depths:
        sub = _build(family, SubmodelSpec(0.5, depth=depth))
        keys = set(sub.state_dict())
        assert previous < keys < gkeys
        previous = keys
        _assert_loads(global_models[family], sub, family)


def test_depth_is_rejected_where_unsupported() -> None:
    with pytest.raises(NotImplementedError):
        _build("cnn_small", SubmodelSpec(1.0, depth=2))
    with pytest.raises(ValueError):
        _build("conv", SubmodelSpec(1.0, depth=5))
    with pytest.raises(ValueError):
        _build("resnet18", SubmodelSpec(1.0, depth=5))
    with pytest.raises(ValueError):
        _build("mobilenetv2", SubmodelSpec(1.0, depth=8))


def test_invalid_arguments() -> None:
    with pytest.raises(ValueError):
        build_model("lenet", SubmodelSpec(1.0), num_classes=10, in_channels=1, image_size=(8, 8))
    with pytest.raises(ValueError):
        _build("conv", SubmodelSpec(1.0), norm="batch")
    with pytest.raises(ValueError):
        _build("conv", SubmodelSpec(1.0, layer_rates=(1.0,) * 5))


def test_vgg16_accepts_small_grayscale_inputs() -> None:
    model = build_model("vgg16", SubmodelSpec(0.25), num_classes=7, in_channels=1, image_size=(28, 28))
    assert model(torch.randn(2, 1, 28, 28)).shape == (2, 7)
    assert model.classifier.in_features == 64  # AdaptiveFL's 256-wide head for non-RGB inputs


# --- scaler and batch norm -------------------------------------------------------------------


def test_scaler_module_is_train_only() -> None:
    s, x = Scaler(0.25), torch.randn(3, 5)
    assert torch.allclose(s.train()(x), x / 0.25)
    assert s.eval()(x) is x


@pytest.mark.parametrize("family", ["conv", "resnet18", "mobilenetv2", "cnn_small", "mlp"])
def test_scaler_changes_training_but_not_evaluation(family: str) -> None:
    torch.manual_seed(1)
    spec = SubmodelSpec(0.5)
    with_s = _build(family, spec, norm="none", scaler=True)
    without = _build(family, spec, norm="none", scaler=False)
    without.load_state_dict(with_s.state_dict())
    cin, size, _ = SHAPES[family]
    x = torch.randn(4, cin, *size)
    with torch.no_grad():
        assert torch.allclose(with_s.eval()(x), without.eval()(x))
        assert not torch.allclose(with_s.train()(x), without.train()(x))


def test_scaler_rates_follow_layer_rates_and_global_rate() -> None:
    spec = SubmodelSpec(0.25, layer_rates=(0.5, 0.25, 0.25, 0.125))
    model = build_model("conv", spec, num_classes=10, in_channels=1, image_size=(28, 28), global_rate=0.5)
    rates = [m.rate for m in model.modules() if isinstance(m, Scaler)]
    assert rates == [1.0, 0.5, 0.5, 0.25]


@pytest.mark.parametrize("family", ["vgg16", "mobilenetv2"])
def test_no_scaler_unless_asked(family: str) -> None:
    spec = SubmodelSpec(0.25)
    assert not any(isinstance(m, Scaler) for m in _build(family, spec).modules())
    assert any(isinstance(m, Scaler) for m in _build(family, spec, scaler=True).modules())
    assert any(isinstance(m, Scaler) for m in _build("conv", spec).modules())


@pytest.mark.parametrize("family", FAMILIES)
def test_no_running_stats_without_tracking(family: str) -> None:
    model = _build(family, SubmodelSpec(0.25))
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    assert norms and all(m.momentum is None and m.affine for m in norms)
    assert not any(("running_" in k or "num_batches_tracked" in k) for k in model.state_dict())
    for m in norms:
        assert torch.equal(m.weight, torch.ones_like(m.weight))
        assert torch.equal(m.bias, torch.zeros_like(m.bias))
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert all(torch.equal(m.bias, torch.zeros_like(m.bias)) for m in linears)


# --- cost model ------------------------------------------------------------------------------


def _cost(family: str, spec: SubmodelSpec, **kwargs) -> ModelCost:
    cin, size, _ = SHAPES[family]
    return measure_cost(family, spec, num_classes=10, in_channels=cin, image_size=size, **kwargs)


def test_mlp_flops_match_hand_count() -> None:
    cost = _cost("mlp", SubmodelSpec(0.5), norm="none")
    assert cost.flops_forward_per_sample == 2 * (64 * 100 + 100 * 100 + 100 * 10)
    assert cost.params == (64 * 100 + 100) + (100 * 100 + 100) + (100 * 10 + 10)
    # Activations kept: 2 x (Linear, Scaler, ReLU) outputs of 100 floats + 10 logits.
    assert cost.activation_bytes_per_sample == 4 * (6 * 100 + 10)


def test_conv_mnist_flops_match_hand_count() -> None:
    cost = _cost("conv", SubmodelSpec(1.0))
    macs = 28 * 28 * 64 * 9 + 14 * 14 * 128 * 64 * 9 + 7 * 7 * 256 * 128 * 9 + 3 * 3 * 512 * 256 * 9 + 5120
    assert cost.flops_forward_per_sample == 2 * macs == 79_949_824
    assert cost.params == 1_556_874


def test_train_flops_and_memory_formulae() -> None:
    cost = _cost("cnn_small", SubmodelSpec(1.0))
    assert cost.train_flops(50) == 3 * 50 * cost.flops_forward_per_sample
    assert cost.memory_bytes(32) == cost.params * 4 * 3 + 32 * cost.activation_bytes_per_sample
    assert cost.memory_bytes(32, optimizer_slots=2) - cost.memory_bytes(32) == cost.params * 4
    assert _cost("cnn_small", SubmodelSpec(1.0)) is cost  # cached


@pytest.mark.parametrize("family", FAMILIES)
def test_costs_grow_with_rate(family: str) -> None:
    costs = [_cost(family, SubmodelSpec(r)) for r in sorted(HETEROFL_RATES)]
    for small, large in zip(costs, costs[1:], strict=False):
        assert small.params < large.params
        assert small.flops_forward_per_sample < large.flops_forward_per_sample
        assert small.activation_bytes_per_sample < large.activation_bytes_per_sample
        assert small.memory_bytes(16) < large.memory_bytes(16)


def test_resnet18_cifar_cost() -> None:
    cost = measure_cost("resnet18", SubmodelSpec(1.0), num_classes=10, in_channels=3, image_size=(32, 32))
    assert cost.params == 11_172_170
    assert 1.0e9 < cost.flops_forward_per_sample < 1.2e9  # ~0.56 GMACs


def _mobilenetv2_cifar_macs(num_classes: int = 10) -> int:
    """Hand count of the CIFAR MobileNetV2's multiply-accumulates on one 32x32 image."""
    cfg = [(1, 16, 1, 1), (6, 24, 2, 1), (6, 32, 3, 2), (6, 64, 4, 2),
           (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]  # fmt: skip
    side, cin = 32, 32
    macs = side * side * 32 * 3 * 9  # stem, stride 1
    for t, c, n, s in cfg:
        for b in range(n):
            hidden = t * cin
            if t != 1:
                macs += side * side * cin * hidden  # 1x1 expand at the input resolution
            side //= s if b == 0 else 1
            macs += side * side * hidden * 9 + side * side * hidden * c  # depthwise + projection
            cin = c
    return macs + side * side * 320 * 1280 + 1280 * num_classes


def test_mobilenetv2_cifar_cost() -> None:
    cost = measure_cost("mobilenetv2", SubmodelSpec(1.0), num_classes=10, in_channels=3, image_size=(32, 32))
    assert cost.params == 2_236_682
    assert cost.flops_forward_per_sample == 2 * _mobilenetv2_cifar_macs() == 175_952_896
    half = measure_cost("mobilenetv2", SubmodelSpec(0.5), num_classes=10, in_channels=3, image_size=(32, 32))
    assert half.params == 587_178 and half.flops_forward_per_sample < cost.flops_forward_per_sample / 3


# --- MobileNetV2 structure -------------------------------------------------------------------

# Identity shortcuts of the full architecture, stage by stage: every block but a stage's first.
MNV2_RESIDUALS = [[False], [False, True], [False, True, True], [False, True, True, True],
                  [False, True, True], [False, True, True], [False]]  # fmt: skip


def _blocks(model: nn.Module) -> list[list[InvertedResidual]]:
    return [list(getattr(model, f"layer{i}")) for i in range(1, 8)]


@pytest.mark.parametrize("spec", _sub_specs("mobilenetv2") + [SubmodelSpec(0.37, rounding="floor")], ids=str)
def test_mobilenetv2_pruned_blocks_stay_well_formed(spec: SubmodelSpec) -> None:
    with torch.device("meta"):
        model = build_model("mobilenetv2", spec, num_classes=10, in_channels=3, image_size=(32, 32))
    assert LAYER_GROUPS["mobilenetv2"] == 9
    blocks = _blocks(model)
    assert [[b.residual for b in stage] for stage in blocks] == MNV2_RESIDUALS  # never from pruned widths
    assert blocks[0][0].expand is None and all(b.expand is not None for stage in blocks[1:] for b in stage)
    cin = model.stem.conv.out_channels
    assert cin == spec.width(32, 0)
    for g, stage in enumerate(blocks, start=1):
        for b in stage:
            dw = b.depthwise.conv
            hidden = b.expand.conv.out_channels if b.expand is not None else cin
            assert dw.groups == dw.in_channels == dw.out_channels == hidden
            assert tuple(dw.weight.shape) == (hidden, 1, 3, 3)
            assert b.project.conv.in_channels == hidden
            if b.expand is not None:
                assert b.expand.conv.in_channels == cin
            cin = b.project.conv.out_channels
        assert cin == spec.width((16, 24, 32, 64, 96, 160, 320)[g - 1], g)  # the stage's one output width
    assert model.last.conv.in_channels == cin and model.last.conv.out_channels == spec.width(1280, 8)
    assert model.classifier.out_features == 10


def test_mobilenetv2_hidden_width_follows_the_block_stage_rate() -> None:
    rates = (1.0, 1.0, 0.5, 0.25, 1.0, 1.0, 1.0, 1.0, 1.0)
    with torch.device("meta"):
        model = build_model(
            "mobilenetv2",
            SubmodelSpec(1.0, layer_rates=rates),
            num_classes=10,
            in_channels=3,
            image_size=(32, 32),
        )
    first, second = _blocks(model)[2][:2]  # stage 3 (32 channels) at rate 0.25 after stage 2 at 0.5
    assert tuple(first.expand.conv.weight.shape) == (36, 12, 1, 1)  # hidden ceil(0.25 * 6 * 24), input 12
    assert tuple(second.expand.conv.weight.shape) == (48, 8, 1, 1)  # hidden ceil(0.25 * 6 * 32)
    assert tuple(second.project.conv.weight.shape) == (8, 48, 1, 1)


def test_mobilenetv2_forward_shapes_and_cifar_strides() -> None:
    torch.manual_seed(0)
    model = _build("mobilenetv2", SubmodelSpec(0.5))
    assert isinstance(model, MobileNetV2)
    x = torch.randn(2, 3, 32, 32)
    assert model(x).shape == (2, 10)
    # Stem and the 24-channel stage keep 32x32 (CIFAR variant); three stride-2 stages leave 4x4.
    assert model.forward_features(x).shape == (2, 160, 4, 4)
    assert _build("mobilenetv2", SubmodelSpec(0.5, depth=2))(x).shape == (2, 12, 32, 32)
    assert _build("mobilenetv2", SubmodelSpec(0.5, depth=3))(x).shape == (2, 16, 16, 16)
    gray = build_model("mobilenetv2", SubmodelSpec(0.25), num_classes=62, in_channels=1, image_size=(28, 28))
    assert gray(torch.randn(2, 1, 28, 28)).shape == (2, 62)


def test_mobilenetv2_half_width_submodel_trains_a_step() -> None:
    torch.manual_seed(0)
    gmodel = _build("mobilenetv2", SubmodelSpec(1.0))
    sub = _build("mobilenetv2", SubmodelSpec(0.5))
    sub.load_state_dict(slice_state(gmodel.state_dict(), shapes_of(sub.state_dict())))
    before = {k: v.clone() for k, v in sub.state_dict().items()}
    opt = torch.optim.SGD(sub.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))
    sub.train()
    loss = nn.functional.cross_entropy(sub(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    assert torch.isfinite(loss)
    after = sub.state_dict()
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert changed == list(before)  # every tensor (conv, depthwise, norm, classifier) moved
    with torch.no_grad():
        assert nn.functional.cross_entropy(sub(x), y) < loss


# --- it learns -------------------------------------------------------------------------------


def test_cnn_small_learns_sklearn_digits() -> None:
    datasets = pytest.importorskip("sklearn.datasets")
    x, y = datasets.load_digits(return_X_y=True)
    gen = torch.Generator().manual_seed(0)
    perm = torch.randperm(len(y), generator=gen)
    x = torch.tensor(x / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8)[perm]
    y = torch.tensor(y)[perm]
    split = int(0.8 * len(y))
    torch.manual_seed(0)
    model = build_model("cnn_small", SubmodelSpec(1.0), num_classes=10, in_channels=1, image_size=(8, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    for _ in range(3):
        model.train()
        for idx in torch.randperm(split, generator=gen).split(32):
            loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    with torch.inference_mode():
        acc = (model(x[split:]).argmax(1) == y[split:]).float().mean().item()
    assert acc >= 0.9


def test_stage_blocks_put_shortcut_projections_where_the_full_architecture_changes_shape():
    # ResNet18 (He et al. 2016): a projection in the first block of stages 2-4 only, whatever the submodel's widths
    full = (64, 128, 256, 512)
    for widths in (full, (16, 32, 64, 128), (64, 64, 64, 64)):
        plan = stage_blocks(widths[0], full[0], widths, full, (2, 2, 2, 2), (1, 2, 2, 2))
        assert [[b.keeps_shape for b in stage] for stage in plan] == [[True, True], [False, True], [False, True], [False, True]]
        assert [[b.stride for b in stage] for stage in plan] == [[1, 1], [2, 1], [2, 1], [2, 1]]
        flat = [b for stage in plan for b in stage]
        assert flat[0].cin == widths[0]
        assert all(later.cin == earlier.cout for earlier, later in zip(flat, flat[1:], strict=False))


def test_mobilenetv2_has_torchvisions_ten_residual_blocks_at_any_width():
    # torchvision's mobilenet_v2 adds the input back in 10 of its 17 bottleneck blocks; pruned widths (even all
    # equal) do not change how many
    for widths in ([32, 16, 24, 32, 64, 96, 160, 320, 1280], [8, 4, 6, 8, 16, 24, 40, 80, 320], [8] * 9):
        blocks = [b for stage in mobilenetv2_blocks(widths) for b in stage]
        assert len(blocks) == 17
        assert sum(b.keeps_shape for b in blocks) == 10


def test_a_strided_pointwise_projection_is_the_strided_1x1_convolution():
    """StridedPointwise (every stride-th pixel, then a 1x1 convolution) against nn.Conv2d's own strided 1x1, in
    float64: the same outputs and the same gradients, odd sizes included (the last row and column kept or not as
    the strided convolution does)."""
    from iotfl_sim.fl.models.layers import StridedPointwise

    for size in (8, 7, 1):
        torch.manual_seed(size)
        ours = StridedPointwise(3, 5, 2).double()
        ref = nn.Conv2d(3, 5, kernel_size=1, stride=2, bias=False).double()
        ref.weight.data.copy_(ours.weight.data)
        x = torch.randn(4, 3, size, size, dtype=torch.float64)
        xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
        a, b = ours(xa), ref(xb)
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
        a.square().sum().backward()
        b.square().sum().backward()
        torch.testing.assert_close(xa.grad, xb.grad, rtol=0, atol=1e-12)
        torch.testing.assert_close(ours.weight.grad, ref.weight.grad, rtol=0, atol=1e-12)


STRIDED_SHORTCUT_TRAINING = """
import torch
from iotfl_sim.fl.models.build import build_model
from iotfl_sim.fl.submodel import SubmodelSpec
torch.set_num_threads(1)
losses = set()
for _ in range(20):
    torch.manual_seed(0)
    m = build_model("resnet18", SubmodelSpec(0.0625), num_classes=10, in_channels=1, image_size=(8, 8))
    m = m.to(memory_format=torch.channels_last)
    x = torch.randn(8, 1, 8, 8).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (8,))
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    for _ in range(3):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
    losses.add(loss.item())
print(len(losses))
"""


def test_resnet_shortcuts_train_the_same_in_channels_last_every_time():
    """A ResNet's strided 1x1 shortcut trained in channels_last (as every run trains images, ``fl/layout.py``): 20
    trainings from one seed give one loss, and the process ends normally. With nn.Conv2d's own strided 1x1 this
    crashed (``free(): invalid pointer``) or gave a different loss per training on an AVX2-only CPU (oneDNN's
    ``brgconv_strided:avx2``); on a CPU whose oneDNN kernels are others it passes either way."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", STRIDED_SHORTCUT_TRAINING], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "1"


def test_the_cost_model_prices_a_strided_pointwise_projection_as_the_strided_convolution():
    """The cost model traces on the meta device, where StridedPointwise is nn.Conv2d's strided 1x1: the same ops,
    FLOPs and bytes per training step (simulated time of ResNet runs unchanged by the CPU workaround)."""
    from iotfl_sim.fl.cost.opcost import trace_module_step
    from iotfl_sim.fl.models.layers import StridedPointwise

    ours = trace_module_step(lambda: nn.Sequential(StridedPointwise(4, 8, 2), nn.Flatten()), (4, 8, 8), 8)
    ref = trace_module_step(
        lambda: nn.Sequential(nn.Conv2d(4, 8, kernel_size=1, stride=2, bias=False), nn.Flatten()), (4, 8, 8), 8
    )
    assert ours.names == ref.names and "convolution" in " ".join(ours.names)
    assert ours.flops.tolist() == ref.flops.tolist() and ours.bytes.tolist() == ref.bytes.tolist()
