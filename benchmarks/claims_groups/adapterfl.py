"""Claim group adapterfl: AdapterFL (Liu et al.), /work/shared/seeds/adapterfl.txt, restated per issue 45 (each claim
as the paper states it, with its line and the paper's numbers)."""

from __future__ import annotations

from functools import partial

from claims_groups import Claim, gt, paper_gt

SRC = "adapterfl.txt"
# Line 234 states Table II's IID gains of the L-group; the cells are Table II lines 207-230 (IID column).
LINE_234_FEDBASE = "AdapterFL can outperform FedBase by 0.44%, 7.23%, 14.28%"
LINE_234_FEDDF = "FedDF by 6.24%, 12.06%, 10.94%"
LINE_234_FEDAVG = "FedAvg by 5.98%, 17.34%, 16.33%"
LINE_256 = "the model L-S outperforms model S-S by 7.61% in FedBase and 6.24% in AdapterFL"
LINE_315_OVERALL = "the model's overall performance will improve as the proportion of resource-constrained clients decreases"
LINE_315_SMALL = "Not only will the accuracy of large models be improved, but that of small models will also be significantly improved"
T2 = "Table II, CIFAR-10 IID"
# Table V's 0.4/0.4/0.2 column equals Table II's beta = 0.6 column cell for cell (FedBase L-S 68.97, AdapterFL L-L
# 66.61, ...): Table V ran at Dirichlet beta = 0.6.
T5 = "Table V, CIFAR-10 Dirichlet beta = 0.6 (its 0.4/0.4/0.2 column is Table II's beta = 0.6 column)"

TITLE = "AdapterFL (Liu et al.): Table II's L-group and S-group, Table V's resource ratios, both fits"

