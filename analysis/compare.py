"""Comparison tables over methods and seeds, the way the papers report them (``iotfl-sim compare``).

Conventions (also in the README):

* every number is **mean ± sample std over seeds** (``ddof=1``; one seed: no ± part);
* final accuracy is the last evaluated row of rounds.csv (``acc_full``, ``acc_avg`` and each
  ``acc_<level>``), in percent; the best mean of each column is in bold;
* to reach a target accuracy a run's crossing row is the **first rounds.csv row whose accuracy column
  (``acc_full`` unless ``column=``) is >= the target**; no interpolation between rows. Time is that row's
  ``sim_time_s``, bytes its cumulative ``bytes_down`` and ``bytes_up``, energy its ``energy_j``;
* **seeds that never reach a target**: the cell is the mean ± std over the seeds that reached it,
  followed by ``(k/n)`` when only k of the n seeds did; ``N/A`` when none did. A method counts for
  "best" (bold, the smallest cost) only when all its seeds reached the target;
* the targets are the runs' own ``server.target_accuracies`` unless given (``analysis.targets``: when
  runs declare different sets, every target any of them declared);
* communication waste is summary.json's ``comm_waste`` (else the last ``comm_waste_cum``), the bytes wasted
  (downloads and uploads of tasks whose update was not used) rounds.csv's last ``bytes_wasted``; up to a
  target, the crossing row's ``comm_waste_cum`` and ``bytes_wasted``. Failures per reason are summary.json's
  ``failures`` (else the sums of rounds.csv's ``failed_<reason>``); the fleet's energy by kind (compute,
  radio, idle) rounds.csv's last ``energy_<kind>_j``;
* participation is the share of the fleet that trained at least once: devices.csv's rows with ``completed``
  >= 1 over its rows.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from analysis.rundir import Run
from analysis.study import EXAMPLES, Selection, excluded_counts, excluded_examples, fmt_value, short
from analysis.targets import Targets, resolve_targets, target_label
from analysis.write_files import write_all

__all__ = ["Cell", "Table", "RunMetrics", "run_metrics", "build_tables", "table_files", "write_tables", "crossing", "CROSSING_FIELDS"]

# what a crossing reports: the row's round, clock, cumulative traffic, energy and communication waste
CROSSING_FIELDS = (
    "round", "sim_time_s", "bytes_down", "bytes_up", "energy_j", "comm_waste_cum", "bytes_wasted", "carbon_g",
)  # fmt: skip
ENERGY_KINDS = ("compute", "radio", "idle")
NON_LEVEL = {"acc_full", "acc_avg"}


@dataclass
class Cell:
    """Values of one method over its seeds (nan = the seed has no value: did not reach, no column)."""

    values: list[float]
    best: bool = False

    @property
    def finite(self) -> np.ndarray:
        a = np.asarray(self.values, dtype=float)
        return a[np.isfinite(a)]

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def k(self) -> int:
        return int(self.finite.size)

    @property
    def mean(self) -> float:
        f = self.finite
        return float(f.mean()) if f.size else math.nan

    @property
    def std(self) -> float:
        f = self.finite
        return float(f.std(ddof=1)) if f.size > 1 else math.nan


@dataclass
class Table:
    """Rows are methods; ``fmt(value) -> str`` formats a mean or std for Markdown."""

    name: str
    title: str
    columns: list[str]
    rows: dict[str, dict[str, Cell]]
    fmt: Any
    better: str = "max"  # which mean is bold: max | min | none
    note: str = ""
    count_reached: bool = False  # write (k/n) after cells some seeds did not reach
    header_notes: dict[str, str] = field(default_factory=dict)

    def mark_best(self) -> None:
        if self.better == "none":
            return
        for col in self.columns:
            cands = [
                (c.mean, m)
                for m, r in self.rows.items()
                if (c := r.get(col)) is not None and c.k > 0 and (not self.count_reached or c.k == c.n)
            ]
            if not cands or len(self.rows) < 2:
                continue
            if len(cands) > 1 and len({v for v, _ in cands}) == 1:
                continue  # every method equal: nothing to point out
            target = max(v for v, _ in cands) if self.better == "max" else min(v for v, _ in cands)
            for v, m in cands:
                if v == target:
                    self.rows[m][col].best = True

    def cell_text(self, c: Cell | None) -> str:
        if c is None or c.n == 0 or (c.k == 0 and not self.count_reached):
            return "–"
        if c.k == 0:
            return "N/A"
        s = self.fmt(c.mean)
        if c.k > 1:
            s += f" ± {self.fmt(c.std, c.mean)}"
        if c.best:
            s = f"**{s}**"
        if self.count_reached and c.k < c.n:
            s += f" ({c.k}/{c.n})"
        return s

    def markdown(self) -> str:
        head = ["method", "seeds", *self.columns]
        lines = [f"### {self.title}", ""]
        if self.note:
            lines += [self.note, ""]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
        for m, r in self.rows.items():
            n = max((c.n for c in r.values()), default=0)
            lines.append(
                "| " + " | ".join([m, str(n), *(self.cell_text(r.get(col)) for col in self.columns)]) + " |"
            )
        return "\n".join(lines) + "\n"

    def csv_rows(self) -> tuple[list[str], list[list[Any]]]:
        head = ["method", "seeds"]
        for col in self.columns:
            head += [f"{col} mean", f"{col} std", f"{col} n"]
        out = []
        for m, r in self.rows.items():
            n = max((c.n for c in r.values()), default=0)
            row: list[Any] = [m, n]
            for col in self.columns:
                c = r.get(col)
                if c is None or c.k == 0:
                    row += ["", "", 0 if c is not None else ""]
                else:
                    row += [_g(c.mean), _g(c.std), c.k]
            out.append(row)
        return head, out


def _g(v: float) -> str:
    return "" if not math.isfinite(v) else f"{v:.6g}"


# ---------------------------------------------------------------------------------------------------------
# per-run numbers


@dataclass
class RunMetrics:
    final_acc: dict[str, float]  # column -> fraction
    to_target: dict[float, dict[str, float]]  # target -> {CROSSING_FIELDS: value}
    energy_j: float
    bytes_down: float
    bytes_up: float
    sim_time_s: float
    comm_waste: float
    failures: dict[str, float]
    server_s: dict[str, float] = field(default_factory=dict)  # kind of server work -> simulated seconds in the run
    bytes_wasted: float = math.nan
    energy_by_kind: dict[str, float] = field(default_factory=dict)  # compute / radio / idle -> joules
    trained: tuple[int, int] | None = None  # (devices that completed a task, fleet size): devices.csv


def _last_finite(a: np.ndarray | None) -> float:
    if a is None:
        return math.nan
    f = a[np.isfinite(a)]
    return float(f[-1]) if f.size else math.nan


def crossing(run: Run, target: float, column: str = "acc_full") -> dict[str, float] | None:
    """The first rounds.csv row whose ``column`` >= ``target``: its ``CROSSING_FIELDS`` (nan where the run
    has no such column), or None when no row reaches it."""
    acc = run.column(column)
    if acc is None:
        return None
    hit = np.flatnonzero(np.nan_to_num(acc, nan=-np.inf) >= target)
    if not hit.size:
        return None
    i = int(hit[0])
    out = {}
    for c in CROSSING_FIELDS:
        col = run.rounds.get(c)
        out[c] = float(col[i]) if col is not None else math.nan
    return out


def run_metrics(run: Run, targets: Sequence[float], column: str = "acc_full") -> RunMetrics:
    accs = {c: _last_finite(run.column(c)) for c in run.rounds if c.startswith("acc_")}
    accs = {c: v for c, v in accs.items() if math.isfinite(v)}
    s = run.summary
    waste = s.get("comm_waste")
    if not isinstance(waste, int | float):
        waste = _last_finite(run.column("comm_waste_cum"))
    fails = s.get("failures")
    if isinstance(fails, dict):
        failures = {str(k): float(v) for k, v in fails.items() if isinstance(v, int | float)}
    else:
        failures = {
            c[len("failed_") :]: float(np.nansum(v)) for c, v in run.rounds.items() if c.startswith("failed_")
        }
    to = {t: cr for t in targets if (cr := crossing(run, t, column)) is not None}
    server = {
        c[len("server_") : -len("_s")]: float(np.nansum(v))
        for c, v in run.rounds.items()
        if c.startswith("server_") and c.endswith("_s") and c != "server_time_s"
    }
    kinds = s.get("energy_by_kind_j") if isinstance(s.get("energy_by_kind_j"), dict) else {}
    by_kind = {k: _last_finite(run.column(f"energy_{k}_j")) for k in ENERGY_KINDS}
    by_kind = {k: v if math.isfinite(v) else float(kinds.get(k, math.nan)) for k, v in by_kind.items()}
    return RunMetrics(
        final_acc=accs,
        to_target=to,
        energy_j=_last_finite(run.column("energy_j")),
        bytes_down=_last_finite(run.column("bytes_down")),
        bytes_up=_last_finite(run.column("bytes_up")),
        sim_time_s=_last_finite(run.column("sim_time_s")),
        comm_waste=float(waste),
        failures=failures,
        server_s=server,
        bytes_wasted=_last_finite(run.column("bytes_wasted")),
        energy_by_kind={k: v for k, v in by_kind.items() if math.isfinite(v)},
        trained=run.trained,
    )


# ---------------------------------------------------------------------------------------------------------
# tables


def _pct(v: float, ref: float | None = None) -> str:
    return f"{100 * v:.2f}"


def _num(v: float, ref: float | None = None) -> str:
    """A number with decimals chosen from the magnitude of ``ref`` (the mean, for its std) or of ``v``."""
    if not math.isfinite(v):
        return "–"
    a = abs(v if ref is None else ref)
    if a >= 1e6:
        return f"{v:.3g}"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1 or a == 0:
        return f"{v:.2f}"
    return f"{v:.3g}"


def _scaled(div: float):
    return lambda v, ref=None: _num(v / div, None if ref is None else ref / div)


def _unit(max_v: float, units: Sequence[tuple[str, float]]) -> tuple[str, float]:
    for name, div in units:
        if max_v >= 10 * div:
            return name, div
    return units[-1]


TIME_UNITS = (("h", 3600.0), ("min", 60.0), ("s", 1.0))
ENERGY_UNITS = (("MJ", 1e6), ("kJ", 1e3), ("J", 1.0))
BYTE_UNITS = (("GB", 1e9), ("MB", 1e6), ("kB", 1e3), ("B", 1.0))
CARBON_UNITS = (("t CO2", 1e6), ("kg CO2", 1e3), ("g CO2", 1.0))


def _accuracy_table(name: str, title: str, cols: Sequence[str], metrics: dict[str, list[RunMetrics]], note: str) -> Table:
    """Final accuracy of the ``acc_*`` columns ``cols``, a method's missing columns as "–"."""
    keys = list(cols)
    t = Table(
        name, title, [k[4:] for k in keys],
        {m: {k[4:]: Cell([rm.final_acc.get(k, math.nan) for rm in ms]) for k in keys} for m, ms in metrics.items()},
        _pct, better="max", note=note,
    )  # fmt: skip
    for row in t.rows.values():  # a level a method does not have: "–", not a 0-of-n cell
        for c in list(row):
            if row[c].k == 0:
                del row[c]
    return t


