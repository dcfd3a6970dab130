"""Figures of one or several run directories, written as PNG files.

Uses only the run-directory format (see ``analysis.rundir``) and matplotlib's object API with the Agg
canvas: no pyplot, no display, no global state.

    from analysis.plots import plot_runs
    plot_runs([Path("runs/a"), Path("runs/b")])          # -> runs/a/plots/*.png

Each run keeps one colour across every figure. A file we would write over is replaced only when it
was written by this module (recognised by a PNG text tag); any other file of that name is left alone
and the figure goes to ``name-1.png``, ``name-2.png``, ...
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from analysis.event_log import MAX_TIMELINE_DEVICES, SERVER, event_digest
from analysis.figure_kit import (
    bytes_unit,
    carbon_unit,
    energy_unit,
    finite_xy,
    legend_labels,
    literal,
    nanmax,
    new_figure,
    place_legend,
    run_colors,
    run_legend,
    run_title,
    target_lines,
    time_unit,
)
from analysis.fleet_state_plot import fig_fleet_state
from analysis.folder_hint import not_a_run_message
from analysis.mode_plots import fig_backhaul_bytes, fig_staleness, fig_updates_per_hour
from analysis.rundir import (
    FAILURE_EVENTS,
    PlotInputError,
    Run,
    disambiguate_labels,
    load_run,
)
from analysis.targets import resolve_targets

__all__ = ["PlotInputError", "plot_runs", "load_plot_runs", "plot_loaded", "build_figures", "FIGURE_NAMES"]

PNG_SOFTWARE = "iotfl-sim analysis.plots"
DPI = 150
# every timeline bar is drawn at least this fraction of the time axis wide: a 2 s task next to hour-long
# LoRaWAN uploads would otherwise be thinner than a pixel (phases after a widened bar shift right to follow it)
MIN_BAR_FRACTION = 0.004

# The server's row is split by kind of work (the server_work events' ``kind``; runs written before the split: other).
SERVER_KIND_COLORS = {
    "train": "#6A3D9A", "infer": "#B276B2", "aggregate": "#E377C2", "qsgd": "#8C564B", "other": "#BCBD22",
}  # fmt: skip
# hierarchical runs: the cloud's and the gateways' aggregations and the gateways' backhaul transfers (device -1
# events), each kind on a lane of its own above the devices
HIERARCHY_COLORS = {
    "cloud aggregate": "#A6761D", "gateway aggregate": "#17BECF", "backhaul down": "#999999", "backhaul up": "#555555",
}  # fmt: skip
PHASE_COLORS = {
    "download": "#5DA5DA", "train": "#60BD68", "upload": "#FAA43A",
    **{f"server: {k}": c for k, c in SERVER_KIND_COLORS.items()}, **HIERARCHY_COLORS,
}  # fmt: skip
# the hierarchy's lanes, top to bottom: (lane, its events' kind); their spans may overlap (gateways work in
# parallel), so a lane's bars are widened where they stand instead of pushed apart
HIERARCHY_LANES = (("cloud", "cloud_aggregate"), ("gateways", "gateway_aggregate"), ("backhaul", "backhaul"))
APPLY_STYLE = ("*", "#1A9850", "update applied to the model")  # asynchronous runs: the apply event
LATE_COLOR = "#7B3294"
# a task's failure on the timeline, by cause (the failure event, or a ``dropped`` event's reason): marker, colour,
# legend text
FAILURE_STYLE = {
    "oom": ("x", "#D62728", "failed: out of memory"),
    "offline": ("o", "#525252", "failed: device went offline"),
    "depleted": ("v", "#E6550D", "failed: battery ran dry"),
    "deadline": ("s", "#08519C", "dropped: deadline passed"),
    "surplus": ("+", "#31A354", "dropped: round already full (surplus)"),
    "refused": ("d", "#8C6D31", "refused by the device"),
}
# what the device classes of profiles (``device_class``) stand for, for the timeline's note
DEVICE_CLASS_NAMES = {
    "mcu": "microcontroller", "sbc": "single-board computer", "edge_gpu": "edge board with a GPU",
    "phone": "smartphone", "server": "server-class machine",
}  # fmt: skip
ENERGY_PARTS = (("compute", "energy_compute_j"), ("radio", "energy_radio_j"), ("idle", "energy_idle_j"))

# devices.csv columns the figures use (the file can have a million rows: read only these)
DEVICE_COLUMNS = ("device_class", "energy_j", *(c for _, c in ENERGY_PARTS))
DEVICE_COLUMNS_FIRST = (
    "device", "tasks", "failed_oom", "failed_depleted", "failed_offline", "failed_refused", "failed_deadline",
    "failed_surplus", *DEVICE_COLUMNS
)  # fmt: skip



# ---------------------------------------------------------------------------------------------------------
# public API


def plot_runs(
    runs: Sequence[str | Path], out: Path | None = None, targets: Sequence[float] | None = None
) -> list[Path]:
    """Write the figures of ``runs`` (run directories, overlaid) as PNGs into ``out``; return the paths.

    ``out`` defaults to ``<first run>/plots/`` and is created if needed. Figures whose data is absent
    (no evaluated rounds, no devices.csv, no events.jsonl, no device ever depleted ...) are skipped.
    ``targets``: the accuracies drawn as lines on the accuracy figures (None: the runs' own
    ``server.target_accuracies``, ``analysis.targets``).
    Raises PlotInputError when a run directory or its rounds.csv is missing or unreadable.
    """
    paths = [Path(runs)] if isinstance(runs, str | Path) else [Path(p) for p in runs]
    loaded = load_plot_runs(paths)
    return plot_loaded(loaded, Path(out) if out is not None else paths[0] / "plots",
                       resolve_targets(loaded, targets).values)  # fmt: skip


def load_plot_runs(paths: Sequence[str | Path]) -> list[Run]:
    """Run folders as the figures read them (devices.csv: only the columns they use), labels made unique."""
    if not paths:
        raise PlotInputError("no run directory given; a run directory must contain rounds.csv")
    for p in map(Path, paths):
        if p.is_dir() and not (p / "rounds.csv").exists():
            raise PlotInputError(not_a_run_message(p))
    loaded = [load_run(p, DEVICE_COLUMNS_FIRST if i == 0 else DEVICE_COLUMNS) for i, p in enumerate(paths)]
    disambiguate_labels(loaded)
    return loaded


def plot_loaded(loaded: Sequence[Run], out: Path, targets: Sequence[float]) -> list[Path]:
    """Write the figures of loaded runs into ``out`` (created if needed); return the paths."""
    out.mkdir(parents=True, exist_ok=True)  # an OSError names the path in the way (the CLI: one line)
    written: list[Path] = []
    for filename, fig in iter_figures(loaded, targets):
        target = _target_path(out, filename)
        tmp = target.with_name(f".{target.name}.part")
        try:
            fig.savefig(tmp, format="png", dpi=DPI, metadata={"Software": PNG_SOFTWARE})
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
        written.append(target)
    return written


def build_figures(runs: Sequence[Run], targets: Sequence[float] | None = None) -> dict[str, Figure]:
    """All figures for already loaded runs, by file name (for tests and notebooks)."""
    return dict(iter_figures(runs, resolve_targets(runs, targets).values))


def iter_figures(runs: Sequence[Run], targets: Sequence[float] = ()) -> Iterator[tuple[str, Figure]]:
    """Yield (file name, figure) for every figure the data supports, one at a time."""
    colors = run_colors(len(runs))
    for name, build in _builders(targets):
        fig = build(runs, colors)
        if fig is not None:
            yield name, fig


def _acc_scale(runs: Sequence[Run]) -> float:
    """Accuracies stored as fractions are shown in percent; values above 1 are taken as percent already."""
    m = nanmax([r.column(c) for r in runs for c in ("acc_full", "acc_avg")])
    return 100.0 if m <= 1.0 + 1e-9 else 1.0


def _round_axis(run: Run) -> np.ndarray:
    r = run.column("round")
    return r if r is not None else np.arange(run.n_rounds, dtype=float)


# ---------------------------------------------------------------------------------------------------------
# figures from rounds.csv


def shown_targets(targets: Sequence[float], best: float) -> list[float]:
    """The targets worth a line on an accuracy axis whose best value is ``best`` (a fraction): every target
    reached, and the first one not reached (higher ones would squash the curves to the bottom of the axes)."""
    ts = sorted(targets)
    above = [t for t in ts if t > best]
    return [t for t in ts if t <= best] + above[:1]


def _accuracy_figure(
    runs: Sequence[Run], colors: list, x_column: str, title: str, with_avg: bool, targets: Sequence[float] = ()
) -> Figure | None:
    if not any(r.column("acc_full") is not None or r.column("acc_avg") is not None for r in runs):
        return None
    scale = _acc_scale(runs)
    if x_column == "sim_time_s":
        unit, div = time_unit(nanmax([r.column(x_column) for r in runs]))
        xlabel = f"simulated time ({unit})"
    elif x_column == "carbon_g":
        unit, div = carbon_unit(nanmax([r.column(x_column) for r in runs]))
        xlabel = f"cumulative grid carbon, mains devices and server ({unit})"
    else:
        unit, div = energy_unit(nanmax([r.column(x_column) for r in runs]))
        xlabel = f"cumulative fleet energy ({unit})"
    fig, ax = new_figure()
    drew_avg = drew_full = False
    for run, color in zip(runs, colors, strict=True):
        x = run.column(x_column)
        full = run.column("acc_full")
        fx, fy = finite_xy(x, full)
        if fx.size:
            ax.plot(fx / div, fy * scale, color=color, lw=1.8, marker="o" if fx.size < 30 else None, ms=3.5)
            drew_full = True
        avg = run.column("acc_avg") if with_avg else None
        ax_, ay = finite_xy(x, avg)
        if ay.size and not _same_series(full, avg):
            ax.plot(ax_ / div, ay * scale, color=color, lw=1.4, ls="--")
            drew_avg = True
    if not drew_full and not drew_avg:
        return None
    styles = [("-", "full model"), ("--", "average over submodels")] if drew_avg else []
    best = nanmax([r.column(c) for r in runs for c in ("acc_full", "acc_avg")]) / (100.0 / scale)
    run_legend(ax, runs, colors, styles, target_lines(ax, shown_targets(targets, best)))
    ax.set_xlabel(xlabel)
    ax.set_ylabel("test accuracy (%)")
    ax.set_xlim(left=0)
    run_title(ax, title, runs)
    return fig


def fig_accuracy_vs_carbon(runs: Sequence[Run], colors: list, targets: Sequence[float] = ()) -> Figure | None:
    """acc_full against the cumulative grid carbon (runs with ``fleet.carbon`` only); target lines."""
    if not any(r.column("acc_full") is not None and r.column("carbon_g") is not None for r in runs):
        return None
    return _accuracy_figure(runs, colors, "carbon_g", "Accuracy vs grid carbon", False, targets)  # without: no line


def _same_series(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    """True when b adds nothing over a (equal wherever b is evaluated)."""
    if a is None or b is None:
        return b is None
    mask = np.isfinite(b)
    return bool(np.allclose(a[mask], b[mask], equal_nan=True, rtol=0, atol=1e-9))


def fig_accuracy_vs_time(runs: Sequence[Run], colors: list, targets: Sequence[float] = ()) -> Figure | None:
    """acc_full (solid) and acc_avg (dashed, when it differs) against simulated time; target lines."""
    return _accuracy_figure(runs, colors, "sim_time_s", "Accuracy vs simulated time", True, targets)


def fig_accuracy_vs_energy(runs: Sequence[Run], colors: list, targets: Sequence[float] = ()) -> Figure | None:
    """acc_full against cumulative fleet energy; target lines."""
    if not any(r.column("acc_full") is not None and r.column("energy_j") is not None for r in runs):
        return None
    return _accuracy_figure(runs, colors, "energy_j", "Accuracy vs fleet energy", False, targets)


def fig_bytes_per_round(runs: Sequence[Run], colors: list) -> Figure | None:
    """Cumulative bytes downloaded (solid) and uploaded (dashed) against round."""
    cols = [r.column(c) for r in runs for c in ("bytes_down", "bytes_up")]
    if all(c is None for c in cols):
        return None
    unit, div = bytes_unit(nanmax(cols))
    fig, ax = new_figure()
    for run, color in zip(runs, colors, strict=True):
        rnd = _round_axis(run)
        for col, ls in (("bytes_down", "-"), ("bytes_up", "--")):
            x, y = finite_xy(rnd, run.column(col))
            if x.size:
                ax.plot(x, y / div, color=color, ls=ls, lw=1.6)
    run_legend(ax, runs, colors, [("-", "downloaded (server → devices)"), ("--", "uploaded (devices → server)")])
    ax.set_xlabel("round")
    ax.set_ylabel(f"cumulative traffic ({unit})")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    run_title(ax, "Bytes on the wire", runs)
    return fig


def fleet_size(run: Run) -> int:
    """Devices in the run: devices.csv's rows, else summary.json's ``devices``, else the most ever alive."""
    n = next((len(v) for v in run.devices.values()), 0) or run.summary.get("devices")
    if isinstance(n, int) and n > 0:
        return n
    alive = run.column("alive")
    return int(np.nanmax(alive)) if alive is not None else 0


def some_device_died(run: Run) -> bool:
    """True when rounds.csv's ``alive`` ever falls below the fleet's size (a battery ran dry)."""
    alive = run.column("alive")
    return alive is not None and bool(np.nanmin(alive) < fleet_size(run))


def fig_devices_alive(runs: Sequence[Run], colors: list) -> Figure | None:
    """Devices not yet depleted against simulated time; only when some device of some run died."""
    if not any(r.column("sim_time_s") is not None and some_device_died(r) for r in runs):
        return None
    unit, div = time_unit(nanmax([r.column("sim_time_s") for r in runs]))
    fig, ax = new_figure()
    for run, color in zip(runs, colors, strict=True):
        x, y = finite_xy(run.column("sim_time_s"), run.column("alive"))
        if not x.size:
            continue
        # rows are round ends; start the curve at t=0 with the whole fleet
        start = max(float(fleet_size(run)), float(y[0]))
        x, y = np.concatenate([[0.0], x]), np.concatenate([[start], y])
        ax.step(x / div, y, where="post", color=color, lw=1.8)
    run_legend(ax, runs, colors)
    ax.set_xlabel(f"simulated time ({unit})")
    ax.set_ylabel("devices alive")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    run_title(ax, "Devices alive (not depleted)", runs)
    return fig


# ---------------------------------------------------------------------------------------------------------
# energy per device class, from devices.csv


def energy_by_class(run: Run) -> dict[str, dict[str, float]] | None:
    """{device_class: {part: joules}} with parts compute/radio/idle(/other), or {"total": J}; None if no data."""
    dev = run.devices
    classes = dev.get("device_class")
    if classes is None or classes.size == 0:
        return None
    names, inverse = _group_index(classes.astype(str))

    def per_class(col: str) -> np.ndarray | None:
        v = dev.get(col)
        if v is None or v.dtype.kind != "f":
            return None
        return np.bincount(inverse, weights=np.nan_to_num(v), minlength=len(names))

    parts = {p: per_class(c) for p, c in ENERGY_PARTS}
    total = per_class("energy_j")
    sums: dict[str, np.ndarray] = {}
    if all(v is not None for v in parts.values()):
        sums = {p: v for p, v in parts.items() if v is not None}
        if total is not None:
            other = total - sum(sums.values())
            if np.any(other > 0.01 * np.maximum(total, 1e-12)):
                sums["other"] = np.clip(other, 0, None)
    elif total is not None:
        sums = {"total": total}
    else:
        return None
    return {str(n): {p: float(v[i]) for p, v in sums.items()} for i, n in enumerate(names)}


def _group_index(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Like np.unique(values, return_inverse=True), but fast when there are few distinct values."""
    names = np.unique(values[:10_000])
    if len(names) <= 64:
        inverse = np.full(values.size, -1, dtype=np.intp)
        for i, n in enumerate(names):
            inverse[values == n] = i
        if (inverse >= 0).all():
            return names, inverse
    names, inverse = np.unique(values, return_inverse=True)
    return names, inverse.reshape(-1)


