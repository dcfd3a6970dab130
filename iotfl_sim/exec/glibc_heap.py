"""The C heap of a run's process, where glibc's malloc serves PyTorch's CPU tensors: where a training step is
large, one arena for the worker threads and the pages of freed blocks handed back to the system after each
training and evaluation phase.

1. **One arena** (``single_malloc_arena``, which the engine calls before the thread executor's workers start when
   ``heap_tuning_pays``). glibc gives each thread that allocates an arena of its own (up to 8 per core), and an
   arena keeps what it has freed. The workers (and the main thread, which evaluates and aggregates) then each
   hold their own high-water mark of tensors, which the run's peak memory counts side by side; with one arena
   they reuse each other's freed blocks, but every allocation takes the one arena's lock. Both effects grow with
   the step: the memory saved with its feature maps, the lock's share of the time with allocations per FLOP. So
   one arena where an optimizer step is at least ``HEAP_TUNING_MIN_STEP_FLOPS`` (forward and backward of a batch),
   glibc's own arenas below. ``IOTFL_MALLOC_ARENAS=default`` always leaves glibc's choice, and a
   ``MALLOC_ARENA_MAX`` or a ``glibc.malloc.arena_max`` in ``GLIBC_TUNABLES`` wins. The setting is the process's:
   the first run that asks for it keeps it for any later run in the same process. It limits arenas made after
   it: one that a thread made before is handed to a worker too, so the workers would use two arenas rather than
   one. A run therefore starts no thread before its workers: its progress bar starts no monitor thread, and the
   engine pins torch's threads before it loads the data (a torch op on several threads starts OpenMP threads,
   each with an arena at its first allocation). A thread the caller's own process started earlier still can.
2. **Free pages returned** (``release_free_heap``, ``malloc_trim(0)``, after each phase in ``sim.learning``, where
   ``heap_tuning_pays``). A long-lived block (a trained client's state, the new global model) allocated between a
   phase's large temporaries pins the heap above them, so the heap grows round after round while what is in use
   stays flat; trimming gives the free pages inside it back, and the next phase faults in what it reuses, which
   costs system time. Measured with one arena, 2 interleaved runs each: ``conv`` peaks 565 and 593 MB against 583
   and 625 MB untrimmed, the IoT job unchanged (433-442 MB against 426-450 MB), walls within noise. With the
   IoT job's small steps the trims then cost more than they kept (3 interleaved runs, 2026-11-28): 11.93-12.33 s
   wall and 0.66-0.88 s of system time trimmed, 11.83-11.96 s and 0.50-0.57 s not, peak RSS 436-438 against
   444-471 MB (below a quarter of Flower's either way, ``benchmarks/peers.md``), so small steps are not trimmed.

Measured on the peers jobs (2 cores, 2 worker threads, 3 interleaved runs each, ``benchmarks/allocator.md``), with
the other memory changes of the same day in place, one arena (``MALLOC_ARENA_MAX=1``) against glibc's own arenas:
``conv`` (12 GFLOP a step: MNIST, batches of 50) median peak PSS 544 against 585 MB at 1.03x the wall time (an
earlier run: 535 against 575 MB, the same wall time); the IoT job (1.7 GFLOP a step: ``cnn_small`` on FEMNIST,
batches of 10) 374 against 385 MB at 1.01-1.02x the wall time (earlier: 379 against 382 MB and 2-4 % more wall; a
3-run check: 7-8 % more CPU time). ``HEAP_TUNING_MIN_STEP_FLOPS`` sits between the two. The default, set at the
engine's set-up rather than at the process's start, measured 564 MB on ``conv`` while OpenMP threads still made
an arena first; with torch's threads pinned before the data load, 554 MB against 542 MB for one arena from the
start and 552 MB for glibc's own (medians of 3, each within the others' 520-586 MB range): pinning first took
most of what glibc's own arenas had cost. Numerics do not change: the
allocator decides where tensors live, never their values. Other C libraries (musl, macOS, Windows) are left
alone.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys

M_ARENA_MAX = -8  # glibc's <malloc.h>
OPT_OUT = "IOTFL_MALLOC_ARENAS"
HEAP_TUNING_MIN_STEP_FLOPS = 4e9  # between the peers jobs' 1.7 (one arena slower) and 12 GFLOP (40 MB saved) steps


def chosen_elsewhere(environ: dict[str, str] | os._Environ = os.environ) -> bool:
    """Did the user (or the platform) already choose the arena count, or opt out of ours?"""
    tunables = environ.get("GLIBC_TUNABLES", "")
    return (
        "MALLOC_ARENA_MAX" in environ
        or "glibc.malloc.arena_max" in tunables
        or environ.get(OPT_OUT, "").strip().lower() == "default"
    )


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """This process's C library when it is glibc on Linux, else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    return libc if hasattr(libc, "gnu_get_libc_version") and hasattr(libc, "malloc_trim") else None


def heap_tuning_pays(step_flops: float) -> bool:
    """Are optimizer steps of ``step_flops`` large enough that worker threads gain from sharing one arena and a run
    from returning freed pages after each phase (module docstring, 1 and 2)? Below, both cost more time than
    the memory they save."""
    return step_flops >= HEAP_TUNING_MIN_STEP_FLOPS


def single_malloc_arena() -> bool:
    """Limit glibc's malloc to one arena (``mallopt(M_ARENA_MAX, 1)``); True if it was set. Call it before the
    process starts threads that allocate: arenas made before stay."""
    libc = _glibc()
    if libc is None or chosen_elsewhere():
        return False
    return bool(libc.mallopt(M_ARENA_MAX, 1))


def release_free_heap() -> None:
    """Hand the pages of freed heap blocks back to the system (glibc's ``malloc_trim(0)``; elsewhere nothing)."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)
