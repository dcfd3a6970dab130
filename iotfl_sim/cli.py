"""`iotfl-sim run | validate | sweep | plot | compare | report | profiles | data | schema`."""

from __future__ import annotations

import argparse
import errno
import gc
import json
import os
import sys
from pathlib import Path
from typing import NoReturn

import yaml

from iotfl_sim.core.errors import ScenarioError
from iotfl_sim.scenario import safe_yaml
from iotfl_sim.scenario.loader import (
    available_profiles,
    load_profile,
    load_scenario,
    resolve_groups,
    resolved_dict,
)
from iotfl_sim.scenario.profile import DEVICE_CLASSES

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130


def _scenario_and_groups(args: argparse.Namespace):
    sc = load_scenario(args.scenario, sets=args.set)
    base = Path(args.scenario).resolve().parent / "device_profiles"
    return sc, resolve_groups(sc, base, str(args.scenario))


def _checked(args: argparse.Namespace, progress: bool | None = False):
    """The scenario and its groups, after every check `run` makes before training (run and validate).
    ``progress`` (run's bar setting, before the scenario's own): say on stderr what the slow part is doing. Both
    print the memory each submodel needs and how many devices hold it (``preflight.memory_fit``), and how many
    devices of each group can ever take part (``sim.participation``)."""
    sc, groups = _scenario_and_groups(args)
    from iotfl_sim.sim.console import say

    if progress is not False:
        say(sc.name, "loading PyTorch and checking the scenario (data files, the method's set-up)",
            progress if progress is not None else sc.output.progress)  # fmt: skip
    from iotfl_sim.sim.participation import participation
    from iotfl_sim.sim.preflight import memory_fit, preflight  # torch: only once the scenario itself is sound

    sim = preflight(sc, groups, Path(args.scenario).resolve().parent, str(args.scenario), getattr(args, "out", None))
    notes, warnings = memory_fit(sim)
    reach_notes, reach_warnings = participation(sim)
    notes, warnings = notes + reach_notes, warnings + reach_warnings
    for line in [*(f"note: {n}" for n in notes), *(f"warning: {w}" for w in warnings)]:
        print(line, file=sys.stderr)
    return sc, groups


def cmd_run(args: argparse.Namespace) -> int:
    from iotfl_sim.sim.console import end_summary, say

    if args.resume is not None:
        if args.scenario is not None or args.set or args.out is not None:
            raise ScenarioError("run --resume RUN_DIR: give no scenario, --set or --out; the run continues as it started")
        say(Path(args.resume).name, "loading PyTorch to resume the run", False if args.quiet else None)
        from iotfl_sim.sim.runner import resume_run

        path, summary = resume_run(Path(args.resume), progress=False if args.quiet else None, quiet=args.quiet)
    else:
        if args.scenario is None:
            raise ScenarioError("run: give a scenario file (iotfl-sim run SCENARIO.yaml), or --resume RUN_DIR")
        sc, groups = _checked(args, progress=False if args.quiet else None)
        from iotfl_sim.sim.runner import run_scenario

        for w in sc.warnings():
            print(f"warning: {w}", file=sys.stderr)
        out = args.out if args.out is not None else sc.output.dir
        progress = False if args.quiet else sc.output.progress
        base = Path(args.scenario).resolve().parent
        path, summary = run_scenario(
            sc, groups, out, resolved_dict(sc, groups), progress=progress, base_dir=base, quiet=args.quiet
        )
    if summary.get("status") == "interrupted":
        print(f"run: {path}\ninterrupted after round {summary['rounds']}; continue with: iotfl-sim run --resume {path}")
        return _signal_status(summary.get("stopped_by"))
    print(end_summary(path, summary))
    return 0


def _signal_status(sig: str | int | None) -> int:
    """A run stopped by a signal exits with 128 + its number, as a shell reports it: 130 for Ctrl-C (SIGINT, and
    when the signal is not known), 143 for SIGTERM."""
    import signal

    if isinstance(sig, str) and sig in signal.Signals.__members__:
        return 128 + signal.Signals[sig].value
    if isinstance(sig, int):
        return 128 + sig
    return EXIT_INTERRUPTED