def _lighten(color: Any, amount: float) -> tuple[float, float, float]:
    r, g, b = to_rgb(color)
    return (r + (1 - r) * amount, g + (1 - g) * amount, b + (1 - b) * amount)


_PART_STYLE = {  # lighten amount, hatch
    "compute": (0.0, None),
    "radio": (0.4, "///"),
    "idle": (0.7, "..."),
    "other": (0.9, "xx"),
    "total": (0.0, None),
}


def fig_energy_by_class(runs: Sequence[Run], colors: list) -> Figure | None:
    """Energy summed per device class: one bar per run, stacked compute / radio / idle."""
    per_run = [energy_by_class(r) for r in runs]
    if all(p is None for p in per_run):
        return None
    classes = sorted({c for p in per_run if p for c in p})
    parts = [
        p
        for p in ("compute", "radio", "idle", "other", "total")
        if any(pr and p in next(iter(pr.values())) for pr in per_run)
    ]
    unit, div = energy_unit(max((sum(v.values()) for pr in per_run if pr for v in pr.values()), default=0.0))
    fig, ax = new_figure()
    n = len(runs)
    width = 0.8 / n
    x = np.arange(len(classes), dtype=float)
    for i, (pr, color) in enumerate(zip(per_run, colors, strict=True)):
        if not pr:
            continue
        pos = x - 0.4 + width * (i + 0.5)
        bottom = np.zeros(len(classes))
        for part in parts:
            vals = np.array([pr.get(c, {}).get(part, 0.0) for c in classes]) / div
            if not vals.any():
                continue
            light, hatch = _PART_STYLE[part]
            ax.bar(
                pos,
                vals,
                width * 0.92,
                bottom=bottom,
                color=_lighten(color, light),
                hatch=hatch,
                edgecolor=color,
                linewidth=0.6,
            )
            bottom += vals
    ax.set_xticks(x, classes)
    if len(classes) > 4 or max((len(c) for c in classes), default=0) > 12:
        ax.tick_params(axis="x", labelrotation=30)
        for lab in ax.get_xticklabels():
            lab.set_horizontalalignment("right")
    ax.set_xlabel("device class")
    ax.set_ylabel(f"energy used ({unit})")
    ax.grid(False, axis="x")
    ax.set_axisbelow(True)
    handles: list[Any] = []
    if n > 1:
        handles += [Patch(facecolor=c, label=t) for t, c in zip(legend_labels(runs), colors, strict=True)]
    if parts != ["total"]:
        base = "0.35" if n > 1 else colors[0]
        handles += [
            Patch(
                facecolor=_lighten(base, _PART_STYLE[p][0]), hatch=_PART_STYLE[p][1], edgecolor=base, label=p
            )
            for p in parts
            if p != "total"
        ]
    place_legend(ax, handles)
    run_title(ax, "Energy by device class", runs)
    return fig


