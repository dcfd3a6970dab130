"""First-order thermal throttling: how long a device runs at full clock, and what a task costs once it is hot.

Model (every choice here is a modelling decision a study should be able to quote):

- **One lumped RC node.** The SoC, its heat spreader and the board are one thermal mass:
  ``C dT/dt = P(t) - (T - T_amb) / R``, time constant ``tau = R C``. Under constant power ``P`` from ``T0``:
  ``T(t) = T_amb + P R + (T0 - T_amb - P R) exp(-t / tau)``. Real boards have at least two time constants (a die that
  jumps by ~10 K within seconds of a load step, a board that creeps for minutes); one node reproduces the time to the
  throttle point that it is fitted on, not the shape of the first seconds (benchmarks/thermal_rpi4.md shows the gap).
- **Power follows the clock linearly.** ``P(f) = P_idle + (P_full - P_idle) f`` for the clock fraction ``f`` in
  (0, 1]. This ignores that DVFS also lowers the voltage (dynamic power ~ f V^2), so a throttled device here draws
  more power, and cools more slowly, than a real one; it also ignores leakage rising with temperature. Power does not
  depend on temperature, so within a phase of constant clock the power is constant and the energy is ``P t``.
- **Three clock bands set by the temperature**, as the Raspberry Pi firmware does: full clock below ``soft_c``,
  ``soft_clock`` from ``soft_c`` up to ``hard_c``, ``hard_clock`` at and above ``hard_c``. Nothing lower: a device
  whose steady temperature at ``hard_clock`` is above ``hard_c`` keeps heating (real firmware would step further down
  and eventually shut down; not modelled).
- **Averaged bang-bang at a threshold.** When the temperature reaches a threshold and the clock of the band it enters
  would pull it straight back (the band above's steady temperature is below the threshold, the band below's above
  it), real firmware oscillates around the threshold. Here the temperature is held exactly at the threshold and the
  clock is the time average ``f*`` with ``P(f*) = (threshold - T_amb) / R``, which lies between the two bands'
  clocks. Work and energy in such a holding phase are linear in time.
- **Work.** A task needs ``work_s`` seconds at full clock; at clock fraction ``f`` it progresses ``f`` seconds of
  work per wall second (compute-bound: no memory-bound part that the clock would not slow).

Everything is closed form, float in and float out, with ``math`` only (the fleet calls it once per task).

Parameters of :data:`RPI4` (Raspberry Pi 4 Model B, bare board with the stock firmware's limits), derivations in
benchmarks/thermal_rpi4.md:

- ``soft_c`` 80 °C and ``hard_c`` 85 °C: Raspberry Pi documentation, "Frequency management and thermal control"
  (between 80 and 85 °C the Arm cores are progressively throttled; at 85 °C both the Arm cores and the GPU).
- ``soft_clock`` 1000/1500 and ``hard_clock`` 600/1500: R. Longbottom, "Raspberry Pi 4B Stress Tests Including High
  Performance Linpack" (2019): full 1500 MHz until 80 °C, then 1000 MHz, then 750, 600 and lower; the Pi 4's cpufreq
  table has exactly these states (600, 750, 1000, 1500 MHz; a published ``cpufreq stats`` dump, pastebin hjSm0EPJ).
  The firmware's intermediate 750 MHz step is folded into the two bands.
- ``r_k_per_w`` 10.2 K/W: idle 56 °C at 24.5 °C ambient with the fan removed (virten.net, "Thermal Throttling on
  Raspberry Pi 4 running ESXi-Arm", 2020) at the 3.1 W idle power of device_profiles/raspberry_pi_4b.yaml:
  (56 - 24.5) / 3.1 = 10.16 K/W.
- ``tau_s`` 110 s: least-squares fit of the one-node curve (with the R above and the 3.1 -> 6.2 W step of the same
  profile) to a published 10-second ``stress -c 4`` log of a Pi 4 on launch firmware (pastebin 9zGtFR1e, June 2019),
  samples from 30 s on; benchmarks/thermal_rpi4.py repeats the fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

INF = math.inf


@dataclass(frozen=True)
class Thermal:
    """A device's thermal parameters: one RC node and the firmware's two throttle levels."""

    r_k_per_w: float  # junction-to-ambient thermal resistance, K/W
    tau_s: float  # thermal time constant R*C, seconds
    soft_c: float = 80.0  # temperature at which the clock drops to soft_clock, °C
    hard_c: float = 85.0  # temperature at which the clock drops to hard_clock, °C
    soft_clock: float = 1000.0 / 1500.0  # fraction of full clock between soft_c and hard_c
    hard_clock: float = 600.0 / 1500.0  # fraction of full clock at and above hard_c

    def __post_init__(self) -> None:
        if not (self.r_k_per_w > 0 and math.isfinite(self.r_k_per_w)):
            raise ValueError(f"thermal: r_k_per_w must be a positive finite number, got {self.r_k_per_w}")
        if not (self.tau_s > 0 and math.isfinite(self.tau_s)):
            raise ValueError(f"thermal: tau_s must be a positive finite number, got {self.tau_s}")
        if not (0 < self.hard_clock <= self.soft_clock <= 1):
            raise ValueError(
                f"thermal: need 0 < hard_clock <= soft_clock <= 1, got {self.hard_clock} and {self.soft_clock}"
            )
        if not (self.soft_c < self.hard_c):
            raise ValueError(f"thermal: need soft_c < hard_c, got {self.soft_c} and {self.hard_c}")


# Raspberry Pi 4 Model B, bare board, stock firmware limits; sources in the module docstring.
RPI4 = Thermal(
    r_k_per_w=10.2,  # (56 - 24.5) °C / 3.1 W idle: virten.net 2020 idle reading, idle power of raspberry_pi_4b.yaml
    tau_s=110.0,  # fitted to a published stress -c 4 log (pastebin 9zGtFR1e); benchmarks/thermal_rpi4.py
    soft_c=80.0,  # Raspberry Pi docs: Arm cores progressively throttled from 80 °C
    hard_c=85.0,  # Raspberry Pi docs: hard limit, Arm and GPU throttled
    soft_clock=1000.0 / 1500.0,  # Longbottom 2019: 1500 MHz -> 1000 MHz at 80 °C
    hard_clock=600.0 / 1500.0,  # Longbottom 2019: then 750, 600 MHz; 600 MHz is cpufreq's lowest state
)


THERMAL_BOARDS: dict[str, Thermal] = {"raspberry_pi_4": RPI4}  # what a group's thermal.board names


class WorkResult(NamedTuple):
    duration_s: float  # wall time to finish the work
    energy_j: float  # integral of power over the wall time
    end_c: float  # temperature when the work is done
    throttled_s: float  # wall time spent below full clock
    onset_s: float | None  # wall offset of the first throttled moment; None if never throttled


class Phase(NamedTuple):
    start_s: float  # wall offset of the phase
    duration_s: float  # wall length
    clock: float  # clock fraction (the time-averaged one in a holding phase)
    start_c: float  # temperature at the start
    end_c: float  # temperature at the end
    steady_c: float  # temperature the phase relaxes toward (== start_c == end_c when holding)
    holding: bool  # held at a threshold by the averaged bang-bang


def power_at(idle_w: float, full_w: float, clock: float) -> float:
    """Power at clock fraction ``clock``: idle plus the clock's share of the power above idle."""
    return idle_w + (full_w - idle_w) * clock


