"""Final figures of a run: time- and energy-to-accuracy, bytes, failures, host time split.

They are made from a ``RunFigures`` (``Simulation.run_figures`` builds it), which names everything
``summary.json`` and ``devices.csv`` read of a run; nothing here sees the engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from iotfl_sim.core.catalog import FAILURE_REASONS, SERVER_WORK_KINDS

if TYPE_CHECKING:
    from iotfl_sim.fleet.fleet import Fleet
    from iotfl_sim.sim.host import Host
    from iotfl_sim.sim.traffic import Traffic


@dataclass(frozen=True)
class RunFigures:
    """What a run's final figures read of it, as the run ends."""

    name: str  # the scenario's
    algorithm: str  # the method's name
    server_mode: str  # ``server.mode``
    seed: int
    target_accuracies: list[float]  # ``server.target_accuracies``: the time- and energy-to-accuracy asked for
    rows: list[dict[str, Any]]  # every row of rounds.csv
    fleet: Fleet  # the devices' counters and energy ledgers
    traffic: Traffic  # the bytes on the air and the communication waste
    server_time: float  # the server's simulated seconds
    server_power_w: float  # the server's power while it works
    host: Host  # host seconds by phase, the executor chosen and why
    stalled: int | None  # the round the run stalled at (None: it did not)
    oracle_users: set[str]  # who asked for the simulator's true state
    samples_per_device: np.ndarray
    data_notes: str  # what the dataset's loader says of it ("" without data)
    mode_summary: dict[str, Any]  # the server mode's own entries (``ServerLoop.summary``)


def first_reaching(rows: list[dict[str, Any]], column: str, target: float, field: str) -> float | None:
    """Value of ``field`` in the first row where ``column`` >= target (None if never)."""
    for r in rows:
        v = r.get(column)
        if v is not None and v >= target:
            return r[field]
    return None


def summarize(run: RunFigures, host_total: float) -> dict[str, Any]:
    """``summary.json``'s figures (``host_total``: the run's host seconds, set-up included)."""
    rows = run.rows
    last = rows[-1] if rows else {}
    evaluated = [r for r in rows if r.get("acc_full") is not None]
    final_acc = {k: v for k, v in (evaluated[-1] if evaluated else {}).items() if k.startswith("acc_")}
    targets = run.target_accuracies
    reach: dict[str, dict[str, Any]] = {}
    for col in ("acc_full", "acc_avg"):
        reach[col] = {
            f"{t:g}": {
                "round": first_reaching(rows, col, t, "round"),
                "sim_time_s": first_reaching(rows, col, t, "sim_time_s"),
                "energy_j": first_reaching(rows, col, t, "energy_j"),
                **({"carbon_g": first_reaching(rows, col, t, "carbon_g")} if "carbon_g" in last else {}),
            }
            for t in targets
        }
    times = run.host.times
    host_train, host_eval, host_setup = times["train"], times["eval"], times["setup"]
    host_aggregate = times["aggregate"]
    other = max(host_total - host_train - host_eval - host_aggregate - host_setup, 0.0)
    fleet = run.fleet
    failures = {r: int(fleet.failures[r].sum()) for r in FAILURE_REASONS}
    return {
        "name": run.name,
        "algorithm": run.algorithm,
        "server_mode": run.server_mode,
        "seed": run.seed,
        "rounds": len(rows),
        "devices": fleet.n,
        "sim_time_s": last.get("sim_time_s", 0.0),
        "final_accuracy": final_acc,
        "best_acc_full": max((r["acc_full"] for r in evaluated), default=None),
        "to_accuracy": reach,
        "energy_j": last.get("energy_j", 0.0),
        "energy_by_kind_j": {k: last.get(f"energy_{k}_j", 0.0) for k in ("compute", "radio", "idle")},
        "energy_by_group_j": energy_by_group(fleet, float(last.get("sim_time_s", 0.0))),
        "bytes_down": run.traffic.down,
        "bytes_up": run.traffic.up,
        "comm_waste": run.traffic.waste_rate(),
        "bytes_wasted": run.traffic.wasted,
        **({"bytes_resent": run.traffic.resent} if run.traffic.resent > 0 else {}),
        "server_time_s": run.server_time,
        "server_energy_j": run.server_time * run.server_power_w,
        **({"carbon_g": last["carbon_g"]} if "carbon_g" in last else {}),
        "server_time_by_kind_s": {k: sum(r.get(f"server_{k}_s", 0.0) for r in rows) for k in SERVER_WORK_KINDS},
        **({"power_mode_switches": fleet.mode_switches} if fleet.mode_switches else {}),
        "tasks": int(fleet.tasks.sum()),
        "completed": int(fleet.completed.sum()),
        "failures": failures,
        "devices_alive": last.get("alive", fleet.n),
        "stalled_at_round": None if run.stalled is None else run.stalled + 1,
        **updates_summary(rows, run.server_mode),
        "oracle_knowledge": sorted(run.oracle_users),
        "data_notes": run.data_notes,
        "host_time_s": {
            "setup": host_setup,
            "train": host_train,
            "eval": host_eval,
            "aggregate": host_aggregate,
            "other": other,
            "total": host_total,
        },
        "host_other_fraction": other / host_total if host_total > 0 else 0.0,
        "executor": {
            "kind": run.host.choice.kind, "workers": run.host.choice.workers, "why": run.host.choice.why,
            "overlap_eval": run.host.overlap_eval,  # host_eval_s counts only the waits (README "Executors")
        },
        **run.mode_summary,
    }


def energy_by_group(fleet: Fleet, t: float) -> dict[str, float]:
    used = fleet.energy_total(t)
    sums = np.bincount(fleet.group_of, weights=used, minlength=len(fleet.groups))
    return {g.name: float(s) for g, s in zip(fleet.groups, sums, strict=True)}


def device_columns(run: RunFigures) -> dict[str, Any]:
    """Per-device table (devices.csv) as columns."""
    f = run.fleet
    t = float(run.rows[-1]["sim_time_s"]) if run.rows else 0.0
    groups = np.array([g.name for g in f.groups], dtype=object)[f.group_of]
    classes = np.array([g.profile.device_class for g in f.groups], dtype=object)[f.group_of]
    idle_more = f.idle_w * np.clip(np.minimum(t, f.depleted_by(t)) - f.settled_at, 0.0, None)
    cols: dict[str, Any] = {
        "device": np.arange(f.n),
        "group": groups,
        "device_class": classes,
        "samples": run.samples_per_device,
        "tasks": f.tasks,
        "completed": f.completed,
        **{f"failed_{r}": f.failures[r] for r in FAILURE_REASONS},
        "energy_j": f.energy_total(t),
        "energy_compute_j": f.energy["compute"],
        "energy_radio_j": f.energy["radio"],
        "energy_idle_j": f.energy["idle"] + idle_more,
        "depleted_at_s": np.where(f.depleted_by(t) <= t, f.depleted_by(t), np.nan),
    }
    return cols


def updates_summary(rows: list[dict[str, Any]], mode: str) -> dict[str, Any]:
    """async and semi_async: the client updates folded in and their mean and largest staleness (nothing in sync)."""
    if mode == "sync":
        return {}
    applied = [(r["updates_applied"], r["staleness_mean"], r["staleness_max"]) for r in rows]
    total, weighted, before = 0, 0.0, 0
    for n, mean, _ in applied:
        if mean is not None:
            weighted += (n - before) * mean
            total += n - before
        before = n
    return {
        "updates_applied": before,
        "staleness_mean": weighted / total if total else None,
        "staleness_max": max((m for _, _, m in applied if m is not None), default=None),
    }

