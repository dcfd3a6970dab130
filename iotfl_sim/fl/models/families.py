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

import torch
from torch import nn

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


class Scaler(nn.Module):
    """Divides activations by ``rate`` (submodel rate / global rate) in training mode only.

    HeteroFL's scaler compensates for the smaller fan-in of a width-reduced layer while training;
    at evaluation it is the identity (ScaleFL's always-on variant is a different module).
    """

    def __init__(self, rate: float) -> None:
        super().__init__()
        if rate <= 0:
            raise ValueError(f"scaler rate must be positive, got {rate}")
        self.rate = float(rate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / self.rate if self.training else x

    def extra_repr(self) -> str:
        return f"rate={self.rate:g}"


def _scaler(enabled: bool, rate: float) -> nn.Module:
    return Scaler(rate) if enabled else nn.Identity()


def _norm2d(kind: str, channels: int, track_bn: bool) -> nn.Module:
    if kind == "bn":
        return nn.BatchNorm2d(channels, momentum=None, track_running_stats=track_bn)
    if kind == "in":
        return nn.GroupNorm(channels, channels)
    if kind == "ln":
        return nn.GroupNorm(1, channels)
    if kind == "none":
        return nn.Identity()
    raise ValueError(f"unknown norm {kind!r}; expected one of {NORMS}")


def _norm1d(kind: str, features: int, track_bn: bool) -> nn.Module:
    if kind == "bn":
        return nn.BatchNorm1d(features, momentum=None, track_running_stats=track_bn)
    if kind == "ln":
        return nn.LayerNorm(features)
    if kind == "none":
        return nn.Identity()
    raise ValueError(f"norm {kind!r} is not available for fully connected layers; use bn, ln or none")


def _init_params(model: nn.Module) -> None:
    """Norm scale 1 / shift 0 and zero Linear biases; conv and Linear weights keep PyTorch's default."""
    for m in model.modules():
        if (
            isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d, nn.GroupNorm, nn.LayerNorm))
            and m.weight is not None
        ):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)


class ConvUnit(nn.Module):
    """Conv3x3 -> Scaler -> Norm -> ReLU (the scaler/norm may be identities)."""

    def __init__(self, cin: int, cout: int, *, bias: bool, scaler: nn.Module, norm: nn.Module) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel_size=3, stride=1, padding=1, bias=bias)
        self.scaler = scaler
        self.norm = norm
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.norm(self.scaler(self.conv(x))))