def selection_targets(sel: Selection, given: Sequence[float] | Targets | None = None) -> Targets:
    """The targets of a selection's tables and figures: ``given``, else its runs' own (``analysis.targets``);
    ``given`` already resolved (a ``Targets``) stays as it is, so its notes keep saying where it came from."""
    if isinstance(given, Targets):
        return given
    return resolve_targets((r for m in sel.methods for r in m.runs), given)


Metrics = dict[str, list[RunMetrics]]  # method label -> its runs' numbers, one per seed


def _every_run(metrics: Metrics) -> Iterator[RunMetrics]:
    return (rm for ms in metrics.values() for rm in ms)


def build_tables(
    sel: Selection, targets: Sequence[float] | Targets | None = None, column: str = "acc_full"
) -> list[Table]:
    """Accuracy, participation, time / bytes / energy / waste to each target, and costs (waste, energy by
    kind, failures) per method. ``targets``: None takes the runs' own ``server.target_accuracies``; a
    ``Targets`` from ``selection_targets`` is used as resolved."""
    chosen = selection_targets(sel, targets)
    metrics: Metrics = {m.label: [run_metrics(r, chosen.values, column) for r in m.runs] for m in sel.methods}
    tables = [*accuracy_tables(metrics), *[t for t in (participation_table(metrics),) if t is not None]]
    tables += [*to_target_tables(metrics, chosen, column), costs_table(metrics)]
    tables += [t for t in (energy_table(metrics), server_table(metrics), failures_table(metrics)) if t is not None]
    for t in tables:
        t.mark_best()
    return tables


