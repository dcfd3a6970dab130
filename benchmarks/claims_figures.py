"""The per-seed figures of the claim studies: read from a study folder, written to and read back from the
committed CSVs in benchmarks/claims_data/ (``<group>_<scale>.csv``) that benchmarks/claims.md is built from.

A CSV has one row per variant and seed (variants in the study's order, seeds ascending) and the columns
``variant``, ``seed``, then every figure the group's table and claims read (``columns``), then ``host_time_s``
(summary.json's total). Floats are written as ``repr`` (the shortest text that reads back as the same float;
``nan`` for a figure a run does not have), so reading a CSV back gives the floats the study gave.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import yaml
from claims_figures_adaptivefl import level_spread_run

from analysis.compare import run_metrics
from analysis.rundir import Run
from analysis.study import select

# variant -> seed -> figure -> value
Data = dict[str, dict[int, dict[str, float]]]
HOST = "host_time_s"


MAX_CSV_BYTES = 16 * 2**20
CSV_FIX = "restore the file from git or rebuild it with --report-only from its study folder"
RUN_FIX = "delete that run folder and run the group again without --report-only: the study recomputes that run alone"


def one_line(e: BaseException) -> str:
    """An exception as one line (a YAML error's text spans several)."""
    return " ".join(str(e).split()) or type(e).__name__


class DataError(Exception):
    """A claims input that cannot be read back: the message names the file (and line); ``fix`` says what to do."""

    def __init__(self, message: str, fix: str = CSV_FIX) -> None:
        super().__init__(message)
        self.fix = fix


def dispatches(run: Run) -> list[tuple[int, int, str]]:
    """(round, device, level) of every task sent (events.jsonl's ``dispatch`` events; needs output.events: all).
    Raises DataError naming the line of a damaged event."""
    out = []
    p = run.path / "events.jsonl"
    if p.is_file():
        with open(p, encoding="utf-8", errors="replace") as f:
            for i, line in enumerate(f, 1):
                try:  # every line, so that a line cut short is found, not skipped
                    e = json.loads(line)
                    if e.get("event") == "dispatch":
                        out.append((int(e["round"]), int(e["device"]), str(e.get("level", ""))))
                except (ValueError, TypeError, KeyError, AttributeError) as err:
                    raise DataError(f"{p} line {i}: not a whole event ({one_line(err)})", RUN_FIX) from None
    return out


def damage(run: Run) -> str | None:
    """Why a run its study calls done cannot be read whole (None: it can): summary.json not a complete run's, or
    rounds.csv cut short (a last line without its end, a row with another number of fields than the header, fewer
    or more rows than summary.json's ``rounds``). The plots tolerate such a folder; a verdict must not."""
    if run.summary.get("status") != "complete" or not isinstance(run.summary.get("rounds"), int):
        return "summary.json: missing, unreadable or not a complete run's"
    p = run.path / "rounds.csv"
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        return f"rounds.csv: cannot read it ({e})"
    if not text.endswith("\n"):
        return "rounds.csv: its last line is cut short"
    rows = list(csv.reader(io.StringIO(text)))
    if bad := next((i for i, r in enumerate(rows[1:], 2) if len(r) != len(rows[0])), None):
        return f"rounds.csv line {bad}: {len(rows[bad - 1])} fields where the header has {len(rows[0])}"
    if len(rows) - 1 != run.summary["rounds"]:
        return f"rounds.csv: {len(rows) - 1} rounds where summary.json says {run.summary['rounds']}"
    return None


def level_mix(run: Run) -> dict[int, Counter]:
    """Levels dispatched per round."""
    per: dict[int, Counter] = defaultdict(Counter)
    for rnd, _, level in dispatches(run):
        per[rnd][level] += 1
    return per


def device_utility(run: Run, final_acc: dict[str, float]) -> float:
    """FedX's "average accuracy across devices" (Section IV-D): the mean over the devices the run dispatched to of
    the final accuracy of the sub-network each holds (``acc_<level>``; FedX assigns it once, so a device's
    dispatches all name one level). Unlike ``acc_avg`` (the plain mean over the mix's sub-networks) it weights
    each sub-network by its devices: a 25 % medium mix counts medium a quarter, and an eq. 2 assignment that
    gives every device medium does not count an untrained small. NaN without dispatch events."""
    level_of = {device: level for _, device, level in dispatches(run)}
    accs = [final_acc.get(f"acc_{lv}", math.nan) for lv in level_of.values()]
    return float(np.mean(accs)) if accs else math.nan


def _quotas(run: Run) -> dict[str, int] | None:
    """Tasks per level per round that ``algorithm.proportions`` asks for (a2-b8 with 10 a round: a 2, b 8), when
    the proportions divide the round exactly; else None."""
    p = run.path / "scenario.resolved.yaml"
    sc = yaml.safe_load(p.read_text()) if p.is_file() else {}
    props = (sc.get("algorithm") or {}).get("proportions")
    k = sc.get("clients_per_round")
    if not props or not k:
        return None
    parts = {p[0]: int(p[1:]) for p in str(props).split("-")}
    total = sum(parts.values())
    if any(k * v % total for v in parts.values()):
        return None
    return {lv: k * v // total for lv, v in parts.items() if v}


def figures(run: Run) -> dict[str, float]:
    """Every figure a claim may read from one run."""
    rm = run_metrics(run, ())
    out = {k: v for k, v in rm.final_acc.items()}
    out["comm_waste"] = rm.comm_waste
    out["energy_j"] = rm.energy_j
    out["level_spread_run"] = level_spread_run(run.algorithm, run.rounds)
    out["utility"] = device_utility(run, out)
    if not math.isfinite(out["utility"]):  # no dispatch events: the mean over the mix's sub-networks
        out["utility"] = out.get("acc_avg", out.get("acc_full", math.nan))
    acc = run.column("acc_full")
    out["acc_full_mean_run"] = (
        float(np.nanmean(acc)) if acc is not None and np.isfinite(acc).any() else math.nan
    )
    mix = level_mix(run)
    rounds = int(run.summary.get("rounds") or (max(mix) + 1 if mix else 0))
    if mix and rounds:
        shares = [mix[r]["a"] / max(sum(mix[r].values()), 1) if r in mix else 0.0 for r in range(rounds)]
        a_rounds = [r for r in range(rounds) if mix.get(r, Counter())["a"] > 0]
        out["last_round_with_a"] = float(max(a_rounds) + 1) if a_rounds else 0.0
        out["rounds_with_a_pct"] = 100.0 * len(a_rounds) / rounds
        out["a_share_pct"] = 100.0 * float(np.mean(shares))
        out["a_share_std_pct"] = 100.0 * float(np.std(shares))
        quota = _quotas(run)
        if quota:
            first = range(min(10, rounds))
            out["exact_mix_first10_pct"] = 100.0 * np.mean(
                [dict(mix.get(r, Counter())) == quota for r in first]
            )
    return out


def host_time(run: Run) -> float:
    """summary.json's total host seconds of the run (nan when absent)."""
    h = run.summary.get(HOST)
    v = h.get("total") if isinstance(h, dict) else None
    return float(v) if isinstance(v, int | float) else math.nan


def _run_figures(run: Run) -> dict[str, float]:
    """``figures`` of a run its study calls done; DataError naming the folder when it is damaged."""
    if why := damage(run):
        raise DataError(f"{run.path}: the study says it is done, but {why}", RUN_FIX)
    try:
        return figures(run)
    except (OSError, ValueError, TypeError, KeyError, yaml.YAMLError) as e:
        raise DataError(f"{run.path}: cannot read its figures ({one_line(e)})", RUN_FIX) from None


def collect(folder: Path, by: Sequence[str] = ("name",)) -> tuple[Data, list[str]]:
    """The figures of every finished run of a study folder, by variant (the ``by`` keys: the run's ``name``)
    and seed; and the excluded runs, with why."""
    sel = select([folder], by=list(by))
    if bad := next((e for e in sel.excluded if e.reason.startswith("unreadable")), None):
        raise DataError(f"{bad.path}: the study says it is done, but it is {bad.reason}", RUN_FIX)
    data: Data = {}
    for m in sel.methods:
        name = str(dict(m.key)[by[0]]) if len(by) == 1 else m.label
        data[name] = {
            int(s): {**_run_figures(r), HOST: host_time(r)}
            for s, r in sorted(zip(m.seeds, m.runs, strict=True), key=lambda sr: int(sr[0]))
        }
    return data, [f"{e.id}: {e.reason}" for e in sel.excluded]


def _first_difference(a: dict[str, float], b: dict[str, float]) -> str | None:
    """The first figure (host time aside) whose value differs between ``a`` and ``b`` (NaN equals NaN)."""
    for k in sorted((set(a) | set(b)) - {HOST}):
        x, y = a.get(k, math.nan), b.get(k, math.nan)
        if x != y and not (math.isnan(x) and math.isnan(y)):
            return f"{k} {x!r} -> {y!r}"
    return None


def rerun_check(before: Data, now: Data) -> str | None:
    """What a report says of the runs it shares with the CSV it replaces: how many of them (variant and seed) give
    the same figures bit for bit, and the first that does not; None when they share none."""
    shared = [(v, s) for v, per in now.items() for s in per if s in before.get(v, {})]
    if not shared:
        return None
    differ = [(v, s, d) for v, s in shared if (d := _first_difference(before[v][s], now[v][s])) is not None]
    text = f"{len(shared) - len(differ)} of the {len(shared)} runs the replaced CSV also holds give the same figures"
    if differ:
        v, s, d = differ[0]
        text += f"; {len(differ)} differ, the first {v} seed {s}: {d}"
    return text


def to_csv(data: Data, columns: Iterable[str]) -> str:
    """The CSV text of ``data`` restricted to ``columns`` (and ``host_time_s``)."""
    cols = [c for c in dict.fromkeys(columns) if c != HOST] + [HOST]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["variant", "seed", *cols])
    for variant, per_seed in data.items():
        for seed in sorted(per_seed):
            w.writerow([variant, seed, *(repr(float(per_seed[seed].get(c, math.nan))) for c in cols)])
    return buf.getvalue()


def read_csv(path: Path) -> Data:
    """A claims CSV read back; raises DataError naming the file and line of the first problem."""
    try:
        if (size := path.stat().st_size) > MAX_CSV_BYTES:  # a group's CSV is tens of kB
            raise DataError(f"{path}: {size:,} bytes, more than a claims CSV holds ({MAX_CSV_BYTES:,} at most)")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: cannot read it ({e})") from None
    return parse_csv(text, path)


def parse_csv(text: str, path: Path) -> Data:
    """The figures of a claims CSV's text (``path`` names it in errors)."""
    rows = list(csv.reader(io.StringIO(text)))
    if not rows or rows[0][:2] != ["variant", "seed"] or len(rows[0]) < 3:
        raise DataError(f"{path} line 1: the header must start with variant,seed and name a figure")
    cols = rows[0][2:]
    if len(set(cols)) != len(cols):
        raise DataError(f"{path} line 1: a figure is named twice")
    data: Data = {}
    for i, row in enumerate(rows[1:], start=2):
        if len(row) != len(rows[0]):
            raise DataError(f"{path} line {i}: {len(row)} fields where the header has {len(rows[0])}")
        variant, seed_text, *vals = row
        try:
            seed = int(seed_text)
            values = [float(v) for v in vals]
        except ValueError as e:
            raise DataError(f"{path} line {i}: {e}") from None
        if bad := next((c for c, v in zip(cols, values, strict=True) if math.isinf(v)), None):
            raise DataError(f"{path} line {i}: {bad} is infinite; a figure is a finite number, or nan where none")
        per = data.setdefault(variant, {})
        if seed in per:
            raise DataError(f"{path} line {i}: variant {variant!r} seed {seed} again")
        per[seed] = dict(zip(cols, values, strict=True))
    return data
