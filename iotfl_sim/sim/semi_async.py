"""Semi-synchronous rounds (``server.mode: semi_async``): a round closes at its deadline as a synchronous one does,
but a task still running then is not lost: when its update arrives it joins the aggregation of the first round to
close after it, weighted by the staleness function of the rounds it missed (``server.staleness``).

Its weights are the ones its device downloaded in its own round (captured at dispatch), its seed and learning
rate those of its own round; its staleness is the number of aggregations between its round's and the one it joins.
A late update counts in its own round's ``failed_deadline`` (it missed that deadline) and in the
``updates_applied`` and staleness columns of the round it joins; methods that aggregate a weighted average of
the updates (``"semi_async"`` in ``MethodConfig.modes``) scale its weight by the staleness function.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from iotfl_sim.algorithms.base import Outcome
from iotfl_sim.scenario.algorithms import Staleness
from iotfl_sim.sim.learning import TrainTask
from iotfl_sim.sim.round import MODE_COLUMNS, Task, WeightsCheck, capture_weights, restore_weights
from iotfl_sim.sim.sync_loop import SyncLoop
from iotfl_sim.sim.toolkit import Played

if TYPE_CHECKING:
    from iotfl_sim.sim.engine import Simulation


@dataclass
class LateUpdates:
    """The tasks that missed their round's deadline, until their update joins a later round (or they fail)."""

    staleness: Staleness
    pending: list[Task] = field(default_factory=list)  # missed their round, still running or arrived since
    count: int = 0  # client updates folded in so far, fresh and late

    def missed(self, tasks: list[Task]) -> None:
        """After a round closed: its tasks still running will be taken when they arrive."""
        self.pending.extend(t for t in tasks if t.status is None)

    def arrived(self, rnd: int) -> list[TrainTask]:
        """The late updates that arrived by now, as tasks to train for round ``rnd``'s aggregation (in arrival
        order); pending tasks that failed meanwhile are forgotten."""
        done = sorted((t for t in self.pending if t.status == "completed"), key=lambda t: (t.finished_at, t.rnd))
        self.pending = [t for t in self.pending if t.status is None]
        out = []
        for t in done:
            s = rnd - t.rnd
            outcome = Outcome(t.assignment, "completed", t.trained, t.finished_at)
            out.append(TrainTask(outcome, t.rnd, t.base, s, self.staleness.weight(s), t.upload_bytes))
        return out

    def applied(self, rnd: int, outcomes: list[Outcome], late: list[TrainTask], aggregated: bool, log: Callable[..., None]) -> dict[str, Any]:
        """Log each update round ``rnd`` folded in (when it ``aggregated``) with its staleness; the round's
        staleness columns (``sim.round.MODE_COLUMNS``); fresh updates are 0 rounds stale."""
        fresh = [o for o in outcomes if o.status == "completed"]
        if aggregated:
            for o in fresh:
                log(rnd, o.assignment.device, "apply", staleness=0, version=rnd + 1)
            for t in late:
                log(t.rnd, t.outcome.assignment.device, "apply", staleness=t.staleness, version=rnd + 1)
        stale = [0] * len(fresh) + [t.staleness for t in late] if aggregated else []
        self.count += len(stale)
        return {
            "updates_applied": self.count,
            "staleness_mean": sum(stale) / len(stale) if stale else None,
            "staleness_max": max(stale) if stale else None,
        }

    def captured(self) -> dict[str, Any]:
        return capture_weights(self.pending)

    def restore(self, saved: Any, check: WeightsCheck | None = None) -> None:
        restore_weights(self.pending, saved, check)


class SemiAsyncLoop(SyncLoop):
    """Synchronous rounds whose late updates join a later round."""

    columns = MODE_COLUMNS["semi_async"]

    def __init__(self, sim: Simulation) -> None:
        super().__init__(sim)
        self.late = LateUpdates(sim.sc.server.staleness)

    def mode_columns(self, played: Played) -> dict[str, Any]:
        sim = self.sim
        columns = self.late.applied(played.rd.rnd, played.outcomes, played.late, played.aggregated, sim.log)
        self.late.missed(played.rd.tasks)
        return columns

    def capture(self) -> dict[str, Any]:
        return {"late": self.late.captured()}  # the weights of the tasks that missed their round

    def restore(self, state: dict[str, Any], check: Callable[[str], WeightsCheck]) -> None:
        self.late.restore(state.get("late"), check("late"))
