"""Claim group fedx: the claims as converted from the old benchmarks/claims.py (issue 18); to be restated per issue 45."""

from __future__ import annotations

from claims_groups import Claim, gt

TITLE = ""
SETTING = ""
CLASSES = 10
TABLE_COLS = ["utility", "acc_full", "acc_small", "acc_medium", "acc_large"]

CLAIMS: list[Claim] = [
    Claim(
        "F4-M-vs-L",
        "Fig. 4: FedX-Medium about equals FedX-Large (a marginal gap)",
        "TODO",
        "approx",
        "utility",
        ("fedx_m",),
        ("fedx_l",),
        (),
    ),
    gt(
        "F4-S-worst",
        "Fig. 4: FedX-Small is clearly worse: FedX-M > FedX-S",
        "TODO",
        "utility",
        "fedx_m",
        "fedx_s",
    ),
    gt(
        "F4-vs-qfedavg-l",
        "Fig. 4: FedX > Quantized FedAvg-Large (+2.19 / 2.49 / 11.56 at 8 / 9 / 10 bits)",
        "TODO",
        "utility",
        "fedx",
        "qfedavg_l",
    ),
    gt("F4-ft-s", "Fig. 4: FedX-S > Quantized FedAvg-S", "TODO", "utility", "fedx_s", "qfedavg_s"),
    gt("F4-ft-m", "Fig. 4: FedX-M > Quantized FedAvg-M", "TODO", "utility", "fedx_m", "qfedavg_m"),
    gt("F4-ft-l", "Fig. 4: FedX-L > Quantized FedAvg-L", "TODO", "utility", "fedx_l", "qfedavg_l"),
    gt(
        "F4-dadaquant",
        "Fig. 4: FedX > DAdaQuant (+2.28 to 3.01 on Tiny-ImageNet) in FedX's setting (Sec. IV-D: the server holds its classes and fine-tunes without regularisation)",
        "TODO",
        "utility",
        "fedx",
        "dadaquant_fedx_setting",
    ),
    gt(
        "F4-dadaquant-own",
        "issue 18 (no paper claim): FedX > DAdaQuant as its own paper runs it (every class on the devices, no server data)",
        "",
        "utility",
        "fedx",
        "dadaquant",
        section="issue",
    ),
    Claim(
        "F5-peak",
        "Fig. 5: utility peaks at 40-60 % medium devices (HAR 68.21 %), 2.05-5.31 lower above",
        "TODO",
        "peak",
        "utility",
        ("fedx",),
        (),
        ("fedx_medium_000", "fedx_medium_025", "fedx", "fedx_medium_075", "fedx_medium_100"),
    ),
    gt("F6-ft", "Fig. 6: fine-tuning helps: FedX > FedX without FT", "TODO", "utility", "fedx", "fedx_no_ft"),
    gt(
        "EQ2",
        "Sec. III (no figure): eq. 2's device-aware choice >= the shuffle: FedX eq2 > FedX shuffle",
        "TODO",
        "utility",
        "fedx_eq2",
        "fedx",
    ),
]
