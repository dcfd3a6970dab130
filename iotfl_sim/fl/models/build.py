"""Model construction: one builder per family of ``catalog.MODEL_FAMILIES``, and AdapterFL's reassembled models.

The families live in their own modules (``fl.models.plain``: the single-output ones, ``fl.models.resnet_cifar``: ScaleFL's
ResNet110, ``fl.models.early_exit``: the ``*_ee`` variants, ``fl.models.fedx``: FedX's); this module is the only one
that imports them all (``early_exit`` and ``reassemble`` build on ``build_plain`` directly), so there is no import circle.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from iotfl_sim.core.catalog import MODEL_FAMILIES
from iotfl_sim.fl.models.early_exit import build_early_exit
from iotfl_sim.fl.models.families import EE_FAMILIES, FEDX_FAMILIES, PLAIN_FAMILIES, BuildArgs
from iotfl_sim.fl.models.fedx import build_fedx_model
from iotfl_sim.fl.models.plain import build_plain
from iotfl_sim.fl.models.reassemble import PREFIX as REASSEMBLED
from iotfl_sim.fl.models.reassemble import build_reassembled
from iotfl_sim.fl.models.resnet_cifar import build_resnet110
from iotfl_sim.fl.submodel import SubmodelSpec


def _fedx(family: str, spec: SubmodelSpec, args: BuildArgs) -> nn.Module:
    """FedX's models have no Scaler, no global rate and BatchNorm only: those arguments do not apply."""
    return build_fedx_model(family, spec, num_classes=args.num_classes, in_channels=args.in_channels,
                            image_size=args.image_size, track_bn=args.track_bn)  # fmt: skip


BUILDERS: dict[str, Callable[[str, SubmodelSpec, BuildArgs], nn.Module]] = {
    **dict.fromkeys(PLAIN_FAMILIES, build_plain),
    "resnet110": build_resnet110,
    **dict.fromkeys(EE_FAMILIES, build_early_exit),
    **dict.fromkeys(FEDX_FAMILIES, _fedx),
}


def build_model(
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
    """Build the ``family`` submodel described by ``spec`` (a fresh, randomly initialised module).

    ``global_rate`` is the global model's rate (HeteroFL's first level); in training mode each
    Scaler divides by its layer's rate / ``global_rate``. ``scaler=None`` means the family's own
    default: on for ``conv``, ``resnet18``, ``cnn_small`` and ``mlp`` (HeteroFL), off for ``vgg16``
    (AdaptiveFL has none) and ``mobilenetv2``; ``True``/``False`` force it on/off for any family.
    ``norm`` is ``bn`` (BatchNorm, ``momentum=None``, ``track_running_stats=track_bn``), ``in``, ``ln``
    or ``none``. ``spec.depth`` (conv: conv units 1..4 with their pools, resnet18: stages 1..4, vgg16:
    stages 1..5, mobilenetv2: bottleneck stages 1..7, resnet110: segments 1..4) keeps only the first stages and drops the head
    (below full depth); other families raise NotImplementedError for a depth. The ``*_ee`` families
    (``fl.models.early_exit``) return one logit tensor per exit. ``reassembled:...`` families are AdapterFL's
    reassembled models (``fl.models.reassemble``); ``ofa_mbv3`` and ``harwild`` FedX's (``fl.models.fedx``).
    """
    builder = build_reassembled if family.startswith(REASSEMBLED) else BUILDERS.get(family)
    if builder is None:
        raise ValueError(f"unknown model family {family!r}; expected one of {MODEL_FAMILIES}")
    args = BuildArgs(num_classes, in_channels, image_size, global_rate, scaler, track_bn, norm)
    return builder(family, spec, args)