def accuracy_tables(metrics: Metrics) -> list[Table]:
    """Final accuracy: full and avg for every method; the levels beside them when the methods share one set
    of level names, else one per-level table per set (HeteroFL's a..e next to AdaptiveFL's L1..S3 would be a
    table of dashes)."""
    level_sets: dict[str, tuple[str, ...]] = {
        m: tuple(sorted({c for rm in ms for c in rm.final_acc} - NON_LEVEL)) for m, ms in metrics.items()
    }
    distinct = list(dict.fromkeys(ls for ls in level_sets.values() if ls))
    head = [c for c in ("acc_full", "acc_avg") if any(c in rm.final_acc for rm in _every_run(metrics))]
    note = ("Last evaluated round; mean ± sample std (ddof=1) over seeds; best mean in bold. "
            "`full`: the full / global model, `avg`: mean over the method's submodel levels")  # fmt: skip
    if len(distinct) <= 1:
        return [_accuracy_table("accuracy", "Final test accuracy (%)", head + list(distinct[0] if distinct else ()),
                                metrics, note + ", then each level.")]  # fmt: skip
    tables = [_accuracy_table("accuracy", "Final test accuracy (%)", head, metrics,
                              note + "; each method's levels are in the per-level tables below.")]  # fmt: skip
    for i, ls in enumerate(distinct, 1):
        group = {m: ms for m, ms in metrics.items() if level_sets[m] == ls}
        tables.append(_accuracy_table(f"accuracy_levels_{i}", f"Final accuracy per level (%): {', '.join(group)}",
                                      [*head, *ls], group,
                                      "Each submodel level evaluated on the whole test set; mean ± sample std over seeds."))  # fmt: skip
    return tables


