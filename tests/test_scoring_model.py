"""Scoring runs a twin of each model: every ConvUnit's BatchNorm folded into its convolution where it can be, its
ReLU in place; the same function, no random numbers drawn, always the model's current tensors."""

from __future__ import annotations

import torch
from torch import nn

from iotfl_sim.fl.evaluate import batch_scores, eval_skeleton
from iotfl_sim.fl.layout import batch_layout, model_layout
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.scoring_model import foldable_units, scoring_model
from iotfl_sim.fl.submodel import SubmodelSpec


def _with_statistics(recipe: ModelRecipe, spec: SubmodelSpec, seed: int) -> nn.Module:
    """A fresh evaluation model whose BatchNorms hold far-from-identity statistics and affine parameters."""
    g = torch.Generator().manual_seed(seed)
    model = recipe.build(spec, track_bn=True).eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.num_features, generator=g))
                m.running_var.copy_(torch.rand(m.num_features, generator=g) * 3 + 0.1)
                m.weight.copy_(torch.randn(m.num_features, generator=g))
                m.bias.copy_(torch.randn(m.num_features, generator=g))
    return model


def test_the_folded_model_computes_the_same_function():
    x = torch.randn(12, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    for family, rate in [("conv", 1.0), ("conv", 0.25), ("cnn_small", 0.5)]:
        recipe, spec = ModelRecipe(family, 10, 1, (28, 28)), SubmodelSpec(rate)
        model = _with_statistics(recipe, spec, 1)
        twin = scoring_model(model)
        assert twin is not model
        assert not any(isinstance(m, nn.BatchNorm2d) for m in twin.modules())  # every unit folded: conv families
        with torch.inference_mode():
            want, got = model(x), twin(x)
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-4), (family, rate, (got - want).abs().max())
        assert want.abs().max() > 0.1  # a non-trivial output


def test_the_twin_draws_no_random_numbers_and_is_refilled_at_every_call():
    recipe, spec = ModelRecipe("cnn_small", 10, 1, (8, 8)), SubmodelSpec(1.0)
    model = _with_statistics(recipe, spec, 2)
    x = torch.randn(5, 1, 8, 8, generator=torch.Generator().manual_seed(3))
    before = torch.get_rng_state()
    first = scoring_model(model)
    assert torch.equal(torch.get_rng_state(), before)
    other = _with_statistics(recipe, spec, 4)
    model.load_state_dict(other.state_dict())  # the skeleton now holds another model's tensors
    again = scoring_model(model)
    assert again is first  # built once per model
    with torch.inference_mode():
        assert torch.allclose(again(x), other(x), rtol=1e-4, atol=1e-4)


def test_units_that_cannot_be_folded_keep_their_norm_and_score_the_same_bits():
    x = torch.randn(6, 1, 28, 28, generator=torch.Generator().manual_seed(7))
    for norm in ("none", "ln"):  # no BatchNorm to fold: only the ReLUs change, in place, so the very same bits
        torch.manual_seed(8)
        model = model_layout(ModelRecipe("conv", 10, 1, (28, 28), norm=norm).build(SubmodelSpec(1.0), track_bn=True))
        model.eval()  # in the layout evaluation holds it (the twin's), so only the ReLUs differ
        twin = scoring_model(model)
        assert foldable_units(model) == [] and twin is not model
        relus = [m for m in twin.modules() if isinstance(m, nn.ReLU)]
        assert relus and all(m.inplace for m in relus)
        assert not any(m.inplace for m in model.modules() if isinstance(m, nn.ReLU))  # training keeps its own
        with torch.inference_mode():
            assert torch.equal(twin(batch_layout(x)), model(batch_layout(x))), norm
    # ScaleFL's exit heads divide by the rate in evaluation too: their units keep their BatchNorm
    early = ModelRecipe("conv_ee", 10, 1, (28, 28)).build(SubmodelSpec(0.5), track_bn=True)
    kept = [n for n, m in early.named_modules() if type(m).__name__ == "ConvUnit" and n not in foldable_units(early)]
    assert kept and all("AlwaysScaler" == type(early.get_submodule(n).scaler).__name__ for n in kept)
    mlp = ModelRecipe("mlp", 6, 9, (1, 128)).build(SubmodelSpec(1.0), track_bn=True)
    assert scoring_model(mlp) is mlp  # no ConvUnit: scored as built


