"""FedX's global models as nested families: the OFA MobileNetV3 supernet and the HAR-Wild 1-D CNN.

``ofa_mbv3`` (Once-for-All MobileNetV3 ``d234_e346``, w1.0, as CompOFA trains it): stem conv 3x3/2 (16 ch,
h-swish), a fixed MBConv 16->16 (expand 1, k3, ReLU, residual), five stages of MBConv blocks with output widths
24/40/80/112/160, first-block strides 2/2/2/1/2, activations ReLU/ReLU/h-swish/h-swish/h-swish and
squeeze-and-excitation in stages 2, 4, 5; then a 1x1 conv to 960 (h-swish), global pooling, a 1x1 conv to 1280
without norm (h-swish) and the linear classifier. The depthwise kernel is 5 everywhere (the only OFA kernel
whose counts match FedX's 2.41M / 3.51M / 6.39M with a 200-class head; ``benchmarks/profile_derivations.md``).

A sub-network is (d, e): the first ``d`` blocks of every stage and inverted-bottleneck width
``make_divisible(cin * e)`` (the SE width follows, ``make_divisible(hidden // 4)``). Its spec is
``SubmodelSpec(rate=e / 6, depth=d)`` (``ofa_spec``); prefix slices of the widths and the missing later blocks
make every sub-network nested in the (d4, e6) global model, as the paper's Fig. 1 requires (OFA sorts channels
by importance before slicing; here the prefix is the order, as for every other family of the simulator).

``harwild``: FedX's HAR-Wild model ("three 1-D CNN layers with batch norm and five fully connected layers",
128 / 64 / 32 channels for large / medium / small, 316K / 153K / 76K parameters). The seed gives no layer sizes;
this reconstruction (on UCI HAR's 9 x 128 windows) is chosen to match those three counts within 1 %: conv k7
9->C, BN, ReLU, max-pool 2; conv k1 C->C, BN, ReLU, max-pool 2; conv k3 C->C/2, BN, ReLU; flatten (C/2 x 32);
FC 128, 32, 32, 16 with ReLU; FC to the classes. ``rate`` = C / 128.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from iotfl_sim.fl.submodel import SubmodelSpec

FEDX_FAMILIES: tuple[str, ...] = ("ofa_mbv3", "harwild")

OFA_STEM = 16
OFA_KERNEL = 5
# (output width, stride of the first block, activation, squeeze-and-excitation) per stage
OFA_STAGES: tuple[tuple[int, int, str, bool], ...] = (
    (24, 2, "relu", False),
    (40, 2, "relu", True),
    (80, 2, "hswish", False),
    (112, 1, "hswish", True),
    (160, 2, "hswish", True),
)
OFA_MAX_DEPTH = 4
OFA_MAX_EXPAND = 6
OFA_FINAL_EXPAND = 960
OFA_LAST_CHANNEL = 1280
# FedX's three sub-networks (d, e)
OFA_LEVELS: dict[str, tuple[int, int]] = {"small": (2, 3), "medium": (3, 4), "large": (4, 6)}

HARWILD_CHANNELS = 128
HARWILD_FC = (128, 32, 32, 16)
HARWILD_KERNELS = (7, 1, 3)
HARWILD_LEVELS: dict[str, float] = {"small": 0.25, "medium": 0.5, "large": 1.0}


def ofa_spec(depth: int, expand: int, name: str = "") -> SubmodelSpec:
    """The spec of OFA sub-network (d, e): rate e / 6, depth d."""
    return SubmodelSpec(rate=expand / OFA_MAX_EXPAND, depth=depth, name=name)


def level_specs(family: str) -> dict[str, SubmodelSpec]:
    """FedX's small / medium / large sub-network specs of ``family``."""
    if family == "ofa_mbv3":
        return {k: ofa_spec(d, e, k) for k, (d, e) in OFA_LEVELS.items()}
    if family == "harwild":
        return {k: SubmodelSpec(rate=r, name=k) for k, r in HARWILD_LEVELS.items()}
    raise ValueError(f"FedX levels are defined for {FEDX_FAMILIES}, not {family!r}")


def make_divisible(v: float, divisor: int = 8) -> int:
    """OFA/TF rounding of a channel count to a multiple of ``divisor`` (never below 90% of ``v``)."""
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


def _act(name: str) -> nn.Module:
    return nn.ReLU() if name == "relu" else nn.Hardswish()


def _bn2d(c: int, track_bn: bool) -> nn.Module:
    return nn.BatchNorm2d(c, momentum=None, track_running_stats=track_bn)


