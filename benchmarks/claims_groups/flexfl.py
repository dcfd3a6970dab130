"""Claim group flexfl: FlexFL (Chen et al.), /work/shared/seeds/flexfl.txt, restated per issue 45 (each claim as the
paper states it, with its line and the paper's numbers)."""

from __future__ import annotations

from functools import partial

from claims_groups import Claim, gt, paper_gt

SRC = "flexfl.txt"
# Table II's VGG16 CIFAR-10 IID cells (line 270, where the extraction ran the table together) are Table VI's
# Conf2 row, the same setting, printed cleanly at lines 367-370: Decoupled 75.81/72.76, HeteroFL 79.75/76.92,
# ScaleFL 80.36/77.72, FlexFL 84.75/85.16 (avg/large).
T2 = "Table II VGG16 CIFAR-10 IID = Table VI Conf2, lines 367-370"
LINE_263 = "FlexFL consistently achieves an accuracy improvement ranging from 1.75% to 13.13% in terms of large model accuracy"
LINE_264_PARADOX = (
    "in the ScaleFL, HeteroFL, and Decoupled approaches, the accuracy of the largest model is lower than that of "
    "the average model"
)
LINE_401 = "the absence of our proposed components will decrease model accuracy"
LINE_401_APOZ = "with the lack of APoZ causing the most significant decline"
FIG9 = "Fig. 9, VGG16 CIFAR-10: bars only, no numbers in the text"

TITLE = "FlexFL (Chen et al.): Table II, the Fig. 9 ablations, both KD reductions"

