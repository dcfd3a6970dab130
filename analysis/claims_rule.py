"""The decision rule for the seed papers' claims (``benchmarks/claims.py``), fixed before the runs.

A claim compares variants of one study run on the same seeds, so the comparison is **paired by seed**: only
seeds with a finite value on every side count, and a claim needs at least ``MIN_SEEDS`` of them (else it is
inconclusive). Every test is on the per-seed differences d (``A - B``; mirrored to ``B - A`` when lower is
better, so a positive d is always the claim's direction).

**Why a paired t-test.** With 5 seeds an exact test that uses only the signs (a sign test) or the sign flips of
the differences (a permutation test) cannot give a one-sided p below 1/2**5 = 1/32 = 0.031; Holm over two or
more claims then asks for p < 0.025 of the smallest, so such a test could never accept anything. The one-sided
t-test uses the magnitudes of the differences and assumes the seed-to-seed differences are roughly normal.
When every difference is the same (sd = 0) the test is decided exactly: p = 0 if that value lies on the
alternative's side of the null boundary, 1 otherwise.

**Two p-values per claim**: ``p_holds`` (alternative: the claim holds) and ``p_fails`` (alternative: it fails):

* *A beats B* (``beats``): p_holds tests d > 0; p_fails tests d < margin (no effect as large as the margin:
  "not reproduced", which includes a reversal).
* *A about equals B* (``about``): p_holds is TOST, the larger p of d > -margin and d < margin; p_fails tests
  that d lies beyond the margin on the side of the observed mean (d > margin when the mean is >= 0, else
  d < -margin).
* *gain* (``gain``): as *beats*, on the per-seed differences of differences ``(a0 - a1) - (b0 - b1)``.
* *peak* (``peak``: the best of a sweep is one of the named variants): p_holds has one member per end of the
  sweep (first and last variant) that is not named: "n* beats that end", where n* is the named variant with
  the best mean over the paired seeds (with one named variant, as in every claim so far, there is no choice;
  with several, choosing the best named one is a small optimistic selection). Every member must hold (the
  claim's adjusted p_holds is the largest of its members'). p_fails has one member per variant u of the sweep
  that is not named: "u beats every named variant by the margin", p = the largest over the named n of the
  p of (u - n) > margin; the claim fails when any such member is accepted (its adjusted p_fails is the
  smallest of its members').

**Holm-Bonferroni within each group**, separately over the group's p_holds family and its p_fails family;
every decided test of the group is a member (a peak contributes its members). Verdict: **reproduced** when the
adjusted p_holds < ``ALPHA``; else **not reproduced** when the adjusted p_fails < ``ALPHA``; else
**inconclusive**, with the effect and its CI and the paired seeds a t-test would need at 80 % power for the
observed mean and sd (at the Bonferroni level ALPHA / family size, which Holm never asks for more than).

**Not testable** (decided before any test, no member of the Holm families): the claim's ``untestable`` text is
set (the paper's setting cannot be expressed here); or, for an accuracy-type metric (``acc_*``, ``utility``),
the better of the compared sides has a mean below ``CHANCE_FACTOR`` x chance (chance = 1 / classes); or two
different variants compared by *beats* or *about* gave the same figures, every one of them, on each of at least
``MIN_SEEDS`` paired seeds (``same_runs_reason``): what tells them apart never acted in these runs (an ablated
component that was never triggered), so the comparison tests nothing about it. This last condition was added
after the FlexFL group's runs, whose group text had said beforehand that its adaptive-model ablation could
come out so and would then be reported, not decided.

The smallest effect of interest per metric is the table ``METRICS`` (``default_margin``); a claim's own margin
overrides it. Pure functions over plain data: a side is ``{seed: value}``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase

import numpy as np
from scipy import stats

ALPHA = 0.05
MIN_SEEDS = 5
CHANCE_FACTOR = 3.0
POWER = 0.8
MAX_SEEDS_REPORTED = 10_000  # seeds_needed gives up above this

Series = Mapping[int, float]

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE, NOT_TESTABLE = (
    "reproduced",
    "not reproduced",
    "inconclusive",
    "not testable",
)


@dataclass(frozen=True)
class MetricRule:
    """The margin and the display of the metrics whose name matches ``pattern`` (fnmatch, first match wins).
    ``relative``: the margin is a fraction of the mean of the reference side (B) instead of a value."""

    pattern: str
    margin: float
    relative: bool
    scale: float  # display: value x scale
    unit: str
    what: str


METRICS: tuple[MetricRule, ...] = (
    MetricRule("acc_*", 0.01, False, 100.0, "points", "accuracies (fractions): one point"),
    MetricRule("utility", 0.01, False, 100.0, "points", "FedX utility (a fraction): one point"),
    MetricRule("comm_waste", 0.01, False, 100.0, "points", "communication waste (a fraction): one point"),
    MetricRule("*_pct", 1.0, False, 1.0, "points", "shares in percent: one point"),
    MetricRule("last_round_*", 1.0, False, 1.0, "rounds", "rounds: one round"),
    MetricRule("rounds*", 1.0, False, 1.0, "rounds", "rounds: one round"),
    MetricRule("energy_j", 0.01, True, 1.0, "J", "energy: 1 % of B's mean"),
)
ACCURACY_TYPE = ("acc_*", "utility")


def metric_rule(metric: str) -> MetricRule:
    """The row of ``METRICS`` for ``metric``; a metric without one needs the claim's own margin."""
    for r in METRICS:
        if fnmatchcase(metric, r.pattern):
            return r
    raise KeyError(f"metric {metric!r} has no default margin: give the claim a margin")


