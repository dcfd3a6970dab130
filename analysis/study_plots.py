"""Figures of a study (or of methods grouped from run folders) with the spread over seeds.

Every curve is a method's **mean over seeds with a band of ± 1 sample standard deviation** (ddof=1;
a method with one seed has no band). Seeds are aligned on the x axis by **linear interpolation onto a
common grid of 200 points** spanning the x range every seed covers (from the largest first x to the
smallest last x over the method's seeds), so no seed is extrapolated; "devices alive" uses the last
value at or before each grid point (it is a step function). Per-round curves align on the round number.
Bars are means with ± 1 std error bars over the seeds that reached the target (``n/N`` under a bar some
seeds did not reach, ``N/A`` where none did).

One colour per method, computed once (``method_colors``) and used by every figure; figures are written
as PNG and SVG.
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from analysis.compare import crossing, run_metrics, selection_targets
from analysis.figure_kit import (
    FIGSIZE,
    bytes_unit,
    carbon_unit,
    energy_unit,
    literal,
    place_legend,
    run_colors,
    target_lines,
    time_unit,
)
from analysis.plots import energy_by_class, load_plot_runs, plot_loaded, shown_targets, some_device_died
from analysis.rundir import Run
from analysis.study import Method, Selection, is_study_dir, require_runs, select
from analysis.targets import Targets, resolve_targets, target_label

__all__ = ["method_colors", "study_figures", "write_study_plots", "STUDY_FIGURES", "figure_svg", "figure_png"]

GRID_POINTS = 200
DPI = 150
BAND = "band: ± 1 std over seeds"

STUDY_FIGURES = (
    "accuracy_vs_time",
    "accuracy_vs_energy",
    "accuracy_vs_bytes",
    "time_to_accuracy",
    "energy_to_accuracy",
    "carbon_to_accuracy",
    "communication_waste",
    "energy_by_class",
    "devices_alive",
    "bytes_per_round",
)


def method_colors(methods: Sequence[Method]) -> dict[str, tuple[float, float, float]]:
    """One colour per method label, in method order (tab10, tab20 beyond 10 methods)."""
    return dict(zip((m.label for m in methods), run_colors(len(methods)), strict=True))


# ---------------------------------------------------------------------------------------------------------
# alignment


def _xy(run: Run, x_col: str | tuple[str, ...], y_col: str) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(x_col, tuple):
        parts = [run.column(c) for c in x_col]
        if any(p is None for p in parts):
            return np.zeros(0), np.zeros(0)
        x = np.sum(parts, axis=0)
    else:
        x = run.column(x_col)
    y = run.column(y_col)
    if x is None or y is None:
        return np.zeros(0), np.zeros(0)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    order = np.argsort(x, kind="stable")
    return x[order], y[order]


def align(
    curves: Sequence[tuple[np.ndarray, np.ndarray]], step: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """(grid, values[seed, grid]) on the x range every curve covers; linear (or step) interpolation."""
    curves = [(x, y) for x, y in curves if x.size]
    if not curves:
        return np.zeros(0), np.zeros((0, 0))
    lo = max(float(x[0]) for x, _ in curves)
    hi = min(float(x[-1]) for x, _ in curves)
    if hi < lo:  # the seeds do not overlap: fall back to the union, without extrapolating
        lo, hi = min(float(x[0]) for x, _ in curves), max(float(x[-1]) for x, _ in curves)
    grid = np.linspace(lo, hi, GRID_POINTS) if hi > lo else np.array([lo])
    vals = np.full((len(curves), grid.size), np.nan)
    for i, (x, y) in enumerate(curves):
        inside = (grid >= x[0]) & (grid <= x[-1])
        if step:
            idx = np.searchsorted(x, grid, side="right") - 1
            vals[i, inside] = y[np.clip(idx, 0, None)][inside]
        else:
            vals[i, inside] = np.interp(grid[inside], x, y)
    return grid, vals


def mean_std(vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and sample std (ddof=1) over axis 0, ignoring nan; std is nan where fewer than 2 values."""
    ok = np.isfinite(vals)
    n = ok.sum(axis=0)
    mean = np.where(n > 0, np.where(ok, vals, 0.0).sum(axis=0) / np.maximum(n, 1), np.nan)
    dev = np.where(ok, vals - mean, 0.0)
    std = np.where(n > 1, np.sqrt((dev**2).sum(axis=0) / np.maximum(n - 1, 1)), np.nan)
    return mean, std


