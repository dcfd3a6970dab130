"""analysis.event_log: a run's events.jsonl read once, in bounded memory, whatever its length (issue 44, item 9)."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest

import analysis.event_log as event_log
from analysis.event_log import MAX_ROW_BARS, scan_events
from analysis.plots import build_figures
from analysis.rundir import load_run

DEVICES = 30


def task_lines(k: int, d: int) -> list[str]:
    """The events of device ``d``'s task in wave ``k`` of an asynchronous run, as the simulator writes them."""
    t = 10.0 * k + 0.1 * d
    return [
        f'{{"t": {t:.6f}, "round": {k}, "device": {d}, "event": "dispatch", "level": "full", "rate": 1.0}}',
        f'{{"t": {t + 1:.6f}, "round": {k}, "device": {d}, "event": "arrive", "free": 900.5}}',
        f'{{"t": {t + 1:.6f}, "round": {k}, "device": {d}, "event": "train_start", "level": "full", "flops": 6e8}}',
        f'{{"t": {t + 3:.6f}, "round": {k}, "device": {d}, "event": "train_end"}}',
        f'{{"t": {t + 4:.6f}, "round": {k}, "device": {d}, "event": "upload", "bytes": 378664.0}}',
        f'{{"t": {t + 4:.6f}, "round": {k}, "device": {d}, "event": "accepted"}}',
        f'{{"t": {t + 5:.6f}, "round": {k}, "device": {d}, "event": "apply", "staleness": {d % 4}, "version": {k}}}',
    ]


def write_async_run(path: Path, waves: int, devices: int = DEVICES) -> Path:
    """A run folder of ``waves`` waves in which each device does one task; rounds.csv and devices.csv are the same
    whatever ``waves`` (only the event log grows)."""
    path.mkdir(parents=True)
    with open(path / "events.jsonl", "w") as f:
        for k in range(waves):
            server = (f'{{"t": {10.0 * k + 6:.6f}, "round": {k}, "device": -1, "event": "server_work", '
                      f'"kind": "aggregate", "what": "fedbuff", "flops": 1e6, "duration": 0.002}}')  # fmt: skip
            lines = [*(line for d in range(devices) for line in task_lines(k, d)), server]
            lines.sort(key=lambda line: float(line[6 : line.index(",")]))  # in time order, as the simulator writes
            f.write("\n".join(lines) + "\n")
    (path / "rounds.csv").write_text(
        "round,sim_time_s,updates_applied,staleness_mean\n" + "".join(f"{r},{100.0 * r},{30 * r},1.5\n" for r in (1, 2))
    )
    (path / "devices.csv").write_text(
        "device,group,device_class,tasks,failed_oom\n" + "".join(f"{d},g,phone,{waves},0\n" for d in range(devices))
    )
    (path / "summary.json").write_text(json.dumps({"name": "long", "algorithm": "fedbuff", "server_mode": "async"}))
    return path


def peak_while_plotting(run: Path) -> int:
    """tracemalloc's peak (bytes) while loading the run and building every figure from it."""
    tracemalloc.start()
    try:
        figures = build_figures([load_run(run)])
        assert {"timeline.png", "staleness.png"} <= set(figures)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_plotting_memory_does_not_grow_with_the_event_log(tmp_path: Path) -> None:
    """A log three times longer (5.5 MB -> 16.5 MB) costs the figures no more memory: the timeline keeps a bounded
    sample, staleness is counted, not kept. Reading every event of the sampled devices (the old reader) grows by
    ~0.5 KB a line kept: 127,000 more lines of the 4 devices and the server, ~65 MB."""
    short = write_async_run(tmp_path / "short", 2200, devices=4)
    long = write_async_run(tmp_path / "long", 6600, devices=4)
    assert (long / "events.jsonl").stat().st_size > 16 * 2**20
    grown = peak_while_plotting(long) - peak_while_plotting(short)
    assert grown < 8 * 2**20, f"{grown / 2**20:.1f} MB more for a log 3x longer"