class PlainCNN(nn.Module):
    """Stacked ConvUnits with optional 2x2 max-pools, global average pooling and a linear classifier.

    Used for HeteroFL's ``conv`` and for ``cnn_small``. ``has_head=False`` (a depth-truncated ``conv``:
    fewer units, each keeping its pool) drops the head and ``forward`` returns the feature map.
    """

    def __init__(
        self, units: list[ConvUnit], pool_after: list[bool], num_classes: int, has_head: bool = True
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for unit, pool in zip(units, pool_after, strict=True):
            layers.append(unit)
            if pool:
                layers.append(nn.MaxPool2d(2))
        self.features = nn.Sequential(*layers)
        self.has_head = has_head
        if has_head:
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.flatten = nn.Flatten()
            last = units[-1].conv.out_channels
            self.classifier = nn.Linear(last, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.features(x))

    def forward_head(self, out: torch.Tensor) -> torch.Tensor:
        """Everything after ``features`` (evaluation shares a common ``features`` prefix between submodels)."""
        if not self.has_head:
            return out
        return self.classifier(self.flatten(self.pool(out)))


class PreActBlock(nn.Module):
    """HeteroFL's pre-activation basic block (one scaler shared by both pre-activations)."""

    def __init__(
        self,
        cin: int,
        cout: int,
        stride: int,
        *,
        projection: bool,
        scaler: nn.Module,
        norm: str,
        track_bn: bool,
    ) -> None:
        super().__init__()
        self.scaler = scaler
        self.n1 = _norm2d(norm, cin, track_bn)
        self.relu1 = nn.ReLU()
        self.conv1 = nn.Conv2d(cin, cout, kernel_size=3, stride=stride, padding=1, bias=False)
        self.n2 = _norm2d(norm, cout, track_bn)
        self.relu2 = nn.ReLU()
        self.conv2 = nn.Conv2d(cout, cout, kernel_size=3, stride=1, padding=1, bias=False)
        # ``projection`` comes from the full architecture (stride or channel change), not from this
        # submodel's widths, so the key set never depends on the rates.
        self.shortcut: nn.Module | None = None
        if projection:
            self.shortcut = nn.Conv2d(cin, cout, kernel_size=1, stride=stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu1(self.n1(self.scaler(x)))
        shortcut = self.shortcut(out) if self.shortcut is not None else x
        out = self.conv1(out)
        out = self.conv2(self.relu2(self.n2(self.scaler(out))))
        return out + shortcut


class PreActResNet(nn.Module):
    """HeteroFL's ResNet18: stem conv, four stages, then relu(n4(scaler(.))) -> avgpool -> linear.

    With ``depth`` < 4 only the first ``depth`` stages exist and ``forward`` returns their feature map
    (no head): early-exit classifiers are attached elsewhere.
    """

    def __init__(
        self,
        widths: list[int],
        rates: list[float],
        *,
        in_channels: int,
        num_classes: int,
        depth: int,
        scaler: bool,
        norm: str,
        track_bn: bool,
    ) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, widths[0], kernel_size=3, stride=1, padding=1, bias=False)
        cin, full_cin = widths[0], RESNET_HIDDEN[0]
        for stage in range(depth):
            blocks = []
            for b in range(RESNET_BLOCKS[stage]):
                stride = 2 if stage > 0 and b == 0 else 1
                projection = stride != 1 or full_cin != RESNET_HIDDEN[stage]
                blocks.append(
                    PreActBlock(
                        cin,
                        widths[stage],
                        stride,
                        projection=projection,
                        scaler=_scaler(scaler, rates[stage]),
                        norm=norm,
                        track_bn=track_bn,
                    )
                )
                cin, full_cin = widths[stage], RESNET_HIDDEN[stage]
            self.add_module(f"layer{stage + 1}", nn.Sequential(*blocks))
        self.depth = depth
        self.has_head = depth == len(RESNET_HIDDEN)
        if self.has_head:
            self.scaler = _scaler(scaler, rates[-1])
            self.n4 = _norm2d(norm, widths[-1], track_bn)
            self.relu = nn.ReLU()
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.flatten = nn.Flatten()
            self.linear = nn.Linear(widths[-1], num_classes)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv1(x)
        for stage in range(self.depth):
            out = getattr(self, f"layer{stage + 1}")(out)
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.forward_features(x)
        if not self.has_head:
            return out
        out = self.relu(self.n4(self.scaler(out)))
        return self.linear(self.flatten(self.pool(out)))


class VGG(nn.Module):
    """AdaptiveFL's VGG16-BN: 13 conv units with 5 max-pools, then avgpool -> 2 hidden FC -> classifier.

    A max-pool is replaced by an identity when the feature map is already 1 pixel wide, and the
    adaptive average pool makes any input size work (it is the identity for 32x32 inputs). With
    ``depth`` < 5 only the first ``depth`` pool-delimited stages exist and ``forward`` returns their
    feature map (no head).
    """

    def __init__(
        self,
        conv_widths: list[int],
        fc_widths: list[int],
        rates: list[float],
        *,
        in_channels: int,
        image_size: tuple[int, int],
        num_classes: int,
        depth: int,
        scaler: bool,
        norm: str,
        track_bn: bool,
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        cin, conv_idx, stage = in_channels, 0, 0
        h, w = image_size
        for item in VGG16_CFG:
            if item == "M":
                layers.append(nn.MaxPool2d(2) if min(h, w) >= 2 else nn.Identity())
                h, w = max(1, h // 2), max(1, w // 2)
                stage += 1
                if stage == depth:
                    break
                continue
            cout = conv_widths[conv_idx]
            layers.append(
                ConvUnit(
                    cin,
                    cout,
                    bias=True,
                    scaler=_scaler(scaler, rates[conv_idx]),
                    norm=_norm2d(norm, cout, track_bn),
                )
            )
            cin, conv_idx = cout, conv_idx + 1
        self.features = nn.Sequential(*layers)
        self.has_head = depth == FULL_DEPTH["vgg16"]
        if self.has_head:
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.flatten = nn.Flatten()
            self.projector = nn.Sequential(
                nn.Linear(cin, fc_widths[0]),
                _scaler(scaler, rates[VGG16_CONVS]),
                nn.ReLU(),
                nn.Dropout(),
                nn.Linear(fc_widths[0], fc_widths[1]),
                _scaler(scaler, rates[VGG16_CONVS + 1]),
                nn.ReLU(),
                nn.Dropout(),
            )
            self.classifier = nn.Linear(fc_widths[1], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.features(x))

    def forward_head(self, out: torch.Tensor) -> torch.Tensor:
        """Everything after ``features`` (evaluation shares a common ``features`` prefix between submodels)."""
        if not self.has_head:
            return out
        return self.classifier(self.projector(self.flatten(self.pool(out))))


class ConvNormAct(nn.Module):
    """Bias-free conv -> Scaler -> Norm -> ReLU6; ``act=False`` keeps it linear (MobileNetV2's projection)."""

    def __init__(
        self,
        cin: int,
        cout: int,
        kernel: int,
        *,
        stride: int = 1,
        groups: int = 1,
        act: bool = True,
        scaler: nn.Module,
        norm: nn.Module,
    ) -> None:
        super().__init__()
        self.conv = nn.Conv2d(
            cin, cout, kernel_size=kernel, stride=stride, padding=kernel // 2, groups=groups, bias=False
        )
        self.scaler = scaler
        self.norm = norm
        self.act = nn.ReLU6() if act else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.norm(self.scaler(self.conv(x))))


class InvertedResidual(nn.Module):
    """MobileNetV2 bottleneck: 1x1 expand (absent when t = 1) -> 3x3 depthwise -> linear 1x1 projection.

    The depthwise conv has ``groups == hidden`` whatever the width, so its weight is ``(hidden, 1, 3, 3)``
    and pruning only shortens the first dim. It gets no scaler: each output sees 9 inputs at any width.
    """

    def __init__(
        self,
        cin: int,
        hidden: int,
        cout: int,
        stride: int,
        *,
        expand: bool,
        residual: bool,
        scaler: bool,
        rate: float,
        norm: str,
        track_bn: bool,
    ) -> None:
        super().__init__()
        if not expand and hidden != cin:
            raise ValueError(f"a block without expansion needs hidden == cin, got {hidden} and {cin}")
        self.expand: ConvNormAct | None = None
        if expand:
            self.expand = ConvNormAct(
                cin, hidden, 1, scaler=_scaler(scaler, rate), norm=_norm2d(norm, hidden, track_bn)
            )
        self.depthwise = ConvNormAct(
            hidden,
            hidden,
            3,
            stride=stride,
            groups=hidden,
            scaler=nn.Identity(),
            norm=_norm2d(norm, hidden, track_bn),
        )
        self.project = ConvNormAct(
            hidden, cout, 1, act=False, scaler=_scaler(scaler, rate), norm=_norm2d(norm, cout, track_bn)
        )
        # Decided by the caller from the full architecture; the pruned widths line up because every
        # block of a stage keeps the stage's output width.
        self.residual = residual

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.expand(x) if self.expand is not None else x
        out = self.project(self.depthwise(out))
        return out + x if self.residual else out


class MobileNetV2(nn.Module):
    """MobileNetV2 for 32x32 inputs: 3x3 stem, 7 bottleneck stages, 1x1 conv to 1280, avgpool -> linear.

    Strides are the CIFAR variant of kuangliu/pytorch-cifar (FlexFL and AdapterFL train MobileNetV2 on
    32x32 CIFAR): the stem and the first block of the 24-channel stage have stride 1 instead of 2, so
    a 32x32 image ends as a 4x4 map. Blocks follow Sandler et al. and torchvision: ReLU6, no expansion
    conv when t = 1, an identity shortcut only where the full architecture keeps stride 1 and the
    channel count, no dropout. kuangliu's blocks differ (ReLU, a 1x1 expansion even at t = 1, 1x1
    projection shortcuts; 2,296,922 parameters); this one has 2,236,682 with 10 classes, as
    torchvision's ``mobilenet_v2(num_classes=10)``, near AdapterFL's "2.25 M" (Table I).

    ``widths`` are the pruned channels of the 9 layer groups (stem, stages 1-7, last conv); ``hidden``
    the pruned expanded width of every block, stage by stage. With ``depth`` < 7 only the first
    ``depth`` stages exist and ``forward`` returns their feature map (no last conv, no head).
    """

    def __init__(
        self,
        widths: list[int],
        hidden: list[list[int]],
        rates: list[float],
        *,
        in_channels: int,
        num_classes: int,
        depth: int,
        scaler: bool,
        norm: str,
        track_bn: bool,
    ) -> None:
        super().__init__()
        self.stem = ConvNormAct(
            in_channels,
            widths[0],
            3,
            scaler=_scaler(scaler, rates[0]),
            norm=_norm2d(norm, widths[0], track_bn),
        )
        cin, full_cin = widths[0], MOBILENETV2_STEM
        for stage in range(depth):
            t, c, n, s = MOBILENETV2_CFG[stage]
            blocks = []
            for b in range(n):
                stride = s if b == 0 else 1
                blocks.append(
                    InvertedResidual(
                        cin,
                        hidden[stage][b],
                        widths[stage + 1],
                        stride,
                        expand=t != 1,
                        residual=stride == 1 and full_cin == c,
                        scaler=scaler,
                        rate=rates[stage + 1],
                        norm=norm,
                        track_bn=track_bn,
                    )
                )
                cin, full_cin = widths[stage + 1], c
            self.add_module(f"layer{stage + 1}", nn.Sequential(*blocks))
        self.depth = depth
        self.has_head = depth == len(MOBILENETV2_CFG)
        if self.has_head:
            self.last = ConvNormAct(
                cin,
                widths[-1],
                1,
                scaler=_scaler(scaler, rates[-1]),
                norm=_norm2d(norm, widths[-1], track_bn),
            )
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.flatten = nn.Flatten()
            self.classifier = nn.Linear(widths[-1], num_classes)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        out = self.stem(x)
        for stage in range(self.depth):
            out = getattr(self, f"layer{stage + 1}")(out)
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.forward_features(x)
        if not self.has_head:
            return out
        return self.classifier(self.flatten(self.pool(self.last(out))))


class TwoConvCNN(nn.Module):
    """AdapterFL's small prototype: [conv5x5 -> Scaler -> Norm -> ReLU -> MaxPool2] x 2 -> flatten ->
    Linear(64) -> ReLU -> Linear(classes). Convs are unpadded (LeNet style: 32 -> 28 -> 14 -> 10 -> 5)."""

    def __init__(
        self,
        widths: list[int],
        rates: list[float],
        *,
        in_channels: int,
        image_size: tuple[int, int],
        num_classes: int,
        scaler: bool,
        norm: str,
        track_bn: bool,
    ) -> None:
        super().__init__()
        h, w = image_size
        cin = in_channels
        for i in range(2):
            conv = nn.Sequential(
                nn.Conv2d(cin, widths[i], kernel_size=5, bias=True),
                _scaler(scaler, rates[i]),
                _norm2d(norm, widths[i], track_bn),
                nn.ReLU(),
                nn.MaxPool2d(2),
            )
            self.add_module(f"conv{i + 1}", conv)
            h, w, cin = (h - 4) // 2, (w - 4) // 2, widths[i]
        if min(h, w) < 1:
            raise ValueError(f"cnn2 needs images of at least 16 x 16 pixels, got {image_size}")
        self.head = nn.Sequential(
            nn.Flatten(),
            nn.Linear(cin * h * w, widths[2]),
            _scaler(scaler, rates[2]),
            nn.ReLU(),
            nn.Linear(widths[2], num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.conv2(self.conv1(x)))


class MLP(nn.Module):
    """Flatten -> [Linear -> Scaler -> Norm -> ReLU] x len(hidden) -> Linear(classes)."""

    def __init__(
        self,
        in_features: int,
        widths: list[int],
        rates: list[float],
        *,
        num_classes: int,
        scaler: bool,
        norm: str,
        track_bn: bool,
    ) -> None:
        super().__init__()
        self.flatten = nn.Flatten()
        layers: list[nn.Module] = []
        fin = in_features
        for width, rate in zip(widths, rates, strict=True):
            layers += [
                nn.Linear(fin, width),
                _scaler(scaler, rate),
                _norm1d(norm, width, track_bn),
                nn.ReLU(),
            ]
            fin = width
        self.hidden = nn.Sequential(*layers)
        self.classifier = nn.Linear(fin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.hidden(self.flatten(x)))


def _check_depth(family: str, depth: int | None) -> int | None:
    if depth is None:
        return None
    full = FULL_DEPTH.get(family)
    if full is None:
        raise NotImplementedError(f"depth truncation is not supported for family {family!r}")
    if not 1 <= depth <= full:
        raise ValueError(f"depth for {family!r} must be in [1, {full}], got {depth}")
    return depth


def plain_layout(
    family: str, spec: SubmodelSpec, *, global_rate: float, scaler: bool | None, norm: str
) -> tuple[int | None, bool, list[float]]:
    """(depth or None, Scaler on, each layer group's rate / ``global_rate``) of a single-output family, the
    arguments checked (``build_plain`` and ``fl.models.resnet_cifar.build_resnet110`` share it)."""
    if norm not in NORMS:
        raise ValueError(f"unknown norm {norm!r}; expected one of {NORMS}")
    if not 0.0 < global_rate <= 1.0:
        raise ValueError(f"global_rate must be in (0, 1], got {global_rate}")
    groups = LAYER_GROUPS[family]
    if spec.layer_rates is not None and len(spec.layer_rates) > groups:
        raise ValueError(
            f"{family!r} has {groups} prunable layer groups, got {len(spec.layer_rates)} layer_rates"
        )
    depth = _check_depth(family, spec.depth)
    use_scaler = (family not in ("vgg16", "mobilenetv2", "cnn2")) if scaler is None else bool(scaler)
    return depth, use_scaler, [spec.layer_rate(layer) / global_rate for layer in range(groups)]


def build_plain(
    family: str,
    spec: SubmodelSpec,
    *,
    num_classes: int,
    in_channels: int,
    image_size: tuple[int, int],
    global_rate: float = 1.0,
    scaler: bool | None = None,
    track_bn: bool = False,
    norm: str = "bn",
) -> nn.Module:
    """The single-output families defined here (``PLAIN_FAMILIES``); ``fl.models.build.build_model`` states the
    arguments."""
    if family not in PLAIN_FAMILIES:
        raise ValueError(f"{family!r} is not built here; expected one of {PLAIN_FAMILIES} (fl.models.build builds the rest)")
    depth, use_scaler, rates = plain_layout(family, spec, global_rate=global_rate, scaler=scaler, norm=norm)
    h, w = image_size

    model: nn.Module
    if family == "conv":
        d = depth or FULL_DEPTH["conv"]
        widths = [spec.width(c, layer) for layer, c in enumerate(CONV_HIDDEN[:d])]
        units = _conv_units(widths, rates[:d], in_channels, use_scaler, norm, track_bn)
        # HeteroFL drops the last max-pool; a truncated model keeps each of its units' pools
        pools = [True] * min(d, len(CONV_HIDDEN) - 1) + [False] * (d == len(CONV_HIDDEN))
        model = PlainCNN(units, pools, num_classes, has_head=d == len(CONV_HIDDEN))
    elif family == "cnn_small":
        widths = [spec.width(c, layer) for layer, c in enumerate(CNN_SMALL_HIDDEN)]
        units = _conv_units(widths, rates, in_channels, use_scaler, norm, track_bn)
        model = PlainCNN(units, [False, True, False], num_classes)
    elif family == "cnn2":
        widths = [spec.width(c, layer) for layer, c in enumerate(CNN2_HIDDEN)]
        model = TwoConvCNN(
            widths,
            rates,
            in_channels=in_channels,
            image_size=(h, w),
            num_classes=num_classes,
            scaler=use_scaler,
            norm=norm,
            track_bn=track_bn,
        )
    elif family == "resnet18":
        widths = [spec.width(c, layer) for layer, c in enumerate(RESNET_HIDDEN)]
        model = PreActResNet(
            widths,
            rates,
            in_channels=in_channels,
            num_classes=num_classes,
            depth=depth or FULL_DEPTH[family],
            scaler=use_scaler,
            norm=norm,
            track_bn=track_bn,
        )
    elif family == "vgg16":
        convs = [c for c in VGG16_CFG if c != "M"]
        conv_widths = [spec.width(int(c), layer) for layer, c in enumerate(convs)]
        # AdaptiveFL's code uses a 4096-wide head for RGB inputs and a 256-wide one otherwise.
        fc = 4096 if in_channels == 3 else 256
        fc_widths = [spec.width(fc, VGG16_CONVS), spec.width(fc, VGG16_CONVS + 1)]
        model = VGG(
            conv_widths,
            fc_widths,
            rates,
            in_channels=in_channels,
            image_size=(h, w),
            num_classes=num_classes,
            depth=depth or FULL_DEPTH["vgg16"],
            scaler=use_scaler,
            norm=norm,
            track_bn=track_bn,
        )
    elif family == "mobilenetv2":
        widths, hidden = _mobilenetv2_widths(spec)
        model = MobileNetV2(
            widths,
            hidden,
            rates,
            in_channels=in_channels,
            num_classes=num_classes,
            depth=depth or FULL_DEPTH["mobilenetv2"],
            scaler=use_scaler,
            norm=norm,
            track_bn=track_bn,
        )
    else:  # mlp
        widths = [spec.width(c, layer) for layer, c in enumerate(MLP_HIDDEN)]
        model = MLP(
            in_channels * h * w,
            widths,
            rates,
            num_classes=num_classes,
            scaler=use_scaler,
            norm=norm,
            track_bn=track_bn,
        )
    _init_params(model)
    return model


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


def _conv_units(
    widths: list[int], rates: list[float], in_channels: int, scaler: bool, norm: str, track_bn: bool
) -> list[ConvUnit]:
    units: list[ConvUnit] = []
    cin = in_channels
    for width, rate in zip(widths, rates, strict=True):
        units.append(
            ConvUnit(cin, width, bias=True, scaler=_scaler(scaler, rate), norm=_norm2d(norm, width, track_bn))
        )
        cin = width
    return units


def count_params(module: nn.Module) -> int:
    """Number of parameters (not buffers) of ``module``."""
    return sum(p.numel() for p in module.parameters())


def start_layer_rates(family: str, r_w: float, start: int) -> tuple[float, ...]:
    """Per-group rates of AdaptiveFL's fine-grained width pruning (r_w, I): groups with 0-based index
    below ``start`` keep every channel, the others keep ``r_w`` of them; hidden FC groups
    (``FC_GROUPS``) always get ``r_w``. Use as ``SubmodelSpec(layer_rates=...)`` (AdaptiveFL and FlexFL
    truncate with int(): ``rounding="floor"``)."""
    if family not in LAYER_GROUPS:
        raise ValueError(f"unknown model family {family!r}; expected one of {FAMILIES}")
    if not 0.0 < r_w <= 1.0:
        raise ValueError(f"width rate must be in (0, 1], got {r_w}")
    groups = LAYER_GROUPS[family]
    if not 0 <= start < groups:
        raise ValueError(f"start layer for {family!r} must be in [0, {groups - 1}], got {start}")
    fc = FC_GROUPS.get(family, ())
    return tuple(r_w if (g >= start or g in fc) else 1.0 for g in range(groups))