# ---------------------------------------------------------------------------------------------------------
# figures


def _new() -> tuple[Figure, Any]:
    fig = Figure(figsize=FIGSIZE, layout="constrained")
    ax = fig.add_subplot()
    ax.grid(True, alpha=0.3, linewidth=0.6)
    return fig, ax


def _legend(ax: Any, methods: Sequence[Method], colors: dict, extra: Sequence[Any] = ()) -> None:
    handles: list[Any] = [
        Line2D([], [], color=colors[m.label], lw=2, label=literal(f"{m.label} (n={len(m.runs)})")) for m in methods
    ]
    place_legend(ax, handles + list(extra))


def _acc_scale(methods: Sequence[Method]) -> float:
    vals = [np.nanmax(c) for m in methods for r in m.runs if (c := r.column("acc_full")) is not None]
    return 100.0 if not vals or max(vals) <= 1.0 + 1e-9 else 1.0


def _curve_figure(
    methods: Sequence[Method],
    colors: dict,
    x_col: str | tuple[str, ...],
    y_col: str,
    xlabel_unit: Callable[[float], tuple[str, float]],
    xlabel: str,
    ylabel: str,
    title: str,
    y_scale: float = 1.0,
    step: bool = False,
    targets: Sequence[float] = (),
) -> Figure | None:
    per = {m.label: [_xy(r, x_col, y_col) for r in m.runs] for m in methods}
    xmax = max((float(x[-1]) for cs in per.values() for x, _ in cs if x.size), default=0.0)
    if xmax <= 0 and not any(x.size for cs in per.values() for x, _ in cs):
        return None
    unit, div = xlabel_unit(xmax)
    fig, ax = _new()
    drew = False
    for m in methods:
        grid, vals = align(per[m.label], step=step)
        if not grid.size:
            continue
        mean, std = mean_std(vals)
        c = colors[m.label]
        if step:
            ax.step(grid / div, mean * y_scale, where="post", color=c, lw=1.8)
        else:
            ax.plot(grid / div, mean * y_scale, color=c, lw=1.8)
        if np.isfinite(std).any():
            ax.fill_between(
                grid / div, (mean - std) * y_scale, (mean + std) * y_scale, color=c, alpha=0.2, lw=0
            )
        drew = True
    if not drew:
        return None
    lines = []
    if targets:  # accuracy curves: a line per target (y_scale 100: fractions drawn in percent)
        best = max((float(np.nanmax(y)) for cs in per.values() for _, y in cs if y.size), default=0.0)
        lines = target_lines(ax, shown_targets(targets, best * y_scale / 100))
    _legend(ax, methods, colors, [Patch(facecolor="0.6", alpha=0.35, label=BAND), *lines])
    ax.set_xlabel(f"{xlabel} ({unit})")
    ax.set_ylabel(ylabel)
    ax.set_xlim(left=0)
    fig.suptitle(title, fontsize=12)
    return fig


def _time_units(v: float) -> tuple[str, float]:
    return time_unit(v)


def _bytes_units(v: float) -> tuple[str, float]:
    """GB / MB as the run plots, kB and B for small (synthetic, system-only) runs."""
    if v >= 1e6:
        return bytes_unit(v)
    return ("kB", 1e3) if v >= 1e3 else ("B", 1.0)


