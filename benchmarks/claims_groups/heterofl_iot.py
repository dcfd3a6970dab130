"""Claim group heterofl_iot: HeteroFL-IoT (a course report extending HeteroFL), /work/shared/seeds/heterofl_iot_zh.txt,
restated per issue 45 (each claim as the paper states it, with its line; the report gives no numbers)."""

from __future__ import annotations

from claims_groups import Claim, gt

SRC = "heterofl_iot_zh.txt"
# Line 17: "[HeteroFL-IoT] allocates by weight proportion, so that every round trains a certain amount of data and
# the training volume does not differ much between rounds ... within HeteroFL it achieves better results than the
# default." The default is HeteroFL's own selection: a uniform draw of C x M clients a round, the levels fixed by
# id, which Fig. 2 (line 208) shows dispatching 1:9 under a2-b8.
LINE_17_ACC = "该算法在 HeteroFL 架构中, 可以取得比默认更好的效果"
LINE_17_STEADY = "保证每轮的训练都有一定量的数据, 不出现前后训练量差距过大的情况"
NO_NUMBERS = "no numbers: Figs. 3-4 (MNIST) and 7-8 (CIFAR-10 ResNet18) are images, the text gives no values"

TITLE = "HeteroFL-IoT: ClientSelect vs HeteroFL's draw under equal budgets; paced selection (this project's extension)"

