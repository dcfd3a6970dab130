"""analysis/claims_rule.py on hand-made seed values: every reference below is worked by hand in the test."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy import stats

from analysis import claims_rule as rule


def series(*values: float) -> dict[int, float]:
    return dict(enumerate(values))


def test_t_statistic_and_p_by_hand():
    d = np.array([0.01, 0.03, 0.02, 0.04, 0.00])
    # mean = 0.10 / 5 = 0.02; deviations -0.01, 0.01, 0, 0.02, -0.02; squares sum 0.0010;
    # sd = sqrt(0.0010 / 4) = sqrt(0.00025) = 0.015811...; se = sd / sqrt(5) = sqrt(0.00005) = 0.0070710...;
    # t = 0.02 / 0.0070710... = 2 sqrt(2) = 2.828427...
    t_hand = 2 * math.sqrt(2)
    p_hand = float(stats.t.sf(t_hand, 4))
    assert 0.02 < p_hand < 0.03  # the t table: t(4) one-sided 0.025 at 2.776
    assert rule.one_sided_p(d, 0.0, greater=True) == pytest.approx(p_hand, rel=1e-12)
    assert rule.one_sided_p(d, 0.0, greater=False) == pytest.approx(1 - p_hand, rel=1e-12)
    # against a boundary of 0.01: t = (0.02 - 0.01) / 0.0070710... = sqrt(2)
    assert rule.one_sided_p(d, 0.01, greater=True) == pytest.approx(
        float(stats.t.sf(math.sqrt(2), 4)), rel=1e-12
    )
    e = rule.effect(d)
    half = float(stats.t.ppf(0.975, 4)) * math.sqrt(0.00005)  # 2.776 x se
    assert (e.n, e.mean, e.sd) == (5, pytest.approx(0.02), pytest.approx(math.sqrt(0.00025)))
    assert (e.lo, e.hi) == (pytest.approx(0.02 - half), pytest.approx(0.02 + half))
    assert e.dz == pytest.approx(0.02 / math.sqrt(0.00025))  # 1.2649...


def test_holm_by_hand():
    ps = [0.01, 0.04, 0.03, 0.005]
    # sorted: 0.005, 0.01, 0.03, 0.04; multipliers 4, 3, 2, 1: 0.020, 0.030, 0.060, 0.040;
    # running max: 0.020, 0.030, 0.060, 0.060; back in the order given: 0.03, 0.06, 0.06, 0.02
    assert rule.holm(ps) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert rule.holm([0.3, 0.6]) == pytest.approx([0.6, 0.6])  # 2 x 0.3 = 0.6, max(0.6, 1 x 0.6)
    assert rule.holm([0.9, 0.8]) == [1.0, 1.0]  # capped


def test_paired_effect_that_an_unpaired_rule_misses():
    b = series(0.50, 0.60, 0.70, 0.80, 0.90)  # seeds spread widely
    noise = (0.001, -0.001, 0.0005, 0.0, -0.0005)
    a = {s: b[s] + 0.01 + noise[s] for s in b}
    ma, mb = np.mean(list(a.values())), np.mean(list(b.values()))
    sa, sb = np.std(list(a.values()), ddof=1), np.std(list(b.values()), ddof=1)
    assert ma - sa < mb + sb  # the means' +-sd bands overlap: the old unpaired rule said inconclusive
    t = rule.claim_beats(a, b, "acc_full", margin=0.01)
    (v,) = rule.decide([t])
    assert v.verdict == rule.REPRODUCED and v.p_holds < 1e-4
    assert t.effect.mean == pytest.approx(0.01) and t.effect.lo > 0


def test_only_seeds_present_on_both_sides_count():
    a = series(0.9, 0.9, 0.9, 0.9, 0.9, 0.9)
    b = {1: 0.8, 2: 0.8, 3: 0.8, 4: 0.8, 5: math.nan, 7: 0.8}
    t = rule.claim_beats(a, b, "acc_full", 0.01)
    assert t.seeds == (1, 2, 3, 4)  # 0 and 7 on one side only, 5 not finite
    (v,) = rule.decide([t])
    assert (v.verdict, v.reason) == (rule.INCONCLUSIVE, "fewer than 5 paired seeds (4)")
    assert v.p_holds is None


def test_lower_is_better_mirrors():
    a, b = series(0.10, 0.11, 0.09, 0.10, 0.12), series(0.30, 0.29, 0.31, 0.30, 0.28)
    (v,) = rule.decide([rule.claim_beats(a, b, "comm_waste", 0.01, lower_is_better=True)])
    assert v.verdict == rule.REPRODUCED
    (v,) = rule.decide([rule.claim_beats(b, a, "comm_waste", 0.01, lower_is_better=True)])
    assert v.verdict == rule.NOT_REPRODUCED and v.reason == "reversed"


def test_sd_zero_is_exact_and_quiet():
    a, b = series(0.8, 0.7, 0.6, 0.5, 0.4), series(0.8, 0.7, 0.6, 0.5, 0.4)
    shifted = {s: v + 0.25 for s, v in b.items()}  # +0.25 is exact in binary: every difference is 0.25
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        up = rule.claim_beats(shifted, b, "acc_full", 0.01)
        same = rule.claim_beats(a, b, "acc_full", 0.01)
        verdicts = rule.decide([up, same])
    assert (up.holds[0].p, up.fails[0].p) == (0.0, 1.0)
    assert (same.holds[0].p, same.fails[0].p) == (1.0, 0.0)  # 0 is not > 0; 0 < the margin
    assert [v.verdict for v in verdicts] == [rule.REPRODUCED, rule.NOT_REPRODUCED]
    assert up.effect.sd == 0 and up.effect.lo == up.effect.hi == 0.25 and math.isinf(up.effect.dz)


def test_equivalence_inside_and_outside_the_margin():
    b = series(0.50, 0.60, 0.70, 0.80, 0.90)
    inside = {s: b[s] + x for s, x in zip(b, (0.002, -0.001, 0.001, 0.0, -0.002), strict=True)}
    (v,) = rule.decide([rule.claim_about(inside, b, "acc_full", 0.01)])
    assert v.verdict == rule.REPRODUCED  # |mean| 0 << 0.01, sd 0.0016: both one-sided tests reject
    outside = {s: b[s] + x for s, x in zip(b, (0.032, 0.029, 0.031, 0.030, 0.028), strict=True)}
    t = rule.claim_about(outside, b, "acc_full", 0.01)
    (v,) = rule.decide([t])
    assert v.verdict == rule.NOT_REPRODUCED and v.reason == "outside the margin 1.00 points"
    # TOST's p is the larger of its two: here d < 0.01 is the one that cannot reject
    assert t.holds[0].p == pytest.approx(
        rule.one_sided_p(np.array([0.032, 0.029, 0.031, 0.030, 0.028]), 0.01, False)
    )
    below = {s: b[s] - x for s, x in zip(b, (0.032, 0.029, 0.031, 0.030, 0.028), strict=True)}
    (v,) = rule.decide([rule.claim_about(below, b, "acc_full", 0.01)])
    assert v.verdict == rule.NOT_REPRODUCED  # beyond -margin: the side of the observed mean


def test_an_effect_below_the_margin_is_not_reproduced():
    b = series(0.50, 0.60, 0.70, 0.80, 0.90)
    a = {s: b[s] + x for s, x in zip(b, (0.001, 0.0015, 0.002, 0.0012, 0.0018), strict=True)}
    # holds: d > 0 (t = 0.00150 / (0.000406 / sqrt 5) = 8.3, p < 0.001) wins first: reproduced by the rule's order
    (v,) = rule.decide([rule.claim_beats(a, b, "acc_full", 0.01)])
    assert v.verdict == rule.REPRODUCED
    small = {s: b[s] + x for s, x in zip(b, (0.004, -0.003, 0.002, -0.002, 0.001), strict=True)}
    (v,) = rule.decide([rule.claim_beats(small, b, "acc_full", 0.01)])
    assert v.verdict == rule.NOT_REPRODUCED and v.reason == "effect below the margin 1.00 points"


def test_holm_is_applied_within_the_group():
    # two claims with p_holds between 0.025 and 0.05 each: alone each is reproduced; together Holm's first step
    # is 2 x the smaller p > 0.05, and the running max keeps the second there too
    d = np.array([0.01, 0.03, 0.02, 0.04, 0.00]) - 0.0015  # the t-test above (p 0.0237), shifted down
    p = rule.one_sided_p(d, 0.0, True)
    assert 0.025 < p < 0.05
    b = series(0.5, 0.5, 0.5, 0.5, 0.5)
    weak = {s: 0.5 + float(x) for s, x in enumerate(d)}
    weak2 = {s: 0.6 + float(x) for s, x in enumerate(d)}
    b2 = series(0.6, 0.6, 0.6, 0.6, 0.6)
    (alone,) = rule.decide([rule.claim_beats(weak, b, "acc_full", 0.01)])
    assert alone.verdict == rule.REPRODUCED and alone.p_holds == pytest.approx(p)
    both = rule.decide(
        [rule.claim_beats(weak, b, "acc_full", 0.01), rule.claim_beats(weak2, b2, "acc_full", 0.01)]
    )
    assert [v.verdict for v in both] == [rule.INCONCLUSIVE, rule.INCONCLUSIVE]
    assert [v.p_holds for v in both] == [pytest.approx(2 * p, rel=1e-6)] * 2
    # a clear claim beside one weak: Holm (unlike Bonferroni) leaves the weak one at max(2 p_clear, p) = p
    clear = series(0.9, 0.91, 0.92, 0.9, 0.91)
    mixed = rule.decide(
        [rule.claim_beats(clear, b, "acc_full", 0.01), rule.claim_beats(weak, b, "acc_full", 0.01)]
    )
    assert [v.verdict for v in mixed] == [rule.REPRODUCED, rule.REPRODUCED]
    assert mixed[1].p_holds == pytest.approx(p)


def test_inconclusive_says_what_would_decide_it():
    b = series(0.8, 0.8, 0.8, 0.8, 0.8)
    a = {s: 0.8 + x for s, x in zip(b, (0.01, -0.01, 0.02, 0.0, 0.005), strict=True)}
    (v,) = rule.decide([rule.claim_beats(a, b, "acc_full", 0.01)])
    assert v.verdict == rule.INCONCLUSIVE
    assert (
        v.reason.startswith("effect +0.50 points (margin 1.00), CI [")
        and "includes 0 and the margin" in v.reason
    )
    # mean 0.005 at distance 0.005 from both 0 and the margin, sd 0.011180: d_z 0.447 one-sided at 0.05
    n = rule.seeds_needed(0.005, float(np.std([0.01, -0.01, 0.02, 0.0, 0.005], ddof=1)), 0.05)
    assert f"about {n} paired seeds would decide it (reproduced)" in v.reason


def test_seeds_needed_matches_the_power_tables():
    # G*Power, paired t-test one-tailed, power 0.80: d_z 0.5 -> 27 pairs at alpha 0.05, 34 at 0.025; d_z 0.8 -> 12
    assert rule.seeds_needed(0.5, 1.0, 0.05) == 27
    assert rule.seeds_needed(0.5, 1.0, 0.025) == 34
    assert rule.seeds_needed(0.8, 1.0, 0.05) == 12
    assert rule.seeds_needed(-0.1, 1.0, 0.05) is None


def test_gain_pairs_the_differences_of_differences():
    # per-seed gains a0 - a1 = 0.20 + n, b0 - b1 = 0.02: d = 0.18 + n, clearly positive
    n = (0.001, -0.002, 0.0, 0.002, -0.001)
    a1, b1 = series(0.5, 0.6, 0.4, 0.55, 0.45), series(0.7, 0.7, 0.7, 0.7, 0.7)
    a0 = {s: a1[s] + 0.20 + n[s] for s in a1}
    b0 = {s: b1[s] + 0.02 for s in b1}
    t = rule.claim_gain(a0, a1, b0, b1, "acc_L-L", 0.01)
    assert t.effect.mean == pytest.approx(0.18)
    assert rule.decide([t])[0].verdict == rule.REPRODUCED
    t = rule.claim_gain(b0, b1, a0, a1, "acc_L-L", 0.01)  # swapped: reversed
    assert rule.decide([t])[0].reason == "reversed"


def test_peak_claim():
    sweep = {
        "m0": series(0.60, 0.61, 0.62, 0.63, 0.64),
        "m50": series(0.70, 0.72, 0.71, 0.74, 0.73),
        "m100": series(0.65, 0.64, 0.66, 0.68, 0.67),
    }
    t = rule.claim_peak(sweep, ["m50"], "utility", 0.01)
    assert [m.label for m in t.holds] == ["m50 - m0", "m50 - m100"]  # both unnamed ends
    assert [m.label for m in t.fails] == ["m0 - m50", "m100 - m50"]
    # means: m0 3.10 / 5 = 0.62, m50 3.60 / 5 = 0.72, m100 3.30 / 5 = 0.66: the end closer to the peak binds
    assert t.effect_label == "m50 - m100"
    assert t.effect.mean == pytest.approx(0.06)
    (v,) = rule.decide([t])
    assert v.verdict == rule.REPRODUCED
    # the peak moves to the top end: m100 beats m50 by 0.05 > the margin on every seed
    moved = dict(sweep, m100=series(0.75, 0.77, 0.76, 0.79, 0.78))
    (v,) = rule.decide([rule.claim_peak(moved, ["m50"], "utility", 0.01)])
    assert v.verdict == rule.NOT_REPRODUCED and "m100 - m50" in v.reason
    with pytest.raises(ValueError, match="not both ends"):
        rule.claim_peak(sweep, ["m0", "m100"], "utility", 0.01)


def test_peak_members_join_the_holm_family():
    sweep = {"m0": series(0.6, 0.6, 0.6, 0.6, 0.6), "m50": series(0.7, 0.7, 0.7, 0.7, 0.7)}
    sweep["m100"] = series(0.6, 0.6, 0.6, 0.6, 0.6)
    other = rule.claim_beats(
        series(0.5, 0.5, 0.5, 0.5, 0.5), series(0.4, 0.4, 0.4, 0.4, 0.4), "acc_full", 0.01
    )
    peak = rule.claim_peak(sweep, ["m50"], "utility", 0.01)
    assert len(peak.holds) == 2 and len(peak.fails) == 2
    live = rule.decide([other, peak])
    assert [v.verdict for v in live] == [rule.REPRODUCED, rule.REPRODUCED]


def test_not_testable_rules():
    # chance = 1/10; 3 x chance = 0.30: the better side at 0.28 is below it
    assert rule.not_testable_reason("", "acc_full", [0.25, 0.28], 10).startswith(
        "the better side's mean 28.00 %"
    )
    assert rule.not_testable_reason("", "acc_full", [0.25, 0.31], 10) == ""
    assert rule.not_testable_reason("", "comm_waste", [0.05, 0.06], 10) == ""  # not an accuracy
    assert rule.not_testable_reason("", "utility", [0.2, 0.29], 10) != ""
    assert rule.not_testable_reason("no 8-10 bit runs here", "utility", [0.9], 10) == "no 8-10 bit runs here"
    t = rule.mark_not_testable(rule.claim_beats(series(0.9, 0.9, 0.9, 0.9, 0.9), series(0.1, 0.1, 0.1, 0.1, 0.1),
                                                "acc_full", 0.01), "why")  # fmt: skip
    weak = rule.claim_beats(
        series(0.5, 0.5, 0.5, 0.5, 0.5), series(0.4, 0.4, 0.4, 0.4, 0.45), "acc_full", 0.01
    )
    vs = rule.decide([t, weak])
    assert (vs[0].verdict, vs[0].reason, vs[0].p_holds) == (rule.NOT_TESTABLE, "why", None)
    assert t.effect.mean == pytest.approx(0.8)  # the effect is still shown
    # the not-testable claim is no member of the family: the other one's p is not doubled
    assert vs[1].p_holds == pytest.approx(weak.holds[0].p)


def test_same_runs_are_not_testable():
    runs = {s: {"acc_full": 0.8 + s / 100, "acc_avg": 0.7, "host_time_s": 10.0 + s} for s in range(5)}
    twin = {s: {**f, "host_time_s": 99.0} for s, f in runs.items()}  # only the host's timing differs
    why = rule.same_runs_reason("flexfl", "flexfl_no_adaptive", runs, twin, ignore=("host_time_s",))
    assert why.startswith(
        "flexfl and flexfl_no_adaptive gave the same figures (acc_avg, acc_full) on each of the 5"
    )
    assert rule.same_runs_reason("x", "y", runs, twin) == ""  # the timing counts unless ignored
    one_apart = {**twin, 3: {**twin[3], "acc_avg": 0.7000001}}
    assert rule.same_runs_reason("x", "y", runs, one_apart, ignore=("host_time_s",)) == ""
    four = {s: runs[s] for s in range(4)}
    # fewer than MIN_SEEDS paired seeds decide nothing
    assert rule.same_runs_reason("x", "y", four, four) == ""
    assert rule.same_runs_reason("x", "x", runs, runs) == ""  # one variant's two columns are not two variants
    nan = {s: {"acc_full": math.nan} for s in range(5)}
    assert rule.same_runs_reason("x", "y", nan, nan) == ""
    fewer_names = {s: {"acc_full": f["acc_full"]} for s, f in twin.items()}
    assert rule.same_runs_reason("x", "y", runs, fewer_names, ignore=("host_time_s",)) == ""


def test_margins_table():
    assert rule.default_margin("acc_full") == (0.01, False)
    assert rule.default_margin("acc_L-S") == (0.01, False)
    assert rule.default_margin("utility") == (0.01, False)
    assert rule.default_margin("comm_waste") == (0.01, False)
    assert rule.default_margin("a_share_std_pct") == (1.0, False)
    assert rule.default_margin("last_round_with_a") == (1.0, False)
    assert rule.resolve_margin("energy_j", None, 2500.0) == pytest.approx(25.0)  # 1 % of B's mean
    assert rule.resolve_margin("acc_full", 0.03, 0.5) == 0.03  # the claim's own
    with pytest.raises(KeyError, match="give the claim a margin"):
        rule.default_margin("mystery")
