"""Final figures of a run: time- and energy-to-accuracy, bytes, failures, host time split."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from iotfl_sim.core.catalog import FAILURE_REASONS, SERVER_WORK_KINDS

if TYPE_CHECKING:
    from iotfl_sim.sim.engine import Simulation


def first_reaching(rows: list[dict[str, Any]], column: str, target: float, field: str) -> float | None:
    """Value of ``field`` in the first row where ``column`` >= target (None if never)."""
    for r in rows:
        v = r.get(column)
        if v is not None and v >= target:
            return r[field]
    return None


def summarize(sim: Simulation, host_total: float) -> dict[str, Any]:
    rows = sim.rows
    sc = sim.sc
    last = rows[-1] if rows else {}
    evaluated = [r for r in rows if r.get("acc_full") is not None]
    final_acc = {k: v for k, v in (evaluated[-1] if evaluated else {}).items() if k.startswith("acc_")}
    targets = sc.server.target_accuracies
    reach: dict[str, dict[str, Any]] = {}
    for col in ("acc_full", "acc_avg"):
        reach[col] = {
            f"{t:g}": {
                "round": first_reaching(rows, col, t, "round"),
                "sim_time_s": first_reaching(rows, col, t, "sim_time_s"),
                "energy_j": first_reaching(rows, col, t, "energy_j"),
            }
            for t in targets
        }
    host_train, host_eval, host_setup = sim.host.times["train"], sim.host.times["eval"], sim.host.times["setup"]
    host_aggregate = sim.host.times["aggregate"]
    other = max(host_total - host_train - host_eval - host_aggregate - host_setup, 0.0)
    failures = {r: int(sim.fleet.failures[r].sum()) for r in FAILURE_REASONS}
    return {
        "name": sc.name,
        "algorithm": sc.algorithm.name,
        "server_mode": sc.server.mode,
        "seed": sc.seed,
        "rounds": len(rows),
        "devices": sim.fleet.n,
        "sim_time_s": last.get("sim_time_s", 0.0),
        "final_accuracy": final_acc,
        "best_acc_full": max((r["acc_full"] for r in evaluated), default=None),
        "to_accuracy": reach,
        "energy_j": last.get("energy_j", 0.0),
        "energy_by_kind_j": {k: last.get(f"energy_{k}_j", 0.0) for k in ("compute", "radio", "idle")},
        "energy_by_group_j": energy_by_group(sim, float(last.get("sim_time_s", 0.0))),
        "bytes_down": sim.system.traffic.down,
        "bytes_up": sim.system.traffic.up,
        "comm_waste": sim.system.traffic.waste_rate(),
        "bytes_wasted": sim.system.traffic.wasted,
        "server_time_s": sim.system.server_time,
        "server_energy_j": sim.system.server_time * sim.system.server_cost.power_w,
        "server_time_by_kind_s": {k: sum(r.get(f"server_{k}_s", 0.0) for r in rows) for k in SERVER_WORK_KINDS},
        "tasks": int(sim.fleet.tasks.sum()),
        "completed": int(sim.fleet.completed.sum()),
        "failures": failures,
        "devices_alive": last.get("alive", sim.fleet.n),
        "stalled_at_round": None if sim.status.stalled is None else sim.status.stalled + 1,
        **updates_summary(rows, sc.server.mode),
        "oracle_knowledge": sorted(sim.view.oracle_users),
        "data_notes": sim.numerics.dataset.notes if sim.numerics.dataset is not None else "",
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
            "kind": sim.host.choice.kind, "workers": sim.host.choice.workers, "why": sim.host.choice.why,
            "overlap_eval": sim.host.overlap_eval,  # host_eval_s counts only the waits (README "Executors")
        },
        **sim.loop.summary(),
    }


def energy_by_group(sim: Simulation, t: float) -> dict[str, float]:
    used = sim.fleet.energy_total(t)
    sums = np.bincount(sim.fleet.group_of, weights=used, minlength=len(sim.fleet.groups))
    return {g.name: float(s) for g, s in zip(sim.fleet.groups, sums, strict=True)}


def device_columns(sim: Simulation) -> dict[str, Any]:
    """Per-device table (devices.csv) as columns."""
    f = sim.fleet
    t = float(sim.rows[-1]["sim_time_s"]) if sim.rows else 0.0
    groups = np.array([g.name for g in f.groups], dtype=object)[f.group_of]
    classes = np.array([g.profile.device_class for g in f.groups], dtype=object)[f.group_of]
    idle_more = f.idle_w * np.clip(np.minimum(t, f.depleted_at) - f.settled_at, 0.0, None)
    cols: dict[str, Any] = {
        "device": np.arange(f.n),
        "group": groups,
        "device_class": classes,
        "samples": sim.numerics.samples_per_device,
        "tasks": f.tasks,
        "completed": f.completed,
        **{f"failed_{r}": f.failures[r] for r in FAILURE_REASONS},
        "energy_j": f.energy_total(t),
        "energy_compute_j": f.energy["compute"],
        "energy_radio_j": f.energy["radio"],
        "energy_idle_j": f.energy["idle"] + idle_more,
        "depleted_at_s": np.where(f.depleted_at <= t, f.depleted_at, np.nan),
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

