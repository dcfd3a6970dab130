"""The public Strategy API: declared checkpoint state, the registry, and every registered method through it."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import base_scenario
from test_resume import METHODS

from iotfl_sim.output import codec
from iotfl_sim.scenario.loader import load_scenario, resolve_groups
from iotfl_sim.sim.engine import Simulation


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


def _scenario(tmp_path, over: dict, rounds: int = 3):
    data = base_scenario(rounds=rounds, **{k: v for k, v in over.items() if k != "local"})
    data["server"] = {"bn_calibration_samples": 64}
    path = tmp_path / "s.yaml"
    import yaml

    path.write_text(yaml.safe_dump(data))
    return load_scenario(path)


@pytest.mark.parametrize("variant", sorted(METHODS))
def test_only_declared_attributes_change_while_a_method_runs(tmp_path, variant):
    """Every public attribute of a strategy (and of the objects it holds) that changes after ``setup`` is
    named in its ``checkpointed``: a checkpoint saves exactly those, so one that changed but is not declared
    would come back from a resume with its set-up value."""
    sc = _scenario(tmp_path, METHODS[variant])
    sim = Simulation(sc, resolve_groups(sc))
    strategy = sim.strategy
    before = codec.capture(strategy)
    sim.run()
    after = codec.capture(strategy)
    changed = sorted(k for k in after if k not in before or not _same(before[k], after[k]))
    undeclared = [k for k in changed if k not in strategy.checkpointed]
    assert not undeclared, f"{variant}: attributes change while it runs but are not in checkpointed: {undeclared}"
    assert set(strategy.checkpointed) <= set(vars(strategy)) | {"wire"}, strategy.checkpointed
