"""Evaluation with static BatchNorm (HeteroFL's sBN).

Models train without running statistics. Before testing, a copy with tracking is given the
weights and a no-grad, train-mode pass over training data with momentum=None (a cumulative
average) computes the statistics used for testing only. The Scaler is kept in eval mode (identity)
during that pass so the statistics match what the layer sees at test time; for the global model the
Scaler ratio is 1 and this is exactly HeteroFL's procedure.
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
def _eval_skeleton(recipe: ModelRecipe, spec: SubmodelSpec) -> nn.Module:
    return recipe.build(spec, track_bn=True)


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
        model(x[start : start + batch_size])
    model.eval()


@torch.inference_mode()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) of ``model`` in eval mode (a multi-exit model: its last exit)."""
    model.eval()
    correct, loss = 0, 0.0
    for start in range(0, len(x), batch_size):
        logits = final_logits(model(x[start : start + batch_size]))
        yb = y[start : start + batch_size]
        correct += int((logits.argmax(1) == yb).sum())
        loss += float(nn.functional.cross_entropy(logits, yb, reduction="sum"))
    n = max(len(x), 1)
    return correct / n, loss / n


def evaluate(
    recipe: ModelRecipe,
    spec: SubmodelSpec,
    state: State,
    calib_x: torch.Tensor,
    test_x: torch.Tensor,
    test_y: torch.Tensor,
    batch_size: int,
) -> tuple[float, float]:
    model = _eval_skeleton(recipe, spec)
    result = model.load_state_dict(state, strict=False)
    if result.unexpected_keys:
        raise KeyError(f"state has tensors the model lacks: {result.unexpected_keys}")
    calibrate_bn(model, calib_x, batch_size)
    return accuracy(model, test_x, test_y, batch_size)
