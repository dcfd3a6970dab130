"""Scoring with each convolution's BatchNorm folded into the convolution.

In eval mode a BatchNorm after a convolution is an affine map per channel: ``(conv(x) + b - mean) * gamma /
sqrt(var + eps) + beta``. Folding it into the convolution's weights and bias (``torch.nn.utils.fusion.
fuse_conv_bn_weights``, PyTorch's own inference fusion) removes one pass over every feature map: the test pass of
HeteroFL's MNIST ``conv`` took 0.88x its unfolded time (1 thread, batch 100, channels_last). The folded model
computes the same function with its own rounding, so scores can differ from the unfolded model's in the last bits;
every executor scores through ``fl.evaluate``, which folds, so they still agree bit for bit.

Folded: each ``ConvUnit`` (conv -> Scaler -> norm -> ReLU) whose norm is a ``BatchNorm2d`` with running statistics
and whose Scaler is the identity in eval mode (HeteroFL's ``Scaler``, or none). Everything else scores as built:
pre-activation blocks (the norm comes before the convolution), ScaleFL's always-on Scaler, GroupNorm.
"""

from __future__ import annotations

import copy
import threading
import weakref

import torch
from torch import nn
from torch.nn.utils import skip_init
from torch.nn.utils.fusion import fuse_conv_bn_weights

from iotfl_sim.fl.layout import model_layout
from iotfl_sim.fl.models.layers import ConvUnit, Scaler

_TWINS = threading.local()  # per thread: a folded twin per evaluation skeleton, refilled at every scoring call


def foldable_units(model: nn.Module) -> list[str]:
    """Names of ``model``'s ConvUnits whose BatchNorm can be folded into their convolution."""
    return [
        name
        for name, m in model.named_modules()
        if isinstance(m, ConvUnit)
        and type(m.scaler) in (nn.Identity, Scaler)
        and type(m.norm) is nn.BatchNorm2d
        and m.norm.running_mean is not None
        and type(m.conv) is nn.Conv2d
    ]


@torch.inference_mode(False)  # normal tensors, which later calls may load into (inference tensors refuse it)
def _twin(model: nn.Module, units: list[str]) -> nn.Module:
    twin = copy.deepcopy(model)
    for name in units:
        unit = twin.get_submodule(name)
        c = unit.conv
        unit.conv = skip_init(nn.Conv2d, c.in_channels, c.out_channels, c.kernel_size, c.stride, c.padding, c.dilation,
                              c.groups, bias=True, padding_mode=c.padding_mode, device=c.weight.device,
                              dtype=c.weight.dtype)  # no initialisation: no RNG draw
        unit.norm = nn.Identity()
    return model_layout(twin).eval().requires_grad_(False)


def folded_state(model: nn.Module, units: list[str]) -> dict[str, torch.Tensor]:
    """``model``'s state with the BatchNorm of each of ``units`` folded into its convolution's weight and bias."""
    state = dict(model.state_dict())
    for name in units:
        unit = model.get_submodule(name)
        bn = unit.norm
        w, b = fuse_conv_bn_weights(unit.conv.weight, unit.conv.bias, bn.running_mean, bn.running_var, bn.eps,
                                    bn.weight, bn.bias)  # fmt: skip
        for k in [k for k in state if k.startswith(f"{name}.norm.")]:
            del state[k]
        state[f"{name}.conv.weight"], state[f"{name}.conv.bias"] = w.detach(), b.detach()
    return state


@torch.no_grad()
def folded(model: nn.Module) -> nn.Module:
    """A model computing ``model``'s eval-mode function with its foldable BatchNorms folded (``model`` itself when
    it has none): a twin built once per thread per model and loaded with ``model``'s current tensors."""
    units = foldable_units(model)
    if not units:
        return model
    twins: weakref.WeakKeyDictionary = _TWINS.__dict__.setdefault("twins", weakref.WeakKeyDictionary())
    twin = twins.get(model)
    if twin is None:
        twin = twins[model] = _twin(model, units)
    twin.load_state_dict(folded_state(model, units), strict=True)
    return twin
