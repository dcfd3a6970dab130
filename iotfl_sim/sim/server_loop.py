"""The server loop of a run: one implementation per server mode, chosen once when the run is set up.

A loop is the run's server process (``run``) written with the round toolkit (``sim.toolkit``), and what of it a
checkpoint saves, a resume checks and the run's files report beyond what every mode has. The modes: synchronous
rounds (``sim.sync_loop``), semi-asynchronous rounds (``sim.semi_async``), the asynchronous server
(``sim.async_server``) and the hierarchy of gateways (``sim.hierarchy``).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, Protocol

from iotfl_sim.sim.round import WeightsCheck

if TYPE_CHECKING:
    from iotfl_sim.sim.engine import Simulation


class ServerLoop(Protocol):
    """What the engine, the checkpoints and the run's files ask of the server mode."""

    columns: tuple[str, ...]  # rounds.csv's columns beyond a synchronous round's
    stop_note: str  # where a stop request (Ctrl-C, SIGTERM) is honoured, in the note printed then
    between_versions: bool  # a checkpoint may be taken between two model versions (``meta.json``'s ``step``)

    def run(self) -> Generator[Any, Any, None]:
        """The server's process on the simulated clock."""

    def capture(self) -> dict[str, Any]:
        """A checkpoint's state entries beyond the method's and the RNGs' (e.g. weights of tasks in flight)."""

    def restore(self, state: dict[str, Any], check: Callable[[str], WeightsCheck]) -> None:
        """Put ``capture``'s entries of ``state`` back after a resume's replay; ``check(entry)`` checks weights."""

    def digest(self) -> list[float]:
        """Figures of the mode's own that a faithful replay reproduces (added to ``Simulation.digest``)."""

    def summary(self) -> dict[str, Any]:
        """``summary.json``'s entries of the mode's own."""


def make_loop(sim: Simulation) -> ServerLoop:
    """The loop of the run's server mode (``server.mode``, and ``hierarchy`` which runs synchronous rounds)."""
    from iotfl_sim.sim.async_server import AsyncServer
    from iotfl_sim.sim.hierarchy import GatewayTier
    from iotfl_sim.sim.semi_async import SemiAsyncLoop
    from iotfl_sim.sim.sync_loop import SyncLoop

    if sim.sc.hierarchy is not None:
        return GatewayTier(sim)
    mode = sim.sc.server.mode
    if mode == "async":
        return AsyncServer(sim)
    if mode == "semi_async":
        return SemiAsyncLoop(sim)
    return SyncLoop(sim)
