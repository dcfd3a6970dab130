"""One copy of the weights per distinct slice a round sends, not one per job."""

from __future__ import annotations

import pytest
import torch
from conftest import base_scenario

from iotfl_sim.cli import main
from iotfl_sim.exec.inline import InlineExecutor
from iotfl_sim.fl.submodel import SharedCopies, shapes_of, slice_state


def test_the_same_views_get_one_copy_and_other_views_their_own():
    full = {"w": torch.arange(16.0).reshape(4, 4), "b": torch.arange(4.0)}
    half = {"w": (2, 2), "b": (2,)}
    copies = SharedCopies()
    a = copies.of(slice_state(full, shapes_of(full)))
    assert copies.of(slice_state(full, shapes_of(full))) is a  # new views of the same memory: the same copy
    h = copies.of(slice_state(full, half))
    assert h is not a and torch.equal(h["w"], torch.tensor([[0.0, 1.0], [4.0, 5.0]]))
    assert h["w"].is_contiguous()  # compact: no stride of the global tensor
    same_values = {k: v.clone() for k, v in full.items()}
    assert copies.of(same_values) is not a  # equal values in other memory: not assumed to stay equal
    full["w"] += 100.0  # the global moves on after dispatch: the jobs' copies keep what was sent
    assert torch.equal(a["w"], torch.arange(16.0).reshape(4, 4)) and a["w"].data_ptr() != full["w"].data_ptr()


def test_memory_freed_and_reused_by_other_values_is_not_mistaken_for_the_same_views():
    copies = SharedCopies()
    first = copies.of({"w": torch.full((1000,), 1.0)})  # the only reference to these views is the one kept inside
    second = copies.of({"w": torch.full((1000,), 2.0)})  # would reuse the freed address if it were not kept
    assert torch.equal(first["w"], torch.full((1000,), 1.0)) and torch.equal(second["w"], torch.full((1000,), 2.0))


@pytest.mark.parametrize(("algorithm", "copies_per_round"), [({"name": "fedavg"}, 1), ({"name": "heterofl", "mode": "fix", "proportions": "a1-b1"}, 2)])
def test_a_round_holds_one_weight_copy_per_submodel_it_sends(tmp_path, write_scenario, monkeypatch, algorithm, copies_per_round):
    rounds: list[list] = []
    train = InlineExecutor.run

    def record(self, jobs):
        rounds.append(jobs)
        return train(self, jobs)

    monkeypatch.setattr(InlineExecutor, "run", record)
    data = base_scenario(algorithm=algorithm, clients_per_round=6, executor={"kind": "inline"})
    assert main(["run", str(write_scenario(data)), "--out", str(tmp_path / "o"), "--quiet"]) == 0
    assert len(rounds) == 2
    for jobs in rounds:
        assert len(jobs) == 6
        distinct = {id(j.weights) for j in jobs}
        assert len(distinct) == copies_per_round
        by_spec = {}
        for j in jobs:  # jobs of one submodel share its copy
            assert by_spec.setdefault(j.spec, j.weights) is j.weights
