"""AdapterFL's model partition and reassembly (Liu et al.), as plain model surgery.

A prototype family is a sequence of *stages* in forward order (``stages``): ``cnn2`` conv1, conv2,
head; ``resnet18`` conv1 (stem), layer1-4, head; ``mobilenetv2`` stem, layer1-7, head (last 1x1 conv,
pool, classifier); ``vgg16`` stage1-5 (each ending with its max-pool), head. A *cut* ``c`` puts the
first ``c`` stages in the feature-extraction block and the rest in the device-adaptation block;
candidate cuts (``candidate_cuts``) leave at least one stage on the feature side and at least one stage
besides the head on the adaptation side.

A reassembled model ``m_ij`` (eq. 5) is the feature-extraction block of prototype i, a two-conv
adapter and the device-adaptation block of prototype j. It is a model family of its own, named
``reassembled:<ex family>@<cut>+<ad family>@<cut>`` (``reassembled_family``), so every part of the
simulator (costs, memory, skeletons, evaluation) handles it like any other family; ``spec.rate`` is a
width multiplier applied to both prototypes. Its tensors are named ``ex.*``, ``adapter.*`` and ``ad.*``.

Adapter (the paper says only "two convolutional layers, attached to the feature-extraction block and
the device-adaptation block"): ``alpha0`` = 1x1 conv C_ex -> C_ex, ``alpha1`` = 1x1 conv C_ex -> C_ad,
each bias-free and followed by the model's norm and a ReLU. With these, the reassembled models' sizes
come out as in Table II's last column (see tests/test_adapterfl.py); 3x3 convs would add 0.3 M to
L-L where the table adds 0.04 M. Where the feature map's size differs from what the adaptation block
sees in its own prototype, an adaptive average pool between alpha0 and alpha1 resizes it to that size
(the paper does not say how spatial sizes are matched; only ``cnn2``'s flattening head needs it).

Partition (eq. 3, DeRy-style): ``linear_cka`` (Kornblith et al.) on flattened representations of a
probe batch, and ``partition_by_similarity``, which searches all combinations of candidate cuts for
the one maximising sum_i S(B_i^0, B_an^0) + S(B_i^1, B_an^1) with S(B, B') = s(B(x), B'(x')) + s(x, x').
"""

from __future__ import annotations

import itertools
import math
import re
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

import torch
from torch import nn

from iotfl_sim.core.catalog import PROTOTYPE_STAGES
from iotfl_sim.fl.models.families import BuildArgs
from iotfl_sim.fl.models.layers import norm2d
from iotfl_sim.fl.models.plain import build_plain
from iotfl_sim.fl.models.plain_nets import VGG, MobileNetV2, PreActResNet, TwoConvCNN
from iotfl_sim.fl.submodel import SubmodelSpec
from iotfl_sim.scenario.algorithms import candidate_cuts

PREFIX = "reassembled:"
PROTOTYPE_FAMILIES: tuple[str, ...] = tuple(PROTOTYPE_STAGES)
BLOCKS: tuple[str, ...] = ("ex", "adapter", "ad")
_NAME = re.compile(r"reassembled:([a-z0-9_]+)@(\d+)\+([a-z0-9_]+)@(\d+)")


# --------------------------------------------------------------------------- stages and cuts


