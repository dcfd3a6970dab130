"""The meta-kernel memo (``fl.cost.meta_memo``) changes a trace's speed, never its op table: each family's training
step and inference pass traced with it equal the same traces made by PyTorch's meta kernels alone (names, FLOPs
and bytes of every op), and what it hands back behaves as the kernel's own outputs would."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from iotfl_sim.fl.cost import meta_memo, opcost
from iotfl_sim.fl.cost.opcost import OpRecorder, StepOptions
from iotfl_sim.fl.models.families import EE_FAMILIES, FAMILIES, FEDX_FAMILIES
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec

# at landing: every op the memo remembers in the built-in families (batch norm, group norm of ln, hardtanh of
# MobileNetV2, relu, division, mean, addmm, the loss), in both passes, at one width; the full tier runs every
# family at two widths with every option
LANDING = [("resnet18", "bn"), ("mobilenetv2", "bn"), ("conv", "ln"), ("cnn_small", "none")]
EVERY = [(f, "bn") for f in (*FAMILIES, *EE_FAMILIES, *FEDX_FAMILIES, "cnn2")] + [("conv", "in"), ("conv", "none")]
SHAPES = {"harwild": (9, (1, 128)), "cnn2": (1, (28, 28)), "ofa_mbv3": (3, (32, 32))}


def traces(recipe: ModelRecipe, memo: bool, monkeypatch, widths: tuple[float, ...], options: StepOptions) -> list:
    """A training step at two batches per width and an inference pass, each from a fresh memo (or none): a memo hit
    within a step and across batches and widths."""
    meta_memo._MEMO.clear()
    with monkeypatch.context() as m:
        if not memo:
            m.setattr(opcost, "meta_call", lambda f, a, k: f(*a, **k))
        out = [opcost.trace_step_uncached(recipe, SubmodelSpec(rate), b, options) for rate in widths for b in (2, 4)]
        out.append(opcost.trace_step_uncached(recipe, SubmodelSpec(widths[-1]), 3, forward_only=True))
    return out


ALL_OPTIONS = StepOptions(momentum=0.9, weight_decay=True, clip_grad_norm=True, l2_pull=True)  # every op a step adds


def check(family: str, norm: str, monkeypatch, widths: tuple[float, ...] = (1.0, 0.5), options=ALL_OPTIONS) -> None:
    channels, size = SHAPES.get(family, (3, (32, 32)))
    recipe = ModelRecipe(family, 10, channels, size, norm=norm)
    plain = traces(recipe, False, monkeypatch, widths, options)
    remembered = traces(recipe, True, monkeypatch, widths, options)
    for a, b in zip(plain, remembered, strict=True):
        assert a.names == b.names
        assert np.array_equal(a.flops, b.flops) and np.array_equal(a.bytes, b.bytes)


@pytest.mark.parametrize("family, norm", LANDING)
def test_a_trace_with_the_memo_is_the_trace_of_pytorchs_kernels(family, norm, monkeypatch):
    # weight decay, clipping and the proximal term add a few ops per parameter: on the small families only
    small = family in ("conv", "cnn_small")
    check(family, norm, monkeypatch, widths=(0.25,), options=ALL_OPTIONS if small else StepOptions())


@pytest.mark.full
@pytest.mark.parametrize("family, norm", [c for c in EVERY if c not in LANDING])
def test_every_familys_trace_with_the_memo_is_the_trace_of_pytorchs_kernels(family, norm, monkeypatch):
    check(family, norm, monkeypatch)


def test_a_remembered_call_gives_fresh_tensors_and_an_in_place_op_its_own_tensor():
    """A memo hit makes new tensors of the remembered metadata (never one handed out before: autograd and later
    in-place ops need their own); an op that writes into its input returns that input, as PyTorch's kernel does."""
    x = torch.zeros(2, 3, 4, 4, device="meta").to(memory_format=torch.channels_last)
    with OpRecorder():
        a = torch.relu(x)
        b = torch.relu(x)
        c = x.add_(1)
    assert a is not b and a.shape == b.shape == x.shape and a.stride() == b.stride() == x.stride()
    assert c is x
