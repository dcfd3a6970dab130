"""`iotfl-sim profiles check` and `iotfl-sim profiles fit`: a profile's predictions beside measured training, and a
profile fitted to such measurements (``validation/README.md`` gives the file format).

Every input is read and every output made in memory before anything is written, and nothing is overwritten: a
refused command leaves every file as it was.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
from collections.abc import Sequence
from pathlib import Path

import yaml

from iotfl_sim.core.errors import ScenarioError
from iotfl_sim.scenario.loader import load_profile

AUTO = "auto"  # `profiles check auto`: each row priced on the profile its `profile` column names
PLOT_FORMATS = (".png", ".pdf", ".svg")


def _new_file(path: str | None, flag: str, suffixes: Sequence[str]) -> Path | None:
    if path is None:
        return None
    p = Path(path)
    if os.path.lexists(p):
        raise ScenarioError(f"{flag}: {p} already exists; give a new file name or remove it first")
    if not p.parent.is_dir():
        raise ScenarioError(f"{flag}: folder {p.parent} does not exist; create it or pick another path")
    if p.suffix.lower() not in suffixes:
        raise ScenarioError(f"{flag}: {p} does not end in {' or '.join(suffixes)}; give a file name that does")
    return p


def _read(against: str | None, command: str):
    from iotfl_sim.fl.cost.corpus import CorpusError, read_corpus

    if not against:
        raise ScenarioError(
            f"profiles {command}: give --against FILE.csv, the measurements (columns in validation/README.md), or a folder of them"
        )
    try:
        return read_corpus(against)
    except CorpusError as e:
        raise ScenarioError(str(e)) from None


def _pct(x: float | None) -> str:
    return "" if x is None else f"{100 * x:+.1f} %"


def _g(x: float | None, unit: str) -> str:
    return "" if x is None else f"{x:.3g} {unit}"


def _write_all(outputs: Sequence[tuple[Path | None, bytes]]) -> None:
    for path, data in outputs:
        if path is not None:
            with open(path, "xb") as f:  # "x": never overwrite, even if the file appeared meanwhile
                f.write(data)


# ----------------------------------------------------------------------------------------------------- check


def cmd_profiles_check(args: argparse.Namespace) -> int:
    from iotfl_sim.fl.cost.check import check_row
    from iotfl_sim.fl.cost.corpus import CorpusError

    if not args.name:
        raise ScenarioError(
            "profiles check: name a profile (or `auto`: each row's own profile column), e.g. "
            "`iotfl-sim profiles check raspberry_pi_4b --against my_board.csv`"
        )
    csv_out = _new_file(args.csv, "profiles check --csv", (".csv",))
    plot_out = _new_file(args.plot, "profiles check --plot", PLOT_FORMATS)
    if csv_out is not None and plot_out is not None and csv_out.resolve() == plot_out.resolve():
        raise ScenarioError("profiles check: --csv and --plot name the same file; give two")
    rows = _read(args.against, "check")
    here = Path.cwd() / "device_profiles"  # the lookup `profiles show` uses
    profiles: dict[str, object] = {}
    skipped = []
    checked = []
    for m in rows:
        name = m.profile if args.name == AUTO else args.name
        if not name:
            skipped.append(m.label)
            continue
        if name not in profiles:
            try:
                where = f"{m.file}: row {m.row!r} (line {m.line}), column profile" if args.name == AUTO else "profiles check"
                profiles[name] = load_profile(name, here, where=where)
            except ScenarioError as e:
                raise ScenarioError(str(e).splitlines()[0]) from None
        try:
            checked.append(check_row(m, profiles[name]))  # type: ignore[arg-type]
        except CorpusError as e:
            raise ScenarioError(str(e)) from None
    if not checked:
        raise ScenarioError(
            f"profiles check auto: no row of {args.against} names a profile; fill the profile column or name one profile"
        )
    title = f"{args.name if args.name != AUTO else 'each row’s profile'} against {args.against}"
    outputs = []
    if csv_out is not None:
        outputs.append((csv_out, check_csv(checked).encode("utf-8")))
    if plot_out is not None:
        outputs.append((plot_out, check_plot(checked, title, plot_out.suffix.lower()[1:])))
    print(check_table(checked), end="")
    print(summary_text(checked), end="")
    if skipped:
        print(f"not checked ({len(skipped)} rows name no profile): {', '.join(skipped[:20])}{' ...' if len(skipped) > 20 else ''}")
    _write_all(outputs)
    for path, _ in outputs:
        print(f"wrote {path}")
    return 0


def check_table(checked: Sequence) -> str:
    """One line per row: the measured and predicted time and energy and their signed relative errors."""
    head = (
        f"{'row':<30} {'class':<8} {'profile (mode)':<24} {'workload':<36} "
        f"{'time: measured':>14} {'predicted':>10} {'error':>9}   {'energy: measured':>16} {'predicted':>10} {'error':>9}"
    )
    lines = [head]
    for c in checked:
        m = c.m
        load = workload_text(m)
        prof = c.profile + (f" ({c.mode})" if c.mode else "")
        e = m.measured_energy_j
        mark = "".join(f" ({x})" for x, on in (("P", m.energy_from_power), ("R", m.rails)) if on)
        lines.append(
            f"{m.label[:30]:<30} {m.device_class:<8} {prof[:24]:<24} {load[:36]:<36} "
            f"{_g(m.time_s, 's'):>14} {_g(c.time_s, 's'):>10} {_pct(c.time_err):>9}   "
            f"{_g(e, 'J') + mark:>16} {_g(c.energy_j, 'J'):>10} {_pct(c.energy_err):>9}"
            + (f"  [{c.note}]" if c.note else "")
        )
    return "\n".join(lines) + "\n"


def workload_text(m) -> str:  # noqa: ANN001
    """``ofa_mbv3 w0.5 d2 3x32x32 b32 x24 (750)``: family, width, depth, input, batch, steps (samples if partial)."""
    depth = f" d{m.depth}" if m.depth is not None else ""
    partial = f" ({m.samples})" if m.samples is not None and m.samples != m.batch_size * m.steps else ""
    return f"{m.model} w{m.width:g}{depth} {'x'.join(map(str, m.input_shape))} b{m.batch_size} x{m.steps}{partial}"


def summary_text(checked: Sequence, heading: str = "summary") -> str:
    """Median and worst absolute relative error of time and energy, overall and by device class."""
    from iotfl_sim.fl.cost.check import summary

    def cell(s) -> str:  # noqa: ANN001
        return f"{'-':>5}" if s is None else f"{s.n:>5} {100 * s.median:>7.1f} % {100 * s.worst:>7.1f} % ({s.worst_row})"

    groups = summary(checked)
    rails = any(q["rails"] for q in groups.values())
    lines = [
        f"{heading}: |predicted - measured| / measured",
        f"{'':<8} {'time: rows, median, worst (row)':<56} {'energy (board): rows, median, worst (row)':<56}"
        + (" energy (rails only, R): rows, median, worst (row)" if rails else ""),
    ]
    for group, q in groups.items():
        lines.append(f"{group:<8} {cell(q['time']):<56} {cell(q['energy']):<56}" + (f" {cell(q['rails'])}" if rails else ""))
    from_power = sum(c.m.energy_from_power for c in checked)
    if from_power:
        lines.append(f"(P): {from_power} row(s) publish power, not energy: measured energy = power x measured time")
    if rails:
        lines.append(
            "(R): power_scope rails: the source measured compute rails only, not the whole board that a profile's "
            "train_w stands for; their energy errors are kept apart"
        )
    return "\n".join(lines) + "\n"


CSV_COLUMNS = (
    "row", "file", "line", "device", "device_class", "profile", "power_mode_priced", "model", "width", "depth",
    "input_shape", "classes", "batch_size", "steps", "samples", "measured_time_s", "predicted_time_s", "time_error", "measured_energy_j",
    "energy_from_power", "power_scope", "predicted_energy_j", "energy_error", "note",
)  # fmt: skip


def check_csv(checked: Sequence) -> str:
    """The per-row table as CSV (errors signed, as fractions)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for c in checked:
        m = c.m
        e = m.measured_energy_j
        w.writerow([
            m.row, m.file, m.line, m.device, m.device_class, c.profile, c.mode or "default", m.model, repr(m.width),
            "" if m.depth is None else m.depth, "x".join(map(str, m.input_shape)), m.classes, m.batch_size, m.steps,
            m.samples_total, repr(m.time_s), repr(c.time_s), repr(c.time_err), "" if e is None else repr(e),
            int(m.energy_from_power), m.power_scope, repr(c.energy_j),
            "" if c.energy_err is None else repr(c.energy_err), c.note,
        ])  # fmt: skip
    return buf.getvalue()


