"""Evaluation with static BatchNorm (HeteroFL's sBN).

Models train without running statistics. Before testing, a copy with tracking is given the
weights and a no-grad, train-mode pass over training data with momentum=None (a cumulative
average) computes the statistics used for testing only. The Scaler is kept in eval mode (identity)
during that pass so the statistics match what the layer sees at test time; for the global model the
Scaler ratio is 1 and this is exactly HeteroFL's procedure.

Image models evaluate in ``channels_last`` layout: measured on a 2-core x86 host (oneDNN), forward passes of
the `conv` and `resnet18` families ran 1.4-1.7x faster than in NCHW, whatever the thread count, and batches of
about 100 beat batches of 1,000 (activations stay in cache). Results are the same whichever executor scores.
"""

from __future__ import annotations

from functools import lru_cache

import torch
from torch import nn

from iotfl_sim.fl.objectives import final_logits
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec

State = dict[str, torch.Tensor]


@lru_cache(maxsize=64)
def eval_skeleton(recipe: ModelRecipe, spec: SubmodelSpec) -> nn.Module:
    # only 4-d (convolution) weights change layout; load_state_dict copies into them in place, so it stays
    return recipe.build(spec, track_bn=True).to(memory_format=torch.channels_last)


def _layout(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous(memory_format=torch.channels_last) if x.dim() == 4 else x


def _norm_layers(model: nn.Module) -> list[nn.modules.batchnorm._BatchNorm]:
    return [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]


@torch.inference_mode()
def calibrate_bn(model: nn.Module, x: torch.Tensor, batch_size: int) -> None:
    norms = _norm_layers(model)
    if not norms:
        return
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
    model.eval()
    for m in norms:
        m.train()
    for start in range(0, len(x), batch_size):
        model(_layout(x[start : start + batch_size]))
    model.eval()


@torch.inference_mode()
def batch_scores(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int) -> list[tuple[int, float]]:
    """(correct, summed cross-entropy) per batch of ``model`` in eval mode (a multi-exit model: its last exit).

    Executors score slices of the test set that start on batch boundaries and add the per-batch figures
    in batch order (``combine``), so the totals are the same bits however the batches were shared out.
    """
    model.eval()
    out = []
    for start in range(0, len(x), batch_size):
        logits = final_logits(model(_layout(x[start : start + batch_size])))
        yb = y[start : start + batch_size]
        out.append((int((logits.argmax(1) == yb).sum()), float(nn.functional.cross_entropy(logits, yb, reduction="sum"))))
    return out


def combine(scores: list[tuple[int, float]], n: int) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) from per-batch figures, summed in batch order."""
    correct, loss = 0, 0.0
    for c, s in scores:
        correct += c
        loss += s
    n = max(n, 1)
    return correct / n, loss / n


def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) of ``model`` in eval mode over all of ``x``."""
    return combine(batch_scores(model, x, y, batch_size), len(x))


def prepared(recipe: ModelRecipe, spec: SubmodelSpec, state: State) -> nn.Module:
    """The cached evaluation skeleton of ``spec`` (BN with running statistics) holding ``state``."""
    model = eval_skeleton(recipe, spec)
    result = model.load_state_dict(state, strict=False)
    if result.unexpected_keys:
        raise KeyError(f"state has tensors the model lacks: {result.unexpected_keys}")
    return model


def bn_statistics(model: nn.Module) -> State:
    """The running statistics static-BN calibration computed (what scoring needs besides the weights)."""
    return {k: v.clone() for k, v in model.state_dict().items() if "running_" in k or "num_batches_tracked" in k}


def evaluate(
    recipe: ModelRecipe,
    spec: SubmodelSpec,
    state: State,
    calib_x: torch.Tensor,
    test_x: torch.Tensor,
    test_y: torch.Tensor,
    batch_size: int,
) -> tuple[float, float]:
    model = prepared(recipe, spec, state)
    calibrate_bn(model, calib_x, batch_size)
    return accuracy(model, test_x, test_y, batch_size)


# -- several submodels at once, sharing a common prefix ------------------------------------------------------
#
# AdaptiveFL's pool keeps every channel of the layer groups below a model's start layer, so up to 7 evaluated
# models hold the full model's weights in their first (most expensive, full-resolution) conv layers. Their
# ``features`` prefix is then computed once per batch and branched, in calibration (the train-mode BN statistics
# of a shared layer see the same inputs through the same weights, so they are the same numbers) and in scoring.
# Every model still runs exactly its own ops on exactly its own inputs: the scores are the same bits as one
# model at a time.