def default_margin(metric: str) -> tuple[float, bool]:
    """(margin, relative) for ``metric``: relative margins are fractions of the reference side's mean."""
    r = metric_rule(metric)
    return r.margin, r.relative


def resolve_margin(metric: str, override: float | None, reference_mean: float) -> float:
    """The margin in the metric's units: the claim's own, else the table's (relative ones times |B's mean|)."""
    if override is not None:
        return float(override)
    m, relative = default_margin(metric)
    return m * abs(reference_mean) if relative else m


def display(metric: str) -> tuple[float, str]:
    """(scale, unit) a metric's values and effects are shown in (accuracies in points); (1, "") off the table."""
    try:
        r = metric_rule(metric)
    except KeyError:
        return 1.0, ""
    return r.scale, r.unit


def is_accuracy_type(metric: str) -> bool:
    return any(fnmatchcase(metric, p) for p in ACCURACY_TYPE)


def not_testable_reason(untestable: str, metric: str, side_means: Sequence[float], classes: int) -> str:
    """Why a claim is not testable here ("" when it is): its stated reason, or near-chance accuracy."""
    if untestable:
        return untestable
    finite = [m for m in side_means if math.isfinite(m)]
    if is_accuracy_type(metric) and finite:
        floor = CHANCE_FACTOR / classes
        if max(finite) < floor:
            return f"the better side's mean {100 * max(finite):.2f} % is below {CHANCE_FACTOR:g} x chance ({100 * floor:.2f} %)"
    return ""


def same_runs_reason(
    a: str,
    b: str,
    runs_a: Mapping[int, Mapping[str, float]],
    runs_b: Mapping[int, Mapping[str, float]],
    ignore: Sequence[str] = (),
) -> str:
    """Why variants ``a`` and ``b`` cannot be told apart here ("" when they can): on each of at least
    ``MIN_SEEDS`` paired seeds they hold the same figures, every one (except ``ignore``: measurements of the host,
    not of the run), with the same names. A NaN figure never counts as the same."""
    seeds = sorted(set(runs_a) & set(runs_b))
    if a == b or len(seeds) < MIN_SEEDS:
        return ""
    names: set[str] = set()
    for s in seeds:
        fa = {k: v for k, v in runs_a[s].items() if k not in ignore}
        fb = {k: v for k, v in runs_b[s].items() if k not in ignore}
        if not fa or fa.keys() != fb.keys() or any(not fa[k] == fb[k] for k in fa):
            return ""
        names |= fa.keys()
    return (
        f"{a} and {b} gave the same figures ({', '.join(sorted(names))}) on each of the {len(seeds)} paired "
        "seeds: what tells them apart changed no run here, so the comparison tests nothing"
    )


# ---------------------------------------------------------------------------------------------- statistics


@dataclass(frozen=True)
class Effect:
    """The mean paired difference over ``n`` seeds, its sample sd and two-sided 95 % t interval."""

    n: int
    mean: float
    sd: float
    lo: float
    hi: float

    @property
    def dz(self) -> float:
        """Cohen's d_z = mean / sd (infinite when sd = 0 and the mean is not)."""
        if self.sd > 0:
            return self.mean / self.sd
        return math.copysign(math.inf, self.mean) if self.mean else math.nan


