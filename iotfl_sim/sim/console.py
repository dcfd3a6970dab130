"""What `iotfl-sim run` says on the terminal: what it is doing before the first round, and the end summary.

The progress bar itself is tqdm's (``sim.runner``); everything here goes to stderr while it runs, and only
when the bar is shown (``output.progress``; null: when stderr is a terminal), so a script's output stays
the end summary alone.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

# what summary.json's ``failures`` keys mean, in the summary's words
FAILURE_WORDS = {
    "oom": "out of memory", "depleted": "battery ran dry", "offline": "went offline",
    "refused": "refused by the device", "deadline": "missed the deadline", "surplus": "surplus (round full)",
}  # fmt: skip


def showing(progress: bool | None) -> bool:
    """Whether the progress bar (and these stage lines) are shown: ``progress``, or None: stderr is a terminal."""
    return bool(progress) if progress is not None else sys.stderr.isatty()


def say(name: str, what: str, progress: bool | None) -> None:
    """One line on stderr saying what the run is doing now (before its progress bar exists)."""
    if showing(progress):
        print(f"{name}: {what} ...", file=sys.stderr, flush=True)


def stage(bar: Any, what: str) -> None:
    """Show ``what`` (e.g. "loading data") beside the progress bar, at once; ``bar`` None or disabled: nothing."""
    if bar is not None and not getattr(bar, "disable", True):
        bar.set_postfix_str(what, refresh=True)


def _in(v: float, units: tuple[tuple[float, float, str, int], ...]) -> str:
    """``v`` in the first unit whose threshold it reaches: (threshold, divisor, name, decimals)."""
    for limit, div, name, digits in units:
        if v >= limit or limit == units[-1][0]:
            return f"{v / div:.{digits}f} {name}"
    raise AssertionError("unreachable")


def _seconds(s: float) -> str:
    return _in(s, ((7200, 3600, "h", 2), (120, 60, "min", 1), (0, 1, "s", 1)))


def _joules(j: float) -> str:
    return _in(j, ((1e6, 1e6, "MJ", 2), (1e4, 1e3, "kJ", 1), (0, 1, "J", 1)))


def _mb(b: float) -> str:
    return _in(b, ((1e10, 1e9, "GB", 2), (0, 1e6, "MB", 2)))


def _targets_line(summary: dict[str, Any]) -> str | None:
    reach = (summary.get("to_accuracy") or {}).get("acc_full")
    if not isinstance(reach, dict) or not reach:
        return None
    best = summary.get("best_acc_full")
    unit = "model version" if summary.get("server_mode") == "async" else "round"  # async rows are versions
    parts = []
    for key in sorted(reach, key=float):
        r = reach[key]
        label = f"{100 * float(key):g}%"
        if not isinstance(r, dict) or r.get("round") is None:
            parts.append(f"{label} not reached")
            continue
        parts.append(f"{label} at {unit} {r['round']} ({_seconds(r['sim_time_s'])} simulated, {_joules(r['energy_j'])})")
    tail = f"; best {100 * best:.1f}%" if isinstance(best, int | float) else ""
    return "targets (full model): " + ", ".join(parts) + tail


def end_summary(path: Path | None, summary: dict[str, Any]) -> str:
    """The lines `iotfl-sim run` prints when a run completes: where it is, accuracy, time and energy to the
    targets, energy by kind, tasks and failures by reason, communication waste, host time, and how to plot it."""
    parts = [f"run: {path}"]
    if summary.get("data_notes"):
        parts.append(f"note: {summary['data_notes']}")
    host_timed = (summary.get("flower") or {}).get("messages_timed_by_the_host")
    if host_timed:
        parts.append(
            f"note: {host_timed} messages ran no PyTorch operation: their simulated time is their host seconds times "
            "this machine's speed over the device's, which changes from run to run"
        )
    acc = summary.get("final_accuracy") or {}
    if acc:
        parts.append("accuracy " + ", ".join(f"{k[4:]}={v:.4f}" for k, v in acc.items()))
    line = _targets_line(summary)
    if line and acc:
        parts.append(line)
    energy = summary.get("energy_j", 0.0)
    kinds = summary.get("energy_by_kind_j") or {}
    split = ""
    if energy > 0 and kinds:
        split = " (" + ", ".join(f"{k} {100 * v / energy:.0f}%" for k, v in kinds.items()) + ")"
    carbon = f", grid carbon {summary['carbon_g']:.4g} g CO2" if summary.get("carbon_g") is not None else ""
    parts.append(f"simulated {_seconds(summary.get('sim_time_s', 0.0))}, energy {_joules(energy)}{split}{carbon}")
    fails = {k: v for k, v in (summary.get("failures") or {}).items() if v}
    tasks = f"tasks {summary.get('tasks', 0)}: {summary.get('completed', 0)} completed"
    if fails:
        tasks += "; failed: " + ", ".join(f"{v} {FAILURE_WORDS.get(k, k)}" for k, v in fails.items())
    if summary.get("updates_applied") is not None:  # async, semi_async
        stale = summary.get("staleness_mean")
        tasks += f"; {summary['updates_applied']} updates applied" + (
            f", staleness mean {stale:.2f}, max {summary.get('staleness_max')}" if isinstance(stale, int | float) else ""
        )
    parts.append(tasks)
    waste, wasted = summary.get("comm_waste"), summary.get("bytes_wasted")
    if isinstance(waste, int | float):
        on_air = summary.get("bytes_down", 0.0) + summary.get("bytes_up", 0.0)
        mb = f", {_mb(wasted)} of {_mb(on_air)} on the air" if isinstance(wasted, int | float) else ""
        parts.append(f"communication waste {100 * waste:.1f}% of the parameters sent{mb}")
    ht = summary.get("host_time_s")
    if isinstance(ht, dict):
        parts.append(
            f"host {ht['total']:.1f} s (setup {ht['setup']:.1f}, train {ht['train']:.1f}, eval {ht['eval']:.1f}, "
            f"simulation and other {ht['other']:.1f})"
        )
    if path is not None:
        parts.append(f"figures: iotfl-sim plot {shlex.quote(str(path))}")
    return "\n".join(parts)
