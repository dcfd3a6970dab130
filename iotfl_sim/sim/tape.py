"""What the strategy told the engine, in the order it was asked: the tape a resumed run replays.

A checkpoint cannot hold the SimPy processes in flight at a round boundary (a late upload, a transfer
through a shared gateway, a LoRaWAN duty-cycle wait are generator frames). It holds the strategy's state
and this tape instead; ``--resume`` rebuilds the run from its scenario and replays the system part of the
rounds before the checkpoint with the strategy's recorded answers (selections, device-side adaptations,
message sizes, server work, the real sizes of quantized uploads), which costs what a system-only run
costs. Every random draw comes from a stream keyed by (seed, concern, device, round), so the replay
retraces the fleet, its batteries, memory, links and availability exactly; the checkpoint's digest of
the fleet state proves it. Training, evaluation and aggregation are skipped during the replay: the
strategy's state after the checkpoint's round is loaded instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

KINDS = ("select", "serve", "adapt", "wire", "receive")


class Tape:
    def __init__(self) -> None:
        self.seq: dict[str, list[Any]] = {k: [] for k in KINDS}
        self.pos: dict[str, int] = dict.fromkeys(KINDS, 0)
        self.saved: dict[str, int] = dict.fromkeys(KINDS, 0)  # entries already written to a tape chunk

    @property
    def replaying(self) -> bool:
        return any(self.pos[k] < len(self.seq[k]) for k in KINDS)

    def answer(self, kind: str, live: Callable[[], Any]) -> Any:
        """The recorded answer while replaying, else ``live()``, recorded."""
        i = self.pos[kind]
        self.pos[kind] = i + 1
        seq = self.seq[kind]
        if i < len(seq):
            return seq[i]
        value = live()
        seq.append(value)
        return value

    def load(self, chunks: list[dict[str, list[Any]]]) -> None:
        for chunk in chunks:
            for k in KINDS:
                self.seq[k].extend(chunk.get(k, []))
        self.saved = {k: len(self.seq[k]) for k in KINDS}

    def unconsumed(self) -> dict[str, int]:
        return {k: len(self.seq[k]) - self.pos[k] for k in KINDS if len(self.seq[k]) != self.pos[k]}

    def new_chunk(self) -> dict[str, list[Any]]:
        """The entries recorded since the last chunk (and mark them saved)."""
        chunk = {k: self.seq[k][self.saved[k] :] for k in KINDS}
        self.saved = {k: len(self.seq[k]) for k in KINDS}
        return chunk

    def counts(self) -> dict[str, int]:
        return {k: len(self.seq[k]) for k in KINDS}
