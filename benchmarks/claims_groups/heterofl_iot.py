"""Claim group heterofl_iot: the claims as converted from the old benchmarks/claims.py (issue 18); to be restated per issue 45."""

from __future__ import annotations

from claims_groups import Claim, gt

TITLE = ""
SETTING = ""
CLASSES = 10
TABLE_COLS = [
    "acc_full",
    "acc_avg",
    "acc_full_mean_run",
    "exact_mix_first10_pct",
    "rounds_with_a_pct",
    "last_round_with_a",
    "a_share_pct",
    "a_share_std_pct",
    "energy_j",
]

CLAIMS: list[Claim] = [
    gt(
        "F5-mix",
        "Figs. 2 / 5: ClientSelect dispatches the configured a2-b8 mix (2:8, where HeteroFL's draw gave 1:9): rounds of the first 10 with exactly 2 a + 8 b, proportional > random",
        "TODO",
        "exact_mix_first10_pct",
        "proportional",
        "random",
    ),
    gt(
        "S3.4-paced-last",
        "Sec. 3.4 (no fluctuation between rounds): paced keeps level a to a later round than proportional",
        "TODO",
        "last_round_with_a",
        "paced",
        "proportional",
    ),
    gt(
        "S3.4-paced-even",
        "Sec. 3.4: paced's per-round level-a share varies less than proportional's",
        "TODO",
        "a_share_std_pct",
        "paced",
        "proportional",
        lower_is_better=True,
    ),
    gt(
        "S4.4-acc-random",
        "Sec. 4.4 / Figs. 3-4 (figures only, no numbers): HeteroFL-IoT (proportional) final accuracy > HeteroFL's random selection",
        "TODO",
        "acc_full",
        "proportional",
        "random",
    ),
    gt(
        "I18-paced-final",
        "issue 18 (no paper claim): paced final accuracy > proportional",
        "",
        "acc_full",
        "paced",
        "proportional",
        section="issue",
    ),
    gt(
        "I18-paced-run",
        "issue 18 (no paper claim): paced accuracy over the run (mean of evaluated rounds) > proportional",
        "",
        "acc_full_mean_run",
        "paced",
        "proportional",
        section="issue",
    ),
]
