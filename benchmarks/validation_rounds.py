"""Round-level validation (issue 46 item 5): simulated per-round time and energy beside published real-device runs.

Runs the scenarios in scenarios/validation/ (system-only, a few simulated rounds, seconds of CPU each) with the
bundled profiles as sourced (nothing fitted on these runs) and prints each published per-round figure beside the
simulated one with the relative error (simulated - published) / published, then the median and worst absolute
error per quantity against issue 46's targets (training time <= 15 %, energy <= 25 %).

    python benchmarks/validation_rounds.py            # writes benchmarks/validation_rounds.md
    python benchmarks/validation_rounds.py --no-write

Published figures: FedX's device rows are read from validation/fedx.csv (Tables I-III training time, Table III
Nano rail powers), its communication column from fedx_device_setting.PAPER_DEVICE; the Raspberry Pi 4 run's
per-round training times are PI4_PUBLISHED below (read from the source's metrics.csv).
"""

from __future__ import annotations

import argparse
import csv
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from fedx_device_setting import PAPER_DEVICE, events, task_times  # noqa: E402

SCENARIOS = ROOT / "scenarios" / "validation"
OUT_MD = ROOT / "benchmarks" / "validation_rounds.md"
TARGETS = {"training time": 0.15, "energy": 0.25}  # issue 46: median absolute error
LEVELS = ("small", "medium", "large")
FEDX_GROUPS = {"pi5": ("Raspberry Pi 5", "pi5-c10-{}"), "nano": ("Jetson Nano GPU", "nano-gpu-c10-{}"),
               "qcs605": ("QCS605 AI kit", "qcs605-c10-{}")}  # fmt: skip
# yeeiia/Hardware-Course-Project @ 053a6df715351e18495f0bb75e562c366dbc2f05, runs/pi-10k-resnet18/metrics.csv,
# column train_time (s) of the phase=train rows, per round. pi99 ran unthrottled (throttled=0x0); pi127's fan was
# broken (throttled=0xf0006/0xf0008), so its rows are shown and not scored.
PI4_PUBLISHED = {"pi99": {1: 5248.991881766, 2: 5247.624382063999, 3: 5267.048002732998},
                 "pi127": {1: 10454.321329093, 2: 11197.703753521, 3: 11128.607480949002}}  # fmt: skip


@dataclass(frozen=True)
class Row:
    experiment: str
    item: str
    quantity: str
    simulated: float
    published: float
    scored: bool = True
    note: str = ""


def rel_err(simulated: float, published: float) -> float:
    """(simulated - published) / published."""
    if not published > 0:
        raise ValueError(f"published value must be positive, got {published}")
    return (simulated - published) / published


def summarize(rows: Iterable[Row]) -> dict[str, tuple[int, float, float, bool | None]]:
    """Per quantity over the scored rows: (count, median |error|, worst |error|, target met or None if no target)."""
    by: dict[str, list[float]] = {}
    for r in rows:
        if r.scored:
            by.setdefault(r.quantity, []).append(abs(rel_err(r.simulated, r.published)))
    out: dict[str, tuple[int, float, float, bool | None]] = {}
    for q, errs in by.items():
        med = statistics.median(errs)
        target = TARGETS.get(q)
        out[q] = (len(errs), med, max(errs), None if target is None else med <= target)
    return out


def _value(cell: str, units: dict[str, float]) -> float:
    number, unit = cell.split()
    return float(number) * units[unit]


def fedx_published() -> dict[str, dict[str, dict[str, float]]]:
    """FedX CIFAR-10 rows of validation/fedx.csv: per group and level, training s and (Nano) rail power W."""
    with open(ROOT / "validation" / "fedx.csv", newline="") as f:
        rows = {r["row"]: r for r in csv.DictReader(f)}
    out: dict[str, dict[str, dict[str, float]]] = {}
    for g, (_, pattern) in FEDX_GROUPS.items():
        for level in LEVELS:
            r = rows[pattern.format(level)]
            cell = {"train_s": _value(r["time"], {"s": 1.0})}
            if r["power"]:
                cell["power_w"] = _value(r["power"], {"W": 1.0, "mW": 1e-3})
            out.setdefault(g, {})[level] = cell
    return out


