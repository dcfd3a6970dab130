"""Asynchronous HeteroFL against synchronous HeteroFL and FedBuff (full model) on a trace-driven IoT fleet (issue 47).

One fleet, benchmarks/async_heterofl.yaml (40 devices: Pis, memory-capped phones, ESP32s with and without PSRAM;
phones and ESP32s replaying scenarios/traces/iot_fleet_availability.csv; HeteroFL levels by declared memory),
three variants that change only the keys of VARIANTS, seeds 0-2, run as one study (``iotfl_sim.api.sweep``: a
zip over the variants, a grid over the seeds; ``iotfl-sim compare <out>/async_heterofl`` tabulates the whole
runs). Every variant runs past HORIZON_S simulated seconds (its ``rounds`` from a seed-0 pilot with a margin;
checked) and is scored on its rows that end within HORIZON_S:

- time and energy to each of TARGETS (``load_study(...).crossings``: the first evaluated row at or above the
  target; a crossing after HORIZON_S counts as not reached), and the fleet's active energy (compute + radio) of
  that row, since idle draw, the same for every variant per simulated second, is most of the fleet's energy;
- accuracy of the full model at the last evaluation within HORIZON_S;
- staleness per HeteroFL level: each ``apply`` event's staleness (events.jsonl) by its device's level. A device's
  level is its group's, read from the HeteroFL runs' ``dispatch`` events (``mode: fix`` with ``assign:
  by_capacity``: one level per group, checked), so FedBuff's updates are shown by the level their device would
  hold under HeteroFL. Synchronous rounds have no staleness (a late update is dropped);
- who trains: devices that got at least one task, per group (FedBuff gives the full model only to devices whose
  declared memory holds it), and failed tasks within HORIZON_S by reason.

    python benchmarks/async_heterofl.py                 # the recorded run: seeds 0 1 2, 2 runs at a time
    python benchmarks/async_heterofl.py --smoke --out /tmp/ah    # seed 0, a few rounds: the pipeline only

Writes the study under --out (default /tmp/async_heterofl_study), then --md (default benchmarks/async_heterofl.md,
its part above the hand-written reading) and --png. Numbers are recorded as they come: nothing tuned.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import statistics
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "benchmarks" / "async_heterofl.yaml"
READING = "**Reading.**"  # the hand-written part starts here; a rerun keeps it
HORIZON_S = 300.0
TARGETS = (0.5, 0.7, 0.8)
CONCURRENCY, BUFFER = 10, 5  # both asynchronous variants: devices training at once, updates per model version
FEDBUFF = {"name": "fedbuff", "buffer_size": BUFFER}


def variants() -> list[dict[str, Any]]:
    """label, then the overrides of the base scenario (the sync variant is the base itself). ``rounds`` counts
    rounds (sync) or model versions (async), set from a seed-0 pilot to pass HORIZON_S with about 20 % to spare
    (sync about 6.5 s a round, async HeteroFL about 1 s a version, FedBuff about 8 s); ``eval_every`` puts
    evaluations about every 5-8 simulated seconds in each."""
    heterofl = yaml.safe_load(BASE.read_text())["algorithm"]
    return [
        {"label": "sync HeteroFL", "algorithm": heterofl, "server.mode": "sync", "server.concurrency": None,
         "server.buffer_size": None, "server.eval_every": 1, "rounds": 56},
        {"label": "async HeteroFL", "algorithm": heterofl, "server.mode": "async", "server.concurrency": CONCURRENCY,
         "server.buffer_size": BUFFER, "server.eval_every": 5, "rounds": 360},
        {"label": "FedBuff (full model)", "algorithm": FEDBUFF, "server.mode": "async",
         "server.concurrency": CONCURRENCY, "server.buffer_size": None, "server.eval_every": 1, "rounds": 46},
    ]  # fmt: skip


SMOKE_ROUNDS = {"sync HeteroFL": 2, "async HeteroFL": 6, "FedBuff (full model)": 2}


def study_spec(seeds: list[int], workers: int, smoke: bool) -> dict[str, Any]:
    vs = variants()
    keys = [k for k in vs[0] if k != "label"]
    zipped = {k: [SMOKE_ROUNDS[v["label"]] if smoke and k == "rounds" else v[k] for v in vs] for k in keys}
    return {"name": "async_heterofl", "base": str(BASE), "zip": zipped, "grid": {"seed": seeds}, "workers": workers}


def label_of(overrides: dict[str, Any]) -> str:
    for v in variants():
        if v["algorithm"]["name"] == overrides["algorithm"]["name"] and v["server.mode"] == overrides["server.mode"]:
            return v["label"]
    raise SystemExit(f"a run of the study matches no variant: {overrides}")


def records(table: Any) -> list[dict[str, Any]]:
    """An api table as a list of dicts (a DataFrame when pandas is installed, else already one)."""
    return table.to_dict("records") if hasattr(table, "to_dict") else list(table)


def _none(v: Any) -> Any:
    return None if v is None or v != v else v  # pandas reads an empty cell as nan


def cpu_seconds() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def stop_fork_server() -> None:
    """Reap the sweep's fork server, so that its workers' CPU time (it reaps them) counts in RUSAGE_CHILDREN."""
    import multiprocessing.forkserver as fs

    stop = getattr(fs._forkserver, "_stop", None)
    if stop is not None:
        stop()


def run_study(seeds: list[int], workers: int, out: Path, smoke: bool) -> tuple[Any, dict[str, float]]:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from iotfl_sim.api import sweep

    load0, cpu0, t0 = os.getloadavg(), cpu_seconds(), time.perf_counter()
    study = sweep(study_spec(seeds, workers, smoke), out=out, workers=workers)
    wall = time.perf_counter() - t0
    stop_fork_server()
    cost = {"wall_s": wall, "cpu_s": cpu_seconds() - cpu0, "load_before": load0[0], "load_after": os.getloadavg()[0],
            "sweeps": 1}  # fmt: skip
    cost = accumulate_cost(study.path / "benchmark_cost.json", cost)
    failed = [f"{r['id']}: {r.get('error')}" for r in study.records if r["status"] != "done"]
    if failed:
        raise SystemExit("runs not done:\n  " + "\n  ".join(failed))
    return study, cost


def accumulate_cost(path: Path, cost: dict[str, float]) -> dict[str, float]:
    """The study's cost over every sweep that worked on it (a rerun reuses finished runs and adds little): CPU and
    wall summed, the first load average before and the last after; kept in the study folder."""
    if path.is_file():
        old = json.loads(path.read_text())
        cost = {**cost, "wall_s": old["wall_s"] + cost["wall_s"], "cpu_s": old["cpu_s"] + cost["cpu_s"],
                "load_before": old["load_before"], "sweeps": old["sweeps"] + 1}  # fmt: skip
    path.write_text(json.dumps(cost))
    return cost


def level_map(study: Any) -> dict[str, str]:
    """group -> HeteroFL level, from the HeteroFL runs' dispatch events; one level per group (mode fix) is checked."""
    seen: dict[str, set[str]] = defaultdict(set)
    for r in study.records:
        if r["overrides"]["algorithm"]["name"] != "heterofl":
            continue
        run = study.runs[r["id"]]
        group = {int(d["device"]): d["group"] for d in records(run.devices)}
        for e in run.events():
            if e["event"] == "dispatch":
                seen[group[e["device"]]].add(e["level"])
    bad = {g: sorted(x) for g, x in seen.items() if len(x) != 1}
    if bad:
        raise SystemExit(f"a group holds several HeteroFL levels (expected mode: fix): {bad}")
    return {g: next(iter(x)) for g, x in seen.items()}