SETTING = """\
The paper (a course report extending HeteroFL) states its claims in words and figures without numbers. Its
method is ClientSelect (Algorithm 1, lines 159-169): each round takes max(L_p x 10, 1) clients of each level p in
the configured proportion (a2-b8: 2 a + 8 b), where HeteroFL's default draws C x M clients uniformly (Fig. 2,
line 208: under a2-b8 that round dispatched 1:9). Line 17 claims that ClientSelect, under a per-node energy limit
(a drained node goes offline), keeps every round's training volume steady and does better than the default.
**Restated here**: *the default* = HeteroFL's uniform draw (`selection: random`) under the same budget; *better
results* = the final global accuracy (`acc_full`, the paper's Figs. 3 / 7); *steady* = a smaller spread of the
per-round level-a share (`a_share_std_pct`) than the default's.

**Setting here (hour, `scenarios/claims/heterofl_iot_hour.yaml`, base `heterofl_iot_hour.base.yaml`).** MNIST
cut to 12,000 / 2,000 images (120 per node), IID, HeteroFL's `conv` (the paper's MNIST model), 100 battery nodes,
10 a round (the paper's C = 0.1), fix a2-b8 by id, BN with static statistics, Scaler, 100 rounds (the paper: 400
/ 800 / 1600), E = 1, batch 10, evaluation every 5 rounds on 1,000 images, 250 J per node: per task (from a
system-only run of this fleet, compute scaled to 120 samples) level a costs ~50 J and level b ~12 J (measured in
a 10-round probe), so an a-node pays for 4-5 tasks and the proportional selection runs level a dry about midway.
The budget in joules is this scenario's choice at every scale (the paper gives none). Seeds 0-4, one run at a
time (`workers: 1`), the inline executor. The a2-b4-c4 rows (Fig. 6) run 10 rounds: their claim reads the first
10 rounds' dispatch only.

**Why this scale (the decisive-scale criterion).** The models clearly learn: the best variant at ≥ 80 % of the
paper's accuracy for that dataset and model (the paper's own MNIST log, line 206, shows 96.73 % global accuracy at
round 2); the earlier 3-seed hour run ended at 97.97-98.27 % for every selection. MNIST saturates: above 98 % a
one-point margin asks a selection to remove half the remaining error, the same ceiling the paper's MNIST figures
sit under. The group is 3 variants x 5 seeds x 100 rounds plus 2 x 5 x 10 rounds: about 2 CPU-hours (the earlier
probe: 58 host-s for 10 rounds of `proportional`).

**Scaled down vs the paper**: data (a fifth of MNIST), rounds. Smoke (`heterofl_iot_smoke.yaml`: digits,
`cnn_small`, 4.8 J a node, 40 rounds) checks the machinery only; paper scale (`heterofl_iot_paper.yaml`) is all of
MNIST, 400 rounds, 3,000 J a node (a GPU study).

**Variants and their switches**:

| variant (name) | switch | paper's name |
|---|---|---|
| proportional | `algorithm.selection: proportional` | HeteroFL-IoT's ClientSelect |
| random | `algorithm.selection: random` | HeteroFL's default uniform draw, same budget |
| paced | `algorithm.selection: paced` | none: this project's extension (issue 18's budget pacing) |
| proportional_a2b4c4, random_a2b4c4 | as above with `algorithm.proportions: a2-b4-c4`, 10 rounds | Fig. 6's a2-b4-c4 |

**This project's extension and sanity checks** (section "extension", not tests of the paper): `paced` spreads
each level's budget over the run; its claims are this project's. That ClientSelect dispatches the configured mix
(Figs. 5 and 6) holds by construction for any quota selector: those rows check the implementation, not the paper.

Not in this group: WikiText2 / Transformer (no text data here), CIFAR-10 ResNet18 (Figs. 7-8: the same study with
`data.dataset: cifar10`, `model.family: resnet18` on a GPU and a budget recomputed for that model), the local
accuracy of Figs. 4 / 8."""

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
    # ---- the paper's claims (line 17), ClientSelect against HeteroFL's default draw under the same budget
    gt(
        "L17-acc-default",
        LINE_17_ACC + ": within HeteroFL it does better than the default: ClientSelect (proportional) final "
        "global accuracy > HeteroFL's uniform draw (random), same per-node budget",
        f"{SRC}:17",
        "acc_full",
        "proportional",
        "random",
        paper=NO_NUMBERS,
    ),
    gt(
        "L17-steady",
        LINE_17_STEADY + ": every round trains a certain amount of data, no large gap between rounds (also line 88): "
        "the per-round level-a share varies less under ClientSelect than under the default draw",
        f"{SRC}:17",
        "a_share_std_pct",
        "proportional",
        "random",
        lower_is_better=True,
        paper="no numbers (line 88 restates it as the method's goal)",
    ),
    # ---- sanity checks of the implementation: met by construction by any quota selector
    gt(
        "F5-mix",
        "sanity check, met by construction by any quota selector (not a test of the paper): Fig. 5 "
        f"({SRC}:242, 占比为 2 : 8) against Fig. 2 ({SRC}:208, HeteroFL's draw 1 : 9): rounds of the first 10 "
        "with exactly 2 a + 8 b, proportional > random",
        "",
        "exact_mix_first10_pct",
        "proportional",
        "random",
        section="extension",
        paper="2:8 under ClientSelect (Fig. 5, a logged round), 1:9 under HeteroFL's draw (Fig. 2)",
    ),
    gt(
        "F6-mix",
        "sanity check, met by construction by any quota selector (not a test of the paper): Fig. 6 "
        f"({SRC}:268, 在 a2b4c4 的复杂度分配下 ... 占比为 2 : 4 : 4): rounds of the first 10 with exactly "
        "2 a + 4 b + 4 c, proportional > random at a2-b4-c4",
        "",
        "exact_mix_first10_pct",
        "proportional_a2b4c4",
        "random_a2b4c4",
        section="extension",
        paper="2:4:4 (Fig. 6, one logged round)",
    ),
    # ---- this project's extension: paced selection (not the paper's)
    gt(
        "X-paced-last",
        "extension (paced is not the paper's): paced keeps level a training to a later round than ClientSelect",
        "",
        "last_round_with_a",
        "paced",
        "proportional",
        section="extension",
    ),
    gt(
        "X-paced-even",
        "extension: paced's per-round level-a share varies less than ClientSelect's",
        "",
        "a_share_std_pct",
        "paced",
        "proportional",
        lower_is_better=True,
        section="extension",
    ),
    gt(
        "I18-paced-final",
        "issue 18 (no paper claim): paced final accuracy > ClientSelect",
        "",
        "acc_full",
        "paced",
        "proportional",
        section="issue",
    ),
    gt(
        "I18-paced-run",
        "issue 18 (no paper claim): paced accuracy over the run (mean of evaluated rounds) > ClientSelect",
        "",
        "acc_full_mean_run",
        "paced",
        "proportional",
        section="issue",
    ),
]
