"""FedX's device-aware assignment (eq. 2, Section III-A): which sub-network and how many QSGD bits each device gets.

    theta_u, q_u = argmin_{theta_u in Theta, q_u in [1, q_max]}  P(theta, D_S) - P(Q(theta_u, q_u), D_S)
                   s.t. T(theta_u, D_S) <= mu_u

Two steps, as the paper's "selection process" describes them: first the sub-networks whose predicted training
time T is within the threshold mu_u (and, here, whose training memory the device declares it has), then a
brute-force search over (sub-network, q) for the least utility drop on the server's data. ``search`` is the pure
second step on a table of drops, so it can be checked by hand; ``utility_drops`` builds that table by
quantizing each sub-network at every q and scoring it on the server's data (``algorithms.fedx`` calls both once,
in set-up: the paper assigns once, Alg. 1 line 6).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from iotfl_sim.algorithms.base import InferWork, QsgdWork, Work
from iotfl_sim.fl.evaluate import evaluate
from iotfl_sim.fl.quantize import quantize_state
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec, slice_state
from iotfl_sim.seeding import int_seed

State = dict[str, torch.Tensor]


def search(
    drops: np.ndarray, feasible: np.ndarray, max_bits: int, tolerance: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(sub-network index per device, -1 where none is feasible; bits per device, 0 there) of eq. 2.

    ``drops[j, q - 1]``: utility drop of sub-network j (in ascending size) quantized at q bits, q = 1 ..
    ``drops.shape[1]``; ``feasible[u, j]``: sub-network j meets device u's time threshold (and memory);
    ``max_bits``: q_u^max (searched q in [1, min(max_bits, drops.shape[1])]). The search visits sub-networks
    from the largest to the smallest and, within one, q from 1 up. Without ``tolerance`` it returns the least
    drop (eq. 2's argmin), ties to the first visited (the larger sub-network, then fewer bits); with one it
    stops at the first pair whose drop is at most ``tolerance`` (the paper's early termination), else the
    argmin. Visiting larger sub-networks first makes a device that can afford a large one take it at few bits,
    and one that cannot take a smaller one at more bits (the paper's key idea), whenever a tolerance is met.
    """
    drops = np.asarray(drops, dtype=np.float64)
    feasible = np.asarray(feasible, dtype=bool)
    m, qn = drops.shape[0], min(int(max_bits), drops.shape[1])
    if qn < 1:
        raise ValueError(f"eq. 2 needs at least one bit to search, got max_bits={max_bits}")
    order = [(j, q) for j in range(m - 1, -1, -1) for q in range(1, qn + 1)]
    level = np.full(feasible.shape[0], -1, dtype=np.int64)
    bits = np.zeros(feasible.shape[0], dtype=np.int64)
    # devices with the same feasible set get the same answer: search once per distinct row
    rows, inverse = np.unique(feasible, axis=0, return_inverse=True)
    for r, row in enumerate(rows):
        cands = [(j, q) for j, q in order if row[j]]
        if not cands:
            continue
        pick = None
        if tolerance is not None:
            pick = next(((j, q) for j, q in cands if drops[j, q - 1] <= tolerance), None)
        if pick is None:
            best = min(drops[j, q - 1] for j, q in cands)
            pick = next((j, q) for j, q in cands if drops[j, q - 1] == best)
        sel = inverse.reshape(-1) == r
        level[sel], bits[sel] = pick
    return level, bits


def utility_drops(
    recipe: ModelRecipe,
    specs: Sequence[SubmodelSpec],
    global_spec: SubmodelSpec,
    state: State,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    max_bits: int,
    bucket: int | None,
    seed: int,
    batch_size: int,
) -> np.ndarray:
    """drops[j, q - 1] = P(theta, D_S) - P(Q(theta_j, q), D_S) for each spec j and q = 1 .. max_bits. P is top-1
    accuracy on (x, y) after static-BN calibration on x (the simulator's evaluation, ``fl.evaluate``); Q is the
    wire's QSGD (``fl.quantize``) with one seeded draw per (sub-network index, q); q >= 32 is float32."""
    base, _ = evaluate(recipe, global_spec, state, x, x, y, batch_size)
    drops = np.zeros((len(specs), max_bits))
    for j, spec in enumerate(specs):
        sub = slice_state(state, recipe.shapes(spec))
        for q in range(1, max_bits + 1):
            if q < 32:
                gen = torch.Generator().manual_seed(int_seed(seed, "fedx_eq2", j, q))
                quant, _ = quantize_state(sub, q, gen, bucket)
            else:
                quant = sub
            acc, _ = evaluate(recipe, spec, quant, x, x, y, batch_size)
            drops[j, q - 1] = base - acc
    return drops


def search_work(
    recipe: ModelRecipe, specs: Sequence[SubmodelSpec], global_spec: SubmodelSpec, n: int, *, max_bits: int,
    batch_size: int,
) -> list[Work]:  # fmt: skip
    """The server work of ``utility_drops`` over ``n`` server samples: two forward passes per scored model
    (static-BN calibration and scoring) and one QSGD pass per quantized sub-network."""
    work: list[Work] = [InferWork(recipe, global_spec, 2 * n, batch_size)]
    for spec in specs:
        for q in range(1, max_bits + 1):
            if q < 32:
                work.append(QsgdWork(recipe.cost(spec).params, len(recipe.shapes(spec))))
            work.append(InferWork(recipe, spec, 2 * n, batch_size))
    return work