# ---------------------------------------------------------------------------------------------------------
# timeline (Gantt chart) of a few devices of the first run, from events.jsonl


def failure_cause(ev: dict[str, Any]) -> str:
    """A failure event's cause as ``FAILURE_STYLE`` names it (``dropped`` events carry theirs as ``reason``)."""
    kind = str(ev.get("event"))
    if kind == "dropped":
        reason = ev.get("reason")
        return reason if reason in FAILURE_STYLE else "deadline"
    return kind if kind in FAILURE_STYLE else "deadline"


def _tasks_of(
    events: list[dict[str, Any]],
) -> tuple[dict[str, list[tuple[float, float]]], list[tuple[float, str]], list[float]]:
    """Phase segments (start, width), failures (time, cause) and late times of one device's events.

    A task's events share their ``round`` (in asynchronous runs the task's dispatch wave, so tasks of
    overlapping waves stay apart); events that name no round belong to the device's latest task."""
    phases: dict[str, list[tuple[float, float]]] = {"download": [], "train": [], "upload": []}
    fails: list[tuple[float, str]] = []
    lates: list[float] = []
    tasks: list[dict[str, float]] = []
    open_task: dict[int | None, dict[str, float]] = {}  # by round: the task its next events belong to
    for ev in sorted(events, key=lambda e: e.get("t", 0.0) if isinstance(e.get("t"), int | float) else 0.0):
        t, kind = ev.get("t"), ev.get("event")
        if not isinstance(t, int | float):
            continue
        t = float(t)
        key = ev.get("round") if type(ev.get("round")) is int else None
        cur = open_task.get(key)
        if kind == "dispatch":
            open_task[key] = {"dispatch": t}
            tasks.append(open_task[key])
        elif kind in ("arrive", "train_start", "train_end", "upload"):
            if cur is None or kind in cur:
                cur = open_task[key] = {}
                tasks.append(cur)
            cur[kind] = t
        elif kind in FAILURE_EVENTS:
            fails.append((t, failure_cause(ev)))
            if cur is not None and "fail" not in cur:
                cur["fail"] = t
            open_task.pop(key, None)
        elif kind == "late":
            lates.append(t)
    for task in tasks:
        fail = task.get("fail")
        spans = (
            ("download", task.get("dispatch"), task.get("arrive")),
            ("train", task.get("train_start"), task.get("train_end")),
            ("upload", task.get("train_end"), task.get("upload")),
        )
        for phase, start, end in spans:
            if start is None:
                continue
            if end is None:
                if fail is None or fail < start:
                    continue
                end = fail
            if end >= start:
                phases[phase].append((start, end - start))
    return phases, fails, lates


