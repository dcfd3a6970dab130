"""Where worker processes come from: a sweep's runs (``study``) and a run's pool executor (``exec.pool``).

On Linux, from a fork server (``multiprocessing``'s forkserver) that imports ``PRELOAD`` once and forks each
worker from there: n workers pay those imports (about 7 s of CPU in a fresh interpreter) once instead of n
times, and later pools of the same process reuse the server. Nothing has run in the server (it only
imported: no OpenMP pool, no RNG drawn), so a forked worker starts as a spawned one does. Elsewhere (macOS,
Windows): spawn. The server keeps the environment it started with; a caller whose workers read environment
variables passes its own along (``study.dispatch._run_task``). One process has one server, so both callers
preload the same modules.
"""

from __future__ import annotations

import multiprocessing as mp
from typing import Any

# the simulator with PyTorch and the pool executor's worker. Not torch._dynamo (2.6 s of CPU): local training no
# longer loads it (fl/sgd.py); a worker that needs it (a cold FLOP count, an Adam optimizer) imports it itself
PRELOAD = ("iotfl_sim.study.dispatch", "iotfl_sim.exec.pool")


def worker_context() -> Any:
    """The multiprocessing context workers start from (see the module docstring)."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(list(PRELOAD))
    return ctx
