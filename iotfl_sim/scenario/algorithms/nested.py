"""Options of FedAvg, the decoupled baseline, HeteroFL and HeteroFL with an IoT power limit."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from iotfl_sim.scenario.algorithms.base import SEMI_ASYNC_OK, LevelString, PrototypeFamily, _Levels, _Wire


class FedAvgConfig(_Wire):
    name: Literal["fedavg"]
    modes: ClassVar[frozenset[str]] = SEMI_ASYNC_OK | {"hierarchical", "async"}  # async: sim/buffered_async.py
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
    prefer: Literal["on_power"] | None = Field(
        None,
        description="null: uniform selection (FedAvg's); on_power: devices that report being on mains or a charger "
        "first, the others only to fill the round (FedScale-style; needs fleet.reports: [power])",
    )


class DecoupledConfig(_Levels):
    name: Literal["decoupled"]
    modes: ClassVar[frozenset[str]] = SEMI_ASYNC_OK | {"hierarchical"}  # each level averaged on its own at the cloud
    why_not: ClassVar[dict[str, str]] = {
        "async": "its state is one independent model per level, while FedBuff's buffered form (sim/buffered_async.py) "
        "moves a stale update onto one global model by its delta"
    }
    levels: LevelString = Field("a-b-c-d-e", description="which levels get a model of their own, e.g. 'a-b-c'")
    weighting: Literal["data", "count"] = "data"


class HeteroFLConfig(_Levels, _Wire):
    name: Literal["heterofl"]
    modes: ClassVar[frozenset[str]] = SEMI_ASYNC_OK | {"hierarchical", "async"}  # async: sim/buffered_async.py
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


class HeteroFLIoTConfig(HeteroFLConfig):
    """HeteroFL-IoT: HeteroFL under a per-node energy budget, with a per-round selection that keeps the
    configured level mix (``iotfl_sim.algorithms.heterofl_iot``)."""

    name: Literal["heterofl_iot"]  # type: ignore[assignment]
    # async: sim/buffered_async.py; the pacing of ``paced`` in each mode: algorithms/heterofl_iot.py's docstring
    modes: ClassVar[frozenset[str]] = SEMI_ASYNC_OK | {"hierarchical", "async"}
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
