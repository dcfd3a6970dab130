"""The energy the simulator charges for local training, in one place for the engine's accounting to match and for
``profiles check`` / ``profiles fit`` to predict with.

A task's training is a ``compute`` activity (``sim.device``): its power is the whole board's and replaces idle
power while it lasts (``fleet.Fleet.spend``), so training for ``seconds`` costs ``power x seconds``, with the power
``training_power_w`` gives:

- a profile without activity terms (every bundled profile but those that set them): the constant ``train_w``;
- a profile that sets ``power.compute_w`` and ``power.memory_w`` (or a power mode that does): the time-weighted
  mix of three levels over the training's roofline parts (``opcost.StepParts``)::

      P = (t_c x compute_w + t_m x memory_w + t_o x overhead_w) / (t_c + t_m + t_o)

  where ``t_c`` is the time of the compute-bound ops (FLOPs / FLOP/s at least bytes / bytes/s), ``t_m`` that of the
  memory-bound ops and ``t_o`` the per-op dispatch and per-kind fixed costs, summed over every batch the task
  trains. ``overhead_w`` defaults to ``memory_w``: while an op is dispatched the arithmetic units wait, as they wait
  on memory in a memory-bound op. The mix does not depend on the task's compute jitter (it scales every part).

Why the power must depend on the work: FedX (``validation/fedx.csv``, Table III of Lai et al., DCOSS-IoT 2025,
``shared/seeds/fedx.txt`` lines 267-281) measured the Jetson Nano's CPU + GPU rails at 1115 to 2335 mW while
training its twelve workloads on the GPU, a 2.1x spread, and the GPU rail alone at 287 mW (HAR small, GPU 52.1 %
busy) to 1450 mW; the rows whose modelled time is most overhead (per-op dispatch) are the low ones
(``benchmarks/profile_derivations.md#activity-dependent-training-power``). A constant ``train_w`` cannot show that.
"""

from __future__ import annotations

from typing import Protocol

from iotfl_sim.fl.cost.opcost import StepParts


class PowerTerms(Protocol):
    """The power figures of one device in one power mode (``scenario.profile.Rates`` is one)."""

    train_w: float
    compute_w: float | None
    memory_w: float | None
    overhead_w: float | None


def training_power_w(power: PowerTerms, parts: StepParts | None) -> float:
    """Board power (W) while training work split as ``parts``: ``train_w`` when the device has no activity terms
    (or the work has no parts), else the time-weighted mix of the module docstring."""
    if power.compute_w is None or power.memory_w is None or parts is None or parts.total_s <= 0:
        return float(power.train_w)
    overhead_w = power.memory_w if power.overhead_w is None else power.overhead_w
    mixed = parts.compute_s * power.compute_w + parts.memory_s * power.memory_w + parts.overhead_s * overhead_w
    return float(mixed / parts.total_s)


def training_energy_j(power: float | PowerTerms, seconds: float, parts: StepParts | None = None) -> float:
    """Joules charged for ``seconds`` of local training: at a constant ``power`` in W, or at the device's
    ``training_power_w(power, parts)``."""
    watts = float(power) if isinstance(power, (int, float)) else training_power_w(power, parts)
    return watts * float(seconds)
