"""Plain SGD for local training: PyTorch's CPU update without ``torch.optim``.

``torch.optim.SGD`` on CPU tensors runs its single-tensor loop (foreach kernels are for accelerators); this
class runs the same operations in the same order (weight decay added to the gradient, the momentum buffer
started as a copy of the first gradient then ``buf * momentum + grad``, dampening 0, no Nesterov, then
``p -= lr * step``), so it gives the same bits. Why not ``torch.optim``: the first optimizer a process builds
imports ``torch._dynamo`` (``Optimizer.add_param_group`` is wrapped by ``torch._disable_dynamo``), about 2.6 s
of CPU that every fresh run process paid before its first training step. Parameters whose ``.grad`` is None
after the backward pass are skipped, as ``torch.optim`` does.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


class PlainSGD:
    def __init__(self, params: Iterable[torch.Tensor], lr: float, momentum: float = 0.0, weight_decay: float = 0.0) -> None:
        self.params = list(params)
        self.lr = float(lr)
        self.momentum = float(momentum)
        self.weight_decay = float(weight_decay)
        self.buffers: list[torch.Tensor | None] = [None] * len(self.params)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            grad = p.grad
            if self.weight_decay != 0:
                grad = grad.add(p, alpha=self.weight_decay)
            if self.momentum != 0:
                buf = self.buffers[i]
                if buf is None:
                    buf = self.buffers[i] = grad.detach().clone()
                else:
                    buf.mul_(self.momentum).add_(grad, alpha=1)
                grad = buf
            p.add_(grad, alpha=-self.lr)


def descend(optimizer: PlainSGD | torch.optim.Optimizer, loss: torch.Tensor) -> float:
    """One step on ``loss``: clear the gradients, back-propagate, update the parameters; returns the loss's value."""
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return float(loss.detach())
