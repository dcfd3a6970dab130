"""The single-output prunable networks (``fl.models.families`` states their shapes; ``fl.models.plain`` builds
them from a ``SubmodelSpec``): HeteroFL's CNN and pre-activation ResNet18, AdaptiveFL's VGG16, MobileNetV2,
AdapterFL's 2-conv CNN, the small CNN and the MLP."""

from __future__ import annotations

import torch
from torch import nn

from iotfl_sim.fl.models.families import (
    FULL_DEPTH,
    MOBILENETV2_CFG,
    MOBILENETV2_STEM,
    RESNET_BLOCKS,
    RESNET_HIDDEN,
    VGG16_CFG,
    VGG16_CONVS,
)
from iotfl_sim.fl.models.layers import (
    BlockShape,
    ConvUnit,
    FeaturesThenHead,
    NetOptions,
    StagedNet,
    StridedPointwise,
    conv_unit,
    stage_blocks,
)


class PlainCNN(FeaturesThenHead):
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

    def classify(self, out: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.flatten(self.pool(out)))


class PreActBlock(nn.Module):
    """HeteroFL's pre-activation basic block (one scaler shared by both pre-activations)."""

    def __init__(self, block: BlockShape, rate: float, net: NetOptions) -> None:
        super().__init__()
        cin, cout, stride = block.cin, block.cout, block.stride
        self.scaler = net.scaler_at(rate)
        self.n1 = net.norm2d(cin)
        self.relu1 = nn.ReLU()
        self.conv1 = nn.Conv2d(cin, cout, kernel_size=3, stride=stride, padding=1, bias=False)
        self.n2 = net.norm2d(cout)
        self.relu2 = nn.ReLU()
        self.conv2 = nn.Conv2d(cout, cout, kernel_size=3, stride=1, padding=1, bias=False)
        # a 1x1 projection where the full architecture changes the shape (``BlockShape.keeps_shape``)
        self.shortcut: nn.Module | None = None
        if not block.keeps_shape:
            self.shortcut = StridedPointwise(cin, cout, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu1(self.n1(self.scaler(x)))
        shortcut = self.shortcut(out) if self.shortcut is not None else x
        out = self.conv1(out)
        out = self.conv2(self.relu2(self.n2(self.scaler(out))))
        return out + shortcut


class PreActResNet(StagedNet):
    """HeteroFL's ResNet18: stem conv, four stages, then relu(n4(scaler(.))) -> avgpool -> linear.

    With ``depth`` < 4 only the first ``depth`` stages exist and ``forward`` returns their feature map
    (no head): early-exit classifiers are attached elsewhere.
    """

    stem_name = "conv1"

    def __init__(self, widths: list[int], rates: list[float], depth: int, net: NetOptions) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(net.in_channels, widths[0], kernel_size=3, stride=1, padding=1, bias=False)
        strides = [1] + [2] * (len(RESNET_HIDDEN) - 1)
        plan = stage_blocks(widths[0], RESNET_HIDDEN[0], widths, RESNET_HIDDEN, RESNET_BLOCKS, strides)
        for stage in range(depth):
            blocks = [PreActBlock(block, rates[stage], net) for block in plan[stage]]
            self.add_module(f"layer{stage + 1}", nn.Sequential(*blocks))
        self.depth = depth
        self.has_head = depth == len(RESNET_HIDDEN)
        if self.has_head:
            self.scaler = net.scaler_at(rates[-1])
            self.n4 = net.norm2d(widths[-1])
            self.relu = nn.ReLU()
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.flatten = nn.Flatten()
            self.linear = nn.Linear(widths[-1], net.num_classes)

    def classify(self, out: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.n4(self.scaler(out)))
        return self.linear(self.flatten(self.pool(out)))


class VGG(FeaturesThenHead):
    """AdaptiveFL's VGG16-BN: 13 conv units with 5 max-pools, then avgpool -> 2 hidden FC -> classifier.

    A max-pool is replaced by an identity when the feature map is already 1 pixel wide, and the
    adaptive average pool makes any input size work (it is the identity for 32x32 inputs). With
    ``depth`` < 5 only the first ``depth`` pool-delimited stages exist and ``forward`` returns their
    feature map (no head).
    """

    def __init__(
        self, conv_widths: list[int], fc_widths: list[int], rates: list[float], depth: int, net: NetOptions
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        cin, conv_idx, stage = net.in_channels, 0, 0
        h, w = net.image_size
        for item in VGG16_CFG:
            if item == "M":
                layers.append(nn.MaxPool2d(2) if min(h, w) >= 2 else nn.Identity())
                h, w = max(1, h // 2), max(1, w // 2)
                stage += 1
                if stage == depth:
                    break
                continue
            cout = conv_widths[conv_idx]
            layers.append(conv_unit(cin, cout, rates[conv_idx], net, bias=True))
            cin, conv_idx = cout, conv_idx + 1
        self.features = nn.Sequential(*layers)
        self.has_head = depth == FULL_DEPTH["vgg16"]
        if self.has_head:
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.flatten = nn.Flatten()
            self.projector = nn.Sequential(
                nn.Linear(cin, fc_widths[0]),
                net.scaler_at(rates[VGG16_CONVS]),
                nn.ReLU(),
                nn.Dropout(),
                nn.Linear(fc_widths[0], fc_widths[1]),
                net.scaler_at(rates[VGG16_CONVS + 1]),
                nn.ReLU(),
                nn.Dropout(),
            )
            self.classifier = nn.Linear(fc_widths[1], net.num_classes)

    def classify(self, out: torch.Tensor) -> torch.Tensor:
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

    def __init__(self, block: BlockShape, hidden: int, *, expand: bool, rate: float, net: NetOptions) -> None:
        super().__init__()
        cin, cout = block.cin, block.cout
        if not expand and hidden != cin:
            raise ValueError(f"a block without expansion needs hidden == cin, got {hidden} and {cin}")
        self.expand: ConvNormAct | None = None
        if expand:
            self.expand = ConvNormAct(cin, hidden, 1, scaler=net.scaler_at(rate), norm=net.norm2d(hidden))
        self.depthwise = ConvNormAct(
            hidden, hidden, 3, stride=block.stride, groups=hidden, scaler=nn.Identity(), norm=net.norm2d(hidden)
        )
        self.project = ConvNormAct(hidden, cout, 1, act=False, scaler=net.scaler_at(rate), norm=net.norm2d(cout))
        # From the full architecture (``BlockShape.keeps_shape``); the pruned widths line up because every
        # block of a stage keeps the stage's output width.
        self.residual = block.keeps_shape

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.expand(x) if self.expand is not None else x
        out = self.project(self.depthwise(out))
        return out + x if self.residual else out


class MobileNetV2(StagedNet):
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
        self, widths: list[int], hidden: list[list[int]], rates: list[float], depth: int, net: NetOptions
    ) -> None:
        super().__init__()
        self.stem = ConvNormAct(net.in_channels, widths[0], 3, scaler=net.scaler_at(rates[0]), norm=net.norm2d(widths[0]))
        for stage, blocks in enumerate(mobilenetv2_blocks(widths)[:depth]):
            expand = MOBILENETV2_CFG[stage][0] != 1
            layer = [
                InvertedResidual(block, hidden[stage][b], expand=expand, rate=rates[stage + 1], net=net)
                for b, block in enumerate(blocks)
            ]
            self.add_module(f"layer{stage + 1}", nn.Sequential(*layer))
        self.depth = depth
        self.has_head = depth == len(MOBILENETV2_CFG)
        if self.has_head:
            self.last = ConvNormAct(widths[-2], widths[-1], 1, scaler=net.scaler_at(rates[-1]), norm=net.norm2d(widths[-1]))
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.flatten = nn.Flatten()
            self.classifier = nn.Linear(widths[-1], net.num_classes)

    def classify(self, out: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.flatten(self.pool(self.last(out))))


def mobilenetv2_blocks(widths: list[int]) -> list[list[BlockShape]]:
    """The bottleneck blocks of each stage, given the pruned widths of the 9 layer groups (stem, stages, last)."""
    _, channels, blocks, strides = zip(*MOBILENETV2_CFG, strict=True)
    return stage_blocks(widths[0], MOBILENETV2_STEM, widths[1:-1], channels, blocks, strides)


class TwoConvCNN(nn.Module):
    """AdapterFL's small prototype: [conv5x5 -> Scaler -> Norm -> ReLU -> MaxPool2] x 2 -> flatten ->
    Linear(64) -> ReLU -> Linear(classes). Convs are unpadded (LeNet style: 32 -> 28 -> 14 -> 10 -> 5)."""

    def __init__(self, widths: list[int], rates: list[float], net: NetOptions) -> None:
        super().__init__()
        h, w = net.image_size
        cin = net.in_channels
        for i in range(2):
            conv = nn.Sequential(
                nn.Conv2d(cin, widths[i], kernel_size=5, bias=True),
                net.scaler_at(rates[i]),
                net.norm2d(widths[i]),
                nn.ReLU(),
                nn.MaxPool2d(2),
            )
            self.add_module(f"conv{i + 1}", conv)
            h, w, cin = (h - 4) // 2, (w - 4) // 2, widths[i]
        if min(h, w) < 1:
            raise ValueError(f"cnn2 needs images of at least 16 x 16 pixels, got {net.image_size}")
        self.head = nn.Sequential(
            nn.Flatten(),
            nn.Linear(cin * h * w, widths[2]),
            net.scaler_at(rates[2]),
            nn.ReLU(),
            nn.Linear(widths[2], net.num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.conv2(self.conv1(x)))


class MLP(nn.Module):
    """Flatten -> [Linear -> Scaler -> Norm -> ReLU] x len(hidden) -> Linear(classes); the input is every pixel
    of every channel."""

    def __init__(self, widths: list[int], rates: list[float], net: NetOptions) -> None:
        super().__init__()
        self.flatten = nn.Flatten()
        layers: list[nn.Module] = []
        h, w = net.image_size
        fin = net.in_channels * h * w
        for width, rate in zip(widths, rates, strict=True):
            layers += [nn.Linear(fin, width), net.scaler_at(rate), net.norm1d(width), nn.ReLU()]
            fin = width
        self.hidden = nn.Sequential(*layers)
        self.classifier = nn.Linear(fin, net.num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.hidden(self.flatten(x)))
