"""Options of FedX and DAdaQuant (quantized messages, server-side data)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from iotfl_sim.scenario.algorithms.base import SEMI_ASYNC_OK, MethodConfig
from iotfl_sim.scenario.limits import MAX_BATCH, MAX_BUCKET, MAX_EPOCHS, MAX_INDEX, MAX_LR, MAX_SAMPLES


def _classes_named_once(v: list[int] | None) -> list[int] | None:
    if v is not None and not v:
        raise ValueError("[] names no class: name the classes the server holds (e.g. [8, 9]), or null for none")
    if v is not None and (twice := sorted({c for c in v if v.count(c) > 1})):
        raise ValueError(f"class {twice[0]} is named twice: name each class once")
    return v


# The server's own data (a class hold-out) and its per-round fine-tuning: FedX's, and the setting FedX gives its
# quantization baselines (Section IV-D: "the server has data, fine-tunes without regularization"). One
# definition each, used by FedXConfig and DAdaQuantConfig.
ProxyClasses = Annotated[
    list[Annotated[int, Field(ge=0, le=MAX_INDEX)]] | None,
    AfterValidator(_classes_named_once),
    Field(
        description="classes held by the server only (FedX's disjoint split, e.g. CIFAR-10 [8, 9]); every train "
        "sample of these classes goes to the server and none to the devices",
    ),
]
PublicFraction = Annotated[
    float,
    Field(
        ge=0,
        lt=1,
        description="with proxy_classes: share of the other classes' train samples the server holds too, drawn at "
        "random (public data of every class, as FedX pretrains HAR-Wild on public HAR-UCI, fedx.txt:205, and scores "
        "eq. 2 on it); the devices split the rest; 0: the server holds only proxy_classes",
    ),
]
_PUBLIC_NEEDS_CLASSES = (
    "public_fraction > 0 adds public samples to the server's classes: name them in proxy_classes, or set public_fraction: 0"
)
UTILITY_TEST_HELP = (
    "devices: add acc_devices, the mean over devices of each device's accuracy on its own test data (FedX's utility, "
    "fedx.txt:213; each device's test data follows its own label distribution plus the server's classes at their "
    "test share: iotfl_sim.algorithms.device_test); global: only the whole test set's acc_<model> columns"
)
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


class FedXConfig(MethodConfig):
    """FedX (Lai, Jiang et al.): nested sub-networks at per-level QSGD bits, server pretraining and regularised
    fine-tuning (``iotfl_sim.algorithms.fedx``). Quantized FedAvg-S/M/L: ``mix: {large: 1}`` (or small / medium),
    ``server_data: false``."""

    # hierarchical: the fine-tuning at the cloud; async: after each buffered server step (sim/buffered_async.py)
    modes: ClassVar[frozenset[str]] = SEMI_ASYNC_OK | {"hierarchical", "async"}

    name: Literal["fedx"]
    mix: dict[Literal["small", "medium", "large"], float] = Field(
        default_factory=lambda: {"medium": 0.5, "small": 0.5},
        description="share of devices per sub-network, the shares summing to 1 (the paper's default: half medium, half small); a device "
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
    pretrain_lr: float = Field(0.01, gt=0, le=MAX_LR, description="pretraining SGD learning rate")
    server_batch_size: ServerBatchSize = 32
    proxy_fraction: float = Field(
        0.1, ge=0, lt=1, description="share of the train set the server holds (all classes) when proxy_classes is null"
    )
    proxy_classes: ProxyClasses = None
    public_fraction: PublicFraction = 0.0
    utility_test: Literal["devices", "global"] = Field("devices", description=UTILITY_TEST_HELP)
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
    def _options_agree(self) -> FedXConfig:
        if self.public_fraction > 0 and not self.proxy_classes:
            raise ValueError(_PUBLIC_NEEDS_CLASSES)
        if self.assign == "shuffle" and abs((total := sum(self.mix.values())) - 1.0) > 1e-6:
            raise ValueError(
                f"mix: the shares sum to {total:g}; they are the shares of the devices per sub-network: make them "
                "sum to 1 (with assign: eq2 only the names count)"
            )
        if self.assign == "eq2" and not (self.server_data and (self.proxy_fraction > 0 or self.proxy_classes)):
            raise ValueError(
                "assign: eq2 scores the sub-networks on the server's data: set server_data: true and proxy_fraction "
                "> 0 (or proxy_classes), or use assign: shuffle"
            )
        return self

    def held_out_fraction(self) -> float:
        return self.proxy_fraction

    def held_out_classes(self) -> list[int] | None:
        return self.proxy_classes

    def held_out_public_fraction(self) -> float:
        return self.public_fraction



class DAdaQuantConfig(MethodConfig):
    """DAdaQuant (Hönig, Zhao, Mullins, ICML 2022): FedAvg with Federated-QSGD uploads whose level q adapts over
    time and clients (``iotfl_sim.algorithms.dadaquant``)."""

    # hierarchical: the level schedule at the cloud; async: one step per buffered server step (sim/buffered_async.py)
    modes: ClassVar[frozenset[str]] = SEMI_ASYNC_OK | {"hierarchical", "async"}

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
    public_fraction: PublicFraction = 0.0
    utility_test: Literal["devices", "global"] = Field(
        "global", description=UTILITY_TEST_HELP + " (global by default: DAdaQuant's own paper scores the test set)"
    )
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
        if self.public_fraction > 0 and not self.proxy_classes:
            raise ValueError(_PUBLIC_NEEDS_CLASSES)
        if self.q_min > self.q_max:
            raise ValueError(f"q_min ({self.q_min}) must not exceed q_max ({self.q_max})")
        if self.finetune_epochs > 0 and not self.proxy_classes:
            raise ValueError(
                "finetune_epochs > 0 fine-tunes on the server's data: name its classes in proxy_classes (FedX's "
                "split, e.g. [4, 5] on HAR), or set finetune_epochs: 0"
            )
        return self

    def held_out_classes(self) -> list[int] | None:
        return self.proxy_classes

    def held_out_public_fraction(self) -> float:
        return self.public_fraction
