"""FlexFL's pruning mechanics as plain functions: APoZ (eq. 1-2), the adjustment weight (eq. 3) and
the per-layer ratio search of Algorithm 1 (the paper's rule and the official code's rule).

Layer groups are the families' prunable groups (``models.LAYER_GROUPS``): the index ``l`` of
``SubmodelSpec.layer_rates``. Each group is a set of module-name prefixes of the full model:

- ``conv``, ``cnn_small``: one ConvUnit (conv + norm + ReLU) each.
- ``vgg16``: the 13 ConvUnits, then the two hidden FC blocks (Linear + ReLU) of the projector.
- ``resnet18``: the four stages; the stem conv joins stage 1, the head's norm/ReLU joins stage 4.
- ``mobilenetv2``: the stem, the 7 bottleneck stages, the last 1x1 conv (ReLU6 counts as a ReLU).
- ``mlp``: each hidden Linear block.

The APoZ of a group is the mean over the ReLUs inside it (eq. 2; a single-ReLU group is eq. 1). Its
size (eq. 3's size(l)) is the parameter count of the modules inside it (conv block: weight, bias and
the norm's affine parameters, as the official code counts ``net.features`` layers).

Parameter counts of candidate submodels are taken from modules built on PyTorch's ``meta`` device
(shapes only, no memory), so a search over hundreds of gammas stays cheap even for VGG16.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import lru_cache

import numpy as np
import torch
from torch import nn

from iotfl_sim.fl.batches import epoch_batches
from iotfl_sim.fl.models.families import LAYER_GROUPS, VGG16_CONVS
from iotfl_sim.fl.models.layers import ConvUnit
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.sgd import PlainSGD, descend
from iotfl_sim.fl.submodel import SubmodelSpec, ZeroWidthError
from iotfl_sim.fl.torch_seed import seed_torch

MIN_RATE = 0.01  # Algorithm 1 line 12: no layer is pruned away completely


APOZ_BATCH = 256  # samples per forward pass of the APoZ scoring


def group_prefixes(model: nn.Module, family: str) -> list[tuple[str, ...]]:
    """Module-name prefixes of each prunable layer group of ``model`` (see the module docstring)."""
    if family in ("conv", "cnn_small", "vgg16"):
        units = [(name,) for name, m in model.named_modules() if isinstance(m, ConvUnit)]
        if family == "vgg16":
            assert len(units) == VGG16_CONVS, "apoz groups need the full-depth VGG16"
            units += [
                ("projector.0", "projector.1", "projector.2"),
                ("projector.4", "projector.5", "projector.6"),
            ]
        groups = units
    elif family == "resnet18":
        groups = [("conv1", "layer1"), ("layer2",), ("layer3",), ("layer4", "scaler", "n4", "relu")]
    elif family == "mobilenetv2":
        groups = [("stem",)] + [(f"layer{i}",) for i in range(1, 8)] + [("last",)]
    elif family == "mlp":
        groups = [tuple(f"hidden.{4 * i + j}" for j in range(4)) for i in range(LAYER_GROUPS["mlp"])]
    else:
        raise ValueError(f"no APoZ layer groups for family {family!r}")
    if len(groups) != LAYER_GROUPS[family]:
        raise AssertionError(f"{family}: {len(groups)} APoZ groups, expected {LAYER_GROUPS[family]}")
    return groups


def _inside(name: str, prefixes: Sequence[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def relus_by_group(model: nn.Module, family: str) -> list[list[nn.Module]]:
    """The ReLU (or ReLU6) modules of each layer group, in forward order."""
    groups = group_prefixes(model, family)
    out: list[list[nn.Module]] = [[] for _ in groups]
    for name, m in model.named_modules():
        if isinstance(m, (nn.ReLU, nn.ReLU6)):
            for g, prefixes in enumerate(groups):
                if _inside(name, prefixes):
                    out[g].append(m)
                    break
    for g, mods in enumerate(out):
        if not mods:
            raise AssertionError(f"{family}: layer group {g} has no ReLU")
    return out


def group_param_counts(model: nn.Module, family: str) -> list[int]:
    """size(l) of eq. 3: the number of parameters of each layer group."""
    groups = group_prefixes(model, family)
    counts = [0] * len(groups)
    for name, p in model.named_parameters():
        module = name.rsplit(".", 1)[0]
        for g, prefixes in enumerate(groups):
            if _inside(module, prefixes):
                counts[g] += p.numel()
                break
    return counts


def zero_fraction_per_sample(activation: torch.Tensor) -> torch.Tensor:
    """Per sample, the fraction of the N output entries that are exactly zero (eq. 1's inner sum / N)."""
    return (activation == 0).flatten(1).to(torch.float64).mean(dim=1)


def layer_apoz(
    model: nn.Module, family: str, x: torch.Tensor, batch_size: int = APOZ_BATCH, mode: str = "eval"
) -> list[float]:
    """APoZ of each layer group of ``model`` over the samples ``x`` (eq. 1 per ReLU, eq. 2 per group)."""
    if len(x) == 0:
        raise ValueError("APoZ needs at least one sample")
    groups = relus_by_group(model, family)
    relus = [m for g in groups for m in g]
    sums = {id(m): 0.0 for m in relus}
    handles = []
    for m in relus:

        def hook(module: nn.Module, inputs: object, output: torch.Tensor) -> None:
            sums[id(module)] += float(zero_fraction_per_sample(output).sum())

        handles.append(m.register_forward_hook(hook))
    was_training = model.training
    model.train(mode == "train")
    try:
        with torch.no_grad():
            for start in range(0, len(x), batch_size):
                model(x[start : start + batch_size])
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    n = float(len(x))
    return [sum(sums[id(m)] / n for m in g) / len(g) for g in groups]


def adjustment_weights(sizes: Sequence[int]) -> list[float]:
    """Eq. 3: AdjW_l = log size(l) / log max_k size(k)."""
    top = math.log(max(sizes))
    if top <= 0:
        return [1.0] * len(sizes)
    return [math.log(s) / top for s in sizes]


def layer_scores(apoz: Sequence[float], adjw: Sequence[float]) -> np.ndarray:
    """Algorithm 1 line 11 before the gamma factor: s_l = 1 - A_l * AdjW_l."""
    return 1.0 - np.asarray(apoz, dtype=np.float64) * np.asarray(adjw, dtype=np.float64)


def clamp_rates(values: np.ndarray) -> tuple[float, ...]:
    """Algorithm 1 line 12: rates clamped to [0.01, 1]."""
    return tuple(float(v) for v in np.clip(values, MIN_RATE, 1.0))


class SearchError(ValueError):
    """No gamma reaches the target size within the tolerance."""


def search_paper(
    scores: np.ndarray,
    fraction: Callable[[tuple[float, ...]], float],
    target: float,
    eps: float,
    step: float = 0.01,
) -> tuple[float, ...]:
    """Algorithm 1: gamma = 0, xi, 2 xi, ...; rates = clamp(s * gamma); the first gamma with
    |target - fraction(rates)| <= eps wins (fractions of size(M)).

    The size grows with gamma (rates, and so channel counts, never shrink), so the first hit is the
    first grid point whose size reaches target - eps, found by bisection; it is a hit if its size is
    also <= target + eps. Where the paper's loop would never end, SearchError is raised.
    """
    scores = np.asarray(scores, dtype=np.float64)
    positive = scores[scores > 0]
    # beyond k_max every rate is clamped at 1 (or stays at 0.01 for a zero score): nothing changes
    k_max = int(math.ceil(1.0 / (step * float(positive.min())))) if len(positive) else 0

    def rates(k: int) -> tuple[float, ...]:
        return clamp_rates(scores * (k * step))

    lo, hi = 0, k_max
    if fraction(rates(hi)) < target - eps:
        raise SearchError(f"the largest model reaches {fraction(rates(hi)):.4f} < target {target} - {eps}")
    while lo < hi:
        mid = (lo + hi) // 2
        if fraction(rates(mid)) >= target - eps:
            hi = mid
        else:
            lo = mid + 1
    got = fraction(rates(lo))
    if abs(got - target) > eps:
        raise SearchError(
            f"no gamma step reaches target {target} within {eps}: gamma={lo * step:g} gives {got:.4f}, "
            "the step before falls short; raise search_epsilon or lower search_step"
        )
    return rates(lo)


def search_code(
    scores: np.ndarray, fraction: Callable[[tuple[float, ...]], float], target: float, tol: float = 0.05
) -> tuple[float, ...]:
    """The official code's search: gamma = 1..199, rates = clamp(s * 100 / gamma, 0.01, 1); the first
    gamma whose fraction lies in [target - tol, target + tol] (inclusive) wins; no hit raises.

    The size shrinks as gamma grows, so the first hit is the first gamma whose size is <= target + tol
    (bisection), a hit if it is also >= target - tol.

    Under ``int`` counting (``fraction`` from :func:`size_fraction` with ``rounding="int"``) a gamma may
    leave some layer int(C x rate) = 0 channels, and ``fraction`` raises :class:`ZeroWidthError` there.
    Rates never grow with gamma, so a layer at 0 stays at 0 for every larger gamma: if the code's loop
    meets such a gamma before a hit, whatever it ends with (a hit with 0 channels, or no hit) is no model
    this simulator builds. The bisection therefore treats a zero-channel gamma as reached, and the
    ZeroWidthError propagates when the gamma it lands on is one.
    """
    scores = np.asarray(scores, dtype=np.float64)

    def rates(g: int) -> tuple[float, ...]:
        return clamp_rates(scores * 100.0 / g)

    def reached(g: int) -> bool:
        try:
            return fraction(rates(g)) <= target + tol
        except ZeroWidthError:
            return True

    lo, hi = 1, 199
    if not reached(hi):
        raise SearchError(f"even gamma=199 gives {fraction(rates(hi)):.4f} > {target} + {tol}")
    while lo < hi:
        mid = (lo + hi) // 2
        if reached(mid):
            hi = mid
        else:
            lo = mid + 1
    got = fraction(rates(lo))
    if got < target - tol:
        raise SearchError(
            f"no gamma in 1..199 lands in [{target - tol}, {target + tol}] (gamma={lo}: {got:.4f})"
        )
    return rates(lo)


@lru_cache(maxsize=4096)
def param_count(
    recipe: ModelRecipe, rates: tuple[float, ...] | None, groups_only: bool, rounding: str = "floor"
) -> int:
    """Parameters of the submodel with ``rates`` per group, its channels rounded by ``rounding``
    (``fl.submodel.truncation``; ``int`` raises ZeroWidthError for a layer left with none), counted over all
    of it or only inside the layer groups (the official code's ``net.features``)."""
    spec = SubmodelSpec(layer_rates=rates, rounding=rounding)
    with torch.device("meta"):
        model = recipe.build(spec)
    if groups_only:
        return sum(group_param_counts(model, recipe.family))
    return sum(p.numel() for p in model.parameters())


def size_fraction(
    recipe: ModelRecipe, groups_only: bool, rounding: str = "floor"
) -> Callable[[tuple[float, ...]], float]:
    """fraction(rates) = size(M') / size(M) (paper: whole model, floor; code: layer groups only, int)."""
    full = param_count(recipe, None, groups_only, rounding)
    return lambda rates: param_count(recipe, rates, groups_only, rounding) / full


def pretrain(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    optimizer: str,
    seed: int,
) -> float:
    """Server-side pretraining with plain cross-entropy (a fresh optimizer per epoch, as the official
    code re-creates Adam every pretraining round); returns the last epoch's mean loss."""
    seed_torch(seed)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    last = float("nan")
    for _ in range(epochs):
        opt: torch.optim.Optimizer | PlainSGD
        if optimizer == "adam":
            opt = torch.optim.Adam(model.parameters(), lr=lr)
        else:
            opt = PlainSGD(model.parameters(), lr=lr)
        total, steps = 0.0, 0
        for batch in epoch_batches(torch.arange(len(x)), batch_size, gen):
            total += descend(opt, nn.functional.cross_entropy(model(x[batch]), y[batch]))
            steps += 1
        last = total / max(steps, 1)
    return last
