"""Figures of asynchronous, semi-asynchronous and hierarchical runs (analysis.mode_plots, and the timeline's
async and hierarchy lanes in analysis.plots), on run folders written by hand in the issue 21 format."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.collections import PathCollection, PolyCollection
from matplotlib.colors import to_hex
from matplotlib.patches import Rectangle, StepPatch

from analysis.plots import FIGURE_NAMES, HIERARCHY_COLORS, _tasks_of, build_figures, plot_runs
from analysis.rundir import load_runs

NEW_FIGURES = {"staleness.png", "updates_per_hour.png", "backhaul_bytes.png"}


def write_run(path: Path, rows: list[dict[str, Any]], events: list[dict[str, Any]] | None = None,
              summary: dict[str, Any] | None = None, resolved: str | None = None) -> Path:  # fmt: skip
    """A run folder: rounds.csv from ``rows`` (columns in first-seen order), events.jsonl, summary.json and
    scenario.resolved.yaml when given."""
    path.mkdir(parents=True)
    columns = list(dict.fromkeys(k for row in rows for k in row))
    with open(path / "rounds.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        w.writerows(rows)
    if events is not None:
        with open(path / "events.jsonl", "w") as f:
            f.writelines(json.dumps(e) + "\n" for e in sorted(events, key=lambda e: e["t"]))
    if summary is not None:
        (path / "summary.json").write_text(json.dumps(summary))
    if resolved is not None:
        (path / "scenario.resolved.yaml").write_text(resolved)
    return path


def apply(t: float, device: int, staleness: Any, wave: int = 0) -> dict[str, Any]:
    return {"t": t, "round": wave, "device": device, "event": "apply", "staleness": staleness, "version": 1}


def async_rows(times: list[float], applied: list[int]) -> list[dict[str, Any]]:
    return [
        {"round": i + 1, "sim_time_s": t, "acc_full": 0.1 * (i + 1), "bytes_down": 1000 * (i + 1),
         "bytes_up": 1000 * (i + 1), "updates_applied": u, "staleness_mean": 1.0, "staleness_max": 2, "in_flight": 3}
        for i, (t, u) in enumerate(zip(times, applied, strict=True))
    ]  # fmt: skip


def sync_rows(n: int = 3) -> list[dict[str, Any]]:
    return [{"round": i + 1, "sim_time_s": 10.0 * (i + 1), "acc_full": 0.2 * (i + 1), "bytes_down": 100 * (i + 1),
             "bytes_up": 50 * (i + 1)} for i in range(n)]  # fmt: skip


def bars_by_color(ax: Any) -> dict[str, list[tuple[float, float]]]:
    """(x centre, height) of the axes' bars, by colour, left to right."""
    out: dict[str, list[tuple[float, float]]] = {}
    for p in ax.patches:
        if isinstance(p, Rectangle):
            out.setdefault(to_hex(p.get_facecolor()), []).append((p.get_x() + p.get_width() / 2, p.get_height()))
    return {c: sorted(v) for c, v in out.items()}


def test_staleness_bars_are_each_runs_share_of_updates_hand_counted(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", async_rows([10.0, 20.0], [3, 6]), summary={"name": "a", "server_mode": "async"},
                  events=[apply(1.0 + i, i % 3, s) for i, s in enumerate([0, 2, 1, 2, 0, 2])]
                  + [apply(9.0, 1, None), {"t": 9.5, "round": 0, "device": 2, "event": "upload", "staleness": 7}])
    b = write_run(tmp_path / "b", async_rows([10.0], [3]), summary={"name": "b", "server_mode": "semi_async"},
                  events=[apply(2.0, 0, 1), apply(3.0, 1, 3), apply(4.0, 2, 1)])
    c = write_run(tmp_path / "c", sync_rows(), summary={"name": "c"},
                  events=[{"t": 1.0, "round": 1, "device": 0, "event": "dispatch"}])  # fmt: skip
    fig = build_figures(load_runs([a, b, c]))["staleness.png"]
    ax = fig.axes[0]
    bars = bars_by_color(ax)
    assert len(bars) == 2  # the synchronous run has no applied updates to draw
    heights = sorted([h for _, h in v] for v in bars.values())
    # a: staleness 0, 0, 1, 2, 2, 2 (the apply without staleness and the upload do not count); b: 1, 1, 3
    assert heights[0] == pytest.approx([0.0, 200 / 3, 0.0, 100 / 3])
    assert heights[1] == pytest.approx([200 / 6, 100 / 6, 300 / 6, 0.0])
    xs = sorted(x for v in bars.values() for x, _ in v)
    assert [round(x) for x in xs] == [0, 0, 1, 1, 2, 2, 3, 3]  # integer bins, the runs side by side
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert texts == ["a · async: mean 1.17 (6 updates)", "b · semi_async: mean 1.67 (3 updates)"]