def check_plot(checked: Sequence, title: str, fmt: str) -> bytes:
    from analysis.validation_plot import Point, scatter_figure
    from iotfl_sim.fl.cost.corpus import DEVICE_CLASSES

    time = [Point(c.m.device_class, c.m.time_s, c.time_s) for c in checked]
    energy = [Point(c.m.device_class, e, c.energy_j, c.m.rails) for c in checked if (e := c.m.measured_energy_j) is not None]
    fig = scatter_figure(time, energy, DEVICE_CLASSES, title)
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=120)
    return buf.getvalue()


# ------------------------------------------------------------------------------------------------------- fit

MAX_LISTED_ROWS = 50


def _params(text: str | None) -> list[str] | None:
    from iotfl_sim.fl.cost.fit import PARAMS

    if text is None:
        return None
    names = [p.strip() for p in text.split(",") if p.strip()]
    bad = [p for p in names if p not in PARAMS]
    if bad or not names:
        raise ScenarioError(
            f"profiles fit --params: {', '.join(bad) or 'empty'} is not a parameter; give some of {','.join(PARAMS)}"
        )
    return list(dict.fromkeys(names))


def cmd_profiles_fit(args: argparse.Namespace) -> int:
    from iotfl_sim.fl.cost.corpus import CorpusError
    from iotfl_sim.fl.cost.fit import FitError, fit, leave_one_workload_out, operating_point, workloads

    if not args.name:
        raise ScenarioError(
            "profiles fit: name the base profile, e.g. `iotfl-sim profiles fit raspberry_pi_4b --against my_board.csv "
            "--out my_board.yaml`"
        )
    if not args.out:
        raise ScenarioError("profiles fit: give --out NEW.yaml, the fitted profile's new file")
    out = _new_file(args.out, "profiles fit --out", (".yaml", ".yml"))
    assert out is not None
    params = _params(args.params)
    rows = _read(args.against, "fit")
    base = load_profile(args.name, Path.cwd() / "device_profiles", where="profiles fit")
    try:
        rates, mode = operating_point(base, rows)
        f = fit(base, rows, rates, params)
        held, short = leave_one_workload_out(base, rows, rates)
    except FitError as e:
        raise ScenarioError(f"profiles fit: {e}") from None
    except CorpusError as e:  # a row the cost model cannot build
        raise ScenarioError(str(e)) from None
    command = f"iotfl-sim profiles fit {args.name} --against {args.against}" + (f" --params {args.params}" if args.params else "")
    text = fitted_profile_yaml(base, f, mode, out.stem, command, rows, held)
    print(fit_report(base, f, rates, mode, rows, held, short, len(workloads(rows))), end="")
    _write_all([(out, text.encode("utf-8"))])
    print(f"wrote {out}")
    return 0