SETTING = """\
**Setting here (hour, `scenarios/claims/adapterfl_hour.yaml`): the decisive scale.** CIFAR-10 (the paper's
dataset; the 2 of 5 train batches in the shared data folder) cut to 5,000 train / 1,000 test images over 20
phones at small:medium:large = 0.4 / 0.4 / 0.2, 5 clients a round (2 / 2 / 1 by the selector's quotas, the
paper's 0.4 / 0.4 / 0.2), **the paper's prototypes (2-conv CNN, MobileNetV2, ResNet18) at width 0.125**, Table
II's cuts [1, 4, 3], E = 5 and batch 50 (the paper's), SGD lr 0.05 (the paper: 0.01; raised for the short run,
the same for every variant), momentum 0.5, weight decay 1e-3, lr decay 0.998 a round, no gradient clipping (the
paper's), 30 rounds, evaluation every 5 rounds on all 1,000 test images; seeds 0-4, one run at a time
(`workers: 1`; part of the runs two at a time with `--workers 2`, which changes host times only) with the inline
executor (a study point equals the same point run alone, bit for bit).
**Each claim at the paper's data distribution**: Table II's and line 256's rows IID (the text's numbers, lines
234 and 256, are the IID column), Table V's rows Dirichlet β = 0.6 (Table V's 0.4 / 0.4 / 0.2 column is Table
II's β = 0.6 column cell for cell).

**Who trains which model** (the paper's arrangement, Sec. V-A: "a medium model could only run on clients of
medium and large levels"). Declared free memory small / medium / large 50 / 200 / 1,000 MB. Under `fit: params`
(Algorithm 1's |m| < Γ_k, the default) the needs at width 0.125 and batch 50 are L-S / L-M / L-L 46.7 / 179.6 /
563.7 MB and S-S / S-M / S-L 6.2 / 69.5 / 252.1 MB, so small phones hold X-S, medium ones X-M, large ones X-L in
both groups (checked in a probe's dispatch events: small L-S, medium L-M, large L-L). FedAvg's exclusive
learning uses the models' training memory (cnn2 4.4, MobileNetV2 114.6, ResNet18 56.5 MB): cnn2 fits every
phone, MobileNetV2 the medium and large ones; for `fedavg_l` the medium phones declare 50 MB so that ResNet18
trains on the large ones alone, as the paper's FedAvg L (the declared memory decides nothing else in a FedAvg
run). Table V's ratios are zip rows setting `fleet.groups.{0,1,2}.fraction` (0.8 / 0.1 / 0.1: 16 / 2 / 2 phones;
0.1 / 0.1 / 0.8: 2 / 2 / 16). FedDF: the paper's 1 % proxy set (50 images), 20 Adam distillation steps of 64
per prototype a round (the default 100 cost ~50 CPU-s a round at this width, a quarter of the group's budget
on one baseline; 20 steps are still ~25 passes over the proxy set a round; the FedDF code early-stops).

**Why this scale (the decisive-scale criterion).** A claim is decided where its models clearly learn: the best
variant at ≥ 80 % of the paper's accuracy for that dataset and model, or ≥ 3x chance (30 % on CIFAR-10) where
the paper's model cannot run here (width 0.125 is not the paper's model). The earlier hour scale (width 0.5,
10 rounds of 4, E = 1, β = 0.3) left every model within 14 points of chance: it tested nothing. Probes (one run
at a time, 1 thread, seed 0; CPU seconds): width 0.125, IID, E = 5, 10 rounds of 5 reached L-S / L-M / L-L
33.1 / 29.7 / 28.7 % in 149 CPU-s, Table V's 0.8 / 0.1 / 0.1 at Dirichlet 0.6 31.5 / 23.1 / 23.2 % in 132
CPU-s (E = 1 and β = 0.3 at 20 rounds of 4: 9.6 / 11.2 / 19.2 % in 71 CPU-s); 30
rounds triple the training. The group (13 variants x 5 seeds) was estimated at about 7.4 CPU-hours before the
runs (the study file's header gives the per-variant estimate); the host time they took is under the setting (on a
shared 2-core machine, two at a time, with pauses: host time, not CPU time). The study resumes where it stopped.

**Scaled down vs the paper** (100 clients, 10 % a round, width 1, lr 0.01, rounds not stated; the paper-scale
study `adapterfl_paper.yaml` assumes 500): width, data, fleet, rounds, lr. Smoke (`adapterfl_smoke.yaml`: 400 /
200 images, 10 phones, 2 rounds) checks the machinery only.

**Variants and their switches** (`algorithm` of each zip row; `acc_L-S` etc. are each model's accuracy,
`acc_full` the group's largest model):

| variant (name) | switches | paper's name |
|---|---|---|
| adapterfl | `{name: adapterfl, width: 0.125, cuts: [1, 4, 3]}` (fit params, extractor L), IID | AdapterFL L-group |
| adapterfl_fit_memory | `{..., fit: memory}`, IID | (the code's fit by training memory; issue 18) |
| fedbase | `{name: fedbase, width: 0.125, cuts: [1, 4, 3]}`, IID | FedBase L-S / L-M / L-L |
| adapterfl_xs, fedbase_xs | as adapterfl / fedbase with `extractor: S`, IID | AdapterFL / FedBase S-group (S-S / S-M / S-L) |
| feddf | `{name: feddf, width: 0.125, distill_steps: 20}`, IID | FedDF S / M / L |
| fedavg_s / _m / _l | `{name: fedavg, family: cnn2 / mobilenetv2 / resnet18, width: 0.125}`, IID | FedAvg S / M / L (exclusive learning) |
| adapterfl_r811, fedbase_r811 | as adapterfl / fedbase, fractions 0.8 / 0.1 / 0.1, Dirichlet 0.6 | Table V, first column |
| adapterfl_r118, fedbase_r118 | fractions 0.1 / 0.1 / 0.8, Dirichlet 0.6 | Table V, last column |

Not in this group: Tables III-IV (CIFAR-100 / TinyImageNet; the MobileNetV2 / ResNet18 / VGG16 prototypes: the
same study with `data.dataset: cifar100` or `prototypes: [mobilenetv2, resnet18, vgg16]`), Tables VI-VII
(activated ratios, client counts), the appendix tables, Table II's β = 0.3 and 0.6 columns."""

CLASSES = 10
TABLE_COLS = ["acc_full", "acc_L-S", "acc_L-M", "acc_L-L", "acc_S-S", "acc_S", "acc_M", "acc_L"]


_c = partial(paper_gt, SRC)


