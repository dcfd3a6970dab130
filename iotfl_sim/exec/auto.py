"""``executor: {kind: auto}`` (the default): which executor a run gets, and why, decided once at its start.

On a CUDA machine: the fused trainer on the GPU, with worker threads on the host's usable cores for what it does
not fuse (evaluation, FedProx's jobs, models with dropout or buffers). On a CPU: single-thread workers, one per
usable core (``exec.cores``: affinity and cgroup quota): threads of this process (``exec.threads``: nothing to
start or to copy, one process in memory), or, when the model has random modules (dropout, which threads cannot
run at once with inline's bits), a pool of processes if the run's estimated host work pays for starting them (about 2 s, measured in
``benchmarks/executors.md``); inline when the work is too small to gain. Threads and pool compute exactly what
inline does (same kernels, one thread each, every job whole on one worker), so the choice never changes a result.

The estimate is deliberately coarse: training FLOPs (3x forward) over ``HOST_FLOPS_PER_S`` plus a fixed
cost per optimizer step (Python and kernel dispatch, what dominates tiny models), plus the evaluations'
forward passes. It only has to tell a seconds-long run from a minutes-long one.
"""

from __future__ import annotations

from dataclasses import dataclass

from iotfl_sim.exec.cores import Cores

HOST_FLOPS_PER_S = 40e9  # one thread, small convolutions and linear layers (this VM: 60-74 peak, 45 in training)
HOST_STEP_S = 2e-3  # per optimizer step of a small model beyond its FLOPs (the quickstart measures 3-5 ms)
POOL_PAYS_AFTER_S = 10.0  # estimated one-core work above which a pool is started (about 5x its start-up)
THREADS_PAY_AFTER_S = 1.0  # estimated one-core work above which worker threads are used


@dataclass(frozen=True)
class HostWork:
    """What a run will compute on the host, summed over its rounds."""

    train_flops: float
    train_steps: float
    eval_flops: float
    draws_rng: bool = False  # some model has random modules (``fl.train.draws_global_rng``): threads cannot share it

    def seconds(self) -> float:
        return (self.train_flops + self.eval_flops) / HOST_FLOPS_PER_S + self.train_steps * HOST_STEP_S

    def step_flops(self) -> float:
        """FLOPs of an average optimizer step (forward and backward of one batch)."""
        return self.train_flops / max(self.train_steps, 1.0)


@dataclass(frozen=True)
class Choice:
    kind: str  # inline, threads, pool, ray or fused
    workers: int | None
    why: str  # one line, for the run's start and its summary ("" when the scenario named the kind)
    pins_workers: bool = False  # the results depend on ``workers`` (see ``pinned``)

    def pinned(self) -> dict[str, int]:
        """Executor settings left to this machine that decide the run's numbers, which the run records in its
        ``scenario.resolved.yaml`` so that rerunning or resuming that file reproduces them: the worker count of the
        fused trainer on a CPU, whose pool cuts every fused group into one share per worker (a vmapped group's
        kernels sum in another order than two halves'). Its default is the usable cores, which in a sweep are
        the run's share (``exec.cores``), alone all of them."""
        return {"workers": self.workers} if self.pins_workers and self.workers is not None else {}

    def label(self) -> str:
        return self.kind if self.workers is None else f"{self.kind}, {self.workers} workers"


def choose(kind: str, workers: int | None, threads: int, cuda: bool, cores: Cores, work: HostWork | None) -> Choice:
    """The executor for a run whose scenario says ``kind`` (``work``: the estimate; None: unknown, e.g. system-only)."""
    if kind == "fused" and not cuda:  # a pool whose workers fuse a share each: their count decides the bits
        return Choice(kind, workers or cores.usable, "", pins_workers=True)
    if kind != "auto":
        return Choice(kind, workers, "")
    n = cores.usable // threads
    if cuda:
        return Choice(
            "fused", max(n, 1),
            f"auto: fused trainer on the CUDA GPU; evaluation and the jobs it cannot fuse on {max(n, 1)} worker "
            f"thread(s) x {threads} torch thread(s) ({cores.why()}). Set executor: {{kind: threads}} for inline's bits",
        )  # fmt: skip
    if n < 2:
        return Choice("inline", None, f"auto: inline ({cores.why()}, {threads} thread(s) per job: no room for a pool)")
    seconds = work.seconds() if work is not None else 0.0
    estimate = f"estimated host work {seconds:.1f} s on one core"
    if work is not None and work.draws_rng:
        if seconds < POOL_PAYS_AFTER_S:
            return Choice(
                "inline", None,
                f"auto: inline (the model has random modules, so threads cannot share its RNG, and with {estimate} "
                f"a pool does not pay for starting its workers: under {POOL_PAYS_AFTER_S:g} s)",
            )  # fmt: skip
        return Choice(
            "pool", n,
            f"auto: pool of {n} workers x {threads} thread(s) ({cores.why()}; {estimate}; the model has random "
            "modules, so threads cannot share its RNG); results equal inline's bit for bit. Set executor: "
            "{kind: inline} to keep one process",
        )  # fmt: skip
    if seconds < THREADS_PAY_AFTER_S:
        return Choice("inline", None, f"auto: inline ({estimate}, under the {THREADS_PAY_AFTER_S:g} s worth sharing out)")
    return Choice(
        "threads", n,
        f"auto: {n} worker threads x {threads} torch thread(s) ({cores.why()}; {estimate}); results equal inline's "
        "bit for bit. Set executor: {kind: inline} to run one job at a time",
    )  # fmt: skip
