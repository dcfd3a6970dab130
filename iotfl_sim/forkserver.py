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
import sys
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


class NoMainReimport:
    """Started workers re-run the parent's ``__main__`` (a script by its file, ``python -m`` by its module
    name) unless told not to: a script calling a run or a sweep at top level, without an ``if __name__ ==
    "__main__":`` guard, would then start it again in every worker, which fails or hangs. The workers need
    nothing from ``__main__`` (their functions and jobs live in ``iotfl_sim``), so hide it while they start."""

    def __enter__(self) -> None:
        self.main = sys.modules.get("__main__")
        self.saved = {k: self.main.__dict__[k] for k in ("__file__", "__spec__") if k in vars(self.main)} if self.main else {}
        for k in self.saved:
            if k == "__spec__":
                self.main.__spec__ = None  # type: ignore[union-attr]
            else:
                delattr(self.main, k)

    def __exit__(self, *exc: Any) -> None:
        for k, v in self.saved.items():
            setattr(self.main, k, v)
