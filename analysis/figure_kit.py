"""What every run figure shares: one colour per run, units, an empty figure, titles and legends outside the axes.

Used by ``analysis.plots``, ``analysis.mode_plots`` and ``analysis.study_plots``; matplotlib's object API only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from analysis.rundir import Run

FIGSIZE = (7.5, 4.6)


def run_colors(n: int) -> list[tuple[float, float, float]]:
    """One distinct colour per run (tab10, then tab20 for more than 10 runs)."""
    cmap = colormaps["tab10"] if n <= 10 else colormaps["tab20"]
    cols = list(cmap.colors)  # type: ignore[attr-defined]
    return [tuple(cols[i % len(cols)]) for i in range(n)]  # type: ignore[misc]


# ---------------------------------------------------------------------------------------------------------
# units and small helpers


def time_unit(max_s: float) -> tuple[str, float]:
    return ("h", 3600.0) if max_s > 2 * 3600 else ("s", 1.0)


def _thousands(largest: float, names: tuple[str, str, str]) -> tuple[str, float]:
    """(name, divisor) for values up to ``largest``: names of x 1e6, x 1e3 and x 1 (the larger from 10,000 of it)."""
    if largest >= 1e7:
        return names[0], 1e6
    if largest >= 1e4:
        return names[1], 1e3
    return names[2], 1.0


def energy_unit(max_j: float) -> tuple[str, float]:
    return _thousands(max_j, ("MJ", "kJ", "J"))


def carbon_unit(max_g: float) -> tuple[str, float]:
    return _thousands(max_g, ("t CO2", "kg CO2", "g CO2"))


def bytes_unit(max_b: float) -> tuple[str, float]:
    return ("GB", 1e9) if max_b >= 1e10 else ("MB", 1e6)


def nanmax(arrays: Sequence[np.ndarray | None]) -> float:
    vals = [float(np.nanmax(a)) for a in arrays if a is not None and a.size and not np.isnan(a).all()]
    return max(vals, default=0.0)


def new_figure(height: float | None = None) -> tuple[Figure, Any]:
    fig = Figure(figsize=(FIGSIZE[0], height or FIGSIZE[1]), layout="constrained")
    ax = fig.add_subplot()
    ax.grid(True, alpha=0.3, linewidth=0.6)
    return fig, ax


def literal(text: str) -> str:
    """``text`` as matplotlib draws it verbatim: a ``$`` would start mathtext, and user text (run names, labels)
    such as ``$\\frac{`` would crash the figure; an escaped ``\\$`` is drawn as a plain dollar sign."""
    return text.replace("$", r"\$")


def run_title(ax: Any, title: str, runs: Sequence[Run]) -> None:
    """Figure title; a single run's label goes below it in small grey (several runs get a legend instead)."""
    ax.figure.suptitle(title, fontsize=12)
    if len(runs) == 1:
        ax.set_title(literal(runs[0].label), fontsize=9, color="0.35", pad=4)


LEGEND_BESIDE_MIN = 7  # a legend of this many entries or more goes beside the axes, a shorter one below them


def place_legend(ax: Any, handles: Sequence[Any]) -> None:
    """The figure's legend outside the axes, where it covers no curve, bar or marker: below them (up to 3
    entries a row, fewer when they are long) when short, beside them when long (the figure widens by 2.6 in, the axes keep their width)."""
    if not handles:
        return
    fig = ax.get_figure()
    if len(handles) < LEGEND_BESIDE_MIN:
        longest = max(len(str(h.get_label())) for h in handles)  # long entries take fewer to a row, or they clip
        per_row = 3 if longest <= 30 else 2 if longest <= 48 else 1
        fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), per_row), fontsize="small",
                   frameon=False)  # fmt: skip
        return
    w, h = fig.get_size_inches()
    fig.set_size_inches(w + 2.6, h)
    fig.legend(handles=handles, loc="outside right upper", fontsize="small", frameon=False)


def target_lines(ax: Any, targets: Sequence[float]) -> list[Any]:
    """A dotted grey line per target accuracy (a fraction) across axes in percent, named at its right end;
    returns the legend entry."""
    if not targets:
        return []
    for t in targets:
        ax.axhline(100 * t, color="0.45", lw=0.8, ls=":", zorder=1)
        ax.annotate(f"{100 * t:g}%", (1.0, 100 * t), xycoords=("axes fraction", "data"), xytext=(2, 0),
                    textcoords="offset points", va="center", ha="left", fontsize=7, color="0.35")  # fmt: skip
    return [Line2D([], [], color="0.45", lw=0.8, ls=":", label="target accuracy")]


def legend_labels(runs: Sequence[Run]) -> list[str]:
    """Each run's legend text (drawn verbatim); when the runs differ in server mode, each names its own
    (``· sync``, ``· async``, ``· semi_async``) so that a reader of an overlay sees which curve is which.
    A run that names no mode predates the modes: it was synchronous."""
    modes = [r.server_mode or "sync" for r in runs]
    if len(set(modes)) > 1:
        return [literal(f"{r.label} · {m}") for r, m in zip(runs, modes, strict=True)]
    return [literal(r.label) for r in runs]


def run_legend(ax: Any, runs: Sequence[Run], colors: list, styles: Sequence[tuple[str, str]] = (),
            extra: Sequence[Any] = ()) -> None:  # fmt: skip
    """One legend: a coloured entry per run (when several), then grey line-style entries."""
    handles: list[Any] = []
    if len(runs) > 1:
        handles += [Line2D([], [], color=c, lw=2, label=t) for t, c in zip(legend_labels(runs), colors, strict=True)]
    if styles:
        style_color = "0.35" if len(runs) > 1 else colors[0]
        handles += [Line2D([], [], color=style_color, lw=1.6, ls=ls, label=lab) for ls, lab in styles]
    place_legend(ax, handles + list(extra))


def finish_axes(ax: Any, runs: Sequence[Run], title: str, xlabel: str, ylabel: str) -> None:
    """Axis labels, both axes from 0 (counts and times), and the title."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    run_title(ax, title, runs)


def finite_xy(x: np.ndarray | None, y: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    if x is None or y is None:
        return np.zeros(0), np.zeros(0)
    mask = np.isfinite(x) & np.isfinite(y)
    return x[mask], y[mask]