def cmd_validate(args: argparse.Namespace) -> int:
    sc, groups = _checked(args)
    sizes = ", ".join(f"{g.name} x{g.count}" for g in groups)
    if sc.fleet.cost_model == "roofline":
        for w in dict.fromkeys(w for g in groups for w in g.profile.cost_model_warnings()):
            print(f"warning: {w}", file=sys.stderr)
    from iotfl_sim.sim.server_cost import server_warnings

    for w in dict.fromkeys(w for g in groups for w in g.profile.power_warnings()):
        print(f"warning: {w}", file=sys.stderr)
    for w in [*server_warnings(sc.server), *sc.warnings()]:
        print(f"warning: {w}", file=sys.stderr)
    print(f"{args.scenario}: ok ({sc.algorithm.name}, {sc.rounds} rounds, {sc.num_devices()} devices: {sizes})")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from analysis.plots import PlotInputError
    from analysis.study_plots import plot_paths

    try:
        written, chosen = plot_paths(args.runs, Path(args.out) if args.out else None, _targets(args))
    except PlotInputError as e:
        raise ScenarioError(str(e)) from None
    if chosen.disagree:
        print(f"note: targets: {chosen.source}", file=sys.stderr)
    for p in written:
        print(p)
    return 0


def _targets(args: argparse.Namespace) -> list[float] | None:
    """--targets as fractions; None when not given (the runs' own server.target_accuracies apply)."""
    if args.targets is None:
        return None
    bad = [t for t in args.targets if not 0 < t <= 100]
    if bad:
        raise ScenarioError(f"--targets: accuracies are fractions in (0, 1] (or percent), got {bad[0]}")
    return [t / 100 if t > 1 else t for t in args.targets]


def cmd_compare(args: argparse.Namespace) -> int:
    from analysis.compare import build_tables, compare_markdown, write_tables
    from analysis.rundir import PlotInputError
    from analysis.study import is_study_dir, require_runs, select

    targets = _targets(args)
    try:
        sel = select(args.runs, args.by or None)
        require_runs(sel, args.runs, "compare")
        tables = build_tables(sel, targets)
        first = Path(args.runs[0])
        out = Path(args.out) if args.out else (first if is_study_dir(first) else first.parent) / "compare"
        written = write_tables(sel, tables, out)
    except PlotInputError as e:
        raise ScenarioError(str(e)) from None
    print(compare_markdown(sel, tables))
    for p in written:
        print(p, file=sys.stderr)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from analysis.report import write_report
    from analysis.rundir import PlotInputError

    try:
        out = write_report(args.runs, Path(args.out) if args.out else None, _targets(args), args.by or None)
    except PlotInputError as e:
        raise ScenarioError(str(e)) from None
    print(out)
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from iotfl_sim.study import read_study, sweep

    if args.workers is not None and args.workers < 1:
        raise ScenarioError(f"sweep --workers: must be >= 1 (got {args.workers}); e.g. --workers 2")
    study = read_study(args.study)
    res = sweep(study, args.out, workers=args.workers, progress=False if args.quiet else None, dispatch=args.dispatch)
    counts = ", ".join(f"{s} {res.count(s)}" for s in ("done", "failed", "interrupted", "pending") if res.count(s))
    print(f"study: {res.folder} ({len(res.records)} runs: {counts})")
    for r in res.records:
        if r["status"] == "failed":
            print(f"failed {r['id']}: {r['error']}")
    if res.stopped or any(r["status"] in ("interrupted", "pending") for r in res.records):
        print(f"stopped; continue with: iotfl-sim sweep {args.study}" + (f" --out {args.out}" if args.out != "studies" else ""))
        return EXIT_INTERRUPTED
    return 1 if res.count("failed") else 0