def test_staleness_with_many_bins_draws_each_run_as_steps(tmp_path: Path) -> None:
    values = [*range(131), 5, 5]
    a = write_run(tmp_path / "a", async_rows([10.0], [len(values)]), summary={"server_mode": "async"},
                  events=[apply(float(i), 0, s) for i, s in enumerate(values)])  # fmt: skip
    ax = build_figures(load_runs([a]))["staleness.png"].axes[0]
    (steps,) = [p for p in ax.patches if isinstance(p, StepPatch)]
    share, edges = steps.get_data()[:2]
    expected = np.full(131, 100 / 133)
    expected[5] = 300 / 133
    assert share == pytest.approx(expected) and edges == pytest.approx(np.arange(132) - 0.5)


def test_updates_per_hour_counts_each_window_by_hand(tmp_path: Path) -> None:
    # 2 h runs: windows of 5 min (the shortest round window giving at most 30)
    a = write_run(tmp_path / "a", async_rows([100.0, 200.0, 250.0, 700.0, 7200.0], [1, 2, 3, 4, 5]),
                  summary={"name": "a", "server_mode": "async"})  # fmt: skip
    b = write_run(tmp_path / "b", async_rows([150.0, 7000.0], [2, 3]), summary={"name": "b", "server_mode": "async"})
    fig = build_figures(load_runs([a, b]))["updates_per_hour.png"]
    ax = fig.axes[0]
    (sa, sb) = [p for p in ax.patches if isinstance(p, StepPatch)]
    rate_a, edges_a = sa.get_data()[:2]
    assert edges_a == pytest.approx(np.arange(0, 7201, 300))
    expected_a = np.zeros(24)
    expected_a[0] = 3 * 3600 / 300  # the rows at 100, 200 and 250 s
    expected_a[2] = 1 * 3600 / 300  # 700 s
    expected_a[23] = 1 * 3600 / 300  # the last row, at the window's end
    assert rate_a == pytest.approx(expected_a)
    rate_b, edges_b = sb.get_data()[:2]
    # b ends 100 s into its 24th window: too short to stand alone, it joins the 23rd (6600 to 7000 s)
    assert edges_b == pytest.approx([*range(0, 6601, 300), 7000])
    assert rate_b[0] == pytest.approx(2 * 3600 / 300) and rate_b[-1] == pytest.approx(1 * 3600 / 400)
    assert rate_b[1:-1] == pytest.approx(np.zeros(21))
    assert "per 5 min" in ax.get_ylabel()
    sync = write_run(tmp_path / "s", sync_rows(), summary={"name": "s"})
    fig = build_figures(load_runs([a, sync]))["updates_per_hour.png"]
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["a · async"]  # no entry for a run with no rate
    # a synchronous run beside an async one: its accepted updates per round (completed) are its applied updates
    rounds = [{**r, "completed": c} for r, c in zip(sync_rows(), [4, 2, 3], strict=True)]  # rows at 10, 20, 30 s
    counted = write_run(tmp_path / "c", rounds, summary={"name": "c"})
    fig = build_figures(load_runs([a, counted]))["updates_per_hour.png"]
    (_, sc) = [p for p in fig.axes[0].patches if isinstance(p, StepPatch)]
    rate_c, edges_c = sc.get_data()[:2]
    assert rate_c[0] == pytest.approx(9 * 3600 / (edges_c[1] - edges_c[0]))  # all 9 in the first window


