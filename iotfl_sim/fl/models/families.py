"""Prunable model families whose width-reduced submodels nest inside the global model.

Every family is built from a :class:`SubmodelSpec`: each prunable layer keeps ``spec.width(C, l)`` of
its ``C`` output channels, takes the kept outputs of the layer before as inputs, and the classifier
keeps every class. Parameter names never depend on the rate, so a submodel's ``state_dict`` has the
same keys as the global model's (a subset when ``spec.depth`` truncates the network) and each tensor
shape is an elementwise prefix of the global one: ``slice_state(global, shapes_of(sub))`` loads.

Families (see ``FAMILIES`` and ``EE_FAMILIES``):

- ``conv``: HeteroFL's 4-layer CNN, hidden [64, 128, 256, 512].
- ``resnet18``: HeteroFL's pre-activation ResNet18 (3x3 stem, no max-pool, blocks [2, 2, 2, 2]).
- ``vgg16``: AdaptiveFL's VGG16-BN with the 4096-wide head (256-wide for non-RGB inputs, as in
  AdaptiveFL's code); 15 prunable groups (13 convs + 2 hidden FC layers, FlexFL's grouping).
- ``mobilenetv2``: MobileNetV2 (FlexFL's and AdapterFL's mid-size model) with CIFAR strides; 9 prunable
  groups (stem, the 7 bottleneck stages, the last 1x1 conv).
- ``cnn_small``: a 3-conv CNN for tiny images such as sklearn's 8x8 digits.
- ``mlp``: two hidden layers [200, 200], for tiny tests and tabular data (HAR).
- ``cnn2``: AdapterFL's small prototype, a LeNet-style 2-conv CNN (two 5x5 convs with 64 channels, each
  followed by a 2x2 max-pool, then FC 64 -> classes); 210,442 parameters without norm on CIFAR-10,
  AdapterFL's "0.21 M" (Table I). Not in ``FAMILIES`` (its pooled map needs images of at least 16 px).
- ``resnet110``: ScaleFL's CIFAR ResNet110 (16-32-64 post-activation basic blocks, 18 per stage; built by
  ``fl.models.resnet_cifar``); 3 prunable groups (the stages, the stem in the first), depth 1-4 = the segments
  that ScaleFL's exits close. Not in ``FAMILIES`` (110 layers are too slow for the generic tests).
- ``conv_ee``, ``resnet18_ee``, ``vgg16_ee``, ``resnet110_ee`` (and ``*_ee_light``): the same backbones
  with an early exit after every stage (ScaleFL); built by ``fl.models.early_exit``, their forward returns a
  list of logits.
"""

from __future__ import annotations

from dataclasses import dataclass

from iotfl_sim.fl.submodel import SubmodelSpec

# Single-output prunable families (the families every generic model test runs over).
FAMILIES: tuple[str, ...] = ("conv", "resnet18", "vgg16", "mobilenetv2", "cnn_small", "mlp")
# Early-exit variants (``fl.models.early_exit``): ScaleFL's exit heads after every stage of a base family;
# ``_ee_light`` uses a lighter head (avgpool -> fc) for small IoT models. Their forward returns a list.
EE_BASES: tuple[str, ...] = ("conv", "resnet18", "vgg16", "resnet110")
EE_FAMILIES: tuple[str, ...] = tuple(f"{b}_ee" for b in EE_BASES) + tuple(f"{b}_ee_light" for b in EE_BASES)
# FedX's global models (``fl.models.fedx``): the OFA MobileNetV3 supernet (sub-networks (d, e)) and HAR-Wild.
FEDX_FAMILIES: tuple[str, ...] = ("ofa_mbv3", "harwild")
# AdapterFL's 2-conv CNN (``TwoConvCNN``), kept out of FAMILIES because 8x8 inputs are too small for it,
# and ScaleFL's ResNet110 (``fl.models.resnet_cifar``), too slow for the generic model tests.
EXTRA_FAMILIES: tuple[str, ...] = ("cnn2", "resnet110")
# What ``build_plain`` builds (ResNet110 is ``fl.models.resnet_cifar``'s; every family: ``catalog.MODEL_FAMILIES``)
PLAIN_FAMILIES: tuple[str, ...] = FAMILIES + ("cnn2",)
NORMS: tuple[str, ...] = ("bn", "in", "ln", "none")

CONV_HIDDEN = (64, 128, 256, 512)
RESNET_HIDDEN = (64, 128, 256, 512)
RESNET_BLOCKS = (2, 2, 2, 2)
# ScaleFL's CIFAR ResNet110 (``fl.models.resnet_cifar``): stage widths, 18 blocks per stage, and the blocks that
# end its 4 segments (ScaleFL's exits after blocks 30, 38, 46, then the classifier after 54).
RESNET110_HIDDEN = (16, 32, 64)
RESNET110_BLOCKS = (18, 18, 18)
RESNET110_SEGMENT_ENDS = (30, 38, 46, 54)
VGG16_CFG: tuple[int | str, ...] = (
    64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M",
)  # fmt: skip
VGG16_CONVS = 13
MOBILENETV2_STEM = 32
# (expansion t, output channels c, blocks n, first block's stride s) per bottleneck stage. The second
# stage's stride is 1 instead of ImageNet's 2: the CIFAR variant (see ``MobileNetV2``).
MOBILENETV2_CFG: tuple[tuple[int, int, int, int], ...] = (
    (1, 16, 1, 1), (6, 24, 2, 1), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1),
)  # fmt: skip
MOBILENETV2_LAST = 1280
CNN_SMALL_HIDDEN = (32, 64, 128)
MLP_HIDDEN = (200, 200)
CNN2_HIDDEN = (64, 64, 64)  # conv1, conv2, the hidden FC layer

