"""Claim group adaptivefl: the claims as converted from the old benchmarks/claims.py (issue 18); to be restated per issue 45."""

from __future__ import annotations

from claims_groups import Claim, gt

TITLE = ""
SETTING = ""
CLASSES = 10
TABLE_COLS = ["acc_full", "acc_avg", "comm_waste"]

CLAIMS: list[Claim] = [
    gt(
        "T2-full-heterofl",
        "Table 2: AdaptiveFL full > HeteroFL full (CIFAR-10 VGG16 IID 83.14 vs 74.96)",
        "TODO",
        "acc_full",
        "adaptivefl",
        "heterofl",
    ),
    gt(
        "T2-full-scalefl",
        "Table 2: AdaptiveFL full > ScaleFL full (83.14 vs 78.12)",
        "TODO",
        "acc_full",
        "adaptivefl",
        "scalefl",
    ),
    gt(
        "T2-full-decoupled",
        "Table 2: AdaptiveFL full > Decoupled full (83.14 vs 69.80)",
        "TODO",
        "acc_full",
        "adaptivefl",
        "decoupled",
    ),
    gt(
        "T2-avg-heterofl",
        "Table 2: AdaptiveFL avg > HeteroFL avg (82.97 vs 77.98)",
        "TODO",
        "acc_avg",
        "adaptivefl",
        "heterofl",
    ),
    gt(
        "T2-avg-scalefl",
        "Table 2: AdaptiveFL avg > ScaleFL avg (82.97 vs 79.94)",
        "TODO",
        "acc_avg",
        "adaptivefl",
        "scalefl",
    ),
    gt(
        "T2-decoupled-worst",
        "Table 2: Decoupled worst: HeteroFL full > Decoupled full (74.96 vs 69.80)",
        "TODO",
        "acc_full",
        "heterofl",
        "decoupled",
    ),
    gt(
        "T2-all-large",
        "Table 2: AdaptiveFL full > All-Large (memory ignored) full (83.14 vs 79.76)",
        "TODO",
        "acc_full",
        "adaptivefl",
        "all_large",
    ),
    gt(
        "T2-heterofl-paradox",
        "Table 2 / Fig. 3: HeteroFL avg > its full (77.98 vs 74.96)",
        "TODO",
        "acc_avg",
        "heterofl",
        "heterofl_full",
    ),
    gt(
        "F5-waste-random",
        "Fig. 5a: RL (+CS) waste < Random waste",
        "TODO",
        "comm_waste",
        "adaptivefl",
        "adaptivefl_random",
        lower_is_better=True,
    ),
    gt(
        "F5-waste-greedy",
        "Fig. 5a: RL (+CS) waste < Greedy waste",
        "TODO",
        "comm_waste",
        "adaptivefl",
        "adaptivefl_greedy",
        lower_is_better=True,
    ),
    gt(
        "F5-waste-s",
        "Fig. 5a: +S has the lowest waste: +S waste < +CS waste",
        "TODO",
        "comm_waste",
        "adaptivefl_s",
        "adaptivefl",
        lower_is_better=True,
    ),
    gt(
        "F5-acc-random",
        "Fig. 5b: +CS full > Random full",
        "TODO",
        "acc_full",
        "adaptivefl",
        "adaptivefl_random",
    ),
    gt(
        "F5-acc-greedy",
        "Fig. 5b: +CS full > Greedy full",
        "TODO",
        "acc_full",
        "adaptivefl",
        "adaptivefl_greedy",
    ),
    gt("F5-acc-c", "Fig. 5b: +CS full > +C full", "TODO", "acc_full", "adaptivefl", "adaptivefl_c"),
    gt("F5-acc-s", "Fig. 5b: +CS full > +S full", "TODO", "acc_full", "adaptivefl", "adaptivefl_s"),
]
