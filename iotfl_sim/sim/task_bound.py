"""A lower bound of the time any task of a run can take from its dispatch to its upload's end: what ``validate``
compares an asynchronous server's ``server.deadline_s`` with (``preflight``), so that a deadline no task could
ever meet is refused before the run instead of dispatching late tasks forever.

Per device, each part at its most favourable, then the fastest device:

- two round trips (``link.rtt_ms``: every transfer waits one, download and upload);
- the download of the smallest submodel the method assigns (``candidate_specs``) at 32 bits plus the header, and
  the upload of the header alone (an update may be quantized to any width; a method with a wire may send less
  down too: then the header alone), at the device's own bandwidth: retransmissions and a shared gateway only add
  time; with link jitter (``network.jitter``, a lognormal factor) the air time has no lower bound above 0;
- the training of the smallest submodel by the declared profile (``sim.system.training_time``) on the samples the run
  gives the device (a run with real numerics: 1, the least a split gives; its sizes are not drawn yet), times
  the compute jitter's least factor: 1 without jitter, 0.05 for ``normal`` (its floor), 0 for ``lognormal`` and
  ``exponential`` (unbounded below).

Availability, memory and energy only make tasks fail or wait, never faster. So a feasible scenario is never refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from iotfl_sim.fleet.lora import message
from iotfl_sim.sim.training_time import TrainingTime

if TYPE_CHECKING:
    from iotfl_sim.sim.engine import Simulation

LEAST_JITTER = {"lognormal": 0.0, "exponential": 0.0, "normal": 0.05}  # fleet.Fleet.jittered's least factor


def fastest_task_s(sim: Simulation, real_numerics: bool) -> float:
    """The least time a task of ``sim``'s run can take (see the module); ``real_numerics``: the run trains for
    real, so its devices' sample counts are not ``sim``'s (a system-only preflight's) but at least 1 each."""
    f, sc = sim.fleet, sim.sc
    specs = sim.strategy.candidate_specs()
    header = float(sc.server.header_bytes)
    down_bytes = header
    if sim.strategy.wire is None:
        down_bytes += min(recipe.cost(spec).params for recipe, spec in specs) * 4.0
    clean = f.link_jitter <= 0 if len(f.link_jitter) else np.ones(f.n, dtype=bool)
    air = np.where(clean, down_bytes * 8.0 / f.down_bps + header * 8.0 / f.up_bps, 0.0)
    for g, phy in enumerate(f.lora):  # LoRaWAN frames on air instead of the profile's rates
        if phy is not None:
            on_air = message(phy, down_bytes).airtime_s + message(phy, header).airtime_s
            air = np.where(clean & (f.group_of == g), on_air, air)
    samples = np.ones(f.n, dtype=np.int64) if real_numerics else sim.numerics.samples_per_device
    training = TrainingTime(
        f, samples, sc.task_epochs(), sc.local.batch_size, sim.system.step_options, roofline=sc.fleet.cost_model == "roofline"
    )
    train = np.min([training.predict(recipe, spec) for recipe, spec in specs], axis=0)
    least = np.array([LEAST_JITTER.get(dist, 1.0) for dist in f.jitter_dist])[f.group_of]
    factor = np.where(f.jitter_sigma > 0, least, 1.0)
    return float(np.min(2.0 * f.rtt_s + air + train * factor))
