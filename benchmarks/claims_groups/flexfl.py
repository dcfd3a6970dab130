"""Claim group flexfl: the claims as converted from the old benchmarks/claims.py (issue 18); to be restated per issue 45."""

from __future__ import annotations

from claims_groups import Claim, gt

TITLE = ""
SETTING = ""
CLASSES = 10
TABLE_COLS = ["acc_full", "acc_avg", "acc_small", "acc_medium", "acc_large"]

CLAIMS: list[Claim] = [
    gt(
        "T2-large-scalefl",
        "Table II: FlexFL large > ScaleFL large (VGG16 CIFAR-10 IID 85.16 vs 77.72)",
        "TODO",
        "acc_full",
        "flexfl",
        "scalefl",
    ),
    gt(
        "T2-large-heterofl",
        "Table II: FlexFL large > HeteroFL large (85.16 vs 76.92)",
        "TODO",
        "acc_full",
        "flexfl",
        "heterofl",
    ),
    gt(
        "T2-large-decoupled",
        "Table II: FlexFL large > Decoupled large (85.16 vs 72.76)",
        "TODO",
        "acc_full",
        "flexfl",
        "decoupled",
    ),
    gt(
        "T2-avg-scalefl",
        "Table II: FlexFL avg > ScaleFL avg (84.75 vs 80.36; +0.92 to +7.65)",
        "TODO",
        "acc_avg",
        "flexfl",
        "scalefl",
    ),
    gt(
        "T2-large-ge-avg",
        "Table II: FlexFL large > its avg (85.16 vs 84.75)",
        "TODO",
        "acc_full",
        "flexfl",
        "flexfl_avg",
    ),
    gt(
        "T2-baseline-paradox",
        "Table II: HeteroFL avg > its large (79.75 vs 76.92)",
        "TODO",
        "acc_avg",
        "heterofl",
        "heterofl_full",
    ),
    gt("F9-self-kd", "Fig. 9: FlexFL avg > w/o self-KD", "TODO", "acc_avg", "flexfl", "flexfl_no_self_kd"),
    gt(
        "F9-adaptive",
        "Fig. 9: FlexFL avg > w/o adaptive model",
        "TODO",
        "acc_avg",
        "flexfl",
        "flexfl_no_adaptive",
    ),
    gt("F9-apoz", "Fig. 9: FlexFL avg > w/o APoZ", "TODO", "acc_avg", "flexfl", "flexfl_no_apoz"),
    gt(
        "F9-adjustment",
        "Fig. 9: FlexFL avg > w/o adjustment",
        "TODO",
        "acc_avg",
        "flexfl",
        "flexfl_no_adjustment",
    ),
    gt(
        "F9-apoz-worst",
        "Fig. 9: w/o APoZ is the largest drop: w/o adjustment > w/o APoZ",
        "TODO",
        "acc_avg",
        "flexfl_no_adjustment",
        "flexfl_no_apoz",
    ),
    gt(
        "KD-reduction",
        "issue 18 (no paper claim): kd_reduction mean (the authors' weight) vs batchmean",
        "",
        "acc_avg",
        "flexfl",
        "flexfl_batchmean",
        section="issue",
    ),
]