def _server_spans(
    events: list[dict[str, Any]],
) -> tuple[dict[str, list[tuple[float, float]]], list[tuple[float, str]], list[float]]:
    """The server's compute spans (start, duration) by kind of work from its server_work events, shaped like
    ``_tasks_of``. Consecutive items of work follow each other on the simulated clock."""
    spans: dict[str, list[tuple[float, float]]] = {}
    for e in events:
        t, d = e.get("t"), e.get("duration")
        if e.get("event") == "server_work" and isinstance(t, int | float) and isinstance(d, int | float) and d > 0:
            kind = e.get("kind") if e.get("kind") in SERVER_KIND_COLORS else "other"
            spans.setdefault(f"server: {kind}", []).append((float(t), float(d)))
    return spans, [], []


def _hierarchy_spans(events: list[dict[str, Any]], kind: str) -> dict[str, list[tuple[float, float]]]:
    """(start, duration) spans of one kind of the hierarchy's events (each is logged at its start), by phase:
    ``backhaul down`` / ``backhaul up`` for transfers, else ``gateway aggregate`` / ``cloud aggregate``.
    An instant one (duration 0) is kept: the lane still shows when it happened."""
    spans: dict[str, list[tuple[float, float]]] = {}
    for e in events:
        t, d = e.get("t"), e.get("duration")
        if e.get("event") != kind or not isinstance(t, int | float) or not isinstance(d, int | float) or d < 0:
            continue
        phase = f"backhaul {'up' if e.get('up') is True else 'down'}" if kind == "backhaul" else kind.replace("_", " ")
        spans.setdefault(phase, []).append((float(t), float(d)))
    return spans


