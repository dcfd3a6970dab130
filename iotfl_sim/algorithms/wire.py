"""Quantized messages on the wire (QSGD, ``fl.quantize``), usable by any strategy.

:class:`QsgdWire` is the ``Wire`` component (``algorithms.base.Wire``) of a method whose options derive from
``_Wire`` (``upload_bits``, ``download_bits``, ``qsgd_bucket``): it quantizes each round's downloads at
``dispatch`` (the engine calls it right after ``select``, before the server's pending work is put on the
simulated clock), serves the quantized weights as the payload, prices messages and quantizes each accepted
upload in ``receive``. :class:`QuantizedWire` is the channel underneath, per device, that a method with its
own rule for precisions (FedX) drives directly.

Timing vs numerics. The engine simulates the whole round before any real training runs, so when a device's
upload goes on the air its trained weights do not exist yet. The upload's simulated air time is therefore priced
from what the server can encode at dispatch: the encoded length of the same download payload quantized at the
upload's bits (the download itself when both precisions agree). After the real training, ``receive`` quantizes
the trained weights at the upload's bits and returns their real encoded length, which the engine books in the
round's ``bytes_up`` in place of the estimate (the air time stays as priced). The estimate is kept until the device's
next dispatch replaces it, since a task past its round's deadline uploads in a later round; the engine records the
price of each upload on its task when it goes on the air and books the real size against that price on receipt
(``sim.toolkit.Toolkit.receive_uploads``), since a late update (semi_async, async) may be received after its device
was dispatched anew. Every random draw of the quantizer comes from a stream of (seed,
direction, round, device): numerics never depend on simulated durations.

``bucket``: the QSGD normalisation group (``fl.quantize``: ``None`` one norm per tensor, an int QSGD buckets).
``bits >= 32`` means raw float32 (4 bytes per value), i.e. no quantization; bytes then equal the engine's
``params x 32 / 8``. Server work: each quantized download is charged as ``quantize`` (``QsgdWork``: encoding at
the server profile's measured rate); the engine charges decoding every accepted quantized upload
(``dequantize``). Encoding an upload on the device is not priced (a table look-up per value, small next to
training).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from iotfl_sim.algorithms.base import Assignment, QsgdWork, ServerWork, State, Strategy, Update, Wire
from iotfl_sim.fl.quantize import DEFAULT_BUCKET, quantize_state
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.seeding import int_seed


@dataclass
class _Sent:
    state: State
    down_bytes: float


def raw_bytes(state: State) -> float:
    return float(sum(t.numel() * t.element_size() for t in state.values()))


class QuantizedWire:
    """Per-round quantized payloads and message sizes (bytes without the engine's header)."""

    def __init__(self, seed: int, server_work: ServerWork, bucket: int | None = DEFAULT_BUCKET) -> None:
        self.seed = seed
        self.server_work = server_work
        self.bucket = bucket
        self.sent: dict[int, _Sent] = {}  # this round's downloads, by device
        # by device: its upload's size priced at dispatch, kept until its next dispatch (a late upload is a later round's)
        self.uploads: dict[int, float] = {}

    def _gen(self, direction: str, rnd: int, device: int) -> torch.Generator:
        return torch.Generator().manual_seed(int_seed(self.seed, f"qsgd_{direction}", rnd, device))

    def dispatch(self, rnd: int, a: Assignment, state: State, down_bits: int, recipe: ModelRecipe) -> State:
        """Quantize ``state`` (the device's sub-network of ``recipe``) for download at ``down_bits``; price its
        upload at ``a.bits``. System-only runs (no weights) price both as params x bits / 8."""
        params, tensors = recipe.cost(a.spec).params, len(recipe.shapes(a.spec))
        if down_bits < 32:
            self.server_work.charge("quantize", QsgdWork(params, tensors))
        if not state:
            self.sent[a.device] = _Sent(state, params * min(down_bits, 32) / 8.0)
            self.uploads[a.device] = params * min(a.bits, 32) / 8.0
            return state
        if down_bits < 32:
            q, nbytes = quantize_state(state, down_bits, self._gen("down", rnd, a.device), self.bucket)
        else:
            q, nbytes = state, int(raw_bytes(state))
        if a.bits == down_bits:
            up = float(nbytes)
        elif a.bits >= 32:
            up = raw_bytes(state)
        else:  # an estimate only: its draws come from a stream of their own and are thrown away
            up = float(quantize_state(state, a.bits, self._gen("price", rnd, a.device), self.bucket)[1])
        self.sent[a.device] = _Sent(q, float(nbytes))
        self.uploads[a.device] = up
        return q

    def payload(self, device: int) -> State:
        return self.sent[device].state

    def wire_bytes(self, a: Assignment, up: bool) -> float | None:
        """A download's encoded bytes, or an upload's as priced at dispatch."""
        if up:
            return self.uploads.get(a.device)
        s = self.sent.get(a.device)
        return None if s is None else s.down_bytes

    def receive(self, rnd: int, update: Update) -> float:
        """Quantize the trained upload in place at its bits; its real encoded bytes. The draws come from the
        stream of the round the task was dispatched in (a late update's own round, ``rnd - update.staleness``)."""
        bits = update.assignment.bits
        if bits >= 32:
            return raw_bytes(update.state)
        gen = self._gen("up", rnd - update.staleness, update.assignment.device)
        update.state, nbytes = quantize_state(update.state, bits, gen, self.bucket)
        return float(nbytes)


class QsgdWire(Wire):
    """``upload_bits`` / ``download_bits`` of a method's options: QSGD-quantized downloads cut from the
    strategy's ``payload`` at dispatch, uploads quantized on receipt. With both at 32 bits nothing changes: no
    hook quantizes and bytes stay params x 4 (the prices are still recorded for replay)."""

    def __init__(self, seed: int, server_work: ServerWork, cfg) -> None:
        self.on = cfg.upload_bits < 32 or cfg.download_bits < 32
        self.channel = QuantizedWire(seed, server_work, cfg.qsgd_bucket)
        self.upload_bits = cfg.upload_bits
        self.download_bits = cfg.download_bits

    def dispatch(self, rnd: int, assignments: list[Assignment], strategy: Strategy) -> None:
        if not self.on:
            return
        self.channel.sent.clear()
        for a in assignments:
            recipe = strategy.recipe_for(a)
            full = strategy.payload(a)
            state = strategy.slice_for(full, recipe, a.spec) if full else {}  # {}: system-only, priced by params
            self.channel.dispatch(rnd, a, state, self.download_bits, recipe)

    def payload(self, assignment: Assignment) -> State | None:
        if self.on and assignment.device in self.channel.sent:
            return self.channel.payload(assignment.device)
        return None

    def message_bytes(self, assignment: Assignment, up: bool) -> float | None:
        return self.channel.wire_bytes(assignment, up) if self.on else None

    def receive(self, rnd: int, update: Update) -> float | None:
        return self.channel.receive(rnd, update) if self.on else None
