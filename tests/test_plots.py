"""analysis.plots / analysis.rundir on small hand-made run directories (no simulator involved)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

from analysis.event_log import sample_devices, scan_events
from analysis.plots import PlotInputError, build_figures, plot_runs
from analysis.rundir import load_run, load_runs

CLASSES = ("mcu", "sbc", "phone")
EXPECTED = {
    "accuracy_vs_time.png",
    "accuracy_vs_energy.png",
    "bytes_per_round.png",
    "devices_alive.png",
    "energy_by_class.png",
    "timeline.png",
}


def make_run_dir(
    path: Path,
    name: str = "tiny",
    algorithm: str = "fedavg",
    rounds: int = 12,
    devices: int = 30,
    per_round: int = 6,
    seed: int = 0,
    evaluate: bool = True,
    levels: tuple[str, ...] = ("a", "b"),
) -> Path:
    """Write a small but realistic run directory: rounds/devices csv, events.jsonl, summary, scenario."""
    rng = np.random.default_rng(seed)
    path.mkdir(parents=True)
    cls = np.array([CLASSES[i % len(CLASSES)] for i in range(devices)])
    speed = {"mcu": 8.0, "sbc": 2.0, "phone": 1.0}
    alive = np.ones(devices, dtype=bool)
    dev_stats = {
        k: np.zeros(devices)
        for k in (
            "tasks",
            "completed",
            "failed_oom",
            "failed_depleted",
            "failed_refused",
            "failed_deadline",
            "e_compute",
            "e_radio",
        )
    }
    depleted_at = np.full(devices, np.nan)
    events: list[dict] = []
    rows: list[dict] = []
    t = 0.0
    e_idle = 0.0
    b_down = b_up = 0.0
    for r in range(rounds):
        chosen = rng.choice(np.flatnonzero(alive), size=min(per_round, int(alive.sum())), replace=False)
        counts = dict.fromkeys(
            ("completed", "failed_oom", "failed_depleted", "failed_refused", "failed_deadline"), 0
        )
        t_end = t
        e_round = 0.0
        for d in chosen:
            d = int(d)
            dev_stats["tasks"][d] += 1
            s = speed[cls[d]]
            t0 = t + rng.uniform(0, 1)
            arrive = t0 + 2 * s * rng.uniform(0.8, 1.2)
            events.append({"t": round(t0, 6), "round": r, "device": d, "event": "dispatch", "level": "a"})
            b_down += 4e5
            if cls[d] == "mcu" and rng.random() < 0.3:
                events.append(
                    {"t": round(arrive, 6), "round": r, "device": d, "event": "oom", "free_mb": 1.0}
                )
                counts["failed_oom"] += 1
                dev_stats["failed_oom"][d] += 1
                t_end = max(t_end, arrive)
                continue
            events.append(
                {"t": round(arrive, 6), "round": r, "device": d, "event": "arrive", "free_mb": 30.0}
            )
            train_end = arrive + 10 * s * rng.uniform(0.8, 1.2)
            events.append(
                {"t": round(arrive, 6), "round": r, "device": d, "event": "train_start", "level": "a"}
            )
            if r > rounds // 2 and rng.random() < 0.1:
                die = (arrive + train_end) / 2
                events.append({"t": round(die, 6), "round": r, "device": d, "event": "depleted"})
                alive[d] = False
                depleted_at[d] = die
                counts["failed_depleted"] += 1
                dev_stats["failed_depleted"][d] += 1
                t_end = max(t_end, die)
                continue
            events.append({"t": round(train_end, 6), "round": r, "device": d, "event": "train_end"})
            up = train_end + 3 * s * rng.uniform(0.8, 1.2)
            events.append({"t": round(up, 6), "round": r, "device": d, "event": "upload", "bytes": 400000})
            events.append({"t": round(up, 6), "round": r, "device": d, "event": "accepted"})
            b_up += 4e5
            counts["completed"] += 1
            dev_stats["completed"][d] += 1
            ec, er = 5.0 * s * 10, 1.0 * s * 5
            dev_stats["e_compute"][d] += ec
            dev_stats["e_radio"][d] += er
            e_round += ec + er
            t_end = max(t_end, up)
        round_time = t_end - t
        t = t_end
        ei = 0.1 * devices * round_time
        e_comp, e_radio = dev_stats["e_compute"].sum(), dev_stats["e_radio"].sum()
        e_idle += ei
        e_tot = e_comp + e_radio + e_idle
        evaluated = evaluate and (r % 3 == 2 or r == rounds - 1)
        acc = 0.1 + 0.8 * (1 - np.exp(-(r + 1) / 5)) + rng.normal(0, 0.01)
        row = {
            "round": r, "sim_time_s": round(t, 6), "round_time_s": round(round_time, 6),
            "selected": len(chosen), **counts, "alive": int(alive.sum()),
            "acc_full": f"{acc:.4f}" if evaluated else "",
            "acc_avg": f"{acc - 0.05:.4f}" if evaluated else "",
            **{f"acc_{lv}": (f"{acc - 0.02 * (i + 1):.4f}" if evaluated else "") for i, lv in enumerate(levels)},
            "loss_full": f"{2 * (1 - acc):.4f}" if evaluated else "",
            "train_loss": f"{2.2 * (1 - acc):.4f}",
            "energy_j": round(e_tot, 3), "energy_compute_j": round(e_comp, 3), "energy_radio_j": round(e_radio, 3),
            "energy_idle_j": round(e_idle, 3), "energy_round_j": round(e_round + ei, 3),
            "bytes_down": int(b_down), "bytes_up": int(b_up),
            "bytes_down_round": int(len(chosen) * 4e5), "bytes_up_round": counts["completed"] * 400000,
            "host_train_s": 0.12, "host_eval_s": 0.03 if evaluated else 0.0, "host_other_s": 0.004,
            "energy_mcu_j": round(e_tot / 3, 3),  # an unknown future column: must be ignored
        }  # fmt: skip
        rows.append(row)
    with open(path / "rounds.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    idle = 0.1 * t
    with open(path / "devices.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["device", "group", "device_class", "samples", "tasks", "completed", "failed_oom",
                    "failed_depleted", "failed_refused", "failed_deadline", "energy_j", "energy_compute_j",
                    "energy_radio_j", "energy_idle_j", "depleted_at_s"])  # fmt: skip
        for d in range(devices):
            ec, er = dev_stats["e_compute"][d], dev_stats["e_radio"][d]
            w.writerow([d, f"g-{cls[d]}", cls[d], 100 + d, *(int(dev_stats[k][d]) for k in (
                "tasks", "completed", "failed_oom", "failed_depleted", "failed_refused", "failed_deadline")),
                f"{ec + er + idle:.6g}", f"{ec:.6g}", f"{er:.6g}", f"{idle:.6g}",
                "" if np.isnan(depleted_at[d]) else f"{depleted_at[d]:.6g}"])  # fmt: skip
    events.sort(key=lambda e: e["t"])
    with open(path / "events.jsonl", "w") as f:
        f.writelines(json.dumps(e) + "\n" for e in events)
        f.write('{"t": 999.0, "round": 3, "devi')  # a half-written last line, as in a live run
    (path / "summary.json").write_text(json.dumps({"name": name, "algorithm": algorithm, "rounds": rounds}))
    (path / "scenario.resolved.yaml").write_text(
        f"name: {name}\nseed: {seed}\nalgorithm:\n  name: {algorithm}\n"
    )
    return path


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("runs")
    a = make_run_dir(base / "tiny-20240101-000000", "tiny", "fedavg", seed=1)
    b = make_run_dir(base / "tiny-20240101-000100", "tiny", "heterofl", seed=2, rounds=15)
    return a, b


@pytest.fixture(scope="module")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of 6 rounds of 4 of 8 devices, one of which dies (so every figure is drawn): for the checks of where
    files go, which do not depend on a run's size (drawing its figures costs about two thirds of two_runs' one)."""
    return make_run_dir(tmp_path_factory.mktemp("small") / "tiny-20240101-000200", rounds=6, devices=8, per_round=4, seed=1)