def participation_table(metrics: Metrics) -> Table | None:
    """The share of the fleet that trained at least once: a method that leaves devices out (memory, its own
    eligibility rule) compares training on part of the fleet. None when no run's devices.csv has ``completed``."""
    if not any(rm.trained for rm in _every_run(metrics)):
        return None
    cols = {"trained (% of fleet)": lambda t: 100.0 * t[0] / t[1] if t[1] else math.nan,
            "devices trained": lambda t: float(t[0]), "fleet": lambda t: float(t[1])}  # fmt: skip
    return Table(
        "participation",
        "Participation: devices that trained at least once",
        list(cols),
        {m: {c: Cell([f(rm.trained) if rm.trained else math.nan for rm in ms]) for c, f in cols.items()}
         for m, ms in metrics.items()},  # fmt: skip
        lambda v, ref=None: f"{v:.0f}" if math.isfinite(v) and v == int(v) else _num(v, ref),
        better="none",
        note="Devices with at least one completed task (devices.csv's `completed`) over the devices in the fleet "
        "(its rows). Below 100 %, the method's figures come from training on part of the fleet; `iotfl-sim "
        "validate` names the groups that can never take part.",
    )


@dataclass(frozen=True)
class ToTarget:
    """One "to the target accuracy" table: the crossing row's ``what`` (a ``CROSSING_FIELDS`` name) per target.
    ``units``: a unit ladder, None for a count (rounds), "%" for a fraction shown in percent."""

    name: str
    title: str  # {col}: the accuracy column
    what: str
    units: Sequence[tuple[str, float]] | str | None
    optional: bool = False  # runs written before the column existed: no table rather than one of N/A