def _constant(d: np.ndarray) -> bool:
    return bool(np.all(d == d[0]))


def effect(d: np.ndarray) -> Effect:
    """Mean, sd (ddof 1) and the 95 % t interval of the differences (needs 2 or more)."""
    n = int(d.size)
    if _constant(d):
        v = float(d[0])
        return Effect(n, v, 0.0, v, v)
    mean, sd = float(np.mean(d)), float(np.std(d, ddof=1))
    half = float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    return Effect(n, mean, sd, mean - half, mean + half)


def one_sided_p(d: np.ndarray, boundary: float, greater: bool) -> float:
    """p of the one-sided t-test with alternative mean(d) > boundary (``greater``) or mean(d) < boundary.
    All differences equal: 0 when that value is strictly on the alternative's side, 1 otherwise."""
    if _constant(d):
        x = float(d[0]) - boundary
        return 0.0 if (x > 0 if greater else x < 0) else 1.0
    n = d.size
    t = (float(np.mean(d)) - boundary) / (float(np.std(d, ddof=1)) / math.sqrt(n))
    return float(stats.t.sf(t if greater else -t, n - 1))


def holm(ps: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the order given: sort ascending, multiply the i-th smallest
    (from 0) by m - i, take the running maximum, cap at 1."""
    m = len(ps)
    out = [0.0] * m
    running = 0.0
    for i, j in enumerate(sorted(range(m), key=lambda k: ps[k])):
        running = max(running, min(1.0, (m - i) * ps[j]))
        out[j] = running
    return out


def seeds_needed(distance: float, sd: float, alpha: float, power: float = POWER) -> int | None:
    """The smallest number of paired seeds at which a one-sided t-test at ``alpha`` has ``power`` when the
    mean lies ``distance`` beyond the null boundary with this sd (noncentral t); None when no number does
    (distance <= 0) or more than ``MAX_SEEDS_REPORTED`` would."""
    if distance <= 0 or not math.isfinite(distance):
        return None
    if sd <= 0:
        return MIN_SEEDS

    def powered(n: int) -> bool:
        crit = stats.t.ppf(1 - alpha, n - 1)
        return bool(stats.nct.sf(crit, n - 1, distance / sd * math.sqrt(n)) >= power)

    hi = 2
    while not powered(hi):
        if hi >= MAX_SEEDS_REPORTED:
            return None
        hi = min(2 * hi, MAX_SEEDS_REPORTED)
    lo = hi // 2  # not powered (or 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if powered(mid) else (mid, hi)
    return hi


# ---------------------------------------------------------------------------------------------- one claim


@dataclass(frozen=True)
class Member:
    """One one-sided test of a claim: its p and how far the observed mean lies beyond its null boundary in
    the alternative's direction (negative: on the null's side), for the seeds-needed figure."""

    label: str
    p: float
    distance: float
    sd: float


@dataclass(frozen=True)
class Tests:
    """A claim's tests before the group's correction. ``fixed``: (verdict, reason) decided without tests
    (fewer than ``MIN_SEEDS`` paired seeds); ``effect`` None with fewer than 2 paired seeds."""

    kind: str
    metric: str
    margin: float
    seeds: tuple[int, ...]
    effect: Effect | None
    effect_label: str
    holds: tuple[Member, ...] = ()
    fails: tuple[Member, ...] = ()
    fixed: tuple[str, str] | None = None


def paired(*sides: Series) -> tuple[tuple[int, ...], list[np.ndarray]]:
    """The seeds with a finite value on every side (sorted) and each side's values on them."""
    common = set.intersection(*(set(s) for s in sides)) if sides else set()
    seeds = tuple(sorted(s for s in common if all(math.isfinite(side[s]) for side in sides)))
    return seeds, [np.array([side[s] for s in seeds], dtype=float) for side in sides]


def _too_few(
    kind: str, metric: str, margin: float, seeds: tuple[int, ...], d: np.ndarray, label: str
) -> Tests | None:
    if len(seeds) >= MIN_SEEDS:
        return None
    eff = effect(d) if d.size >= 2 else None
    why = f"fewer than {MIN_SEEDS} paired seeds ({len(seeds)})"
    return Tests(kind, metric, margin, seeds, eff, label, fixed=(INCONCLUSIVE, why))