def _assert_png(path: Path) -> None:
    assert path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", path
    img = imread(path)
    assert img.ndim == 3 and img.shape[0] > 200 and img.shape[1] > 300, (path, img.shape)
    assert img[..., :3].std() > 0.01, f"{path} looks blank"


def test_load_run_reads_columns(two_runs: tuple[Path, Path]) -> None:
    run = load_run(two_runs[0])
    assert run.name == "tiny" and run.algorithm == "fedavg" and run.label == "tiny (fedavg)"
    assert run.n_rounds == 12
    acc = run.rounds["acc_full"]
    assert acc.dtype == float and np.isnan(acc[0]) and np.isfinite(acc[2])
    assert "acc_a" in run.rounds and "energy_mcu_j" in run.rounds
    assert run.devices["device_class"][:3].tolist() == ["mcu", "sbc", "phone"]
    assert run.devices["energy_j"].dtype == float
    assert np.isnan(run.devices["depleted_at_s"]).any()


def test_labels_are_disambiguated(two_runs: tuple[Path, Path], tmp_path: Path) -> None:
    twin = make_run_dir(tmp_path / "other", "tiny", "fedavg", rounds=3, devices=5)
    runs = load_runs([two_runs[0], two_runs[1], twin])
    labels = [r.label for r in runs]
    assert labels[1] == "tiny (heterofl)"
    assert labels[0] == f"tiny (fedavg) [{two_runs[0].name}]" and labels[2] == "tiny (fedavg) [other]"