def fig_accuracy_vs(methods: Sequence[Method], colors: dict, what: str, targets: Sequence[float] = ()) -> Figure | None:
    """Mean accuracy over seeds against time, energy or bytes, with a line per target accuracy."""
    s = _acc_scale(methods)
    ylabel = "test accuracy, full model (%)"
    if what == "time":
        return _curve_figure(methods, colors, "sim_time_s", "acc_full", _time_units, "simulated time", ylabel,
                             "Accuracy vs simulated time", s, targets=targets)  # fmt: skip
    if what == "energy":
        return _curve_figure(methods, colors, "energy_j", "acc_full", energy_unit, "cumulative fleet energy",
                             ylabel, "Accuracy vs fleet energy", s, targets=targets)  # fmt: skip
    return _curve_figure(methods, colors, ("bytes_down", "bytes_up"), "acc_full", _bytes_units,
                         "cumulative bytes, down + up", ylabel, "Accuracy vs bytes on the wire", s,
                         targets=targets)  # fmt: skip


def fig_devices_alive(methods: Sequence[Method], colors: dict) -> Figure | None:
    """Devices alive, mean over seeds; only when a device of some run died (a flat line says nothing)."""
    if not any(some_device_died(r) for m in methods for r in m.runs):
        return None
    return _curve_figure(methods, colors, "sim_time_s", "alive", _time_units, "simulated time", "devices alive (count)",
                         "Devices alive (not depleted)", step=True)  # fmt: skip


def fig_bytes_per_round(methods: Sequence[Method], colors: dict) -> Figure | None:
    """Bytes down + up of each round against the round number."""
    per: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for m in methods:
        cs = []
        for r in m.runs:
            d, u, rnd = r.column("bytes_down_round"), r.column("bytes_up_round"), r.column("round")
            if d is None or u is None or rnd is None:
                continue
            cs.append((rnd, np.nan_to_num(d) + np.nan_to_num(u)))
        per[m.label] = cs
    ymax = max((float(np.max(y)) for cs in per.values() for _, y in cs if y.size), default=0.0)
    if not any(per.values()):
        return None
    unit, div = _bytes_units(ymax)
    fig, ax = _new()
    for m in methods:
        cs = per[m.label]
        if not cs:
            continue
        rounds = np.unique(np.concatenate([x for x, _ in cs]))
        vals = np.full((len(cs), rounds.size), np.nan)
        for i, (x, y) in enumerate(cs):
            vals[i, np.searchsorted(rounds, x)] = y
        mean, std = mean_std(vals)
        c = colors[m.label]
        ax.plot(rounds, mean / div, color=c, lw=1.6)
        if np.isfinite(std).any():
            ax.fill_between(rounds, (mean - std) / div, (mean + std) / div, color=c, alpha=0.2, lw=0)
    _legend(ax, methods, colors, [Patch(facecolor="0.6", alpha=0.35, label=BAND)])
    ax.set_xlabel("round (number)")
    ax.set_ylabel(f"bytes per round, down + up ({unit})")
    ax.set_ylim(bottom=0)
    fig.suptitle("Communication per round", fontsize=12)
    return fig


