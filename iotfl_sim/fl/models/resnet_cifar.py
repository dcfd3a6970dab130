"""ScaleFL's CIFAR ResNet110 (git-disl/scale-fl, models/resnet.py: ``resnet110_4``), width-prunable.

The classic CIFAR ResNet (He et al. 2016, Sec. 4.2) with 6n + 2 = 110 layers (n = 18): a 3x3 stem
with 16 channels, three stages of 18 post-activation basic blocks with 16, 32 and 64 channels (the
first block of stages 2 and 3 has stride 2), global average pooling and a linear classifier. As in
ScaleFL's code:

- block: ``relu(bn1(scaler(conv1(x))))`` then ``bn2(scaler(conv2(.)))`` plus the shortcut, then ReLU;
  convs without bias; the shortcut is the identity, or a 1x1 conv (stride 2, no bias, no Scaler)
  followed by BN where the block changes width (the code's option B, not the paper's zero padding);
- stem: ``relu(bn1(scaler(conv1(x))))``; head: avgpool -> linear (no norm after the last block);
- widths (``build_resnet110``): stage ``g`` (the stem joins stage 1) is prunable layer
  group ``g`` and keeps ``spec.width(C_g, g)`` channels, the code's ``int(C * scale)`` under rounding
  ``int``;
- depth: the network is cut into the 4 segments that ScaleFL's 4 exits close: residual blocks
  1-30, 31-38, 39-46 and 47-54 (``ee_layer_locations`` [30, 38, 46]: exit 1 after block 12 of stage 2,
  exits 2 and 3 after blocks 2 and 10 of stage 3, the last one being the classifier). A model of
  ``spec.depth = d`` holds the stem and blocks up to ``RESNET110_SEGMENT_ENDS[d - 1]`` (constants in
  ``fl.models.families``), and the head only at ``d = 4``; ``fl.models.early_exit`` attaches the exits (family
  ``resnet110_ee``).

The stem and the blocks are ``features`` (a Sequential: entry 0 the stem, entry i block i), so
``fl.models.early_exit`` cuts segments by index and evaluation can share a common prefix between submodels.
The code's ImageNet/TinyImageNet variant (5x5 stride-2 stem, max-pool, a fourth stage for more than
100 classes) is not built.
"""

from __future__ import annotations

import torch
from torch import nn

from iotfl_sim.fl.models import families as m
from iotfl_sim.fl.models import layers as ly
from iotfl_sim.fl.models.families import RESNET110_BLOCKS, RESNET110_HIDDEN, RESNET110_SEGMENT_ENDS
from iotfl_sim.fl.submodel import SubmodelSpec


class PostActBlock(nn.Module):
    """The CIFAR ResNet basic block of ScaleFL's code (one scaler for both convs)."""

    def __init__(self, block: ly.BlockShape, rate: float, net: ly.NetOptions) -> None:
        super().__init__()
        cin, cout, stride = block.cin, block.cout, block.stride
        self.conv1 = nn.Conv2d(cin, cout, kernel_size=3, stride=stride, padding=1, bias=False)
        self.n1 = net.norm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, kernel_size=3, stride=1, padding=1, bias=False)
        self.n2 = net.norm2d(cout)
        self.scaler = net.scaler_at(rate)
        self.relu = nn.ReLU()
        # a 1x1 projection where the full architecture changes the shape (``BlockShape.keeps_shape``)
        self.shortcut: nn.Module = nn.Identity()
        if not block.keeps_shape:
            self.shortcut = nn.Sequential(ly.StridedPointwise(cin, cout, stride), net.norm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.n1(self.scaler(self.conv1(x))))
        out = self.n2(self.scaler(self.conv2(out)))
        return self.relu(out + self.shortcut(x))


class CifarResNet(ly.FeaturesThenHead):
    """Stem and the blocks of the first ``depth`` segments as ``features``; the head at full depth."""

    def __init__(self, widths: list[int], rates: list[float], depth: int, net: ly.NetOptions) -> None:
        super().__init__()
        layers: list[nn.Module] = [ly.conv_unit(net.in_channels, widths[0], rates[0], net, bias=False)]
        strides = [1] + [2] * (len(RESNET110_HIDDEN) - 1)
        plan = ly.stage_blocks(widths[0], RESNET110_HIDDEN[0], widths, RESNET110_HIDDEN, RESNET110_BLOCKS, strides)
        for stage, blocks in enumerate(plan):
            layers += [PostActBlock(block, rates[stage], net) for block in blocks]
        self.features = nn.Sequential(*layers[: 1 + RESNET110_SEGMENT_ENDS[depth - 1]])
        self.has_head = depth == len(RESNET110_SEGMENT_ENDS)
        if self.has_head:
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.flatten = nn.Flatten()
            self.classifier = nn.Linear(widths[-1], net.num_classes)

    def classify(self, out: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.flatten(self.pool(out)))


def build_resnet110(family: str, spec: SubmodelSpec, args: m.BuildArgs) -> nn.Module:
    """ResNet110 (``family`` is "resnet110") for ``spec``; ``fl.models.build.build_model`` states the arguments."""
    lay = m.plain_layout(family, spec, args)
    widths = [spec.width(c, layer) for layer, c in enumerate(RESNET110_HIDDEN)]
    model = CifarResNet(widths, lay.rates, lay.depth or m.FULL_DEPTH[family], ly.NetOptions.of(args, lay.scaler))
    ly.init_params(model)
    return model
