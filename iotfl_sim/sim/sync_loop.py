"""Synchronous rounds (``server.mode: sync``): the server's process, one ``play_round`` per round, top to bottom.

Rounds before the checkpoint a run resumes from are replayed from the tape (the system part only: no training,
aggregation or evaluation); ``sim.semi_async`` adds the updates that missed their round's deadline.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from iotfl_sim.algorithms.base import Outcome
from iotfl_sim.sim.round import MODE_COLUMNS, Round
from iotfl_sim.sim.server_loop import ServerLoop
from iotfl_sim.sim.toolkit import Played, Toolkit, play_round

if TYPE_CHECKING:
    from iotfl_sim.sim.engine import Simulation


class SyncLoop(ServerLoop):
    """The flat synchronous server."""

    columns = MODE_COLUMNS["sync"]
    late: Any = None  # semi_async's late updates (``sim.semi_async.SemiAsyncLoop``)

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.kit = Toolkit(sim)

    def run(self) -> Generator[Any, Any, None]:
        sim, kit = self.sim, self.kit
        for rnd in range(sim.sc.rounds):
            replay = rnd < sim.checkpointing.resume_round
            kit.announce(rnd, replay)
            played = yield from play_round(kit, rnd, replay, self.serve, late=self.late)
            if played is None:
                sim.status.stalled = rnd
                return
            row = kit.row(played.rd, played.outcomes, played.losses)
            row.update(self.mode_columns(played))
            if kit.end_round(rnd, row, replay):
                return

    def serve(self, rd: Round, outcomes: list[Outcome] | None) -> Generator[Any, Any, None]:
        return self.kit.serve(rd)

    def mode_columns(self, played: Played) -> dict[str, Any]:
        return {}