VALUE = {  # parameter -> (where in the profile, from SI, unit)
    "flops": ("compute.flops", 1.0, "FLOP/s"),
    "mem_bw": ("compute.mem_bw_gbs", 1e-9, "GB/s"),
    "op_overhead": ("compute.op_overhead_us", 1e6, "us"),
    "train_w": ("power.train_w", 1.0, "W"),
}


def _value(rates, name: str) -> float:  # noqa: ANN001
    from iotfl_sim.fl.cost.fit import FIELD

    return getattr(rates, FIELD[name]) * VALUE[name][1]


def fit_report(base, f, rates, mode, rows, held, short, n_loads) -> str:  # noqa: ANN001
    lines = [f"fitted {base.name}{f' (power mode {mode})' if mode else ''} to {len(rows)} rows, {n_loads} workload(s)"]
    for name in VALUE:
        key, _, unit = VALUE[name]
        if name in f.fitted:
            lines.append(f"  {key:<24} {_value(rates, name):>12.4g} -> {_value(f.rates, name):.4g} {unit} (fitted)")
        elif name in f.kept:
            lines.append(f"  {key:<24} {_value(rates, name):>12.4g} {unit} kept from the base: {f.kept[name]}")
    text = "\n".join(lines) + "\n" + summary_text(f.rows, "in-sample")
    if held:
        extra = f"; {short} of those fits kept a time parameter from the base" if short else ""
        text += summary_text(held, f"held-out (leave-one-workload-out: each workload predicted by a fit to the others{extra})")
    else:
        text += "held-out: none (one workload; measure another model or batch size to get a held-out error)\n"
    return text