def _bars(
    ax: Any,
    groups: Sequence[str],
    methods: Sequence[Method],
    colors: dict,
    cells: dict[str, list[list[float]]],
    div: float,
) -> None:
    """Grouped bars: cells[method][group] = values over seeds (nan = not reached)."""
    n = len(methods)
    width = 0.8 / max(n, 1)
    x = np.arange(len(groups), dtype=float)
    top = max((np.nanmax(v) for vs in cells.values() for v in vs if np.isfinite(v).any()), default=1.0) / div
    labelled = 0.0  # the highest "k/n seeds" label's foot
    for i, m in enumerate(methods):
        pos = x - 0.4 + width * (i + 0.5)
        for j, vals in enumerate(cells[m.label]):
            a = np.asarray(vals, dtype=float)
            f = a[np.isfinite(a)] / div
            if not f.size:
                ax.text(
                    pos[j],
                    top * 0.02,
                    "N/A",
                    ha="center",
                    va="bottom",
                    fontsize=7,
                    rotation=90,
                    color=colors[m.label],
                )
                continue
            err = f.std(ddof=1) if f.size > 1 else 0.0
            ax.bar(
                pos[j],
                f.mean(),
                width * 0.92,
                color=colors[m.label],
                yerr=err if f.size > 1 else None,
                capsize=3,
            )
            if f.size < a.size:
                ax.text(
                    pos[j], f.mean() + err, f"{f.size}/{a.size} seeds", ha="center", va="bottom", fontsize=7
                )
                labelled = max(labelled, f.mean() + err)
    ax.set_xticks(x, groups)
    # every group whole, whatever it holds: one of only "N/A" labels (no bar) would be left out of the data
    # limits, and the ticks would end the axis at its centre
    ax.set_xlim(-0.5, len(groups) - 0.5)
    # and room above the highest "k/n seeds" label for its text (autoscaling leaves 5 % of the axis, ~ its height)
    if labelled > 0 and ax.get_ylim()[1] < 1.12 * labelled:
        ax.set_ylim(top=1.12 * labelled)
    ax.grid(False, axis="x")
    ax.set_axisbelow(True)


def fig_to_accuracy(
    methods: Sequence[Method], colors: dict, targets: Sequence[float], what: str
) -> Figure | None:
    col = {"time": "sim_time_s", "energy": "energy_j", "carbon": "carbon_g"}[what]
    if what == "carbon" and not any(r.column("carbon_g") is not None for m in methods for r in m.runs):
        return None  # runs without fleet.carbon
    cells = {
        m.label: [[(cr or {}).get(col, math.nan) for cr in (crossing(r, t) for r in m.runs)] for t in targets]
        for m in methods
    }
    vals = [v for vs in cells.values() for g in vs for v in g if math.isfinite(v)]
    if not any(r.column("acc_full") is not None for m in methods for r in m.runs):
        return None
    unit, div = {"time": time_unit, "energy": energy_unit, "carbon": carbon_unit}[what](max(vals, default=0.0))
    fig, ax = _new()
    missed = [t for i, t in enumerate(targets) if not any(math.isfinite(v) for vs in cells.values() for v in vs[i])]
    best = _best_accuracy(methods)
    if not vals:  # nothing to draw: say so on the axes instead of leaving them empty
        ax.set_xticks([])
        ax.set_yticks([])
        ax.text(0.5, 0.5, f"No method reached {_or(missed)} in any seed.\n{best}", transform=ax.transAxes,
                ha="center", va="center", fontsize=10, color="0.25", wrap=True)  # fmt: skip
    else:
        _bars(ax, [target_label(t) for t in targets], methods, colors, cells, div)
        if missed:
            ax.set_title(f"no method reached {_or(missed)} (N/A); {best}", fontsize=8, color="0.35")
    handles = [Patch(facecolor=colors[m.label], label=literal(f"{m.label} (n={len(m.runs)})")) for m in methods]
    if vals:
        handles.append(Line2D([], [], color="k", lw=1, label="error bar: ± 1 std over seeds that reached it"))
    place_legend(ax, handles)
    ax.set_xlabel("target test accuracy, full model (%)")
    if what == "time":
        ax.set_ylabel(f"simulated time to reach it ({unit})")
        fig.suptitle("Time to accuracy", fontsize=12)
    elif what == "energy":
        ax.set_ylabel(f"fleet energy to reach it ({unit})")
        fig.suptitle("Energy to accuracy", fontsize=12)
    else:
        ax.set_ylabel(f"grid carbon to reach it ({unit})")
        fig.suptitle("Carbon to accuracy", fontsize=12)
    return fig