CLAIMS: list[Claim] = [
    # ---- abstract (line 13): the headline gain; its 12 % is Table II's largest IID gain over FedDF (line 234)
    _c(
        "A13-up-to-12",
        "AdapterFL can achieve up to 12% accuracy improvement compared to the state-of-the-art heterogeneous "
        "federated learning methods: the 12 % is line 234's largest gain over FedDF, the heterogeneous baseline "
        "(L-M over FedDF's M); margin 12 points, so 'not reproduced' means a gain credibly below the paper's",
        13,
        "acc_L-M",
        "adapterfl",
        "feddf:acc_M",
        f"75.62 vs 63.56, +12.06 ({T2}, lines 229 and 211; line 234)",
        margin=0.12,
    ),
    # ---- Table II, the L-group against each baseline at each level (line 234, IID)
    _c(
        "T2-LS-fedbase",
        LINE_234_FEDBASE + ": AdapterFL L-S > FedBase L-S (block-wise aggregation vs none)",
        234,
        "acc_L-S",
        "adapterfl",
        "fedbase",
        f"73.82 vs 73.38, +0.44 ({T2}, lines 228 and 219)",
    ),
    _c(
        "T2-LM-fedbase",
        LINE_234_FEDBASE + ": AdapterFL L-M > FedBase L-M",
        234,
        "acc_L-M",
        "adapterfl",
        "fedbase",
        f"75.62 vs 68.39, +7.23 ({T2}, lines 229 and 220)",
    ),
    _c(
        "T2-LL-fedbase",
        LINE_234_FEDBASE + ": AdapterFL L-L > FedBase L-L",
        234,
        "acc_L-L",
        "adapterfl",
        "fedbase",
        f"69.54 vs 55.28, +14.26 (the text's 14.28) ({T2}, lines 230 and 221)",
    ),
    _c(
        "T2-LS-feddf",
        LINE_234_FEDDF + ": AdapterFL L-S > FedDF S",
        234,
        "acc_L-S",
        "adapterfl",
        "feddf:acc_S",
        f"73.82 vs 67.68, +6.14 (the text's 6.24) ({T2}, lines 228 and 210)",
    ),
    _c(
        "T2-LM-feddf",
        LINE_234_FEDDF + ": AdapterFL L-M > FedDF M",
        234,
        "acc_L-M",
        "adapterfl",
        "feddf:acc_M",
        f"75.62 vs 63.56, +12.06 ({T2}, lines 229 and 211)",
    ),
    _c(
        "T2-LL-feddf",
        LINE_234_FEDDF + ": AdapterFL L-L > FedDF L",
        234,
        "acc_L-L",
        "adapterfl",
        "feddf:acc_L",
        f"69.54 vs 58.60, +10.94 ({T2}, lines 230 and 212)",
    ),
    _c(
        "T2-LS-fedavg",
        LINE_234_FEDAVG + ": AdapterFL L-S > FedAvg S (cnn2 on every phone)",
        234,
        "acc_L-S",
        "adapterfl",
        "fedavg_s:acc_full",
        f"73.82 vs 67.84, +5.98 ({T2}, lines 228 and 207)",
    ),
    _c(
        "T2-LM-fedavg",
        LINE_234_FEDAVG + ": AdapterFL L-M > FedAvg M (MobileNetV2 on the medium and large phones)",
        234,
        "acc_L-M",
        "adapterfl",
        "fedavg_m:acc_full",
        f"75.62 vs 58.28, +17.34 ({T2}, lines 229 and 208)",
    ),
    _c(
        "T2-LL-fedavg",
        LINE_234_FEDAVG + ": AdapterFL L-L > FedAvg L (ResNet18 on the large phones alone)",
        234,
        "acc_L-L",
        "adapterfl",
        "fedavg_l:acc_full",
        f"69.54 vs 53.21, +16.33 ({T2}, lines 230 and 209)",
    ),
    # ---- line 256: the large prototype's feature-extraction block beats the small one's at the same level
    _c(
        "L256-fedbase",
        LINE_256 + ": FedBase L-S > FedBase S-S (the L-group's vs the S-group's extractor, no sharing)",
        256,
        "acc_L-S",
        "fedbase",
        "fedbase_xs:acc_S-S",
        f"73.38 vs 65.77, +7.61 ({T2}, lines 219 and 213)",
    ),
    _c(
        "L256-adapterfl",
        LINE_256 + ": AdapterFL L-S > AdapterFL S-S",
        256,
        "acc_L-S",
        "adapterfl",
        "adapterfl_xs:acc_S-S",
        f"73.82 vs 67.58, +6.24 ({T2}, lines 228 and 222)",
    ),
    # ---- Table V and line 315: the ratio of resource-constrained clients (Dirichlet 0.6)
    _c(
        "T5-ratio-large",
        LINE_315_OVERALL + ": AdapterFL L-L at 0.1/0.1/0.8 > at 0.8/0.1/0.1",
        315,
        "acc_L-L",
        "adapterfl_r118",
        "adapterfl_r811",
        f"72.16 vs 68.46, +3.70 ({T5}, line 313)",
    ),
    _c(
        "T5-ratio-small",
        LINE_315_SMALL + ": AdapterFL L-S at 0.1/0.1/0.8 > at 0.8/0.1/0.1",
        315,
        "acc_L-S",
        "adapterfl_r118",
        "adapterfl_r811",
        f"76.83 vs 73.24, +3.59 ({T5}, line 311)",
    ),
    Claim(
        "T5-gain-shrinks",
        "The large model may suffer from insufficient model training problems in resource-constrained scenarios: "
        "so AdapterFL's L-L gain over FedBase is larger where large phones are scarce (0.8/0.1/0.1) than where "
        "they abound (0.1/0.1/0.8), per-seed gains paired by seed",
        f"{SRC}:116",
        "gain",
        "acc_L-L",
        ("adapterfl_r811", "fedbase_r811"),
        ("adapterfl_r118", "fedbase_r118"),
        paper=f"+20.20 (68.46 - 48.26) vs +2.47 (72.16 - 69.69) ({T5}, lines 313 and 310)",
    ),
    # ---- the project's own question (issue 18): which fit rule
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
