"""The mini-batching rule every training loop shares (devices, the fused trainer, server pretraining and
fine-tuning, APoZ's fine-tuning): one place, so that the same seed gives the same batches everywhere."""

from __future__ import annotations

from collections.abc import Iterator

import torch


def epoch_batches(indices: torch.Tensor, batch_size: int, generator: torch.Generator) -> Iterator[torch.Tensor]:
    """One epoch over ``indices``: a permutation drawn from ``generator`` (one ``randperm`` per epoch), cut into
    batches of ``batch_size`` in order. A last batch of one sample is left out when there is more than one
    sample (BatchNorm in training mode cannot normalise a single sample); a lone sample is kept, being all the
    data there is."""
    order = indices[torch.randperm(len(indices), generator=generator)]
    for start in range(0, len(order), batch_size):
        batch = order[start : start + batch_size]
        if len(batch) < 2 and len(order) > 1:
            continue
        yield batch
