"""What the run put on the air: bytes each way, bytes of unused updates, model sizes sent and used back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Traffic:
    """Cumulative figures over the run (``rounds.csv``'s byte columns, ``summary.json``, the resume digest).

    ``wasted``: bytes downloaded and uploaded for tasks whose update the server did not use (failed, dropped at
    the deadline, surplus; a late upload when it lands). ``params_sent`` / ``params_back``: model sizes
    (parameters) dispatched and accepted back, for AdaptiveFL's communication waste rate. ``resent``: bytes put on
    the air again for lost packets (their time and energy are in the transfers').
    """

    down: float = 0.0
    up: float = 0.0
    wasted: float = 0.0
    params_sent: float = 0.0
    params_back: float = 0.0
    resent: float = 0.0  # bytes sent again after a packet was lost (network.loss, network.link)

    def downloaded(self, task: Any, nbytes: float) -> None:
        """A task's model goes on the air to its device (it counts as sent from here on)."""
        self.down += nbytes
        task.wire_bytes += nbytes
        task.sent = True

    def uploaded(self, task: Any, nbytes: float) -> None:
        """A task's update has landed: after its round closed, its bytes were for nothing."""
        self.up += nbytes
        if task.round_over:
            self.wasted += nbytes
        else:
            task.wire_bytes += nbytes

    def repriced_upload(self, real: float, priced: float) -> None:
        """An upload's real encoded size replaces the size priced at dispatch (quantized wires)."""
        self.up += real - priced

    def comm_waste(self, sent: float, back: float, unused_wire_bytes: float) -> dict[str, float | None]:
        """A round's columns: AdaptiveFL's communication waste rate, 1 - sum size(returned) / sum size(sent), in
        parameters (the round's and the run's), and ``bytes_wasted`` (cumulative)."""
        self.wasted += unused_wire_bytes
        self.params_sent += sent
        self.params_back += back
        return {
            "comm_waste": 1.0 - back / sent if sent > 0 else None,
            "comm_waste_cum": self.waste_rate(),
            "bytes_wasted": self.wasted,
        }

    def waste_rate(self) -> float | None:
        """The run's communication waste rate so far (None before any model was sent)."""
        return 1.0 - self.params_back / self.params_sent if self.params_sent > 0 else None