def cmd_profiles(args: argparse.Namespace) -> int:
    # the lookup `run` uses for a scenario in this folder: $IOTFL_PROFILES, ./device_profiles, the bundled ones
    here = Path.cwd() / "device_profiles"
    if args.action == "list":
        rows = []
        for name in available_profiles(here):
            p = load_profile(name, here)
            battery = "mains" if p.battery.joules == float("inf") else f"{p.battery.joules / 1000:.1f} kJ"
            rows.append(
                f"{name:<22} {p.device_class:<9} {p.compute.flops / 1e9:>8.2f} GFLOP/s "
                f"{p.memory.free_mb:>9.1f} MB free  {p.power.train_w:>5.1f} W  {battery:>9}  {p.link.radio}"
            )
        print("\n".join(rows))
        return 0
    if args.action == "measure":
        return cmd_profiles_measure(args)
    if args.action in ("check", "fit"):
        from iotfl_sim import profiles_cli

        return profiles_cli.cmd_profiles_check(args) if args.action == "check" else profiles_cli.cmd_profiles_fit(args)
    if not args.name:
        raise ScenarioError("profiles show: name a profile, e.g. `iotfl-sim profiles show jetson_nano`")
    p = load_profile(args.name, here, where="profiles show")
    print(yaml.safe_dump(p.model_dump(mode="json", exclude_none=True), sort_keys=False), end="")
    return 0


MAX_MEASURE_SECONDS = 3600.0  # an hour: inf or nan would never end
MAX_MEASURE_BATCH = 4096


def cmd_profiles_measure(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from iotfl_sim.fl.cost import measure
    from iotfl_sim.scenario.profile import DeviceProfile

    out = Path(args.out) if args.out else None
    if out is not None and os.path.lexists(out):  # lexists: a symbolic link to nothing is in the way too
        raise ScenarioError(f"profiles measure --out: {out} already exists; give a new file name or remove it first")
    if out is not None and not out.parent.is_dir():
        raise ScenarioError(f"profiles measure --out: folder {out.parent} does not exist; create it or pick another path")
    if not 0 < args.seconds <= MAX_MEASURE_SECONDS:
        raise ScenarioError(
            f"profiles measure --seconds: must be > 0 and at most {MAX_MEASURE_SECONDS:g} (got {args.seconds}); e.g. --seconds 10"
        )
    if not 1 <= args.batch <= MAX_MEASURE_BATCH:
        raise ScenarioError(
            f"profiles measure --batch: must be 1 to {MAX_MEASURE_BATCH} (got {args.batch}); e.g. --batch 32"
        )
    if args.family is not None and args.family not in measure.FAMILY_SHAPES:
        known = ", ".join(measure.FAMILY_SHAPES)
        raise ScenarioError(f"profiles measure --family: unknown family {args.family!r}; use one of {known}")
    if args.threads is not None and args.threads < 1:
        raise ScenarioError(f"profiles measure --threads: must be >= 1 (got {args.threads}); e.g. --threads 1")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ScenarioError("profiles measure --device cuda: PyTorch sees no CUDA GPU here; measure on the GPU machine or use --device cpu")
    if args.train_w is None or args.idle_w is None:
        raise ScenarioError(
            "profiles measure: give --train-w and --idle-w (watts while training and idle, from a power meter or the "
            "datasheet; they are not measured), else every device of this profile spends 0 J; e.g. --train-w 6 --idle-w 2"
        )
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    name = args.name or (out.stem if out is not None else measure.default_name())
    m = measure.measure(args.seconds, args.family, args.batch, args.device)
    data = measure.profile_dict(m, name, args.device_class, args.idle_w, args.train_w)
    if args.server:
        from iotfl_sim.fl.cost.measure_server import server_work_rates

        data["server_work"], notes = server_work_rates(args.seconds / 2)
        data["sources"][1:1] = notes
    text = yaml.safe_dump(data, sort_keys=False, width=200)
    try:  # what we write must load back as a profile
        DeviceProfile.model_validate(safe_yaml.load(text, "measured profile").data)
    except ValidationError as e:
        raise ScenarioError(f"profiles measure: the measured profile does not validate: {e.errors()[0]['msg']}") from None
    if out is None:
        print(text, end="")
    else:
        with open(out, "x") as f:  # "x": never overwrite, even if the file appeared meanwhile
            f.write(text)
        c = data["compute"]
        extra = ""
        if "server_work" in data:
            w = data["server_work"]
            extra = (
                f"; aggregation {w['aggregate_gbs']:.2f} GB/s, QSGD encode {w['qsgd_encode_values_per_s'] / 1e6:.1f} M "
                f"values/s, decode {w['qsgd_decode_values_per_s'] / 1e6:.1f} M values/s"
            )
        print(
            f"wrote {out}: {c['flops'] / 1e9:.1f} GFLOP/s, {c['mem_bw_gbs']:.1f} GB/s, "
            f"{c['op_overhead_us']:.1f} us/op{extra}"
        )
    return 0


def cmd_data(args: argparse.Namespace) -> int:
    from iotfl_sim.fl.data.datasets import DatasetError
    from iotfl_sim.fl.data.download import DownloadError, download

    try:
        bounds = {k: v for k, v in (("timeout_s", args.timeout), ("deadline_s", args.deadline)) if v is not None}
        download(args.name, args.root, mirror=args.mirror, **bounds)
    except (DownloadError, DatasetError) as e:
        raise ScenarioError(f"data download: {e}") from None
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from iotfl_sim import methods
    from iotfl_sim.scenario.model import Scenario

    for name in methods.method_names():  # installed entry points too: their options belong in the schema
        try:
            methods.method(name)
        except methods.MethodError as e:
            print(f"note: {e}", file=sys.stderr)
    print(json.dumps(Scenario.model_json_schema(), indent=2))
    return 0


Subparsers = argparse._SubParsersAction  # what add_subparsers returns: one add_parser per command


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="iotfl-sim", description="Simulate federated learning on heterogeneous IoT fleets.")
    sub = ap.add_subparsers(dest="command", required=True)
    for add in (_run_parser, _validate_parser, _plot_parser, _compare_parser, _report_parser, _sweep_parser,
                _profiles_parser, _data_parser, _schema_parser):  # fmt: skip
        add(sub)
    return ap