def test_scores_match_the_unfolded_model_prediction_for_prediction():
    recipe, spec = ModelRecipe("conv", 10, 1, (28, 28)), SubmodelSpec(0.5)
    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(64, 1, 28, 28, generator=g), torch.randint(0, 10, (64,), generator=g)
    reference = _with_statistics(recipe, spec, 6)
    skeleton = eval_skeleton(recipe, spec)
    skeleton.load_state_dict(reference.state_dict())
    scores = batch_scores(skeleton, x, y, 16)
    with torch.inference_mode():
        logits = reference(x)
    for b, (correct, loss) in enumerate(scores):
        lb, yb = logits[16 * b : 16 * b + 16], y[16 * b : 16 * b + 16]
        assert correct == int((lb.argmax(1) == yb).sum())
        assert abs(loss - float(nn.functional.cross_entropy(lb, yb, reduction="sum"))) < 1e-3 * max(1.0, loss)


def test_the_twin_holds_the_models_own_tensors_where_nothing_is_folded():
    recipe, spec = ModelRecipe("conv", 10, 1, (28, 28), norm="none", scaler=False), SubmodelSpec(0.5)
    model = model_layout(recipe.build(spec).eval())
    twin = scoring_model(model)
    own = {k: v.data_ptr() for k, v in model.state_dict().items()}
    assert twin is not model and {k: v.data_ptr() for k, v in twin.state_dict().items()} == own  # no copy of the model
    folded = _with_statistics(recipe := ModelRecipe("cnn_small", 10, 1, (8, 8)), SubmodelSpec(1.0), 5)
    twin = scoring_model(folded)
    shared = {k for k, v in twin.state_dict().items() if v.data_ptr() == folded.state_dict()[k].data_ptr()}
    assert shared == {k for k in twin.state_dict() if not k.endswith(("conv.weight", "conv.bias"))}  # the classifier
    assert shared and all(p.is_contiguous(memory_format=torch.channels_last) for p in twin.parameters() if p.dim() == 4)


def test_a_model_whose_tensors_were_replaced_rather_than_written_gets_a_twin_of_its_new_tensors():
    recipe, spec = ModelRecipe("cnn_small", 10, 1, (8, 8)), SubmodelSpec(1.0)
    model = _with_statistics(recipe, spec, 2)
    x = torch.randn(5, 1, 8, 8, generator=torch.Generator().manual_seed(3))
    scoring_model(model)
    other = _with_statistics(recipe, spec, 4)
    model.load_state_dict(other.state_dict(), assign=True)  # new tensor objects: the old twin holds the old ones
    with torch.inference_mode():
        assert torch.allclose(scoring_model(model)(x), other(x), rtol=1e-4, atol=1e-4)


def test_the_twin_cache_keeps_no_model_alive_even_one_that_owns_a_tensor_itself():
    import gc
    import weakref

    from iotfl_sim.fl.models.layers import ConvUnit

    class Rooted(nn.Module):  # a tensor on the model itself: the twin's refill handles then point at the model
        def __init__(self) -> None:
            super().__init__()
            self.unit = ConvUnit(1, 4, bias=True, scaler=nn.Identity(), norm=nn.BatchNorm2d(4))
            self.scale = nn.Parameter(torch.ones(1))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.unit(x) * self.scale

    model = Rooted().eval()
    assert scoring_model(model) is not model
    gone = weakref.ref(model)
    del model
    gc.collect()
    assert gone() is None
