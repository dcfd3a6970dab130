"""How fast could the IoT job of ``benchmarks/peers.py`` run on this host at all? Its arithmetic against the
host's measured peak, and against PyTorch's own kernels on the job's exact shapes; and how much of each peers
job's memory is spent before its first round.

The job (``peers.iot_scenario``, the one place its facts live): FedAvg, FEMNIST, 1,000 IID devices, 100 per
round, ``cnn_small``, E=1, B=10, 5 rounds, the global model tested on the whole test set every round.

Measured here, each the fastest of ``--repeat`` tries (one torch thread, as iotfl-sim's workers run):
- *matmul peak*: float32 GFLOP/s of square matrix products (512, 1024, 2048), the most this core does;
- *kernel times*: one training step of ``cnn_small`` in channels_last (forward, cross-entropy, backward,
  gradient clipping, SGD with momentum) at each batch size the job's clients take, and one evaluation
  forward at ``server.eval_batch_size`` of the model a run scores with (``fl.scoring_model``: ReLU in place);
- *side by side*: the same kernel loops on every usable core at once, one thread each with a model of its own
  (as a run's worker threads train): the slowest thread's time, what sharing caches and memory costs;
- *start-up*: a new process importing iotfl-sim, loading FEMNIST (its coded arrays from the disk cache, as every
  run after the first reads them) and exiting as the command does: the least any run pays besides its rounds.

Counted, not measured: IID partition sizes (14,708 samples over 1,000 devices: 708 hold 15, 292 hold 14,
so a client takes one step of 10 and one of 5 or 4), the expected samples trained (5 rounds x 100 clients x
14.708) and tested (5 x 1,685), forward FLOPs per sample from iotfl-sim's cost model, a training step as
three forward passes (the usual rule; the first layer's input gradient is skipped, so slightly less).

Floors on ``cores`` usable cores with perfect parallelism and no simulator work at all:
- FLOP floor = job FLOPs / (cores x matmul peak): no PyTorch CPU program runs the job faster here;
- kernel floor = kernel times x steps / cores: what these kernels at these batch sizes allow (with the
  side-by-side times: what they allow when every core runs them at once, as a run does);
each plus the start-up. The peers' fastest walls come from ``benchmarks/peers.md``.

Memory: the proportional set size (PSS, as peers.py measures it) of a new process after importing iotfl-sim,
and after loading each job's dataset; beside it the median peaks of ``benchmarks/peers.md``: what a run adds
on top (workers' training and evaluation working sets, the round's results, what the allocator keeps).

Run from the repository root on a quiet machine::

    IOTFL_DATA=/work/shared/datasets python benchmarks/compute_floor.py   # writes benchmarks/compute_floor.md
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]

import torch  # noqa: E402
from peers import OUT_MD as PEERS_MD  # noqa: E402
from peers import iot_scenario  # noqa: E402

from iotfl_sim.exec.cores import available_cores  # noqa: E402
from iotfl_sim.fl.data.datasets import load_dataset  # noqa: E402
from iotfl_sim.fl.layout import batch_layout, model_layout  # noqa: E402
from iotfl_sim.fl.recipe import ModelRecipe  # noqa: E402
from iotfl_sim.fl.scoring_model import scoring_model  # noqa: E402
from iotfl_sim.fl.sgd import PlainSGD  # noqa: E402
from iotfl_sim.fl.submodel import SubmodelSpec  # noqa: E402

OUT_MD = HERE / "compute_floor.md"
ROUNDS = 5
EVAL_BATCH = 100  # server.eval_batch_size's default, which the job keeps
# Exits as the command does (cli.entry: gc.freeze first), or the interpreter's final collections add 0.4 s
STARTUP = ("import iotfl_sim.cli, iotfl_sim.sim.engine, iotfl_sim.sim.setup; "
           "from iotfl_sim.fl.data.datasets import load_dataset; load_dataset('femnist'); import gc; gc.freeze()")


def best_of(repeat: int, fn) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def matmul_peak(repeat: int) -> float:
    best = 0.0
    for n in (512, 1024, 2048):
        a, b = torch.randn(n, n), torch.randn(n, n)
        a @ b
        best = max(best, 2 * n**3 / best_of(repeat, lambda a=a, b=b: a @ b) / 1e9)
    return best


def step_run(recipe: ModelRecipe, batch: int, steps: int) -> Callable[[], None]:
    """``steps`` training steps of a model of its own, warmed up (kernel selection, first allocations)."""
    model = model_layout(recipe.build(SubmodelSpec(1.0)))
    opt = PlainSGD(model.parameters(), lr=0.05, momentum=0.9)  # the run's optimizer
    x = batch_layout(torch.randn(batch, recipe.in_channels, *recipe.image_size))
    y = torch.randint(0, recipe.num_classes, (batch,))

    def run() -> None:
        for _ in range(steps):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()

    run()
    return run


def forward_run(recipe: ModelRecipe, batch: int, steps: int) -> Callable[[], None]:
    model = scoring_model(model_layout(recipe.build(SubmodelSpec(1.0))).eval())  # the twin a run scores with
    x = batch_layout(torch.randn(batch, recipe.in_channels, *recipe.image_size))

    def run() -> None:
        with torch.inference_mode():
            for _ in range(steps):
                model(x)

    run()
    return run


def alone_and_side_by_side(make: Callable[[], Callable[[], None]], steps: int, cores: int, repeat: int) -> tuple[float, float]:
    """Seconds per step of ``make()``'s loop on one thread alone, and with ``cores`` threads each running its own
    copy at once (the slowest thread's time): what sharing caches and memory with the other core's kernels costs,
    as a run's worker threads do."""
    runs = [make() for _ in range(cores)]
    alone = best_of(repeat, runs[0]) / steps

    def together() -> float:
        start, times = threading.Barrier(cores), [0.0] * cores

        def one(i: int) -> None:
            start.wait()
            t0 = time.perf_counter()
            runs[i]()
            times[i] = time.perf_counter() - t0

        threads = [threading.Thread(target=one, args=(i,)) for i in range(cores)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return max(times)

    return alone, min(together() for _ in range(repeat)) / steps


def startup_seconds(repeat: int) -> float:
    subprocess.run([sys.executable, "-c", STARTUP], check=True)  # fills the disk cache
    return best_of(repeat, lambda: subprocess.run([sys.executable, "-c", STARTUP], check=True))


PSS_AFTER = """
import re, sys
def pss():
    return int(re.search(r"Pss:\\s+(\\d+)", open("/proc/self/smaps_rollup").read()).group(1)) / 1024
import iotfl_sim.cli, iotfl_sim.sim.engine, iotfl_sim.sim.setup
from iotfl_sim.fl.data.datasets import load_dataset
before = pss()
load_dataset(sys.argv[1])
print(before, pss())
"""


def pss_mb(dataset: str) -> tuple[float, float]:
    """PSS (MB) of a new process after its imports, and after loading ``dataset``."""
    out = subprocess.run([sys.executable, "-c", PSS_AFTER, dataset], check=True, capture_output=True, text=True)
    imports, loaded = map(float, out.stdout.split())
    return imports, loaded


def peers_table(job: str) -> dict[str, tuple[float, float]]:
    """Side label's first word -> (fastest wall s, median peak MB) from the job's table in peers.md."""
    text = PEERS_MD.read_text()
    section = text[text.index(f"## {job}:"):]
    section = section[: section.index("\n\n", section.index("| side |"))]
    rows = re.findall(r"^\| (\S+)[^|]*\| ([\d.]+) \| [\d.]+ \| [\d.]+ \| (\d+), \d+ \|", section, flags=re.M)
    return {side: (float(wall), float(peak)) for side, wall, peak in rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=OUT_MD)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    load_before = os.getloadavg()
    sc = iot_scenario(ROUNDS)
    ds = load_dataset(sc["data"]["dataset"])
    devices, per_round = sc["fleet"]["groups"][0]["count"], sc["clients_per_round"]
    batch = sc["local"]["batch_size"]
    model = sc["model"]  # the job's options: without them the recipe would build BatchNorm and HeteroFL's scaler
    recipe = ModelRecipe(model["family"], ds.num_classes, ds.in_channels, ds.image_size, norm=model["norm"],
                         scaler=model["scaler"])
    flops_fwd = recipe.cost(SubmodelSpec(1.0)).flops_forward_per_sample
    n_train, n_test = len(ds.y_train), len(ds.y_test)
    small, large = n_train // devices, n_train // devices + 1  # IID sizes
    n_large = n_train - small * devices
    sizes = {small: devices - n_large, large: n_large}
    train_samples = ROUNDS * per_round * n_train / devices
    test_samples = ROUNDS * n_test
    flops = 3 * flops_fwd * train_samples + flops_fwd * test_samples

    peak = matmul_peak(args.repeat)
    tails = sorted({s % batch for s in sizes if s % batch})
    cores = available_cores().usable
    # (alone, side by side) seconds per step
    step = {b: alone_and_side_by_side(lambda b=b: step_run(recipe, b, 40), 40, cores, args.repeat) for b in (batch, *tails)}
    tail = n_test % EVAL_BATCH
    fwd_full = alone_and_side_by_side(lambda: forward_run(recipe, EVAL_BATCH, 8), 8, cores, args.repeat)
    fwd_tail = alone_and_side_by_side(lambda: forward_run(recipe, tail, 8), 8, cores, args.repeat) if tail else (0.0, 0.0)
    startup = startup_seconds(args.repeat)

    def kernel_seconds(which: int) -> tuple[float, float]:
        per_client = sum(count / devices * (size // batch * step[batch][which]
                                            + (step[size % batch][which] if size % batch else 0.0))
                         for size, count in sizes.items())
        return ROUNDS * per_round * per_client, ROUNDS * (n_test // EVAL_BATCH * fwd_full[which] + fwd_tail[which])

    train_s, eval_s = kernel_seconds(0)
    train_2, eval_2 = kernel_seconds(1)
    flop_floor = startup + flops / (cores * peak * 1e9)
    kernel_floor = startup + (train_s + eval_s) / cores
    shared_floor = startup + (train_2 + eval_2) / cores
    load_after = os.getloadavg()

    peers = {side: wall for side, (wall, _) in peers_table("iot").items()}
    memory = {job: (pss_mb(dataset), peers_table(job)) for job, dataset in (("conv", "mnist"), ("iot", sc["data"]["dataset"]))}
    lines = [
        "# The IoT job's floor on this host", "",
        "Generated by `benchmarks/compute_floor.py` (its docstring says what is measured and what is counted); "
        "the script overwrites this file.",
        f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; host {platform.machine()}, torch {torch.__version__}, "
        f"{cores} usable cores, 1 torch thread; load average {' '.join(f'{v:.2f}' for v in load_before)} before, "
        f"{' '.join(f'{v:.2f}' for v in load_after)} after; fastest of {args.repeat} tries each.", "",
        "| quantity | value |", "|---|---|",
        f"| forward FLOPs per sample (`cnn_small`, 1x28x28, {ds.num_classes} classes) | {flops_fwd / 1e6:.2f} M |",
        f"| samples trained (expected) / tested | {train_samples:,.0f} / {test_samples:,} |",
        f"| job FLOPs (training as 3 forward passes) | {flops / 1e12:.3f} T |",
        f"| matmul peak, one core | {peak:.1f} GFLOP/s |",
        *[f"| training step at batch {b}, alone / {cores} side by side | {1e3 * s:.2f} / {1e3 * s2:.2f} ms "
          f"({3 * flops_fwd * b / s / 1e9:.1f} / {3 * flops_fwd * b / s2 / 1e9:.1f} GFLOP/s) |" for b, (s, s2) in step.items()],
        f"| evaluation forward at batch {EVAL_BATCH}, alone / {cores} side by side | {1e3 * fwd_full[0]:.2f} / "
        f"{1e3 * fwd_full[1]:.2f} ms ({flops_fwd * EVAL_BATCH / fwd_full[0] / 1e9:.1f} / "
        f"{flops_fwd * EVAL_BATCH / fwd_full[1] / 1e9:.1f} GFLOP/s) |",
        f"| kernel time of the job on one core: training / evaluation, alone | {train_s:.2f} s / {eval_s:.2f} s |",
        f"| the same, {cores} side by side | {train_2:.2f} s / {eval_2:.2f} s |",
        f"| start-up (new process: imports + FEMNIST from the disk cache) | {startup:.2f} s |",
        f"| **FLOP floor** (start-up + FLOPs / ({cores} x peak)) | **{flop_floor:.2f} s** |",
        f"| **kernel floor** (start-up + kernel time alone / {cores}) | **{kernel_floor:.2f} s** |",
        f"| **kernel floor, side by side** (start-up + kernel time side by side / {cores}) | **{shared_floor:.2f} s** |", "",
        "From `benchmarks/peers.md` (fastest walls of the IoT job): "
        + ", ".join(f"{side} {wall:.1f} s" for side, wall in peers.items()) + ".", "",
    ]
    for side in ("Flower", "FLGo"):
        if side in peers:
            need = peers[side] / 3
            lines.append(f"- 3x {side} needs at most **{need:.2f} s**: the FLOP floor is {flop_floor / need:.2f}x that, "
                         f"the kernel floor {kernel_floor / need:.2f}x, side by side {shared_floor / need:.2f}x"
                         + (" (out of reach on this host)." if min(kernel_floor, shared_floor) > need else "."))
    if "iotfl-sim" in peers:
        lines.append(f"- iotfl-sim's fastest run ({peers['iotfl-sim']:.1f} s) is {peers['iotfl-sim'] / kernel_floor:.2f}x "
                     f"the kernel floor, {peers['iotfl-sim'] / shared_floor:.2f}x the side-by-side one: what a simulator "
                     "adds on top of the arithmetic and the start-up.")
    lines += ["", "## Memory (PSS, MB)", "",
              "| job | after imports | + dataset loaded | iotfl-sim peak (median) | added by the run | Flower peak / 4 | "
              "left for the run at Flower / 4 |", "|---|---|---|---|---|---|---|"]
    for job, ((imports, loaded), table) in memory.items():
        ours, flower = table.get("iotfl-sim", (0, 0))[1], table.get("Flower", (0, 0))[1]
        lines.append(f"| {job} | {imports:.0f} | {loaded:.0f} | {ours:.0f} | {ours - loaded:.0f} | {flower / 4:.0f} | "
                     f"{flower / 4 - loaded:.0f} |")
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
