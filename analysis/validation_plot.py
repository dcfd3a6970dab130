"""Predicted against measured training time and energy (``iotfl-sim profiles check --plot``): log-log, one panel
per quantity, the line y = x and the band within 25 % of it, points coloured by device class; an energy measured on
compute rails only (not the whole board) is drawn hollow.

Takes plain numbers (the check's rows), so it imports nothing of the simulator."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from analysis.figure_kit import literal, run_colors

BAND = 0.25


@dataclass(frozen=True)
class Point:
    device_class: str
    measured: float
    predicted: float
    rails: bool = False  # energy of compute rails only: hollow


def scatter_figure(time: Sequence[Point], energy: Sequence[Point], classes: Sequence[str], title: str) -> Figure:
    """The two panels; ``classes`` fixes the colour order (every class the points use must be in it)."""
    fig = Figure(figsize=(11.0, 5.2), layout="constrained")
    colors = dict(zip(classes, run_colors(len(classes)), strict=True))
    used: list[str] = []
    hollow = False
    for ax, points, what, unit in (
        (fig.add_subplot(1, 2, 1), time, "training time", "s"),
        (fig.add_subplot(1, 2, 2), energy, "training energy", "J"),
    ):
        ax.set_title(what, fontsize=11)
        ax.set_xlabel(f"measured ({unit})")
        ax.set_ylabel(f"predicted ({unit})")
        if not points:
            ax.text(0.5, 0.5, "no row publishes energy or power", ha="center", va="center", transform=ax.transAxes)
            ax.set_xticks([])
            ax.set_yticks([])
            continue
        ax.grid(True, which="both", alpha=0.25, linewidth=0.5)
        vals = np.array([[p.measured, p.predicted] for p in points])
        lo, hi = float(vals.min()) / 2, float(vals.max()) * 2
        x = np.geomspace(lo, hi, 50)
        ax.fill_between(x, x * (1 - BAND), x * (1 + BAND), color="0.85", linewidth=0)
        ax.plot(x, x, color="0.3", linewidth=0.8)
        for c in classes:
            for rails in (False, True):
                mine = [p for p in points if p.device_class == c and p.rails == rails]
                if mine:
                    face = "none" if rails else colors[c]
                    ax.scatter([p.measured for p in mine], [p.predicted for p in mine], s=22, facecolors=face,
                               edgecolors=colors[c], zorder=3)  # fmt: skip
                    used.append(c)
                    hollow = hollow or rails
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_aspect("equal")
    handles = [Line2D([], [], marker="o", linestyle="", color=colors[c], label=literal(c)) for c in dict.fromkeys(used)]
    if hollow:
        handles.append(Line2D([], [], marker="o", linestyle="", markerfacecolor="none", color="0.3", label="rails only"))
    handles += [
        Line2D([], [], color="0.3", linewidth=0.8, label="predicted = measured"),
        Line2D([], [], color="0.85", linewidth=6, label=f"within {BAND:.0%}"),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 7), frameon=False, fontsize=9)
    fig.suptitle(literal(title), fontsize=12)
    return fig