TO_TARGET = (
    ToTarget("time_to_accuracy", "Simulated time to reach the target accuracy ({col})", "sim_time_s", TIME_UNITS),
    ToTarget("rounds_to_accuracy", "Rounds to reach the target accuracy ({col})", "round", None),
    ToTarget("energy_to_accuracy", "Fleet energy to reach the target accuracy ({col})", "energy_j", ENERGY_UNITS),
    ToTarget("download_to_accuracy", "Bytes downloaded (server → devices) to reach the target accuracy ({col})",
             "bytes_down", BYTE_UNITS),  # fmt: skip
    ToTarget("upload_to_accuracy", "Bytes uploaded (devices → server) to reach the target accuracy ({col})",
             "bytes_up", BYTE_UNITS),  # fmt: skip
    ToTarget("waste_to_accuracy", "Communication waste until the target accuracy ({col}) (%)", "comm_waste_cum", "%",
             optional=True),  # fmt: skip
    ToTarget("wasted_bytes_to_accuracy", "Bytes wasted until the target accuracy ({col})", "bytes_wasted", BYTE_UNITS,
             optional=True),  # fmt: skip
    ToTarget("carbon_to_accuracy", "Grid carbon (mains devices and server) to reach the target accuracy ({col})",
             "carbon_g", CARBON_UNITS, optional=True),  # fmt: skip
)


def to_target_tables(metrics: Metrics, chosen: Targets, column: str) -> list[Table]:
    """One table per ``TO_TARGET`` entry; the first one's note says how targets and crossings are read."""
    note = (
        f"Targets: {chosen.source}. First rounds.csv row with `{column}` >= target (no interpolation). Mean ± "
        "sample std over the seeds that reached the target; `(k/n)`: only k of n seeds reached it; `N/A`: none "
        "did. Bold: the smallest mean among methods all of whose seeds reached it."
    )
    tables = []
    for spec in TO_TARGET:
        t = to_target_table(metrics, spec, list(chosen.values), column, note if spec.name == "time_to_accuracy" else "")
        if t is not None:
            tables.append(t)
    return tables


def to_target_table(metrics: Metrics, spec: ToTarget, targets: list[float], column: str, note: str) -> Table | None:
    """``spec.what`` at each run's crossing of each target; None for an optional column no run has."""
    values = [rm.to_target[t][spec.what] for rm in _every_run(metrics) for t in rm.to_target]
    finite = [v for v in values if math.isfinite(v)]
    if spec.optional and not finite:
        return None
    if spec.units is None:
        unit, fmt = "", (lambda v, ref=None: f"{v:.1f}")
    elif spec.units == "%":
        unit, fmt = "", (lambda v, ref=None: _num(100 * v, None if ref is None else 100 * ref))
    else:
        unit, div = _unit(max(finite, default=0.0), spec.units)
        fmt = _scaled(div)
    cols = [target_label(t) for t in targets]

    def reach(ms: list[RunMetrics], t: float) -> Cell:
        return Cell([rm.to_target[t][spec.what] if t in rm.to_target else math.nan for rm in ms])

    return Table(
        spec.name,
        spec.title.format(col=column) + (f" ({unit})" if unit else ""),
        cols,
        {m: {c: reach(ms, tg) for c, tg in zip(cols, targets, strict=True)} for m, ms in metrics.items()},
        fmt,
        better="min",
        note=note,
        count_reached=True,
    )