def _or(targets: Sequence[float]) -> str:
    labels = [target_label(t) for t in targets]
    return labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + " or " + labels[-1]


def _best_accuracy(methods: Sequence[Method]) -> str:
    """The best acc_full any seed reached, and whose, in words."""
    best, who = -math.inf, ""
    for m in methods:
        for r in m.runs:
            acc = r.column("acc_full")
            if acc is not None and float(np.nanmax(acc)) > best:
                best, who = float(np.nanmax(acc)), m.label
    if not math.isfinite(best):
        return "no accuracy was evaluated"
    return f"best accuracy reached: {100 * best if best <= 1 else best:.1f}% ({literal(who)})"


def fig_waste(methods: Sequence[Method], colors: dict) -> Figure | None:
    """Communication waste per method: the rate (% of the parameters sent that did not come back) and the
    bytes wasted (downloads and uploads of tasks whose update was not used); mean ± 1 std over seeds."""
    ms = {m.label: [run_metrics(r, ()) for r in m.runs] for m in methods}
    rate = {lab: [rm.comm_waste for rm in rms] for lab, rms in ms.items()}
    wasted = {lab: [rm.bytes_wasted for rm in rms] for lab, rms in ms.items()}
    has_bytes = any(math.isfinite(v) for vs in wasted.values() for v in vs)
    if not any(math.isfinite(v) for vs in rate.values() for v in vs) and not has_bytes:
        return None
    fig = Figure(figsize=FIGSIZE, layout="constrained")
    axes = fig.subplots(1, 2 if has_bytes else 1, squeeze=False)[0]
    b_unit, b_div = _bytes_units(max((v for vs in wasted.values() for v in vs if math.isfinite(v)), default=0.0))
    panels = [(axes[0], rate, 0.01, "communication waste (% of parameters sent)")]
    if has_bytes:
        panels.append((axes[1], wasted, b_div, f"bytes wasted, down + up ({b_unit})"))
    x = np.arange(len(methods), dtype=float)
    for ax, data, div, ylabel in panels:
        ax.grid(True, axis="y", alpha=0.3, linewidth=0.6)
        ax.set_axisbelow(True)
        for i, m in enumerate(methods):
            f = np.asarray(data[m.label], dtype=float)
            f = f[np.isfinite(f)] / div
            if not f.size:
                ax.text(x[i], 0, "N/A", ha="center", va="bottom", fontsize=7, rotation=90, color=colors[m.label])
                continue
            ax.bar(x[i], f.mean(), 0.7, color=colors[m.label], yerr=f.std(ddof=1) if f.size > 1 else None, capsize=3)
        ax.set_xticks(x, [literal(m.label) for m in methods], rotation=30 if len(methods) > 3 else 0,
                      ha="right" if len(methods) > 3 else "center", fontsize=8)  # fmt: skip
        ax.set_ylabel(ylabel)
        ax.set_ylim(bottom=0)
    axes[0].set_xlabel("method")
    handles = [Patch(facecolor=colors[m.label], label=literal(f"{m.label} (n={len(m.runs)})")) for m in methods]
    place_legend(axes[0], [*handles, Line2D([], [], color="k", lw=1, label="error bar: ± 1 std over seeds")])
    fig.suptitle("Communication waste per method", fontsize=12)
    return fig


def fig_energy_by_class(methods: Sequence[Method], colors: dict) -> Figure | None:
    per = {m.label: [energy_by_class(r) for r in m.runs] for m in methods}
    classes = sorted({c for ps in per.values() for p in ps if p for c in p})
    if not classes:
        return None
    cells = {
        lab: [[sum(p[c].values()) if p and c in p else math.nan for p in ps] for c in classes]
        for lab, ps in per.items()
    }
    vmax = max((v for vs in cells.values() for g in vs for v in g if math.isfinite(v)), default=0.0)
    unit, div = energy_unit(vmax)
    fig, ax = _new()
    _bars(ax, classes, methods, colors, cells, div)
    handles = [Patch(facecolor=colors[m.label], label=literal(f"{m.label} (n={len(m.runs)})")) for m in methods]
    handles.append(Line2D([], [], color="k", lw=1, label="error bar: ± 1 std over seeds"))
    place_legend(ax, handles)
    ax.set_xlabel("device class")
    ax.set_ylabel(f"energy used per run ({unit})")
    fig.suptitle("Energy by device class", fontsize=12)
    return fig


