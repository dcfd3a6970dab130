"""Raspberry Pi 4 under sustained all-core load: `iotfl_sim.fleet.thermal` against published measurements.

What is compared (sources and their numbers in benchmarks/thermal_rpi4.md):

1. The temperature curve of a published `stress -c 4` run on a bare Pi 4 (launch firmware, June 2019; one reading
   every ~10 s; pastebin 9zGtFR1e). R is fixed from another published fact (idle 56 °C at 24.5 °C ambient,
   virten.net 2020, at the 3.1 W idle power of device_profiles/raspberry_pi_4b.yaml); tau is the one free parameter,
   fitted here by least squares on the readings from 30 s on. The bundled `RPI4.tau_s` is this fit rounded.
2. The model's 10-minute load curve from idle (56 °C, 24.5 °C ambient, 3.1 -> 6.2 W): time to 80 °C, the clock
   after it, the sustained (time-averaged) clock and the work lost, next to the published figures: throttling at
   80 °C down to 1000 MHz (Longbottom 2019), "a handful of minutes" to the throttle point (Tom's Hardware, 2019) and
   "less than a minute" with four cores (Longbottom 2019).

Writes benchmarks/thermal_rpi4.png (matplotlib, Agg) unless --no-plot. Pure arithmetic: runs in well under a second.

    PYTHONPATH=. python benchmarks/thermal_rpi4.py
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from iotfl_sim.fleet.thermal import RPI4, Thermal, run_work, temperature_at, work_phases

# pastebin 9zGtFR1e (2019-06-26): `stress -c 4 -t 900s` with `vcgencmd measure_temp` every `sleep 10`; the first
# reading (600 MHz) is taken as the load starts, the rest at 1500 MHz. Only the first 27 readings are readable here.
LOG_C = [
    52,
    62,
    64,
    65,
    67,
    68,
    70,
    71,
    71,
    72,
    72,
    72,
    73,
    73,
    74,
    74,
    74,
    75,
    76,
    75,
    75,
    76,
    77,
    76,
    78,
    77,
    78,
]
LOG_DT_S = 10.0
IDLE_W, FULL_W = 3.1, 6.2  # device_profiles/raspberry_pi_4b.yaml (raspberrypi/documentation power figures)
IDLE_C, AMB_C = 56.0, 24.5  # virten.net 2020: idle with the fan removed, DHT22 ambient
FULL_MHZ = 1500.0


def fit_tau(r_k_per_w: float, t_from_s: float = 30.0) -> tuple[float, float]:
    """Least-squares tau of the one-node step response through the log (start 52 °C, rise (6.2 - 3.1) W x R)."""
    t0 = LOG_C[0]
    s = t0 + (FULL_W - IDLE_W) * r_k_per_w
    pts = [(i * LOG_DT_S, c) for i, c in enumerate(LOG_C) if i * LOG_DT_S >= t_from_s]

    def sse(tau: float) -> float:
        return sum((s + (t0 - s) * math.exp(-t / tau) - c) ** 2 for t, c in pts)

    lo, hi = 10.0, 2000.0  # golden-section search on a unimodal SSE
    g = (math.sqrt(5) - 1) / 2
    for _ in range(200):
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
        if sse(a) < sse(b):
            hi = b
        else:
            lo = a
    tau = (lo + hi) / 2
    return tau, math.sqrt(sse(tau) / len(pts))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--png", default=str(Path(__file__).with_suffix(".png")))
    args = ap.parse_args()

    r = (IDLE_C - AMB_C) / IDLE_W
    tau, rms = fit_tau(r)
    print(f"R from idle: ({IDLE_C} - {AMB_C}) / {IDLE_W} = {r:.2f} K/W (bundled {RPI4.r_k_per_w})")
    print(f"tau fitted to the stress log (t >= 30 s): {tau:.1f} s, rms {rms:.2f} K (bundled {RPI4.tau_s})")

    # 1. the log against the model with the log's own start (52 °C) and the fitted node
    th_fit = Thermal(r_k_per_w=r, tau_s=tau)
    amb_log = LOG_C[0] - IDLE_W * r  # ambient implied by the log's idle reading under the same R
    ph_log = work_phases(th_fit, LOG_C[0], amb_log, IDLE_W, FULL_W, 900.0)
    print(f"\nlog vs model (start {LOG_C[0]} °C, implied ambient {amb_log:.1f} °C)")
    print("t_s  log_C  model_C")
    for i, c in enumerate(LOG_C):
        t = i * LOG_DT_S
        if i % 3 == 0 or i == len(LOG_C) - 1:
            print(f"{t:4.0f}  {c:5.1f}  {temperature_at(ph_log, tau, t):7.1f}")

    # 2. the bundled profile: 10 minutes of load from idle
    th = RPI4
    res = run_work(th, IDLE_C, AMB_C, IDLE_W, FULL_W, 600.0)
    ph = work_phases(th, IDLE_C, AMB_C, IDLE_W, FULL_W, 600.0)
    hold = [p for p in ph if p.holding]
    wall = 600.0
    # work done in 600 s of wall time (the task above needs more wall than 600 s once throttled)
    done = 0.0
    for p in ph:
        seg = max(0.0, min(p.duration_s, wall - p.start_s))
        done += p.clock * seg
    print("\nRPI4, 600 s of all-core load from idle (56 °C, ambient 24.5 °C, 3.1 -> 6.2 W)")
    print(f"steady at full clock: {AMB_C + FULL_W * th.r_k_per_w:.1f} °C")
    print(f"time to 80 °C (onset): {res.onset_s:.0f} s = {res.onset_s / 60:.1f} min")
    print(f"clock once throttled: {th.soft_clock * FULL_MHZ:.0f} MHz (soft band)")
    if hold:
        f = hold[0].clock
        print(f"held at {hold[0].start_c:.0f} °C with a time-averaged clock {f:.3f} = {f * FULL_MHZ:.0f} MHz")
    print(f"work in the first 600 s of wall: {done:.0f} s of full-clock work ({1 - done / wall:.1%} lost)")
    print(
        f"600 s of full-clock work takes {res.duration_s:.0f} s wall, {res.energy_j:.0f} J, ends at {res.end_c:.1f} °C"
    )
    print("sustained slowdown once held: " + (f"{1 / hold[0].clock:.2f}x" if hold else "none"))

    if args.no_plot:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    ts = [i * 2.0 for i in range(301)]
    ax1.plot(
        ts, [temperature_at(ph, th.tau_s, t) for t in ts], label="RPI4 model, from idle 56 °C (amb 24.5 °C)"
    )
    ax1.plot(
        ts,
        [temperature_at(ph_log, tau, t) for t in ts],
        "--",
        label=f"model, fitted tau {tau:.0f} s, from 52 °C",
    )
    ax1.plot(
        [i * LOG_DT_S for i in range(len(LOG_C))],
        LOG_C,
        "o",
        ms=3,
        label="stress -c 4 log (pastebin 9zGtFR1e)",
    )
    ax1.axhline(th.soft_c, color="grey", lw=0.5)
    ax1.axhline(th.hard_c, color="grey", lw=0.5)
    ax1.set_ylabel("SoC temperature (°C)")
    ax1.legend(fontsize=7, loc="lower right")

    def clock_at(t: float) -> float:
        for p in ph:
            if t < p.start_s + p.duration_s:
                return p.clock
        return ph[-1].clock

    ax2.step(
        ts, [clock_at(t) * FULL_MHZ for t in ts], where="post", label="RPI4 model (time-averaged when held)"
    )
    ax2.axhline(1000, color="grey", lw=0.5, ls=":")
    ax2.set_ylabel("Arm clock (MHz)")
    ax2.set_xlabel("time under load (s)")
    ax2.set_ylim(0, 1600)
    ax2.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(args.png, dpi=110)
    print(f"\nwrote {args.png}")


if __name__ == "__main__":
    main()