def test_backhaul_bytes_against_device_links(tmp_path: Path) -> None:
    rows = [
        {"round": 1, "sim_time_s": 10.0, "bytes_down": 100e6, "bytes_up": 50e6,
         "bytes_backhaul_down": 10e6, "bytes_backhaul_up": 5e6, "energy_gateway_j": 1.0},
        {"round": 2, "sim_time_s": 20.0, "bytes_down": 200e6, "bytes_up": 100e6,
         "bytes_backhaul_down": 20e6, "bytes_backhaul_up": 15e6, "energy_gateway_j": 2.0},
    ]  # fmt: skip
    hier = write_run(tmp_path / "h", rows, summary={"name": "h", "hierarchy": {"gateways": 2}})
    flat = write_run(tmp_path / "f", sync_rows(2), summary={"name": "f"})
    ax = build_figures(load_runs([hier, flat]))["backhaul_bytes.png"].axes[0]
    lines = {(ln.get_linestyle(), to_hex(ln.get_color())): (list(ln.get_xdata()), list(ln.get_ydata()))
             for ln in ax.lines}  # fmt: skip
    assert len(lines) == 3  # the flat run: its device links only
    solid = sorted(v for (ls, _), v in lines.items() if ls == "-")
    dashed = [v for (ls, _), v in lines.items() if ls == "--"]
    assert solid[0] == ([0.0, 10.0, 20.0], pytest.approx([0.0, 150e-6, 300e-6]))  # flat: 150 and 300 bytes in MB
    assert solid[1] == ([0.0, 10.0, 20.0], pytest.approx([0.0, 150.0, 300.0]))
    assert dashed == [([0.0, 10.0, 20.0], pytest.approx([0.0, 15.0, 35.0]))]