def steady_c(th: Thermal, amb_c: float, power_w: float) -> float:
    """Temperature the node relaxes toward under constant ``power_w``."""
    return amb_c + power_w * th.r_k_per_w


def relax(th: Thermal, t0_c: float, target_c: float, dt_s: float) -> float:
    """Temperature after ``dt_s`` from ``t0_c`` relaxing exponentially toward ``target_c``."""
    return target_c + (t0_c - target_c) * math.exp(-dt_s / th.tau_s)


def onset_time(th: Thermal, t0_c: float, amb_c: float, power_w: float) -> float:
    """Seconds under constant ``power_w`` from ``t0_c`` until the temperature reaches ``soft_c``.

    0 if already at or above it, ``inf`` if the steady temperature does not exceed it.
    """
    if t0_c >= th.soft_c:
        return 0.0
    s = steady_c(th, amb_c, power_w)
    if s <= th.soft_c:
        return INF
    return th.tau_s * math.log((s - t0_c) / (s - th.soft_c))


def cool(th: Thermal, t0_c: float, amb_c: float, idle_w: float, dt_s: float) -> float:
    """Temperature after ``dt_s`` seconds idle at ``idle_w`` (relaxes toward ``amb_c + idle_w * R``)."""
    return relax(th, t0_c, steady_c(th, amb_c, idle_w), dt_s)


