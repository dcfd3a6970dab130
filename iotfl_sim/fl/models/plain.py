"""``build_plain``: the single-output families of ``fl.models.families`` built from a ``SubmodelSpec``, one
builder per family."""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from iotfl_sim.fl.models.families import (
    CNN2_HIDDEN,
    CNN_SMALL_HIDDEN,
    CONV_HIDDEN,
    FULL_DEPTH,
    MLP_HIDDEN,
    MOBILENETV2_CFG,
    MOBILENETV2_LAST,
    MOBILENETV2_STEM,
    PLAIN_FAMILIES,
    RESNET_HIDDEN,
    VGG16_CFG,
    VGG16_CONVS,
    BuildArgs,
    PlainLayout,
    plain_layout,
)  # fmt: skip
from iotfl_sim.fl.models.layers import conv_units, init_params
from iotfl_sim.fl.models.plain_nets import MLP, VGG, MobileNetV2, PlainCNN, PreActResNet, TwoConvCNN
from iotfl_sim.fl.submodel import SubmodelSpec


def build_plain(family: str, spec: SubmodelSpec, args: BuildArgs) -> nn.Module:
    """The single-output families (``PLAIN_FAMILIES``) from ``spec``: a fresh, initialised module."""
    builder = BUILDERS.get(family)
    if builder is None:
        raise ValueError(f"{family!r} is not built here; expected one of {PLAIN_FAMILIES} (fl.models.build builds the rest)")
    model = builder(spec, plain_layout(family, spec, args), args)
    init_params(model)
    return model


def _widths(spec: SubmodelSpec, full: tuple[int, ...]) -> list[int]:
    """Kept channels of each layer group whose full widths are ``full``."""
    return [spec.width(c, layer) for layer, c in enumerate(full)]


def _conv(spec: SubmodelSpec, lay: PlainLayout, args: BuildArgs) -> nn.Module:
    d = lay.depth or FULL_DEPTH["conv"]
    units = conv_units(_widths(spec, CONV_HIDDEN[:d]), lay.rates[:d], args.in_channels, lay.scaler, args.norm, args.track_bn)
    # HeteroFL drops the last max-pool; a truncated model keeps each of its units' pools
    pools = [True] * min(d, len(CONV_HIDDEN) - 1) + [False] * (d == len(CONV_HIDDEN))
    return PlainCNN(units, pools, args.num_classes, has_head=d == len(CONV_HIDDEN))


def _cnn_small(spec: SubmodelSpec, lay: PlainLayout, args: BuildArgs) -> nn.Module:
    units = conv_units(_widths(spec, CNN_SMALL_HIDDEN), lay.rates, args.in_channels, lay.scaler, args.norm, args.track_bn)
    return PlainCNN(units, [False, True, False], args.num_classes)


def _cnn2(spec: SubmodelSpec, lay: PlainLayout, args: BuildArgs) -> nn.Module:
    return TwoConvCNN(
        _widths(spec, CNN2_HIDDEN), lay.rates, in_channels=args.in_channels, image_size=tuple(args.image_size),
        num_classes=args.num_classes, scaler=lay.scaler, norm=args.norm, track_bn=args.track_bn,
    )  # fmt: skip


def _resnet18(spec: SubmodelSpec, lay: PlainLayout, args: BuildArgs) -> nn.Module:
    return PreActResNet(
        _widths(spec, RESNET_HIDDEN), lay.rates, in_channels=args.in_channels, num_classes=args.num_classes,
        depth=lay.depth or FULL_DEPTH["resnet18"], scaler=lay.scaler, norm=args.norm, track_bn=args.track_bn,
    )  # fmt: skip


def _vgg16(spec: SubmodelSpec, lay: PlainLayout, args: BuildArgs) -> nn.Module:
    convs = tuple(int(c) for c in VGG16_CFG if c != "M")
    # AdaptiveFL's code uses a 4096-wide head for RGB inputs and a 256-wide one otherwise.
    fc = 4096 if args.in_channels == 3 else 256
    fc_widths = [spec.width(fc, VGG16_CONVS), spec.width(fc, VGG16_CONVS + 1)]
    return VGG(
        _widths(spec, convs), fc_widths, lay.rates, in_channels=args.in_channels, image_size=tuple(args.image_size),
        num_classes=args.num_classes, depth=lay.depth or FULL_DEPTH["vgg16"], scaler=lay.scaler, norm=args.norm,
        track_bn=args.track_bn,
    )  # fmt: skip


def _mobilenetv2(spec: SubmodelSpec, lay: PlainLayout, args: BuildArgs) -> nn.Module:
    widths, hidden = _mobilenetv2_widths(spec)
    return MobileNetV2(
        widths, hidden, lay.rates, in_channels=args.in_channels, num_classes=args.num_classes,
        depth=lay.depth or FULL_DEPTH["mobilenetv2"], scaler=lay.scaler, norm=args.norm, track_bn=args.track_bn,
    )  # fmt: skip


def _mlp(spec: SubmodelSpec, lay: PlainLayout, args: BuildArgs) -> nn.Module:
    h, w = args.image_size
    return MLP(
        args.in_channels * h * w, _widths(spec, MLP_HIDDEN), lay.rates, num_classes=args.num_classes,
        scaler=lay.scaler, norm=args.norm, track_bn=args.track_bn,
    )  # fmt: skip


BUILDERS: dict[str, Callable[[SubmodelSpec, PlainLayout, BuildArgs], nn.Module]] = {
    "conv": _conv, "resnet18": _resnet18, "vgg16": _vgg16, "mobilenetv2": _mobilenetv2, "cnn_small": _cnn_small,
    "mlp": _mlp, "cnn2": _cnn2,
}  # fmt: skip


def _mobilenetv2_widths(spec: SubmodelSpec) -> tuple[list[int], list[list[int]]]:
    """Kept channels of the 9 layer groups, and each block's expanded width (cut by its stage's rate)."""
    full = [MOBILENETV2_STEM] + [c for _, c, _, _ in MOBILENETV2_CFG] + [MOBILENETV2_LAST]
    widths = [spec.width(c, group) for group, c in enumerate(full)]
    hidden: list[list[int]] = []
    cin, full_cin = widths[0], MOBILENETV2_STEM
    for stage, (t, c, n, _) in enumerate(MOBILENETV2_CFG):
        stage_hidden = []
        for _ in range(n):
            # Without expansion (t = 1) the depthwise conv runs on the block's input channels.
            stage_hidden.append(cin if t == 1 else spec.width(t * full_cin, stage + 1))
            cin, full_cin = widths[stage + 1], c
        hidden.append(stage_hidden)
    return widths, hidden