def _scenario_args(p: argparse.ArgumentParser, optional: bool = False) -> None:
    p.add_argument("scenario", nargs="?" if optional else None, help="scenario YAML file")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a field, e.g. rounds=20")


def _targets_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--targets",
        nargs="+",
        type=float,
        metavar="ACC",
        help="target accuracies, fractions or percent, e.g. 0.5 0.7 (default: the runs' own "
        "server.target_accuracies; every target any run declared when they differ)",
    )


def _study_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="+", metavar="RUNS_OR_STUDY", help="study folders and/or run folders")
    p.add_argument(
        "--by",
        nargs="+",
        metavar="KEY",
        help="group runs into methods by these scenario keys "
        "(default: a study's overrides except seed; loose runs: algorithm name + scenario name)",
    )
    _targets_arg(p)


def _run_parser(sub: Subparsers) -> None:
    p = sub.add_parser("run", help="run a scenario into a new run folder, or continue one (--resume)")
    _scenario_args(p, optional=True)
    p.add_argument("--resume", metavar="RUN_DIR", help="continue this run folder from its last checkpoint")
    p.add_argument("--out", help="parent folder of the run folder (default: the scenario's output.dir)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_run)


def _validate_parser(sub: Subparsers) -> None:
    p = sub.add_parser("validate", help="check a scenario without running it")
    _scenario_args(p)
    p.set_defaults(func=cmd_validate)


def _plot_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "plot", help="write figures for run folders (overlaid) or a study (mean ± std over seeds)"
    )
    p.add_argument("runs", nargs="+", help="run folders, or a study folder")
    p.add_argument("--out", help="folder for the figures (default: <first run or study>/plots)")
    _targets_arg(p)
    p.set_defaults(func=cmd_plot)


def _compare_parser(sub: Subparsers) -> None:
    p = sub.add_parser("compare", help="tables over methods and seeds (Markdown and CSV)")
    _study_args(p)
    p.add_argument("--out", help="folder for compare.md and the CSVs (default: <study>/compare)")
    p.set_defaults(func=cmd_compare)


