"""Submodel specifications and index maps into the global tensors.

Every method this simulator hosts cuts submodels as *prefix slices*: a width-reduced layer keeps
its first k output channels and the first k' input channels of the layer before it, the classifier
keeps every class row, and a depth-reduced model simply lacks the later blocks. A submodel's index
map is therefore fully described by the shape of each of its tensors: tensor ``name`` of the
submodel is ``global[name][:s0, :s1, ...]``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch

Shapes = dict[str, tuple[int, ...]]
ROUNDINGS: tuple[str, ...] = ("ceil", "floor", "int")


class ZeroWidthError(ValueError):
    """A ``rounding="int"`` layer would keep no channel (the official code would build 0 channels)."""


def truncation(reference: str) -> str:
    """The rounding of the int()-truncating methods (ScaleFL, AdaptiveFL, FlexFL) per ``reference``:
    ``code``: ``int`` (the official code's arithmetic exactly); ``paper``: ``floor`` (the papers give no
    arithmetic, so a product within 1e-9 of an integer counts as that integer and a layer keeps at
    least one channel)."""
    return "int" if reference == "code" else "floor"


@dataclass(frozen=True)
class SubmodelSpec:
    """What a device trains: a width rate (global or per layer), an optional depth, a rounding rule.

    ``rate`` is relative to the *full* architecture (1.0 = all channels). ``layer_rates`` overrides it
    per prunable layer (FlexFL). ``depth`` keeps only the first ``depth`` blocks/exits (DepthFL,
    ScaleFL). ``rounding`` (see :meth:`width`) is ``ceil`` (HeteroFL), ``floor`` (ScaleFL, AdaptiveFL,
    FlexFL in ``reference: paper``) or ``int`` (their ``reference: code``: Python's ``int()`` exactly,
    as the official code computes it; :func:`truncation` picks between the last two).
    Specs are hashable, so costs and model skeletons are cached per spec.
    """

    rate: float = 1.0
    layer_rates: tuple[float, ...] | None = None
    depth: int | None = None
    rounding: str = "ceil"
    name: str = ""

    def __post_init__(self) -> None:
        if not 0.0 < self.rate <= 1.0:
            raise ValueError(f"submodel rate must be in (0, 1], got {self.rate}")
        if self.rounding not in ROUNDINGS:
            raise ValueError(f"rounding must be one of {ROUNDINGS}, got {self.rounding!r}")

    @property
    def label(self) -> str:
        return self.name or f"r{self.rate:g}" + (f"d{self.depth}" if self.depth else "")

    def layer_rate(self, layer: int) -> float:
        if self.layer_rates is None:
            return self.rate
        return self.layer_rates[min(layer, len(self.layer_rates) - 1)]

    def width(self, channels: int, layer: int = 0) -> int:
        """Channels kept out of ``channels`` at prunable layer ``layer``.

        ``ceil`` and ``floor`` round the float product ``channels x rate`` to the nearest integer
        first when it lies within 1e-9 of one (so 0.7 x 10 = 7.000000000000001 keeps 7 under ceil, and
        0.29 x 100 = 28.999999999999996 keeps 29 under floor) and keep at least one channel. ``int``
        is the official code's ``int(channels * rate)``, bit for bit: no tolerance (28.99...96 keeps
        28) and no minimum: a product below 1 raises :class:`ZeroWidthError` instead of building a
        model the official code would not build.
        """
        scaled = channels * self.layer_rate(layer)
        if self.rounding == "int":
            kept = int(scaled)
            if kept == 0:
                raise ZeroWidthError(
                    f"int({channels} x {self.layer_rate(layer):g}) = 0 channels at layer group {layer}"
                )
            return kept
        kept = math.ceil(scaled - 1e-9) if self.rounding == "ceil" else int(scaled + 1e-9)
        return max(1, min(channels, kept))


def shapes_of(state: Mapping[str, torch.Tensor]) -> Shapes:
    return {k: tuple(v.shape) for k, v in state.items()}


def prefix_index(shape: tuple[int, ...]) -> tuple[slice, ...]:
    return tuple(slice(0, n) for n in shape)


def slice_state(global_state: Mapping[str, torch.Tensor], shapes: Shapes) -> dict[str, torch.Tensor]:
    """The submodel's tensors, cut from the global ones (views; clone before training in place)."""
    return {k: global_state[k][prefix_index(s)] for k, s in shapes.items()}


class SharedCopies:
    """Compact copies of sliced states, one per distinct set of views: the jobs of a round that receive the same
    weights (every FedAvg client, a HeteroFL level's clients) hold one copy between them instead of one each.

    Two states are the same views when every tensor has the same name, memory address, dtype, shape and strides;
    the views are kept alive beside their copy, so no address is reused by other values while this object lives.
    The copies must be read only (``TrainJob.weights`` is: workers load it into their models).
    """

    def __init__(self) -> None:
        self._copies: dict[tuple, tuple[Mapping[str, torch.Tensor], dict[str, torch.Tensor]]] = {}

    def of(self, views: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        key = tuple((k, v.device, v.data_ptr(), v.dtype, tuple(v.shape), v.stride()) for k, v in views.items())
        if key not in self._copies:
            self._copies[key] = (views, {k: v.clone() for k, v in views.items()})
        return self._copies[key][1]


def _not_nested(global_shapes: Shapes, sub_shapes: Shapes) -> str | None:
    """The first tensor of ``sub_shapes`` that is not a prefix sub-shape of ``global_shapes``'s, or None."""
    for k, s in sub_shapes.items():
        g = global_shapes.get(k)
        if g is None or len(g) != len(s) or any(a > b for a, b in zip(s, g, strict=True)):
            return k
    return None


def is_nested(outer: Shapes, inner: Shapes) -> bool:
    """Whether every tensor of ``inner`` is a prefix slice of ``outer``'s (``inner`` can be cut from ``outer``)."""
    return _not_nested(outer, inner) is None


def check_nested(global_shapes: Shapes, sub_shapes: Shapes) -> None:
    """Raise if ``sub_shapes`` is not a prefix sub-shape of ``global_shapes`` (a programming error)."""
    k = _not_nested(global_shapes, sub_shapes)
    if k is not None:
        raise ValueError(f"tensor {k}: submodel shape {sub_shapes[k]} is not nested in global shape {global_shapes.get(k)}")
