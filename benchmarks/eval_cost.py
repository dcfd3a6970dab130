"""What one evaluation costs against the forward passes it cannot avoid (issue 22).

For each scenario this builds the run the scenario describes (initial weights: the cost of a forward pass does
not depend on the values), catches the evaluation jobs the engine hands its executor (``Learning.evaluate``:
k models after de-duplication) and times, interleaved (A B C ... A B C ...):

- **test pass**: the host's forward throughput on the test set, a plain ``torch.no_grad()`` loop over each of the
  k models in eval mode, 1 torch thread (the pinned default), at the fastest of a few batch sizes and layouts
  (measured first on part of the test set);
- **calibration pass**: static-BN calibration as a plain loop would do it (BatchNorm in train mode,
  ``momentum=None``, no autograd), over the scenario's calibration samples at ``server.eval_batch_size``
  (the batch size is part of the result: it sets the batch statistics); zero for a model without BatchNorm;
- **inline**: ``Learning.evaluate()`` through the inline executor;
- **threads**: the same through the thread executor with 2 threads (what a run does on CPU by default), the test
  and calibration passes above cut in 2 halves and run on 2 plain threads as its reference;
- **pool**: the same through the pool executor with 2 workers, and the test and calibration passes
  above run as 2 halves in the same 2 worker processes (its reference under the same contention).

Ratios: ``evaluate / test passes`` (the issue's target: <= 1.2) and ``evaluate / (test + calibration passes)``,
the overhead the executor adds to the work it must do; calibration is reported beside.

    IOTFL_DATA=/work/shared/datasets python benchmarks/eval_cost.py [--reps N] [--scenarios quickstart ...]
"""

from __future__ import annotations

import argparse
import os
import pickle
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.reduction import ForkingPickler  # torch.multiprocessing adds its tensor reductions to it
from pathlib import Path
from typing import Any

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from iotfl_sim.scenario.loader import load_scenario, resolve_groups  # noqa: E402
from iotfl_sim.scenario.model import Executor as ExecutorConfig  # noqa: E402
from iotfl_sim.scenario.resolved import ResolvedScenario  # noqa: E402
from iotfl_sim.sim.setup import build_simulation  # noqa: E402

OUT_MD = ROOT / "benchmarks" / "eval_cost.md"
# scenario: (file, --set overrides, repetitions: the quickstart's evaluation takes a tenth of a second)
SCENARIOS = {
    "quickstart": ("scenarios/quickstart.yaml", [], 40),
    "heterofl_mnist_a2b8": ("scenarios/heterofl_mnist_a2b8.yaml", [], 4),
}
BATCHES = (50, 100, 200)


class Catch:
    """An executor in front of another that keeps the evaluation jobs the engine passed it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.jobs: list = []

    def evaluate(self, jobs: list) -> list:
        self.jobs = list(jobs)
        return self.inner.evaluate(jobs)


@dataclass(frozen=True)
class Pass:
    """A plain loop over x[start:stop] of one job's model: ``calibrate`` runs BatchNorm in train mode."""

    job: Any
    start: int
    stop: int
    batch: int
    channels_last: bool
    calibrate: bool


def _model(job: Any, channels_last: bool) -> nn.Module:
    model = job.recipe.build(job.spec, track_bn=True)
    model.load_state_dict(job.state, strict=False)
    return model.to(memory_format=torch.channels_last) if channels_last else model


_MODELS = threading.local()  # per thread, as the thread executor's workers hold theirs


def run_pass(p: Pass, x: torch.Tensor) -> None:
    key = (p.job.recipe, p.job.spec, p.channels_last)
    models = _MODELS.__dict__.setdefault("models", {})
    model = models.get(key)
    if model is None:  # built and loaded once: the timed loop is the passes alone
        model = models[key] = _model(p.job, p.channels_last)
    model.eval()
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if p.calibrate:
        if not norms:
            return
        for m in norms:
            m.reset_running_stats()
            m.momentum = None
            m.train()
    with torch.no_grad():
        for s in range(p.start, p.stop, p.batch):
            xb = x[s : min(s + p.batch, p.stop)]
            model(xb.contiguous(memory_format=torch.channels_last) if p.channels_last and xb.dim() == 4 else xb)
    model.eval()


