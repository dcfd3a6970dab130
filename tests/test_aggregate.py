"""HeteroFL-style aggregation on hand-computed tensors."""

from __future__ import annotations

import numpy as np
import torch

from iotfl_sim.algorithms.common import classifier_keys
from iotfl_sim.algorithms.heterofl import fix_levels_by_id
from iotfl_sim.fl.aggregate import Contribution, aggregate_nested
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec, shapes_of, slice_state


def _global():
    return {
        "hidden.weight": torch.full((4, 4), 9.0),
        "classifier.weight": torch.full((4, 4), 7.0),  # 4 classes x 4 hidden
        "classifier.bias": torch.full((4,), 5.0),
        "other.weight": torch.full((3,), 1.0),
    }


def _clients():
    # client 1 at rate 1 holds labels {0, 1}; client 2 at rate 0.5 holds labels {2, 3}
    c1 = {"hidden.weight": torch.full((4, 4), 2.0), "classifier.weight": torch.full((4, 4), 1.0), "classifier.bias": torch.full((4,), 1.0)}
    c2 = {"hidden.weight": torch.full((2, 2), 4.0), "classifier.weight": torch.full((4, 2), 3.0), "classifier.bias": torch.full((4,), 3.0)}
    return c1, c2


def test_heterofl_count_aggregation_with_label_restricted_rows():
    c1, c2 = _clients()
    new = aggregate_nested(
        _global(),
        [Contribution(c1, 1.0, np.array([0, 1])), Contribution(c2, 1.0, np.array([2, 3]))],
        classifier_keys=["classifier.weight", "classifier.bias"],
    )
    hidden = torch.full((4, 4), 2.0)
    hidden[:2, :2] = 3.0  # (2 + 4) / 2 where both clients hold the entry
    assert torch.equal(new["hidden.weight"], hidden)
    cls = torch.tensor([[1.0, 1, 1, 1], [1, 1, 1, 1], [3, 3, 7, 7], [3, 3, 7, 7]])
    assert torch.equal(new["classifier.weight"], cls)  # rows 2-3, cols 2-3: nobody -> old value 7
    assert torch.equal(new["classifier.bias"], torch.tensor([1.0, 1, 3, 3]))
    assert torch.equal(new["other.weight"], torch.ones(3))  # untouched tensor keeps its values


def test_without_label_restriction_rows_are_averaged():
    c1, c2 = _clients()
    new = aggregate_nested(_global(), [Contribution(c1, 1.0), Contribution(c2, 1.0)], classifier_keys=[])
    assert torch.equal(new["classifier.weight"][:, :2], torch.full((4, 2), 2.0))
    assert torch.equal(new["classifier.weight"][:, 2:], torch.full((4, 2), 1.0))


def test_data_size_weights():
    c1, c2 = _clients()
    new = aggregate_nested(_global(), [Contribution(c1, 1.0), Contribution(c2, 3.0)])
    assert new["hidden.weight"][0, 0].item() == (2.0 * 1 + 4.0 * 3) / 4
    assert new["hidden.weight"][3, 3].item() == 2.0


def test_whole_then_part_then_whole_counts_every_weight_where_it_landed():
    """The count stays one number while contributions cover the whole tensor and becomes a tensor at the first
    that covers part of it: weights 1 (whole), 2 (the 2 x 2 corner), 4 (whole), hand-averaged per entry."""
    g = {"w": torch.zeros(3, 3, dtype=torch.float64)}
    parts = [({"w": torch.full((3, 3), 1.0, dtype=torch.float64)}, 1.0),
             ({"w": torch.full((2, 2), 10.0, dtype=torch.float64)}, 2.0),
             ({"w": torch.full((3, 3), 100.0, dtype=torch.float64)}, 4.0)]
    kept = [st["w"].clone() for st, _ in parts]
    new = aggregate_nested(g, [Contribution(st, w) for st, w in parts])["w"]
    corner, rim = (1 * 1.0 + 2 * 10.0 + 4 * 100.0) / 7, (1 * 1.0 + 4 * 100.0) / 5
    assert torch.equal(new[:2, :2], torch.full((2, 2), corner, dtype=torch.float64))
    assert torch.equal(new[2], torch.full((3,), rim, dtype=torch.float64)) and torch.equal(new[:, 2], torch.full((3,), rim, dtype=torch.float64))
    assert all(torch.equal(st["w"], k) for (st, _), k in zip(parts, kept, strict=True))  # float64 states not scaled in place


def test_global_state_not_modified_and_real_submodels_nest():
    recipe = ModelRecipe("cnn_small", 10, 1, (8, 8))
    g = recipe.build(SubmodelSpec(1.0)).state_dict()
    before = {k: v.clone() for k, v in g.items()}
    half = slice_state(g, shapes_of(recipe.build(SubmodelSpec(0.5)).state_dict()))
    half = {k: v + 1.0 for k, v in half.items()}
    keys = classifier_keys(recipe, SubmodelSpec(1.0))
    assert set(keys) == {"classifier.weight", "classifier.bias"}
    new = aggregate_nested(g, [Contribution(half, 1.0, np.array([3]))], classifier_keys=keys)
    for k in g:
        assert torch.equal(g[k], before[k])
    w = new["classifier.weight"]
    n = half["classifier.weight"].shape[1]
    assert torch.equal(w[3, :n], before["classifier.weight"][3, :n] + 1.0)
    assert torch.equal(w[3, n:], before["classifier.weight"][3, n:])  # columns the submodel lacks: kept
    assert torch.equal(w[2], before["classifier.weight"][2])  # label 2 not held: row kept


def test_fix_mode_assigns_levels_by_id_with_leftovers_last():
    levels = fix_levels_by_id(13, [0.2, 0.8])
    assert list(levels[:2]) == [0, 0] and (levels[2:] == 1).all()
    levels = fix_levels_by_id(10, [0.5, 0.3, 0.2])
    assert list(levels) == [0] * 5 + [1] * 3 + [2] * 2


def test_rebase_moves_a_stale_slice_onto_the_current_model_by_its_weighted_delta():
    """By hand: base w = [1, 2, 3] (global), a device trained its 2-entry slice to [1.5, 1.0]: delta [0.5, -1.0].
    Meanwhile the global model moved to [10, 20, 30]; at weight 0.5 the rebased slice is [10.25, 19.5]."""
    from iotfl_sim.fl.aggregate import rebase

    base = {"w": torch.tensor([1.0, 2.0, 3.0]), "n": torch.tensor(4)}
    current = {"w": torch.tensor([10.0, 20.0, 30.0]), "n": torch.tensor(9)}
    trained = {"w": torch.tensor([1.5, 1.0]), "n": torch.tensor(5)}
    out = rebase(current, base, trained, weight=0.5)
    assert out["w"].tolist() == [10.25, 19.5]
    assert out["w"].dtype == torch.float32
    assert out["n"].item() == 5  # an integer counter is the device's own
    assert current["w"].tolist() == [10.0, 20.0, 30.0] and base["w"].tolist() == [1.0, 2.0, 3.0]


def test_rebase_of_a_fresh_update_at_weight_one_is_the_update():
    """base = current and weight 1: current + (trained - current) = trained, exactly for these values."""
    from iotfl_sim.fl.aggregate import rebase

    g = {"w": torch.tensor([[1.0, 2.0], [3.0, 4.0]])}
    trained = {"w": torch.tensor([[0.5]])}
    assert rebase(g, g, trained)["w"].tolist() == [[0.5]]