def _run(scenario: Path, sets: list[str], out: Path) -> Path:
    from iotfl_sim.cli import main

    args = ["run", str(scenario), "--out", str(out), "--quiet"]
    for s in sets:
        args += ["--set", s]
    if main(args) != 0:
        raise SystemExit(f"error: running {scenario} failed")
    (path,) = list(out.iterdir())
    return path


def _device_energy(path: Path) -> dict[int, float]:
    with open(path / "devices.csv", newline="") as f:
        return {int(r["device"]): float(r["energy_compute_j"]) for r in csv.DictReader(f)}


def fedx_rows(tmp: Path) -> list[Row]:
    pub = fedx_published()
    names = list(FEDX_GROUPS)  # device i of fedx_testbed.yaml is group i (one device per group)
    rows: list[Row] = []
    for level in LEVELS:
        path = _run(
            SCENARIOS / "fedx_testbed.yaml", [f"algorithm.mix={{{level}: 1.0}}"], tmp / f"fedx_{level}"
        )
        energy = _device_energy(path)
        for t in task_times(events(path)):
            g = names[t["device"]]
            label, _ = FEDX_GROUPS[g]
            item = f"{label}, {level}"
            p_train, p_comm = pub[g][level]["train_s"], PAPER_DEVICE[g][level][1]
            rows += [Row("FedX", item, "training time", t["train"], p_train),
                     Row("FedX", item, "communication", t["comm"], p_comm),
                     Row("FedX", item, "round (training + communication)", t["train"] + t["comm"], p_train + p_comm)]  # fmt: skip
            if "power_w" in pub[g][level]:
                rows.append(Row("FedX", item, "energy", energy[t["device"]], pub[g][level]["power_w"] * p_train,
                                note="published = Table III GPU + CPU rail power x training time (rails only)"))  # fmt: skip
    return rows


def pi4_rows(tmp: Path) -> list[Row]:
    path = _run(SCENARIOS / "pi4_fedavg_resnet18.yaml", [], tmp / "pi4")
    rows: list[Row] = []
    for t in task_times(events(path)):
        client = ("pi99", "pi127")[t["device"]]
        rnd = t["round"] + 1
        note = "" if client == "pi99" else "throttled (broken fan): not scored"
        rows.append(Row("Pi 4 FedAvg ResNet18", f"{client}, round {rnd}", "training time", t["train"],
                        PI4_PUBLISHED[client][rnd], scored=client == "pi99", note=note))  # fmt: skip
    return rows