def per_run(study: Any, levels: dict[str, str], horizon: float) -> list[dict[str, Any]]:
    """One dict per run: label, seed, crossings within the horizon, final accuracy, staleness per level, who trained."""
    from iotfl_sim.core.catalog import FAILURE_REASONS

    cross: dict[str, dict[float, dict[str, Any]]] = defaultdict(dict)
    for c in records(study.crossings(list(TARGETS))):
        cross[c["id"]][c["target"]] = c
    out = []
    for r in study.records:
        run = study.runs[r["id"]]
        rows = records(run.rounds)
        if math.isfinite(horizon) and rows[-1]["sim_time_s"] < horizon:
            raise SystemExit(f"{r['id']}: ended at {rows[-1]['sim_time_s']:.1f} s, before the {horizon:g} s horizon: "
                             "raise its rounds in variants()")  # fmt: skip
        by_round = {int(x["round"]): x for x in rows}
        hits = {}
        for t in TARGETS:
            c = cross[r["id"]][t]
            if c["reached"] and c["sim_time_s"] <= horizon:
                row = by_round[int(c["round"])]
                hits[t] = (c["sim_time_s"], c["energy_j"], row["energy_compute_j"] + row["energy_radio_j"])
            else:
                hits[t] = None
        evaluated = [x for x in rows if _none(x["acc_full"]) is not None and x["sim_time_s"] <= horizon]
        devices = records(run.devices)
        group = {int(d["device"]): d["group"] for d in devices}
        stale: dict[str, list[int]] = defaultdict(list)
        took: dict[str, list[float]] = defaultdict(list)  # dispatch to the end of its upload, per level
        sent: dict[int, float] = {}
        fails: dict[str, int] = defaultdict(int)
        for e in run.events():
            if e["t"] > horizon:
                continue
            level = levels.get(group.get(e.get("device", -1), ""), "?")
            if e["event"] == "dispatch":
                sent[e["device"]] = e["t"]
            elif e["event"] == "upload":
                took[level].append(e["t"] - sent[e["device"]])
            elif e["event"] == "apply":
                stale[level].append(int(e["staleness"]))
            elif e["event"] in FAILURE_REASONS:
                fails[e["event"]] += 1
        trained: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for d in devices:
            trained[d["group"]][0] += int(d["tasks"] > 0)
            trained[d["group"]][1] += 1
        out.append({
            "label": label_of(r["overrides"]), "seed": int(r["overrides"]["seed"]), "dir": run.path, "rows": rows,
            "hits": hits, "final": evaluated[-1]["acc_full"], "final_t": evaluated[-1]["sim_time_s"],
            "end_t": rows[-1]["sim_time_s"], "stale": dict(stale), "took": dict(took), "fails": dict(fails), "trained": dict(trained),
            "updates": sum(len(v) for v in stale.values()), "host_s": run.summary["host_time_s"]["total"],
        })  # fmt: skip
    return sorted(out, key=lambda x: ([v["label"] for v in variants()].index(x["label"]), x["seed"]))


