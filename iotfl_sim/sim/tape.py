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
    """Recorded answers by kind. Indexes are absolute; answers already written to a tape chunk and already
    used are dropped from memory, so a long run's tape costs only what lies between two checkpoints."""

    def __init__(self, recording: bool = True) -> None:
        self.recording = recording  # off when the run writes no checkpoints: nothing to replay later
        self.seq: dict[str, list[Any]] = {k: [] for k in KINDS}
        self.base: dict[str, int] = dict.fromkeys(KINDS, 0)  # absolute index of seq[k][0]
        self.pos: dict[str, int] = dict.fromkeys(KINDS, 0)  # answers given so far
        self.saved: dict[str, int] = dict.fromkeys(KINDS, 0)  # answers written to a tape chunk

    def answer(self, kind: str, live: Callable[[], Any]) -> Any:
        """The recorded answer while replaying, else ``live()``, recorded."""
        if not self.recording:
            return live()
        j = self.pos[kind] - self.base[kind]
        self.pos[kind] += 1
        seq = self.seq[kind]
        if j < len(seq):
            return seq[j]
        value = live()
        seq.append(value)
        return value

    def load(self, chunks: list[dict[str, list[Any]]]) -> None:
        for chunk in chunks:
            for k in KINDS:
                self.seq[k].extend(chunk.get(k, []))
        self.saved = self.counts()

    def counts(self) -> dict[str, int]:
        return {k: self.base[k] + len(self.seq[k]) for k in KINDS}

    def unconsumed(self) -> dict[str, int]:
        return {k: n - self.pos[k] for k, n in self.counts().items() if n != self.pos[k]}

    def new_chunk(self) -> dict[str, list[Any]]:
        """The answers recorded since the last chunk; then forget what is both saved and used."""
        chunk = {k: self.seq[k][self.saved[k] - self.base[k] :] for k in KINDS}
        self.saved = self.counts()
        for k in KINDS:
            drop = min(self.pos[k], self.saved[k]) - self.base[k]
            if drop > 0:
                del self.seq[k][:drop]
                self.base[k] += drop
        return chunk