def _report_parser(sub: Subparsers) -> None:
    p = sub.add_parser("report", help="one self-contained HTML report of a study")
    _study_args(p)
    p.add_argument("--out", help="the HTML file (default: <study>/report.html)")
    p.set_defaults(func=cmd_report)


def _sweep_parser(sub: Subparsers) -> None:
    p = sub.add_parser("sweep", help="run every point of a study (a base scenario and a grid of overrides) in parallel")
    p.add_argument("study", help="study YAML file (name:, base:, grid:, zip:)")
    p.add_argument("--out", default="studies", help="parent of the study folder <out>/<name>/ (default: studies)")
    p.add_argument("--workers", type=int, help="runs at a time (default: the study's workers, else one per core; through Ray, one per CPU of the cluster)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--dispatch", choices=["processes", "ray"],
                   help="where runs execute (default: the study's dispatch.kind, else processes)")  # fmt: skip
    p.set_defaults(func=cmd_sweep)


def _profiles_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "profiles",
        help="list or show device profiles, measure this machine as one, check one against measured training, or fit one to it",
    )
    p.add_argument("action", choices=["list", "show", "measure", "check", "fit"])
    p.add_argument(
        "name",
        nargs="?",
        help="show, check: the profile (a name or a YAML path; check: `auto` prices each row on its own profile column); "
        "fit: the base profile; measure: the new profile's name (default: --out's stem)",
    )
    p.add_argument(
        "--out", help="measure: write the profile to this new file (default: print it); fit (required): the fitted profile's new file"
    )
    p.add_argument(
        "--against", metavar="FILE.csv", help="check, fit: measured training (columns in validation/README.md), or a folder of such files"
    )
    p.add_argument("--plot", metavar="FILE.png", help="check: also write a predicted-vs-measured scatter (.png, .pdf or .svg)")
    p.add_argument("--csv", metavar="FILE.csv", help="check: also write the per-row table as CSV")
    p.add_argument(
        "--params",
        metavar="P,P",
        help="fit: only these of flops,mem_bw,op_overhead,train_w (default: every one the rows determine; the others are "
        "kept from the base)",
    )
    p.add_argument("--seconds", type=float, default=20.0, help="measure: time budget of the micro-benchmarks")
    p.add_argument("--family", help="measure: also time one real training step of this model family, as a check")
    p.add_argument("--batch", type=int, default=32, help="measure: batch size of that training step")
    p.add_argument(
        "--threads", type=int, help="measure: torch threads to measure with (default: torch's; match how you will train)"
    )
    p.add_argument(
        "--device",
        default="cpu",
        choices=["cpu", "cuda"],
        help="measure: where training runs (cuda: a GPU server; aggregation and QSGD stay on the host CPU, as in a run)",
    )
    p.add_argument(
        "--server",
        action="store_true",
        help="measure: also time a server's own work (aggregation, QSGD encode/decode) for use as server.profile",
    )
    p.add_argument("--device-class", default="server", choices=DEVICE_CLASSES)
    p.add_argument("--idle-w", type=float, help="measure (required): idle power to record, W (not measured)")
    p.add_argument("--train-w", type=float, help="measure (required): training power to record, W (not measured)")
    p.set_defaults(func=cmd_profiles)


def _data_parser(sub: Subparsers) -> None:
    p = sub.add_parser("data", help="download a dataset's official files, checksum-verified, into a data root")
    p.add_argument("action", choices=["download"])
    p.add_argument("name", help="mnist | fashion_mnist | cifar10 | cifar100 | femnist | har")
    p.add_argument("--root", help="the data root (default: $IOTFL_DATA); files go where the loaders look")
    p.add_argument("--mirror", help="base URL serving <URL>/<name>/<file> instead of the official site "
                   "(default: $IOTFL_DATA_MIRROR; femnist needs one)")
    p.add_argument("--timeout", type=float, metavar="S",
                   help="seconds a read may wait for a byte; a server silent that long twice is given up (default 30)")
    p.add_argument("--deadline", type=float, metavar="S",
                   help="seconds the whole download may take (default 3600)")
    p.set_defaults(func=cmd_data)