def test_accuracy_legend_names_each_runs_server_mode_only_when_they_differ(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", async_rows([10.0, 20.0], [2, 4]), summary={"name": "x", "server_mode": "async"})
    s = write_run(tmp_path / "s", sync_rows(), summary={"name": "y"})  # from before the modes: synchronous
    m = write_run(tmp_path / "m", sync_rows(), resolved="name: z\nserver:\n  mode: semi_async\n")
    fig = build_figures(load_runs([a, s, m]))["accuracy_vs_time.png"]
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert texts[:3] == ["x · async", "y · sync", "z · semi_async"]
    same = build_figures(load_runs([s, write_run(tmp_path / "s2", sync_rows(), summary={"name": "w"})]))
    assert [t.get_text() for t in same["accuracy_vs_time.png"].legends[0].get_texts()][:2] == ["y", "w"]


def test_a_synchronous_run_gets_none_of_the_new_figures(tmp_path: Path) -> None:
    from test_plots import make_run_dir

    run = make_run_dir(tmp_path / "sync", rounds=4, devices=6)
    written = {p.name for p in plot_runs([run])}
    assert not written & NEW_FIGURES and "timeline.png" in written
    assert NEW_FIGURES < set(FIGURE_NAMES)
    timeline = build_figures(load_runs([run]))["timeline.png"]
    texts = [t.get_text() for t in timeline.legends[0].get_texts()]
    assert "update applied to the model" not in texts and "round end" in texts
    labels = [t.get_text() for t in timeline.axes[0].get_yticklabels()]
    assert not {"cloud", "gateways", "backhaul"} & set(labels)


def test_tasks_of_keeps_overlapping_dispatch_waves_of_a_device_apart() -> None:
    events = [
        {"t": 0.0, "round": 1, "event": "dispatch"}, {"t": 1.0, "round": 1, "event": "arrive"},
        {"t": 1.0, "round": 1, "event": "train_start"}, {"t": 5.0, "round": 1, "event": "train_end"},
        {"t": 5.5, "round": 2, "event": "dispatch"},  # the next wave's task starts before this one uploads
        {"t": 6.0, "round": 1, "event": "upload"}, {"t": 6.5, "round": 2, "event": "arrive"},
        {"t": 6.5, "round": 2, "event": "train_start"}, {"t": 8.5, "round": 2, "event": "train_end"},
        {"t": 9.5, "round": 2, "event": "upload"}, {"t": 9.6, "round": 1, "event": "apply", "staleness": 1},
    ]  # fmt: skip
    phases, fails, lates = _tasks_of(events)
    assert phases == {"download": [(0.0, 1.0), (5.5, 1.0)], "train": [(1.0, 4.0), (6.5, 2.0)],
                      "upload": [(5.0, 1.0), (8.5, 1.0)]}  # fmt: skip
    assert fails == [] and lates == []


def _row_bars(ax: Any) -> dict[int, list[tuple[str, float, float]]]:
    """(colour, x0, width) of the timeline's bars, by row (rows are centred on 0, 1, 2, ...)."""
    out: dict[int, list[tuple[str, float, float]]] = {}
    for c in ax.collections:
        if isinstance(c, PolyCollection):
            color = to_hex(c.get_facecolor()[0])
            for p in c.get_paths():
                e = p.get_extents()
                out.setdefault(round((e.y0 + e.y1) / 2), []).append((color, e.x0, e.width))
    return {r: sorted(v, key=lambda b: b[1]) for r, v in out.items()}


def test_timeline_marks_applied_updates_and_draws_the_hierarchy_lanes(tmp_path: Path) -> None:
    task = [("dispatch", 0.0), ("arrive", 2.0), ("train_start", 2.0), ("train_end", 30.0), ("upload", 40.0)]
    events = [{"t": t, "round": 0, "device": d, "event": k} for d in (0, 1) for k, t in task]
    events += [apply(45.0, 0, 0), apply(60.0, 1, 1)]
    central = [
        {"t": 0.0, "device": -1, "event": "backhaul", "gateway": "gw0[0]", "up": False, "bytes": 10, "duration": 5.0},
        {"t": 41.0, "device": -1, "event": "gateway_aggregate", "gateway": "gw0[0]", "duration": 3.0, "updates": 1},
        {"t": 41.0, "device": -1, "event": "gateway_aggregate", "gateway": "gw1[1]", "duration": 4.0, "updates": 1},
        {"t": 45.0, "device": -1, "event": "backhaul", "gateway": "gw0[0]", "up": True, "bytes": 10, "duration": 6.0},
        {"t": 52.0, "device": -1, "event": "cloud_aggregate", "duration": 2.0, "gateways": 2},
        {"t": 52.0, "round": 1, "device": -1, "event": "server_work", "kind": "aggregate", "duration": 1.0},
    ]  # fmt: skip
    run = write_run(tmp_path / "r", async_rows([50.0, 70.0], [1, 2]), events=events + central,
                    summary={"name": "r", "server_mode": "async"})  # fmt: skip
    fig = build_figures(load_runs([run]))["timeline.png"]
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["server", "cloud", "gateways", "backhaul", "0", "1"]
    bars = _row_bars(ax)
    color = {k: to_hex(v) for k, v in HIERARCHY_COLORS.items()}
    assert bars[1] == [(color["cloud aggregate"], 52.0, pytest.approx(2.0))]
    # two gateways at once: both bars where they happened, overlapping (not pushed one after the other)
    assert sorted(bars[2], key=lambda b: b[2]) == [(color["gateway aggregate"], 41.0, pytest.approx(3.0)),
                                                   (color["gateway aggregate"], 41.0, pytest.approx(4.0))]  # fmt: skip
    assert bars[3] == [(color["backhaul down"], 0.0, pytest.approx(5.0)),
                       (color["backhaul up"], 45.0, pytest.approx(6.0))]  # fmt: skip
    stars = {tuple(xy) for c in ax.collections if isinstance(c, PathCollection) for xy in c.get_offsets()}
    assert {(45.0, 4), (60.0, 5)} <= stars
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "update applied to the model" in texts and "server model update" in texts and "round end" not in texts
    assert {"cloud aggregate", "gateway aggregate", "backhaul down", "backhaul up"} <= set(texts)
    assert "the gateways" in fig.get_suptitle()


def test_staleness_is_counted_over_the_apply_events_only_and_says_when_it_stopped_early(tmp_path: Path) -> None:
    from analysis.event_log import scan_events

    path = tmp_path / "events.jsonl"
    lines = [json.dumps(apply(float(i), i, i % 3) if i % 2 else {"t": float(i), "device": i, "event": "upload",
                                                                   "staleness": 9}) for i in range(400)]  # fmt: skip
    path.write_text("\n".join(lines) + '\n{"t": 500.0, "device": 1, "event": "apply", "staleness": 1')  # cut
    read = scan_events(path, count_staleness=True)
    # the odd i of 1..399 have i % 3 = 1, 0, 2, 1, 0, 2, ... : 66 of each, and 397 -> 1, 399 -> 0 (the line cut
    # mid-write and the uploads' staleness do not count)
    assert not read.staleness_truncated and read.staleness.tolist() == [67, 67, 66]
    early = scan_events(path, count_staleness=True, max_bytes=5000)
    assert early.staleness_truncated and 0 < early.staleness.sum() < 200
    assert scan_events(tmp_path / "none.jsonl", count_staleness=True).staleness is None
    assert scan_events(path).staleness is None  # not asked for
