"""Options of the asynchronous methods (FedAsync, FedBuff) and the staleness functions they and semi-asynchronous
rounds share."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from iotfl_sim.scenario.algorithms.base import MethodConfig
from iotfl_sim.scenario.limits import MAX_LR
from iotfl_sim.scenario.profile import Strict


class Staleness(Strict):
    """How much an update that is ``s`` server versions stale counts (Xie et al., FedAsync, Section 5.2):
    constant 1; polynomial (s + 1)^-a; hinge 1 if s <= b else 1 / (a (s - b) + 1). Each is 1 at s = 0."""

    kind: Literal["constant", "polynomial", "hinge"] = Field(
        "polynomial", description="constant: 1; polynomial: (s+1)^-a; hinge: 1 if s <= b else 1/(a(s-b)+1)"
    )
    a: float = Field(0.5, gt=0, le=1e3, description="polynomial exponent, or hinge slope (FedAsync: poly a=0.5; hinge a=10)")
    b: float = Field(4.0, ge=0, le=1e6, description="hinge: staleness up to which an update counts fully (FedAsync: b=4)")

    def weight(self, s: int) -> float:
        """s(staleness) for an update ``s`` versions stale."""
        if s < 0:
            raise ValueError(f"staleness is a count of versions, got {s}")
        if self.kind == "constant":
            return 1.0
        if self.kind == "polynomial":
            return float((s + 1) ** -self.a)
        return 1.0 if s <= self.b else 1.0 / (self.a * (s - self.b) + 1.0)


class _Asynchronous(MethodConfig):
    """A method the server runs asynchronously (``server.mode: async``): everyone trains the full model, devices
    whose declared memory cannot hold it are never selected."""

    modes: ClassVar[frozenset[str]] = frozenset({"async"})
    why_not: ClassVar[dict[str, str]] = {
        "semi_async": "semi_async closes rounds at a deadline, and it has no rounds: its strategy subclasses "
        "iotfl_sim.strategy.Asynchronous",
        "hierarchical": "a hierarchy runs synchronous rounds at every tier, and it has no rounds",
    }


class FedAsyncConfig(_Asynchronous):
    name: Literal["fedasync"]
    alpha: float = Field(
        0.6, gt=0, le=1, description="mixing weight: x <- (1 - alpha_t) x + alpha_t x_new, alpha_t = alpha s(staleness) "
        "(FedAsync: 0.6 robust, 0.9 fast)",
    )  # fmt: skip
    staleness: Staleness = Field(Staleness(), description="the staleness function s (FedAsync's default: polynomial, a=0.5)")
    rho: float = Field(
        0.005, ge=0, le=1e4, description="proximal weight: devices minimise f(x) + rho/2 ||x - x_downloaded||^2 (FedAsync: 0.005)"
    )


class FedBuffConfig(_Asynchronous):
    name: Literal["fedbuff"]
    buffer_size: int = Field(10, ge=1, le=100_000, description="K: client updates per server step (FedBuff: 10)")
    server_lr: float = Field(
        1.0, gt=0, le=MAX_LR, description="eta_g of the server step w <- w - eta_g * (sum of weighted deltas) / K; 1 with "
        "momentum 0 and constant staleness is FedAvg over the buffer",
    )  # fmt: skip
    server_momentum: float = Field(
        0.0, ge=0, lt=1, description="heavy-ball momentum of the server step (FedBuff's released config: 0.9, with a tuned server_lr)"
    )
    staleness: Staleness = Field(
        Staleness(kind="polynomial", a=0.5), description="the staleness weight s (FedBuff: 1/sqrt(1 + staleness))"
    )
