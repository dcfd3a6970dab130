"""The model that scores the test set: a twin of the evaluation model with two changes that keep its function.

1. Each ``ConvUnit`` (conv -> Scaler -> norm -> ReLU) whose norm is a ``BatchNorm2d`` with running statistics and
   whose Scaler is the identity in eval mode (HeteroFL's ``Scaler``, or none) has the BatchNorm folded into the
   convolution's weights and bias (``torch.nn.utils.fusion.fuse_conv_bn_weights``, PyTorch's inference fusion):
   one pass over the feature map fewer. The same function with its own rounding, so scores can differ from the
   unfolded model's in the last bits. Pre-activation blocks (the norm comes before the convolution), ScaleFL's
   always-on Scaler and GroupNorm stay as built.
2. Every ConvUnit's ReLU works in place. Its input is always a tensor the unit has just made (the convolution's
   output, or the norm's or Scaler's), never the unit's input, which a shared prefix may hand to several models
   (``fl.evaluate._tree_forward``); the values are the same bits, without allocating and writing a second map.

Measured inside runs, 3 interleaved each: HeteroFL's MNIST a2-b8 evaluation (folding) 11.3-11.6 s inline against
11.9-12.3 s unfolded; the peers conv job (no BatchNorm: the in-place ReLU alone) 10.9-11.4 s of evaluation
against 11.4-12.0 s. Training never uses the twin, so the cost model's activation memory (``fl.cost.footprint``)
and every gradient are untouched. Every executor scores
through ``fl.evaluate``, which uses the twin, so they still agree bit for bit.
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

_TWINS = threading.local()  # per thread: a twin per evaluation model, refilled at every scoring call


def conv_units(model: nn.Module) -> list[str]:
    """Names of ``model``'s ConvUnits."""
    return [name for name, m in model.named_modules() if isinstance(m, ConvUnit)]


def _foldable(unit: ConvUnit) -> bool:
    return (
        type(unit.scaler) in (nn.Identity, Scaler)
        and type(unit.norm) is nn.BatchNorm2d
        and unit.norm.running_mean is not None
        and type(unit.conv) is nn.Conv2d
    )


def foldable_units(model: nn.Module, units: list[str] | None = None) -> list[str]:
    """Names of ``model``'s ConvUnits (of ``units``, if given) whose BatchNorm can be folded into their convolution."""
    return [name for name in (conv_units(model) if units is None else units) if _foldable(model.get_submodule(name))]


@torch.inference_mode(False)  # normal tensors, which later calls may load into (inference tensors refuse it)
def _twin(model: nn.Module, units: list[str], fold: list[str]) -> nn.Module:
    twin = copy.deepcopy(model)
    for name in units:
        unit = twin.get_submodule(name)
        if name in fold:
            c = unit.conv
            unit.conv = skip_init(nn.Conv2d, c.in_channels, c.out_channels, c.kernel_size, c.stride, c.padding,
                                  c.dilation, c.groups, bias=True, padding_mode=c.padding_mode,
                                  device=c.weight.device, dtype=c.weight.dtype)  # no initialisation: no RNG draw
            unit.norm = nn.Identity()
        unit.relu = nn.ReLU(inplace=True)
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


class _Twin:
    """A model's twin and what refills it: the units whose folded weights are recomputed at every call, and every
    other tensor, which the twin holds as the model's own (checked at every call: a model whose tensors were
    replaced rather than written in place gets a new twin). The model's modules are held by weak reference: the
    cache's value must not keep its key (the model itself may own a tensor) alive."""

    module: nn.Module | None

    def __init__(self, model: nn.Module) -> None:
        units = conv_units(model)
        fold = foldable_units(model, units)
        if not units:  # scored as built (no reference to it here: the cache's key would never be freed)
            self.module, self.folds, self.shared = None, [], []
            return
        twin = _twin(model, units, fold)
        twin.load_state_dict(folded_state(model, fold), strict=True, assign=True)
        self.module = model_layout(twin)
        self.folds = [(weakref.ref(model.get_submodule(name)), twin.get_submodule(name).conv) for name in fold]
        folded = {f"{name}.conv.{leaf}" for name in fold for leaf in ("weight", "bias")}
        self.shared = []  # (the model's module holding it, its name there, the twin's tensor)
        for key, tensor in twin.state_dict(keep_vars=True).items():
            if key not in folded:
                owner, _, leaf = key.rpartition(".")
                self.shared.append((weakref.ref(model.get_submodule(owner)), leaf, tensor))

    def holds_models_tensors(self) -> bool:
        owners = [(ref(), leaf, tensor) for ref, leaf, tensor in self.shared]
        return all(o is not None and getattr(o, leaf).data_ptr() == tensor.data_ptr() for o, leaf, tensor in owners)

    @torch.inference_mode()  # the folded tensors may be inference tensors (made in an evaluation): written in it
    def refold(self) -> None:
        for ref, conv in self.folds:
            unit = ref()
            bn = unit.norm
            w, b = fuse_conv_bn_weights(unit.conv.weight, unit.conv.bias, bn.running_mean, bn.running_var, bn.eps,
                                        bn.weight, bn.bias)  # fmt: skip
            conv.weight.copy_(w)  # in place: the twin's layout stays
            conv.bias.copy_(b)


@torch.no_grad()
def scoring_model(model: nn.Module) -> nn.Module:
    """The twin that scores for ``model`` in eval mode (``model`` itself when it has no ConvUnit): built once per
    thread per model and given ``model``'s current tensors at every call (the same tensors, not copies, where
    nothing is folded; the folded ones recomputed from them)."""
    twins: weakref.WeakKeyDictionary = _TWINS.__dict__.setdefault("twins", weakref.WeakKeyDictionary())
    twin = twins.get(model)
    if twin is None or not twin.holds_models_tensors():
        twin = twins[model] = _Twin(model)
    else:
        twin.refold()
    return model if twin.module is None else twin.module