def test_plot_one_run_default_folder(small_run: Path) -> None:
    a = small_run
    written = plot_runs([a])
    assert {p.name for p in written} == EXPECTED
    assert all(p.parent == a / "plots" for p in written)
    for p in written:
        _assert_png(p)
    # a second call overwrites its own files instead of piling up name-1.png
    again = plot_runs([a])
    assert sorted(again) == sorted(written)
    assert not list((a / "plots").glob("*-1.png"))


def test_plot_two_runs_overlay(two_runs: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "figs"
    written = plot_runs(list(two_runs), out=out)
    assert {p.name for p in written} == EXPECTED
    for p in written:
        _assert_png(p)
    figs = build_figures(load_runs(two_runs))
    legend = figs["accuracy_vs_energy.png"].legends[0]  # the figure's, outside the axes: it covers no data
    labels = [t.get_text() for t in legend.get_texts()]
    assert labels == ["tiny (fedavg)", "tiny (heterofl)", "target accuracy"]  # no targets declared: 60 %, 80 %
    # each run keeps its colour across figures
    c_energy = [h.get_color() for h in legend.legend_handles[:2]]
    c_bytes = [h.get_color() for h in figs["bytes_per_round.png"].legends[0].legend_handles[:2]]
    assert c_energy == c_bytes
    assert all(ax.get_legend() is None for fig in figs.values() for ax in fig.axes)


def test_existing_user_file_is_not_overwritten(small_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    mine = out / "accuracy_vs_time.png"
    mine.write_bytes(b"my own figure")
    written = plot_runs([small_run], out=out)
    assert mine.read_bytes() == b"my own figure"
    assert out / "accuracy_vs_time-1.png" in written
    assert out / "accuracy_vs_time-1.png" in plot_runs([small_run], out=out)  # ours: overwritten
    assert not (out / "accuracy_vs_time-2.png").exists()


def test_missing_rounds_csv(tmp_path: Path) -> None:
    run = make_run_dir(tmp_path / "broken", rounds=3, devices=4)
    (run / "rounds.csv").unlink()
    with pytest.raises(PlotInputError, match=r"broken: neither a run folder \(no rounds\.csv\)"):
        plot_runs([run])
    with pytest.raises(PlotInputError, match="does not exist"):
        plot_runs([tmp_path / "nowhere"])
    (run / "rounds.csv").write_text("")
    with pytest.raises(PlotInputError, match="rounds.csv"):
        load_run(run)


def test_run_without_accuracy_still_plots_bytes(tmp_path: Path) -> None:
    run = make_run_dir(tmp_path / "noeval", evaluate=False, rounds=5, devices=8)
    (run / "events.jsonl").unlink()
    (run / "devices.csv").unlink()
    (run / "summary.json").unlink()  # name falls back to scenario.resolved.yaml
    written = {p.name for p in plot_runs([run])}
    alive = load_run(run).rounds["alive"]
    died = {"devices_alive.png"} if alive.min() < alive.max() else set()  # fleet size unknown: the most alive
    assert written == {"bytes_per_round.png", *died}
    _assert_png(run / "plots" / "bytes_per_round.png")
    assert load_run(run).label == "tiny (fedavg)"


def test_timeline_sampling_and_event_cap(tmp_path: Path) -> None:
    run = make_run_dir(tmp_path / "big", rounds=6, devices=60, per_round=30)
    r = load_run(run)
    sample = sample_devices(r.devices, 20)
    assert 0 < len(sample) <= 20 and sample == sorted(sample)
    ev = scan_events(run / "events.jsonl", sample[:3], fill=2, max_bytes=3000).timeline
    assert (
        ev.truncated and 0 < len(ev.by_device) <= 5 and 0 < ev.t_last < load_run(run).rounds["sim_time_s"][-1]
    )
    full = scan_events(run / "events.jsonl", sample[:3]).timeline
    assert not full.truncated and set(full.by_device) == set(sample[:3])
    assert all(e["device"] == d for d, evs in full.by_device.items() for e in evs)
    fig = build_figures([r])["timeline.png"]
    assert len(fig.axes[0].get_yticklabels()) <= 20


def test_live_run_partial_files(tmp_path: Path) -> None:
    """A run still in progress: header-only or half-written rounds.csv must not crash anything."""
    run = make_run_dir(tmp_path / "live", rounds=4, devices=6)
    text = (run / "rounds.csv").read_text()
    header = text.splitlines()[0]
    (run / "rounds.csv").write_text(header + "\n")
    assert load_run(run).n_rounds == 0
    # no round finished yet: only the figures that do not need rounds.csv rows
    assert {p.name for p in plot_runs([run], out=tmp_path / "p0")} == {"energy_by_class.png", "timeline.png"}
    (run / "rounds.csv").write_text(text + "4,812.5,10")  # last row cut mid-write
    r = load_run(run)
    assert r.n_rounds == 4 and np.isfinite(r.rounds["bytes_up"]).all()
    assert "bytes_per_round.png" in {p.name for p in plot_runs([run], out=tmp_path / "p1")}


def test_timeline_shows_the_servers_work_as_its_own_row(tmp_path: Path) -> None:
    run = make_run_dir(tmp_path / "srv", rounds=3, devices=6)
    events = run / "events.jsonl"
    server = {"t": 0.0, "round": 0, "device": -1, "event": "server_work", "what": "pretrain", "duration": 2.5}
    events.write_text(json.dumps(server) + "\n" + events.read_text())
    fig = build_figures([load_run(run)])["timeline.png"]
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[0] == "server" and labels.count("server") == 1
    bars = [c for c in ax.collections if hasattr(c, "get_paths") and len(c.get_paths()) == 1]
    server_bars = [b for b in bars if b.get_paths()[0].get_extents().y0 < 0]  # row 0 spans y in (-0.31, 0.31)
    assert server_bars and server_bars[0].get_paths()[0].get_extents().width == pytest.approx(2.5, rel=1e-6)
    assert "and the server" in fig.get_suptitle()


def test_the_server_row_is_split_by_kind_of_work():
    from analysis.plots import PHASE_COLORS, _server_spans

    events = [
        {"event": "server_work", "t": 0.0, "duration": 2.0, "kind": "train"},
        {"event": "server_work", "t": 2.0, "duration": 0.5, "kind": "qsgd"},
        {"event": "server_work", "t": 9.0, "duration": 0.1, "kind": "aggregate"},
        {"event": "server_work", "t": 9.1, "duration": 0.0, "kind": "aggregate"},  # nothing to draw
        {"event": "server_work", "t": 12.0, "duration": 1.0},  # a run from before the split: other
    ]
    spans, fails, lates = _server_spans(events)
    assert spans == {
        "server: train": [(0.0, 2.0)], "server: qsgd": [(2.0, 0.5)], "server: aggregate": [(9.0, 0.1)],
        "server: other": [(12.0, 1.0)],
    }  # fmt: skip
    assert fails == [] and lates == [] and all(k in PHASE_COLORS for k in spans)


def test_user_text_that_looks_like_mathtext_is_drawn_verbatim(tmp_path):
    # a run folder named like broken TeX: matplotlib used to parse it as mathtext and crash the figure
    from study_fixtures import write_run

    # two runs of one name: each label gets its folder name, and the legend draws it
    runs = [write_run(tmp_path / d, "fedavg", 0, [0.2, 0.4, 0.6]) for d in ("run$\\frac{$x", "other")]
    written = plot_runs(runs, tmp_path / "plots")
    assert written and all(p.stat().st_size > 0 for p in written)


def test_timeline_marks_each_failure_by_its_cause_names_the_classes_and_keeps_bars_inside(tmp_path: Path) -> None:
    """One device a cause: OOM, offline, battery, deadline; each gets its own marker and legend entry."""
    from analysis.plots import FAILURE_STYLE

    run = make_run_dir(tmp_path / "causes", rounds=2, devices=6)
    ends = [
        {"t": 1.0, "round": 0, "device": 0, "event": "oom", "need": 3.0},
        {"t": 1.5, "round": 0, "device": 1, "event": "offline", "phase": "train"},
        {"t": 2.0, "round": 0, "device": 2, "event": "depleted", "phase": "download"},
        {"t": 2.5, "round": 0, "device": 3, "event": "dropped", "reason": "deadline"},
    ]
    starts = [{"t": 0.5, "round": 0, "device": d, "event": "dispatch", "level": "a"} for d in range(4)]
    # a task that ends at the very last instant: its widened bar must still end inside the axes
    last = [{"t": 40.0, "round": 1, "device": 4, "event": "dispatch"}, {"t": 40.0, "round": 1, "device": 4, "event": "arrive"}]
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in [*starts, *ends, *last]))
    fig = build_figures([load_run(run)])["timeline.png"]
    ax = fig.axes[0]
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    for cause in ("oom", "offline", "depleted", "deadline"):
        assert FAILURE_STYLE[cause][2] in texts, (cause, texts)
    assert FAILURE_STYLE["surplus"][2] not in texts  # no surplus here: no entry for it
    from matplotlib.collections import PathCollection, PolyCollection

    markers = {tuple(xy) for c in ax.collections if isinstance(c, PathCollection) for xy in c.get_offsets()}
    rows = {d: i for i, d in enumerate(int(t.get_text().split()[0]) for t in ax.get_yticklabels())}
    assert {(1.0, rows[0]), (1.5, rows[1]), (2.0, rows[2]), (2.5, rows[3])} <= markers
    bars = [p.get_extents() for c in ax.collections if isinstance(c, PolyCollection) for p in c.get_paths()]
    assert bars and max(b.x1 for b in bars) <= ax.get_xlim()[1] and min(b.x0 for b in bars) >= ax.get_xlim()[0]
    assert "classes:" in ax.get_title() and "mcu = microcontroller" in ax.get_title()
    assert ax.get_ylabel() == "device · class"


