"""Host seconds of one round's local training: InlineExecutor (one client after another) vs FusedExecutor,
and what ``kind: fused`` does on a CPU (a pool of 2 workers fusing their shares, tiny steps only) vs the pool.

N clients train the same submodel (one fused group), each from its own weights, on its own samples
with its own seed; every executor gets identical jobs. Timed: ``executor.run(jobs)`` wall time (one
untimed warm-up round per executor first, then the fastest and the median of ``--repetitions``, the
executors interleaved within each repetition), and the largest absolute difference between the fused and
inline trained states is reported beside it.
Data are random tensors of the dataset's shape (the cost does not depend on the values). Torch threads: 1.

Run from the repository root (timings under load are meaningless; the load average is recorded)::

    python benchmarks/fused_trainer.py            # writes benchmarks/fused_trainer.md
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from iotfl_sim.exec.base import NumericData  # noqa: E402
from iotfl_sim.exec.fused import CPU_FUSE_MAX_STEP_FLOPS, FusedExecutor  # noqa: E402
from iotfl_sim.exec.inline import InlineExecutor  # noqa: E402
from iotfl_sim.exec.pool import PoolExecutor  # noqa: E402
from iotfl_sim.fl.recipe import ModelRecipe  # noqa: E402
from iotfl_sim.fl.submodel import SubmodelSpec  # noqa: E402
from iotfl_sim.fl.train import TrainJob  # noqa: E402

OUT_MD = ROOT / "benchmarks" / "fused_trainer.md"
# (label, family, (channels, size), submodel rate, samples per client, epochs, batch size)
CASES = (
    ("cnn_small, 8x8 digits shape, rate 1", "cnn_small", (1, 8), 1.0, 24, 2, 10),
    ("cnn_small, 28x28 FEMNIST shape, rate 1", "cnn_small", (1, 28), 1.0, 40, 1, 10),
    ("conv, 28x28 MNIST shape, rate 0.125", "conv", (1, 28), 0.125, 40, 1, 10),
    ("conv, 28x28 MNIST shape, rate 0.25", "conv", (1, 28), 0.25, 40, 1, 10),
    ("conv, 28x28 MNIST shape, rate 0.5", "conv", (1, 28), 0.5, 40, 1, 10),
    ("conv, 28x28 MNIST shape, rate 1", "conv", (1, 28), 1.0, 40, 1, 10),
    ("mlp, 9x1x128 HAR shape, rate 1", "mlp", (9, 128), 1.0, 40, 1, 10),
)


def make_jobs(case: tuple, clients: int) -> tuple[list[TrainJob], torch.Tensor, torch.Tensor]:
    _, family, (cin, size), rate, samples, epochs, batch = case
    shape = (1, size) if family == "mlp" else (size, size)
    recipe = ModelRecipe(family, 10, cin, shape)
    spec = SubmodelSpec(rate)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(clients * samples, cin, *shape, generator=gen)
    y = torch.randint(0, 10, (clients * samples,), generator=gen)
    jobs = []
    for c in range(clients):
        torch.manual_seed(c)
        jobs.append(
            TrainJob(
                key=c,
                recipe=recipe,
                spec=spec,
                weights=recipe.build(spec).state_dict(),
                indices=np.arange(c * samples, (c + 1) * samples),
                epochs=epochs,
                batch_size=batch,
                lr=0.05,
                momentum=0.9,
                weight_decay=5e-4,
                clip_grad_norm=1.0,
                label_mask=None,
                seed=100 + c,
            )
        )
    return jobs, x, y


def time_runs(executors: dict, jobs: list[TrainJob], repetitions: int) -> tuple[dict[str, list[float]], dict]:
    """Seconds per executor, interleaved (A B C D, A B C D, ...), after one untimed warm-up round each."""
    times: dict[str, list[float]] = {k: [] for k in executors}
    results: dict = {}
    for ex in executors.values():
        ex.run(jobs[:2])  # warm-up: skeletons, first-call overheads
    for _ in range(repetitions):
        for name, ex in executors.items():
            t0 = time.perf_counter()
            results[name] = ex.run(jobs)
            times[name].append(time.perf_counter() - t0)
    return times, results


def max_state_diff(results: list, reference: list) -> float:
    """The largest absolute difference of any trained state entry, job by job."""
    return max(
        (a.state[k] - b.state[k]).abs().max().item() for a, b in zip(results, reference, strict=True) for k in a.state
    )


def step_flops(job: TrainJob) -> float:
    """Forward FLOPs of one of the job's steps (per sample x batch size)."""
    return job.recipe.cost(job.spec).flops_forward_per_sample * job.batch_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[10])
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--out", type=Path, default=OUT_MD)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    load_before = os.getloadavg()
    for case in CASES:
        for n in args.clients:
            jobs, x, y = make_jobs(case, n)
            nd = NumericData(x, y, x, x, y)
            pools = {"pool": PoolExecutor(nd, 2, 1), "fused pool": PoolExecutor(nd, 2, 1, fuse=True)}
            try:
                times, res = time_runs(
                    {"inline": InlineExecutor(nd, 1), "fused": FusedExecutor(x, y, cpu_max_step_flops=None), **pools},
                    jobs, args.repetitions,
                )  # fmt: skip
            finally:
                for p in pools.values():
                    p.close()
            diff = max_state_diff(res["fused"], res["inline"])
            step = step_flops(jobs[0])
            fuses = FusedExecutor(x, y).can_fuse(jobs)
            rows.append((case[0], n, case[4], case[5], case[6], step, fuses, times, diff))
            print(f"{case[0]:40s} N={n:3d} " + " ".join(f"{k} {min(v):.3f}s" for k, v in times.items()) + f" diff {diff:.1e}")
    load_after = os.getloadavg()
    write_md(args.out, rows, args, load_before, load_after)


