"""Images train and evaluate in channels_last (fl/layout.py): the layout is applied, never leaks out of a worker,
and changes nothing but rounding."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import iotfl_sim.fl.train as train_module
from iotfl_sim.core.catalog import MODEL_FAMILIES
from iotfl_sim.fl.layout import model_layout
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec
from iotfl_sim.fl.train import TrainJob, train_local

FULL = SubmodelSpec()


def _job(recipe: ModelRecipe, dtype: torch.dtype, spec: SubmodelSpec = FULL) -> TrainJob:
    torch.manual_seed(3)
    weights = {k: v.to(dtype) if v.is_floating_point() else v for k, v in recipe.build(spec).state_dict().items()}
    return TrainJob(key=0, recipe=recipe, spec=spec, weights=weights, indices=np.arange(40), epochs=2,
                    batch_size=8, lr=0.05, momentum=0.9, weight_decay=5e-4, clip_grad_norm=1.0, label_mask=None, seed=5)


def _data(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return torch.randn(40, 3, 12, 12, generator=gen, dtype=dtype), torch.randint(0, 10, (40,), generator=gen)


@pytest.mark.parametrize(("family", "rate"), [("conv", 1.0), ("resnet18", 0.25)])
def test_channels_last_training_is_nchw_training_up_to_rounding(family: str, rate: float, monkeypatch) -> None:
    """In float64 the two layouts agree to ~1e-12 after 10 steps with BN, momentum, decay and clipping; a layout
    that permuted channels wrongly would differ by O(1)."""
    recipe, spec = ModelRecipe(family, 10, 3, (12, 12)), SubmodelSpec(rate)
    x, y = _data(torch.float64)
    fast = train_local(recipe.build(spec).double(), _job(recipe, torch.float64, spec), x, y)
    monkeypatch.setattr(train_module, "model_layout", lambda m: m)
    monkeypatch.setattr(train_module, "batch_layout", lambda b: b)
    plain = train_local(recipe.build(spec).double(), _job(recipe, torch.float64, spec), x, y)
    assert fast.state.keys() == plain.state.keys()
    for k in fast.state:
        assert torch.allclose(fast.state[k], plain.state[k], rtol=0, atol=1e-10), k
    assert abs(fast.loss - plain.loss) < 1e-10


def test_the_skeleton_trains_in_channels_last_and_the_state_leaves_contiguous() -> None:
    recipe = ModelRecipe("conv", 10, 3, (12, 12))
    x, y = _data(torch.float32)
    skeleton = recipe.build(SubmodelSpec())
    result = train_local(skeleton, _job(recipe, torch.float32), x, y)
    convs = [p for p in skeleton.parameters() if p.dim() == 4]
    assert convs and all(p.is_contiguous(memory_format=torch.channels_last) and not p.is_contiguous() for p in convs)
    assert all(v.is_contiguous() for v in result.state.values())


@pytest.mark.parametrize("family", MODEL_FAMILIES)
def test_laying_out_a_laid_out_model_changes_nothing(family: str) -> None:
    """train_local lays out a reused skeleton at its first job only (fl/train.py): that is the same as laying it
    out before every job only if a second ``model_layout`` keeps every tensor's strides and storage."""
    sensor = family in {"mlp", "harwild"}  # HAR's 9 x 128 windows; the others take 32 x 32 RGB images
    recipe = ModelRecipe(family, 10, 1, (9, 128)) if sensor else ModelRecipe(family, 10, 3, (32, 32))
    model = model_layout(recipe.build(SubmodelSpec(0.5)))
    before = [(k, t.stride(), t.data_ptr()) for k, t in model.state_dict(keep_vars=True).items()]
    after = [(k, t.stride(), t.data_ptr()) for k, t in model_layout(model).state_dict(keep_vars=True).items()]
    assert before == after
    assert sensor or any(t.dim() == 4 and not t.is_contiguous() for t in model.state_dict().values())