def test_plot_of_runs_that_declare_different_targets_draws_all_and_says_so(tmp_path: Path, capsys) -> None:
    from study_fixtures import write_run

    from iotfl_sim.cli import main

    a = write_run(tmp_path / "a", "fedavg", 0, [0.3, 0.55, 0.75], targets=[0.5])
    b = write_run(tmp_path / "b", "heterofl", 0, [0.3, 0.55, 0.75], targets=[0.7])
    assert main(["plot", str(a), str(b), "--out", str(tmp_path / "p")]) == 0
    assert "differ (50% in 1 run; 70% in 1 run)" in capsys.readouterr().err
    fig = build_figures(load_runs([a, b]))["accuracy_vs_time.png"]
    assert sorted(ln.get_ydata()[0] for ln in fig.axes[0].lines if ln.get_linestyle() == ":") == [50.0, 70.0]


def _add_columns(run: Path, columns) -> list[dict[str, str]]:
    """Rewrite the run's rounds.csv with ``columns(i, row)``'s extra columns on each row; returns the rows."""
    rounds = run / "rounds.csv"
    with rounds.open(newline="") as fh:
        table = list(csv.DictReader(fh))
    for i, r in enumerate(table):
        r.update(columns(i, r))
    with rounds.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(table[0]))
        w.writeheader()
        w.writerows(table)
    return table


