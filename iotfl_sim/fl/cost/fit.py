"""A profile's free parameters fitted to measured training (``iotfl-sim profiles fit``).

Time parameters (compute FLOP/s, memory bandwidth, per-operator overhead) minimise the sum of squared log ratios
log(predicted / measured time) over the rows, within bounds (``BOUNDS``). Log ratios, not seconds: the rows span
milliseconds to hours and a relative error counts the same on each (in seconds the longest rows alone would set the
fit), 2x too slow weighs as much as 2x too fast, and the targets are relative errors. Training power ``train_w`` is
the board's power while training, so it is fitted to the measured average powers (published, or energy / time) by
the same criterion: their geometric mean, over the rows that measured the whole board (``power_scope`` rails rows
read part of it and are left out). Fitting it to energy / predicted time instead would fold the time model's
error into the power and carry it to every other workload.

A parameter the rows cannot determine is kept from the base: one no row's time depends on (elasticity below
``MIN_ELASTICITY`` at the fit: every op compute-bound leaves the bandwidth free) or one the rows cannot separate
from those already fitted (one workload gives one equation: FLOP/s and overhead trade off exactly). Parameters are
taken greedily, the one the times depend on most at the base's values first, and checked again at the fit.

The base's per-kernel rates (``compute.kernels``: depthwise convolutions, ...) keep their ratio to its dense rate:
fitting ``flops`` scales every kernel's FLOP/s by fitted / base FLOP/s (their fixed per-call overheads stay). That
ratio is a property of the board's cores and framework which the rows rarely determine (few time a depthwise model
beside a dense one), and left absolute, a fit that moves the dense rate 5x would leave depthwise work at the base's
rate and mis-price every model that has it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import least_squares

from iotfl_sim.fl.cost.check import Checked, check_row, mode_for, predict_seconds, with_values
from iotfl_sim.fl.cost.corpus import Measurement
from iotfl_sim.scenario.profile import DeviceProfile, KernelRates, Rates

TIME_PARAMS = ("flops", "mem_bw", "op_overhead")
PARAMS = (*TIME_PARAMS, "train_w")
FIELD = {"flops": "flops", "mem_bw": "mem_bw", "op_overhead": "op_overhead_s", "train_w": "train_w"}
# in SI units: FLOP/s, bytes/s, seconds per op, W; the widest a device could plausibly be
BOUNDS = {"flops": (1e5, 1e17), "mem_bw": (1e5, 1e14), "op_overhead": (1e-9, 1.0), "train_w": (1e-4, 1e4)}
MIN_ELASTICITY = 0.01  # d log(time) / d log(parameter) of at least one row
MIN_SEPARATION = 0.01  # smallest / largest singular value of the fitted parameters' normalised elasticities
_H = 1e-3  # central-difference step in log(parameter)


class FitError(ValueError):
    """Rows from which the asked-for parameters cannot be fitted; the message is one line."""


@dataclass
class Fit:
    rates: Rates  # the base's, with the fitted values
    fitted: list[str]
    kept: dict[str, str] = field(default_factory=dict)  # parameter -> why it was kept from the base
    rows: list[Checked] = field(default_factory=list)  # in-sample
    kernel_scale: float = 1.0  # fitted / base FLOP/s: the factor on every per-kernel FLOP/s (module docstring)


def operating_point(base: DeviceProfile, rows: Sequence[Measurement]) -> tuple[Rates, str | None]:
    """The base's rates in the one power mode the rows are priced in, without measured steps (they would rescale
    the fitted rates away for their family)."""
    modes = {mode_for(base, m)[0] for m in rows}
    if len(modes) > 1:
        named = ", ".join(sorted(m or "default" for m in modes))
        raise FitError(
            f"the rows are in {len(modes)} of {base.name}'s power modes ({named}); a fit gives one operating point: "
            "fit the rows of one mode at a time"
        )
    mode = modes.pop()
    r = base.rates(mode)
    return with_values(r, steps=()), mode


def candidates(rates: Rates) -> tuple[str, ...]:
    """Time parameters the model uses: without a memory bandwidth a profile is priced by FLOPs alone."""
    return TIME_PARAMS if rates.roofline else ("flops",)


def _log_values(rates: Rates, names: Sequence[str]) -> np.ndarray:
    return np.array([math.log(min(max(getattr(rates, FIELD[n]), BOUNDS[n][0]), BOUNDS[n][1])) for n in names])


def scaled_kernels(kernels: KernelRates, ratio: float) -> KernelRates:
    """``kernels`` with every FLOP/s (a flat rate or a curve's rates) times ``ratio``; overheads and a curve's
    call sizes unchanged."""
    return tuple((k, ov, tuple((f, r * ratio) for f, r in pts)) for k, ov, pts in kernels)


def _at(rates: Rates, names: Sequence[str], x: np.ndarray) -> Rates:
    values: dict = {FIELD[n]: float(math.exp(v)) for n, v in zip(names, x, strict=True)}
    if "flops" in values:  # the kernels keep their ratio to the dense rate (module docstring)
        values["kernels"] = scaled_kernels(rates.kernels, values["flops"] / rates.flops)
    return with_values(rates, **values)


def _residuals(rows: Sequence[Measurement], rates: Rates, names: Sequence[str], x: np.ndarray) -> np.ndarray:
    r = _at(rates, names, x)
    return np.array([math.log(predict_seconds(m, r) / m.time_s) for m in rows])


def elasticities(rows: Sequence[Measurement], rates: Rates, names: Sequence[str]) -> np.ndarray:
    """d log(predicted time) / d log(parameter), rows x parameters, by central differences."""
    x = _log_values(rates, names)
    cols = []
    for j in range(len(names)):
        e = np.zeros(len(names))
        e[j] = _H
        cols.append((_residuals(rows, rates, names, x + e) - _residuals(rows, rates, names, x - e)) / (2 * _H))
    return np.stack(cols, axis=1)


def determinable(jac: np.ndarray, names: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """(the parameters the rows determine, taken greedily by elasticity; why each other one is not)."""
    size = np.abs(jac).max(axis=0) if jac.size else np.zeros(len(names))
    keep: list[int] = []
    why: dict[str, str] = {}
    for j in np.argsort(-size, kind="stable"):
        n = names[j]
        if size[j] < MIN_ELASTICITY:
            why[n] = "no row's time depends on it"
            continue
        cols = jac[:, [*keep, j]] / size[[*keep, j]]
        s = np.zeros(cols.shape[1])  # fewer rows than parameters: the missing singular values are 0
        got = np.linalg.svd(cols, compute_uv=False)
        s[: len(got)] = got
        if len(keep) and s[-1] < MIN_SEPARATION * s[0]:
            why[n] = f"the rows cannot separate it from {', '.join(names[k] for k in keep)}"
            continue
        keep.append(int(j))
    return [names[k] for k in sorted(keep)], why


def _solve(rows: Sequence[Measurement], rates: Rates, names: Sequence[str]) -> Rates:
    if not names:
        return rates
    lo = np.log([BOUNDS[n][0] for n in names])
    hi = np.log([BOUNDS[n][1] for n in names])
    x0 = np.clip(_log_values(rates, names), lo, hi)
    res = least_squares(
        lambda x: _residuals(rows, rates, names, x), x0, bounds=(lo, hi), method="trf",
        ftol=1e-12, xtol=1e-12, gtol=1e-12, max_nfev=500,
    )  # fmt: skip
    return _at(rates, names, res.x)


def fit_power(rows: Sequence[Measurement]) -> float | None:
    """The geometric mean of the rows' measured average board powers, W (None when no row has one). Rows of
    ``power_scope`` rails are left out: ``train_w`` is the whole board's power, a rail reading only part of it."""
    p = [w for m in rows if (w := m.measured_power_w) is not None and not m.rails]
    if not p:
        return None
    lo, hi = BOUNDS["train_w"]
    return min(max(math.exp(sum(math.log(w) for w in p) / len(p)), lo), hi)


def fit(
    base: DeviceProfile, rows: Sequence[Measurement], rates: Rates, params: Sequence[str] | None = None
) -> Fit:
    """Fit ``params`` (None: every one the rows determine) of ``rates`` (``operating_point``) to ``rows``."""
    want = [p for p in (params or PARAMS) if p in TIME_PARAMS]
    usable = candidates(rates)
    kept: dict[str, str] = {}
    if params is not None:
        unused = [p for p in want if p not in usable]
        if unused:
            raise FitError(
                f"{base.name} has no compute.mem_bw_gbs, so time is FLOPs / FLOP/s and {', '.join(unused)} "
                "is not used; fit flops only, or add compute.mem_bw_gbs to the base"
            )
    else:
        kept.update({p: "the base has no compute.mem_bw_gbs (time is FLOPs / FLOP/s)" for p in TIME_PARAMS if p not in usable})
        want = [p for p in want if p in usable]
        want, why = determinable(elasticities(rows, rates, want), want)  # at the base: a fit's drift is arbitrary
        kept.update(why)
    while True:
        solved = _solve(rows, rates, want)
        ok, why = determinable(elasticities(rows, solved, want), want)
        if not why:
            break
        if params is not None:
            name, reason = next(iter(why.items()))
            raise FitError(
                f"the rows cannot determine {name} ({reason}); fit fewer parameters (--params "
                f"{','.join(ok) or 'flops'}) or add rows of other workloads"
            )
        kept.update(why)
        want = ok  # refit from the base without them: their drift in the first fit is arbitrary
    fitted = list(want)
    power = fit_power(rows)
    if power is not None and (params is None or "train_w" in params):
        # a fitted constant power replaces the base's activity levels, which would otherwise override it
        solved = with_values(solved, train_w=power, compute_w=None, memory_w=None, overhead_w=None)
        fitted.append("train_w")
    elif params is not None and "train_w" in params:
        raise FitError(
            f"the rows cannot determine train_w ({_no_power(rows)}); leave it out of --params"
        )
    else:
        kept.setdefault("train_w", _no_power(rows))
    scale = solved.flops / rates.flops if "flops" in fitted else 1.0
    return Fit(solved, fitted, kept, [check_row(m, base, solved) for m in rows], scale)


def _no_power(rows: Sequence[Measurement]) -> str:
    if any(m.measured_power_w is not None for m in rows):
        return "the rows' energy or power covers compute rails only (power_scope rails), not the board"
    return "no row publishes energy or power"


def workloads(rows: Sequence[Measurement]) -> list[tuple]:
    """The distinct workloads (model, width, input shape, batch) in the rows' order."""
    return list(dict.fromkeys(m.workload for m in rows))


def leave_one_out(
    base: DeviceProfile, rows: Sequence[Measurement], rates: Rates, key: Callable[[Measurement], Hashable]
) -> tuple[list[Checked], int]:
    """Each group of rows (rows of equal ``key``) predicted by a fit to every other group's rows (every parameter
    those determine), and how many of those fits kept a time parameter from the base; ([], 0) with fewer than two
    groups."""
    groups = list(dict.fromkeys(key(m) for m in rows))
    if len(groups) < 2:
        return [], 0
    out: list[Checked] = []
    short = 0
    for g in groups:
        f = fit(base, [m for m in rows if key(m) != g], rates)
        short += bool(set(f.kept) - {"train_w"} - set(k for k in TIME_PARAMS if k not in candidates(rates)))
        out.extend(check_row(m, base, f.rates) for m in rows if key(m) == g)
    order = {m.label: i for i, m in enumerate(rows)}
    return sorted(out, key=lambda c: order[c.m.label]), short


def leave_one_workload_out(base: DeviceProfile, rows: Sequence[Measurement], rates: Rates) -> tuple[list[Checked], int]:
    """Each workload's rows predicted by a fit to every other workload's rows (``leave_one_out`` by workload)."""
    return leave_one_out(base, rows, rates, lambda m: m.workload)
