"""The building blocks every prunable family shares: HeteroFL's Scaler, the norm layers, the options every network
is built with (``NetOptions``), a conv unit, how channels thread through residual stages, and the parameter
initialisation of a freshly built model."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from iotfl_sim.fl.models.families import NORMS, BuildArgs


class RateScaler(nn.Module):
    """Divides activations by ``rate`` (submodel rate / global rate); subclasses say when."""

    def __init__(self, rate: float) -> None:
        super().__init__()
        if rate <= 0:
            raise ValueError(f"scaler rate must be positive, got {rate}")
        self.rate = float(rate)

    def extra_repr(self) -> str:
        return f"rate={self.rate:g}"


class Scaler(RateScaler):
    """HeteroFL's scaler, in training mode only: it compensates for the smaller fan-in of a width-reduced layer
    while training; at evaluation it is the identity (ScaleFL's always-on variant is
    ``fl.models.early_exit.AlwaysScaler``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / self.rate if self.training else x


class StridedPointwise(nn.Conv2d):
    """A 1x1 projection with a stride and no padding, computed as the same 1x1 convolution at stride 1 over every
    ``stride``-th pixel (the same products, the same outputs). Why: oneDNN's strided 1x1 kernel for channels_last
    on CPUs without AVX-512 (``brgconv_strided:avx2`` in PyTorch 2.13's oneDNN 3.12) writes outside its buffers in
    the backward pass: training ended in ``free(): invalid pointer`` or gave other numbers each time (found on an
    AMD EPYC; ``tests/test_models.py`` trains such a block repeatedly). This form never calls that kernel. The
    module keeps ``nn.Conv2d``'s parameters, attributes and state-dict keys, so slicing, costs and checkpoints see
    the 1x1 strided convolution it is. Off the CPU it is that convolution: the cost model traces models on the meta
    device (``fl/cost/opcost.py``), where it prices the strided kernel as before, and CUDA has no such kernel."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__(cin, cout, kernel_size=1, stride=stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type != "cpu":
            return super().forward(x)
        sh, sw = self.stride
        return nn.functional.conv2d(x[:, :, ::sh, ::sw], self.weight, self.bias)


def norm2d(kind: str, channels: int, track_bn: bool) -> nn.Module:
    if kind == "bn":
        return nn.BatchNorm2d(channels, momentum=None, track_running_stats=track_bn)
    if kind == "in":
        return nn.GroupNorm(channels, channels)
    if kind == "ln":
        return nn.GroupNorm(1, channels)
    if kind == "none":
        return nn.Identity()
    raise ValueError(f"unknown norm {kind!r}; expected one of {NORMS}")


def norm1d(kind: str, features: int, track_bn: bool) -> nn.Module:
    if kind == "bn":
        return nn.BatchNorm1d(features, momentum=None, track_running_stats=track_bn)
    if kind == "ln":
        return nn.LayerNorm(features)
    if kind == "none":
        return nn.Identity()
    raise ValueError(f"norm {kind!r} is not available for fully connected layers; use bn, ln or none")


@dataclass(frozen=True)
class NetOptions:
    """What every prunable network is built with beside its widths, rates and depth: its input (channels and
    image size), its classes, and how its layers are built (HeteroFL's Scaler on or off, the norm kind, whether
    BatchNorm tracks running statistics)."""

    in_channels: int
    image_size: tuple[int, int]
    num_classes: int
    scaler: bool
    norm: str
    track_bn: bool

    @classmethod
    def of(cls, args: BuildArgs, scaler: bool) -> NetOptions:
        """``args`` with the Scaler choice resolved (``args.scaler`` may be None: the family's default)."""
        return cls(args.in_channels, tuple(args.image_size), args.num_classes, scaler, args.norm, args.track_bn)

    def scaler_at(self, rate: float) -> nn.Module:
        """HeteroFL's Scaler for a layer at ``rate`` (submodel rate / global rate), or the identity when off."""
        return Scaler(rate) if self.scaler else nn.Identity()

    def norm2d(self, channels: int) -> nn.Module:
        return norm2d(self.norm, channels, self.track_bn)

    def norm1d(self, features: int) -> nn.Module:
        return norm1d(self.norm, features, self.track_bn)


def init_params(model: nn.Module) -> None:
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


def conv_unit(cin: int, cout: int, rate: float, net: NetOptions, *, bias: bool) -> ConvUnit:
    """A ConvUnit at ``rate`` with ``net``'s Scaler and norm."""
    return ConvUnit(cin, cout, bias=bias, scaler=net.scaler_at(rate), norm=net.norm2d(cout))


def conv_units(widths: list[int], rates: list[float], net: NetOptions) -> list[ConvUnit]:
    """Stacked ConvUnits (with bias) from ``net.in_channels`` through ``widths``."""
    units: list[ConvUnit] = []
    cin = net.in_channels
    for width, rate in zip(widths, rates, strict=True):
        units.append(conv_unit(cin, width, rate, net, bias=True))
        cin = width
    return units


@dataclass(frozen=True)
class BlockShape:
    """One residual block of a stage: its pruned input and output channels, its stride, and whether the full
    architecture keeps its shape (stride 1, as many channels out as in)."""

    cin: int
    full_cin: int
    cout: int
    stride: int
    keeps_shape: bool


def stage_blocks(
    cin: int, full_cin: int, widths: Sequence[int], full_widths: Sequence[int], blocks: Sequence[int],
    strides: Sequence[int],
) -> list[list[BlockShape]]:  # fmt: skip
    """The blocks of each stage: stage ``s`` has ``blocks[s]`` blocks of ``widths[s]`` (full: ``full_widths[s]``)
    output channels, its first block has stride ``strides[s]``, the others 1; the first block reads ``cin``
    (full: ``full_cin``) channels, each later one the block before's. Whether a shortcut is the identity comes
    from the full widths, so a submodel's key set never depends on its rates."""
    out: list[list[BlockShape]] = []
    for width, full, n, first_stride in zip(widths, full_widths, blocks, strides, strict=True):
        stage = []
        for b in range(n):
            stride = first_stride if b == 0 else 1
            stage.append(BlockShape(cin, full_cin, width, stride, stride == 1 and full_cin == full))
            cin, full_cin = width, full
        out.append(stage)
    return out


def count_params(module: nn.Module) -> int:
    """Number of parameters (not buffers) of ``module``."""
    return sum(p.numel() for p in module.parameters())


class FeaturesThenHead(nn.Module):
    """``forward_features``, then ``classify`` at full depth only (``has_head``); below it ``forward`` returns the
    feature map. By default the features are the Sequential ``features``, whose common prefix evaluation runs once
    for several submodels (``fl.evaluate``), then ``forward_head`` on the rest."""

    has_head: bool

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.features(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))

    def forward_head(self, out: torch.Tensor) -> torch.Tensor:
        """Everything after the features (the identity below full depth)."""
        return self.classify(out) if self.has_head else out

    def classify(self, out: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class StagedNet(FeaturesThenHead):
    """A stem (the attribute ``stem_name``), then stages ``layer1`` .. ``layer<depth>``, then the head."""

    stem_name = "stem"
    depth: int

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        out = getattr(self, self.stem_name)(x)
        for stage in range(self.depth):
            out = getattr(self, f"layer{stage + 1}")(out)
        return out