def test_carbon_figure_only_for_runs_with_carbon(tmp_path: Path) -> None:
    run = make_run_dir(tmp_path / "run")
    assert "accuracy_vs_carbon.png" not in build_figures(load_runs([run]))
    table = _add_columns(run, lambda i, r: {"carbon_g": str(float(r["energy_j"]) * 0.25)})  # carbon ~ energy
    fig = build_figures(load_runs([run]))["accuracy_vs_carbon.png"]
    ax = fig.axes[0]
    assert "grid carbon" in ax.get_xlabel() and ax.get_xlabel().endswith("(g CO2)")
    evaluated = [r for r in table if r["acc_full"]]
    x = ax.lines[0].get_xdata()
    assert np.allclose(x, [float(r["carbon_g"]) for r in evaluated])


def test_fleet_state_figure_draws_each_sampled_quantity(tmp_path: Path) -> None:
    run = make_run_dir(tmp_path / "run")
    assert "fleet_state.png" not in build_figures(load_runs([run]))
    table = _add_columns(
        run,
        lambda i, r: {"soc_phone": str(1.0 - 0.1 * i), "harvest_w_phone": str(5.0 * (i % 2)), "temp_c_sbc": str(60.0 + i)},
    )
    fig = build_figures(load_runs([run]))["fleet_state.png"]
    soc, temp = fig.axes[0], fig.axes[1]  # the panels in order (twin axes come after)
    assert "state of charge" in soc.get_ylabel() and "temperature" in temp.get_ylabel()
    assert np.allclose(soc.lines[0].get_ydata(), [100.0 * (1.0 - 0.1 * i) for i in range(len(table))])
    assert np.allclose(temp.lines[0].get_ydata(), [60.0 + i for i in range(len(table))])
    assert len(fig.axes) == 3  # soc, temperature, and the harvest's twin axis (no link-rate panel without data)