def _config(module: nn.Module) -> tuple:
    """What makes two modules compute the same function besides their tensors: types and plain attributes."""
    return tuple(
        (type(m).__name__, tuple(sorted((k, v) for k, v in vars(m).items() if isinstance(v, int | float | str | bool | tuple))))
        for m in module.modules()
    )


def shared_layers(a: nn.Module, b: nn.Module, state_a: State, state_b: State) -> int:
    """How many leading ``features`` layers models ``a`` and ``b`` (holding ``state_a``/``state_b``) share."""
    fa, fb = getattr(a, "features", None), getattr(b, "features", None)
    if not (isinstance(fa, nn.Sequential) and isinstance(fb, nn.Sequential)):
        return 0
    if not (hasattr(a, "forward_head") and hasattr(b, "forward_head")):
        return 0
    n = 0
    for j, (ma, mb) in enumerate(zip(fa, fb, strict=False)):
        if _config(ma) != _config(mb):
            break
        names = [f"features.{j}.{k}" for k, _ in ma.named_parameters()]
        if not all(
            k in state_a and k in state_b and state_a[k].shape == state_b[k].shape and torch.equal(state_a[k], state_b[k])
            for k in names
        ):
            break
        n += 1
    return n


def _tree_forward(models: list[nn.Module], idx: list[int], j: int, h: torch.Tensor, share: list[list[int]],
                  out: dict[int, torch.Tensor], ran: dict[tuple[int, int], int]) -> None:
    """Outputs of models ``idx`` into ``out``; they share ``features[:j]``, whose output is ``h`` (j = 0: the input)."""
    rest = list(idx)
    if j > 0:
        for i in [i for i in rest if len(models[i].features) == j]:  # every layer shared: only the head is its own
            out[i] = models[i].forward_head(h)
            rest.remove(i)
    while rest:
        a = rest[0]
        group = [b for b in rest if b == a or share[a][b] > j]
        rest = [b for b in rest if b not in group]
        model = models[a]
        if len(group) == 1:
            out[a] = model(h) if j == 0 else model.forward_head(model.features[j:](h))
            continue
        for b in group:
            ran[(b, j)] = a
        _tree_forward(models, group, j + 1, model.features[j](h), share, out, ran)


def _share_matrix(models: list[nn.Module], states: list[State]) -> list[list[int]]:
    n = len(models)
    share = [[0] * n for _ in range(n)]
    for a in range(n):
        for b in range(a + 1, n):
            share[a][b] = share[b][a] = shared_layers(models[a], models[b], states[a], states[b])
    return share


@torch.inference_mode()
def calibrate_bn_group(models: list[nn.Module], states: list[State], x: torch.Tensor, batch_size: int) -> None:
    """``calibrate_bn`` of every model, the shared prefix run once per batch."""
    if not any(_norm_layers(m) for m in models):
        return
    for model in models:
        for m in _norm_layers(model):
            m.reset_running_stats()
            m.momentum = None
        model.eval()
        for m in _norm_layers(model):
            m.train()
    share = _share_matrix(models, states)
    ran: dict[tuple[int, int], int] = {}
    for start in range(0, len(x), batch_size):
        _tree_forward(models, list(range(len(models))), 0, _layout(x[start : start + batch_size]), share, {}, ran)
    for (b, j), a in ran.items():
        if a != b:  # the layer ran once, as model a's: model b's copy takes its statistics
            models[b].features[j].load_state_dict(models[a].features[j].state_dict())
    for model in models:
        model.eval()


@torch.inference_mode()
def batch_scores_group(
    models: list[nn.Module], states: list[State], x: torch.Tensor, y: torch.Tensor, batch_size: int
) -> list[list[tuple[int, float]]]:
    """``batch_scores`` of every model (states include the calibrated statistics), the shared prefix run once."""
    for model in models:
        model.eval()
    share = _share_matrix(models, states)
    scores: list[list[tuple[int, float]]] = [[] for _ in models]
    for start in range(0, len(x), batch_size):
        out: dict[int, torch.Tensor] = {}
        _tree_forward(models, list(range(len(models))), 0, _layout(x[start : start + batch_size]), share, out, {})
        yb = y[start : start + batch_size]
        for i, o in out.items():
            logits = final_logits(o)
            scores[i].append((int((logits.argmax(1) == yb).sum()), float(nn.functional.cross_entropy(logits, yb, reduction="sum"))))
    return scores
