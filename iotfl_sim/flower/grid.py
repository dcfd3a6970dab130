"""The ``Grid`` a ServerApp is given: Flower's interface, answered by the simulated fleet.

Each call is handed to the simulator (``bridge.AppThread``) and answered at a simulated instant:
``get_node_ids`` lists the nodes selectable now (online, alive, idle), ``wait_for_nodes`` the same once at least
that many are (the earlier ServerApps' client manager: ``flower.legacy``); ``push_messages`` sends each message
now; ``pull_messages`` returns the replies in by the next reply's arrival (waiting for it, in simulated time);
``send_and_receive`` waits for every reply or ``timeout`` simulated seconds. Message ids are derived from the run's
seed and a counter, so they are the same in every run of the same scenario.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from flwr.app import Message, RecordDict
from flwr.serverapp import Grid
from flwr.supercore.run import Run

from iotfl_sim.flower.bridge import AppThread


@dataclass
class NodeIds:
    at_least: int | None = None  # None: server.min_participants


@dataclass
class Push:
    messages: list[Any]


@dataclass
class Pull:
    message_ids: list[str]


@dataclass
class SendReceive:
    messages: list[Any]
    timeout: float | None


class SimulatedGrid(Grid):
    def __init__(self, thread: AppThread, run: Run) -> None:
        self._thread = thread
        self._run = run

    def set_run(self, run: Run) -> None:
        self._run = run

    @property
    def run(self) -> Run:
        return Run(**vars(self._run))

    def create_message(
        self, content: RecordDict, message_type: str, dst_node_id: int, group_id: str, ttl: float | None = None
    ) -> Message:
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> Iterable[int]:
        return self._thread.call(NodeIds())

    def wait_for_nodes(self, at_least: int) -> Iterable[int]:
        """The selectable nodes, once at least ``at_least`` are (in simulated time)."""
        return self._thread.call(NodeIds(max(1, int(at_least))))

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        return self._thread.call(Push(list(messages)))

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return self._thread.call(Pull(list(message_ids)))

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        return self._thread.call(SendReceive(list(messages), timeout))