_PHASE_ORDER = {**{f"server: {k}": 0 for k in SERVER_KIND_COLORS}, "download": 1, "train": 2, "upload": 3}


def widen_spans(
    phases: dict[str, list[tuple[float, float]]], min_w: float
) -> dict[str, list[tuple[float, float]]]:
    """(start, width) spans of one timeline row, each at least ``min_w`` wide and not hiding another.

    Spans are taken in time order (download, train, upload within a task); a span that a widened
    earlier span would cover starts where that one ends instead, so every phase stays visible.
    """
    items = sorted(
        (s, _PHASE_ORDER.get(p, 9), w, p) for p, spans in phases.items() for s, w in spans if np.isfinite(s)
    )
    out: dict[str, list[tuple[float, float]]] = {p: [] for p in phases}
    cursor = -np.inf
    for s, _, w, p in items:
        start = max(s, cursor)
        width = max(w, min_w)
        out[p].append((start, width))
        cursor = start + width
    return out


def fig_timeline(runs: Sequence[Run], colors: list) -> Figure | None:
    """Gantt chart of up to 20 devices of the first run: download / train / upload bars, each failure marked
    by its cause, and in asynchronous runs a star where a device's update is applied to the model; above the
    devices, lanes for the server's work and, in hierarchical runs, the cloud's and the gateways'
    aggregations and the backhaul transfers (parallel gateways overlap on their lane)."""
    run = runs[0]
    if not run.events_path.is_file():
        return None
    k = MAX_TIMELINE_DEVICES
    ev = event_digest(run).timeline
    rows = [d for d in ev.sampled if d in ev.by_device and d != SERVER]
    rows += [d for d in ev.first_seen if d not in rows and d != SERVER][: max(0, k - len(rows))]
    rows = sorted(rows)
    data: dict[int | str, tuple[dict[str, list[tuple[float, float]]], list[tuple[float, str]], list[float]]]
    data = {d: _tasks_of(ev.by_device[d]) for d in rows}
    lanes: list[int | str] = []  # the server's and the hierarchy's rows, above the devices
    central = ev.by_device.get(SERVER, [])
    if any(e.get("event") == "server_work" for e in central):
        lanes.append(SERVER)
        data[SERVER] = _server_spans(central)
    for lane, kind in HIERARCHY_LANES:
        spans = _hierarchy_spans(central, kind)
        if spans:
            lanes.append(lane)
            data[lane] = (spans, [], [])
    rows = [*lanes, *rows]
    if not rows:
        return None
    applied = {d: [float(e["t"]) for e in ev.by_device[d] if e.get("event") == "apply"
                   and isinstance(e.get("t"), int | float)] for d in rows if isinstance(d, int) and d != SERVER}  # fmt: skip
    t_max = ev.t_last
    if not ev.truncated:
        t_max = max(t_max, nanmax([run.column("sim_time_s")]))
    for phases, _, _ in data.values():  # a span that starts at the last event still ends inside the axes
        t_max = max([t_max, *(s + w for spans in phases.values() for s, w in spans if np.isfinite(s + w))])
    unit, div = time_unit(t_max)

    fig, ax = new_figure(height=max(3.6, 2.2 + 0.28 * len(rows)))
    ax.grid(True, axis="x", alpha=0.3, linewidth=0.6)
    ax.grid(False, axis="y")
    height = 0.62
    fails_at: dict[str, tuple[list[float], list[int]]] = {}
    late_x: list[float] = []
    late_y: list[int] = []
    apply_x: list[float] = []
    apply_y: list[int] = []
    drawn: set[str] = set()
    # a widened bar may end past the last event: the axes grow to hold it, and bars are widened to the
    # grown axis (a few passes: the growth is a few bar widths at most)
    x_end = t_max / div
    for _ in range(4):
        span = x_end
        min_w = MIN_BAR_FRACTION * span
        shown_rows = {d: (widen_spans if not isinstance(d, str) else widen_in_place)(
            {p: [(s / div, w / div) for s, w in spans] for p, spans in data[d][0].items()}, min_w) for d in rows}  # fmt: skip
        x_end = max([span, *(s + w for shown in shown_rows.values() for segs in shown.values() for s, w in segs)])
        if x_end <= span * (1 + 1e-9):
            break
    for y, d in enumerate(rows):
        _, fails, lates = data[d]
        for phase, segs in shown_rows[d].items():
            if segs:
                drawn.add(phase)
                ax.broken_barh(segs, (y - height / 2, height), facecolors=PHASE_COLORS[phase], linewidth=0)
        for t, cause in fails:
            xs, ys = fails_at.setdefault(cause, ([], []))
            xs.append(t / div)
            ys.append(y)
        late_x += [t / div for t in lates]
        late_y += [y] * len(lates)
        apply_x += [t / div for t in applied.get(d, [])]
        apply_y += [y] * len(applied.get(d, []))
    if apply_x:
        ax.scatter(apply_x, apply_y, marker=APPLY_STYLE[0], s=42, color=APPLY_STYLE[1], linewidths=0, zorder=3)
    if late_x:
        ax.scatter(late_x, late_y, marker="|", s=90, color=LATE_COLOR, linewidths=1.5, zorder=3)
    for cause, (xs, ys) in fails_at.items():
        marker, color, _ = FAILURE_STYLE[cause]
        filled = marker not in ("x", "+")
        ax.scatter(xs, ys, marker=marker, s=34, zorder=4, linewidths=1.6 if not filled else 1.0,
                   color=color, facecolors="none" if filled else None, edgecolors=color if filled else None)  # fmt: skip

    # round ends as faint lines, when there are few enough to see
    ends = run.column("sim_time_s")
    if ends is not None:
        ends = ends[np.isfinite(ends) & (ends <= t_max)]
        if 0 < ends.size <= 60:
            for t in ends:
                ax.axvline(t / div, color="0.6", lw=0.6, ls=":", zorder=0)

    classes = _classes_of(run.devices, [d for d in rows if isinstance(d, int)])
    ax.set_yticks(
        range(len(rows)),
        [_lane_label(d) if d == SERVER or isinstance(d, str) else f"{d}" + (f" · {classes[d]}" if d in classes else "")
         for d in rows],
    )
    ax.tick_params(axis="y", labelsize=8 if len(rows) <= 12 else 7)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlim(0, x_end if x_end > 0 else None)
    ax.set_xlabel(f"simulated time ({unit})")
    ax.set_ylabel("device")
    handles: list[Any] = [Patch(facecolor=PHASE_COLORS[p], label=p) for p in PHASE_COLORS if p in drawn]
    for cause in FAILURE_STYLE:
        if cause in fails_at:
            marker, color, text = FAILURE_STYLE[cause]
            filled = marker not in ("x", "+")
            handles.append(Line2D([], [], ls="", marker=marker, color=color, mfc="none" if filled else color,
                                  mew=1.6, label=text))  # fmt: skip
    if late_x:
        handles.append(Line2D([], [], ls="", marker="|", color=LATE_COLOR, mew=1.5, ms=9, label="late"))
    if apply_x:
        handles.append(Line2D([], [], ls="", marker=APPLY_STYLE[0], color=APPLY_STYLE[1], ms=8, label=APPLY_STYLE[2]))
    if ends is not None and 0 < ends.size <= 60:
        # an asynchronous run's rows are the server's model updates, not rounds
        ends_text = "round end" if run.server_mode in (None, "sync") else "server model update"
        handles.append(Line2D([], [], color="0.6", lw=0.8, ls=":", label=ends_text))
    if handles:
        fig.legend(  # at most 3 a row: the server's kinds of work and the causes would push a row off the figure
            handles=handles, loc="outside lower center", ncol=min(len(handles), 3), fontsize="small", frameon=False
        )
    present = sorted(set(classes.values()))
    n_fleet = next((len(v) for v in run.devices.values()), 0)
    n_rows = len([d for d in rows if isinstance(d, int) and d != SERVER])
    what = f"{n_rows} of {n_fleet:,} devices" if n_fleet else f"{n_rows} devices"
    others = ["the server"] * (SERVER in rows) + ["the gateways"] * any(isinstance(d, str) for d in rows)
    title = f"Device timeline ({what}" + (f" and {' and '.join(others)})" if others else ")")
    if ev.truncated:
        shown = t_max / div
        title += f", the first {shown:{',.0f' if 100 <= shown < 1e6 else '.3g'}} {unit} of the run"
    run_title(ax, title, [run])
    if present:  # under the run's name: what the class after each device id stands for
        ax.set_ylabel("device · class")
        ax.set_title(literal(run.label) + "\nclasses: " + "; ".join(
            f"{literal(c)} = {DEVICE_CLASS_NAMES.get(c, 'as its profile names it')}" for c in present),
            fontsize=8, color="0.35", pad=4)  # fmt: skip
    return fig


