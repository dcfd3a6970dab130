"""What the process looks like to a Flower app while it runs here, as a SuperLink's ServerApp process looks: the
task identity Flower's code reads, the global random generators seeded from the run's seed, and Flower's log.
Everything is put back as it was when the run ends."""

from __future__ import annotations

import logging
import random
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch
from flwr.common.constant import SUPERLINK_NODE_ID
from flwr.supercore.task_identity import TaskIdentity

from iotfl_sim.seeding import int_seed


@contextmanager
def serverapp_process(run_id: int, seed: int) -> Iterator[None]:
    """The run's task identity, seeded globals and Flower's warnings as this tool's, for the ``with`` block."""
    identity = (TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id)
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = run_id, SUPERLINK_NODE_ID, 1
    try:
        with seeded_globals(seed), flower_warnings():
            yield
    finally:
        TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id = identity


@contextmanager
def seeded_globals(seed: int) -> Iterator[None]:
    """Python's, NumPy's and PyTorch's global random generators seeded from the run's seed for the app, and given
    back as they were: Flower's strategies sample nodes with ``random.sample``, an app may shuffle with the
    others' global state."""
    saved = random.getstate(), np.random.get_state(), torch.random.get_rng_state()
    random.seed(int_seed(seed, "flower_python"))
    np.random.seed(int_seed(seed, "flower_numpy") % 2**32)
    torch.manual_seed(int_seed(seed, "flower_torch"))
    try:
        yield
    finally:
        random.setstate(saved[0])
        np.random.set_state(saved[1])
        torch.random.set_rng_state(saved[2])


class _OneLine(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return "warning: flower: " + " ".join(record.getMessage().split())


@contextmanager
def flower_warnings() -> Iterator[None]:
    """Flower's log records of level WARNING and above as this tool's one-line ``warning: flower: ...`` on stderr
    (Flower's own handler writes them in colour over several lines); its INFO records (the app's progress) are left
    out, as this tool's progress bar and rows say the same."""
    log = logging.getLogger("flwr")
    saved = log.level, list(log.handlers), log.propagate
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_OneLine())
    log.handlers, log.propagate = [handler], False
    log.setLevel(logging.WARNING)
    try:
        yield
    finally:
        log.setLevel(saved[0])
        log.handlers, log.propagate = saved[1], saved[2]