def _beats_members(d: np.ndarray, margin: float, label: str) -> tuple[Member, Member]:
    e = effect(d)
    return (
        Member(label, one_sided_p(d, 0.0, True), e.mean, e.sd),
        Member(label, one_sided_p(d, margin, False), margin - e.mean, e.sd),
    )


def claim_beats(a: Series, b: Series, metric: str, margin: float, lower_is_better: bool = False,
               label: str = "A - B") -> Tests:  # fmt: skip
    """Claim "A beats B": d = A - B (B - A when lower is better)."""
    seeds, (va, vb) = paired(a, b)
    d = (vb - va) if lower_is_better else (va - vb)
    return _beats(d, seeds, "beats", metric, margin, label)


def claim_gain(a0: Series, a1: Series, b0: Series, b1: Series, metric: str, margin: float,
              lower_is_better: bool = False, label: str = "(a0 - a1) - (b0 - b1)") -> Tests:  # fmt: skip
    """Claim "the gain a0 - a1 beats the gain b0 - b1", paired over the seeds all four share."""
    seeds, (x0, x1, y0, y1) = paired(a0, a1, b0, b1)
    d = (x0 - x1) - (y0 - y1)
    return _beats(-d if lower_is_better else d, seeds, "gain", metric, margin, label)


def _beats(d: np.ndarray, seeds: tuple[int, ...], kind: str, metric: str, margin: float, label: str) -> Tests:
    few = _too_few(kind, metric, margin, seeds, d, label)
    if few:
        return few
    holds, fails = _beats_members(d, margin, label)
    return Tests(kind, metric, margin, seeds, effect(d), label, (holds,), (fails,))


def claim_about(a: Series, b: Series, metric: str, margin: float, label: str = "A - B") -> Tests:
    """Claim "A about equals B" within ``margin``: TOST for holds, the side of the observed mean for fails."""
    seeds, (va, vb) = paired(a, b)
    d = va - vb
    few = _too_few("about", metric, margin, seeds, d, label)
    if few:
        return few
    e = effect(d)
    p_tost = max(one_sided_p(d, -margin, True), one_sided_p(d, margin, False))
    holds = Member(label, p_tost, margin - abs(e.mean), e.sd)  # the binding side of the two
    if e.mean >= 0:
        fails = Member(label, one_sided_p(d, margin, True), e.mean - margin, e.sd)
    else:
        fails = Member(label, one_sided_p(d, -margin, False), -margin - e.mean, e.sd)
    return Tests("about", metric, margin, seeds, e, label, (holds,), (fails,))


def claim_peak(sweep: Mapping[str, Series], named: Sequence[str], metric: str, margin: float,
               lower_is_better: bool = False) -> Tests:  # fmt: skip
    """Claim "the best of ``sweep`` (in sweep order) is one of ``named``": see the module docstring. At most one end
    of the sweep may be named (with both named nothing is left to beat)."""
    names = list(sweep)
    ends = [e for e in dict.fromkeys((names[0], names[-1])) if e not in named]
    if not ends or not set(named) <= set(names):
        raise ValueError(
            f"peak over {names}: named {list(named)} must be variants of the sweep, not both ends"
        )
    seeds, vals = paired(*(sweep[n] for n in names))
    sign = -1.0 if lower_is_better else 1.0
    x = {n: sign * v for n, v in zip(names, vals, strict=True)}
    best = max(named, key=lambda n: float(np.mean(x[n])) if seeds else 0.0)
    few = _too_few("peak", metric, margin, seeds, x[best] - x[ends[0]], f"{best} - {ends[0]}")
    if few:
        return few
    holds = []
    for e in ends:
        ef = effect(x[best] - x[e])
        holds.append((Member(f"{best} - {e}", one_sided_p(x[best] - x[e], 0.0, True), ef.mean, ef.sd), ef))
    fails = []
    for u in (n for n in names if n not in named):
        p, n = max((one_sided_p(x[u] - x[n], margin, True), n) for n in named)
        ef = effect(x[u] - x[n])
        fails.append(Member(f"{u} - {n}", p, ef.mean - margin, ef.sd))
    lead, eff = max(holds, key=lambda h: h[0].p)  # the headline: the binding end
    return Tests("peak", metric, margin, seeds, eff, lead.label, tuple(h[0] for h in holds), tuple(fails))


def mark_not_testable(t: Tests, why: str) -> Tests:
    """``t`` with verdict "not testable" and no member in the group's Holm families (its effect kept)."""
    return replace(t, holds=(), fails=(), fixed=(NOT_TESTABLE, why))


