"""Options of AdaptiveFL, ScaleFL and FlexFL (submodels pruned in width and depth)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from iotfl_sim.scenario.algorithms.base import SEMI_ASYNC_OK, MethodConfig
from iotfl_sim.scenario.limits import MAX_BATCH, MAX_EPOCHS, MAX_INDEX, MAX_LR
from iotfl_sim.scenario.profile import Strict


class AdaptiveFLConfig(MethodConfig):
    """AdaptiveFL (Jia et al., DAC 2024): fine-grained width pruning (r_w, I), RL client selection
    (``iotfl_sim.algorithms.adaptivefl``)."""

    # hierarchical: its RL tables hold a row per device and a gateway selects and observes only its own devices, so
    # one fleet-wide table learning from every gateway round is each gateway's Algorithm 1 over its devices
    modes: ClassVar[frozenset[str]] = SEMI_ASYNC_OK | {"hierarchical", "async"}  # async: sim/buffered_async.py

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


class ScaleFLConfig(MethodConfig):
    """ScaleFL (Ilhan et al., CVPR 2023); see ``iotfl_sim.algorithms.scalefl``."""

    # hierarchical: its changing state is one global model averaged by prefix (levels fixed at set-up), and its
    # distillation start counts the rounds it sees (gateway rounds under a hierarchy, as ``ctx.rounds`` does; model
    # versions asynchronously, in FedBuff's buffered form: sim/buffered_async.py)
    modes: ClassVar[frozenset[str]] = SEMI_ASYNC_OK | {"hierarchical", "async"}

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


class FlexFLConfig(MethodConfig):
    """FlexFL (Chen et al., APoZ-guided flexible pruning; ``iotfl_sim.algorithms.flexfl``)."""

    # hierarchical: its changing state is one global model averaged by prefix (it prunes once, at set-up, and never
    # fine-tunes), which a gateway's copy holds as a flat server's does
    modes: ClassVar[frozenset[str]] = SEMI_ASYNC_OK | {"hierarchical", "async"}  # async: sim/buffered_async.py

    name: Literal["flexfl"]
    reference: Literal["paper", "code"] = Field(
        "paper",
        description="paper: Algorithm 1's search and eq. 4's teachers as written; code: the official code's search "
        "(gamma 1..199, window +-0.05, fraction over the prunable groups only), int(C x rate) channels exactly (a "
        "searched rate giving some layer 0 channels is refused; paper: at least one) and self-KD teachers (all "
        "smaller pool models); the KL reduction is kd_reduction, in both",
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
    pretrain_lr: float = Field(1e-3, gt=0, le=MAX_LR, description="pretraining learning rate (code: Adam 1e-3)")
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

    def held_out_fraction(self) -> float:
        return self.proxy_fraction

    def problem(self, *, numerics: str) -> str | None:
        if numerics == "torch" and self.apoz and self.proxy_fraction == 0:
            return (
                "algorithm.proxy_fraction: flexfl's APoZ pretrains on a proxy set, and proxy_fraction 0 holds none; "
                "set proxy_fraction > 0 (e.g. 0.01) or apoz: false"
            )
        return None

