"""fl.sgd.PlainSGD against torch.optim.SGD (the reference it replaces): the same bits, step after step."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from iotfl_sim.fl.sgd import PlainSGD


def _net() -> nn.Module:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 5), nn.BatchNorm1d(5), nn.ReLU(), nn.Linear(5, 3), nn.Linear(3, 3))
    net[4].weight.requires_grad_(False)  # frozen: no grad, skipped by both
    return net


@pytest.mark.parametrize(("momentum", "weight_decay"), [(0.0, 0.0), (0.9, 0.0), (0.0, 5e-4), (0.5, 1e-3)])
def test_plain_sgd_gives_torch_sgds_bits(momentum, weight_decay):
    a, b = _net(), _net()
    ref = torch.optim.SGD(a.parameters(), lr=0.07, momentum=momentum, weight_decay=weight_decay)
    mine = PlainSGD(b.parameters(), lr=0.07, momentum=momentum, weight_decay=weight_decay)
    gen = torch.Generator().manual_seed(1)
    for step in range(5):
        x, y = torch.randn(8, 6, generator=gen), torch.randint(0, 3, (8,), generator=gen)
        for net, opt in ((a, ref), (b, mine)):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(net(x), y)
            if step == 2:  # a step where one layer gets no gradient at all
                loss = nn.functional.cross_entropy(net[:3](x)[:, :3], y)
            loss.backward()
            opt.step()
        for (name, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
            assert torch.equal(p, q), (step, name)
    assert not torch.equal(a[0].weight, _net()[0].weight)  # it trained
    assert torch.equal(a[4].weight, _net()[4].weight)  # the frozen layer did not move


def test_zero_grad_drops_the_gradients():
    net = _net()
    opt = PlainSGD(net.parameters(), lr=0.1)
    nn.functional.cross_entropy(net(torch.randn(4, 6)), torch.tensor([0, 1, 2, 0])).backward()
    assert net[0].weight.grad is not None
    opt.zero_grad()
    assert all(p.grad is None for p in net.parameters())