def _flat(p: Pass) -> tuple:
    """``p`` with its job's weights in one tensor: a pool worker then fetches one shared-memory descriptor (torch
    sends each tensor's on its own, about 0.5 ms apiece), the cheapest plain way to hand it a model."""
    state = p.job.state
    assert all(v.dtype == torch.float32 for v in state.values())
    flat = torch.cat([v.reshape(-1) for v in state.values()])
    layout = [(k, tuple(v.shape)) for k, v in state.items()]
    return (p.job.recipe, p.job.spec, p.job.batch_size), layout, flat, (p.start, p.stop, p.batch, p.channels_last, p.calibrate)


def _pool_pass(task: tuple) -> None:  # in a pool worker: the run's tensors are its Worker's
    from iotfl_sim.exec import base, pool

    assert pool._WORKER is not None
    (recipe, spec, batch), layout, flat, rest = task
    state, at = {}, 0
    for k, shape in layout:
        n = int(torch.Size(shape).numel())
        state[k], at = flat[at : at + n].view(shape), at + n
    p = Pass(base.EvalJob(recipe, spec, state, batch), *rest)
    d = pool._WORKER.data
    run_pass(p, d.calib_x if p.calibrate else d.x_test)


def _timed(f) -> float:
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


def _clocked(blob: bytes) -> tuple[Any, float]:
    """In a pool worker: one task, pickled by ``TaskClock`` (so fetching its tensors is inside), and its CPU time."""
    t = time.thread_time()
    func, arg = pickle.loads(blob)
    out = func(arg)
    return out, time.thread_time() - t


class TaskClock:
    """A pool's ``map`` that keeps each task's CPU time in its worker, one list per call (a phase: the next call
    starts when every task of this one has returned). ``makespan`` schedules them as ``Pool.map`` does (each task
    to the first free worker, in order) on idle workers: the wall time the pool would take on a host with a free
    core per worker, which a shared host cannot show."""

    def __init__(self, pool: Any) -> None:
        self._map = pool.map
        self.phases: list[list[float]] = []
        pool.map = self.map

    def map(self, func, tasks, chunksize=None) -> list:
        blobs = [bytes(ForkingPickler.dumps((func, t))) for t in tasks]
        out = self._map(_clocked, blobs, chunksize=1)
        self.phases.append([cpu for _, cpu in out])
        return [r for r, _ in out]

    def take(self, workers: int) -> float:
        """Makespan of the phases recorded since the last call, on ``workers`` idle workers."""
        total = sum(_greedy(p, workers) for p in self.phases)
        self.phases = []
        return total


def _greedy(tasks: list[float], workers: int) -> float:
    free = [0.0] * workers
    for t in tasks:
        i = free.index(min(free))
        free[i] += t
    return max(free)


def _cpu_and_wall(f) -> tuple[float, float]:
    c, t = time.process_time(), time.perf_counter()
    f()
    return time.process_time() - c, time.perf_counter() - t


def best_layout(job: Any, x: torch.Tensor) -> tuple[int, bool, dict]:
    """(batch size, channels_last) of the fastest plain test pass of ``job``'s model, on up to 2,000 samples."""
    n = min(len(x), 2000)
    seen: dict[tuple[int, bool], float] = {}
    for _ in range(3):  # the first round warms up
        for b in BATCHES:
            for cl in (True, False):
                p = Pass(job, 0, n, b, cl, False)
                seen[(b, cl)] = min(seen.get((b, cl), float("inf")), _timed(lambda p=p: run_pass(p, x)))
    (b, cl), _ = min(seen.items(), key=lambda kv: kv[1])
    return b, cl, seen


