"""Server-side SGD on a global state: joint training of nested sub-networks, with an optional L2 pull.

``nested_sgd`` trains the global tensors directly: every sub-network in ``specs`` runs through
``torch.func.functional_call`` on prefix *views* of the global leaf tensors, so each batch's loss
``sum_spec CE(f_spec(x), y) + (gamma / 2) ||theta - ref||^2`` sends its gradient into the shared weights (the
sandwich-style joint training of nested sub-networks, and FedX's regularised fine-tuning (eq. 5) when ``specs``
is the global model alone and ``ref`` the aggregated model).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import functional_call

from iotfl_sim.fl.batches import epoch_batches
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.sgd import PlainSGD, descend
from iotfl_sim.fl.submodel import SubmodelSpec, prefix_index
from iotfl_sim.fl.torch_seed import seed_torch
from iotfl_sim.seeding import int_seed, stream

State = dict[str, torch.Tensor]


def l2_pull(params: Mapping[str, torch.Tensor], ref: Mapping[str, torch.Tensor], gamma: float) -> torch.Tensor:
    """(gamma / 2) * sum_k ||params[k] - ref[k]||^2; its gradient is gamma * (params - ref)."""
    total = torch.zeros(())
    for k, p in params.items():
        total = total + ((p - ref[k].detach()) ** 2).sum()
    return 0.5 * gamma * total


def nested_sgd(
    recipe: ModelRecipe,
    specs: Sequence[SubmodelSpec],
    state: Mapping[str, torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    seed: int,
    ref: Mapping[str, torch.Tensor] | None = None,
    gamma: float = 0.0,
) -> tuple[State, float]:
    """(new global state, mean loss of the last epoch): plain SGD (no momentum) over ``x, y``."""
    theta = {k: v.detach().clone().requires_grad_(torch.is_floating_point(v)) for k, v in state.items()}
    models = [(recipe.build(s), recipe.shapes(s)) for s in specs]
    for m, _ in models:
        m.train()
    opt = PlainSGD([p for p in theta.values() if p.requires_grad], lr=lr)
    gen = torch.Generator().manual_seed(seed)
    seed_torch(seed)
    last = float("nan")
    for _ in range(epochs):
        total, steps = 0.0, 0
        for batch in epoch_batches(torch.arange(len(x)), batch_size, gen):
            xb, yb = x[batch], y[batch]
            loss = torch.zeros(())
            for model, shapes in models:
                views = {k: theta[k][prefix_index(s)] for k, s in shapes.items()}
                loss = loss + F.cross_entropy(functional_call(model, views, (xb,)), yb)
            if ref is not None and gamma > 0:
                loss = loss + l2_pull({k: p for k, p in theta.items() if p.requires_grad}, ref, gamma)
            total += descend(opt, loss)
            steps += 1
        last = total / max(steps, 1)
    return {k: v.detach() for k, v in theta.items()}, last


def fine_tune(
    recipe: ModelRecipe,
    spec: SubmodelSpec,
    state: Mapping[str, torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    samples: int | None,
    epochs: int,
    batch_size: int,
    lr: float,
    gamma: float,
    seed: int,
    tag: str,
    rnd: int,
) -> State:
    """One round's server fine-tuning of the aggregated ``state`` (FedX eq. 5; ``gamma`` 0: plain CE, the
    setting FedX gives its baselines): ``epochs`` of ``nested_sgd`` on a fresh seeded draw of ``samples`` of
    the server's ``x, y`` (all of them when None), pulled towards ``state``. ``tag`` names the method's streams."""
    n = len(x)
    k = n if samples is None else min(n, samples)
    pick = torch.as_tensor(np.sort(stream(seed, f"{tag}_finetune_draw", rnd).choice(n, size=k, replace=False)))
    new, _ = nested_sgd(
        recipe, [spec], state, x[pick], y[pick], epochs=epochs, batch_size=batch_size, lr=lr,
        seed=int_seed(seed, f"{tag}_finetune", rnd), ref=state, gamma=gamma,
    )  # fmt: skip
    return new
