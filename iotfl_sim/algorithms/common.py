"""Helpers shared by the methods: classifier keys, zero-width refusal, aggregation contributions."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from iotfl_sim.algorithms.base import (
    Update,
)
from iotfl_sim.fl.aggregate import Contribution
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec, ZeroWidthError
from iotfl_sim.scenario.loader import ScenarioError


def classifier_keys(recipe: ModelRecipe, spec: SubmodelSpec) -> tuple[str, ...]:
    """Names of the last Linear layer's tensors (the classifier, which keeps every class row)."""
    model = recipe.build(spec)
    last = None
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            last = name
    if last is None:
        return ()
    return tuple(k for k in model.state_dict() if k.rsplit(".", 1)[0] == last)


def refuse_zero_widths(recipe: ModelRecipe, specs: Sequence[tuple[SubmodelSpec, str]]) -> None:
    """Raise ScenarioError naming the option behind the first ``rounding="int"`` spec that would keep
    0 channels in some layer of ``recipe`` (``reference: code``: the official code would build such a
    layer with no channel; this simulator refuses it before the run rather than train another model).
    ``specs``: (spec, the scenario field it comes from)."""
    for spec, field in specs:
        try:
            with torch.device("meta"):  # the widths only: no weights allocated
                recipe.build(spec)
        except ZeroWidthError as e:
            raise ScenarioError(
                f"{field}: {e} of model.family {recipe.family}: reference: code keeps int(channels x rate) "
                "channels, as the official code, and refuses a layer with none; raise the rate or use "
                "reference: paper (at least one channel)"
            ) from None


def contributions(updates: Sequence[Update], weighting: str = "data", restrict_labels: bool = False) -> list[Contribution]:
    """One aggregation contribution per update, weighted by client data size (``data``) or uniformly
    (``count``), times the update's staleness weight (1 unless a semi_async round adds a late update); ``restrict_labels`` lets a client update only the classifier rows of labels it holds."""
    if weighting not in ("data", "count"):
        raise ValueError(f"weighting must be 'data' or 'count', got {weighting!r}")
    return [
        Contribution(
            u.state,
            (float(u.num_samples) if weighting == "data" else 1.0) * u.weight,
            u.label_set if restrict_labels else None,
        )
        for u in updates
    ]