def halves(n: int, batch: int) -> list[tuple[int, int]]:
    cut = (-(-n // batch) // 2) * batch
    return [(0, min(cut, n)), (min(cut, n), n)] if 0 < cut < n else [(0, n)]


def measure(name: str, path: str, sets: list[str], reps: int, workers: int) -> dict[str, Any]:
    torch.set_num_threads(1)
    sc = load_scenario(ROOT / path, sets=[*sets, "rounds=1", "output.progress=false", "executor.kind=inline"])
    sim = build_simulation(ResolvedScenario(sc, resolve_groups(sc)))
    inline = Catch(sim.host.executor)
    pool = sim.numerics.make_executor(ExecutorConfig(kind="pool", workers=workers, threads=1))
    sim.learning.executor = inline
    want = sim.learning.evaluate()  # also the warm-up (skeletons, oneDNN primitives)
    jobs = inline.jobs
    sim.learning.executor = pool
    assert sim.learning.evaluate() == want, "pool and inline must give the same bits"
    d = sim.numerics.numeric_data()
    bs = sc.server.eval_batch_size
    layouts = [best_layout(j, d.x_test) for j in jobs]
    test = [Pass(j, 0, len(d.y_test), b, cl, False) for j, (b, cl, _) in zip(jobs, layouts, strict=True)]
    calib = [Pass(j, 0, len(d.calib_x), bs, True, True) for j in jobs]
    pool_tasks = [Pass(p.job, a, z, p.batch, p.channels_last, p.calibrate)
                  for p in test + calib for a, z in halves(p.stop, p.batch)]
    pool_test = [_flat(t) for t in pool_tasks if not t.calibrate]
    pool_calib = [_flat(t) for t in pool_tasks if t.calibrate]
    pool.pool.map(_pool_pass, pool_test + pool_calib, chunksize=1)  # warm the workers' copies
    threads = sim.numerics.make_executor(ExecutorConfig(kind="threads", workers=workers, threads=1))
    sim.learning.executor = threads
    assert sim.learning.evaluate() == want, "threads and inline must give the same bits"
    helpers = ThreadPoolExecutor(workers, initializer=torch.set_num_threads, initargs=(1,))
    thread_test = [t for t in pool_tasks if not t.calibrate]
    thread_calib = [t for t in pool_tasks if t.calibrate]

    def on_threads(tasks: list[Pass]) -> None:
        list(helpers.map(lambda p: run_pass(p, d.calib_x if p.calibrate else d.x_test), tasks))

    on_threads(thread_test + thread_calib)  # warm the threads' models
    load = [os.getloadavg()]
    keys = ("test", "calib", "inline", "pool_test", "pool_calib", "pool", "threads_test", "threads_calib", "threads")
    t: dict[str, list[float]] = {k: [] for k in keys}  # wall seconds
    cpu: dict[str, list[float]] = {k: [] for k in keys}  # inline: CPU seconds; pool: makespan on idle workers

    def record(key: str, f) -> None:  # this process's CPU seconds (all its threads) and wall seconds
        c, w = _cpu_and_wall(f)
        cpu[key].append(c)
        t[key].append(w)

    for _ in range(reps):
        for key, x, passes in (("test", d.x_test, test), ("calib", d.calib_x, calib)):
            record(key, lambda x=x, passes=passes: [run_pass(p, x) for p in passes])
        sim.learning.executor = inline
        record("inline", sim.learning.evaluate)
        clock = TaskClock(pool.pool)
        for key, tasks in (("pool_test", pool_test), ("pool_calib", pool_calib)):
            t[key].append(_timed(lambda tasks=tasks: pool.pool.map(_pool_pass, tasks, chunksize=1)))
            cpu[key].append(clock.take(workers))
        sim.learning.executor = pool
        c, w = _cpu_and_wall(sim.learning.evaluate)
        t["pool"].append(w)
        cpu["pool"].append(clock.take(workers) + c)  # the parent's own CPU (packing, accumulating) added in series
        del pool.pool.map  # the pool's own map again
        for key, tasks in (("threads_test", thread_test), ("threads_calib", thread_calib)):
            record(key, lambda tasks=tasks: on_threads(tasks))
        sim.learning.executor = threads
        record("threads", sim.learning.evaluate)
    load.append(os.getloadavg())
    helpers.shutdown()
    threads.close()
    pool.close()
    sim.host.executor.close()
    return {
        "name": name, "k": len(jobs), "labels": [j.spec.name or "global" for j in jobs],
        "n_test": len(d.y_test), "n_calib": len(d.calib_x), "batch": bs, "layouts": layouts, "times": t, "cpu": cpu,
        "load": load, "workers": workers, "reps": reps,
    }


NOTES = [
    "## Reading it",
    "",
    "- The passes an evaluation cannot avoid are one test pass per model and, for a model with BatchNorm, one "
    "calibration pass over `server.bn_calibration_samples` training samples (static BN: it sets the statistics "
    "the test pass uses). *evaluate / (test + calibration)* near 1 means the executor adds little to them; "
    "*evaluate / test pass* is the issue's figure, which calibration alone puts above 1 by *calibration / test*. "
    "The test pass here is the model as built (BatchNorm a layer of its own, ReLU out of place); the run scores "
    "with a twin that folds each conv unit's BatchNorm into its convolution and runs its ReLU in place "
    "(`fl.scoring_model`), so *evaluate / (test + calibration)* can fall below 1: that is the twin's gain, not "
    "missing work.",
    "- Calibration runs in train mode under `inference_mode`, in `channels_last`, at `server.eval_batch_size` "
    "(the batch size is part of the result). Since issue 22 it records each batch's mean and variance and "
    "accumulates them afterwards with PyTorch's own arithmetic (`fl.evaluate.running_statistics`, same bits), "
    "so the pool cuts it into slices over its workers like the test pass; before, calibration was one task per "
    "model, and a run evaluating one model (FedAvg) or one large and one small (a2-b8) left workers idle "
    "meanwhile. The inline executor now loads each model once per evaluation (was twice).",
    "- What this table times is one evaluation alone. In a run, round r's evaluation can also run beside round "
    "r + 1's training (`executor.overlap_eval`, on by default for worker threads: docs/architecture.md, "
    "\"Evaluation beside the next round\"; `benchmarks/overlap_eval.md`), which hides part of it without "
    "making it cheaper. Not done: sharing HeteroFL's first layer between nested submodels: only the first "
    "convolution sees the same inputs (the next one reads fewer channels), and its output channels would have "
    "to be the same bits whether the kernel computes 32 or 64 of them, which oneDNN does not promise.",
    "- The forward passes themselves are the cost: a FedAvg MNIST `conv` evaluation is one pass over 10,000 "
    "test images, more than half the compute of a round's training of 10 clients x 600 samples x 1 epoch "
    "(forward and backward, about 3 forward passes a sample); with BatchNorm add 2,000 calibration samples. "
    "`server.eval_every` and `server.eval_subset` trade it (README, \"What an evaluation costs\").",
    "",
]


def _median_ratio(a: list[float], b: list[float]) -> float:
    return statistics.median(x / y for x, y in zip(a, b, strict=True))


def _fmt(v: list[float]) -> str:
    return f"{min(v):.3f} / {statistics.median(v):.3f}"


def _ratios(a: list[float], b: list[float]) -> str:
    """Fastest over fastest (the least disturbed of each under other load), then the median of the repetitions' own
    ratios."""
    per_rep = [x / y for x, y in zip(a, b, strict=True)]
    return f"**{min(a) / min(b):.2f}** / {statistics.median(per_rep):.2f}"


def report(results: list[dict[str, Any]], note: str) -> str:
    lines = [
        "# Evaluation cost against the forward passes it needs",
        "",
        "Generated by `python benchmarks/eval_cost.py`; the script overwrites this file. "
        f"{os.cpu_count()} cores, 1 torch thread per process; interleaved repetitions "
        "(test pass, calibration pass, inline evaluate, pool test pass, pool calibration pass, pool evaluate, threads test pass, threads calibration pass, threads evaluate, "
        "then again). Times are fastest / median seconds. Ratios are fastest over fastest (in bold: on a shared "
        "host the least disturbed run of each) / the median of each repetition's own ratio. "
        f"{note}",
        "",
        "- *test pass*: a plain `torch.no_grad()` loop over the test set with each of the k models, at its fastest "
        "batch size and layout (column *layout*).",
        "- *calibration pass*: static-BN calibration as a plain loop (BatchNorm in train mode, `momentum=None`), "
        "over the calibration samples at `server.eval_batch_size`: a train-data pass, not a test pass.",
        "- *evaluate*: `Learning.evaluate()` of the run (the engine's call) through the executor. Pool: 2 workers; "
        "its references are the same passes cut in 2 halves and run by the same 2 worker processes.",
        "- Threads (the CPU default since issue 22's thread executor): 2 worker threads of this process; its "
        "references are the same halves run on 2 plain threads.",
        "- *same three, CPU time* (median of the repetitions): what other load on the host does not change. Inline "
        "and threads: the process's CPU seconds (all its threads). Pool: each task's CPU seconds in its worker (fetching its arguments included), "
        "scheduled as `Pool.map` deals them on 2 idle workers, phase after phase, plus the parent's own CPU seconds "
        "in series: the wall time on a host with a free core per worker (transfer latency left out).",
        "",
    ]
    for r in results:
        t = r["times"]
        lay = ", ".join(f"{lab}: batch {b}{' channels_last' if cl else ''}"
                        for lab, (b, cl, _) in zip(r["labels"], r["layouts"], strict=True))
        la = " -> ".join(" ".join(f"{x:.2f}" for x in load) for load in r["load"])
        lines += [
            f"## {r['name']}: k = {r['k']} models ({', '.join(r['labels'])}), {r['n_test']:,} test samples, "
            f"{r['n_calib']:,} calibration samples",
            "",
            f"{r['reps']} repetitions. Layout of the test pass: {lay}. Load average (1/5/15 min) before -> after: {la}.",
            "",
            "| executor | evaluate s | test pass s | calibration pass s | evaluate / test pass | "
            "evaluate / (test + calibration) | calibration / test | same three, CPU time |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for label, a, b, c in (("inline", "inline", "test", "calib"),
                               (f"pool, {r['workers']} workers", "pool", "pool_test", "pool_calib"),
                               (f"threads, {r['workers']} threads", "threads", "threads_test", "threads_calib")):
            both = [x + y for x, y in zip(t[b], t[c], strict=True)]
            cpu = r["cpu"]
            cboth = [x + y for x, y in zip(cpu[b], cpu[c], strict=True)]
            lines.append(
                f"| {label} | {_fmt(t[a])} | {_fmt(t[b])} | {_fmt(t[c])} | {_ratios(t[a], t[b])} | "
                f"{_ratios(t[a], both)} | {_ratios(t[c], t[b])} | "
                f"{_median_ratio(cpu[a], cpu[b]):.2f} / {_median_ratio(cpu[a], cboth):.2f} / "
                f"{_median_ratio(cpu[c], cpu[b]):.2f} |"
            )
        lines.append("")
    lines += NOTES
    return "\n".join(lines)


def before_section(older: str) -> str:
    """An older report's measurements (its tables and notes, headings one level down) under a heading of their own."""
    body = older.split("\n## ", 1)[1] if "\n## " in older else older
    note = next((line for line in older.splitlines() if line.startswith("Generated by")), "")
    return "\n".join(["", "## Before: the same measurement on the code before this change", "", note, "",
                      "### " + body.replace("\n## ", "\n### ").rstrip(), ""])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=None, help="repetitions (default: per scenario, 40 or 4)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--scenarios", nargs="*", default=list(SCENARIOS))
    ap.add_argument("--note", default="", help="a sentence added to the report (e.g. which code was measured)")
    ap.add_argument("--out", type=Path, default=OUT_MD, help="where to write the report (default: %(default)s)")
    ap.add_argument("--before", type=Path, help="a report this script wrote on older code, appended for comparison")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    results = []
    for name in args.scenarios:
        path, sets, reps = SCENARIOS[name]
        results.append(measure(name, path, sets, args.reps or reps, args.workers))
        print(f"{name}: done", file=sys.stderr)
    text = report(results, args.note)
    if args.before is not None:
        text += before_section(args.before.read_text())
    print(text)
    if not args.no_write:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    # the pool's workers never import __main__ (iotfl_sim.forkserver.NoMainReimport): run as the module
    # ``eval_cost`` so that the functions they are sent (_pool_pass, _clocked) are found by that name
    import eval_cost

    raise SystemExit(eval_cost.main())
