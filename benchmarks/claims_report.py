"""benchmarks/claims.md, the whole file: the claim groups (benchmarks/claims_groups/) decided by
``analysis.claims_rule`` on the per-seed figures of benchmarks/claims_data/. Nothing in it varies between
invocations: the same modules and CSVs give the same bytes."""

from __future__ import annotations

import importlib
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np
from claims_figures import HOST, Data, DataError, read_csv
from claims_groups import GROUPS, Claim

from analysis import claims_rule as rule

ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = ROOT / "benchmarks" / "claims_data"
MD_PATH = ROOT / "benchmarks" / "claims.md"
README_PATH = ROOT / "README.md"
README_BEGIN = (
    "<!-- claim verdicts: written by benchmarks/claims.py from the same data as claims.md; do not edit -->"
)
README_END = "<!-- end of claim verdicts -->"
SCALES = ("smoke", "hour", "paper")
DEFAULT_SCALE = "hour"  # the scale a group without a CSV is pending at, unless its module sets SCALE
PENDING = "pending"
VERDICTS = (rule.REPRODUCED, rule.NOT_REPRODUCED, rule.INCONCLUSIVE, rule.NOT_TESTABLE, PENDING)


def group_module(group: str) -> ModuleType:
    return importlib.import_module(f"claims_groups.{group}")


def data_path(group: str, scale: str, data_dir: Path = DATA_DIR) -> Path:
    return data_dir / f"{group}_{scale}.csv"


def _shown(p: Path) -> str:
    """A path as claims.md names it: relative to the repository when inside it."""
    return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p)


# ---------------------------------------------------------------------------------------------- sides


def side(ref: str, metric: str, names: set[str]) -> tuple[str, str]:
    """(variant, column) a claim side names: ``variant``, ``variant:column``, or ``<variant>_full`` /
    ``<variant>_avg`` (that variant's ``acc_full`` / ``acc_avg``) when no variant has that very name."""
    name, _, col = ref.partition(":")
    if not col and name not in names:
        for suffix, c in (("_full", "acc_full"), ("_avg", "acc_avg")):
            if name.endswith(suffix) and name[: -len(suffix)] in names:
                return name[: -len(suffix)], c
    return name, col or metric


def refs(claim: Claim) -> tuple[str, ...]:
    return (*claim.a, *claim.b, *claim.sweep)


def variants_of(claim: Claim, names: set[str]) -> set[str]:
    """The study variants a claim reads."""
    return {side(r, claim.metric, names)[0] for r in refs(claim)}


def columns(mod: ModuleType, names: set[str]) -> list[str]:
    """The figures a group's CSV holds: its table's, then every one its claims read, in order of appearance."""
    cols = list(mod.TABLE_COLS)
    for c in mod.CLAIMS:
        cols += [side(r, c.metric, names)[1] for r in refs(c)]
    return list(dict.fromkeys(cols))


def series(data: Data, ref: str, metric: str) -> dict[int, float]:
    variant, col = side(ref, metric, set(data))
    return {s: f.get(col, math.nan) for s, f in data.get(variant, {}).items()}


def _mean(s: dict[int, float]) -> float:
    v = [x for x in s.values() if math.isfinite(x)]
    return float(np.mean(v)) if v else math.nan


# ---------------------------------------------------------------------------------------------- deciding


@dataclass(frozen=True)
class Row:
    claim: Claim
    verdict: rule.Verdict
    tests: rule.Tests | None = None
    shown: tuple[tuple[str, dict[int, float]], ...] = ()  # the per-seed values shown: (label, seed -> value)


