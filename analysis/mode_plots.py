"""Run figures that only asynchronous, semi-asynchronous and hierarchical runs have data for.

Each returns None when no run has its data (a synchronous, flat run has none), so such runs get no empty
figure. Registered with the others in ``analysis.plots.iter_figures``; the columns and events are those of
the run-folder format: rounds.csv ``updates_applied``, ``bytes_backhaul_down``, ``bytes_backhaul_up``;
events.jsonl ``apply`` events with their ``staleness``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from analysis.event_log import MAX_SCAN_BYTES, event_digest, may_apply_updates
from analysis.figure_kit import (
    bytes_unit,
    finish_axes,
    finite_xy,
    legend_labels,
    nanmax,
    new_figure,
    place_legend,
    run_legend,
    run_title,
    time_unit,
)
from analysis.rundir import Run

__all__ = ["fig_staleness", "fig_updates_per_hour", "fig_backhaul_bytes", "staleness_counts", "updates_rate"]

# side-by-side bars up to this many (bins x runs); past it each run is a step outline (bars would be hairlines)
MAX_STALENESS_BARS = 120
# the window of the update rate: the shortest of these (seconds) that cuts the longest run into at most
# MAX_RATE_WINDOWS windows, so that windows read as round numbers of minutes or hours
RATE_WINDOWS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400,
                  172800, 604800)  # fmt: skip
MAX_RATE_WINDOWS = 30


# ---------------------------------------------------------------------------------------------------------
# staleness of applied updates, from events.jsonl


def staleness_counts(run: Run) -> tuple[np.ndarray, bool] | None:
    """(counts, truncated): ``counts[s]`` = updates applied with staleness ``s`` (server versions between
    the download and the apply), over every ``apply`` event of the run; None when it has none."""
    if not may_apply_updates(run):  # (the log of a synchronous run is not read for it)
        return None
    digest = event_digest(run)
    return None if digest.staleness is None else (digest.staleness, digest.staleness_truncated)


def fig_staleness(runs: Sequence[Run], colors: list) -> Figure | None:
    """Share of each run's applied updates at each staleness (integer bins): bars side by side per run, or a
    step outline per run when the bins are too many for bars; the legend gives each run's mean staleness."""
    per_run = [staleness_counts(r) for r in runs]
    if all(p is None for p in per_run):
        return None
    top = max(p[0].size for p in per_run if p is not None)
    shown = [(i, p[0]) for i, p in enumerate(per_run) if p is not None]
    bins = np.arange(top)
    fig, ax = new_figure()
    labels = legend_labels(runs)
    handles = []
    as_bars = top * len(shown) <= MAX_STALENESS_BARS
    width = 0.8 / len(shown)
    for j, (i, counts) in enumerate(shown):
        share = 100.0 * np.pad(counts, (0, top - counts.size)) / counts.sum()
        mean = float(np.dot(np.arange(counts.size), counts) / counts.sum())
        text = f"{labels[i]}: mean {mean:.2f} ({int(counts.sum()):,} updates)" if len(runs) > 1 else (
            f"mean {mean:.2f} ({int(counts.sum()):,} updates)")  # fmt: skip
        if as_bars:
            ax.bar(bins - 0.4 + width * (j + 0.5), share, width * 0.92, color=colors[i])
            handles.append(Patch(facecolor=colors[i], label=text))
        else:
            ax.stairs(share, np.arange(top + 1) - 0.5, color=colors[i], lw=1.6)
            handles.append(Line2D([], [], color=colors[i], lw=1.6, label=text))
    place_legend(ax, handles)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlim(-0.6, top - 0.4)
    ax.set_ylim(bottom=0)
    ax.grid(False, axis="x")
    ax.set_axisbelow(True)
    ax.set_xlabel("staleness (server model versions between a client's download and its update's apply)")
    ax.set_ylabel("share of applied updates (%)")
    title = "Staleness of applied updates"
    if any(p is not None and p[1] for p in per_run):
        title += f" (the event log's first {MAX_SCAN_BYTES / 2**30:g} GiB)"
    run_title(ax, title, runs)
    return fig


# ---------------------------------------------------------------------------------------------------------
# update throughput, from rounds.csv


def rate_window(span_s: float) -> float:
    """The counting window (seconds) for runs lasting up to ``span_s`` simulated seconds."""
    return next((float(w) for w in RATE_WINDOWS_S if span_s / w <= MAX_RATE_WINDOWS), span_s / MAX_RATE_WINDOWS)


def _duration_text(s: float) -> str:
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if s >= size:
            return f"{s / size:g} {unit}"
    return f"{s:g} s"


