"""A round-based averaging method run asynchronously (``server.mode: async`` for a method whose options declare
``async`` beside ``sync``): FedBuff's buffer (Nguyen et al., AISTATS 2022) over the method's own aggregation.

The asynchronous server (``sim.async_server``) asks for three things a round-based method does not have;
``BufferedForm`` answers them from what it does have:

- ``buffer_size``: ``server.buffer_size`` updates make a model version (default: the selection size, the updates
  a synchronous round aggregates).
- ``select_some(wave, view, rng, k)``: the method's own ``select`` with ``k`` as its selection size (the context's
  ``clients_per_round``, set for that call only), so each device gets the level, submodel and bits the method
  would give it in a round; a method that returns more than ``k`` anyway keeps its first ``k``. For that call the
  context's ``run_left`` (``algorithms.base.RunLeft``) also says what is left of the run: the updates it still
  needs and the tasks in flight (a method that paces a budget over the run, HeteroFL-IoT's ``paced``, reads it).
- ``apply(version, updates)``: an update trained from an older model version is moved onto the model of now by its
  delta, scaled by the staleness function ``server.staleness`` of the versions it missed
  (``fl.aggregate.rebase``: current slice + s(staleness) x (trained - downloaded)); a fresh update (staleness 0)
  is used as it is. The method then aggregates the buffer as it aggregates a round. For an aggregation that averages
  each entry over the updates holding it (FedAvg, HeteroFL's nested levels) this is FedBuff's step with a server
  learning rate of 1, x <- x + mean_i s_i (y_i - x_i), per entry over the updates that hold it. The updates are
  folded in order of device (as a round's are, its selection being sorted by device), so that with
  ``dispatch: after_update`` and ``concurrency`` = ``buffer_size`` = the selection size, on a fleet where no task
  fails, every version is the synchronous round of the same number, bit for bit (``tests/test_buffered_async.py``).

The method keeps its whole state, its checkpoints and its evaluation: the buffer and the versions are the
server's (``sim.async_server``), the numerics the method's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from iotfl_sim.algorithms.base import Assignment, Asynchronous, FleetView, RunLeft, Strategy, Update
from iotfl_sim.fl.aggregate import rebase


class BufferedForm:
    """The ``algorithms.base.Asynchronous`` interface of a round-based ``strategy`` (module docstring)."""

    def __init__(self, strategy: Strategy, sc: Any, run_left: Callable[[], RunLeft] | None = None) -> None:
        self.strategy = strategy
        self.size = sc.server.buffer_size or sc.selection_size()
        self.staleness = sc.server.staleness
        self.run_left = run_left  # the server's account of what is left of the run, asked at each wave

    def buffer_size(self) -> int:
        return self.size

    def select_some(self, wave: int, fleet: FleetView, rng: np.random.Generator, k: int) -> list[Assignment]:
        strategy = self.strategy
        ctx = strategy.c
        left = None if self.run_left is None else self.run_left()
        strategy.ctx = replace(ctx, clients_per_round=k, run_left=left)
        try:
            return strategy.select(wave, fleet, rng)[:k]
        finally:
            strategy.ctx = ctx

    def apply(self, version: int, updates: list[Update]) -> None:
        moved = []
        for u in sorted(updates, key=lambda u: u.assignment.device):
            if u.staleness > 0:
                assert u.base is not None, "the engine passes each update's downloaded weights"
                weight = self.staleness.weight(u.staleness)
                u = replace(u, state=rebase(self.strategy.payload(u.assignment), u.base, u.state, weight))
            moved.append(u)
        self.strategy.aggregate(version - 1, moved)


def asynchronous_form(
    strategy: Strategy, sc: Any, run_left: Callable[[], RunLeft] | None = None
) -> Asynchronous | BufferedForm:
    """What the asynchronous server drives: the method itself when it is asynchronous (FedAsync, FedBuff), else its
    buffered form (told what is left of the run by ``run_left``)."""
    return strategy if isinstance(strategy, Asynchronous) else BufferedForm(strategy, sc, run_left)