def claim_tests(
    claim: Claim, data: Data, classes: int
) -> tuple[rule.Tests, tuple[tuple[str, dict[int, float]], ...]]:
    """A claim's tests (before the group's Holm correction) and the per-seed values it rests on. The reference
    of a relative margin is B (the gain's b[0], the sweep's first variant)."""
    m, lower = claim.metric, claim.lower_is_better
    s = {r: series(data, r, m) for r in refs(claim)}
    ref_mean = _mean(s[(claim.b or claim.sweep)[0]])
    margin = rule.resolve_margin(m, claim.margin, ref_mean)
    if claim.kind == "gt":
        t = rule.claim_beats(s[claim.a[0]], s[claim.b[0]], m, margin, lower, f"{claim.a[0]} - {claim.b[0]}")
        shown = ((claim.a[0], s[claim.a[0]]), (claim.b[0], s[claim.b[0]]))
    elif claim.kind == "approx":
        t = rule.claim_about(s[claim.a[0]], s[claim.b[0]], m, margin, f"{claim.a[0]} - {claim.b[0]}")
        shown = ((claim.a[0], s[claim.a[0]]), (claim.b[0], s[claim.b[0]]))
    elif claim.kind == "gain":
        (a0, a1), (b0, b1) = claim.a, claim.b
        t = rule.claim_gain(s[a0], s[a1], s[b0], s[b1], m, margin, lower, f"({a0} - {a1}) - ({b0} - {b1})")
        gains = [
            (f"{x} - {y}", {k: s[x][k] - s[y][k] for k in s[x] if k in s[y]}) for x, y in ((a0, a1), (b0, b1))
        ]
        shown = tuple(gains)
    else:  # peak
        t = rule.claim_peak({n: s[n] for n in claim.sweep}, claim.a, m, margin, lower)
        shown = tuple((n, s[n]) for n in claim.sweep)
    why = rule.not_testable_reason(claim.untestable, m, [_mean(v) for v in s.values()], classes)
    if not why and claim.kind in ("gt", "approx"):
        va, vb = (side(r[0], m, set(data))[0] for r in (claim.a, claim.b))
        why = rule.same_runs_reason(va, vb, data.get(va, {}), data.get(vb, {}), ignore=(HOST,))
    return (rule.mark_not_testable(t, why) if why else t), shown


def decide_group(mod: ModuleType, data: Data | None, scale: str) -> list[Row]:
    """Every claim of a group with its verdict; ``data`` None: not yet run (pending, or not testable by its
    stated reason)."""
    if data is None:
        return [
            Row(c, rule.Verdict(rule.NOT_TESTABLE, c.untestable, None, None))
            if c.untestable
            else Row(c, rule.Verdict(PENDING, f"not yet run at scale {scale}", None, None))
            for c in mod.CLAIMS
        ]
    decided = [claim_tests(c, data, mod.CLASSES) for c in mod.CLAIMS]
    verdicts = rule.decide([t for t, _ in decided])
    return [Row(c, v, t, shown) for c, (t, shown), v in zip(mod.CLAIMS, decided, verdicts, strict=True)]


# ---------------------------------------------------------------------------------------------- writing


def _num(v: float, k: float) -> str:
    return f"{k * v:.2f}" if math.isfinite(v) else "–"


def _p(p: float | None) -> str:
    if p is None:
        return "–"
    return "< 0.0001" if p < 1e-4 else f"{p:.4f}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _seeds(seeds: list[int]) -> str:
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(map(str, seeds))


def _band(vals: list[float], k: float) -> str:
    f = [v for v in vals if math.isfinite(v)]
    if not f:
        return "–"
    text = f"{k * float(np.mean(f)):.2f}"
    return text + (f" ± {k * float(np.std(f, ddof=1)):.2f}" if len(f) > 1 else "")


def variant_table(mod: ModuleType, data: Data) -> list[str]:
    cols = list(mod.TABLE_COLS)
    heads = []
    for c in cols:
        k, unit = rule.display(c)
        heads.append(f"{c} (%)" if k == 100.0 else c)
    lines = ["| variant | seeds | " + " | ".join(heads) + " |", "|---|---|" + "---:|" * len(cols)]
    for name, per_seed in data.items():
        cells = [_band([f.get(c, math.nan) for f in per_seed.values()], rule.display(c)[0]) for c in cols]
        lines.append(f"| {name} | {_seeds(sorted(per_seed))} | " + " | ".join(cells) + " |")
    return lines