def _lane_label(row: int | str) -> str:
    return "server" if row == SERVER else str(row)


def widen_in_place(
    phases: dict[str, list[tuple[float, float]]], min_w: float
) -> dict[str, list[tuple[float, float]]]:
    """(start, width) spans each at least ``min_w`` wide where they stand: a lane of parallel work (gateways)
    whose overlapping bars show when any of them was busy."""
    return {p: [(s, max(w, min_w)) for s, w in spans if np.isfinite(s)] for p, spans in phases.items()}


def _classes_of(devices: dict[str, np.ndarray], ids: list[int]) -> dict[int, str]:
    ids_col, classes = devices.get("device"), devices.get("device_class")
    if ids_col is None or classes is None or ids_col.dtype.kind != "f" or ids_col.size != classes.size:
        return {}
    mask = np.isin(ids_col, np.array(ids, dtype=float))
    return {int(d): str(c) for d, c in zip(ids_col[mask], classes[mask], strict=True)}


def _builders(targets: Sequence[float]) -> list[tuple[str, Callable[[Sequence[Run], list], Figure | None]]]:
    """(file name, builder) of every run figure, in the order they are written; a builder returns None when
    the runs have no data for its figure."""
    return [
        ("accuracy_vs_time.png", partial(fig_accuracy_vs_time, targets=targets)),
        ("accuracy_vs_energy.png", partial(fig_accuracy_vs_energy, targets=targets)),
        ("accuracy_vs_carbon.png", partial(fig_accuracy_vs_carbon, targets=targets)),
        ("bytes_per_round.png", fig_bytes_per_round),
        ("backhaul_bytes.png", fig_backhaul_bytes),
        ("updates_per_hour.png", fig_updates_per_hour),
        ("staleness.png", fig_staleness),
        ("devices_alive.png", fig_devices_alive),
        ("energy_by_class.png", fig_energy_by_class),
        ("fleet_state.png", fig_fleet_state),
        ("timeline.png", fig_timeline),
    ]


FIGURE_NAMES = tuple(name for name, _ in _builders(()))


# ---------------------------------------------------------------------------------------------------------
# output files


def _written_by_us(path: Path) -> bool:
    """True when ``path`` is a PNG carrying this module's Software tag."""
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 16)
    except OSError:
        return False
    return head.startswith(b"\x89PNG\r\n\x1a\n") and (b"Software\x00" + PNG_SOFTWARE.encode()) in head


def _target_path(out: Path, filename: str) -> Path:
    """``out/filename`` unless a file there was not written by us; then the first free ``stem-N.png``."""
    stem, suffix = os.path.splitext(filename)
    for i in itertools.count():
        p = out / (filename if i == 0 else f"{stem}-{i}{suffix}")
        if not p.exists() or (p.is_file() and _written_by_us(p)):
            return p
    raise AssertionError("unreachable")
