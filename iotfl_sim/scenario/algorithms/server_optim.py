"""Options of FedProx and FedOpt."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from iotfl_sim.scenario.algorithms.base import SEMI_ASYNC_OK, MethodConfig
from iotfl_sim.scenario.limits import MAX_LR


class FedProxConfig(MethodConfig):
    name: Literal["fedprox"]
    modes: ClassVar[frozenset[str]] = SEMI_ASYNC_OK | {"hierarchical", "async"}  # async: sim/buffered_async.py
    mu: float = Field(
        0.01, ge=0, le=1e4,
        description="weight of the proximal term (mu/2)||w - w_global||^2 in each device's loss (FedProx: tuned "
        "from {0.001, 0.01, 0.1, 1}; 0 is FedAvg)",
    )  # fmt: skip
    weighting: Literal["data", "count"] = Field("data", description="aggregation weights (data: local data size)")


class FedOptConfig(MethodConfig):
    name: Literal["fedopt"]
    # hierarchical: the optimizer at the cloud; async: it steps once per buffer (sim/buffered_async.py)
    modes: ClassVar[frozenset[str]] = SEMI_ASYNC_OK | {"hierarchical", "async"}
    server_optimizer: Literal["adam", "yogi", "adagrad"] = Field(
        "adam", description="the server's update of the averaged client delta (FedAdam, FedYogi, FedAdagrad)"
    )
    server_lr: float = Field(0.01, gt=0, le=MAX_LR, description="server learning rate eta (tune it per task)")
    beta1: float = Field(0.9, ge=0, lt=1, description="first-moment decay beta_1 (paper: 0.9)")
    beta2: float = Field(0.99, ge=0, lt=1, description="second-moment decay beta_2 (paper: 0.99; unused by adagrad)")
    tau: float = Field(1e-3, gt=0, le=1e3, description="adaptivity tau: v starts at tau^2 and tau joins sqrt(v) (paper: 1e-3)")
    weighting: Literal["data", "count"] = Field(
        "data", description="how client deltas are averaged (data: local data size; count: the paper's plain mean)"
    )