def _values_cell(row: Row) -> str:
    if not row.shown:
        return "–"
    k = rule.display(row.claim.metric)[0]
    seeds = (
        row.tests.seeds
        if row.tests is not None and row.tests.seeds
        else sorted(set().union(*(s for _, s in row.shown)))
    )
    parts = [f"{label}: " + ", ".join(_num(s.get(x, math.nan), k) for x in seeds) for label, s in row.shown]
    return f"seeds {_seeds(list(seeds))} · " + " · ".join(parts)


def _effect_cell(row: Row) -> str:
    t = row.tests
    if t is None or t.effect is None:
        return "–"
    text = rule.fmt_effect(t.effect, t.metric)
    return f"{text} ({t.effect_label})" if t.kind == "peak" else text


def claim_table(rows: list[Row], with_section: bool) -> list[str]:
    head = "| id | claim (source) | paper | per-seed values | effect [95 % CI], d_z | Holm p: holds / fails | verdict | reason |"
    lines = [head, "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        c, v = r.claim, r.verdict
        claim = (
            c.sentence
            + (f" (`{c.source}`)" if c.source else "")
            + (f" [{c.section}]" if with_section else "")
        )
        ps = "–" if v.p_holds is None else f"{_p(v.p_holds)} / {_p(v.p_fails)}"
        cells = [
            c.cid,
            claim,
            c.paper or "–",
            _values_cell(r),
            _effect_cell(r),
            ps,
            f"**{v.verdict}**",
            v.reason or "–",
        ]
        lines.append("| " + " | ".join(_cell(x) for x in cells) + " |")
    return lines


def counts(rows: list[Row]) -> Counter:
    return Counter(r.verdict.verdict for r in rows)


def summary_line(rows: list[Row]) -> str:
    n = counts(rows)
    return "**Summary**: " + ", ".join(f"{n[v]} {v}" for v in VERDICTS) + f" ({len(rows)} claims)."


def group_section(
    i: int, group: str, scale: str, data: Data | None, rows: list[Row], data_dir: Path
) -> list[str]:
    mod = group_module(group)
    title = mod.TITLE or group
    out = [f"## {i}. {title}: scale {scale}", ""]
    if mod.SETTING:
        out += [mod.SETTING.strip(), ""]
    if data is None:
        out += [f"Not yet run at scale {scale}: no `{_shown(data_path(group, scale, data_dir))}`.", ""]
    else:
        runs = sum(len(v) for v in data.values())
        host = sum(f.get(HOST, math.nan) for v in data.values() for f in v.values())
        host_text = (
            f"{host / 3600:.2f} h of host time summed over the runs"
            if math.isfinite(host)
            else "host time not recorded"
        )
        out += [
            f"Per-seed figures: `{_shown(data_path(group, scale, data_dir))}` ({runs} runs, {host_text}). "
            "Mean ± sample std over seeds, last evaluated round, numbers as they came.",
            "",
            *variant_table(mod, data),
            "",
        ]
    out += [summary_line(rows), ""]
    paper = [r for r in rows if r.claim.section == "paper"]
    own = [r for r in rows if r.claim.section != "paper"]
    if paper:
        out += ["**The paper's claims**", "", *claim_table(paper, False), ""]
    if own:
        out += [
            "**Not the paper's claims**: the project's own method options (extension) and checks an issue asked for (issue)",
            "",
        ]
        out += [*claim_table(own, True), ""]
    return out


def _margins_table() -> str:
    lines = ["| metric | smallest effect of interest (margin) |", "|---|---|"]
    lines += [f"| `{r.pattern}` | {r.what} |" for r in rule.METRICS]
    return "\n".join(lines)


HEADER = """\
# The seed papers' claims, rerun (issues 18 and 45)

**Generated file**: `python benchmarks/claims.py` writes the whole of it from the claim groups
(`benchmarks/claims_groups/<group>.py`: the paper's sentence, its line, the paper's numbers, the setting) and the
per-seed figures of each finished study (`benchmarks/claims_data/<group>_<scale>.csv`); every number below comes
from those files. Do not edit it by hand: `python benchmarks/claims.py --from-data` rebuilds it, and a test
checks that it equals the committed file byte for byte.

## How to run a group

    IOTFL_DATA=../shared/datasets python benchmarks/claims.py --group GROUP --scale smoke|hour|paper [--out studies]

`GROUP` is one of {groups}.
The script runs the study `scenarios/claims/GROUP_SCALE.yaml` with `iotfl_sim.api.sweep` (complete runs in
`<out>/<study>/` are kept, so an interrupted group resumes), writes the usual comparison tables with
`analysis.compare` into `<out>/<study>/compare/`, extracts every finished run's figures into
`benchmarks/claims_data/GROUP_SCALE.csv` and rewrites this file. `--report-only` does the same from a study
folder without running anything (the same folder gives the same file, byte for byte); `--from-data` rebuilds
this file from the committed CSVs alone. Each variant is one row of the study's `zip`; its label is the
run's `name` (so `iotfl-sim compare <out>/<study>` and `iotfl-sim report` show the same labels).
`claims_effects.png`, beside this file, draws every tested claim's paired effect and 95 % interval in units of
its margin, coloured by verdict (the intervals are not Holm-corrected, the verdicts are).
A report that replaces a group's CSV says how many of the runs both hold (variant and seed) give the same
figures bit for bit, and names the first that does not: a study folder lost and run again is a check that the
simulator still gives its numbers. Into the committed CSVs a report is written only from a whole study (every
run done: the verdicts never rest on the seeds finished so far; a preview of a study under way goes elsewhere
with `--data` and `--md`), and a run folder the study calls done whose files are cut short or unreadable is
named, to be deleted and recomputed, never read in part; `--report-only` refuses a folder that another version
of the study file made (a run it no longer defines or lacks, another base scenario): the sweep updates it.

Scales: `smoke` checks the machinery only (tiny data, a few rounds: not a verdict); `hour` fits about an hour
per group on 2 CPU cores; `paper` is the paper's setting, one run at a time with `executor: {{kind: auto}}`
(the fused trainer on CUDA where it pays for its start). The seeds are each study file's `seed` grid.

One-line GPU commands (paper scale; each is a study of tens of runs of hundreds to a thousand rounds, so plan on
hours per group; `--workers 1` keeps one run on the GPU at a time):

{gpu}

A single paper-scale run of one variant: `iotfl-sim run scenarios/adaptivefl_cifar10_vgg16.yaml --set
'algorithm={{name: adaptivefl, selection: greedy}}'` (the variant's `algorithm` dict from the study file).

## The decision rule (fixed before the runs: `analysis/claims_rule.py`)

- **Paired by seed.** Every variant of a group runs on the same seeds, so each claim is tested on the per-seed
  differences d = A − B (B − A when lower is better: a positive d is the claim's direction), over the seeds with
  a value on every side; at least {min_seeds} such seeds, else **inconclusive (fewer than {min_seeds} paired seeds)**.
- **A one-sided paired t-test.** With {min_seeds} seeds an exact sign or sign-flip permutation test cannot give p
  below 1/2^{min_seeds} = {exact_floor:.3f}, which Holm over two or more claims can never accept; the t-test uses
  the sizes of the differences and assumes roughly normal seed-to-seed differences. All differences equal
  (sd 0): p = 0 when they lie on the alternative's side, else 1.
- **Two p-values per claim.** "A beats B": p_holds tests d > 0, p_fails tests d < margin (no effect as large as
  the margin, a reversal included). "A about equals B": p_holds is TOST (−margin < d and d < margin, the larger
  of the two p), p_fails tests that d lies beyond the margin on the side of the observed mean. "Gain": as
  "beats", on the per-seed (a0 − a1) − (b0 − b1). "Peak" (the best of a sweep is a named variant): holds when
  the best named variant beats each unnamed end of the sweep (every end must hold); fails when some unnamed
  variant beats every named one by the margin.
- **Holm-Bonferroni within each group**, over the group's p_holds tests and, separately, its p_fails tests (a
  peak contributes each of its tests). **reproduced** when the adjusted p_holds < {alpha}; else **not
  reproduced** when the adjusted p_fails < {alpha}; else **inconclusive**, with the effect, its CI, and the number
  of paired seeds a t-test would need at {power:.0%} power for the observed mean and sd (at {alpha} / the family
  size).
- **More seeds** (fixed 2026-11-30, before any run beyond seed 4): a group whose five-seed verdicts leave claims
  inconclusive that about ten paired seeds would decide (the power estimate beside each) is extended to seeds
  0-9, every variant, and then decided on all its seeds by this same rule, **every claim anew**, those decided at
  five seeds included: no claim gets a second look of its own, so the extension cannot turn a chance result into
  a verdict. Until the ten-seed study is complete the five-seed verdicts stand; the group's section says which
  seeds its verdicts rest on, and the five-seed ones stay in git (`benchmarks/claims_data/` at commit c391b3f).
  Applied: FedX, AdaptiveFL (both its studies) and FlexFL are extended. HeteroFL-IoT (L17-acc-default,
  L17-steady) and AdapterFL (T2-LL-fedbase, T2-LM-feddf, T2-LL-feddf) are not, for cost alone, whichever way their
  effects point: five more seeds would cost HeteroFL-IoT 9.3 h and AdapterFL about 17 h of host time, each group
  already at or past the issue's budget of about 8 CPU-hours, so their five-seed verdicts are final here.
- **Effect size** beside every verdict: the mean paired difference (positive = the claim's direction) with its
  two-sided 95 % t interval, and d_z = mean / sd. Accuracies, utility and waste are shown in points.
- **Not testable**, decided before any test and outside the Holm families: the claim states why the paper's
  setting cannot be expressed here; or, for an accuracy (`acc_*`, `utility`), the better of the compared sides
  has a mean below {chance:g} × chance (1 / the group's classes).
- **Margins** (a claim may state its own, before the runs):

{margins}

**Nothing is tuned to win**: the options are the papers' (or the scenario's stated choice), the same for every
variant of a group.
"""


def header() -> str:
    gpu = "\n".join(
        f"    IOTFL_DATA=/data python benchmarks/claims.py --group {g:<12} --scale paper --out studies"
        for g in GROUPS
    )
    return HEADER.format(
        groups=", ".join(f"`{g}`" for g in GROUPS),
        gpu=gpu,
        min_seeds=rule.MIN_SEEDS,
        exact_floor=0.5**rule.MIN_SEEDS,
        alpha=rule.ALPHA,
        power=rule.POWER,
        chance=rule.CHANCE_FACTOR,
        margins=_margins_table(),
    )


def read_all(data_dir: Path = DATA_DIR, but: tuple[str, str] | None = None) -> dict[tuple[str, str], Data]:
    """Every group's CSV in ``data_dir``, the (group, scale) ``but`` aside (raises claims_figures.DataError on a
    bad one). Whatever stands at a CSV's name is read, so a dangling link or a folder there is an error, not a
    group silently shown as not yet run."""
    return {
        (g, s): read_csv(p)
        for g in GROUPS
        for s in SCALES
        if (g, s) != but and ((p := data_path(g, s, data_dir)).exists() or p.is_symlink())
    }


def decide_all(datasets: dict[tuple[str, str], Data]) -> list[tuple[str, str, Data | None, list[Row]]]:
    """(group, scale, its figures or None, its claims decided), in claims.md's section order."""
    parts: list[tuple[str, str, Data | None, list[Row]]] = []
    for g in GROUPS:
        mod = group_module(g)
        scales = [s for s in SCALES if (g, s) in datasets] or [getattr(mod, "SCALE", DEFAULT_SCALE)]
        for s in scales:
            data = datasets.get((g, s))
            parts.append((g, s, data, decide_group(mod, data, s)))
    return parts


def _gist(claim: Claim) -> str:
    """The compared sides of a claim, as its sentence ends (``AdaptiveFL full > HeteroFL full``)."""
    return claim.sentence.rsplit(": ", 1)[-1].strip()


def group_name(group: str) -> str:
    """The method a group is named after (its TITLE up to the authors or the colon: ``AdaptiveFL``)."""
    return (group_module(group).TITLE or group).split(" (")[0].split(":")[0]


def _tag(claim: Claim) -> str:
    return "" if claim.section == "paper" else f" [{claim.section}]"


def verdict_block(datasets: dict[tuple[str, str], Data]) -> str:
    """The README's list of verdicts per method (between ``README_BEGIN`` and ``README_END``): each group's counts,
    the claims decided either way with what they compare, and the ids of the rest."""
    lines = []
    for i, (g, s, data, rows) in enumerate(decide_all(datasets), start=1):
        name = group_name(g)
        where = f"section {i} of claims.md"
        if data is None:
            lines.append(
                f"- **{name}**, scale {s} ({where}): {len(rows)} claims, pending: its study is not finished."
            )
            continue
        seeds = _seeds(sorted({x for per_seed in data.values() for x in per_seed}))
        head = f"- **{name}**, scale {s}, seeds {seeds} ({where}): {len(rows)} claims"
        said = []
        for v in VERDICTS:
            these = [r for r in rows if r.verdict.verdict == v]
            if not these:
                continue
            if v in (rule.REPRODUCED, rule.NOT_REPRODUCED):
                said.append(
                    f"{v} {len(these)}: "
                    + "; ".join(f"{r.claim.cid} ({_gist(r.claim)}){_tag(r.claim)}" for r in these)
                )
            else:
                said.append(f"{v} {len(these)}: " + ", ".join(r.claim.cid + _tag(r.claim) for r in these))
        lines.append(f"{head}. " + ". ".join(said) + ".")
    return "\n".join(lines) + "\n"


def with_verdict_block(readme: str, block: str, where: Path = README_PATH) -> str:
    """``readme`` with the text between its verdict markers replaced by ``block`` (DataError without them)."""
    begin, end = readme.find(README_BEGIN), readme.find(README_END)
    if begin < 0 or end < begin:
        raise DataError(
            f"{where}: no claim-verdict markers ({README_BEGIN} ... {README_END})",
            "put them back (git shows where they were)",
        )
    start = begin + len(README_BEGIN) + 1
    return readme[:start] + block + readme[end:]


def render(datasets: dict[tuple[str, str], Data], data_dir: Path = DATA_DIR) -> str:
    """The whole of claims.md from the group modules and ``datasets`` ((group, scale) -> per-seed figures)."""
    parts = decide_all(datasets)
    out = [header(), "## Overall", ""]
    out += [
        "| group | scale | claims | " + " | ".join(VERDICTS) + " |",
        "|---|---|---:|" + "---:|" * len(VERDICTS),
    ]
    for g, s, _, rows in parts:
        n = counts(rows)
        out.append(f"| {g} | {s} | {len(rows)} | " + " | ".join(str(n[v]) for v in VERDICTS) + " |")
    out.append("")
    for i, (g, s, data, rows) in enumerate(parts, start=1):
        out += ["---", "", *group_section(i, g, s, data, rows, data_dir)]
    return "\n".join(out).rstrip("\n") + "\n"