def stages(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The prototype's stages in forward order, as (name, module); the last one is the head."""
    if isinstance(model, TwoConvCNN):
        return [("conv1", model.conv1), ("conv2", model.conv2), ("head", model.head)]
    if isinstance(model, PreActResNet) and model.has_head:
        head = nn.Sequential(
            OrderedDict(scaler=model.scaler, n4=model.n4, relu=model.relu, pool=model.pool, flatten=model.flatten,
                        linear=model.linear)
        )  # fmt: skip
        return [("conv1", model.conv1)] + [(f"layer{i}", getattr(model, f"layer{i}")) for i in range(1, 5)] + [("head", head)]
    if isinstance(model, MobileNetV2) and model.has_head:
        head = nn.Sequential(OrderedDict(last=model.last, pool=model.pool, flatten=model.flatten, classifier=model.classifier))
        return [("stem", model.stem)] + [(f"layer{i}", getattr(model, f"layer{i}")) for i in range(1, 8)] + [("head", head)]
    if isinstance(model, VGG) and model.has_head:
        out: list[tuple[str, nn.Module]] = []
        current: list[nn.Module] = []
        for m in model.features:
            current.append(m)
            if isinstance(m, (nn.MaxPool2d, nn.Identity)):
                out.append((f"stage{len(out) + 1}", nn.Sequential(*current)))
                current = []
        head = nn.Sequential(OrderedDict(pool=model.pool, flatten=model.flatten, projector=model.projector,
                                         classifier=model.classifier))  # fmt: skip
        return out + [("head", head)]
    raise ValueError(f"AdapterFL cannot partition {type(model).__name__}; prototypes: {PROTOTYPE_FAMILIES}")


def reassembled_family(ex_family: str, ex_cut: int, ad_family: str, ad_cut: int) -> str:
    for fam, cut in ((ex_family, ex_cut), (ad_family, ad_cut)):
        if cut not in candidate_cuts(fam):
            raise ValueError(f"cut {cut} of {fam!r} is not a candidate; candidates: {candidate_cuts(fam)}")
    return f"{PREFIX}{ex_family}@{ex_cut}+{ad_family}@{ad_cut}"


def parse_family(family: str) -> tuple[str, int, str, int]:
    m = _NAME.fullmatch(family)
    if m is None:
        raise ValueError(f"bad reassembled family {family!r}; expected 'reassembled:<family>@<cut>+<family>@<cut>'")
    ex, ex_cut, ad, ad_cut = m.group(1), int(m.group(2)), m.group(3), int(m.group(4))
    reassembled_family(ex, ex_cut, ad, ad_cut)  # validates
    return ex, ex_cut, ad, ad_cut


# --------------------------------------------------------------------------- reassembled models


class Adapter(nn.Module):
    """alpha0 (1x1 conv C_ex -> C_ex, norm, ReLU), an optional resize, alpha1 (1x1 conv C_ex -> C_ad, norm, ReLU)."""

    def __init__(self, c_ex: int, c_ad: int, resize: tuple[int, int] | None, norm: str, track_bn: bool) -> None:
        super().__init__()
        self.alpha0 = nn.Sequential(nn.Conv2d(c_ex, c_ex, 1, bias=False), norm2d(norm, c_ex, track_bn), nn.ReLU())
        self.resize = nn.AdaptiveAvgPool2d(resize) if resize is not None else nn.Identity()
        self.alpha1 = nn.Sequential(nn.Conv2d(c_ex, c_ad, 1, bias=False), norm2d(norm, c_ad, track_bn), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.alpha1(self.resize(self.alpha0(x)))


class Reassembled(nn.Module):
    """m_ij = <(m_i^ex o alpha0), (alpha1 o m_j^ad)> (eq. 5)."""

    def __init__(self, ex: nn.Module, adapter: Adapter, ad: nn.Module) -> None:
        super().__init__()
        self.ex = ex
        self.adapter = adapter
        self.ad = ad

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ad(self.adapter(self.ex(x)))


@lru_cache(maxsize=256)
def cut_shape(
    family: str, cut: int, spec: SubmodelSpec, in_channels: int, image_size: tuple[int, int], num_classes: int
) -> tuple[int, int, int]:
    """(channels, height, width) of the prototype's feature map after its first ``cut`` stages."""
    with torch.device("meta"):
        model = build_plain(family, spec, BuildArgs(num_classes, in_channels, image_size))
        out = torch.zeros(2, in_channels, *image_size)
        for _, stage in stages(model)[:cut]:
            out = stage(out)
    return int(out.shape[1]), int(out.shape[2]), int(out.shape[3])


def build_reassembled(family: str, spec: SubmodelSpec, args: BuildArgs) -> Reassembled:
    """A fresh reassembled model (see the module docstring); ``spec.rate`` narrows both prototypes."""
    if spec.depth is not None:
        raise ValueError("a reassembled model takes no depth")
    ex_family, ex_cut, ad_family, ad_cut = parse_family(family)
    args = replace(args, image_size=tuple(args.image_size))
    in_channels, image_size, num_classes = args.in_channels, args.image_size, args.num_classes
    ex = nn.Sequential(OrderedDict(stages(build_plain(ex_family, spec, args))[:ex_cut]))
    ad = nn.Sequential(OrderedDict(stages(build_plain(ad_family, spec, args))[ad_cut:]))
    c_ex, *hw_ex = cut_shape(ex_family, ex_cut, spec, in_channels, image_size, num_classes)
    c_ad, *hw_ad = cut_shape(ad_family, ad_cut, spec, in_channels, image_size, num_classes)
    resize = tuple(hw_ad) if hw_ex != hw_ad else None
    return Reassembled(ex, Adapter(c_ex, c_ad, resize, args.norm, args.track_bn), ad)


def block_params(model: Reassembled) -> dict[str, int]:
    """Parameters of the feature-extraction block, the adapter and the device-adaptation block."""
    return {b: sum(p.numel() for p in getattr(model, b).parameters()) for b in BLOCKS}


# --------------------------------------------------------------------------- block-wise aggregation keys


def group_key(key: str, owner: str, shared: Sequence[str]) -> str:
    """The name of a model's tensor in its group's global state: blocks in ``shared`` keep their name
    (one tensor for the whole group), the others are prefixed with the owning model's label."""
    return key if key.split(".", 1)[0] in shared else f"{owner}/{key}"


def to_group(state: Mapping[str, torch.Tensor], owner: str, shared: Sequence[str]) -> dict[str, torch.Tensor]:
    return {group_key(k, owner, shared): v for k, v in state.items()}


def from_group(
    group: Mapping[str, torch.Tensor], keys: Sequence[str], owner: str, shared: Sequence[str]
) -> dict[str, torch.Tensor]:
    return {k: group[group_key(k, owner, shared)] for k in keys}


# --------------------------------------------------------------------------- CKA partition (eq. 3)


def centered_gram(x: torch.Tensor) -> torch.Tensor:
    """X_c X_c^T (float64, n x n) of a representation of n samples (rows; other dims flattened),
    X_c its column-centred matrix: all linear CKA needs, and small whatever the feature width."""
    xc = x.reshape(x.shape[0], -1).double()
    xc = xc - xc.mean(0, keepdim=True)
    return xc @ xc.T


def cka_from_grams(k: torch.Tensor, m: torch.Tensor) -> float:
    """Linear CKA from two centred Gram matrices: tr(K M) / sqrt(tr(K K) tr(M M)); 0 if either is 0."""
    if k.shape != m.shape:
        raise ValueError(f"CKA needs the same samples: Gram matrices {tuple(k.shape)} vs {tuple(m.shape)}")
    km, kk, mm = float((k * m).sum()), float((k * k).sum()), float((m * m).sum())
    if kk <= 0 or mm <= 0:
        return 0.0
    return km / math.sqrt(kk * mm)


def linear_cka(x: torch.Tensor, y: torch.Tensor) -> float:
    """Linear CKA (Kornblith et al. 2019) of two representations of the same n samples:
    ||Y_c^T X_c||_F^2 / (||X_c^T X_c||_F ||Y_c^T Y_c||_F); 0 when either representation is constant."""
    return cka_from_grams(centered_gram(x), centered_gram(y))


@torch.no_grad()
def cut_features(model: nn.Module, x: torch.Tensor, cuts: Sequence[int]) -> tuple[list[torch.Tensor], torch.Tensor]:
    """The feature maps after each of ``cuts`` stages, and the model's output, for input ``x``."""
    model.eval()
    feats: dict[int, torch.Tensor] = {}
    out = x
    for i, (_, stage) in enumerate(stages(model)):
        out = stage(out)
        if i + 1 in cuts:
            feats[i + 1] = out
    return [feats[c] for c in cuts], out


@dataclass(frozen=True)
class Partition:
    cuts: tuple[int, ...]  # stages in each model's feature-extraction block
    anchor: int  # the model whose blocks are the anchors B_an
    score: float  # the objective of eq. 3 at the chosen cuts
    scores: tuple[tuple[tuple[int, ...], float], ...]  # objective of every combination, in search order


def partition_by_similarity(
    candidates: Sequence[Sequence[int]],
    features: Sequence[Sequence[torch.Tensor]],
    inputs: torch.Tensor,
    outputs: Sequence[torch.Tensor],
) -> Partition:
    """Eq. 3: choose one cut per model. ``features[i][k]`` is the centred Gram matrix
    (``centered_gram``) of model i's representation at its cut ``candidates[i][k]``, ``outputs[i]`` that
    of its final output and ``inputs`` that of the probe batch itself.

    For a combination of cuts, block B_i^0 maps x to h_i (its feature at the cut) and B_i^1 maps h_i to
    o_i, so S(B_i^0, B_j^0) = s(h_i, h_j) + s(x, x) and S(B_i^1, B_j^1) = s(o_i, o_j) + s(h_i, h_j).
    The anchor is the model whose blocks have the largest summed similarity with the others'; the
    combination maximising the summed similarity to the anchor wins (first in search order on a tie;
    the search runs through the combinations with the first model's cut varying slowest).
    """
    n = len(candidates)
    if not (len(features) == len(outputs) == n) or any(len(f) != len(c) for f, c in zip(features, candidates, strict=True)):
        raise ValueError("one feature per candidate cut and one output per model are needed")
    s_in = cka_from_grams(inputs, inputs)
    s_out = [[cka_from_grams(outputs[i], outputs[j]) for j in range(n)] for i in range(n)]
    cache: dict[tuple[int, int, int, int], float] = {}

    def s_feat(i: int, a: int, j: int, b: int) -> float:
        key = (i, a, j, b) if (i, a) <= (j, b) else (j, b, i, a)
        if key not in cache:
            cache[key] = cka_from_grams(features[i][a], features[j][b])
        return cache[key]

    best: tuple[tuple[int, ...], int, float] | None = None
    table = []
    for combo in itertools.product(*(range(len(c)) for c in candidates)):
        pair = [[2 * s_feat(i, combo[i], j, combo[j]) + s_in + s_out[i][j] for j in range(n)] for i in range(n)]
        anchor = max(range(n), key=lambda j: (sum(pair[i][j] for i in range(n) if i != j), -j))
        score = sum(pair[i][anchor] for i in range(n))
        cuts = tuple(int(candidates[i][combo[i]]) for i in range(n))
        table.append((cuts, score))
        if best is None or score > best[2] + 1e-12:
            best = (cuts, anchor, score)
    assert best is not None
    return Partition(best[0], best[1], best[2], tuple(table))
