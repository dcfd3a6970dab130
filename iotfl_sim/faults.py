"""Fault injection for crash tests: ``IOTFL_FAULT=point:n`` kills this process with SIGKILL the n-th time
it reaches ``point`` (e.g. ``train:3``, ``checkpoint_write:1``). Unset, every check is one dict lookup.

Points: ``train`` (a training job is about to run), ``eval`` (an evaluation is about to run),
``row_written`` (a rounds.csv row was just flushed), ``row_torn`` (half a rounds.csv row is on disk),
``checkpoint_write`` (half of a checkpoint's state file is on disk), ``checkpoint_done`` (a checkpoint was
just completed), ``summary`` (the last round is done, the summary not yet written).
"""

from __future__ import annotations

import multiprocessing
import os
import signal

_POINT, _, _N = os.environ.get("IOTFL_FAULT", "").partition(":")
# only the run's own process: worker processes inherit the variable but must not act on it
_left = {_POINT: int(_N or 1)} if _POINT and multiprocessing.parent_process() is None else {}


def armed(point: str) -> bool:
    """Would ``hit(point)`` kill the process now?"""
    return _left.get(point) == 1


def hit(point: str) -> None:
    n = _left.get(point)
    if n is None:
        return
    if n <= 1:
        os.kill(os.getpid(), signal.SIGKILL)
    _left[point] = n - 1