def iter_study_figures(
    sel: Selection, targets: Sequence[float] | None = None
) -> Iterator[tuple[str, Figure]]:
    """(name, figure) for every study figure the data supports; ``targets`` None: the runs' own."""
    methods = [m for m in sel.methods if m.runs]
    if not methods:
        return
    targets = selection_targets(sel, targets).values
    colors = method_colors(methods)
    builders: list[tuple[str, Callable[[], Figure | None]]] = [
        ("accuracy_vs_time", lambda: fig_accuracy_vs(methods, colors, "time", targets)),
        ("accuracy_vs_energy", lambda: fig_accuracy_vs(methods, colors, "energy", targets)),
        ("accuracy_vs_bytes", lambda: fig_accuracy_vs(methods, colors, "bytes", targets)),
        ("time_to_accuracy", lambda: fig_to_accuracy(methods, colors, targets, "time")),
        ("energy_to_accuracy", lambda: fig_to_accuracy(methods, colors, targets, "energy")),
        ("carbon_to_accuracy", lambda: fig_to_accuracy(methods, colors, targets, "carbon")),
        ("communication_waste", lambda: fig_waste(methods, colors)),
        ("energy_by_class", lambda: fig_energy_by_class(methods, colors)),
        ("devices_alive", lambda: fig_devices_alive(methods, colors)),
        ("bytes_per_round", lambda: fig_bytes_per_round(methods, colors)),
    ]
    for name, build in builders:
        fig = build()
        if fig is not None:
            yield name, fig


def study_figures(sel: Selection, targets: Sequence[float] | None = None) -> dict[str, Figure]:
    return dict(iter_study_figures(sel, targets))


def figure_svg(fig: Figure) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})
    return buf.getvalue()


def figure_png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def plot_paths(
    paths: Sequence[str | Path], out: Path | None = None, targets: Sequence[float] | None = None
) -> tuple[list[Path], Targets]:
    """``iotfl-sim plot``: a study (any path a study folder) gets the study figures in ``out`` (default
    ``<first>/plots``), run folders the overlaid run figures; returns the files and the targets used."""
    if any(is_study_dir(p) for p in paths):
        sel = select(paths)
        require_runs(sel, paths, "plot")
        chosen = selection_targets(sel, targets)
        return write_study_plots(sel, Path(out) if out else Path(paths[0]) / "plots", chosen.values), chosen
    runs = load_plot_runs(paths)
    chosen = resolve_targets(runs, targets)
    return plot_loaded(runs, Path(out) if out else Path(paths[0]) / "plots", chosen.values), chosen


def write_study_plots(sel: Selection, out: Path, targets: Sequence[float] | None = None) -> list[Path]:
    """Write every study figure as ``<name>.png`` and ``<name>.svg`` into ``out``; return the paths."""
    out.mkdir(parents=True, exist_ok=True)  # an OSError names the path in the way (the CLI: one line)
    written = []
    for name, fig in iter_study_figures(sel, targets):
        for ext in ("png", "svg"):
            target = out / f"{name}.{ext}"
            tmp = target.with_name(f".{target.name}.part")
            try:
                if ext == "png":
                    fig.savefig(tmp, format="png", dpi=DPI)
                else:
                    fig.savefig(tmp, format="svg", metadata={"Date": None})
                os.replace(tmp, target)
            finally:
                tmp.unlink(missing_ok=True)
            written.append(target)
    return written
