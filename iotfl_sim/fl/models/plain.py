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
from iotfl_sim.fl.models.layers import NetOptions, conv_units, init_params
from iotfl_sim.fl.models.plain_nets import (
    MLP,
    VGG,
    MobileNetV2,
    PlainCNN,
    PreActResNet,
    TwoConvCNN,
    mobilenetv2_blocks,
)  # fmt: skip
from iotfl_sim.fl.submodel import SubmodelSpec


def build_plain(family: str, spec: SubmodelSpec, args: BuildArgs) -> nn.Module:
    """The single-output families (``PLAIN_FAMILIES``) from ``spec``: a fresh, initialised module."""
    builder = BUILDERS.get(family)
    if builder is None:
        raise ValueError(f"{family!r} is not built here; expected one of {PLAIN_FAMILIES} (fl.models.build builds the rest)")
    lay = plain_layout(family, spec, args)
    model = builder(spec, lay, NetOptions.of(args, lay.scaler))
    init_params(model)
    return model


def _widths(spec: SubmodelSpec, full: tuple[int, ...]) -> list[int]:
    """Kept channels of each layer group whose full widths are ``full``."""
    return [spec.width(c, layer) for layer, c in enumerate(full)]


def _conv(spec: SubmodelSpec, lay: PlainLayout, net: NetOptions) -> nn.Module:
    d = lay.depth or FULL_DEPTH["conv"]
    units = conv_units(_widths(spec, CONV_HIDDEN[:d]), lay.rates[:d], net)
    # HeteroFL drops the last max-pool; a truncated model keeps each of its units' pools
    pools = [True] * min(d, len(CONV_HIDDEN) - 1) + [False] * (d == len(CONV_HIDDEN))
    return PlainCNN(units, pools, net.num_classes, has_head=d == len(CONV_HIDDEN))


def _cnn_small(spec: SubmodelSpec, lay: PlainLayout, net: NetOptions) -> nn.Module:
    return PlainCNN(conv_units(_widths(spec, CNN_SMALL_HIDDEN), lay.rates, net), [False, True, False], net.num_classes)


def _cnn2(spec: SubmodelSpec, lay: PlainLayout, net: NetOptions) -> nn.Module:
    return TwoConvCNN(_widths(spec, CNN2_HIDDEN), lay.rates, net)


def _resnet18(spec: SubmodelSpec, lay: PlainLayout, net: NetOptions) -> nn.Module:
    return PreActResNet(_widths(spec, RESNET_HIDDEN), lay.rates, lay.depth or FULL_DEPTH["resnet18"], net)


def _vgg16(spec: SubmodelSpec, lay: PlainLayout, net: NetOptions) -> nn.Module:
    convs = tuple(int(c) for c in VGG16_CFG if c != "M")
    # AdaptiveFL's code uses a 4096-wide head for RGB inputs and a 256-wide one otherwise.
    fc = 4096 if net.in_channels == 3 else 256
    fc_widths = [spec.width(fc, VGG16_CONVS), spec.width(fc, VGG16_CONVS + 1)]
    return VGG(_widths(spec, convs), fc_widths, lay.rates, lay.depth or FULL_DEPTH["vgg16"], net)


def _mobilenetv2(spec: SubmodelSpec, lay: PlainLayout, net: NetOptions) -> nn.Module:
    widths, hidden = _mobilenetv2_widths(spec)
    return MobileNetV2(widths, hidden, lay.rates, lay.depth or FULL_DEPTH["mobilenetv2"], net)


def _mlp(spec: SubmodelSpec, lay: PlainLayout, net: NetOptions) -> nn.Module:
    return MLP(_widths(spec, MLP_HIDDEN), lay.rates, net)


BUILDERS: dict[str, Callable[[SubmodelSpec, PlainLayout, NetOptions], nn.Module]] = {
    "conv": _conv, "resnet18": _resnet18, "vgg16": _vgg16, "mobilenetv2": _mobilenetv2, "cnn_small": _cnn_small,
    "mlp": _mlp, "cnn2": _cnn2,
}  # fmt: skip


def _mobilenetv2_widths(spec: SubmodelSpec) -> tuple[list[int], list[list[int]]]:
    """Kept channels of the 9 layer groups, and each block's expanded width (cut by its stage's rate)."""
    full = [MOBILENETV2_STEM] + [c for _, c, _, _ in MOBILENETV2_CFG] + [MOBILENETV2_LAST]
    widths = _widths(spec, tuple(full))
    hidden: list[list[int]] = []
    for stage, ((t, _, _, _), blocks) in enumerate(zip(MOBILENETV2_CFG, mobilenetv2_blocks(widths), strict=True)):
        # Without expansion (t = 1) the depthwise conv runs on the block's input channels.
        hidden.append([b.cin if t == 1 else spec.width(t * b.full_cin, stage + 1) for b in blocks])
    return widths, hidden
