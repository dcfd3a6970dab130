"""fl.torch_seed.seed_torch: torch.manual_seed's generator state, without its queued stack traces on a host with
no accelerator, and torch.manual_seed itself where one is present."""

from __future__ import annotations

import traceback

import pytest
import torch

from iotfl_sim.fl import torch_seed


def test_the_cpu_generator_ends_where_torch_manual_seed_leaves_it(monkeypatch) -> None:
    if torch_seed.accelerator_present():
        pytest.skip("an accelerator is present: seed_torch is torch.manual_seed here")
    for seed in (0, 7, 2**62 + 3):
        torch.manual_seed(seed)
        want = torch.get_rng_state()
        torch.rand(5)  # move the generator on
        monkeypatch.setattr(traceback, "format_stack", lambda *a, **k: pytest.fail("formatted a stack"))
        torch_seed.seed_torch(seed)
        monkeypatch.undo()
        assert torch.equal(torch.get_rng_state(), want)


def test_with_an_accelerator_it_is_torch_manual_seed(monkeypatch) -> None:
    calls = []
    monkeypatch.setattr(torch_seed, "accelerator_present", lambda: True)
    monkeypatch.setattr(torch, "manual_seed", lambda seed: calls.append(seed))
    torch_seed.seed_torch(11)
    assert calls == [11]
