"""The check behind ``Strategy.checkpointed``: only declared attributes change while a method runs (used by
tests/test_resume.py on every method's run, and tested itself in tests/test_strategy_api.py)."""

from __future__ import annotations

import math

import numpy as np
import torch

from iotfl_sim.algorithms.base import ENGINE_SHARED
from iotfl_sim.output import codec


def _same(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and bool(torch.equal(a, b) or (a.isnan() & b.isnan()).all())
    if isinstance(a, np.ndarray):
        return a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return a == b


def assert_only_declared_changes(strategy, run) -> None:
    """Run ``run()``; every public attribute of ``strategy`` (and of the objects it holds) that changed must be
    named in its ``checkpointed``: a checkpoint saves exactly those, so one that changed but is not declared
    would come back from a resume with its set-up value."""
    before = codec.capture(strategy, shared=ENGINE_SHARED)
    run()
    after = codec.capture(strategy, shared=ENGINE_SHARED)
    changed = sorted(k for k in after if k not in before or not _same(before[k], after[k]))
    undeclared = [k for k in changed if k not in strategy.checkpointed]
    assert not undeclared, f"{strategy.name}: attributes change while it runs but are not in checkpointed: {undeclared}"
