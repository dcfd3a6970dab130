"""A round's client updates do not outlive their aggregation: no ``Update`` (each holds a trained client's whole
state) is alive while the global model is evaluated or while the next round trains. Kept, the last round's
updates held a second fleet-round of model copies through both (62 MB on the peers ``conv`` job)."""

from __future__ import annotations

import gc

import pytest
import yaml
from conftest import base_scenario
from test_hierarchy import gatewayed

from iotfl_sim.algorithms.base import Update
from iotfl_sim.scenario.loader import load_scenario, resolve_groups
from iotfl_sim.scenario.resolved import ResolvedScenario
from iotfl_sim.sim.learning import Learning
from iotfl_sim.sim.setup import build_simulation


def _live_updates() -> int:
    gc.collect()
    return sum(type(o) is Update for o in gc.get_objects())  # type(): isinstance would poke lazy module proxies


def _small(data: dict) -> dict:
    """256 train and 120 test samples: what is alive does not depend on how many samples a device holds."""
    data["data"].update(train_samples=256, test_samples=120)
    return data


@pytest.mark.parametrize(
    "data",
    [
        # two rounds: round 1's updates would be alive through its evaluation and round 2's training
        _small(base_scenario(rounds=2)),
        _small(base_scenario(rounds=3, algorithm={"name": "fedasync"}, server={"mode": "async"})),
        _small(gatewayed(base_scenario(rounds=2, clients_per_round=2), per_gateway=4, gateway_rounds=2)),
    ],
    ids=["synchronous", "async", "hierarchical"],
)
def test_no_update_is_alive_during_evaluation_or_the_next_training(monkeypatch, data):
    seen: dict[str, list[int]] = {"evaluate": [], "train": [], "trained": []}
    evaluate, train = Learning.start_evaluation, Learning.train_tasks

    def counting_evaluate(self, overlap=False):
        seen["evaluate"].append(_live_updates())
        return evaluate(self, overlap)

    def counting_train(self, tasks):
        seen["train"].append(_live_updates())
        updates = train(self, tasks)
        seen["trained"].append(len(updates))
        return updates

    monkeypatch.setattr(Learning, "start_evaluation", counting_evaluate)
    monkeypatch.setattr(Learning, "train_tasks", counting_train)
    sc = load_scenario(text=yaml.safe_dump(data))
    build_simulation(ResolvedScenario(sc, resolve_groups(sc))).run()
    assert len(seen["evaluate"]) >= 2 and len(seen["train"]) >= 2 and all(seen["trained"])  # the counts mean something
    assert seen["evaluate"] == [0] * len(seen["evaluate"]) and seen["train"] == [0] * len(seen["train"])