def render(rows: list[Row], header: list[str]) -> str:
    lines = [*header, "| experiment | device, setting | quantity | simulated | published | rel. error | note |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        note = r.note if r.scored else (r.note or "not scored")
        lines.append(f"| {r.experiment} | {r.item} | {r.quantity} | {r.simulated:.4g} | {r.published:.4g} | "
                     f"{rel_err(r.simulated, r.published):+.0%} | {note} |")  # fmt: skip
    lines += ["", "## Summary (scored rows)", "", "| quantity | rows | median abs. error | worst abs. error | target | met |",
              "|---|---|---|---|---|---|"]  # fmt: skip
    for q, (n, med, worst, met) in summarize(rows).items():
        target = f"<= {TARGETS[q]:.0%}" if q in TARGETS else "-"
        lines.append(
            f"| {q} | {n} | {med:.0%} | {worst:.0%} | {target} | {'-' if met is None else ('yes' if met else 'no')} |"
        )
    for exp in dict.fromkeys(r.experiment for r in rows):
        for q, (n, med, worst, _met) in summarize(r for r in rows if r.experiment == exp).items():
            lines.append(f"| {q} ({exp} only) | {n} | {med:.0%} | {worst:.0%} | - | - |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    load, wall0 = os.getloadavg(), time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        rows = fedx_rows(Path(tmp)) + pi4_rows(Path(tmp))
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    header = ["# Round-level validation: simulated per-round time and energy beside published real-device runs", "",
              "Generated by `python benchmarks/validation_rounds.py` from `scenarios/validation/*.yaml` (system-only, "
              "bundled profiles as sourced, nothing fitted on these runs; each scenario's header names its source and "
              "what each setting reproduces). Relative error = (simulated - published) / published.", "",
              f"This run: {time.perf_counter() - wall0:.0f} s wall, {cpu.ru_utime + cpu.ru_stime:.0f} s CPU, load "
              f"average at start {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (2 shared cores).", ""]  # fmt: skip
    text = render(rows, header) + "\n\n" + NOTES
    print(text)
    if not a.no_write:
        OUT_MD.write_text(text)


NOTES = """## Reading the numbers

- **Targets missed, on both experiments.** Training time is 58-91 % short of the measurements everywhere; nothing
  here was fitted to these runs (the profiles are the bundled, sourced ones), so this is the held-out error of the
  per-operator roofline as it stands. The term responsible is the compute rate: in every row the training time is
  the roofline's sum over traced ATen ops of max(FLOPs / F, bytes / B) + n_ops x o with F, B, o from the profile,
  and the devices ran these workloads at a fraction of those rates.
- **FedX (Tables I-III, CIFAR-10).** Simulated / published training time is 0.09-0.28, as
  benchmarks/calibration_fedx.md found on the same cells with its own module (0.08-0.26 sourced-only). The
  in-sample version, with per-op overheads (Pi 5, QCS605) and the Nano's bandwidth fraction fitted on these same
  cells, is scenarios/fedx_device_setting.yaml (16-32 % on them, benchmarks/fedx_device_setting.md); it is not a
  validation and is not repeated here. Communication (params x bits / 8 at 30 Mb/s, bits assumed as in that
  scenario) is within 27 %; FedX does not state the bits behind its communication column.
- **FedX energy (Nano GPU, 3 rows).** The published figure is Table III's GPU + CPU rail power times the training
  time (rails only, no board overhead). The simulated energy is the profile's constant train_w (7 W, an assumption
  near the 10 W budget) times the simulated time: 3.6-4.6x the rail power times 0.13-0.19 of the time. The 16-51 %
  errors are two large errors in opposite directions, not agreement; the activity-dependent power terms (issue 46
  item 4) and the time error above are what must change.
- **Raspberry Pi 4, FedAvg ResNet18 on CIFAR-10 (3 rounds, client pi99).** The roofline prices a round at 2192 s
  (FLOPs / F alone is 2084 s: 33.3 TFLOP at the profile's 1.6e10 FLOP/s); the unthrottled Pi took 5248-5267 s,
  i.e. it reached about 6.4 GFLOP/s, 0.40 of the rate the profile took from a ResNet18 step at 224x224, batch 16
  (jafermarq/federated-embedded-vision, another source, so this row is held out). Candidate causes, none
  separable from the published log: 32x32 maps at batch 32 instead of 224x224 at batch 16, a different PyTorch
  build (2.6.0), and data loading inside the timed loop. The throttled client pi127 (broken fan, 84-85 C,
  2.0-2.1x slower than pi99) is shown for completeness; thermal throttling is not modelled. The source published
  no energy and no transfer times, so this experiment scores training time only.
- **Second experiments tried and why not used.** CoLExT (sands-lab/colext): the repository's plots are
  normalised per device type (no absolute seconds or joules) and the paper's tables are not readable here.
  NEBULA's physical testbed (arXiv 2505.08033) and the Future Internet 2023 Raspberry Pi paper: only the opening
  of each page is readable, no figures. Flower's embedded-devices example and jafermarq/federated-embedded-vision:
  no per-round figures (the latter's step times are device-level corpus rows already). FedML-AI/FedIoT
  (experiments/Resberry_Pi/Readme.md: per-round computation and communication on one Pi 4): the data behind each
  round and what the computation time covers are not stated. qub-blesson FedAdapt/FedComm: a two-round result
  file without the devices it came from. The Raspberry Pi 4 run used instead is a course project, not
  peer-reviewed; its setting and per-round logs are complete in the repository.
"""

if __name__ == "__main__":
    main()