def updates_rate(t: np.ndarray, applied: np.ndarray, window_s: float) -> tuple[np.ndarray, np.ndarray]:
    """(edges, per_hour): client updates applied per simulated hour in consecutive windows of ``window_s``
    from 0 to the last row's time (the last window ends there; one shorter than half a window joins the one
    before it, whose rate a single update would otherwise dwarf); ``applied`` is the cumulative count at each
    row's ``t``, so a row's updates count in the window holding its time."""
    t, applied = finite_xy(t, applied)
    order = np.argsort(t, kind="stable")
    t, applied = t[order], applied[order]
    if not t.size or t[-1] <= 0:
        return np.zeros(0), np.zeros(0)
    n = max(1, math.ceil(t[-1] / window_s - 1e-9))  # (a run of exactly k windows gets k, not k + a sliver)
    edges = window_s * np.arange(n + 1.0)
    edges[-1] = t[-1]
    if n > 1 and edges[-1] - edges[-2] < window_s / 2:
        edges = np.delete(edges, -2)
    last_row = np.searchsorted(t, edges, side="right") - 1
    cumulative = np.where(last_row >= 0, applied[np.maximum(last_row, 0)], 0.0)
    cumulative[0] = 0.0
    return edges, np.diff(cumulative) / np.diff(edges) * 3600.0


def updates_applied(run: Run) -> np.ndarray | None:
    """Cumulative client updates folded into the model by each row: rounds.csv's ``updates_applied``, or for a
    synchronous run (which has none) its accepted updates, ``completed``, summed over the rounds."""
    applied = run.column("updates_applied")
    if applied is not None:
        return applied
    completed = run.column("completed")
    return None if completed is None else np.cumsum(np.nan_to_num(completed))


def fig_updates_per_hour(runs: Sequence[Run], colors: list) -> Figure | None:
    """Client updates applied per simulated hour against simulated time, counted in fixed windows (the same
    for every run, a round number of seconds, minutes or hours giving at most 30 windows), drawn as steps.

    A rate rather than the cumulative count: asynchronous and semi-asynchronous runs overlaid as cumulative
    curves differ only in slope, which the eye compares poorly, whereas the rate reads off the axis as
    throughput and shows when it changes (devices depleted or offline, slow devices holding a buffer back);
    the cumulative count is rounds.csv's ``updates_applied`` itself. A synchronous run overlaid on them is
    drawn from its accepted updates per round (``updates_applied``); the figure exists only beside a run that
    has the column.
    """
    if not any(r.column("updates_applied") is not None for r in runs):
        return None
    applied = [updates_applied(r) for r in runs]
    have = [a is not None and r.column("sim_time_s") is not None for r, a in zip(runs, applied, strict=True)]
    span = nanmax([r.column("sim_time_s") for r, h in zip(runs, have, strict=True) if h])
    window = rate_window(span)
    unit, div = time_unit(span)
    fig, ax = new_figure()
    handles = []
    for run, color, h, a, text in zip(runs, colors, have, applied, legend_labels(runs), strict=True):
        if h:
            edges, rate = updates_rate(run.column("sim_time_s"), a, window)
            if rate.size:
                ax.stairs(rate, edges / div, color=color, lw=1.8)
                handles.append(Line2D([], [], color=color, lw=2, label=text))
    if len(runs) > 1:
        place_legend(ax, handles)
    finish_axes(ax, runs, "Update throughput", f"simulated time ({unit})",
                f"client updates applied per hour\n(counted per {_duration_text(window)})")
    return fig


# ---------------------------------------------------------------------------------------------------------
# device links vs backhaul, from rounds.csv


def _summed(run: Run, columns: tuple[str, str]) -> np.ndarray | None:
    """The sum of two cumulative byte columns (one of them may be absent); None when both are."""
    cols = [c for c in (run.column(n) for n in columns) if c is not None]
    return np.sum(cols, axis=0) if cols else None


DEVICE_LINK_COLUMNS = ("bytes_down", "bytes_up")
BACKHAUL_COLUMNS = ("bytes_backhaul_down", "bytes_backhaul_up")


def fig_backhaul_bytes(runs: Sequence[Run], colors: list) -> Figure | None:
    """Cumulative bytes on the device links (down + up, solid) and on the gateways' backhaul to the cloud
    (down + up, dashed) against simulated time; flat runs overlaid with hierarchical ones show their device
    links only."""
    if all(_summed(r, BACKHAUL_COLUMNS) is None for r in runs):
        return None
    series = [(_summed(r, DEVICE_LINK_COLUMNS), _summed(r, BACKHAUL_COLUMNS)) for r in runs]
    b_unit, b_div = bytes_unit(nanmax([s for pair in series for s in pair]))
    t_unit, t_div = time_unit(nanmax([r.column("sim_time_s") for r in runs]))
    fig, ax = new_figure()
    for run, color, pair in zip(runs, colors, series, strict=True):
        for values, ls in zip(pair, ("-", "--"), strict=True):
            x, y = finite_xy(run.column("sim_time_s"), values)
            if x.size:  # cumulative counts: nothing has crossed any link at t = 0
                ax.plot(np.r_[0.0, x] / t_div, np.r_[0.0, y] / b_div, color=color, ls=ls, lw=1.6)
    run_legend(ax, runs, colors, [("-", "device links (down + up)"), ("--", "backhaul, gateways ↔ cloud (down + up)")])
    finish_axes(ax, runs, "Device links vs backhaul", f"simulated time ({t_unit})", f"cumulative traffic ({b_unit})")
    return fig
