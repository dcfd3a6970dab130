"""How long a device trains a submodel, and with how many FLOPs: the compute side of the cost model.

``declared_seconds`` is what a server can predict from a device's declared profile (FedX's T(theta_u) of eq. 2,
``predict``); ``task_cost`` is what a task really takes: the same, times the round's compute jitter.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from iotfl_sim.fl.cost import opcost
from iotfl_sim.fl.cost.energy import training_power_w
from iotfl_sim.fleet.fleet import Fleet


class TrainingTime:
    """Local training's duration and FLOPs per device, by its profile's compute model.

    With ``fleet.cost_model: roofline`` and a memory bandwidth in the profile every step is priced per
    operator (``fl.cost.opcost``: roofline plus dispatch overhead, batch by batch as ``train_local`` runs
    them); without one, 3 x forward FLOPs / FLOP/s.
    """

    def __init__(
        self,
        fleet: Fleet,
        samples_per_device: np.ndarray,
        epochs: int,
        batch_size: int,
        step_options: opcost.StepOptions,
        roofline: bool,
    ) -> None:
        self.fleet = fleet
        self.samples_per_device = samples_per_device
        self.epochs = epochs
        self.batch_size = batch_size
        self.step_options = step_options
        self.roofline = roofline

    def declared_seconds(self, recipe: Any, spec: Any, d: int) -> float:
        """Seconds of device ``d``'s local training of ``spec`` by its declared profile, before jitter."""
        f = self.fleet
        per_epoch = int(self.samples_per_device[d])
        rates = f.roofline(d) if self.roofline else None
        return opcost.device_train_seconds(
            recipe, spec, per_epoch, self.epochs, self.batch_size, f.flops[d], rates, self.step_options
        )

    def task_power(self, recipe: Any, spec: Any, d: int) -> float:
        """Board power (W) of device ``d`` while training ``spec``: the profile's constant ``train_w``, or, when
        it sets activity terms, ``fl.cost.energy.training_power_w`` over the training's roofline parts."""
        f = self.fleet
        terms = f.activity_terms(d)
        if terms is None:
            return float(f.train_w[d])
        rates = f.roofline(d) if self.roofline else None
        parts = opcost.device_train_parts(
            recipe, spec, int(self.samples_per_device[d]), self.epochs, self.batch_size, f.flops[d], rates, self.step_options
        )
        return training_power_w(terms, parts)

    def predict(self, recipe: Any, spec: Any) -> np.ndarray:
        """``declared_seconds`` of every device, computed once per distinct (compute rates, group, samples)."""
        f = self.fleet
        bw = np.nan_to_num(f.mem_bw, nan=-1.0)
        keys = np.stack([f.flops, bw, f.op_overhead_s, f.group_of, self.samples_per_device], axis=1)
        _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
        seconds = np.array([self.declared_seconds(recipe, spec, int(d)) for d in first])
        return seconds[inverse.reshape(-1)]

    def task_cost(self, recipe: Any, spec: Any, d: int, rnd: int) -> tuple[float, float]:
        """(training FLOPs, jittered seconds) of device ``d``'s local training of ``spec`` in round ``rnd``.
        Energy follows: the task charges training power for this duration."""
        per_epoch = int(self.samples_per_device[d])
        if self.roofline and self.fleet.roofline(d) is not None:
            flops = opcost.train_flops(recipe, spec, per_epoch, self.epochs, self.batch_size, self.step_options)
        else:
            flops = recipe.cost(spec).train_flops(per_epoch * self.epochs)
        return flops, self.fleet.jittered(d, self.declared_seconds(recipe, spec, d), rnd)