def write_md(out: Path, rows: list, args, load_before, load_after) -> None:
    lines = [
        "# Fused multi-client trainer vs inline training (CPU, 1 torch thread)",
        "",
        "Generated by `python benchmarks/fused_trainer.py`; the script overwrites this file.",
        "",
        f"Host: {platform.processor() or platform.machine()}, torch {torch.__version__}, 1 torch thread; "
        f"load average {' '.join(f'{v:.2f}' for v in load_before)} before, "
        f"{' '.join(f'{v:.2f}' for v in load_after)} after (a shared 2-core machine: other jobs ran beside this one).",
        "",
        f"Each cell: `executor.run(jobs)` seconds for one round of N clients of the same submodel "
        f"(fastest; median of {args.repetitions}), one untimed warm-up round first. SGD lr 0.05, momentum 0.9, "
        "weight decay 5e-4, clipping at 1.0, plain CE, random data of the dataset's shape. "
        "max |diff| = largest absolute difference of any trained state entry, fused vs inline.",
        "",
        "| model | N | samples x epochs, batch | fwd MFLOP per step | inline s | fused s | fused / inline "
        "| fused on a CPU | pool (2) s | kind: fused (2) s | fused kind / pool | max abs diff |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, n, samples, epochs, batch, step, fuses, t, diff in rows:
        cell = {k: f"{min(v):.3f}; {statistics.median(v):.3f}" for k, v in t.items()}
        lines.append(
            f"| {label} | {n} | {samples} x {epochs}, {batch} | {step / 1e6:.1f} | {cell['inline']} | {cell['fused']} "
            f"| {min(t['fused']) / min(t['inline']):.2f} | {'yes' if fuses else 'no'} | {cell['pool']} "
            f"| {cell['fused pool']} | {min(t['fused pool']) / min(t['pool']):.2f} | {diff:.1e} |"
        )
    ratios = [min(r[7]["fused"]) / min(r[7]["inline"]) for r in rows]
    kind = [min(r[7]["fused pool"]) / min(r[7]["pool"]) for r in rows]
    lines += [
        "",
        "## Reading",
        "",
        f"On this CPU the fused trainer takes {min(ratios):.2f}x to {max(ratios):.2f}x the inline time "
        "(below 1 = faster). What it saves on a CPU is per-step Python and dispatch overhead (one vmapped "
        "step serves all N clients); the arithmetic is the same, and under vmap a convolution becomes a grouped "
        "convolution, which the CPU kernels run slower per FLOP than N plain ones: the gain turns into a loss "
        "as the step grows. That is why `kind: fused` used to be 2.7x slower than the pool on the conv job: it "
        "ran in one process on one thread (half the cores of a 2-worker pool), with every step of the full-width "
        "conv fused. Now, on a CPU, `kind: fused` is a pool whose workers fuse their share of each group, and only "
        f"groups whose step is at most `CPU_FUSE_MAX_STEP_FLOPS` ({CPU_FUSE_MAX_STEP_FLOPS / 1e6:g} MFLOP) are fused "
        f"(column *fused on a CPU*); kind: fused / pool here: {min(kind):.2f}x to {max(kind):.2f}x. `kind: auto` never "
        "picks the fused trainer on a CPU: it is not bitwise equal to inline, and its gain is small where it exists.",
        "",
        "On a GPU: `benchmarks/fused_cuda.md` (an H200 against 16 host cores: the fused trainer took 0.08-0.36x "
        "the time of 16 worker threads).",
        "",
        "max abs diff: float32 rounding of batched vs per-client kernels. Usually about 1e-7; a rare "
        "discrete flip (a max-pool argmax or ReLU sign decided by the last bit) moves a few entries by up "
        "to about 5e-4 after a few steps. In float64 the two agree to about 1e-14 (checked on the conv case and on cnn_small with 50 clients, where float32 differed by 4.9e-4 in one client) "
        "(tests/test_fused.py checks both).",
        "",
    ]
    out.write_text("\n".join(lines))


if __name__ == "__main__":
    main()
