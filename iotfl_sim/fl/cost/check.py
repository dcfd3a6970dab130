"""The cost model's training time and energy beside measured ones (``iotfl-sim profiles check``).

Each measurement row is priced as the engine prices a device's local training (``opcost.device_train_seconds``:
the row's samples in batches of ``batch_size``, the last one partial when ``samples`` says so, one SGD step each with momentum 0.9, the scenario default, and
neither weight decay nor gradient clipping, the plain loop a source times), in the power mode the row names when the
profile has it, and charged the energy the engine charges (``energy.training_energy_j``).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from iotfl_sim.fl.cost import opcost
from iotfl_sim.fl.cost.corpus import DEPTH_FAMILIES, CorpusError, Measurement
from iotfl_sim.fl.cost.energy import training_energy_j
from iotfl_sim.fl.models.fedx import ofa_spec
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec
from iotfl_sim.scenario.profile import DeviceProfile, Rates

STEP = opcost.StepOptions(momentum=0.9)
DEFAULT_MODES = ("", "default")  # a row's power_mode meaning the profile's default mode


@dataclass(frozen=True)
class Checked:
    """One measurement with the cost model's prediction beside it."""

    m: Measurement
    profile: str
    mode: str  # the profile's power mode the row was priced in ("" = its default)
    time_s: float
    energy_j: float
    note: str = ""

    @property
    def time_err(self) -> float:
        """Signed relative error of the predicted time: (predicted - measured) / measured."""
        return (self.time_s - self.m.time_s) / self.m.time_s

    @property
    def energy_err(self) -> float | None:
        e = self.m.measured_energy_j
        return None if e is None else (self.energy_j - e) / e


def mode_for(profile: DeviceProfile, m: Measurement) -> tuple[str | None, str]:
    """(the profile's power mode to price row ``m`` in, None for its default; a note when the row's mode is not
    one of the profile's and the default stands in for it)."""
    wanted = m.power_mode.strip()
    modes = profile.compute.power_modes or {}
    if wanted.lower() in DEFAULT_MODES:
        return None, ""
    for name in modes:
        if name.lower() == wanted.lower():
            return name, ""
    return None, f"power mode {wanted!r} is not one of {profile.name}'s ({', '.join(modes) or 'none'}): its default priced"


def build_error(m: Measurement, e: Exception) -> CorpusError:
    return CorpusError(
        f"{m.file}: row {m.row!r} (line {m.line}), column model: the cost model cannot build {m.model} for input "
        f"{'x'.join(map(str, m.input_shape))} with {m.classes} classes ({str(e).splitlines()[0] if str(e) else type(e).__name__}); "
        "give a family and input shape it builds (iotfl-sim schema lists the families)"
    )


def spec_of(m: Measurement) -> SubmodelSpec:
    """The sub-network the row trains, built as the simulator's methods build it: an ``ofa_mbv3`` row with a
    ``depth`` is FedX's (d, e) sub-network (``fl.models.fedx.ofa_spec``, e = width x 6), any other a width rate."""
    if m.depth is not None:
        return ofa_spec(m.depth, round(m.width * DEPTH_FAMILIES[m.model][1]))
    return SubmodelSpec(m.width)


def _priced(m: Measurement, rates: Rates, price: Callable[..., Any]) -> Any:
    """``price`` (``opcost.device_train_seconds`` or ``device_train_parts``) of the row's training on ``rates``."""
    ch, h, w = m.input_shape
    recipe = ModelRecipe(m.model, m.classes, ch, (h, w))
    roofline = (rates.flops, rates.mem_bw, rates.op_overhead_s, rates.kernels, rates.steps) if rates.roofline else None
    try:
        return price(recipe, spec_of(m), m.samples_total, 1, m.batch_size, rates.flops, roofline, STEP)
    except (ValueError, RuntimeError, NotImplementedError) as e:  # the family refuses the shape
        raise build_error(m, e) from None


def predict_seconds(m: Measurement, rates: Rates) -> float:
    """Seconds the engine prices the row's training at, on a device with ``rates``."""
    return _priced(m, rates, opcost.device_train_seconds)


def predict_energy_j(m: Measurement, rates: Rates, seconds: float) -> float:
    """Joules the engine charges for the row's training (``energy.training_energy_j``: the constant ``train_w``, or
    the activity-dependent power over the training's roofline parts when the rates set its terms)."""
    parts = _priced(m, rates, opcost.device_train_parts) if rates.compute_w is not None else None
    return training_energy_j(rates, seconds, parts)


def check_row(m: Measurement, profile: DeviceProfile, rates: Rates | None = None) -> Checked:
    """Row ``m`` priced on ``profile`` (or on ``rates`` when given: a fit's candidate values)."""
    mode, note = mode_for(profile, m)
    r = rates if rates is not None else profile.rates(mode)
    t = predict_seconds(m, r)
    return Checked(m, profile.name, mode or "", t, predict_energy_j(m, r, t), note)


def with_values(rates: Rates, **values: object) -> Rates:
    """``rates`` with some of its values (flops, mem_bw, op_overhead_s, kernels, train_w, the activity levels)
    replaced."""
    return dataclasses.replace(rates, **values)


@dataclass(frozen=True)
class Spread:
    """Absolute relative errors of one quantity over a set of rows."""

    n: int
    median: float
    worst: float
    worst_row: str


def spread(rows: Sequence[Checked], err: Callable[[Checked], float | None]) -> Spread | None:
    got = [(abs(e), c.m.label) for c in rows if (e := err(c)) is not None]
    if not got:
        return None
    worst = max(got)
    return Spread(len(got), statistics.median(a for a, _ in got), worst[0], worst[1])


def summary(rows: Sequence[Checked]) -> dict[str, dict[str, Spread | None]]:
    """{'all' and each device class: {'time': Spread, 'energy': Spread or None, 'rails': Spread or None}}.

    'energy' is over the rows whose energy is the board's (``power_scope`` board or not stated), what the
    profile's ``train_w`` stands for; 'rails' over the rows that measured compute rails only, kept apart because
    a rail reading leaves out the rest of the board, so its error is not the energy model's alone."""
    groups = {"all": list(rows)}
    for c in rows:
        groups.setdefault(c.m.device_class, []).append(c)
    return {
        g: {
            "time": spread(rs, lambda c: c.time_err),
            "energy": spread([c for c in rs if not c.m.rails], lambda c: c.energy_err),
            "rails": spread([c for c in rs if c.m.rails], lambda c: c.energy_err),
        }
        for g, rs in groups.items()
    }