def _schema_parser(sub: Subparsers) -> None:
    p = sub.add_parser("schema", help="print the JSON Schema of the scenario format")
    p.set_defaults(func=cmd_schema)


def _path_text(f: object) -> str:
    return os.fsdecode(f) if isinstance(f, str | bytes | os.PathLike) else str(f)


def os_error_line(e: OSError) -> str:
    """One line for an operating-system error on a path the user gave or a file the tool writes: the path
    (``e.filename``), what the system said, and what to do about it."""
    from iotfl_sim.output.space import no_space

    full = no_space(e, "run the command again")
    if full is not None:
        return str(full)
    if e.filename is None:
        return f"{e.strerror or e}; check the paths given and the space left on the disk"
    name = _path_text(e.filename)
    what = name + (f" -> {_path_text(e.filename2)}" if e.filename2 is not None else "")
    said = e.strerror or type(e).__name__
    broken = next((p for p in (Path(name), *Path(name).parents) if p.is_symlink() and not p.exists()), None)
    if broken is not None:  # the path, or a folder on the way to it (ELOOP names the whole path)
        return (f"{broken}: a symbolic link that leads nowhere (its target is missing, or the links go round a loop); "
                "repoint or remove it, or give another path")  # fmt: skip
    fixes = {
        errno.EEXIST: "something that is not a folder is in the way: move it away or give another path",
        errno.ENOTDIR: "a part of this path is a file, not a folder: give another path",
        errno.EISDIR: "this is a folder, not a file: give a file's path, or move the folder away",
        errno.ENOENT: "check the path (the folder above it must exist)",
        errno.EACCES: "check its owner and mode, or give a path you may use",
        errno.EPERM: "check its owner and mode, or give a path you may use",
        errno.EROFS: "give a path on a writable disk",
        errno.ELOOP: "symbolic links on the way go round a loop: repoint or remove one, or give another path",
    }
    return f"{what}: {said}; {fixes.get(e.errno, 'check the path')}"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ScenarioError as e:
        sys.stdout.flush()
        lines = [x for x in str(e).splitlines() if x.strip()] or ["bad input"]
        sys.stderr.write("".join(f"error: {x}\n" for x in lines))  # every line ends with a newline
        sys.stderr.flush()
        return EXIT_BAD_INPUT
    except BrokenPipeError:  # e.g. `iotfl-sim schema | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as e:  # a path the system refuses: one line naming it and the fix (only OSError: bugs stay loud)
        sys.stdout.flush()
        sys.stderr.write(f"error: {os_error_line(e)}\n")
        sys.stderr.flush()
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as e:
        print("interrupted", file=sys.stderr)
        return _signal_status(getattr(e, "signum", None))
    except SystemExit as e:  # only code that is not iotfl-sim's (a method, a Flower app) calls sys.exit() here
        sys.stdout.flush()
        sys.stderr.write(f"error: {_exit_line(e)}\n")
        sys.stderr.flush()
        return e.code if isinstance(e.code, int) and e.code not in (0, EXIT_BAD_INPUT) else 1


def _exit_line(e: SystemExit) -> str:
    """Where a sys.exit() that ended a command came from: never a silent success (status 0) mid-run."""
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = f" at {tb.tb_frame.f_code.co_filename}:{tb.tb_lineno} (in {tb.tb_frame.f_code.co_name})" if tb else ""
    return (f"sys.exit({e.code!r}) called{where} ended the command before it finished; remove that call (code "
            "a run calls reports a problem by raising an exception)")


def entry() -> NoReturn:
    """The ``iotfl-sim`` command: ``main``, then exit without the interpreter's final garbage collections.

    With PyTorch loaded they traverse every object it made, 0.4 s of each command's wall time (0.14 s left after
    ``gc.freeze``, measured on this 2-core host; an IoT run takes 13 s in all). Everything else of a normal exit
    still happens: atexit handlers (logging, worker pools, Ray), flushing and closing files, module teardown.
    Only cyclic garbage left at exit is not collected, which CPython does not promise to finalize anyway."""
    code = main()
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    entry()
