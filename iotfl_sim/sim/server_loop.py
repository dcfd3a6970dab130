"""The server loop of a run: one implementation per server mode, chosen once when the run is set up.

A loop is the run's server process (``run``) written with the round toolkit (``sim.toolkit``), and what of it a
checkpoint saves, a resume checks and the run's files report beyond what every mode has. The modes: synchronous
rounds (``sim.sync_loop``), semi-asynchronous rounds (``sim.semi_async``), the asynchronous server
(``sim.async_server``) and the hierarchy of gateways (``sim.hierarchy``); ``Simulation`` picks one when it is set up.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, Protocol

from iotfl_sim.algorithms.base import Wire
from iotfl_sim.sim.round import WeightsCheck


class ServerLoop(Protocol):
    """What the engine, the checkpoints and the run's files ask of the server mode; a loop subclasses it and keeps
    the defaults it has no use for (nothing to save, check or report beyond every mode's)."""

    columns: tuple[str, ...]  # rounds.csv's columns beyond a synchronous round's
    stop_note: str = "at the end of this round"  # where a stop request (Ctrl-C, SIGTERM) is honoured
    between_versions: bool = False  # a checkpoint may be taken between two model versions (``meta.json``'s ``step``)

    def run(self) -> Generator[Any, Any, None]:
        """The server's process on the simulated clock."""
        raise NotImplementedError

    def capture(self) -> dict[str, Any]:
        """A checkpoint's state entries beyond the method's and the RNGs' (e.g. weights of tasks in flight)."""
        return {}

    def restore(self, state: dict[str, Any], check: Callable[[str], WeightsCheck]) -> None:
        """Put ``capture``'s entries of ``state`` back after a resume's replay; ``check(entry)`` checks weights."""

    def digest(self) -> list[float]:
        """Figures of the mode's own that a faithful replay reproduces (added to ``Simulation.digest``)."""
        return []

    def summary(self) -> dict[str, Any]:
        """``summary.json``'s entries of the mode's own."""
        return {}

    def wire_for(self, device: int, wire: Wire | None) -> Wire | None:
        """The wire that prices ``device``'s messages: the method's own (``wire``), or its gateway's copy."""
        return wire