# ---------------------------------------------------------------------------------------------- a group


@dataclass(frozen=True)
class Verdict:
    verdict: str
    reason: str
    p_holds: float | None  # Holm-adjusted, None when not tested
    p_fails: float | None


def fmt_effect(e: Effect, metric: str) -> str:
    """``+0.80 [-0.30, +1.90] points, d_z 0.71`` in the metric's display units."""
    k, unit = display(metric)
    dz = e.dz
    dzs = f"{dz:.2f}" if math.isfinite(dz) else ("inf" if dz > 0 else "-inf" if dz < 0 else "n/a")
    return f"{k * e.mean:+.2f} [{k * e.lo:+.2f}, {k * e.hi:+.2f}] {unit}, d_z {dzs}"


def _needs(members: Sequence[Member], alpha: float, every: bool) -> int | None:
    ns = [seeds_needed(m.distance, m.sd, alpha) for m in members]
    if every:
        return None if any(n is None for n in ns) or not ns else max(ns)  # type: ignore[type-var]
    ok = [n for n in ns if n is not None]
    return min(ok) if ok else None


def _inconclusive_reason(t: Tests, m_holds: int, m_fails: int) -> str:
    assert t.effect is not None
    k, unit = display(t.metric)
    e = t.effect
    inside = [what for what, x in (("0", 0.0), ("the margin", t.margin)) if e.lo <= x <= e.hi]
    if t.kind == "about":
        inside = [what for what, x in (("-margin", -t.margin), ("+margin", t.margin)) if e.lo <= x <= e.hi]
    why = (
        f"effect {k * e.mean:+.2f} {unit} (margin {k * t.margin:.2f}), CI [{k * e.lo:+.2f}, {k * e.hi:+.2f}]"
    )
    why += f" includes {' and '.join(inside)}" if inside else ""
    n_holds = _needs(t.holds, ALPHA / max(m_holds, 1), every=True)
    n_fails = _needs(t.fails, ALPHA / max(m_fails, 1), every=False)
    options = [(n, v) for n, v in ((n_holds, REPRODUCED), (n_fails, NOT_REPRODUCED)) if n is not None]
    if options:
        n, v = min(options, key=lambda o: o[0])  # a tie names reproduced
        why += f"; about {n} paired seeds would decide it ({v}) at {POWER:.0%} power if mean and sd held"
    else:
        why += f"; no number of seeds up to {MAX_SEEDS_REPORTED} decides it at this mean and sd"
    return why


def _decided_reason(t: Tests, verdict: str) -> str:
    assert t.effect is not None
    k, unit = display(t.metric)
    if verdict == REPRODUCED:
        return "within the margin, after Holm" if t.kind == "about" else "holds after Holm"
    if t.kind == "about":
        return f"outside the margin {k * t.margin:.2f} {unit}"
    if t.kind == "peak":
        return "another variant beats the named one(s) by the margin: " + ", ".join(m.label for m in t.fails)
    if t.effect.mean < 0:
        return "reversed"
    return f"effect below the margin {k * t.margin:.2f} {unit}"


def decide(tests: Sequence[Tests]) -> list[Verdict]:
    """The verdicts of one group's claims, in order: Holm over the p_holds members of every claim decided by
    test and, separately, over their p_fails members."""
    live = [t for t in tests if t.fixed is None]
    hp = [m.p for t in live for m in t.holds]
    fp = [m.p for t in live for m in t.fails]
    ha, fa = holm(hp), holm(fp)
    out: list[Verdict] = []
    ih = jf = 0
    for t in tests:
        if t.fixed is not None:
            out.append(Verdict(t.fixed[0], t.fixed[1], None, None))
            continue
        mine_h, mine_f = ha[ih : ih + len(t.holds)], fa[jf : jf + len(t.fails)]
        ih, jf = ih + len(t.holds), jf + len(t.fails)
        p_h = max(mine_h) if mine_h else 1.0  # every member must hold
        p_f = min(mine_f) if mine_f else 1.0  # any member fails it
        if p_h < ALPHA:
            v = REPRODUCED
        elif p_f < ALPHA:
            v = NOT_REPRODUCED
        else:
            v = INCONCLUSIVE
        reason = _inconclusive_reason(t, len(hp), len(fp)) if v == INCONCLUSIVE else _decided_reason(t, v)
        out.append(Verdict(v, reason, p_h, p_f))
    return out
