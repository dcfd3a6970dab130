"""One Flower node at work: the ClientApp run for real on one message, and what it ran.

The app's own code runs, on its own model, in this process. Every ATen operation it executes is recorded
(``fl.cost.opcost.OpRecorder``: FLOPs and bytes per op, the same table the cost model prices a built-in method's
training step by), and so is the peak of the bytes held by the tensors it allocated while it handled the message:
the simulated device then prices that op table on its profile (time, energy) and compares that peak with its free
memory. Host seconds are kept for ``host_*`` figures only.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils._pytree import tree_flatten

from iotfl_sim.core.errors import ScenarioError
from iotfl_sim.fl.cost.opcost import OpRecorder, StepTrace


class ClientAppFailed(ScenarioError):
    """The ClientApp raised, or answered with something that is not a reply to its message."""


class WorkRecorder(OpRecorder):
    """``OpRecorder`` that also follows the bytes of the tensors allocated under it (views and in-place results
    are the tensors they come from) and keeps their peak."""

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        out = super().__torch_dispatch__(func, types, args, kwargs)
        if func.is_view:
            return out
        inputs = {id(t) for t in tree_flatten((args, kwargs or {}))[0] if isinstance(t, torch.Tensor)}
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and id(t) not in inputs:
                n = t.untyped_storage().nbytes()
                self.live += n
                self.peak = max(self.peak, self.live)
                weakref.finalize(t, self._release, n)
        return out

    def _release(self, n: int) -> None:
        self.live -= n


@dataclass
class NodeWork:
    """What a ClientApp did with one message: its reply, the ops it ran, its peak tensor bytes, host seconds."""

    reply: Any  # flwr.app.Message
    trace: StepTrace
    peak_bytes: int
    host_s: float

    @property
    def flops(self) -> float:
        return self.trace.total_flops


def run_node(client_app: Any, message: Any, context: Any, where: str) -> NodeWork:
    """``client_app(message, context)`` under the recorder; ``where`` names the node and round in an error."""
    from flwr.app import Message

    recorder = WorkRecorder()
    t0 = time.perf_counter()
    try:
        with recorder:
            reply = client_app(message, context)
    except Exception as e:  # noqa: BLE001 - the user's app: one line naming it, its error and where
        raise ClientAppFailed(
            f"algorithm.client_app raised {type(e).__name__}: {e} ({where}); fix the app (under `flwr run` the "
            "same message gives the traceback)"
        ) from None
    host_s = time.perf_counter() - t0
    if not isinstance(reply, Message):
        raise ClientAppFailed(
            f"algorithm.client_app answered {where} with a {type(reply).__name__}, not a Message; return "
            "Message(content=..., reply_to=msg)"
        )
    trace = StepTrace(
        0, tuple(recorder.names), np.asarray(recorder.flops, dtype=np.float64), np.asarray(recorder.bytes, dtype=np.float64)
    )
    return NodeWork(reply, trace, recorder.peak, host_s)