class SqueezeExcite(nn.Module):
    def __init__(self, channels: int, mid: int) -> None:
        super().__init__()
        self.reduce = nn.Conv2d(channels, mid, 1, bias=True)
        self.expand = nn.Conv2d(mid, channels, 1, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.mean((2, 3), keepdim=True)
        return x * F.hardsigmoid(self.expand(F.relu(self.reduce(y))))


class MBConv(nn.Module):
    """[1x1 expand, BN, act], kxk depthwise, BN, act, [SE], 1x1 project, BN; identity shortcut where it fits."""

    def __init__(
        self, cin: int, hidden: int, cout: int, kernel: int, stride: int, act: str, se_mid: int | None,
        expand: bool, residual: bool, track_bn: bool,
    ) -> None:  # fmt: skip
        super().__init__()
        self.expand = nn.Sequential(nn.Conv2d(cin, hidden, 1, bias=False), _bn2d(hidden, track_bn), _act(act)) if expand else None
        self.depthwise = nn.Sequential(
            nn.Conv2d(hidden, hidden, kernel, stride, kernel // 2, groups=hidden, bias=False),
            _bn2d(hidden, track_bn),
            _act(act),
        )
        self.se = SqueezeExcite(hidden, se_mid) if se_mid is not None else None
        self.project = nn.Sequential(nn.Conv2d(hidden, cout, 1, bias=False), _bn2d(cout, track_bn))
        self.residual = residual

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.expand(x) if self.expand is not None else x
        y = self.depthwise(y)
        if self.se is not None:
            y = self.se(y)
        y = self.project(y)
        return x + y if self.residual else y


class OFAMobileNetV3(nn.Module):
    """Sub-network (d, e) of the OFA MobileNetV3 supernet; parameter names do not depend on (d, e)."""

    def __init__(self, spec: SubmodelSpec, *, in_channels: int, num_classes: int, track_bn: bool) -> None:
        super().__init__()
        depth = OFA_MAX_DEPTH if spec.depth is None else spec.depth
        if not 1 <= depth <= OFA_MAX_DEPTH:
            raise ValueError(f"ofa_mbv3 depth must be in [1, {OFA_MAX_DEPTH}], got {depth}")
        expand = OFA_MAX_EXPAND * spec.rate
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, OFA_STEM, 3, 2, 1, bias=False), _bn2d(OFA_STEM, track_bn), nn.Hardswish()
        )
        self.first = MBConv(OFA_STEM, OFA_STEM, OFA_STEM, 3, 1, "relu", None, False, True, track_bn)
        stages = []
        cin = OFA_STEM
        for width, stride, act, se in OFA_STAGES:
            blocks = []
            for i in range(depth):
                full = make_divisible(round(cin * OFA_MAX_EXPAND))
                hidden = min(full, make_divisible(round(cin * expand)))
                mid = make_divisible(hidden // 4) if se else None
                blocks.append(
                    MBConv(cin, hidden, width, OFA_KERNEL, stride if i == 0 else 1, act, mid, True, i > 0, track_bn)
                )
                cin = width
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.final = nn.Sequential(
            nn.Conv2d(cin, OFA_FINAL_EXPAND, 1, bias=False), _bn2d(OFA_FINAL_EXPAND, track_bn), nn.Hardswish()
        )
        self.feature_mix = nn.Conv2d(OFA_FINAL_EXPAND, OFA_LAST_CHANNEL, 1, bias=False)
        self.classifier = nn.Linear(OFA_LAST_CHANNEL, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.final(self.stages(self.first(self.stem(x)))).mean((2, 3), keepdim=True)
        x = F.hardswish(self.feature_mix(x))
        return self.classifier(torch.flatten(x, 1))


class HARWild(nn.Module):
    """The HAR-Wild reconstruction (module docstring); input (N, channels, 1, T) or (N, channels, T)."""

    def __init__(
        self, spec: SubmodelSpec, *, in_channels: int, length: int, num_classes: int, track_bn: bool
    ) -> None:
        super().__init__()
        c = spec.width(HARWILD_CHANNELS)
        c3 = spec.width(HARWILD_CHANNELS // 2)
        k1, k2, k3 = HARWILD_KERNELS

        def block(cin: int, cout: int, k: int, pool: bool) -> nn.Sequential:
            layers: list[nn.Module] = [
                nn.Conv1d(cin, cout, k, padding=k // 2),
                nn.BatchNorm1d(cout, momentum=None, track_running_stats=track_bn),
                nn.ReLU(),
            ]
            if pool:
                layers.append(nn.MaxPool1d(2))
            return nn.Sequential(*layers)

        self.conv1 = block(in_channels, c, k1, True)
        self.conv2 = block(c, c, k2, True)
        self.conv3 = block(c, c3, k3, False)
        fin = c3 * (length // 4)
        fcs: list[nn.Module] = []
        for width in HARWILD_FC:
            fcs += [nn.Linear(fin, width), nn.ReLU()]
            fin = width
        self.fc = nn.Sequential(*fcs)
        self.classifier = nn.Linear(fin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 4:
            x = x.flatten(2)  # (N, C, 1, T) -> (N, C, T)
        x = self.conv3(self.conv2(self.conv1(x)))
        return self.classifier(self.fc(torch.flatten(x, 1)))


def build_fedx_model(
    family: str, spec: SubmodelSpec, *, num_classes: int, in_channels: int, image_size: tuple[int, int],
    track_bn: bool = False,
) -> nn.Module:  # fmt: skip
    if family == "ofa_mbv3":
        model: nn.Module = OFAMobileNetV3(spec, in_channels=in_channels, num_classes=num_classes, track_bn=track_bn)
    elif family == "harwild":
        model = HARWild(
            spec, in_channels=in_channels, length=image_size[0] * image_size[1], num_classes=num_classes,
            track_bn=track_bn,
        )  # fmt: skip
    else:
        raise ValueError(f"unknown FedX family {family!r}")
    for m in model.modules():
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)
    return model
