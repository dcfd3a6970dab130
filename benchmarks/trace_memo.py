"""Tracing a training step with and without the meta-kernel memo (``iotfl_sim.fl.cost.meta_memo``).

A method's set-up and ``iotfl-sim validate`` trace every submodel a run can send (``opcost.affine_trace``: a
training step at two batch sizes on the meta device). This times, per family, the traces of four widths at both
batches (what one method's set-up traces for four levels), from an empty memo each time, with PyTorch's meta kernels
alone and with the memo, interleaved (A B A B ...), in one process after a warm-up trace; CPU seconds (process time)
are reported beside the ratio, and every trace with the memo is checked to equal its trace without it.

    python benchmarks/trace_memo.py [--reps 5] [--out benchmarks/trace_memo.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from iotfl_sim.fl.cost import meta_memo, opcost
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec

CASES = [  # (family, norm, channels, image size)
    ("cnn_small", "bn", 1, (8, 8)),
    ("conv", "ln", 3, (32, 32)),
    ("resnet18", "bn", 3, (32, 32)),
    ("vgg16", "bn", 3, (32, 32)),
    ("mobilenetv2", "bn", 3, (32, 32)),
    ("resnet110", "bn", 3, (32, 32)),
]
RATES = (1.0, 0.5, 0.25, 0.125)


def plain_call(func, args, kwargs):  # noqa: ANN001, ANN201 - opcost.meta_call's signature
    return func(*args, **kwargs)


def trace_all(recipe: ModelRecipe, memo: bool) -> tuple[float, list]:
    memo_call = opcost.meta_call
    opcost.meta_call = memo_call if memo else plain_call
    meta_memo._MEMO.clear()
    try:
        t0 = time.process_time()
        out = [opcost.trace_step_uncached(recipe, SubmodelSpec(r), b) for r in RATES for b in opcost._TRACE_BATCHES]
        return time.process_time() - t0, out
    finally:
        opcost.meta_call = memo_call


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("trace_memo.md"))
    args = ap.parse_args()
    rows = []
    for family, norm, channels, size in CASES:
        recipe = ModelRecipe(family, 10, channels, size, norm=norm)
        trace_all(recipe, True)  # warm-up: first-call costs (imports, the memo's per-op timing) out of the figures
        plain, memo = [], []
        for _ in range(args.reps):
            t_plain, a = trace_all(recipe, False)
            t_memo, b = trace_all(recipe, True)
            assert all(x.names == y.names and np.array_equal(x.flops, y.flops) and np.array_equal(x.bytes, y.bytes)
                       for x, y in zip(a, b, strict=True)), family  # fmt: skip
            plain.append(t_plain)
            memo.append(t_memo)
        p, m = statistics.median(plain), statistics.median(memo)
        rows.append((f"{family} ({norm})", len(a), p, m, p / m))
        print(f"{family:12s} plain {p:6.2f} CPU-s  memo {m:6.2f} CPU-s  {p / m:4.2f}x", flush=True)
    load = os.getloadavg()[0]
    lines = [
        "# Tracing with the meta-kernel memo",
        "",
        f"`python benchmarks/trace_memo.py --reps {args.reps}`: {len(RATES)} widths x {len(opcost._TRACE_BATCHES)} "
        f"batches per family, median CPU seconds of {args.reps} interleaved repetitions, {platform.processor() or platform.machine()}, "
        f"load average {load:.1f} at the end. Every trace with the memo equalled its trace without it.",
        "",
        "| family | traces | PyTorch's meta kernels (CPU-s) | with the memo (CPU-s) | faster |",
        "|---|---:|---:|---:|---:|",
        *(f"| {name} | {n} | {p:.2f} | {m:.2f} | {r:.2f}x |" for name, n, p, m, r in rows),
        "",
    ]
    args.out.write_text("\n".join(lines))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
