"""The seed papers' qualitative claims, rerun: one claim group as an iotfl-sim study, its table, a verdict per claim.

    IOTFL_DATA=../shared/datasets python benchmarks/claims.py --group heterofl_iot --scale smoke
    python benchmarks/claims.py --group fedx --scale hour --out studies       # ~an hour on 2 cores
    python benchmarks/claims.py --group adaptivefl --scale paper              # a GPU; see benchmarks/claims.md
    python benchmarks/claims.py --group fedx --scale hour --report-only       # tables from a finished study

The study files are scenarios/claims/<group>_<scale>.yaml (each variant is one row of their ``zip``, labelled
by the run's ``name``); ``iotfl_sim.api.sweep`` runs them (complete runs in the folder are kept), ``analysis.compare``
writes the usual comparison tables into <out>/<study>/compare/, and this script adds claims.md there: the
group's figures per variant (mean +- sample std over seeds, as they come) and one verdict per claim.

Verdict rule (one for every "A beats B" claim): with m the mean and s the sample std over seeds,
reproduced when m_A > m_B and m_A - s_A > m_B + s_B (the seed bands do not overlap); not reproduced when the
reverse holds (m_A < m_B and the bands do not overlap); inconclusive otherwise. "A about equals B": reproduced
when the bands overlap, not reproduced otherwise. "peak": reproduced when the variant with the best mean is one
the claim names and its band lies above those of the sweep's two ends; not reproduced when the best is another
variant whose band lies above every named variant's; inconclusive otherwise. "gain" claims compare per-seed
differences (A - B, paired by seed) with the same rule.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis.compare import Cell, build_tables, run_metrics, write_tables  # noqa: E402
from analysis.rundir import Run  # noqa: E402
from analysis.study import select  # noqa: E402

CLAIMS_DIR = ROOT / "scenarios" / "claims"
SCALES = ("smoke", "hour", "paper")


def study_file(group: str, scale: str) -> Path:
    return CLAIMS_DIR / f"{group}_{scale}.yaml"


# ---------------------------------------------------------------------------------------------- per-run figures


def _last(run: Run, col: str) -> float:
    a = run.column(col)
    if a is None:
        return math.nan
    f = a[np.isfinite(a)]
    return float(f[-1]) if f.size else math.nan


def dispatches(run: Run) -> list[tuple[int, int, str]]:
    """(round, device, level) of every task sent (events.jsonl's ``dispatch`` events; needs output.events: all)."""
    out = []
    p = run.path / "events.jsonl"
    if p.is_file():
        with open(p) as f:
            for line in f:
                if '"dispatch"' not in line:
                    continue
                e = json.loads(line)
                if e.get("event") == "dispatch":
                    out.append((int(e["round"]), int(e["device"]), str(e.get("level", ""))))
    return out


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
    out["utility"] = device_utility(run, out)
    if not math.isfinite(out["utility"]):  # no dispatch events: the mean over the mix's sub-networks
        out["utility"] = out.get("acc_avg", out.get("acc_full", math.nan))
    acc = run.column("acc_full")
    out["acc_full_mean_run"] = float(np.nanmean(acc)) if acc is not None and np.isfinite(acc).any() else math.nan
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
            out["exact_mix_first10_pct"] = 100.0 * np.mean([dict(mix.get(r, Counter())) == quota for r in first])
    return out


# ---------------------------------------------------------------------------------------------- claims


@dataclass(frozen=True)
class Claim:
    """One qualitative claim: ``kind`` gt (a beats b), approx (a about equals b), peak (the best of ``sweep``
    is one of ``a``), gain (the per-seed gain a[0] - a[1] beats b[0] - b[1])."""

    cid: str
    text: str
    kind: str
    metric: str
    a: tuple[str, ...]
    b: tuple[str, ...] = ()
    sweep: tuple[str, ...] = ()
    lower_is_better: bool = False


def gt(cid: str, text: str, metric: str, a: str, b: str, lower: bool = False) -> Claim:
    return Claim(cid, text, "gt", metric, (a,), (b,), lower_is_better=lower)


CLAIMS: dict[str, list[Claim]] = {
    "adaptivefl": [
        gt("T2-full-heterofl", "Table 2: AdaptiveFL full > HeteroFL full (CIFAR-10 VGG16 IID 83.14 vs 74.96)", "acc_full", "adaptivefl", "heterofl"),
        gt("T2-full-scalefl", "Table 2: AdaptiveFL full > ScaleFL full (83.14 vs 78.12)", "acc_full", "adaptivefl", "scalefl"),
        gt("T2-full-decoupled", "Table 2: AdaptiveFL full > Decoupled full (83.14 vs 69.80)", "acc_full", "adaptivefl", "decoupled"),
        gt("T2-avg-heterofl", "Table 2: AdaptiveFL avg > HeteroFL avg (82.97 vs 77.98)", "acc_avg", "adaptivefl", "heterofl"),
        gt("T2-avg-scalefl", "Table 2: AdaptiveFL avg > ScaleFL avg (82.97 vs 79.94)", "acc_avg", "adaptivefl", "scalefl"),
        gt("T2-decoupled-worst", "Table 2: Decoupled worst: HeteroFL full > Decoupled full (74.96 vs 69.80)", "acc_full", "heterofl", "decoupled"),
        gt("T2-all-large", "Table 2: AdaptiveFL full > All-Large (memory ignored) full (83.14 vs 79.76)", "acc_full", "adaptivefl", "all_large"),
        gt("T2-heterofl-paradox", "Table 2 / Fig. 3: HeteroFL avg > its full (77.98 vs 74.96)", "acc_avg", "heterofl", "heterofl_full"),
        gt("F5-waste-random", "Fig. 5a: RL (+CS) waste < Random waste", "comm_waste", "adaptivefl", "adaptivefl_random", lower=True),
        gt("F5-waste-greedy", "Fig. 5a: RL (+CS) waste < Greedy waste", "comm_waste", "adaptivefl", "adaptivefl_greedy", lower=True),
        gt("F5-waste-s", "Fig. 5a: +S has the lowest waste: +S waste < +CS waste", "comm_waste", "adaptivefl_s", "adaptivefl", lower=True),
        gt("F5-acc-random", "Fig. 5b: +CS full > Random full", "acc_full", "adaptivefl", "adaptivefl_random"),
        gt("F5-acc-greedy", "Fig. 5b: +CS full > Greedy full", "acc_full", "adaptivefl", "adaptivefl_greedy"),
        gt("F5-acc-c", "Fig. 5b: +CS full > +C full", "acc_full", "adaptivefl", "adaptivefl_c"),
        gt("F5-acc-s", "Fig. 5b: +CS full > +S full", "acc_full", "adaptivefl", "adaptivefl_s"),
    ],
    "flexfl": [
        gt("T2-large-scalefl", "Table II: FlexFL large > ScaleFL large (VGG16 CIFAR-10 IID 85.16 vs 77.72)", "acc_full", "flexfl", "scalefl"),
        gt("T2-large-heterofl", "Table II: FlexFL large > HeteroFL large (85.16 vs 76.92)", "acc_full", "flexfl", "heterofl"),
        gt("T2-large-decoupled", "Table II: FlexFL large > Decoupled large (85.16 vs 72.76)", "acc_full", "flexfl", "decoupled"),
        gt("T2-avg-scalefl", "Table II: FlexFL avg > ScaleFL avg (84.75 vs 80.36; +0.92 to +7.65)", "acc_avg", "flexfl", "scalefl"),
        gt("T2-large-ge-avg", "Table II: FlexFL large > its avg (85.16 vs 84.75)", "acc_full", "flexfl", "flexfl_avg"),
        gt("T2-baseline-paradox", "Table II: HeteroFL avg > its large (79.75 vs 76.92)", "acc_avg", "heterofl", "heterofl_full"),
        gt("F9-self-kd", "Fig. 9: FlexFL avg > w/o self-KD", "acc_avg", "flexfl", "flexfl_no_self_kd"),
        gt("F9-adaptive", "Fig. 9: FlexFL avg > w/o adaptive model", "acc_avg", "flexfl", "flexfl_no_adaptive"),
        gt("F9-apoz", "Fig. 9: FlexFL avg > w/o APoZ", "acc_avg", "flexfl", "flexfl_no_apoz"),
        gt("F9-adjustment", "Fig. 9: FlexFL avg > w/o adjustment", "acc_avg", "flexfl", "flexfl_no_adjustment"),
        gt("F9-apoz-worst", "Fig. 9: w/o APoZ is the largest drop: w/o adjustment > w/o APoZ", "acc_avg", "flexfl_no_adjustment", "flexfl_no_apoz"),
        gt("KD-reduction", "issue 18 (no paper claim): kd_reduction mean (the authors' weight) vs batchmean", "acc_avg", "flexfl", "flexfl_batchmean"),
    ],
    "adapterfl": [
        gt("T2-LS-fedbase", "Table II: AdapterFL L-S > FedBase L-S (IID 73.82 vs 73.38; beta 0.3 68.52 vs 66.72)", "acc_L-S", "adapterfl", "fedbase"),
        gt("T2-LM-fedbase", "Table II: AdapterFL L-M > FedBase L-M (75.62 vs 68.39; 65.55 vs 57.72)", "acc_L-M", "adapterfl", "fedbase"),
        gt("T2-LL-fedbase", "Table II: AdapterFL L-L > FedBase L-L (69.54 vs 55.28; 64.66 vs 47.60)", "acc_L-L", "adapterfl", "fedbase"),
        gt("T2-LS-feddf", "Table II: AdapterFL L-S > FedDF S (73.82 vs 67.68; 68.52 vs 63.34)", "acc_L-S", "adapterfl", "feddf:acc_S"),
        gt("T2-LM-feddf", "Table II: AdapterFL L-M > FedDF M (75.62 vs 63.56; 65.55 vs 60.99)", "acc_L-M", "adapterfl", "feddf:acc_M"),
        gt("T2-LL-feddf", "Table II: AdapterFL L-L > FedDF L (69.54 vs 58.60; 64.66 vs 49.83)", "acc_L-L", "adapterfl", "feddf:acc_L"),
        gt("T2-LS-fedavg", "Table II: AdapterFL L-S > FedAvg S (73.82 vs 67.84; 68.52 vs 63.16)", "acc_L-S", "adapterfl", "fedavg_s:acc_full"),
        gt("T2-LM-fedavg", "Table II: AdapterFL L-M > FedAvg M (75.62 vs 58.28; 65.55 vs 48.21)", "acc_L-M", "adapterfl", "fedavg_m:acc_full"),
        gt("T2-LL-fedavg", "Table II: AdapterFL L-L > FedAvg L (69.54 vs 53.21; 64.66 vs 45.95)", "acc_L-L", "adapterfl", "fedavg_l:acc_full"),
        Claim("T5-gain-shrinks", "Table V: the L-L gain over FedBase is larger at 0.8/0.1/0.1 (+20.20) than at 0.1/0.1/0.8 (+2.47)",
              "gain", "acc_L-L", ("adapterfl_r811", "fedbase_r811"), ("adapterfl_r118", "fedbase_r118")),
        gt("T5-ratio", "Table V: AdapterFL L-L improves as the constrained share falls (0.1/0.1/0.8 72.16 > 0.8/0.1/0.1 68.46)", "acc_L-L", "adapterfl_r118", "adapterfl_r811"),
        gt("FIT", "issue 18 (no paper claim): fit params (Algorithm 1's reading) vs fit memory, L-L", "acc_L-L", "adapterfl", "adapterfl_fit_memory"),
    ],
    "heterofl_iot": [
        gt("F5-mix", "Figs. 2 / 5: ClientSelect dispatches the configured a2-b8 mix (2:8, where HeteroFL's draw gave 1:9): rounds of the first 10 with exactly 2 a + 8 b, proportional > random", "exact_mix_first10_pct", "proportional", "random"),
        gt("S3.4-paced-last", "Sec. 3.4 (no fluctuation between rounds): paced keeps level a to a later round than proportional", "last_round_with_a", "paced", "proportional"),
        gt("S3.4-paced-even", "Sec. 3.4: paced's per-round level-a share varies less than proportional's", "a_share_std_pct", "paced", "proportional", lower=True),
        gt("S4.4-acc-random", "Sec. 4.4 / Figs. 3-4 (figures only, no numbers): HeteroFL-IoT (proportional) final accuracy > HeteroFL's random selection", "acc_full", "proportional", "random"),
        gt("I18-paced-final", "issue 18 (no paper claim): paced final accuracy > proportional", "acc_full", "paced", "proportional"),
        gt("I18-paced-run", "issue 18 (no paper claim): paced accuracy over the run (mean of evaluated rounds) > proportional", "acc_full_mean_run", "paced", "proportional"),
    ],
    "fedx": [
        Claim("F4-M-vs-L", "Fig. 4: FedX-Medium about equals FedX-Large (a marginal gap)", "approx", "utility", ("fedx_m",), ("fedx_l",)),
        gt("F4-S-worst", "Fig. 4: FedX-Small is clearly worse: FedX-M > FedX-S", "utility", "fedx_m", "fedx_s"),
        gt("F4-vs-qfedavg-l", "Fig. 4: FedX > Quantized FedAvg-Large (+2.19 / 2.49 / 11.56 at 8 / 9 / 10 bits)", "utility", "fedx", "qfedavg_l"),
        gt("F4-ft-s", "Fig. 4: FedX-S > Quantized FedAvg-S", "utility", "fedx_s", "qfedavg_s"),
        gt("F4-ft-m", "Fig. 4: FedX-M > Quantized FedAvg-M", "utility", "fedx_m", "qfedavg_m"),
        gt("F4-ft-l", "Fig. 4: FedX-L > Quantized FedAvg-L", "utility", "fedx_l", "qfedavg_l"),
        gt("F4-dadaquant", "Fig. 4: FedX > DAdaQuant (+2.28 to 3.01 on Tiny-ImageNet) in FedX's setting (Sec. IV-D: the server holds its classes and fine-tunes without regularisation)",
           "utility", "fedx", "dadaquant_fedx_setting"),
        gt("F4-dadaquant-own", "issue 18 (no paper claim): FedX > DAdaQuant as its own paper runs it (every class on the devices, no server data)", "utility", "fedx", "dadaquant"),
        Claim("F5-peak", "Fig. 5: utility peaks at 40-60 % medium devices (HAR 68.21 %), 2.05-5.31 lower above",
              "peak", "utility", ("fedx",), sweep=("fedx_medium_000", "fedx_medium_025", "fedx", "fedx_medium_075", "fedx_medium_100")),
        gt("F6-ft", "Fig. 6: fine-tuning helps: FedX > FedX without FT", "utility", "fedx", "fedx_no_ft"),
        gt("EQ2", "Sec. III (no figure): eq. 2's device-aware choice >= the shuffle: FedX eq2 > FedX shuffle", "utility", "fedx_eq2", "fedx"),
    ],
}
GROUPS = tuple(CLAIMS)


def variants_of(claim: Claim) -> set[str]:
    """Study variants (run names) a claim reads; ``name:column`` and the ``_full`` / ``_avg`` suffixes name one."""
    out = set()
    for v in (*claim.a, *claim.b, *claim.sweep):
        name = v.split(":")[0]
        for suffix in ("_full", "_avg"):
            if name.endswith(suffix) and name[: -len(suffix)] in {"heterofl", "flexfl"}:
                name = name[: -len(suffix)]
        out.add(name)
    return out


def _values(data: dict[str, dict[int, dict[str, float]]], ref: str, metric: str) -> dict[int, float]:
    """Per-seed values of ``ref`` (a variant, ``variant:column``, or ``heterofl_full`` = that variant's acc_full)."""
    name, _, col = ref.partition(":")
    for suffix, c in (("_full", "acc_full"), ("_avg", "acc_avg")):
        if not col and name.endswith(suffix) and name[: -len(suffix)] in data:
            name, col = name[: -len(suffix)], c
    col = col or metric
    return {s: f.get(col, math.nan) for s, f in data.get(name, {}).items()}


def _band(vals: list[float]) -> tuple[float, float]:
    c = Cell(vals)
    return c.mean, (c.std if c.k > 1 else math.nan)


def _compare(a: list[float], b: list[float], lower: bool) -> tuple[str, str]:
    (ma, sa), (mb, sb) = _band(a), _band(b)
    if not (math.isfinite(ma) and math.isfinite(mb)):
        return "inconclusive", "a variant has no value"
    if not (math.isfinite(sa) and math.isfinite(sb)):
        return "inconclusive", "fewer than 2 seeds: no band"
    if lower:
        ma, mb, sa, sb = -ma, -mb, sa, sb
    if ma > mb and ma - sa > mb + sb:
        return "reproduced", "bands apart"
    if ma < mb and ma + sa < mb - sb:
        return "not reproduced", "reversed, bands apart"
    return "inconclusive", "bands overlap"


def fmt(vals: list[float], pct: bool) -> str:
    m, s = _band(vals)
    if not math.isfinite(m):
        return "–"
    k = 100.0 if pct else 1.0
    return f"{k * m:.2f}" + (f" ± {k * s:.2f}" if math.isfinite(s) else "")


def judge(claim: Claim, data: dict[str, dict[int, dict[str, float]]]) -> tuple[str, str, str]:
    """(verdict, the numbers it rests on, why)."""
    pct = claim.metric.startswith("acc") or claim.metric == "utility" or claim.metric == "comm_waste"
    if claim.kind in ("gt", "approx"):
        a = list(_values(data, claim.a[0], claim.metric).values())
        b = list(_values(data, claim.b[0], claim.metric).values())
        nums = f"{claim.a[0]} {fmt(a, pct)} vs {claim.b[0]} {fmt(b, pct)}"
        if claim.kind == "gt":
            v, why = _compare(a, b, claim.lower_is_better)
            return v, nums, why
        (ma, sa), (mb, sb) = _band(a), _band(b)
        if not all(math.isfinite(x) for x in (ma, sa, mb, sb)):
            return "inconclusive", nums, "no band"
        overlap = abs(ma - mb) <= sa + sb
        return ("reproduced" if overlap else "not reproduced"), nums, "bands overlap" if overlap else "bands apart"
    if claim.kind == "gain":
        def gains(x: str, y: str) -> list[float]:
            va, vb = _values(data, x, claim.metric), _values(data, y, claim.metric)
            return [va[s] - vb[s] for s in sorted(set(va) & set(vb))]

        g1, g2 = gains(*claim.a), gains(*claim.b)
        v, why = _compare(g1, g2, False)
        return v, f"gain {'-'.join(claim.a)} {fmt(g1, True)} vs {'-'.join(claim.b)} {fmt(g2, True)}", why
    if claim.kind == "peak":
        bands = {n: _band(list(_values(data, n, claim.metric).values())) for n in claim.sweep}
        nums = ", ".join(f"{n} {fmt(list(_values(data, n, claim.metric).values()), pct)}" for n in claim.sweep)
        finite = {n: b for n, b in bands.items() if math.isfinite(b[0])}
        if len(finite) < len(claim.sweep) or any(not math.isfinite(b[1]) for b in finite.values()):
            return "inconclusive", nums, "a variant has no band"
        best = max(finite, key=lambda n: finite[n][0])
        lo = lambda n: finite[n][0] - finite[n][1]  # noqa: E731
        hi = lambda n: finite[n][0] + finite[n][1]  # noqa: E731
        ends = (claim.sweep[0], claim.sweep[-1])
        if best in claim.a and all(lo(best) > hi(e) for e in ends if e != best):
            return "reproduced", nums, f"best {best}, above both ends"
        if best not in claim.a and all(lo(best) > hi(n) for n in claim.a):
            return "not reproduced", nums, f"best {best}, above every named variant"
        return "inconclusive", nums, f"best {best}; bands overlap"
    raise ValueError(claim.kind)


# ---------------------------------------------------------------------------------------------- report

TABLE_COLS: dict[str, list[str]] = {
    "adaptivefl": ["acc_full", "acc_avg", "comm_waste"],
    "flexfl": ["acc_full", "acc_avg", "acc_small", "acc_medium", "acc_large"],
    "adapterfl": ["acc_full", "acc_L-S", "acc_L-M", "acc_L-L", "acc_S", "acc_M", "acc_L"],
    "heterofl_iot": ["acc_full", "acc_avg", "acc_full_mean_run", "exact_mix_first10_pct", "rounds_with_a_pct", "last_round_with_a",
                     "a_share_pct", "a_share_std_pct", "energy_j"],
    "fedx": ["utility", "acc_full", "acc_small", "acc_medium", "acc_large"],
}


def collect(folder: Path) -> tuple[dict[str, dict[int, dict[str, float]]], list[str]]:
    sel = select([folder], by=["name"])
    data: dict[str, dict[int, dict[str, float]]] = {}
    for m in sel.methods:
        name = str(dict(m.key)["name"])
        data[name] = {int(s): figures(r) for s, r in zip(m.seeds, m.runs, strict=True)}
    return data, [f"{e.id}: {e.reason}" for e in sel.excluded]


def report(group: str, scale: str, folder: Path, host_s: float | None) -> str:
    data, excluded = collect(folder)
    cols = TABLE_COLS[group]
    pct_cols = {c for c in cols if c.startswith("acc") or c in ("utility", "comm_waste")}
    lines = [f"## {group} at scale {scale}", "", f"Study: `{folder}` ({study_file(group, scale).relative_to(ROOT)}).", ""]
    if host_s is not None:
        lines += [f"Wall time of this invocation: {host_s:.0f} s.", ""]
    lines += ["Mean ± sample std over seeds (accuracies and waste in %), last evaluated round, numbers as they came.", ""]
    lines.append("| variant | seeds | " + " | ".join(cols) + " |")
    lines.append("|---|---:|" + "---:|" * len(cols))
    for name, per_seed in data.items():
        cells = [fmt([f.get(c, math.nan) for f in per_seed.values()], c in pct_cols) for c in cols]
        lines.append(f"| {name} | {len(per_seed)} | " + " | ".join(cells) + " |")
    lines += ["", "| claim | verdict | numbers | rule |", "|---|---|---|---|"]
    for c in CLAIMS[group]:
        v, nums, why = judge(c, data)
        lines.append(f"| {c.cid}: {c.text} | **{v}** | {nums} | {why} |")
    if excluded:
        lines += ["", "Excluded runs: " + "; ".join(excluded)]
    host = [r for per in data.values() for r in per.values()]
    lines += ["", f"{len(host)} runs counted."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--group", required=True, choices=GROUPS)
    ap.add_argument("--scale", default="smoke", choices=SCALES)
    ap.add_argument("--out", default="studies", help="parent of the study folder (default: studies)")
    ap.add_argument("--workers", type=int, default=None, help="runs at a time (default: the study file's)")
    ap.add_argument("--report-only", action="store_true", help="no runs: tables from the study folder as it is")
    args = ap.parse_args(argv)

    from iotfl_sim.api import sweep
    from iotfl_sim.scenario.loader import ScenarioError
    from iotfl_sim.study import read_study

    path = study_file(args.group, args.scale)
    try:
        name = read_study(path, check=False).spec.name
    except ScenarioError as e:
        print(f"claims: {e}", file=sys.stderr)
        return 2
    folder = Path(args.out) / name
    wall = None
    if not args.report_only:
        t0 = time.perf_counter()
        try:
            sweep(path, out=args.out, workers=args.workers)
        except ScenarioError as e:
            print(f"claims: {e}", file=sys.stderr)
            return 2
        wall = time.perf_counter() - t0
    if not (folder / "study.json").is_file():
        print(f"claims: no study folder {folder} (run without --report-only first)", file=sys.stderr)
        return 2
    sel = select([folder], by=["name"])
    write_tables(sel, build_tables(sel), folder / "compare")
    text = report(args.group, args.scale, folder, wall)
    (folder / "claims.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
