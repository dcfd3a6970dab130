"""The energy the simulator charges for local training, in one place for the engine's accounting to match and for
``profiles check`` / ``profiles fit`` to predict with.

A task's training is a ``compute`` activity (``sim.device``): its power is the whole board's and replaces idle
power while it lasts (``fleet.Fleet.spend``), so training for ``seconds`` costs ``train_w x seconds``. Should the
energy model gain terms (power that depends on the work), they belong here, and the engine's charge with them.
"""

from __future__ import annotations


def training_energy_j(train_w: float, seconds: float) -> float:
    """Joules charged for ``seconds`` of local training at the profile's training power ``train_w`` (W)."""
    return float(train_w) * float(seconds)