SETTING = """\
**Setting here (hour, `scenarios/claims/flexfl_hour.yaml`).** Fashion-MNIST cut to 6,000 train / 1,000 test
images, IID (Table II's first column), 20 devices at FlexFL's Table I (weak 40 % r_M = 35, medium 30 % r_M = 60,
strong 30 % r_M = 110, σ² drawn from {5, 8, 10}), `conv`, 15 rounds of 6 clients, E = 1, batch 20, SGD 0.05 /
0.9, evaluation every 5 rounds on a fixed 500-image subset, FlexFL's 1 % proxy set (60 images) with the code's
100 Adam pretraining epochs, targets 25 / 50 / 100 %, Γ = 10 %, τ = 3, λ = 10; seeds 0-9 (0-4 first, then 5-9 by the rule's "More seeds": every claim decided anew on all ten), one run at a time
(`workers: 1`; the ten-seed study ran two at a time, which changes host times only), `executor: {kind: fused, threads: 1}` (FlexFL's self-KD does not fuse: its runs train as inline).

**Scaled down vs the paper** (CIFAR-10, VGG16, 100 devices, 10 a round, E = 5, lr 0.01 / momentum 0.5, batch 50,
1000 rounds in `scenarios/flexfl_conf2.yaml`): the dataset (a 28 px grey set trains about 10x faster on CPU than
CIFAR-10 and still separates the methods), the model (VGG16 costs about 40x the FLOPs of `conv`), the fleet and
the rounds (the group must fit about 8 CPU-hours on 2 cores). Smoke (`flexfl_smoke.yaml`: MNIST 600 / 200,
3 rounds of 4, 2 pretraining epochs) checks the machinery only. Paper scale (`flexfl_paper.yaml`) is
`scenarios/flexfl_conf2.yaml` as it is (Table I's default, CIFAR-10 IID, VGG16): a GPU study.

**Decisive scale.** A group's verdicts count at the smallest scale where its models clearly learn: the best
variant at ≥ 80 % of the paper's accuracy for that dataset and model, or, where the paper's dataset and model
cannot run here (the paper has no Fashion-MNIST column), ≥ 3x chance (30 % with 10 classes). The hour scale
was chosen on that criterion: in its earlier 3-seed run (issue 18) every variant's large model ended between
80.2 and 82.9 % on Fashion-MNIST with `conv`, well above 30 %.

**Variants and their switches** (`algorithm` of each zip row):

| variant (name) | switches | paper's name |
|---|---|---|
| flexfl | `{name: flexfl}` (kd_reduction mean: the authors' effective weight) | FlexFL |
| flexfl_batchmean | `{name: flexfl, kd_reduction: batchmean}` | (eq. 4 as the true per-sample KL, C times stronger) |
| flexfl_no_self_kd | `{name: flexfl, self_kd: false}` | w/o self-KD |
| flexfl_no_adaptive | `{name: flexfl, adaptive_models: false}` | w/o adaptive model |
| flexfl_no_apoz | `{name: flexfl, apoz: false}` | w/o APoZ |
| flexfl_no_adjustment | `{name: flexfl, adjustment: false}` | w/o adjustment |
| heterofl | `{name: heterofl, mode: fix, proportions: a1-b1-c1, assign: by_capacity}` | HeteroFL |
| scalefl | `{name: scalefl}` | ScaleFL |
| decoupled | `{name: decoupled, levels: a-b-c}` | Decoupled |

**Figures.** "large" = `acc_full` (the global model: FlexFL's M3, HeteroFL's and Decoupled's level a, ScaleFL's
full model), "avg" = `acc_avg` (the mean of the level models: FlexFL's small / medium / large, HeteroFL's and
Decoupled's a / b / c, ScaleFL's l1-l4), at the last evaluated round. With Table I's fluctuation (σ² ≤ 10, σ ≤
3.2 points) a device dispatched M2 (declared 60) or M3 (110) falls below the next pool model only when its draw
exceeds 10 points, over 3σ, so AdaPrune may never choose an adaptive model M2' or M3' and `flexfl_no_adaptive`
may equal `flexfl` run for run (it did in the earlier 3-seed run); the ablation then tests nothing, which the
report states rather than decides: the rule's same-runs condition marks such a claim not testable (Table V's
Conf3, σ² up to 30, is where it would matter). That condition was written into the rule after these runs (the
text above, written before them, had said what the report would do), and a not-testable claim is no member of the
group's Holm family: with F9-adaptive counted as the rule counted it before, T2-large-scalefl's adjusted p_holds is
0.0529 (inconclusive) instead of 0.0485 (reproduced). That verdict is at the edge and rests on this choice.

Not in this group: Table III / Fig. 4 (proxy size), Figs. 5-7 (device counts, ratios, proportions), Table IV
(Γ), Fig. 8 (λ), Tables V-VI (Conf1-3: `scenarios/flexfl_conf1.yaml` / `conf3.yaml` as bases), Table VII
(FEMNIST, Widar), Tables IX-X (overheads, a test-bed)."""

CLASSES = 10
TABLE_COLS = ["acc_full", "acc_avg", "acc_small", "acc_medium", "acc_large"]


_c = partial(paper_gt, SRC)


