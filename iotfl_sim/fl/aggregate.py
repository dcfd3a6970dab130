"""Per-parameter weighted averaging of nested submodels into a global model.

Each client adds its tensor into its own prefix region of the global tensor and adds its weight to a
count there; entries with a positive count become sum / count, entries no client touched keep their
old global value (HeteroFL's ``combine``; AdaptiveFL/FlexFL use data sizes as weights, HeteroFL and
ScaleFL count clients). Classifier rows can be restricted to the labels each client holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from iotfl_sim.fl.submodel import prefix_index


@dataclass(frozen=True)
class Contribution:
    state: Mapping[str, torch.Tensor]
    weight: float = 1.0
    label_rows: np.ndarray | None = None  # classifier rows this client may update (None: all it holds)


def aggregate_nested(
    global_state: Mapping[str, torch.Tensor],
    contributions: Sequence[Contribution],
    classifier_keys: Iterable[str] = (),
) -> dict[str, torch.Tensor]:
    """A new global state; ``global_state`` itself is not modified."""
    classifier_keys = set(classifier_keys)
    out: dict[str, torch.Tensor] = {}
    for key, g in global_state.items():
        if not torch.is_floating_point(g):
            out[key] = g.clone()
            continue
        total = torch.zeros_like(g, dtype=torch.float64)
        # Every entry's count is the sum of the weights that reached it, added in contribution order. While every
        # contribution so far covered the whole tensor that sum is one number (``uniform``): the tensor is made
        # only when a contribution covers part of it (a smaller submodel, label rows), from that number, so each
        # entry gets the same additions in the same order either way (FedAvg's 100 clients: a third of the ops).
        count: torch.Tensor | None = None
        uniform = 0.0
        touched = False
        for c in contributions:
            t = c.state.get(key)
            if t is None:
                continue
            touched = True
            rows = key in classifier_keys and c.label_rows is not None
            if t.shape == g.shape and not rows:
                total += t.to(torch.float64, copy=True).mul_(c.weight)  # the copy: a float64 t is the client's own
                if count is None:
                    uniform += c.weight
                else:
                    count += c.weight
                continue
            if count is None:
                count = torch.full_like(g, uniform, dtype=torch.float64)
            region = prefix_index(tuple(t.shape))
            if rows:
                picked = torch.as_tensor(c.label_rows, dtype=torch.long)
                picked = picked[picked < t.shape[0]]
                total[region].index_add_(0, picked, t.index_select(0, picked).to(torch.float64), alpha=c.weight)
                count[region].index_add_(0, picked, torch.ones_like(t.index_select(0, picked), dtype=torch.float64), alpha=c.weight)
            else:
                total[region] += c.weight * t.to(torch.float64)
                count[region] += c.weight
        if not touched:
            out[key] = g.clone()
            continue
        if count is None:
            count = torch.full_like(g, uniform, dtype=torch.float64)
        mask = count > 0
        new = g.clone()
        new[mask] = (total[mask] / count[mask]).to(g.dtype)
        out[key] = new
    return out


def rebase(
    current: Mapping[str, torch.Tensor],
    base: Mapping[str, torch.Tensor],
    trained: Mapping[str, torch.Tensor],
    weight: float = 1.0,
) -> dict[str, torch.Tensor]:
    """A submodel trained from ``base`` (an older global model, or its slice) moved onto ``current``: each floating
    tensor becomes current's leading slice of its shape plus ``weight`` x (trained - base's slice), in float64 and
    rounded once, FedBuff's weighted stale delta applied to the model of now. Integer tensors (BatchNorm's counters)
    keep ``trained``'s values. Only ``trained``'s keys; none of the arguments is modified."""
    out: dict[str, torch.Tensor] = {}
    for key, t in trained.items():
        if not torch.is_floating_point(t):
            out[key] = t
            continue
        region = prefix_index(tuple(t.shape))
        delta = t.to(torch.float64) - base[key][region].to(torch.float64)
        out[key] = (current[key][region].to(torch.float64) + weight * delta).to(t.dtype)
    return out
