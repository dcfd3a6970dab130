"""``executor: {kind: auto}`` (the default): which executor a run gets, and why, decided once at its start.

On a CUDA machine, the fused trainer on the GPU when it pays for its start (below), with worker threads on the
host's usable cores for what it does not fuse (evaluation, FedProx's jobs, models with buffers). Otherwise, and on
a CPU: single-thread workers, one per
usable core (``exec.cores``: affinity and cgroup quota): threads of this process (``exec.threads``: nothing to
start or to copy, one process in memory), or, when the model has random modules (dropout, which threads cannot
run at once with inline's bits), a pool of processes if the run's estimated host work pays for starting them (about 2 s, measured in
``benchmarks/executors.md``); inline when the work is too small to gain. Threads and pool compute exactly what
inline does (same kernels, one thread each, every job whole on one worker), so the choice never changes a result.

The estimate is deliberately coarse: training FLOPs (3x forward) over ``HOST_FLOPS_PER_S`` plus a fixed
cost per optimizer step (Python and kernel dispatch, what dominates tiny models), plus the evaluations'
forward passes. It only has to tell a seconds-long run from a minutes-long one.

When the GPU pays (``fused_pays``), from ``benchmarks/fused_cuda.md`` (an H200 with 16 host cores): per round the
fused trainer trains in 0.08-0.36x the time of 16 worker threads at every model, width and client count measured
(10 or 100 clients, 5-800 MFLOP forward per step), so neither the step's size nor the clients fused is what
decides. What it loses is a fixed start: CUDA's first use and the first ``torch.func`` call's imports, 5.5-6.8 s
there (a whole run's wall time less the training it saved). So the GPU pays when the run's training on the host's
worker threads would take longer than that start: its estimated one-core training seconds divided by the worker
threads this machine gives a run alone must reach ``FUSED_PAYS_AFTER_S``. The two jobs measured:

- the IoT job (FEMNIST, ``cnn_small``, 100 clients a round of 2 steps each, 5 rounds): 34 s of training on one
  core by the estimate, 2.1 s on 16 threads; auto's fused trainer took 14.0 s against 11.4 s on threads (1.23x;
  1.46x in a first, loaded measurement): threads;
- the conv job (MNIST, ``conv``, 10 clients a round of 12 steps each, 3 rounds): 109 s on one core, 6.8 s on 16
  threads; 21.4 s against 21.1 s (1.01x; 0.86x loaded): fused, at the break-even, which longer runs pass (the
  GPU saves 70-80 % of each further round's training).

The net difference against the estimate crosses zero between 5.2 s (the loaded pair) and 7.4 s (the clean pair);
the threshold sits between them. The count of threads is this machine's for one run, not a sweep's share of it,
so a study's point and the same point run alone pick the same trainer (fused and threads differ in the last bits).
"""

from __future__ import annotations

from dataclasses import dataclass

from iotfl_sim.exec.cores import Cores

HOST_FLOPS_PER_S = 40e9  # one thread, small convolutions and linear layers (this VM: 60-74 peak, 45 in training)
HOST_STEP_S = 2e-3  # per optimizer step of a small model beyond its FLOPs (the quickstart measures 3-5 ms)
POOL_PAYS_AFTER_S = 10.0  # estimated one-core work above which a pool is started (about 5x its start-up)
THREADS_PAY_AFTER_S = 1.0  # estimated one-core work above which worker threads are used
# estimated training seconds on the worker threads of the host above which the fused trainer on CUDA pays for its
# start (module docstring: the IoT job 2.1 s lost, the conv job 6.8 s broke even; benchmarks/fused_cuda.md)
FUSED_PAYS_AFTER_S = 6.0


@dataclass(frozen=True)
class HostWork:
    """What a run will compute on the host, summed over its rounds."""

    train_flops: float
    train_steps: float
    eval_flops: float
    draws_rng: bool = False  # some model has random modules (``fl.train.draws_global_rng``): threads cannot share it

    def seconds(self) -> float:
        return self.train_seconds() + self.eval_flops / HOST_FLOPS_PER_S

    def train_seconds(self) -> float:
        """The training's share of ``seconds``: what the fused trainer would take off the host."""
        return self.train_flops / HOST_FLOPS_PER_S + self.train_steps * HOST_STEP_S

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


def fused_pays(work: HostWork | None, workers: int) -> bool:
    """Does the fused trainer on CUDA pay for its start, against ``workers`` threads training on the host (see the
    module docstring)? Not for a model with random modules, which it cannot fuse, nor for unknown work."""
    if work is None or work.draws_rng:
        return False
    return work.train_seconds() / max(workers, 1) >= FUSED_PAYS_AFTER_S


def choose(kind: str, workers: int | None, threads: int, cuda: bool, cores: Cores, work: HostWork | None) -> Choice:
    """The executor for a run whose scenario says ``kind`` (``work``: the estimate; None: unknown, e.g. system-only)."""
    if kind == "fused" and not cuda:  # a pool whose workers fuse a share each: their count decides the bits
        return Choice(kind, workers or cores.usable, "", pins_workers=True)
    if kind != "auto":
        return Choice(kind, workers, "")
    n = cores.usable // threads
    if cuda:
        alone = max(cores.unshared // threads, 1)  # not a sweep's share: the same choice in a study and alone
        train = f"estimated training {work.train_seconds() / alone if work else 0:.1f} s on {alone} host thread(s)"
        if fused_pays(work, alone):
            return Choice(
                "fused", max(n, 1),
                f"auto: fused trainer on the CUDA GPU ({train}, over the {FUSED_PAYS_AFTER_S:g} s its start costs); "
                f"evaluation and the jobs it cannot fuse on {max(n, 1)} worker thread(s) x {threads} torch thread(s) "
                f"({cores.why()}). Set executor: {{kind: threads}} for inline's bits",
            )  # fmt: skip
        host = _on_host(n, threads, cores, work)
        if work is not None and work.draws_rng:
            reason = "the model has random modules, which it cannot fuse"
        else:
            reason = f"{train}, under the {FUSED_PAYS_AFTER_S:g} s its start costs"
        why = f"{host.why}. Not the CUDA GPU's fused trainer: {reason} (executor: {{kind: fused}} to use it)"
        return Choice(host.kind, host.workers, why)
    return _on_host(n, threads, cores, work)


def _on_host(n: int, threads: int, cores: Cores, work: HostWork | None) -> Choice:
    """Auto's choice among the host's executors, ``n`` workers of ``threads`` torch threads fitting its cores."""
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
