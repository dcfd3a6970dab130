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
        count = torch.zeros_like(g, dtype=torch.float64)
        touched = False
        for c in contributions:
            t = c.state.get(key)
            if t is None:
                continue
            touched = True
            region = prefix_index(tuple(t.shape))
            if key in classifier_keys and c.label_rows is not None:
                rows = torch.as_tensor(c.label_rows, dtype=torch.long)
                rows = rows[rows < t.shape[0]]
                sub_total = total[region]
                sub_count = count[region]
                sub_total.index_add_(0, rows, t.index_select(0, rows).to(torch.float64), alpha=c.weight)
                sub_count.index_add_(0, rows, torch.ones_like(t.index_select(0, rows), dtype=torch.float64), alpha=c.weight)
            else:
                total[region] += c.weight * t.to(torch.float64)
                count[region] += c.weight
        if not touched:
            out[key] = g.clone()
            continue
        mask = count > 0
        new = g.clone()
        new[mask] = (total[mask] / count[mask]).to(g.dtype)
        out[key] = new
    return out