def ms(values: list[float], fmt: str = "{:.1f}") -> str:
    """mean ± sample std (ddof 1) of the values, as compare writes them; one value alone."""
    if not values:
        return "N/A"
    if len(values) == 1:
        return fmt.format(values[0])
    return f"{fmt.format(statistics.mean(values))} ± {fmt.format(statistics.stdev(values))}"


def reached(runs: list[dict[str, Any]], t: float, i: int, scale: float = 1.0, fmt: str = "{:.1f}") -> str:
    got = [r["hits"][t][i] / scale for r in runs if r["hits"][t] is not None]
    cell = ms(got, fmt)
    return cell if len(got) == len(runs) or not got else f"{cell} ({len(got)}/{len(runs)})"


def markdown(runs: list[dict[str, Any]], levels: dict[str, str], cost: dict[str, float], seeds: list[int],
             horizon: float) -> str:  # fmt: skip
    labels = [v["label"] for v in variants()]
    span = f"each run's first {horizon:g} simulated seconds" if math.isfinite(horizon) else "whole runs (--smoke)"
    by = {lab: [r for r in runs if r["label"] == lab] for lab in labels}
    pct = "{:.0f}"
    tcols = " | ".join(f"{t:.0%}" for t in TARGETS)
    sep = "|---|" + "---:|" * len(TARGETS)
    lines = [
        "# Asynchronous HeteroFL vs synchronous HeteroFL vs FedBuff (full model) on a trace-driven IoT fleet",
        "",
        f"Generated by `benchmarks/async_heterofl.py` (seeds {', '.join(map(str, seeds))}); scored on {span}. Mean ± sample std over seeds; a target some seeds missed within the "
        "horizon shows the mean over those that reached it and (k/n); N/A: none did.",
        "",
        f"### Simulated time to accuracy (s, acc_full)\n\n| variant | {tcols} |\n{sep}",
        *[f"| {lab} | " + " | ".join(reached(by[lab], t, 0) for t in TARGETS) + " |" for lab in labels],
        "",
        f"### Fleet energy to accuracy (kJ: compute + radio + idle of all 40 devices)\n\n| variant | {tcols} |\n{sep}",
        *[f"| {lab} | " + " | ".join(reached(by[lab], t, 1, 1e3, "{:.2f}") for t in TARGETS) + " |" for lab in labels],
        "",
        f"### Active energy to accuracy (kJ: compute + radio only)\n\n| variant | {tcols} |\n{sep}",
        *[f"| {lab} | " + " | ".join(reached(by[lab], t, 2, 1e3, "{:.3f}") for t in TARGETS) + " |" for lab in labels],
        "",
        "### Final accuracy (last evaluation within the horizon) and updates applied\n",
        "| variant | acc_full (%) | updates applied (async) |\n|---|---:|---:|",
        *[f"| {lab} | {ms([100 * r['final'] for r in by[lab]])} | "
          + (ms([r["updates"] for r in by[lab]], pct) if by[lab][0]["updates"] else "– (rounds)") + " |"
          for lab in labels],  # fmt: skip
        "",
        "### Staleness per HeteroFL level (versions between download and fold; `apply` events within the horizon)\n",
        "Level of each group (from the HeteroFL runs' dispatch events): "
        + ", ".join(f"{g} → {lv}" for g, lv in sorted(levels.items(), key=lambda x: x[1])) + ".\n",
        "Task time: from dispatch to the end of the upload (download, training, upload; waits for the shared uplink included).",
        "Synchronous rounds have no staleness (a late update is dropped).\n",
        "| variant | level | updates received | mean task time (s) | mean staleness | max staleness (any seed) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for lab in labels:
        synchronous = not by[lab][0]["updates"]
        for lv in sorted({lv for r in by[lab] for lv in r["took"]}):
            took = [r["took"].get(lv, []) for r in by[lab]]
            stale = [r["stale"].get(lv, []) for r in by[lab]]
            cells = ("0", "0") if synchronous else (
                ms([statistics.mean(p) for p in stale if p], "{:.2f}"), str(max(max(p) for p in stale if p)))
            lines.append(f"| {lab} | {lv} | {ms([len(p) for p in took], pct)} | "
                         f"{ms([statistics.mean(p) for p in took if p], '{:.1f}')} | {cells[0]} | {cells[1]} |")  # fmt: skip
    groups = list(levels) or sorted(runs[0]["trained"])
    lines += [
        "",
        "### Who trained (devices given at least one task, of the group's; seed 0) and failed tasks within the horizon\n",
        "| variant | " + " | ".join(groups) + " | failures (mean over seeds) |",
        "|---|" + "---:|" * (len(groups) + 1),
    ]
    for lab in labels:
        r0 = by[lab][0]
        fails = sorted({k for r in by[lab] for k in r["fails"]})
        fcell = ", ".join(f"{k} {statistics.mean(r['fails'].get(k, 0) for r in by[lab]):.1f}" for k in fails) or "none"
        lines.append(f"| {lab} | " + " | ".join(f"{r0['trained'][g][0]}/{r0['trained'][g][1]}" for g in groups)
                     + f" | {fcell} |")  # fmt: skip
    lines += [
        "",
        "### Per seed\n",
        "| variant | seed | run end (s) | last eval (s) | acc_full (%) | "
        + " | ".join(f"time to {t:.0%} (s)" for t in TARGETS) + " | fleet energy to "
        + " / ".join(f"{t:.0%}" for t in TARGETS) + " (kJ) | host wall (s) |",
        "|---|---:|---:|---:|---:|" + "---:|" * len(TARGETS) + "---|---:|",
    ]
    for r in runs:
        times = [f"{r['hits'][t][0]:.1f}" if r["hits"][t] else "–" for t in TARGETS]
        energy = " / ".join(f"{r['hits'][t][1] / 1e3:.2f}" if r["hits"][t] else "–" for t in TARGETS)
        lines.append(f"| {r['label']} | {r['seed']} | {r['end_t']:.1f} | {r['final_t']:.1f} | {100 * r['final']:.1f} | "
                     + " | ".join(times) + f" | {energy} | {r['host_s']:.1f} |")  # fmt: skip
    lines += [
        "",
        f"Cost of the study: {cost['cpu_s']:.0f} CPU seconds (the script and every worker, user + system) in "
        f"{cost['wall_s']:.0f} s wall over {cost['sweeps']} sweep(s) of its folder (a rerun reuses finished runs) on "
        f"{os.cpu_count()} cores, load average {cost['load_before']:.1f} before and {cost['load_after']:.1f} after "
        f"(other jobs shared the machine); Python {platform.python_version()}, {platform.machine()}.",
        "",
    ]
    return "\n".join(lines)


def figure(runs: list[dict[str, Any]], levels: dict[str, str], horizon: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [v["label"] for v in variants()]
    colour = dict(zip(labels, ("tab:blue", "tab:red", "tab:green"), strict=True))
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.2))
    for r in runs:
        pts = [(x["sim_time_s"], x["energy_j"] / 1e3, x["acc_full"]) for x in r["rows"]
               if _none(x["acc_full"]) is not None and x["sim_time_s"] <= horizon]  # fmt: skip
        kw = {"color": colour[r["label"]], "lw": 1.2, "alpha": 0.8, "label": r["label"] if r["seed"] == 0 else None}
        ax[0].plot([p[0] for p in pts], [p[2] for p in pts], **kw)
        ax[1].plot([p[1] for p in pts], [p[2] for p in pts], **kw)
    for a, xl in zip(ax[:2], ("simulated time (s)", "fleet energy (kJ)"), strict=True):
        a.set_xlabel(xl)
        a.set_ylabel("accuracy of the full model")
        a.grid(alpha=0.3)
        for t in TARGETS:
            a.axhline(t, color="grey", lw=0.6, ls=":")
        a.legend(fontsize=8)
    ax[0].set_title("accuracy vs simulated time (each seed a line)")
    ax[1].set_title("accuracy vs energy of the whole fleet")
    lvls = sorted(set(levels.values()))
    width = 0.8 / 2
    for k, lab in enumerate(labels[1:]):
        means, errs = [], []
        for lv in lvls:
            per = [statistics.mean(r["stale"][lv]) for r in runs if r["label"] == lab and r["stale"].get(lv)]
            means.append(statistics.mean(per) if per else 0.0)
            errs.append(statistics.stdev(per) if len(per) > 1 else 0.0)
        ax[2].bar([i + (k - 0.5) * width for i in range(len(lvls))], means, width, yerr=errs, capsize=3,
                  color=colour[lab], label=lab)  # fmt: skip
    ax[2].set_xticks(range(len(lvls)))
    groups = {lv: [g for g, x in levels.items() if x == lv] for lv in lvls}
    ax[2].set_xticklabels([f"{lv}\n({', '.join(groups[lv])})" for lv in lvls], fontsize=8)
    ax[2].set_ylabel("mean staleness (versions)")
    ax[2].set_title("staleness per HeteroFL level (0 bar: no update)")
    ax[2].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_md(text: str, path: Path) -> None:
    old = path.read_text() if path.is_file() else ""
    keep = old[old.index(READING):] if READING in old else f"{READING} (to be written by hand)\n"
    path.write_text(text + "\n" + keep)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("/tmp/async_heterofl_study"))
    ap.add_argument("--md", type=Path, default=None, help="default: benchmarks/async_heterofl.md (--smoke: <out>/...)")
    ap.add_argument("--png", type=Path, default=None, help="default: beside --md")
    ap.add_argument("--smoke", action="store_true", help="seed 0, a few rounds, whole runs scored")
    args = ap.parse_args(argv)
    seeds = [0] if args.smoke else args.seeds
    md = args.md or (args.out / "async_heterofl.md" if args.smoke else ROOT / "benchmarks" / "async_heterofl.md")
    png = args.png or md.with_suffix(".png")
    study, cost = run_study(seeds, args.workers, args.out, args.smoke)
    horizon = math.inf if args.smoke else HORIZON_S  # the smoke checks the pipeline only: whole runs
    levels = level_map(study)
    runs = per_run(study, levels, horizon)
    write_md(markdown(runs, levels, cost, seeds, horizon), md)
    figure(runs, levels, horizon, png)
    print(f"wrote {md} and {png} (study: {study.path})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