def _energy_unit(metrics: Metrics) -> tuple[str, float]:
    return _unit(max((rm.energy_j for rm in _every_run(metrics) if math.isfinite(rm.energy_j)), default=0), ENERGY_UNITS)


def costs_table(metrics: Metrics) -> Table:
    """Whole-run time, energy, traffic and communication waste."""
    e_unit, e_div = _energy_unit(metrics)
    b_unit, b_div = _unit(
        max((max(rm.bytes_down, rm.bytes_up) for rm in _every_run(metrics) if math.isfinite(rm.bytes_down)), default=0),
        BYTE_UNITS,
    )
    t_unit, t_div = _unit(
        max((rm.sim_time_s for rm in _every_run(metrics) if math.isfinite(rm.sim_time_s)), default=0), TIME_UNITS
    )
    cost_cols = [
        (f"sim time ({t_unit})", "sim_time_s", t_div),
        (f"energy ({e_unit})", "energy_j", e_div),
        (f"down ({b_unit})", "bytes_down", b_div),
        (f"up ({b_unit})", "bytes_up", b_div),
        ("comm waste (%)", "comm_waste", 0.01),
    ]
    if any(math.isfinite(rm.bytes_wasted) for rm in _every_run(metrics)):
        cost_cols.append((f"wasted ({b_unit})", "bytes_wasted", b_div))
    return Table(
        "costs",
        "Whole-run costs",
        [c[0] for c in cost_cols],
        {m: {label: Cell([getattr(rm, attr) / div for rm in ms]) for label, attr, div in cost_cols}
         for m, ms in metrics.items()},  # fmt: skip
        _num,
        better="min",
        note="At the end of each run; communication waste = 1 − Σ size(returned) / Σ size(sent) over the run, "
        "sizes in parameters (AdaptiveFL's rate); wasted = bytes downloaded and uploaded for tasks whose update "
        "was not used (failed, dropped at the deadline, surplus, late).",
    )


def energy_table(metrics: Metrics) -> Table | None:
    """The fleet's energy by kind: idle is most of a fleet's energy, so the total hides a method's own cost.
    None when no run records the split."""
    if not any(rm.energy_by_kind for rm in _every_run(metrics)):
        return None
    e_unit, e_div = _energy_unit(metrics)
    k_cols = [f"{k} ({e_unit})" for k in ENERGY_KINDS]

    def kind_cells(ms: list[RunMetrics]) -> dict[str, Cell]:
        cells = {c: Cell([rm.energy_by_kind.get(k, math.nan) / e_div for rm in ms])
                 for c, k in zip(k_cols, ENERGY_KINDS, strict=True)}  # fmt: skip
        share = [100 * rm.energy_by_kind["idle"] / tot if "idle" in rm.energy_by_kind
                 and (tot := sum(rm.energy_by_kind.values())) > 0 else math.nan for rm in ms]  # fmt: skip
        cells["idle (% of fleet)"] = Cell(share)
        return cells

    return Table(
        "energy",
        "Fleet energy by kind",
        [*k_cols, "idle (% of fleet)"],
        {m: kind_cells(ms) for m, ms in metrics.items()},
        _num,
        better="none",
        note="At the end of each run. compute: local training; radio: downloads and uploads; idle: devices "
        "powered on between tasks (a fleet pays it whatever the method does, so the total hides the method's "
        "own cost, compute + radio).",
    )


