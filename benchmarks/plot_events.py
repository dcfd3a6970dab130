"""`iotfl-sim plot` on a run with a large event log: wall time, CPU time and peak memory (issue 44, item 9).

The issue's run had a 295 MB events.jsonl; plotting it took 53 s and 2.3 GB. Target: <= 30 s and <= 500 MB peak
RSS of the whole `iotfl-sim plot` process on 2 cores.

The log is a real one made longer: a real system-only run of `scenarios/async_iot_fleet_smoke.yaml` (FedBuff on
30 devices, asynchronous: dispatch / arrive / train_start / train_end / upload / accepted / apply / server_work
events, and a few offline and out-of-memory failures) is written first, then its events.jsonl is repeated until it
reaches --mb megabytes, each copy shifted in simulated time, round and server version as the run would have gone
on (rounds.csv likewise, its cumulative columns carried on), so every line has the shape and the fields the
simulator writes and the plot reads the same code paths as on a run that long. With 30 devices the timeline's
sample of 20 devices covers two thirds of the log, the case that kept 2.3 GB of events in memory.

    IOTFL_DATA=/work/shared/datasets python benchmarks/plot_events.py [--mb 300] [--keep DIR]

The plot runs in a child process, timed by ``os.wait4`` (its own user + system CPU seconds and peak RSS, not
those of the run that made the log). Writes benchmarks/plot_events.md.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
OUT_MD = HERE / "plot_events.md"
SCENARIO = REPO / "scenarios" / "async_iot_fleet_smoke.yaml"
BASE_ROUNDS = 300
MB = 1 << 20


def cli() -> list[str]:
    """The `iotfl-sim` command of this checkout (the module's entry point, with this interpreter)."""
    return [sys.executable, "-c", "import sys; from iotfl_sim.cli import main; sys.exit(main())"]


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [e.get("PYTHONPATH")])])
    return e


def base_run(out: Path) -> Path:
    """A real system-only asynchronous run (about 1 MB of events); its folder."""
    cmd = [*cli(), "run", str(SCENARIO), "--set", "numerics=none", "--set", f"rounds={BASE_ROUNDS}",
           "--out", str(out), "--quiet"]  # fmt: skip
    subprocess.run(cmd, check=True, env=env(), stdout=subprocess.DEVNULL)
    (run,) = out.iterdir()
    return run


def _monotone(values: list[float]) -> bool:
    return all(b >= a for a, b in zip(values, values[1:], strict=False))


