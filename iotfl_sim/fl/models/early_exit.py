"""Early-exit (multi-exit) models: a prunable backbone with a classifier after every stage (ScaleFL).

Families ``<base>_ee`` and ``<base>_ee_light`` for base ``conv`` (stage i = conv unit i with its
max-pool), ``resnet18`` (its 4 residual stages, the stem counted in stage 1), ``vgg16`` (its 5
pool-delimited stages) and ``resnet110`` (ScaleFL's CIFAR configuration: 4 segments ending after
residual blocks 30, 38, 46 and 54, so exits read 32, 64 and 64 channels; ``fl.models.resnet_cifar``). A model built for ``spec.depth = k`` (default: the full depth) holds the
backbone truncated after stage k and one exit per stage 1..k; ``forward`` returns the list of their
logits, shallowest first, so ``fl.objectives.final_logits`` picks the deepest.

- Exits below the full depth are exit heads; at full depth the last exit is the backbone's own
  classifier (as in ScaleFL's code, whose final prediction is the ResNet's ``linear``). Exit heads
  live under ``exits.<stage-1>``; the backbone under ``backbone.`` with the base family's keys.
- ``_ee`` heads follow ScaleFL's code: 3 x [conv3x3 (no bias, width = the stage's width) -> Scaler ->
  Norm -> ReLU] -> global avgpool -> fc. ``_ee_light`` heads are avgpool -> fc only (an option for
  small IoT models, where three 3x3 convs at a deep stage's width would outweigh the backbone).
- Widths: each exit head's convs keep the same channels as the stage they read (its last layer
  group's ``spec.width``), so every tensor is an elementwise prefix of the global model's and
  parameter names never depend on the rate; a depth-truncated model lacks the later stages' and
  exits' keys.
- Scaler: ScaleFL's Scaler divides by the width rate in training *and* evaluation (pitfall 3 of the
  reference notes), and exists only where the rate is below 1. With ``scaler`` on (the default for
  these families) every HeteroFL train-only Scaler of the backbone is swapped for
  :class:`AlwaysScaler`, and the exit heads get one too; ``scaler=False`` builds none.
- Norm: BatchNorm without running statistics in training (``track_bn`` only for the evaluation
  skeleton, whose statistics ``fl.evaluate`` recomputes), as in ScaleFL's default (no running stats).
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import nn

from iotfl_sim.fl.models import families as m
from iotfl_sim.fl.models import layers as ly
from iotfl_sim.fl.models.plain import build_plain
from iotfl_sim.fl.models.resnet_cifar import build_resnet110
from iotfl_sim.fl.submodel import SubmodelSpec

# Index of the last prunable layer group of each stage (the group whose width the stage outputs).
STAGE_GROUPS: dict[str, tuple[int, ...]] = {
    "conv": (0, 1, 2, 3),
    "resnet18": (0, 1, 2, 3),
    "vgg16": (1, 3, 6, 9, 12),
    "resnet110": (1, 2, 2, 2),
}
STAGE_CHANNELS: dict[str, tuple[int, ...]] = {
    "conv": m.CONV_HIDDEN,
    "resnet18": m.RESNET_HIDDEN,
    "vgg16": (64, 128, 256, 512, 512),
    "resnet110": (32, 64, 64, 64),
}
EXIT_CONVS = 3  # ScaleFL's exit heads


class AlwaysScaler(ly.RateScaler):
    """ScaleFL's Scaler: divides activations by ``rate`` in training and in evaluation."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / self.rate


def _always_scaler(enabled: bool, rate: float) -> nn.Module:
    return AlwaysScaler(rate) if enabled and rate < 1.0 else nn.Identity()