def server_table(metrics: Metrics) -> Table | None:
    """The server's own compute by kind of work; None when no run spent any (runs written before the split
    have no such columns)."""
    kinds = [k for k in dict.fromkeys(k for rm in _every_run(metrics) for k in rm.server_s)
             if any(rm.server_s.get(k, 0.0) for rm in _every_run(metrics))]  # fmt: skip
    if not kinds:
        return None
    return Table(
        "server",
        "Server compute time by kind of work (simulated seconds per run)",
        kinds,
        {m: {k: Cell([rm.server_s.get(k, math.nan) for rm in ms]) for k in kinds} for m, ms in metrics.items()},
        _num,
        better="min",
        note="train: server training (pretraining, fine-tuning, distillation); infer: forward passes (APoZ, "
        "teachers, CKA); aggregate: averaging the updates; qsgd: encoding downloads and decoding uploads; "
        "other: work priced in FLOPs. Priced by the run's server profile (server.profile) or FLOP rule.",
    )


def failures_table(metrics: Metrics) -> Table | None:
    """Failed tasks by reason. A reason no run ever hit would be a column of zeros: left out, and named in the
    note; None when no run had a task fail."""
    seen = sorted({k for rm in _every_run(metrics) for k in rm.failures})
    reasons = [k for k in seen if any(rm.failures.get(k, 0.0) for rm in _every_run(metrics))]
    never = [k for k in seen if k not in reasons]
    if not reasons:
        return None
    return Table(
        "failures",
        "Failed tasks by reason (count per run)",
        reasons,
        {m: {r: Cell([rm.failures.get(r, 0.0) for rm in ms]) for r in reasons} for m, ms in metrics.items()},
        _num,
        better="none",
        note=f"No run had a task fail for: {', '.join(never)}." if never else "",
    )


def methods_markdown(sel: Selection) -> str:
    lines = ["| method | settings | seeds | runs |", "|---|---|---|---|"]
    for m in sel.methods:
        settings = "; ".join(f"{k}={fmt_value(v)}" for k, v in m.key)
        lines.append(f"| {m.label} | {settings or '–'} | {', '.join(str(s) for s in m.seeds)} | {', '.join(m.run_ids)} |")
    return "\n".join(lines) + "\n"


def excluded_markdown(sel: Selection) -> str:
    """The excluded runs counted by why, and a few of them (``excluded.csv`` lists every one)."""
    if not sel.excluded:
        return ""
    n = len(sel.excluded)
    lines = [f"**Excluded runs ({n:,}):** {excluded_counts(sel.excluded)}, not counted in any table"
             + ("; every one in `excluded.csv`." if n > EXAMPLES else "."), ""]  # fmt: skip
    lines += [f"- `{e.id}`: {short(e.reason)}" for e in excluded_examples(sel.excluded)]
    return "\n".join(lines) + "\n"


def compare_markdown(sel: Selection, tables: Sequence[Table]) -> str:
    parts = ["# Comparison", "", "## Methods", "", methods_markdown(sel)]
    ex = excluded_markdown(sel)
    if ex:
        parts += [ex]
    parts += ["## Tables", ""]
    parts += [t.markdown() for t in tables]
    return "\n".join(parts)


def table_files(sel: Selection, tables: Sequence[Table]) -> dict[str, str]:
    """The text of ``compare.md`` and of one ``<table>.csv`` per table (and ``excluded.csv`` when runs were left
    out), by file name."""
    files = {"compare.md": compare_markdown(sel, tables)}
    for t in tables:
        files[f"{t.name}.csv"] = _csv_text(*t.csv_rows())
    if sel.excluded:
        files["excluded.csv"] = _csv_text(
            ["id", "run_dir", "reason"], [[e.id, str(e.path), e.reason] for e in sel.excluded]
        )
    return files


def _csv_text(head: Sequence[Any], rows: Sequence[Sequence[Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(head)
    w.writerows(rows)
    return buf.getvalue()


def write_tables(sel: Selection, tables: Sequence[Table], out: Path) -> list[Path]:
    """Write :func:`table_files` into the folder ``out``, every file or none."""
    return write_all({out / name: text for name, text in table_files(sel, tables).items()})