def _band(th: Thermal, t_c: float) -> int:
    return 0 if t_c < th.soft_c else (1 if t_c < th.hard_c else 2)


def work_phases(
    th: Thermal, t0_c: float, amb_c: float, idle_w: float, full_w: float, work_s: float
) -> tuple[Phase, ...]:
    """The piecewise closed-form trajectory of a task needing ``work_s`` seconds at full clock."""
    if work_s < 0:
        raise ValueError(f"thermal: work_s must be >= 0, got {work_s}")
    if not (full_w >= idle_w):
        raise ValueError(f"thermal: need full_w >= idle_w, got {full_w} and {idle_w}")
    clocks = (1.0, th.soft_clock, th.hard_clock)
    lower = (None, th.soft_c, th.hard_c)  # threshold at the bottom of each band
    upper = (th.soft_c, th.hard_c, None)  # threshold at the top of each band
    r = th.r_k_per_w
    phases: list[Phase] = []
    t = 0.0
    temp = t0_c
    left = work_s
    band = _band(th, temp)
    for _ in range(8):  # a trajectory crosses each threshold at most once, then holds or finishes
        if left <= 0:
            break
        f = clocks[band]
        s = amb_c + power_at(idle_w, full_w, f) * r
        if s > temp and upper[band] is not None and s > upper[band]:
            theta, step = upper[band], +1
        elif s < temp and lower[band] is not None and s < lower[band]:
            theta, step = lower[band], -1
        else:
            theta, step = None, 0
        t_exit = INF if theta is None else th.tau_s * math.log((s - temp) / (s - theta))
        if left <= f * t_exit:
            dur = left / f
            end = relax(th, temp, s, dur)
            phases.append(Phase(t, dur, f, temp, end, s, False))
            return tuple(phases)
        if t_exit > 0:
            phases.append(Phase(t, t_exit, f, temp, theta, s, False))
        t += t_exit
        left -= f * t_exit
        temp = theta
        # at the threshold: does the band we enter push the temperature straight back?
        nb = band + step
        s_next = amb_c + power_at(idle_w, full_w, clocks[nb]) * r
        if (step > 0 and s_next <= theta) or (step < 0 and s_next >= theta):
            # averaged bang-bang: hold at theta with the clock whose steady temperature is theta
            p_hold = (theta - amb_c) / r
            span = full_w - idle_w
            f_hold = clocks[nb] if span <= 0 else (p_hold - idle_w) / span
            f_hold = min(max(f_hold, min(f, clocks[nb])), max(f, clocks[nb]))
            dur = left / f_hold
            phases.append(Phase(t, dur, f_hold, theta, theta, theta, True))
            return tuple(phases)
        band = nb
    raise RuntimeError("thermal: trajectory did not settle (unreachable with validated parameters)")


def run_work(
    th: Thermal, t0_c: float, amb_c: float, idle_w: float, full_w: float, work_s: float
) -> WorkResult:
    """Wall time, energy, end temperature, throttled time and throttle onset of ``work_s`` seconds of full-clock work
    started at ``t0_c`` (see the module docstring for the model)."""
    if work_s == 0:
        return WorkResult(0.0, 0.0, t0_c, 0.0, None)
    energy = 0.0
    throttled = 0.0
    onset = None
    end = t0_c
    total = 0.0
    for ph in work_phases(th, t0_c, amb_c, idle_w, full_w, work_s):
        energy += power_at(idle_w, full_w, ph.clock) * ph.duration_s
        if ph.clock < 1.0 and ph.duration_s > 0:
            throttled += ph.duration_s
            if onset is None:
                onset = ph.start_s
        end = ph.end_c
        total = ph.start_s + ph.duration_s
    return WorkResult(total, energy, end, throttled, onset)


def temperature_at(phases: tuple[Phase, ...], tau_s: float, t_s: float) -> float:
    """Temperature at wall offset ``t_s`` along ``work_phases``' trajectory (clamped to its ends)."""
    if not phases:
        raise ValueError("thermal: no phases")
    for ph in phases:
        if t_s <= ph.start_s + ph.duration_s:
            dt = max(t_s - ph.start_s, 0.0)
            if ph.holding:
                return ph.start_c
            return ph.steady_c + (ph.start_c - ph.steady_c) * math.exp(-dt / tau_s)
    return phases[-1].end_c
