"""train_local's set-up for a reused skeleton (fl/train.py): weights copied in place of ``load_state_dict``, the
layout applied at the first job only; the same errors and the same bits as a fresh model every job."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec
from iotfl_sim.fl.train import TrainJob, load_weights, train_local

RECIPE = ModelRecipe("cnn_small", 10, 1, (12, 12), norm="bn")


def _weights(seed: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    return RECIPE.build(SubmodelSpec()).state_dict()


def _job(weights: dict[str, torch.Tensor], seed: int) -> TrainJob:
    return TrainJob(key=0, recipe=RECIPE, spec=SubmodelSpec(), weights=weights, indices=np.arange(seed, seed + 23),
                    epochs=2, batch_size=5, lr=0.05, momentum=0.9, weight_decay=5e-4, clip_grad_norm=1.0,
                    label_mask=None, seed=seed)


def test_loading_copies_every_tensor_into_the_model_keeping_its_tensors() -> None:
    model = RECIPE.build(SubmodelSpec())
    params = list(model.parameters())
    weights = _weights(1)
    slots = load_weights(model, weights)
    assert list(model.parameters()) == params  # the same Parameter objects, written in place
    assert all(s is t for s, t in zip(slots.values(), model.state_dict(keep_vars=True).values(), strict=True))
    for k, v in model.state_dict().items():
        assert torch.equal(v, weights[k]) and v.data_ptr() != weights[k].data_ptr(), k


def test_a_missing_name_or_a_shape_that_would_broadcast_is_refused_as_load_state_dict_refuses_it() -> None:
    model = RECIPE.build(SubmodelSpec())
    weights = _weights(1)
    missing = dict(list(weights.items())[:-1])
    with pytest.raises(RuntimeError, match="Missing key"):
        load_weights(model, missing)
    name = next(k for k, v in weights.items() if v.dim() == 1 and len(v) > 1)
    narrow = {**weights, name: weights[name][:1]}  # copy_ would broadcast one value over the whole tensor
    with pytest.raises(RuntimeError, match="size mismatch"):
        load_weights(model, narrow)


def test_a_skeleton_reused_after_other_jobs_trains_the_bits_of_a_fresh_one() -> None:
    x = torch.randn(60, 1, 12, 12, generator=torch.Generator().manual_seed(0))
    y = torch.randint(0, 10, (60,), generator=torch.Generator().manual_seed(1))
    skeleton = RECIPE.build(SubmodelSpec())
    train_local(skeleton, _job(_weights(2), 7), x, y)  # momentum, gradients and BN statistics of another job
    reused = train_local(skeleton, _job(_weights(3), 11), x, y)
    fresh = train_local(RECIPE.build(SubmodelSpec()), _job(_weights(3), 11), x, y)
    assert reused.loss == fresh.loss
    assert all(torch.equal(reused.state[k], fresh.state[k]) for k in fresh.state)


def test_a_partial_load_fills_the_names_given_and_leaves_the_rest_but_refuses_a_name_the_model_lacks() -> None:
    model = RECIPE.build(SubmodelSpec(), track_bn=True)
    kept = {k: v.clone() for k, v in model.state_dict().items() if "running" in k}
    assert kept  # the BatchNorm statistics evaluation's states leave out
    weights = {k: v for k, v in _weights(1).items() if k in model.state_dict() and k not in kept}
    load_weights(model, dict(reversed(list(weights.items()))), partial=True)  # any order: copied by name
    state = model.state_dict()
    assert all(torch.equal(state[k], v) for k, v in weights.items())
    assert all(torch.equal(state[k], v) for k, v in kept.items())
    with pytest.raises(KeyError, match="lacks"):
        load_weights(model, {**weights, "extra.weight": torch.zeros(1)}, partial=True)
    whole = _weights(2)  # a whole state with two tensors of one shape in each other's places: copied by name too
    names = list(whole)
    i, j = next((i, j) for i in range(len(names)) for j in range(i + 1, len(names)) if whole[names[i]].shape == whole[names[j]].shape)
    names[i], names[j] = names[j], names[i]
    plain = RECIPE.build(SubmodelSpec())
    load_weights(plain, {k: whole[k] for k in names})
    assert all(torch.equal(v, whole[k]) for k, v in plain.state_dict().items())
