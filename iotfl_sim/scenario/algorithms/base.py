"""The base of every method's options and the option groups several methods share (levels, QSGD messages,
AdapterFL's prototypes)."""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, Field, field_validator

from iotfl_sim.core.catalog import PROTOTYPE_STAGES
from iotfl_sim.scenario.limits import MAX_BUCKET
from iotfl_sim.scenario.profile import Strict

# The modes a method may run in, the columns of docs/methods_and_modes.md: ``server.mode`` sync (rounds), semi_async
# (rounds whose late updates join a later round's aggregation with a staleness weight) or async (no rounds: each
# update is folded in as it arrives), and hierarchical (``hierarchy:``, device -> gateway -> cloud, sync rounds at
# every tier, ``sim/hierarchy.py``).
MODES: tuple[str, ...] = ("sync", "semi_async", "async", "hierarchical")
# Why a method does not run in a mode it does not declare, unless its options say more (``MethodConfig.why_not``).
WHY_NOT: dict[str, str] = {
    "sync": "it folds each update into the model as it arrives, with no rounds: its strategy subclasses "
    "iotfl_sim.strategy.Asynchronous",
    "semi_async": "its aggregation is not declared to take a late update with a staleness weight, which needs a "
    "weighted average of the updates as algorithms.common.contributions gives",
    "async": "it aggregates in rounds, and its aggregation is not declared to take a stale update moved onto the "
    "current model by its delta (FedBuff's buffered form, sim/buffered_async.py, needs one global model averaged "
    "entry by entry)",
    "hierarchical": "its server does more than average one global model",
}
# the modes of a method whose aggregation is a weighted average of the updates it gets (``algorithms.common.
# contributions``), which a late update joins with its staleness weight
SEMI_ASYNC_OK: frozenset[str] = frozenset({"sync", "semi_async"})


class MethodConfig(Strict):
    """A method's options, as the scenario's ``algorithm:`` block gives them: the base of every method's options
    class (``Strategy.Config``). Fields are validated strictly (an unknown key is an error naming it), each
    with its default and a ``description`` that ``iotfl-sim schema`` shows; ``name`` is the method's name as the
    scenario wrote it (a registered name or an import path)."""

    name: str
    # The modes (of MODES) the method runs in: the one place its capabilities are declared, checked by ``validate``
    # (``Scenario._mode_problem``) and against its strategy at registration (``methods.capability_problem``).
    # semi_async: its aggregation is a weighted average of the updates; hierarchical: its whole changing state is
    # one averaged global model in ``state`` (besides a per-device wire, and what it keeps per gateway itself, keyed
    # by ``FleetView.members``), and its server does nothing but aggregate.
    modes: ClassVar[frozenset[str]] = frozenset({"sync"})
    # why it does not run in a mode it lacks, where more is known than WHY_NOT's general reason
    why_not: ClassVar[dict[str, str]] = {}
    # the spelling of ``modes`` before it: a subclass setting either is read into its ``modes`` when defined
    server_modes: ClassVar[tuple[str, ...] | None] = None
    hierarchical: ClassVar[bool | None] = None

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        own = vars(cls)
        if "server_modes" in own or "hierarchical" in own:
            if "modes" in own:
                raise TypeError(f"{cls.__qualname__}: give modes only (server_modes and hierarchical are its old spelling)")
            server = own.get("server_modes") or [m for m in cls.modes if m != "hierarchical"]
            # hierarchical meant sync rounds at every tier: without sync it never ran
            hierarchical = own.get("hierarchical", "hierarchical" in cls.modes) and "sync" in server
            cls.modes = frozenset(server) | ({"hierarchical"} if hierarchical else frozenset())
        unknown = sorted((set(cls.modes) | set(cls.why_not)) - set(MODES))
        if unknown:
            raise TypeError(f"{cls.__qualname__}: unknown mode {unknown[0]!r} in its modes or why_not (modes: {', '.join(MODES)})")
        if "sync" not in cls.modes and (not cls.modes or "hierarchical" in cls.modes):
            raise TypeError(f"{cls.__qualname__}: modes {sorted(cls.modes)}: give a server mode, and sync with hierarchical")

    @classmethod
    def why_not_in(cls, mode: str) -> str | None:
        """None if the method runs in ``mode``, else the one-line reason it does not."""
        return None if mode in cls.modes else cls.why_not.get(mode, WHY_NOT[mode])

    def held_out_fraction(self) -> float:
        """Share of the train set held out for the server (a proxy set) before the clients' split; 0: none."""
        return 0.0

    def held_out_classes(self) -> list[int] | None:
        """Classes whose every train sample goes to the server and none to the clients (FedX's disjoint split),
        or None; when given, ``held_out_fraction`` does not apply."""
        return None

    def held_out_public_fraction(self) -> float:
        """With ``held_out_classes``: the share of the other classes' train samples the server holds too (public
        data of every class, drawn at random), the clients splitting the rest; 0: none."""
        return 0.0

    def problem(self, *, numerics: str) -> str | None:
        """What makes these options unusable with the rest of the scenario, which they cannot see by themselves
        (one line naming the field and the fix), or None."""
        return None


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