# Number of prunable layer groups (the length ``layer_rates`` may have) per family.
LAYER_GROUPS: dict[str, int] = {
    "conv": len(CONV_HIDDEN),
    "resnet18": len(RESNET_HIDDEN),
    "vgg16": VGG16_CONVS + 2,
    "mobilenetv2": len(MOBILENETV2_CFG) + 2,  # stem, one group per stage, last 1x1 conv
    "cnn_small": len(CNN_SMALL_HIDDEN),
    "mlp": len(MLP_HIDDEN),
    "cnn2": len(CNN2_HIDDEN),
    "resnet110": len(RESNET110_HIDDEN),
}
# Prunable groups that are hidden fully connected layers: AdaptiveFL scales them by r_w whatever the
# start layer (its VGG head 512r -> 4096r -> 4096r -> classes).
FC_GROUPS: dict[str, tuple[int, ...]] = {"vgg16": (VGG16_CONVS, VGG16_CONVS + 1)}
# Full depth per family that supports depth truncation (conv units with their pools, ResNet stages,
# VGG pool-delimited stages, MobileNetV2 bottleneck stages).
FULL_DEPTH: dict[str, int] = {
    "conv": len(CONV_HIDDEN), "resnet18": len(RESNET_HIDDEN), "vgg16": 5, "mobilenetv2": len(MOBILENETV2_CFG),
    "resnet110": len(RESNET110_SEGMENT_ENDS),
}  # fmt: skip


def _check_depth(family: str, depth: int | None) -> int | None:
    if depth is None:
        return None
    full = FULL_DEPTH.get(family)
    if full is None:
        raise NotImplementedError(f"depth truncation is not supported for family {family!r}")
    if not 1 <= depth <= full:
        raise ValueError(f"depth for {family!r} must be in [1, {full}], got {depth}")
    return depth


@dataclass(frozen=True)
class BuildArgs:
    """What every family's builder takes beside the family and the spec (``fl.models.build.build_model`` states
    each argument)."""

    num_classes: int
    in_channels: int
    image_size: tuple[int, int]
    global_rate: float = 1.0
    scaler: bool | None = None
    track_bn: bool = False
    norm: str = "bn"


@dataclass(frozen=True)
class PlainLayout:
    """A single-output family's submodel, its arguments checked: ``depth`` (None: full), whether Scalers are on,
    and each layer group's rate / ``global_rate``."""

    depth: int | None
    scaler: bool
    rates: list[float]


def plain_layout(family: str, spec: SubmodelSpec, args: BuildArgs) -> PlainLayout:
    """The layout of ``spec`` in ``family`` (``fl.models.plain`` and ``fl.models.resnet_cifar`` share it)."""
    if args.norm not in NORMS:
        raise ValueError(f"unknown norm {args.norm!r}; expected one of {NORMS}")
    if not 0.0 < args.global_rate <= 1.0:
        raise ValueError(f"global_rate must be in (0, 1], got {args.global_rate}")
    groups = LAYER_GROUPS[family]
    if spec.layer_rates is not None and len(spec.layer_rates) > groups:
        raise ValueError(
            f"{family!r} has {groups} prunable layer groups, got {len(spec.layer_rates)} layer_rates"
        )
    depth = _check_depth(family, spec.depth)
    scaler = (family not in ("vgg16", "mobilenetv2", "cnn2")) if args.scaler is None else bool(args.scaler)
    return PlainLayout(depth, scaler, [spec.layer_rate(layer) / args.global_rate for layer in range(groups)])


def start_layer_rates(family: str, r_w: float, start: int) -> tuple[float, ...]:
    """Per-group rates of AdaptiveFL's fine-grained width pruning (r_w, I): groups with 0-based index
    below ``start`` keep every channel, the others keep ``r_w`` of them; hidden FC groups
    (``FC_GROUPS``) always get ``r_w``. Use as ``SubmodelSpec(layer_rates=...)`` (AdaptiveFL truncates with
    int(): ``rounding=fl.submodel.truncation(reference)``)."""
    if family not in LAYER_GROUPS:
        raise ValueError(f"unknown model family {family!r}; expected one of {FAMILIES}")
    if not 0.0 < r_w <= 1.0:
        raise ValueError(f"width rate must be in (0, 1], got {r_w}")
    groups = LAYER_GROUPS[family]
    if not 0 <= start < groups:
        raise ValueError(f"start layer for {family!r} must be in [0, {groups - 1}], got {start}")
    fc = FC_GROUPS.get(family, ())
    return tuple(r_w if (g >= start or g in fc) else 1.0 for g in range(groups))