ACTIVITY_LEVELS = ("compute_w", "memory_w", "overhead_w")  # fl.cost.energy's work-dependent power levels


def fitted_profile_yaml(base, f, mode, name: str, command: str, rows, held) -> str:  # noqa: ANN001
    """The base profile with the fitted values and a source line saying what was fitted from which rows."""
    from pydantic import ValidationError

    from iotfl_sim.fl.cost.check import summary
    from iotfl_sim.scenario import safe_yaml
    from iotfl_sim.scenario.profile import DeviceProfile

    data = base.model_dump(mode="json", exclude_none=True)
    data["name"] = name
    comp, notes = data["compute"], []
    for key in ("power_modes", "default_mode"):
        if comp.pop(key, None) is not None and key == "power_modes":
            notes.append(f"power modes of {base.name} dropped: the fit is one operating point ({mode or 'its default'})")
    if comp.pop("measured_steps", None):
        notes.append(f"compute.measured_steps of {base.name} dropped: they would rescale the fitted rates for their family")
    levels = [k for k in ACTIVITY_LEVELS if data["power"].pop(k, None) is not None] if "train_w" in f.fitted else []
    if levels:
        notes.append(f"power.{', power.'.join(levels)} of {base.name} dropped: the fitted constant train_w replaces them")
    for pname in f.fitted:
        key, scale, _ = VALUE[pname]
        section, field = key.split(".")
        data[section][field] = float(f"{_value(f.rates, pname):.5g}")
    if comp.get("kernels") and f.kernel_scale != 1.0:
        for k in comp["kernels"].values():  # they keep their ratio to the fitted compute.flops (fl.cost.fit)
            if "flops" in k:
                k["flops"] = float(f"{k['flops'] * f.kernel_scale:.5g}")
            if "flops_curve" in k:
                k["flops_curve"] = [[n, float(f"{r * f.kernel_scale:.5g}")] for n, r in k["flops_curve"]]
        notes.append(
            f"compute.kernels FLOP/s of {base.name} scaled by {f.kernel_scale:.4g} (fitted / base compute.flops): "
            "the ratio of a kernel's rate to the dense rate is kept from the base, which the rows rarely determine"
        )
    labels = [m.label for m in rows]
    listed = ", ".join(labels[:MAX_LISTED_ROWS]) + (f" and {len(labels) - MAX_LISTED_ROWS} more" if len(labels) > MAX_LISTED_ROWS else "")
    fitted = ", ".join(VALUE[p][0] for p in f.fitted) or "nothing"
    kept = "; ".join(f"{VALUE[p][0]} kept from {base.name}: {why}" for p, why in f.kept.items())
    ins = summary(f.rows)["all"]["time"]
    err = f"in-sample |time error| median {100 * ins.median:.1f} %, worst {100 * ins.worst:.1f} %"
    if held:
        out = summary(held)["all"]["time"]
        err += f"; leave-one-workload-out median {100 * out.median:.1f} %, worst {100 * out.worst:.1f} %"
    data["sources"] = [
        *data.get("sources", []),
        f"{fitted}: fitted by `{command}` to rows {listed} "
        "(time: least squares on log(predicted / measured time), bounded; train_w: geometric mean of the rows' measured "
        f"average power); {err}" + (f"; {kept}" if kept else ""),
        *notes,
    ]
    data["description"] = f"{base.description or base.name} (fitted to measurements, see sources)"
    text = yaml.safe_dump(data, sort_keys=False, width=200, allow_unicode=True)
    try:  # what we write must load back as a profile
        DeviceProfile.model_validate(safe_yaml.load(text, "fitted profile").data)
    except ValidationError as e:
        raise ScenarioError(f"profiles fit: the fitted profile does not validate: {e.errors()[0]['msg']}") from None
    return text