def test_the_timeline_stops_where_a_row_is_full_and_staleness_counts_the_whole_log(tmp_path: Path) -> None:
    run = write_async_run(tmp_path / "run", 100)
    d = scan_events(run / "events.jsonl", [0, 1, -1], count_staleness=True, max_row_bars=6)
    # each task is 3 bars (download from dispatch, train, upload from train_end): device 0 fills its 6 at wave
    # 1's train_end, t = 10 + 3; device 1 (0.1 s later) has then kept wave 1 up to its train_start
    ev = d.timeline
    assert ev.truncated and ev.t_last == pytest.approx(13.0)
    assert [e["event"] for e in ev.by_device[0][7:]] == ["dispatch", "arrive", "train_start", "train_end"]
    assert [e["event"] for e in ev.by_device[1][7:]] == ["dispatch", "arrive", "train_start"]
    assert [e["t"] for e in ev.by_device[-1]] == [6.0]
    # staleness d % 4 over 30 devices a wave (0, 1: 8 devices each; 2, 3: 7), 100 waves, whatever the timeline
    assert d.staleness.tolist() == [800, 800, 700, 700] and not d.staleness_truncated


def test_the_timeline_figure_shows_the_run_up_to_the_full_row(tmp_path: Path) -> None:
    """With 200 bars a row at most, a long run's timeline ends where a row filled, not at the run's end (where
    400 tasks' bars, each widened to 0.4 % of the axis, would run off it)."""
    run = write_async_run(tmp_path / "run", 400)
    # a device's task is 3 bars (the server's row has one a wave): device 0, sampled and first in each wave,
    # reaches 200 at its 200th bar, the train_start of wave 66, at 10 * 66 + 1 s; the bars before it, widened to
    # 0.4 % of the axis (2.6 s, a task 7.9 s every 10 s), are not pushed past it
    assert MAX_ROW_BARS == 200
    fig = build_figures([load_run(run)])["timeline.png"]
    assert "the first 661 s of the run" in fig.get_suptitle()
    # the axis ends with device 0's last download (660 -> 661 s), widened to 0.4 % of the axis: 660 / 0.996
    assert fig.axes[0].get_xlim()[1] == pytest.approx(660 / (1 - 0.004))


def test_the_figures_read_the_log_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = write_async_run(tmp_path / "run", 5)
    calls: list[Path] = []
    real = event_log.scan_events

    def counting(path, *a, **k):
        calls.append(Path(path))
        return real(path, *a, **k)

    monkeypatch.setattr(event_log, "scan_events", counting)
    figures = build_figures([load_run(run)])
    assert {"timeline.png", "staleness.png"} <= set(figures)
    assert calls == [run / "events.jsonl"]


def test_a_line_of_megabytes_is_skipped_without_holding_it(tmp_path: Path) -> None:
    """A log whose middle is 24 MB of NUL bytes without a newline (a crash's hole in the file): the events
    before and after it are read, and the hole is never held in memory."""
    path = tmp_path / "events.jsonl"
    with open(path, "wb") as f:
        f.write(("\n".join(task_lines(0, 3)) + "\n").encode())
        f.write(b"\0" * (24 * 2**20) + b"\n")
        f.write(("\n".join(task_lines(1, 3)) + "\n").encode())
    tracemalloc.start()
    try:
        ev = scan_events(path, [3], count_staleness=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [e["round"] for e in ev.timeline.by_device[3]] == [0] * 7 + [1] * 7
    assert ev.staleness.tolist() == [0, 0, 0, 2]
    assert peak < 16 * 2**20, f"{peak / 2**20:.1f} MB"


def test_a_number_of_thousands_of_digits_in_a_damaged_line_is_skipped(tmp_path: Path) -> None:
    """Python refuses to convert an integer of over 4,300 digits (ValueError, a traceback out of `plot`): such a
    device id or staleness is not a number the run wrote, and its line is skipped like any other damaged one."""
    run = write_async_run(tmp_path / "run", 2, devices=2)
    huge = "9" * 5000
    with open(run / "events.jsonl", "a") as f:
        f.write(f'{{"t": 30.0, "round": 2, "device": {huge}, "event": "apply", "staleness": {huge}}}\n')
        f.write(f'{{"t": 31.0, "round": 2, "device": 0, "event": "apply", "staleness": {huge}}}\n')
    d = scan_events(run / "events.jsonl", [0, 1], fill=5, count_staleness=True)
    assert d.staleness.tolist() == [2, 2]  # staleness d % 4 of devices 0 and 1, two waves; the damaged ones left out
    assert set(d.timeline.by_device) == {-1, 0, 1}  # (the server, -1, seen first among the others)
    assert "timeline.png" in build_figures([load_run(run)])
