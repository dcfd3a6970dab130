"""When a device can be reached: the ``availability:`` block of a device group.

Plain data, validated with the rest of the scenario; the runtime lives in
``iotfl_sim.fleet.availability``. Written in YAML as, for example::

    availability: {kind: markov, mean_on_s: 3600, mean_off_s: 1800}
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, TypeAdapter

from iotfl_sim.scenario.profile import Strict


class AlwaysAvailability(Strict):
    """Always online (the default)."""

    kind: Literal["always"] = Field("always", description="always online")


class BernoulliAvailability(Strict):
    """Each round, independently per device, online for the whole round with probability p."""

    kind: Literal["bernoulli"] = Field(description="per-round coin flip")
    p: float = Field(0.8, ge=0, le=1, description="probability that a device is online for a given round")


class MarkovAvailability(Strict):
    """Two-state continuous-time Markov chain: exponential on and off durations."""

    kind: Literal["markov"] = Field(description="exponential on/off periods")
    mean_on_s: float = Field(
        3600.0, gt=0, allow_inf_nan=False, description="mean length of an online period, s"
    )
    mean_off_s: float = Field(
        1800.0, gt=0, allow_inf_nan=False, description="mean length of an offline period, s"
    )
    start_online: bool | None = Field(
        None,
        description="state at time 0: true/false for every device, or null to draw it per device from the "
        "stationary distribution (online with probability mean_on / (mean_on + mean_off))",
    )


class DiurnalAvailability(Strict):
    """Online once a day for ``online_hours`` from a per-device start hour (e.g. phones charging at night)."""

    kind: Literal["diurnal"] = Field(description="one online window a day")
    online_hours: float = Field(8.0, ge=0, le=24, description="length of the daily online window, hours")
    start_hour_mean: float = Field(
        22.0, allow_inf_nan=False, description="mean hour at which the window opens (wrapped to [0, 24))"
    )
    start_hour_std: float = Field(
        1.5,
        ge=0,
        allow_inf_nan=False,
        description="std of the per-device start hour, drawn once per device, hours",
    )
    day_s: float = Field(86400.0, gt=0, allow_inf_nan=False, description="length of a simulated day, s")


class TraceAvailability(Strict):
    """Replay measured on/off intervals from a trace file."""

    kind: Literal["trace"] = Field(description="replay a trace file")
    format: Literal["fedscale", "csv"] = Field(
        description="fedscale: a FedScale client_behave_trace pickle, repeated with period finish_time; "
        "csv: header device,online_from,online_until (seconds), not repeated"
    )
    path: str = Field(
        min_length=1, description="trace file; a relative path is relative to the scenario file's folder"
    )
    mapping: Literal["modulo", "random"] = Field(
        "modulo",
        description="how simulated devices get trace clients: modulo: device i takes the (i mod count)-th client in "
        "sorted id order; random: the same through a seeded permutation of the clients",
    )


AvailabilityConfig = Annotated[
    AlwaysAvailability | BernoulliAvailability | MarkovAvailability | DiurnalAvailability | TraceAvailability,
    Field(discriminator="kind", description="when the group's devices are online"),
]
AVAILABILITY_KINDS: tuple[str, ...] = ("always", "bernoulli", "markov", "diurnal", "trace")
availability_adapter: TypeAdapter[AvailabilityConfig] = TypeAdapter(AvailabilityConfig)


def parse_availability(data: object) -> AvailabilityConfig:
    """Validate a mapping such as ``{"kind": "markov", "mean_on_s": 600}`` into a config model."""
    return availability_adapter.validate_python(data)
