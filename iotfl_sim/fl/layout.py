"""The memory layout image models train and evaluate in: ``channels_last`` (NHWC), the one place that says so.

Measured on a 2-core x86 host (oneDNN, torch 2.13, one thread; ``benchmarks/layout.py``, ``layout.md``): a
training step in channels_last took 0.63-0.93x its NCHW time on every family (conv, cnn_small, resnet18, vgg16,
mobilenetv2, full and reduced width), forward passes 0.39-0.85x, with AVX-512 kernels and with AVX2 only. The
layout changes the order in which the kernels sum, so results differ from NCHW's in the last bits; every
executor trains and scores through these functions, so they stay equal to each other bit for bit. Only 4-d tensors (convolution weights, image batches)
change layout; other tensors are left as they are.
"""

from __future__ import annotations

import torch
from torch import nn


def model_layout(model: nn.Module) -> nn.Module:
    """``model`` with its 4-d parameters in channels_last (in place; ``load_state_dict`` keeps the layout)."""
    return model.to(memory_format=torch.channels_last)


def batch_layout(x: torch.Tensor) -> torch.Tensor:
    """An image batch in channels_last (a copy unless it is one already); other tensors unchanged."""
    return x.contiguous(memory_format=torch.channels_last) if x.dim() == 4 else x


def plain_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Detached, contiguous copies of a trained model's state: what leaves a worker does not carry its layout."""
    return {k: v.detach().clone(memory_format=torch.contiguous_format) for k, v in state.items()}
