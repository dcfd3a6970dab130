"""The public Strategy API: every registered method through the engine; what a method declares for checkpoints
(``assert_only_declared_changes``, applied to every method's run in tests/test_resume.py)."""

from __future__ import annotations

import pytest
import torch
from conftest import base_scenario
from declared_state import assert_only_declared_changes
from test_resume import METHODS

from iotfl_sim import methods
from iotfl_sim.scenario.loader import load_scenario, resolve_groups
from iotfl_sim.scenario.resolved import ResolvedScenario
from iotfl_sim.sim.setup import build_simulation


def test_an_undeclared_change_is_caught():
    class Tally:
        name, checkpointed = "tally", ("state",)

        def __init__(self):
            self.state, self.count = torch.zeros(2), 0

    def bump():
        t.state += 1
        t.count += 1

    t = Tally()
    with pytest.raises(AssertionError, match=r"not in checkpointed: \['count'\]"):
        assert_only_declared_changes(t, bump)
    t.checkpointed = ("state", "count")
    assert_only_declared_changes(t, bump)


def _scenario(tmp_path, over: dict, rounds: int = 3):
    data = base_scenario(rounds=rounds, **{k: v for k, v in over.items() if k != "local"})
    data["server"] = {**data.get("server", {}), "bn_calibration_samples": 64}
    path = tmp_path / "s.yaml"
    import yaml

    path.write_text(yaml.safe_dump(data))
    return load_scenario(path)


def test_every_registered_method_runs_a_system_only_round(tmp_path):
    """Each name the registry knows has a case in test_resume's METHODS (so a new method cannot skip the
    resume and golden tests), validates with it, and runs one system-only round through the engine."""
    cases = {m["algorithm"]["name"]: m for m in METHODS.values()}
    names = methods.method_names()
    assert set(names) <= set(cases), sorted(set(names) - set(cases))
    for name in names:
        sc = _scenario(tmp_path, {**cases[name], "numerics": "none"}, rounds=1)
        sim = build_simulation(ResolvedScenario(sc, resolve_groups(sc)))
        sim.run()
        assert len(sim.rows) == 1 and sim.rows[0]["selected"] > 0, name
        assert type(sim.strategy) is methods.method(name).strategy_class()
