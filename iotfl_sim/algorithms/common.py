"""Helpers shared by the methods: classifier keys, zero-width refusal, aggregation contributions."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import nn

from iotfl_sim.algorithms.base import (
    Update,
)
from iotfl_sim.core.errors import ScenarioError
from iotfl_sim.fl.aggregate import Contribution
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec, ZeroWidthError


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


RAISE_THE_RATE = "raise the rate"


@contextmanager
def zero_widths_refused(recipe: ModelRecipe, field: str, fix: str = RAISE_THE_RATE) -> Iterator[None]:
    """Turn a :class:`ZeroWidthError` raised inside the block (a ``rounding="int"`` spec keeping 0 channels in
    some layer of ``recipe``: ``reference: code``, where the official code would build such a layer with no
    channel) into one ScenarioError naming ``field`` (the scenario option behind the rate), the rate, the layer
    and ``fix``; this simulator refuses the model before the run rather than train another one."""
    try:
        yield
    except ZeroWidthError as e:
        raise ScenarioError(
            f"{field}: {e} of model.family {recipe.family}: reference: code keeps int(channels x rate) "
            f"channels, as the official code, and refuses a layer with none; {fix} or use "
            "reference: paper (at least one channel)"
        ) from None


def refuse_zero_widths(recipe: ModelRecipe, specs: Sequence[tuple[SubmodelSpec, str]]) -> None:
    """Raise ScenarioError (:func:`zero_widths_refused`) for the first spec that keeps 0 channels in some
    layer of ``recipe``. ``specs``: (spec, the scenario field it comes from)."""
    for spec, field in specs:
        with zero_widths_refused(recipe, field), torch.device("meta"):  # the widths only: no weights allocated
            recipe.build(spec)


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