def extend_run(run: Path, target_bytes: int) -> int:
    """Repeat the run's events (and rounds.csv rows) until events.jsonl holds ``target_bytes``; the copies."""
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    with open(run / "rounds.csv", newline="") as f:
        header, *rows = list(csv.reader(f))
    t_span = float(rows[-1][header.index("sim_time_s")])
    last_version = max(int(e.get("version", 0)) for e in events)
    wave_span = max(int(e.get("round", 0)) for e in events) + 1
    columns = list(zip(*rows, strict=True))
    # cumulative columns (never decreasing over the run: totals, the round counter) carry on in every copy
    step = {}
    for i, col in enumerate(columns):
        try:
            values = [float(v) for v in col]
        except ValueError:
            continue
        if header[i] != "round_time_s" and _monotone(values) and values[-1] > values[0]:
            step[i] = values[-1]
    size = (run / "events.jsonl").stat().st_size
    copies = max(1, -(-target_bytes // size))
    with open(run / "events.jsonl", "w") as f:
        for c in range(copies):
            lines = []
            for e in events:
                e2 = dict(e)
                e2["t"] = round(e["t"] + c * t_span, 6)
                if "round" in e:
                    e2["round"] = e["round"] + c * wave_span
                if "version" in e:
                    e2["version"] = e["version"] + c * last_version
                lines.append(json.dumps(e2))
            f.write("\n".join(lines) + "\n")
    with open(run / "rounds.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        for c in range(copies):
            for row in rows:
                w.writerow([f"{float(v) + c * step[i]:.10g}" if i in step and v else v for i, v in enumerate(row)])
    return copies


def measure_plot(run: Path, out: Path) -> dict:
    """`iotfl-sim plot RUN --out OUT` in a child process: wall, its CPU seconds and peak RSS."""
    cmd = [*cli(), "plot", str(run), "--out", str(out)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    stdout, stderr = proc.stdout.read().decode(), proc.stderr.read().decode()  # small: the figures' paths
    if proc.returncode != 0:
        raise SystemExit(f"plot failed ({proc.returncode}): {stderr.strip()}")
    return {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "user_s": usage.ru_utime,
        "sys_s": usage.ru_stime,
        "peak_rss_mb": usage.ru_maxrss / 1024,
        "figures": [Path(p).name for p in stdout.split()],
        "stderr": stderr.strip(),
    }


def write_md(info: dict, path: Path) -> None:
    r = info["result"]
    ok_t, ok_m = r["wall_s"] <= 30, r["peak_rss_mb"] <= 500
    lines = [
        "# `iotfl-sim plot` on a run with a large event log",
        "",
        "Target (issue 44, item 9: a 295 MB events.jsonl took 53 s and 2.3 GB): <= 30 s and <= 500 MB peak memory",
        "(RSS of the whole `iotfl-sim plot` process) on 2 cores.",
        "",
        "```bash",
        f"IOTFL_DATA=/work/shared/datasets python benchmarks/plot_events.py --mb {info['mb']}",
        "```",
        "",
        f"The log: a real system-only run of `{SCENARIO.relative_to(REPO)}` ({BASE_ROUNDS} server versions, "
        f"{info['base_bytes'] / MB:.2f} MB of events) repeated {info['copies']} times, shifted in time, round and "
        f"version: **{info['events_bytes'] / MB:.0f} MB, {info['lines']:,} lines** "
        f"(rounds.csv {info['rounds_rows']:,} rows, devices.csv 30 devices).",
        "",
        f"| measurement ({info['date']}, {os.cpu_count()} cores, load average before / after: "
        f"{info['load_before']} / {info['load_after']}) | value |",
        "|---|---|",
        f"| wall time of `iotfl-sim plot` (child process, start to exit) | **{r['wall_s']:.1f} s** "
        f"({'within' if ok_t else 'over'} 30 s; the process had {r['cpu_s'] / r['wall_s']:.0%} of a core on average) |",
        f"| its CPU time, user + system | {r['cpu_s']:.1f} s ({r['user_s']:.1f} + {r['sys_s']:.1f}) |",
        f"| its peak resident memory (`ru_maxrss` from `os.wait4`) | **{r['peak_rss_mb']:.0f} MB** "
        f"({'within' if ok_m else 'over'} 500 MB) |",
        f"| figures written | {', '.join(r['figures'])} |",
        "",
        "On a machine shared with other jobs (see the load average) the CPU time is the figure to compare across runs;",
        "on a quiet one the wall time is close to it. This host runs the quickstart's training about 4x slower than",
        "the README's reference machine (host train 11.9-12.4 s against 2.8 s, same bits).",
        "",
        "Before the streaming reader (`analysis/event_log.py`), at commit 8cf68c0, the same command on the same log",
        "(2026-11-28 22:28 UTC, load average 2.3 rising to 5.0) took **193.4 s** wall, 100.7 s CPU (93.9 + 6.7) and",
        "**2,621 MB**: it kept every event of the 20 sampled devices (up to 3 million lines, as Python dicts) and every",
        "`apply` event, read the log twice, and parsed rounds.csv 200,000 rows at a time. Now one pass keeps the",
        "timeline's events up to the instant a row holds 200 bars (here the first 157 s of the run: more bars, each",
        "drawn at least 0.4 % of the axis wide, ran past the axis), counts staleness over the whole log, and parses",
        "rounds.csv 20,000 rows at a time.",
    ]
    if r["stderr"]:
        lines += ["", f"stderr: `{r['stderr']}`"]
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=300, help="size of the event log to plot (MB)")
    ap.add_argument("--keep", type=Path, help="build the run folder here and keep it (default: a temporary one)")
    ap.add_argument("--out", type=Path, default=OUT_MD)
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="plot_events-")) if args.keep is None else args.keep
    try:
        run = base_run(tmp / "runs")
        base_bytes = (run / "events.jsonl").stat().st_size
        copies = extend_run(run, args.mb * MB)
        with open(run / "events.jsonl", "rb") as f:
            lines = sum(block.count(b"\n") for block in iter(lambda: f.read(MB), b""))
        with open(run / "rounds.csv", "rb") as f:
            rounds_rows = sum(1 for _ in f) - 1
        load_before = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        date = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
        result = measure_plot(run, tmp / "plots")
        load_after = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        info = {"mb": args.mb, "base_bytes": base_bytes, "copies": copies,
                "events_bytes": (run / "events.jsonl").stat().st_size, "lines": lines, "rounds_rows": rounds_rows,
                "date": date, "load_before": load_before, "load_after": load_after, "result": result}  # fmt: skip
        write_md(info, args.out)
        print(json.dumps(info, indent=1))
    finally:
        if args.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
