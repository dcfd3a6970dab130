"""The building blocks every prunable family shares: HeteroFL's Scaler, the norm layers, a conv unit, and the
parameter initialisation of a freshly built model."""

from __future__ import annotations

import torch
from torch import nn

from iotfl_sim.fl.models.families import NORMS


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


def scaler_or_identity(enabled: bool, rate: float) -> nn.Module:
    return Scaler(rate) if enabled else nn.Identity()


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


def conv_units(
    widths: list[int], rates: list[float], in_channels: int, scaler: bool, norm: str, track_bn: bool
) -> list[ConvUnit]:
    units: list[ConvUnit] = []
    cin = in_channels
    for width, rate in zip(widths, rates, strict=True):
        units.append(
            ConvUnit(cin, width, bias=True, scaler=scaler_or_identity(scaler, rate), norm=norm2d(norm, width, track_bn))
        )
        cin = width
    return units



def count_params(module: nn.Module) -> int:
    """Number of parameters (not buffers) of ``module``."""
    return sum(p.numel() for p in module.parameters())


class StagedNet(nn.Module):
    """A stem (the attribute ``stem_name``), then stages ``layer1`` .. ``layer<depth>``, then ``classify`` at full
    depth only (``has_head``); below it ``forward`` returns the last stage's feature map."""

    stem_name = "stem"
    depth: int
    has_head: bool

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        out = getattr(self, self.stem_name)(x)
        for stage in range(self.depth):
            out = getattr(self, f"layer{stage + 1}")(out)
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.forward_features(x)
        return self.classify(out) if self.has_head else out

    def classify(self, out: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError
