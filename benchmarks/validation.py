"""Held-out validation of training time and energy against the corpus of published measurements (issue 46).

Reads every row of ``validation/*.csv`` with the shared reader (``iotfl_sim.fl.cost.corpus``) and prices it as
``iotfl-sim profiles check`` does (``iotfl_sim.fl.cost.check.check_row``: the engine's per-operator cost model and
its training energy), in two settings:

(a) sourced: each row on the bundled profile its ``profile`` column names, nothing fitted (``profiles check auto``);
    rows that name no profile are not priced here.
(b) fitted, held out: per device (the ``profile`` column, else the ``device`` column), the time parameters
    (``compute.flops``, ``mem_bw_gbs``, ``op_overhead_us``: those the training rows determine) and ``train_w``
    (board power rows only) fitted by ``profiles fit``'s machinery (``iotfl_sim.fl.cost.fit``) on some rows and
    measured on the others: leave-one-source-out where a device appears in several files, else
    leave-one-workload-out (workload = family, width, depth, input shape, batch). A device without a profile
    starts from a stand-in base (``STAND_IN``); only the parameters it keeps unfitted matter.

Writes ``benchmarks/validation.md`` (numbers, the command, load average, CPU and wall seconds, each target and the
rows that miss it with the reason) and the two predicted-vs-measured plots. Everything is traced on the meta
device: no data is read and nothing is trained, so the numbers do not depend on this machine.

Run from the repository root::

    python benchmarks/validation.py            # writes benchmarks/validation.md and the two PNGs
    python benchmarks/validation.py --no-write # print only
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from analysis.validation_plot import Point, scatter_figure  # noqa: E402
from iotfl_sim.fl.cost.check import Checked, check_row, summary  # noqa: E402
from iotfl_sim.fl.cost.corpus import DEVICE_CLASSES, Measurement, read_corpus  # noqa: E402
from iotfl_sim.fl.cost.fit import FIELD, fit, leave_one_out, operating_point  # noqa: E402
from iotfl_sim.profiles_cli import workload_text  # noqa: E402
from iotfl_sim.scenario.loader import load_profile  # noqa: E402
from iotfl_sim.scenario.profile import DeviceProfile  # noqa: E402

CORPUS = ROOT / "validation"
OUT = ROOT / "benchmarks"
COMMAND = "python benchmarks/validation.py"
TIME_TARGET, ENERGY_TARGET, OFF_BY = 0.15, 0.25, 2.0
# devices no bundled profile stands for: the base a fit starts from (its unfitted parameters are kept)
STAND_IN = {"phone": "phone_high", "edge_gpu": "raspberry_pi_4b"}
STAND_IN_WHY = {
    "phone": "Snapdragon 845-class; the rows are SM8150 phones",
    "edge_gpu": "4x Cortex-A72; the rows are the Jetson Nano's 4x Cortex-A57 CPU",
}


def device_of(m: Measurement) -> str:
    return m.profile or m.device


def base_of(rows: Sequence[Measurement]) -> DeviceProfile:
    m = rows[0]
    return load_profile(m.profile or STAND_IN[m.device_class])


def sourced(rows: Sequence[Measurement]) -> tuple[list[Checked], list[Measurement]]:
    """(rows priced on their own profile, rows that name none)."""
    profiles: dict[str, DeviceProfile] = {}
    out, skipped = [], []
    for m in rows:
        if not m.profile:
            skipped.append(m)
            continue
        p = profiles.setdefault(m.profile, load_profile(m.profile))
        out.append(check_row(m, p))
    return out, skipped


def split_of(rows: Sequence[Measurement]) -> tuple[str, Callable[[Measurement], Hashable]]:
    if len({m.file for m in rows}) > 1:
        return "leave-one-source-out", lambda m: m.file
    return "leave-one-workload-out", lambda m: m.workload


def rails_constant(rows: Sequence[Measurement], held: Sequence[Checked], key: Callable[[Measurement], Hashable]) -> dict[str, float]:
    """For rails rows: the held-out rail energy a constant rail power would give, the geometric mean of the other
    groups' rail powers x the held-out predicted time (what a ``train_w`` fitted to rail readings would charge)."""
    out = {}
    for c in held:
        if not c.m.rails:
            continue
        p = [w for m in rows if key(m) != key(c.m) and m.rails and (w := m.measured_power_w) is not None]
        if p:
            out[c.m.label] = math.exp(sum(map(math.log, p)) / len(p)) * c.time_s
    return out


def fit_text(base: DeviceProfile, rows: Sequence[Measurement], rates) -> str:  # noqa: ANN001
    """The time parameters a fit to all of a device's rows determines, with their values."""
    f = fit(base, rows, rates)
    unit = {"flops": (1e-9, "GFLOP/s"), "mem_bw": (1e-9, "GB/s"), "op_overhead": (1e6, "us")}
    got = [f"{p} {getattr(f.rates, FIELD[p]) * unit[p][0]:.3g} {unit[p][1]}" for p in f.fitted if p in unit]
    kept = [f"{p} kept ({why})" for p, why in f.kept.items() if p in unit]
    return "; ".join(got + kept)


def fitted(rows: Sequence[Measurement]) -> tuple[list[Checked], list[tuple[str, str, str, int, int, str]], dict[str, float]]:
    """Held-out rows of every device, (device, split, base, rows, fits that kept a time parameter, all-rows fit),
    and the rails-constant energies."""
    by_device: dict[str, list[Measurement]] = {}
    for m in rows:
        by_device.setdefault(device_of(m), []).append(m)
    held_all: list[Checked] = []
    splits = []
    rails: dict[str, float] = {}
    for dev, rs in by_device.items():
        base = base_of(rs)
        rates, _ = operating_point(base, rs)
        split, key = split_of(rs)
        held, short = leave_one_out(base, rs, rates, key)
        held_all.extend(held)
        splits.append((dev, split, base.name, len(rs), short, fit_text(base, rs, rates)))
        rails.update(rails_constant(rs, held, key))
    return held_all, splits, rails


# ----------------------------------------------------------------------------------------------------- report


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def summary_table(checked: Sequence[Checked], rails_const: dict[str, float] | None = None) -> list[str]:
    lines = [
        "| group | time: rows | median | worst (row) | rows > 2x off | energy, board: rows | median | "
        "energy, rails only: rows | median | worst (row) |"
        + (" rails, constant rail power: median |" if rails_const is not None else ""),
        "|---|---|---|---|---|---|---|---|---|---|" + ("---|" if rails_const is not None else ""),
    ]
    groups = summary(checked)
    for g, q in groups.items():
        mine = [c for c in checked if g == "all" or c.m.device_class == g]
        off = sum(not 1 / OFF_BY <= c.time_s / c.m.time_s <= OFF_BY for c in mine)
        t, e, r = q["time"], q["energy"], q["rails"]
        row = (
            f"| {g} | {t.n} | {pct(t.median)} | {pct(t.worst)} ({t.worst_row}) | {off} | "
            f"{e.n if e else 0} | {pct(e.median if e else None)} | {r.n if r else 0} | {pct(r.median if r else None)} | "
            + (f"{pct(r.worst)} ({r.worst_row}) |" if r else "- |")
        )
        if rails_const is not None:
            errs = [abs(rails_const[c.m.label] / e - 1) for c in mine if c.m.label in rails_const and (e := c.m.measured_energy_j)]
            row += f" {pct(statistics.median(errs)) if errs else '-'} |"
        lines.append(row)
    return lines


def rows_table(checked: Sequence[Checked], rails_const: dict[str, float] | None = None) -> list[str]:
    lines = [
        "| row | class | workload | priced on | time measured s | predicted s | error | energy measured J | predicted J | error |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in checked:
        m = c.m
        load = workload_text(m)
        e = m.measured_energy_j
        scope = " (rails)" if m.rails else ""
        lines.append(
            f"| {m.label} | {m.device_class} | {load} | {c.profile} | {m.time_s:.4g} | {c.time_s:.4g} | {100 * c.time_err:+.1f} % | "
            f"{'' if e is None else f'{e:.4g}{scope}'} | {'' if e is None else f'{c.energy_j:.4g}'} | "
            f"{'' if c.energy_err is None else f'{100 * c.energy_err:+.1f} %'} |"
        )
    return lines


def off_rows(checked: Sequence[Checked]) -> list[Checked]:
    return [c for c in checked if not 1 / OFF_BY <= c.time_s / c.m.time_s <= OFF_BY]


def plot(checked: Sequence[Checked], title: str, path: Path) -> None:
    time_pts = [Point(c.m.device_class, c.m.time_s, c.time_s) for c in checked]
    energy = [Point(c.m.device_class, e, c.energy_j, c.m.rails) for c in checked if (e := c.m.measured_energy_j) is not None]
    scatter_figure(time_pts, energy, DEVICE_CLASSES, title).savefig(path, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-write", action="store_true", help="print the report only")
    args = ap.parse_args()
    load = os.getloadavg()
    t0, c0 = time.perf_counter(), time.process_time()
    rows = read_corpus(CORPUS)
    a, skipped = sourced(rows)
    b, splits, rails_const = fitted(rows)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    report = render(rows, a, skipped, b, splits, rails_const, wall, cpu, load)
    print(report)
    if not args.no_write:
        (OUT / "validation.md").write_text(report)
        plot(a, "(a) sourced profiles, nothing fitted (profiles check auto)", OUT / "validation_sourced.png")
        plot(b, "(b) fitted on other sources / workloads, held out", OUT / "validation_fitted.png")
    return 0


# Why a row is off by more than 2x: (setting, test on the row, the cause). The first matching rule is the row's
# stated cause; a row no rule matches is listed as "no stated cause" (a target missed without one).
CALIB = "`benchmarks/calibration_fedx.md`"
# The CPU profiles whose grouped-convolution rate comes from the Pi 4 MobileNetV2 row (profile_derivations.md)
DW_CARRIED = ("raspberry_pi_5", "qualcomm_ai_kit")
CAUSES: list[tuple[str, Callable[[Measurement], bool], str]] = [
    ("a", lambda m: m.file.endswith("fedx.csv") and m.model == "ofa_mbv3" and m.profile in DW_CARRIED,
     "FedX's MobileNetV3 sub-networks on a depthwise rate carried from another board and net. The CPU boards' "
     "grouped-convolution rate is the one fitted on the Pi 4's MobileNetV2 (3x3 depthwise, batch 16, "
     "`benchmarks/profile_derivations.md#raspberry_pi_4b`) scaled by the dense rate; as a flat FLOP/s it charges "
     "FedX's 5x5 depthwise kernels by their FLOPs, which grow with the sub-network and the input faster than FedX's "
     "rounds do (Pi 5 CIFAR-10 small / medium / large 7.5 / 11.6 / 14.5 s), so the large nets and the 64x64 inputs "
     "are priced too long. One row cannot tell a per-FLOP depthwise cost from a per-call one."),
    ("a", lambda m: m.file.endswith("fedx.csv"),
     "FedX's workloads on sourced rates. Every profile's FLOP/s, bandwidth and per-op overhead come from dense-CNN "
     "figures, spec sheets and assumptions, independent of FedX by design (each profile's `sources`); FedX's small "
     f"1-D CNN at batch 32 on the CPUs, and its MobileNetV3 sub-networks on the Nano GPU (whose profile has no "
     f"depthwise figure), run at a small fraction of them ({CALIB}: fitted per-op cost 350-374 us on the Pi 5 and "
     "1297-1348 us on the QCS605 against 12-15 us sourced; the Nano GPU's kernels at 0.054-0.063 of the sourced "
     "17.9 GB/s). A compute-rate (profile) gap, not a tracing error."),
    ("b", lambda m: "Jetson Nano (GPU" in m.device and m.model == "ofa_mbv3",
     "FedX's Nano GPU rounds of the large net on CIFAR-10 and FEMNIST (20.2 s, 18.9 s) are longer than on "
     "Tiny-ImageNet (16.9 s) at about 4x the pixels (`validation/SOURCES.md`, caveats); a cost that grows with the "
     "work fits one or the other."),
    ("b", lambda m: m.profile == "raspberry_pi_4b",
     "Two workloads, leave-one-workload-out: each fit sees one workload, which determines FLOP/s only (bandwidth and "
     "per-op overhead kept from the profile); the grouped-convolution rate keeps the profile's ratio to it, which "
     "these same two rows set (section (a)), so the pair is not independent evidence."),
    ("b", lambda m: m.profile == "raspberry_pi_5" and m.model == "resnet18",
     "Leave-one-source-out: fitted on FedX's 12 rows (depthwise MobileNetV3 and the HAR 1-D CNN, small inputs at "
     "batch 32), then asked for a dense ResNet18 at 3x56x56, "
     "which the other source's two rows put near 50 GFLOP/s. One operating point per board cannot hold both kinds "
     "of network: the fit scales the grouped-convolution rate with the dense one at the Pi 4's ratio (`fl.cost.fit`), "
     "not at a ratio of this board's own."),
    ("b", lambda m: m.file.endswith("fedx.csv") and m.profile in DW_CARRIED,
     "The fit scales the grouped-convolution rate with the fitted dense rate (`fl.cost.fit`), keeping the ratio "
     "carried from the Pi 4's MobileNetV2, a flat FLOP/s that overprices the large MobileNetV3 sub-networks' 5x5 "
     "depthwise kernels and the 64x64 inputs as in (a). The Pi 5's FedX rows are held out from a fit on the other "
     "source's ResNet18 and MobileNetV2, whose times the dense rate and that ratio explain without raising the "
     "per-op overhead that the tiny 1-D CNN's (HAR-Wild) step is made of."),
    ("b", lambda m: "Jetson Nano (CPU" in m.device and m.model == "harwild",
     "The HAR-Wild 1-D CNN is this repository's reconstruction (layers chosen to match FedX's parameter counts, input "
     "9x1x128 assumed: `validation/SOURCES.md`); its step is a few dozen tiny ops, so its time is the per-op overhead "
     "fitted on the MobileNetV3 rows. FedX's own times for it on this CPU are not monotone in the net's size (small "
     "2.8 s, medium 2.7 s, large 6.5 s)."),
    ("b", lambda m: "Jetson Nano (CPU" in m.device,
     f"FedX's Nano CPU rounds grow 2.2x from small to medium and 1.3x from medium to large (CIFAR-10: 87.4, 189.1, "
     f"241.3 s), while the traced training FLOPs grow 1.7x and 1.9x and the ops 1.4x and 1.3x ({CALIB}); no cost "
     "that grows with FLOPs, bytes and ops fits both steps. The fit starts from a stand-in base (no profile for this CPU)."),
]


def cause(setting: str, m: Measurement) -> str:
    return next((why for s, test, why in CAUSES if s == setting and test(m)), "no stated cause")


def causes(a: Sequence[Checked], b: Sequence[Checked]) -> list[str]:
    out = []
    for setting, rows in (("a", a), ("b", b)):
        off = off_rows(rows)
        groups: dict[str, list[Checked]] = {}
        for c in off:
            groups.setdefault(cause(setting, c.m), []).append(c)
        title = "sourced" if setting == "a" else "fitted, held out"
        out += [f"### ({setting}) {title}: {len(off)} rows", ""]
        for why, cs in groups.items():
            listed = ", ".join(f"{c.m.label} ({c.time_s / c.m.time_s:.2f}x)" for c in cs)
            out += [f"- {listed}. **Cause:** {why}", ""]
    return out


def reading(a: Sequence[Checked], b: Sequence[Checked], sa: dict, sb: dict) -> list[str]:
    """What the numbers say about each target; every figure quoted is computed from this run's rows."""
    no_cause = [c for c in off_rows(b) if cause("b", c.m) == "no stated cause"]
    ra, rb = sa["rails"], sb["rails"]
    fedx = [c.time_s / c.m.time_s for c in a if c.m.file.endswith("fedx.csv")]
    pi5_mbv2 = ", ".join(f"{c.time_s / c.m.time_s:.2f}x" for c in a if c.m.label.endswith("pi5-mobilenetv2"))
    rails_a = [c for c in a if c.m.rails]
    short = [c.m.time_s / c.time_s for c in rails_a]
    board_over = [c.energy_j / c.time_s / c.m.measured_power_w for c in rails_a]  # type: ignore[operator]
    watts = [c.m.measured_power_w for c in rails_a]
    train_w = sorted({round(c.energy_j / c.time_s, 2) for c in rails_a})
    by_class = summary(b)

    def span(xs: Sequence[float], unit: str = "x") -> str:
        return f"{min(xs):.1f}-{max(xs):.1f}{unit}"

    classes = ", ".join(f"{g} {pct(q['time'].median)}" for g, q in by_class.items() if g != "all")
    return [
        "## Reading the targets",
        "",
        f"- **Training time, sourced (a): {'met' if sa['time'].median <= TIME_TARGET else 'missed'}.** Median "
        f"{pct(sa['time'].median)}. The profiles predict FedX's rounds at {span(fedx)} of the measured (causes above). "
        "The Pi 4's two rows are the figures its profile was derived from (ResNet18: `compute.flops`; MobileNetV2: the "
        "grouped-convolution rate), in-sample, not evidence; the Pi 5's MobileNetV2 row, not fitted, is at "
        f"{pi5_mbv2}.",
        f"- **Training time, fitted and held out (b): {'met' if sb['time'].median <= TIME_TARGET else 'missed'}.** "
        f"Median {pct(sb['time'].median)} over {sb['time'].n} rows; by class {classes}. "
        f"{len(off_rows(b))} rows are off by more than 2x"
        + (f", {len(no_cause)} of them without a stated cause" if no_cause else ", each with its cause above")
        + ": mostly a board fitted on one kind of network (depthwise MobileNets, or dense ResNets) and asked for the "
        "other, and FedX's Nano rows that no cost growing with the work fits.",
        "- **Energy: not measurable against board power.** No row of the corpus measured the energy a profile's "
        "`train_w` stands for (the whole board): the only power figures, FedX Table III, are Jetson Nano CPU and GPU "
        f"rail readings. Against those rails: (a) median {pct(ra.median if ra else None)}, but only because a time "
        f"{span(short)} too short meets a board power {span(board_over)} the rails' (errors cancelling, not agreement); "
        f"(b) median {pct(rb.median if rb else None)}, the time now close and the board's `train_w` "
        f"({', '.join(f'{w:g}' for w in train_w)} W) against {span(watts, ' W')} of rails. A constant power fitted to "
        "the other workloads' rail readings leaves the median in the last column of (b): the rails spread "
        f"{max(watts) / min(watts):.1f}x across the GPU workloads, which a constant power cannot follow (the "
        "activity-dependent terms of `iotfl_sim/fl/cost/energy.py` are the model's answer). The energy target needs "
        "board-level measurements (a USB or bench power meter); `validation/SOURCES.md` lists the phone energy that "
        "waits for an above-idle scope.",
    ]


def base_cell(rows: Sequence[Measurement], device: str, base: str) -> str:
    mine = [m for m in rows if device_of(m) == device]
    return base if mine[0].profile else f"{base} (stand-in: {STAND_IN_WHY[mine[0].device_class]})"


def render(rows, a, skipped, b, splits, rails_const, wall, cpu, load) -> str:  # noqa: ANN001
    sa, sb = summary(a)["all"], summary(b)["all"]
    lines = [
        "# Validation: predicted training time and energy against published measurements",
        "",
        f"Generated by `{COMMAND}`; the script overwrites this file, so edit the script, not this file. "
        f"Corpus: `validation/*.csv` ({len(rows)} rows from {len({m.file for m in rows})} sources; "
        "`validation/SOURCES.md`). Each row priced as `iotfl-sim profiles check` prices it "
        "(`fl.cost.check.check_row`: the engine's per-operator cost model and its training energy).",
        "",
        f"This run: {wall:.0f} s wall, {cpu:.0f} s CPU, load average at start {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} "
        "(2 shared cores). Everything is traced on the meta device, so the numbers do not depend on the machine.",
        "",
        "## Targets (issue 46)",
        "",
        "| target | (a) sourced profiles | (b) fitted, held out | met |",
        "|---|---|---|---|",
        f"| training time: median absolute error <= 15 % | {pct(sa['time'].median)} ({sa['time'].n} rows) | "
        f"{pct(sb['time'].median)} ({sb['time'].n} rows) | (a) {'yes' if sa['time'].median <= TIME_TARGET else 'no'}, "
        f"(b) {'yes' if sb['time'].median <= TIME_TARGET else 'no'} |",
        f"| training time: no row off by more than 2x without a stated cause | {len(off_rows(a))} rows off by > 2x | "
        f"{len(off_rows(b))} rows off by > 2x | causes stated below |",
        f"| energy: median absolute error <= 25 % | board: {pct(sa['energy'].median if sa['energy'] else None)}; "
        f"rails only: {pct(sa['rails'].median if sa['rails'] else None)} | board: "
        f"{pct(sb['energy'].median if sb['energy'] else None)}; rails only: {pct(sb['rails'].median if sb['rails'] else None)} | "
        "not measurable: no row of the corpus measured board energy (below) |",
        "",
        "## (a) Sourced profiles, nothing fitted",
        "",
        "Command: `iotfl-sim profiles check auto --against validation/` (the same numbers). "
        f"{len(skipped)} rows name no profile and are not priced here: "
        + ", ".join(sorted({f'{m.device} ({m.file.split("/")[-1]}, {sum(x.device == m.device for x in skipped)} rows)' for m in skipped}))
        + ".",
        "",
        *summary_table(a),
        "",
        "## (b) Fitted on some rows, measured on the others",
        "",
        "Per device, `profiles fit`'s machinery (`fl.cost.fit.fit` through `leave_one_out`): the time parameters the "
        "training rows determine (the others kept from the base, as `profiles fit` does), `train_w` from the training "
        "rows' board power (none here: every power row is a rail reading, so `train_w` stays the base's). Splits:",
        "",
        "| device | split | base profile | rows | held-out fits that kept a time parameter | fitted to all its rows |",
        "|---|---|---|---|---|---|",
        *(f"| {d} | {s} | {base_cell(rows, d, bname)} | {n} | {short} | {ft} |" for d, s, bname, n, short, ft in splits),
        "",
        "The last column: the rail energy a constant power fitted to the other groups' rail readings would give "
        "(geometric mean of their rail powers x the held-out predicted time): how much of the rails error is the "
        "constant-power form rather than board vs rails.",
        "",
        *summary_table(b, rails_const),
        "",
        "## Rows off by more than 2x, and why",
        "",
        *causes(a, b),
        "",
        *reading(a, b, sa, sb),
        "",
        "## Plots",
        "",
        "![sourced](validation_sourced.png)",
        "",
        "![fitted](validation_fitted.png)",
        "",
        "Log-log, y = x and the 25 % band; colour by device class; rails-only energy hollow.",
        "",
        "## Every row",
        "",
        "### (a) sourced",
        "",
        *rows_table(a),
        "",
        "### (b) fitted, held out",
        "",
        *rows_table(b),
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