CLAIMS: list[Claim] = [
    # ---- abstract (line 5): the headline gain, measured where no data of ours reaches
    _c(
        "A5-overall",
        "FlexFL can significantly improve the overall inference accuracy by up to 14.24%: "
        "FlexFL large > the best baseline's large",
        5,
        "acc_full",
        "flexfl",
        "heterofl",
        "59.26 vs 45.02 (Table VII lines 391/393, MobileNetV2 on Widar alpha 0.3, large model; HeteroFL is that "
        "column's best baseline; 59.26 - 45.02 = 14.24)",
        untestable="the 14.24 is Table VII's Widar column (MobileNetV2): no Widar data here; FlexFL's large model "
        "against each baseline's in Table II's setting is T2-large-*",
    ),
    # ---- Table II, large model (line 263)
    _c(
        "T2-large-scalefl",
        LINE_263 + ": FlexFL large > ScaleFL large",
        263,
        "acc_full",
        "flexfl",
        "scalefl",
        f"85.16 vs 77.72 ({T2})",
    ),
    _c(
        "T2-large-heterofl",
        LINE_263 + ": FlexFL large > HeteroFL large",
        263,
        "acc_full",
        "flexfl",
        "heterofl",
        f"85.16 vs 76.92 ({T2})",
    ),
    _c(
        "T2-large-decoupled",
        LINE_263 + ": FlexFL large > Decoupled large",
        263,
        "acc_full",
        "flexfl",
        "decoupled",
        f"85.16 vs 72.76 ({T2})",
    ),
    # ---- Table II, average model (line 264)
    _c(
        "T2-avg-scalefl",
        "our approach demonstrates an accuracy improvement ranging from 0.92% to 7.65% compared to "
        "ScaleFL: FlexFL avg > ScaleFL avg",
        264,
        "acc_avg",
        "flexfl",
        "scalefl",
        f"84.75 vs 80.36 ({T2})",
    ),
    _c(
        "T2-large-ge-avg",
        "in most datasets, the accuracy of the largest model is higher than the average model: "
        "FlexFL large > FlexFL avg",
        264,
        "acc_full",
        "flexfl",
        "flexfl:acc_avg",
        f"85.16 vs 84.75 ({T2})",
    ),
    _c(
        "T2-paradox-heterofl",
        LINE_264_PARADOX + ": HeteroFL avg > HeteroFL large",
        264,
        "acc_avg",
        "heterofl",
        "heterofl:acc_full",
        f"79.75 vs 76.92 ({T2})",
    ),
    _c(
        "T2-paradox-scalefl",
        LINE_264_PARADOX + ": ScaleFL avg > ScaleFL large",
        264,
        "acc_avg",
        "scalefl",
        "scalefl:acc_full",
        f"80.36 vs 77.72 ({T2})",
    ),
    _c(
        "T2-paradox-decoupled",
        LINE_264_PARADOX + ": Decoupled avg > Decoupled large",
        264,
        "acc_avg",
        "decoupled",
        "decoupled:acc_full",
        f"75.81 vs 72.76 ({T2})",
    ),
    # ---- Fig. 9 ablations (line 401)
    _c(
        "F9-self-kd",
        LINE_401 + ": FlexFL avg > w/o self-KD avg",
        401,
        "acc_avg",
        "flexfl",
        "flexfl_no_self_kd",
        FIG9 + "; Fig. 8 (line 333): without self-KD (lambda = 0) accuracy drops by approximately 2-4%",
    ),
    _c(
        "F9-adaptive",
        LINE_401 + ": FlexFL avg > w/o adaptive model avg",
        401,
        "acc_avg",
        "flexfl",
        "flexfl_no_adaptive",
        FIG9,
    ),
    _c("F9-apoz", LINE_401 + ": FlexFL avg > w/o APoZ avg", 401, "acc_avg", "flexfl", "flexfl_no_apoz", FIG9),
    _c(
        "F9-adjustment",
        LINE_401 + ": FlexFL avg > w/o adjustment avg",
        401,
        "acc_avg",
        "flexfl",
        "flexfl_no_adjustment",
        FIG9,
    ),
    # "the most significant decline": w/o APoZ below each other ablation
    _c(
        "F9-apoz-worst-adjustment",
        LINE_401_APOZ + ": w/o adjustment avg > w/o APoZ avg",
        401,
        "acc_avg",
        "flexfl_no_adjustment",
        "flexfl_no_apoz",
        FIG9,
    ),
    _c(
        "F9-apoz-worst-self-kd",
        LINE_401_APOZ + ": w/o self-KD avg > w/o APoZ avg",
        401,
        "acc_avg",
        "flexfl_no_self_kd",
        "flexfl_no_apoz",
        FIG9,
    ),
    _c(
        "F9-apoz-worst-adaptive",
        LINE_401_APOZ + ": w/o adaptive model avg > w/o APoZ avg",
        401,
        "acc_avg",
        "flexfl_no_adaptive",
        "flexfl_no_apoz",
        FIG9,
    ),
    # ---- no paper claim
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
