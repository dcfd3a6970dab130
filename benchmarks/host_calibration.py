"""Host self-calibration: `profiles measure` on this machine, then predicted vs measured local training time.

1. The micro-benchmarks of ``iotfl-sim profiles measure`` (``iotfl_sim.fl.cost.measure``) give this machine's
   FLOP/s, memory bandwidth and per-op overhead; nothing else is fitted.
2. The simulator's cost model (``iotfl_sim.fl.cost.opcost``, exactly what ``sim/device.py`` calls) prices one local
   training job of two scenarios with those numbers:
   - the quickstart (``scenarios/quickstart.yaml``): cnn_small on 8x8 digits, its local settings;
   - the MNIST conv job (``scenarios/heterofl_mnist_a2b8.yaml``): conv on MNIST, its local settings.
   A client holds the IID share of the training set (train size // devices), as the scenarios partition it.
3. The same jobs run for real here through ``fl.train.train_local`` (a 4-step warm-up excluded, then the fastest
   of repeated jobs, at least one), and the two are compared. Steps 1-3 are repeated (``--repetitions``) and the
   median ratio is reported, so one disturbed measurement does not decide the result.

Run from the repository root when the machine is otherwise idle (timings under load are meaningless)::

    IOTFL_DATA=/work/shared/datasets python benchmarks/host_calibration.py   # writes benchmarks/host_calibration.md
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from iotfl_sim.fl.cost import measure, opcost  # noqa: E402
from iotfl_sim.fl.data.datasets import load_dataset  # noqa: E402
from iotfl_sim.fl.recipe import ModelRecipe  # noqa: E402
from iotfl_sim.fl.submodel import SubmodelSpec  # noqa: E402
from iotfl_sim.fl.train import TrainJob, train_local  # noqa: E402
from iotfl_sim.scenario.loader import load_scenario  # noqa: E402
from iotfl_sim.scenario.profile import DeviceProfile  # noqa: E402

OUT_MD = ROOT / "benchmarks" / "host_calibration.md"
JOBS = (  # (label, scenario, submodel rate)
    ("quickstart (cnn_small, digits), level a", "scenarios/quickstart.yaml", 1.0),
    ("MNIST conv (heterofl_mnist_a2b8), level a", "scenarios/heterofl_mnist_a2b8.yaml", 1.0),
    ("MNIST conv (heterofl_mnist_a2b8), level b", "scenarios/heterofl_mnist_a2b8.yaml", 0.5),
)
TOLERANCE = 0.25


@dataclass
class JobResult:
    label: str
    samples: int
    epochs: int
    batch: int
    steps: int
    predicted_s: float
    flops_only_s: float
    measured_s: float  # fastest repeat
    repeats: int
    median_s: float

    @property
    def ratio(self) -> float:
        return self.predicted_s / self.measured_s


def run_job(label: str, scenario: str, rate: float, rates: tuple, seconds: float) -> JobResult:
    sc = load_scenario(ROOT / scenario)
    data = load_dataset(sc.data.dataset, sc.data.root)
    c, h, w = data.x_train.shape[1:]
    recipe = ModelRecipe(sc.model.family, data.num_classes, c, (h, w), sc.model.norm, sc.model.scaler)
    spec = SubmodelSpec(rate)
    loc = sc.local
    samples = len(data.y_train) // sc.num_devices()
    opts = opcost.StepOptions(loc.momentum, loc.weight_decay > 0, loc.clip_grad_norm is not None)
    flops_s, bw, overhead, kernels = rates
    predicted = opcost.train_seconds(recipe, spec, samples, loc.epochs, loc.batch_size, flops_s, bw, overhead, opts, kernels)
    flops_only = recipe.cost(spec).train_flops(samples * loc.epochs) / flops_s
    full, rest = opcost.steps_of(samples, loc.batch_size)

    torch.manual_seed(0)
    model = recipe.build(spec)
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    idx = np.random.default_rng(0).choice(len(data.y_train), size=samples, replace=False)
    job = TrainJob(
        key=0, recipe=recipe, spec=spec, weights=weights, indices=idx, epochs=loc.epochs, batch_size=loc.batch_size,
        lr=loc.lr, momentum=loc.momentum, weight_decay=loc.weight_decay, clip_grad_norm=loc.clip_grad_norm,
        label_mask=None, seed=0,
    )
    warm = replace(job, indices=idx[: 4 * loc.batch_size], epochs=1)
    train_local(model, warm, data.x_train, data.y_train)  # warm-up (4 steps), not timed
    times: list[float] = []
    end = time.perf_counter() + seconds
    while not times or time.perf_counter() < end:
        t0 = time.perf_counter()
        train_local(model, job, data.x_train, data.y_train)
        times.append(time.perf_counter() - t0)
    return JobResult(
        label, samples, loc.epochs, loc.batch_size, (full + (1 if rest else 0)) * loc.epochs, predicted, flops_only,
        min(times), len(times), statistics.median(times),
    )


def render(runs: list[tuple[dict, list[JobResult], str]]) -> str:
    """The report: one table per repetition (profile measured, then the jobs), and the median ratios."""
    labels = [r.label for r in runs[0][1]]
    med = {lab: statistics.median(rs[i].ratio for _, rs, _ in runs) for i, lab in enumerate(labels)}
    within = sum(abs(v - 1) <= TOLERANCE for v in med.values())
    out = [
        "# Host self-calibration: the measured profile of this machine vs its own training time",
        "",
        "Generated by `python benchmarks/host_calibration.py`; the script overwrites this file.",
        "",
        "## Result",
        "",
        f"**{within} of {len(labels)} jobs predicted within 25%** (median over {len(runs)} repetitions of "
        "\"measure this machine, then time the jobs\") by the roofline cost model with this machine's "
        "`profiles measure` numbers; nothing is fitted to the jobs.",
        "",
        "| job | median predicted / measured | per repetition | within 25% |",
        "|---|---|---|---|",
    ]
    for i, lab in enumerate(labels):
        per = ", ".join(f"{rs[i].ratio:.2f}" for _, rs, _ in runs)
        out.append(f"| {lab} | {med[lab]:.2f} | {per} | {'yes' if abs(med[lab] - 1) <= TOLERANCE else 'no'} |")
    out += [
        "",
        "Measured = wall time of `fl.train.train_local` on real data (the scenario's lr, momentum, weight decay, "
        "clipping; plain CE), fastest of the repeats after a 4-step warm-up that is not timed (the micro-benchmarks "
        "keep their fastest repeat too: both sides are the uncontended cost on this shared machine). "
        "Predicted = `fl.cost.opcost.train_seconds` with the measured profile, the same call the simulator makes for "
        "a device of this profile (jitter median 1). FLOPs only = the old rule, training FLOPs / the measured FLOP/s. "
        f"Torch threads: {torch.get_num_threads()} for both (the profile's sources say so).",
        "",
    ]
    for k, (profile, results, load) in enumerate(runs, 1):
        c = profile["compute"]
        out += [
            f"### Repetition {k} (load average at its start: {load})",
            "",
            f"Measured: {c['flops'] / 1e9:.1f} GFLOP/s, {c['mem_bw_gbs']:.1f} GB/s, {c['op_overhead_us']:.2f} us/op.",
            "",
            "| job | samples x epochs, batch | steps | predicted s (roofline) | predicted s (FLOPs only) | measured s "
            "(fastest; median) | predicted / measured |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in results:
            out.append(
                f"| {r.label} | {r.samples} x {r.epochs}, {r.batch} | {r.steps} | {r.predicted_s:.4f} | "
                f"{r.flops_only_s:.4f} | {r.measured_s:.4f}; {r.median_s:.4f} (of {r.repeats}) | {r.ratio:.2f} |"
            )
        out.append("")
    out += [
        f"## The measured profile (repetition {len(runs)})",
        "",
        "```yaml",
        yaml.safe_dump(runs[-1][0], sort_keys=False, width=200).rstrip(),
        "```",
        "",
    ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="budget of the micro-benchmarks")
    ap.add_argument("--job-seconds", type=float, default=10.0, help="timed repeats per job (after the warm-up)")
    ap.add_argument("--repetitions", type=int, default=3, help="measure-then-time-the-jobs repetitions")
    ap.add_argument(
        "--threads", type=int, default=1,
        help="torch threads for the micro-benchmarks and the jobs alike (1: immune to a second busy process on 2 cores)",
    )
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--out", type=Path, default=OUT_MD)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    runs = []
    for _ in range(args.repetitions):
        load = open("/proc/loadavg").read().split()[:3] if Path("/proc/loadavg").exists() else ["?"]
        m = measure.measure(args.seconds, family="conv")
        profile = measure.profile_dict(m, "this_host", "server", None, None)
        r = DeviceProfile.model_validate(profile).rates()
        rates = (r.flops, r.mem_bw, r.op_overhead_s, r.kernels)
        runs.append((profile, [run_job(label, sc, rate, rates, args.job_seconds) for label, sc, rate in JOBS], " ".join(load)))
        print(f"repetition {len(runs)}: " + ", ".join(f"{x.ratio:.2f}" for x in runs[-1][1]), file=sys.stderr)
    text = render(runs)
    print(text)
    if not args.no_write:
        args.out.write_text(text)
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
