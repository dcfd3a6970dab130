"""Options of each FL method, validated with the rest of the scenario.

These are plain data (no PyTorch); the methods themselves live in ``iotfl_sim.algorithms``.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from iotfl_sim.catalog import PROTOTYPE_STAGES
from iotfl_sim.methods import builtin
from iotfl_sim.scenario.limits import MAX_BATCH, MAX_BUCKET, MAX_EPOCHS, MAX_INDEX, MAX_SAMPLES, MAX_STEPS
from iotfl_sim.scenario.profile import Strict


class MethodConfig(Strict):
    """A method's options, as the scenario's ``algorithm:`` block gives them: the base of every method's options
    class (``Strategy.Config``). Fields are validated strictly (an unknown key is an error naming it), each
    with its default and a ``description`` that ``iotfl-sim schema`` shows; ``name`` is the method's name as the
    scenario wrote it (a registered name or an import path)."""

    name: str


# HeteroFL's complexity levels: the width rate of each letter.
LEVEL_RATES: dict[str, float] = {"a": 1.0, "b": 0.5, "c": 0.25, "d": 0.125, "e": 0.0625}


def parse_proportions(text: str) -> dict[str, float]:
    """``"a2-b8"`` -> {"a": 0.2, "b": 0.8}; ``"a-b-c"`` gives equal shares (HeteroFL's notation)."""
    parts = [p for p in text.strip().split("-") if p]
    if not parts:
        raise ValueError("empty level string; write it like 'a2-b8' or 'a1-b1-c1-d1-e1'")
    out: dict[str, float] = {}
    for part in parts:
        m = re.fullmatch(r"([a-e])(\d*(?:\.\d+)?)", part)
        if not m:
            raise ValueError(f"bad level {part!r} in {text!r}: use a letter a-e followed by a weight, e.g. 'a2-b8'")
        letter, weight = m.group(1), m.group(2)
        if letter in out:
            raise ValueError(f"level {letter!r} appears twice in {text!r}")
        out[letter] = float(weight) if weight else 1.0
    total = sum(out.values())
    if total <= 0:
        raise ValueError(f"level weights in {text!r} sum to zero")
    return {k: v / total for k, v in out.items()}


def _valid_levels(text: str) -> str:
    parse_proportions(text)
    return text


LevelString = Annotated[str, AfterValidator(_valid_levels)]


class _Levels(MethodConfig):
    level_rates: dict[str, float] = Field(
        default_factory=lambda: dict(LEVEL_RATES),
        description="width rate of each level letter (HeteroFL: a=1, b=0.5, c=0.25, d=0.125, e=0.0625)",
    )

    @field_validator("level_rates")
    @classmethod
    def _rates_in_range(cls, v: dict[str, float]) -> dict[str, float]:
        for k, r in v.items():
            if not 0 < r <= 1:
                raise ValueError(f"level {k!r} has rate {r}; rates must be in (0, 1]")
        return v


PrototypeFamily = Literal["cnn2", "mobilenetv2", "resnet18", "vgg16", "conv", "cnn_small", "mlp"]
AdapterPrototype = Literal[tuple(PROTOTYPE_STAGES)]  # type: ignore[valid-type]


def candidate_cuts(family: str) -> list[int]:
    """AdapterFL cuts c (stages in the feature-extraction block) that leave a non-head stage on the
    device-adaptation side."""
    if family not in PROTOTYPE_STAGES:
        raise ValueError(f"unknown prototype family {family!r}; expected one of {tuple(PROTOTYPE_STAGES)}")
    return list(range(1, PROTOTYPE_STAGES[family] - 1))


class _Wire(MethodConfig):
    """QSGD-quantized messages (``iotfl_sim.algorithms.wire``); 32 bits = raw float32, no quantization."""

    upload_bits: int = Field(32, ge=1, le=32, description="bits q of the QSGD-quantized uploads (2^q intervals); 32: float32")
    download_bits: int = Field(
        32, ge=1, le=32, description="bits q of the QSGD-quantized downloads (2^q intervals); 32: float32"
    )
    qsgd_bucket: int | None = Field(
        512,
        ge=1,
        le=MAX_BUCKET,
        description="QSGD normalisation: values sharing one float32 norm (QSGD's bucketing); null: one norm per "
        "tensor, no padding (fl.quantize states the wire format of both)",
    )


@builtin("iotfl_sim.algorithms.fedavg:FedAvg")
class FedAvgConfig(_Wire):
    name: Literal["fedavg"]
    flavour: Literal["all_large", "smallest"] = Field(
        "all_large",
        description="all_large: everyone trains the full model and devices that cannot fit it are excluded; "
        "smallest: everyone trains the smallest model",
    )
    small_rate: float = Field(0.0625, gt=0, le=1, description="width rate of the model in the 'smallest' flavour")
    weighting: Literal["data", "count"] = "data"
    family: PrototypeFamily | None = Field(
        None,
        description="train this model family instead of model.family (AdapterFL's 'FedAvg S/M/L': one prototype "
        "per run; with all_large only devices whose declared memory fits it take part)",
    )
    width: float = Field(1.0, gt=0, le=1, description="width rate of the all_large model (1: the full model)")
    memory: Literal["exclude", "ignore"] = Field(
        "exclude",
        description="exclude: devices whose declared free memory cannot hold the model are never selected "
        "(exclusive learning) and memory can still fail a task (oom); ignore: every device may be selected and "
        "memory never fails a task (AdaptiveFL's unconstrained All-Large, an upper bound no real fleet reaches)",
    )


@builtin("iotfl_sim.algorithms.decoupled:Decoupled")
class DecoupledConfig(_Levels):
    name: Literal["decoupled"]
    levels: LevelString = Field("a-b-c-d-e", description="which levels get a model of their own, e.g. 'a-b-c'")
    weighting: Literal["data", "count"] = "data"


@builtin("iotfl_sim.algorithms.heterofl:HeteroFL")
class HeteroFLConfig(_Levels, _Wire):
    name: Literal["heterofl"]
    mode: Literal["fix", "dynamic"] = Field(
        "fix", description="fix: a device keeps its level; dynamic: levels are re-drawn every round"
    )
    proportions: LevelString = Field("a1-b1-c1-d1-e1", description="level mix in HeteroFL's notation, e.g. 'a2-b8'")
    assign: Literal["by_id", "by_capacity"] = Field(
        "by_id",
        description="by_id: the paper's assignment by user id and proportions; by_capacity: each device gets the "
        "largest level of the mix that fits its declared free memory",
    )
    masked_ce: bool = Field(True, description="mask logits of classes absent on the client with 0 (not -inf)")
    label_restricted_classifier: bool = Field(
        True, description="aggregate classifier rows only from clients that hold that label"
    )


@builtin("iotfl_sim.algorithms.heterofl_iot:HeteroFLIoT")
class HeteroFLIoTConfig(HeteroFLConfig):
    """HeteroFL-IoT: HeteroFL under a per-node energy budget, with a per-round selection that keeps the
    configured level mix (``iotfl_sim.algorithms.heterofl_iot``)."""

    name: Literal["heterofl_iot"]  # type: ignore[assignment]
    selection: Literal["proportional", "paced", "random"] = Field(
        "proportional",
        description="proportional: each round takes max(share x clients_per_round, 1) nodes of every level among "
        "the nodes that still have energy (HeteroFL-IoT's ClientSelect); paced: the same, with each level capped "
        "by a budget pace (its affordable tasks spread over the rounds left, floor with carry) so the mix holds "
        "to the last round (needs mode: fix and energy_info: oracle); random: plain HeteroFL's uniform draw "
        "from the same pool (the paper's baseline)",
    )
    energy_info: Literal["oracle", "outcomes"] = Field(
        "oracle",
        description="oracle: the server knows which nodes still have energy (as the paper's server does; read "
        "through FleetView.true_state and reported in the summary); outcomes: it learns a node is dead only when "
        "a task to it fails as depleted",
    )
    shortfall: Literal["fill", "leave"] = Field(
        "fill",
        description="when a level has fewer live nodes than its quota: fill the free slots from the other levels "
        "(by their shares), or leave them empty",
    )

    @model_validator(mode="after")
    def _proportional_modes(self) -> HeteroFLIoTConfig:
        if self.selection == "proportional" and self.mode == "dynamic" and self.assign == "by_capacity":
            raise ValueError(
                "selection: proportional with mode: dynamic needs assign: by_id (use mode: fix with by_capacity)"
            )
        if self.selection == "paced" and self.mode != "fix":
            raise ValueError("selection: paced needs mode: fix (a level's energy is that of its nodes); set mode: fix")
        if self.selection == "paced" and self.energy_info != "oracle":
            raise ValueError(
                "selection: paced needs energy_info: oracle (the server reads the nodes' remaining energy); "
                "set energy_info: oracle or use selection: proportional"
            )
        return self


@builtin("iotfl_sim.algorithms.adaptivefl:AdaptiveFL")
class AdaptiveFLConfig(MethodConfig):
    """AdaptiveFL (Jia et al., DAC 2024): fine-grained width pruning (r_w, I), RL client selection
    (``iotfl_sim.algorithms.adaptivefl``)."""

    name: Literal["adaptivefl"]
    width_rates: list[float] = Field(
        default_factory=lambda: [0.4, 0.66, 1.0],
        description="r_w of the size levels, ascending, the last 1.0 (small, medium, large)",
    )
    start_layers: list[Annotated[int, Field(le=MAX_INDEX)]] | None = Field(
        None,
        description="start pruning layers I (0-based prunable group index; groups below I keep all channels); "
        "default per family: vgg16 [4, 6, 8], resnet18 [1, 2, 3], conv [0, 1, 2], mobilenetv2 [3, 4, 5], "
        "cnn_small [0, 1], mlp [0]",
    )
    selection: Literal["rl", "random", "greedy"] = Field(
        "rl",
        description="rl: RandomSel of models + RL client selection; random: RandomSel + uniform clients "
        "(AdaptiveFL+Random); greedy: the largest model to uniformly drawn clients (AdaptiveFL+Greedy)",
    )
    curiosity: bool = Field(True, description="rl: use the curiosity reward R_c (+C)")
    resource: bool = Field(True, description="rl: use the resource reward R_s (+S); both on is +CS (AdaptiveFL)")
    success_cap: float = Field(0.5, gt=0, le=1, description="cap on R_s when combined with R_c (the paper's 50 %)")
    reference: Literal["paper", "code"] = Field(
        "paper",
        description="paper: Algorithm 1 and Section 3 as written (a device prunes the received model: only pool "
        "models nested in it); code: the official code's table updates, large-level reward and device-side "
        "fallback (any smaller pool model, cut from the global weights)",
    )
    avg_over: Literal["levels", "pool"] = Field(
        "levels", description="acc_avg over the level heads S1, M1, L1 (paper Table 2) or over every pool model"
    )
    weighting: Literal["data", "count"] = Field("data", description="aggregation weights (paper: local data size)")

    @field_validator("width_rates")
    @classmethod
    def _rates(cls, v: list[float]) -> list[float]:
        if not v or any(not 0 < r <= 1 for r in v) or sorted(set(v)) != v or v[-1] != 1.0:
            raise ValueError(f"width_rates must be distinct, ascending, in (0, 1] and end with 1.0, got {v}")
        return v

    @field_validator("start_layers")
    @classmethod
    def _starts(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and (not v or any(i < 0 for i in v) or sorted(set(v)) != v):
            raise ValueError(f"start_layers must be distinct, ascending and >= 0, got {v}")
        return v


class ScaleFLLevel(Strict):
    """One ScaleFL complexity level: a width rate and the number of stages/exits kept."""

    width: float = Field(
        gt=0,
        le=1,
        description="width rate of every prunable layer (channels kept: floor, at least one; reference: code: "
        "the code's int(C x width) exactly, and a width giving 0 channels is refused)",
    )
    depth: int = Field(ge=1, le=MAX_INDEX, description="stages kept, one exit after each (the deepest is the level's prediction)")


SCALEFL_PAPER_KD_GAMMA = 0.05  # the only KD weight the authors publish (their BERT command)


@builtin("iotfl_sim.algorithms.scalefl:ScaleFL")
class ScaleFLConfig(MethodConfig):
    """ScaleFL (Ilhan et al., CVPR 2023); see ``iotfl_sim.algorithms.scalefl``."""

    name: Literal["scalefl"]
    levels: list[ScaleFLLevel] | None = Field(
        None,
        description="complexity levels, smallest first; null: the code's [0.7, 0.7, 0.75, 1] widths with exits "
        "[1, 2, 3, 4] (conv, resnet18, resnet110) or [2, 3, 4, 5] (vgg16)",
    )
    shares: list[float] | None = Field(
        None,
        description="share of devices per level (assign: permutation); null: equal shares (the code's 0.25 each); "
        "reference: code uses them as written (the code's client_split_ratios: fractions summing to at most 1)",
    )
    assign: Literal["by_capacity", "permutation"] | None = Field(
        None,
        description="by_capacity: each device gets the largest level that fits its declared free memory; "
        "permutation: a fixed level per device from a seeded permutation and the shares (reference: code: the "
        "code's np.random.seed(seed); np.random.permutation(devices) cut into consecutive chunks); "
        "null: by_capacity (paper), permutation (code)",
    )
    kd_gamma: float | None = Field(
        None,
        ge=0,
        description="weight of the exit self-distillation (the code's KD_gamma); null: 0.05 with reference: paper "
        "(the paper's method has KD on; 0.05 is the authors' only published value, their BERT command), "
        "0 with reference: code (the code's default, KD off)",
    )
    temperature: float = Field(3.0, gt=0, description="KD temperature T (the code's KD_T)")
    kd_start: float = Field(
        0.25, ge=0, le=1, description="KD is on from the first 0-based round r with r > kd_start * rounds"
    )
    exit_head: Literal["scalefl", "light"] = Field(
        "scalefl",
        description="scalefl: 3 x [conv3x3 -> Scaler -> BN -> ReLU] -> avgpool -> fc (the code's exits); "
        "light: avgpool -> fc",
    )
    scaler: bool = Field(
        True,
        description="ScaleFL's Scaler (output / width rate in training and evaluation, where the rate < 1); "
        "overrides model.scaler",
    )
    reference: Literal["paper", "code"] = Field(
        "paper",
        description="paper: KL with batchmean reduction and a detached teacher (last exit); code: the official "
        "code's KLDivLoss() 'mean' reduction, teacher not detached, int() channel counts, KD_gamma 0 and "
        "seeded-permutation levels by default",
    )

    @property
    def gamma(self) -> float:
        """``kd_gamma``, its null resolved per ``reference``."""
        if self.kd_gamma is not None:
            return self.kd_gamma
        return 0.0 if self.reference == "code" else SCALEFL_PAPER_KD_GAMMA

    @property
    def assignment(self) -> str:
        """``assign``, its null resolved per ``reference``."""
        if self.assign is not None:
            return self.assign
        return "permutation" if self.reference == "code" else "by_capacity"

    @model_validator(mode="after")
    def _levels_ok(self) -> ScaleFLConfig:
        if self.levels is not None:
            if not self.levels:
                raise ValueError("levels must not be empty")
            keys = [(lv.width, lv.depth) for lv in self.levels]
            if any(a[0] > b[0] or a[1] > b[1] for a, b in zip(keys, keys[1:], strict=False)):
                raise ValueError("levels must be ordered smallest first (non-decreasing width and depth)")
        if self.shares is not None:
            n = len(self.levels) if self.levels is not None else None
            if n is not None and len(self.shares) != n:
                raise ValueError(f"shares has {len(self.shares)} entries for {n} levels")
            if any(x < 0 for x in self.shares) or sum(self.shares) <= 0:
                raise ValueError("shares must be non-negative and not all zero")
            if self.reference == "code" and sum(self.shares) > 1 + 1e-9:
                raise ValueError(
                    f"shares sum to {sum(self.shares):g}; reference: code uses them as the code's client_split_ratios "
                    "(fractions of the devices, summing to at most 1): write them as fractions"
                )
        return self


@builtin("iotfl_sim.algorithms.flexfl:FlexFL")
class FlexFLConfig(MethodConfig):
    """FlexFL (Chen et al., APoZ-guided flexible pruning; ``iotfl_sim.algorithms.flexfl``)."""

    name: Literal["flexfl"]
    reference: Literal["paper", "code"] = Field(
        "paper",
        description="paper: Algorithm 1's search and eq. 4's teachers as written; code: the official code's search "
        "(gamma 1..199, window +-0.05, fraction over the prunable groups only) and self-KD teachers (all smaller "
        "pool models); the KL reduction is kd_reduction, in both",
    )
    targets: list[float] = Field(
        default_factory=lambda: [0.25, 0.5, 1.0],
        description="parameter fractions of the level models M1, M2, M3 (the last is the global model)",
    )
    adaptive_gamma: float = Field(0.1, ge=0, lt=1, description="Gamma: an adaptive model M_i' has target - Gamma")
    search_epsilon: float = Field(
        0.01, gt=0, lt=1, description="paper search: stop at |p - size(M')| <= epsilon (fraction of size(M))"
    )
    search_step: float = Field(0.01, gt=0, description="paper search: the step xi of gamma")
    code_tolerance: float = Field(0.05, gt=0, lt=1, description="code search: the window target +- tolerance")
    proxy_fraction: float = Field(0.01, ge=0, lt=1, description="share of the train set held out as the proxy set")
    proxy_train_share: float = Field(0.8, gt=0, lt=1, description="part of the proxy set used for pretraining")
    pretrain_epochs: int = Field(100, ge=0, le=MAX_EPOCHS, description="server pretraining epochs on the proxy train part (code: 100)")
    pretrain_optimizer: Literal["adam", "sgd"] = Field("adam", description="pretraining optimizer (code: Adam)")
    pretrain_lr: float = Field(1e-3, gt=0, description="pretraining learning rate (code: Adam 1e-3)")
    pretrain_batch_size: int = Field(50, ge=1, le=MAX_BATCH, description="pretraining batch size (code: local_bs = 50)")
    apoz_mode: Literal["eval", "train"] = Field("eval", description="module mode of the APoZ forward pass (code: eval)")
    self_kd: bool = Field(True, description="ablation 'w/o self-KD' when false (plain CE)")
    kd_lambda: float = Field(10.0, ge=0, description="lambda of eq. 4")
    kd_temperature: float = Field(3.0, gt=0, description="tau of eq. 4")
    kd_reduction: Literal["mean", "batchmean"] = Field(
        "mean",
        description="reduction of each KL term of eq. 4: mean (the official code's KLDivLoss(), divided by batch x "
        "classes: the weight under which lambda = 10 was tuned and the paper's numbers were produced) or batchmean "
        "(the true KL per sample, C times stronger with C classes)",
    )
    adaptive_models: bool = Field(True, description="ablation 'w/o adaptive model' when false (pool M1, M2, M3)")
    apoz: bool = Field(
        True,
        description="ablation 'w/o APoZ' when false: every layer's APoZ is replaced by 0.5, so only the "
        "adjustment weight shapes the rates (uniform rates when adjustment is off too)",
    )
    adjustment: bool = Field(True, description="ablation 'w/o adjustment' when false (AdjW = 1)")
    weighting: Literal["data", "count"] = Field("data", description="aggregation weights (paper: data size)")

    @field_validator("targets")
    @classmethod
    def _targets_sorted(cls, v: list[float]) -> list[float]:
        if not v or any(not 0 < t <= 1 for t in v) or sorted(v) != v or len(set(v)) != len(v):
            raise ValueError(f"targets must be distinct, ascending, in (0, 1]; got {v}")
        return v


class _Prototypes(MethodConfig):
    """Prototype models S, M, L shared by AdapterFL, FedBase and FedDF."""

    prototypes: list[AdapterPrototype] = Field(
        default_factory=lambda: ["cnn2", "mobilenetv2", "resnet18"],
        description="prototype families S, M, L (paper: 2-conv CNN, MobileNetV2, ResNet18; second group "
        "MobileNetV2, ResNet18, VGG16)",
    )
    width: float = Field(1.0, gt=0, le=1, description="width rate applied to every prototype (1: the paper's models)")
    weighting: Literal["data", "count"] = Field(
        "count", description="aggregation weights (AdapterFL eqs. 6-7: plain means over clients; data: by data size)"
    )
    fit: Literal["params", "memory"] = Field(
        "params",
        description="which models a device fits: params (Algorithm 1's |m| <= Gamma_k with |m| the number of "
        "parameters: capacity Gamma_k = declared free memory / beta, beta = the largest training bytes per "
        "parameter among the pool's models; models ordered by parameters, as the paper's S < M < L) or memory "
        "(each model's measured training memory against the declared free memory, ordered by it)",
    )

    @field_validator("prototypes")
    @classmethod
    def _three(cls, v: list[str]) -> list[str]:
        if len(v) != 3:
            raise ValueError(f"give exactly three prototypes (S, M, L), got {len(v)}")
        return v


@builtin("iotfl_sim.algorithms.adapterfl:AdapterFL")
class AdapterFLConfig(_Prototypes):
    """AdapterFL (Liu et al.): partition, reassembly, block-wise aggregation (``iotfl_sim.algorithms.adapterfl``)."""

    name: Literal["adapterfl"]
    extractor: Literal["S", "M", "L"] = Field(
        "L", description="whose feature-extraction block the group shares (the paper prefers the large prototype)"
    )
    cuts: list[Annotated[int, Field(le=MAX_INDEX)]] | None = Field(
        None,
        description="stages in each prototype's feature-extraction block (S, M, L); null: chosen by the CKA "
        "criterion (eq. 3). Table II's sizes match cnn2 1, mobilenetv2 4, resnet18 3",
    )
    probe_samples: int = Field(256, ge=4, le=MAX_SAMPLES, description="probe batch for CKA (from the proxy set, else the train set)")
    proxy_fraction: float = Field(0.0, ge=0, lt=1, description="share of the train set held out on the server")

    @model_validator(mode="after")
    def _cuts_ok(self) -> AdapterFLConfig:
        if self.cuts is not None:
            if len(self.cuts) != 3:
                raise ValueError(f"cuts: give one cut per prototype (3), got {len(self.cuts)}")
            for fam, cut in zip(self.prototypes, self.cuts, strict=True):
                if cut not in candidate_cuts(fam):
                    raise ValueError(f"cuts: {cut} is not a cut of {fam} (candidates {candidate_cuts(fam)})")
        return self


@builtin("iotfl_sim.algorithms.adapterfl:FedBase")
class FedBaseConfig(AdapterFLConfig):
    """FedBase: AdapterFL's reassembled models, each aggregated on its own (no shared block)."""

    name: Literal["fedbase"]  # type: ignore[assignment]


@builtin("iotfl_sim.algorithms.feddf:FedDF")
class FedDFConfig(_Prototypes):
    """FedDF (Lin et al., NeurIPS 2020) over the S, M, L prototypes (``iotfl_sim.algorithms.feddf``)."""

    name: Literal["feddf"]
    weighting: Literal["data", "count"] = Field("data", description="FedAvg weights before distillation")
    proxy_fraction: float = Field(0.01, gt=0, lt=1, description="share of the train set held out as the proxy set (1%)")
    distill_steps: int = Field(100, ge=0, le=MAX_STEPS, description="server distillation steps per prototype per round")
    distill_batch_size: int = Field(64, ge=1, le=MAX_BATCH)
    distill_lr: float = Field(1e-3, gt=0, description="Adam learning rate (FedDF: 1e-3)")
    temperature: float = Field(1.0, gt=0, description="distillation temperature (FedDF: 1)")
    cosine: bool = Field(True, description="cosine-anneal the distillation learning rate over the steps")


# The server's own data (a class hold-out) and its per-round fine-tuning: FedX's, and the setting FedX gives its
# quantization baselines (Section IV-D: "the server has data, fine-tunes without regularization"). One
# definition each, used by FedXConfig and DAdaQuantConfig.
ProxyClasses = Annotated[
    list[Annotated[int, Field(ge=0, le=MAX_INDEX)]] | None,
    Field(
        description="classes held by the server only (FedX's disjoint split, e.g. CIFAR-10 [8, 9]); every train "
        "sample of these classes goes to the server and none to the devices",
    ),
]
FinetuneLr = Annotated[float, Field(gt=0, description="server fine-tuning learning rate lambda (FedX: SGD 0.01)")]
FinetuneSamples = Annotated[
    int | None,
    Field(
        ge=2,
        le=MAX_SAMPLES,
        description="server samples per fine-tuning, a fresh seeded draw each round (FedX Table IV times fine-tuning "
        "on a fixed sample size); null: all the server's data",
    ),
]
ServerBatchSize = Annotated[
    int, Field(ge=2, le=MAX_BATCH, description="batch size of server pretraining and fine-tuning (FedX: 32)")
]


@builtin("iotfl_sim.algorithms.fedx:FedX")
class FedXConfig(MethodConfig):
    """FedX (Lai, Jiang et al.): nested sub-networks at per-level QSGD bits, server pretraining and regularised
    fine-tuning (``iotfl_sim.algorithms.fedx``). Quantized FedAvg-S/M/L: ``mix: {large: 1}`` (or small / medium),
    ``server_data: false``."""

    name: Literal["fedx"]
    mix: dict[Literal["small", "medium", "large"], float] = Field(
        default_factory=lambda: {"medium": 0.5, "small": 0.5},
        description="share of devices per sub-network (the paper's default: half medium, half small); a device "
        "keeps its sub-network (assigned once, by a seeded permutation of the devices)",
    )
    bits: dict[Literal["small", "medium", "large"], int] = Field(
        default_factory=lambda: {"small": 10, "medium": 8, "large": 8},
        description="QSGD bits q per sub-network for download and upload (2^q intervals; smaller sub-networks get "
        "more bits; the paper's ablation: 8 medium / 10 small on HAR, 9 / 11 on the image sets); 32: float32",
    )
    server_data: bool = Field(
        True, description="false: Quantized FedAvg (no server pretraining or fine-tuning; quantization on the server)"
    )
    fine_tune: bool = Field(True, description="server fine-tuning after aggregation (eq. 5); false: FedX without FT")
    gamma: float = Field(1e-4, ge=0, description="regularisation rate gamma of eq. 5 (paper: 1e-4)")
    finetune_epochs: int = Field(1, ge=0, le=MAX_EPOCHS, description="epochs over the server's data per fine-tuning")
    finetune_lr: FinetuneLr = 0.01
    finetune_samples: FinetuneSamples = 750
    pretrain_epochs: int = Field(5, ge=0, le=MAX_EPOCHS, description="one-time server pretraining epochs on its data")
    pretrain_lr: float = Field(0.01, gt=0, description="pretraining SGD learning rate")
    server_batch_size: ServerBatchSize = 32
    proxy_fraction: float = Field(
        0.1, ge=0, lt=1, description="share of the train set the server holds (all classes) when proxy_classes is null"
    )
    proxy_classes: ProxyClasses = None
    qsgd_bucket: int | None = Field(
        None,
        ge=1,
        le=MAX_BUCKET,
        description="QSGD normalisation: null (the paper's): each tensor by its own L2 norm, one float32 norm per "
        "tensor, no padding; an int: QSGD's buckets of that many values, each with its own norm (8-10 bit "
        "messages then lose almost nothing)",
    )
    system_only_server_samples: int = Field(
        750, ge=0, le=MAX_SAMPLES, description="system-only runs (no data): server samples that pretraining and fine-tuning are priced on"
    )
    assign: Literal["shuffle", "eq2"] = Field(
        "shuffle",
        description="shuffle: mix's shares dealt by a seeded permutation, bits per sub-network (the paper's "
        "experiments); eq2: the paper's selection (eq. 2): per device, the sub-networks named in mix whose "
        "predicted training time is within time_threshold_s, then the (sub-network, q) of least utility drop on "
        "the server's data (mix's shares and bits are then unused)",
    )
    time_threshold_s: float | None = Field(
        10.0,
        gt=0,
        description="eq2: mu_u, seconds of one local round (the paper's example: 10 s), the same for every device; "
        "a device's time is predicted from its declared profile by the simulator's cost model; null: no limit",
    )
    max_bits: int = Field(
        16, ge=1, le=32, description="eq2: q_u^max, the most QSGD bits searched (the paper's example: 16-bit devices)"
    )
    drop_tolerance: float | None = Field(
        None,
        ge=0,
        description="eq2: stop the search at the first (sub-network, q) whose utility drop (accuracy, 0-1) is at "
        "most this, visiting larger sub-networks first and fewer bits first (the paper's early termination); "
        "null: the exact argmin of eq. 2",
    )

    @field_validator("mix")
    @classmethod
    def _mix_ok(cls, v: dict[str, float]) -> dict[str, float]:
        if not v or any(x < 0 for x in v.values()) or sum(v.values()) <= 0:
            raise ValueError("mix needs at least one sub-network with a positive share")
        return v

    @field_validator("bits")
    @classmethod
    def _bits_ok(cls, v: dict[str, int]) -> dict[str, int]:
        if any(not 1 <= b <= 32 for b in v.values()):
            raise ValueError(f"bits must be in [1, 32], got {v}")
        return v

    @model_validator(mode="after")
    def _eq2_needs_server_data(self) -> FedXConfig:
        if self.assign == "eq2" and not (self.server_data and (self.proxy_fraction > 0 or self.proxy_classes)):
            raise ValueError(
                "assign: eq2 scores the sub-networks on the server's data: set server_data: true and proxy_fraction "
                "> 0 (or proxy_classes), or use assign: shuffle"
            )
        return self


@builtin("iotfl_sim.algorithms.dadaquant:DAdaQuant")
class DAdaQuantConfig(MethodConfig):
    """DAdaQuant (Hönig, Zhao, Mullins, ICML 2022): FedAvg with Federated-QSGD uploads whose level q adapts over
    time and clients (``iotfl_sim.algorithms.dadaquant``)."""

    name: Literal["dadaquant"]
    adapt: Literal["both", "time", "clients", "none"] = Field(
        "both",
        description="both: DAdaQuant; time: DAdaQuant_time (one level per round); clients: DAdaQuant_clients "
        "(Theorem 1 levels around q_max); none: Federated QSGD at q_max (the static baseline)",
    )
    q_min: int = Field(1, ge=1, le=2**16, description="first level q_1 (intervals per sign; the paper: 1, or q_max / 2 for datasets that need precision early)")
    q_max: int = Field(
        8, ge=1, le=2**16, description="highest level, and the static level of adapt: none / clients (the paper: the lowest "
        "static q of a grid 1, 2, 4, ... at which Federated QSGD matches uncompressed accuracy)",
    )
    psi: float = Field(0.9, ge=0, lt=1, description="weight of the loss moving average (the paper: 0.9)")
    phi: int | None = Field(
        None, ge=1, description="rounds compared for a plateau and held after a doubling; null: a tenth of the rounds (the paper)"
    )
    loss_batch_size: int = Field(
        100, ge=1, le=MAX_BATCH, description="batch size of the pass that computes each client's loss F_k(p_t)"
    )
    proxy_classes: ProxyClasses = None
    finetune_epochs: int = Field(
        0,
        ge=0,
        le=MAX_EPOCHS,
        description="epochs of plain (unregularised) server fine-tuning on the proxy_classes data after each "
        "aggregation: FedX's comparison setting (its Section IV-D); 0: DAdaQuant as its own paper runs it",
    )
    finetune_lr: FinetuneLr = 0.01
    finetune_samples: FinetuneSamples = 750
    server_batch_size: ServerBatchSize = 32

    @model_validator(mode="after")
    def _levels_ordered(self) -> DAdaQuantConfig:
        if self.q_min > self.q_max:
            raise ValueError(f"q_min ({self.q_min}) must not exceed q_max ({self.q_max})")
        if self.finetune_epochs > 0 and not self.proxy_classes:
            raise ValueError(
                "finetune_epochs > 0 fine-tunes on the server's data: name its classes in proxy_classes (FedX's "
                "split, e.g. [4, 5] on HAR), or set finetune_epochs: 0"
            )
        return self


@builtin("iotfl_sim.algorithms.fedprox:FedProx")
class FedProxConfig(MethodConfig):
    name: Literal["fedprox"]
    mu: float = Field(
        0.01, ge=0, le=1e4,
        description="weight of the proximal term (mu/2)||w - w_global||^2 in each device's loss (FedProx: tuned "
        "from {0.001, 0.01, 0.1, 1}; 0 is FedAvg)",
    )  # fmt: skip
    weighting: Literal["data", "count"] = Field("data", description="aggregation weights (data: local data size)")


@builtin("iotfl_sim.algorithms.fedopt:FedOpt")
class FedOptConfig(MethodConfig):
    name: Literal["fedopt"]
    server_optimizer: Literal["adam", "yogi", "adagrad"] = Field(
        "adam", description="the server's update of the averaged client delta (FedAdam, FedYogi, FedAdagrad)"
    )
    server_lr: float = Field(0.01, gt=0, le=1e3, description="server learning rate eta (tune it per task)")
    beta1: float = Field(0.9, ge=0, lt=1, description="first-moment decay beta_1 (paper: 0.9)")
    beta2: float = Field(0.99, ge=0, lt=1, description="second-moment decay beta_2 (paper: 0.99; unused by adagrad)")
    tau: float = Field(1e-3, gt=0, le=1e3, description="adaptivity tau: v starts at tau^2 and tau joins sqrt(v) (paper: 1e-3)")
    weighting: Literal["data", "count"] = Field(
        "data", description="how client deltas are averaged (data: local data size; count: the paper's plain mean)"
    )


def algorithm_problem(algorithm: Strict, *, numerics: str) -> str | None:
    """What makes a method's config unusable in a scenario whose other settings it cannot see by itself (one
    line naming the field and the fix), or None. Each method's rule lives here, beside its config."""
    if isinstance(algorithm, FlexFLConfig) and numerics == "torch" and algorithm.apoz and algorithm.proxy_fraction == 0:
        return (
            "algorithm.proxy_fraction: flexfl's APoZ pretrains on a proxy set, and proxy_fraction 0 holds none; "
            "set proxy_fraction > 0 (e.g. 0.01) or apoz: false"
        )
    return None
