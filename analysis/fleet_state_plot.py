"""The fleet's physical state over simulated time (rounds.csv's sampled columns, ``iotfl_sim.fleet.observe``): one
panel per quantity a run has, one line style per device class, one colour per run.

- state of charge (``soc_<class>``, %) with the incoming power (``harvest_w_<class>``) shaded under it, so that
  charging and harvest read against the battery;
- temperature (``temp_c_<class>``, °C), with the Raspberry Pi 4's throttle limits drawn, and the mean clock of the
  sampled devices' last training (``clock_<class>``, % of full: below 100 when they throttled);
- link rate (``down_mbps_<class>``, Mbit/s) of classes on a bandwidth trace.

None when no run has any of them.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from analysis.figure_kit import FIGSIZE, finite_xy, legend_labels, literal, nanmax, place_legend, time_unit
from analysis.rundir import Run

PANELS = (
    ("soc", "state of charge (%)", 100.0),
    ("temp_c", "temperature (°C)", 1.0),
    ("clock", "clock of the last training (% of full)", 100.0),
    ("down_mbps", "link rate, down (Mbit/s)", 1.0),
)
STYLES = ("-", "--", ":", "-.")


def _classes(runs: Sequence[Run], kind: str) -> list[str]:
    prefix = f"{kind}_"
    names = {
        c[len(prefix) :] for r in runs for c in r.rounds if c.startswith(prefix) and r.column(c) is not None
    }
    return sorted(names)


def fig_fleet_state(runs: Sequence[Run], colors: list) -> Figure | None:
    """State of charge, temperature and link rate per device class against simulated time; None without data."""
    panels = [(k, label, scale, _classes(runs, k)) for k, label, scale in PANELS]
    panels = [p for p in panels if p[3]]
    if not panels:
        return None
    unit, div = time_unit(nanmax([r.column("sim_time_s") for r in runs]))
    fig = Figure(figsize=(FIGSIZE[0], 2.4 * len(panels) + 1.0), layout="constrained")
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    classes = sorted({c for p in panels for c in p[3]})
    style = dict(zip(classes, itertools.cycle(STYLES), strict=False))
    shaded = False
    for ax, (kind, label, scale, names) in zip(axes, panels, strict=True):
        ax.grid(True, alpha=0.3, linewidth=0.6)
        for run, color in zip(runs, colors, strict=True):
            t = run.column("sim_time_s")
            for name in names:
                x, y = finite_xy(t, run.column(f"{kind}_{name}"))
                if not x.size:
                    continue
                ax.plot(
                    x / div,
                    y * scale,
                    color=color,
                    ls=style[name],
                    lw=1.6,
                    marker="." if x.size < 30 else None,
                )
                if kind == "soc":
                    hx, hw = finite_xy(t, run.column(f"harvest_w_{name}"))
                    if hx.size and np.nanmax(hw) > 0:
                        twin = ax.twinx()
                        twin.fill_between(hx / div, hw, step="post", color=color, alpha=0.12, lw=0)
                        twin.set_ylabel("power in (W)", color="0.45", fontsize=8)
                        twin.set_ylim(bottom=0)
                        shaded = True
        if kind in ("soc", "clock"):
            ax.set_ylim(0, 105)
        if kind == "temp_c":
            for limit in (80.0, 85.0):
                ax.axhline(limit, color="0.5", lw=0.8, ls=":")
        ax.set_ylabel(label)
    axes[-1].set_xlabel(f"simulated time ({unit})")
    axes[-1].set_xlim(left=0)
    fig.suptitle("Fleet state (a sample of each class's devices)", fontsize=12)
    if len(runs) == 1:
        axes[0].set_title(literal(runs[0].label), fontsize=9, color="0.35", pad=4)
    handles: list = []
    if len(runs) > 1:
        handles += [
            Line2D([], [], color=c, lw=2, label=t) for t, c in zip(legend_labels(runs), colors, strict=True)
        ]
    handles += [Line2D([], [], color="0.35", lw=1.6, ls=style[c], label=literal(c)) for c in classes]
    if shaded:
        handles.append(Patch(color="0.5", alpha=0.25, label="power coming in (charger, panel)"))
    place_legend(axes[-1], handles)
    return fig