class ExitHead(nn.Module):
    """``convs`` x [conv3x3 -> Scaler -> Norm -> ReLU] -> avgpool -> fc, at the stage's width."""

    def __init__(self, channels: int, *, convs: int, rate: float, net: ly.NetOptions) -> None:
        super().__init__()
        self.convs = nn.Sequential(
            *[
                ly.ConvUnit(channels, channels, bias=False, scaler=_always_scaler(net.scaler, rate), norm=net.norm2d(channels))
                for _ in range(convs)
            ]
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(channels, net.num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.flatten(self.pool(self.convs(x))))


class EarlyExitNet(nn.Module):
    """A backbone truncated at ``depth`` stages plus its exits (see the module docstring)."""

    def __init__(self, base: str, backbone: nn.Module, exits: list[ExitHead], depth: int) -> None:
        super().__init__()
        self.base = base
        self.depth = depth
        self.full = depth == m.FULL_DEPTH[base]
        self.backbone = backbone
        self.exits = nn.ModuleList(exits)
        if base == "conv":
            self.bounds = [2, 4, 6, 7][:depth]  # unit, pool, unit, pool, unit, pool, unit
        elif base == "vgg16":
            self.bounds = [i + 1 for i, item in enumerate(m.VGG16_CFG) if item == "M"][:depth]
        elif base == "resnet110":
            self.bounds = [1 + end for end in m.RESNET110_SEGMENT_ENDS][:depth]  # features[0] is the stem

    def stage_outputs(self, x: torch.Tensor) -> list[torch.Tensor]:
        outs = []
        if self.base == "resnet18":
            out = self.backbone.conv1(x)
            for stage in range(self.depth):
                out = getattr(self.backbone, f"layer{stage + 1}")(out)
                outs.append(out)
            return outs
        start, out = 0, x
        for end in self.bounds:
            out = self.backbone.features[start:end](out)
            outs.append(out)
            start = end
        return outs

    def head(self, x: torch.Tensor) -> torch.Tensor:
        """The backbone's own classifier on the last stage's feature map (full depth only)."""
        b = self.backbone
        if self.base == "resnet18":
            x = b.relu(b.n4(b.scaler(x)))
            return b.linear(b.flatten(b.pool(x)))
        if self.base == "vgg16":
            return b.classifier(b.projector(b.flatten(b.pool(x))))
        return b.classifier(b.flatten(b.pool(x)))

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        feats = self.stage_outputs(x)
        outs = [exit_(f) for exit_, f in zip(self.exits, feats, strict=False)]
        if self.full:
            outs.append(self.head(feats[-1]))
        return outs


def split_family(family: str) -> tuple[str, bool]:
    """``"conv_ee_light"`` -> ("conv", True); ``"vgg16_ee"`` -> ("vgg16", False)."""
    if family.endswith("_ee_light"):
        return family[: -len("_ee_light")], True
    if family.endswith("_ee"):
        return family[: -len("_ee")], False
    raise ValueError(f"{family!r} is not an early-exit family (expected <base>_ee or <base>_ee_light)")


def _swap_scalers(model: nn.Module) -> None:
    """Replace HeteroFL's train-only scalers by ScaleFL's always-on ones (identity at rate 1)."""
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, ly.Scaler):
                setattr(parent, name, _always_scaler(True, child.rate))


def build_early_exit(family: str, spec: SubmodelSpec, args: m.BuildArgs) -> EarlyExitNet:
    """Build the early-exit submodel of ``family`` for ``spec`` (see the module docstring).

    ``args.scaler=None`` means on (ScaleFL's always-on Scaler); its ratio is each layer's rate /
    ``args.global_rate``.
    """
    base, light = split_family(family)
    full = m.FULL_DEPTH[base]
    depth = full if spec.depth is None else spec.depth
    if not 1 <= depth <= full:
        raise ValueError(f"depth for {family!r} must be in [1, {full}], got {depth}")
    use_scaler = True if args.scaler is None else bool(args.scaler)
    # The backbone at the spec's depth (no head below full depth); its scalers are swapped below.
    build = build_resnet110 if base == "resnet110" else build_plain
    backbone = build(base, spec, replace(args, scaler=use_scaler))
    if use_scaler:
        _swap_scalers(backbone)
    n_exits = depth if depth < full else full - 1
    net = ly.NetOptions.of(args, use_scaler)
    exits = []
    for stage in range(n_exits):
        group = STAGE_GROUPS[base][stage]
        channels = spec.width(STAGE_CHANNELS[base][stage], group)
        rate = spec.layer_rate(group) / args.global_rate
        exits.append(ExitHead(channels, convs=0 if light else EXIT_CONVS, rate=rate, net=net))
    model = EarlyExitNet(base, backbone, exits, depth)
    ly.init_params(model)
    return model
