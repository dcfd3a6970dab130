"""Claim group adapterfl: the claims as converted from the old benchmarks/claims.py (issue 18); to be restated per issue 45."""

from __future__ import annotations

from claims_groups import Claim, gt

TITLE = ""
SETTING = ""
CLASSES = 10
TABLE_COLS = ["acc_full", "acc_L-S", "acc_L-M", "acc_L-L", "acc_S", "acc_M", "acc_L"]

CLAIMS: list[Claim] = [
    gt(
        "T2-LS-fedbase",
        "Table II: AdapterFL L-S > FedBase L-S (IID 73.82 vs 73.38; beta 0.3 68.52 vs 66.72)",
        "TODO",
        "acc_L-S",
        "adapterfl",
        "fedbase",
    ),
    gt(
        "T2-LM-fedbase",
        "Table II: AdapterFL L-M > FedBase L-M (75.62 vs 68.39; 65.55 vs 57.72)",
        "TODO",
        "acc_L-M",
        "adapterfl",
        "fedbase",
    ),
    gt(
        "T2-LL-fedbase",
        "Table II: AdapterFL L-L > FedBase L-L (69.54 vs 55.28; 64.66 vs 47.60)",
        "TODO",
        "acc_L-L",
        "adapterfl",
        "fedbase",
    ),
    gt(
        "T2-LS-feddf",
        "Table II: AdapterFL L-S > FedDF S (73.82 vs 67.68; 68.52 vs 63.34)",
        "TODO",
        "acc_L-S",
        "adapterfl",
        "feddf:acc_S",
    ),
    gt(
        "T2-LM-feddf",
        "Table II: AdapterFL L-M > FedDF M (75.62 vs 63.56; 65.55 vs 60.99)",
        "TODO",
        "acc_L-M",
        "adapterfl",
        "feddf:acc_M",
    ),
    gt(
        "T2-LL-feddf",
        "Table II: AdapterFL L-L > FedDF L (69.54 vs 58.60; 64.66 vs 49.83)",
        "TODO",
        "acc_L-L",
        "adapterfl",
        "feddf:acc_L",
    ),
    gt(
        "T2-LS-fedavg",
        "Table II: AdapterFL L-S > FedAvg S (73.82 vs 67.84; 68.52 vs 63.16)",
        "TODO",
        "acc_L-S",
        "adapterfl",
        "fedavg_s:acc_full",
    ),
    gt(
        "T2-LM-fedavg",
        "Table II: AdapterFL L-M > FedAvg M (75.62 vs 58.28; 65.55 vs 48.21)",
        "TODO",
        "acc_L-M",
        "adapterfl",
        "fedavg_m:acc_full",
    ),
    gt(
        "T2-LL-fedavg",
        "Table II: AdapterFL L-L > FedAvg L (69.54 vs 53.21; 64.66 vs 45.95)",
        "TODO",
        "acc_L-L",
        "adapterfl",
        "fedavg_l:acc_full",
    ),
    Claim(
        "T5-gain-shrinks",
        "Table V: the L-L gain over FedBase is larger at 0.8/0.1/0.1 (+20.20) than at 0.1/0.1/0.8 (+2.47)",
        "TODO",
        "gain",
        "acc_L-L",
        ("adapterfl_r811", "fedbase_r811"),
        ("adapterfl_r118", "fedbase_r118"),
        (),
    ),
    gt(
        "T5-ratio",
        "Table V: AdapterFL L-L improves as the constrained share falls (0.1/0.1/0.8 72.16 > 0.8/0.1/0.1 68.46)",
        "TODO",
        "acc_L-L",
        "adapterfl_r118",
        "adapterfl_r811",
    ),
    gt(
        "FIT",
        "issue 18 (no paper claim): fit params (Algorithm 1's reading) vs fit memory, L-L",
        "",
        "acc_L-L",
        "adapterfl",
        "adapterfl_fit_memory",
        section="issue",
    ),
]
