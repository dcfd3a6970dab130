"""The seed papers' claims, rerun: run one claim group's study, extract its per-seed figures, rewrite claims.md.

    IOTFL_DATA=../shared/datasets python benchmarks/claims.py --group heterofl_iot --scale smoke
    python benchmarks/claims.py --group fedx --scale hour --out studies       # runs the study, then as below
    python benchmarks/claims.py --group adaptivefl --scale paper              # a GPU; see benchmarks/claims.md
    python benchmarks/claims.py --group fedx --scale hour --report-only       # no runs: from the study folder
    python benchmarks/claims.py --from-data                                   # claims.md from the CSVs alone

The study files are scenarios/claims/<group>_<scale>.yaml (each variant is one row of their ``zip``, labelled
by the run's ``name``); ``iotfl_sim.api.sweep`` runs them (complete runs in the folder are kept). From the study
folder, ``analysis.compare`` writes the usual comparison tables into <out>/<study>/compare/, every finished run's
figures go to benchmarks/claims_data/<group>_<scale>.csv (``claims_figures``), and benchmarks/claims.md is
rewritten whole from the claim groups and every CSV there (``claims_report``; the decision rule is
``analysis/claims_rule.py``). Nothing is written until everything has been read and computed, and then every
file or none (``analysis.write_files``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from claims_figures import DataError, collect, parse_csv, read_csv, rerun_check, to_csv  # noqa: E402
from claims_groups import GROUPS  # noqa: E402
from claims_plot import PLOT_NAME, forest  # noqa: E402
from claims_report import (  # noqa: E402
    DATA_DIR,
    MD_PATH,
    README_PATH,
    SCALES,
    columns,
    data_path,
    decide_all,
    group_module,
    read_all,
    render,
    verdict_block,
    with_verdict_block,
)

from analysis.compare import build_tables, table_files  # noqa: E402
from analysis.rundir import PlotInputError  # noqa: E402
from analysis.study import select  # noqa: E402
from analysis.write_files import write_all  # noqa: E402

if TYPE_CHECKING:
    from iotfl_sim.study.spec import Study

CLAIMS_DIR = ROOT / "scenarios" / "claims"


def study_file(group: str, scale: str) -> Path:
    return CLAIMS_DIR / f"{group}_{scale}.yaml"


def study_files(group: str, scale: str) -> list[Path]:
    """The group's study at ``scale`` and its ``EXTRA_STUDIES`` (a setting a zip row cannot change, e.g. the
    model: ``<group>_<scale>_<suffix>.yaml``); their run names are distinct, so their figures are one table."""
    extra = getattr(group_module(group), "EXTRA_STUDIES", ())
    return [study_file(group, scale)] + [CLAIMS_DIR / f"{group}_{scale}_{x}.yaml" for x in extra]


def stale_folder(study: Study, folder: Path) -> str | None:
    """Why a study folder read with --report-only is not the study its file defines now (None: it is, or there is
    no folder yet): its index lists a run the file no longer defines (a variant's options changed: the run id
    hashes them) or lacks one the file defines (the sweep brings such a folder up to date), or its base scenario
    differs. A report from it as it is would mix two versions of the study under one variant name."""
    from analysis.study import load_study
    from iotfl_sim.study.folder import base_difference

    if not (folder / "study.json").is_file():
        return None
    recorded = load_study(folder)
    fix = "run the group without --report-only: the sweep brings the folder up to date, keeping the runs still in it"
    now, was = {p.id for p in study.points}, {r.id for r in recorded.runs}
    if gone := sorted(was - now):
        return f"{folder}: its index lists run {gone[0]}, which {study.source} no longer defines; {fix}"
    if new := sorted(now - was):
        return f"{folder}: its index lacks run {new[0]}, which {study.source} defines; {fix}"
    if recorded.base is not None and (where := base_difference(recorded.base, study.base_resolved)):
        return (f"{folder}: its base scenario differs from {study.source}'s ({where}), so its runs are another "
                "study's; give another --out (the sweep refuses this folder too)")  # fmt: skip
    return None


def _report_files(datasets: dict, data_dir: Path, md: Path, readme: Path | None) -> dict[Path, str | bytes]:
    """claims.md, the README's verdict list (when ``readme``) and the effects figure beside claims.md, by path."""
    files: dict[Path, str | bytes] = {md: render(datasets, data_dir)}
    if (readme_text := _readme_text(readme, datasets)) is not None:
        files[readme] = readme_text
    if (png := forest(decide_all(datasets))) is not None:
        files[md.with_name(PLOT_NAME)] = png
    return files


def _one_file_twice(md: Path, readme: Path | None, data: Path) -> str | None:
    """Why the outputs cannot be told apart (None: they can): --md, --readme, the figure beside --md or a per-seed
    CSV in --data naming one file, which would end up holding only the last of them."""
    roles = {"--md": md, "--readme": readme, f"the figure {PLOT_NAME} beside --md": md.with_name(PLOT_NAME)}
    roles |= {f"the CSV {data_path(g, s, data).name} in --data": data_path(g, s, data) for g in GROUPS for s in SCALES}
    seen: dict[Path, str] = {}
    for role, path in roles.items():
        if path is None:
            continue
        if (key := path.resolve()) in seen:
            return f"{seen[key]} and {role} are one file ({path}); give each its own path"
        seen[key] = role
    return None


def _data_error(data: Path, from_data: bool, md_given: bool) -> str | None:
    """Why ``--data`` cannot be used as given (None: it can). A folder that is missing or holds no CSV would
    rebuild claims.md with every group pending; another folder than the committed one, written into the
    committed claims.md, would silently replace the committed groups' verdicts."""
    if data.exists() and not data.is_dir():
        return f"--data {data}: not a folder; give the folder that holds the per-seed CSVs"
    if from_data and not any(data_path(g, s, data).is_file() for g in GROUPS for s in SCALES):
        return (f"--data {data}: no per-seed CSV (<group>_<scale>.csv) there, so nothing to rebuild claims.md "
                "from; give the folder that holds them")  # fmt: skip
    if not md_given and data.resolve() != DATA_DIR.resolve():
        return (f"--data {data} is not {DATA_DIR.relative_to(ROOT)}, whose report is {MD_PATH.relative_to(ROOT)}: "
                "give --md too, so the committed report is not replaced by another folder's")  # fmt: skip
    return None


def _readme_text(readme: Path | None, datasets: dict) -> str | None:
    """``readme``'s text with its verdict list rebuilt from ``datasets`` (None: no README to update)."""
    if readme is None:
        return None
    try:
        text = readme.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{readme}: cannot read it ({e})") from None
    return with_verdict_block(text, verdict_block(datasets), readme)


def report(
    group: str,
    scale: str,
    folders: list[Path],
    data_dir: Path,
    md: Path,
    by: tuple[str, ...] = ("name",),
    readme: Path | None = None,
) -> str:
    """Extract the figures of the group's study ``folders`` (the main one and its extras) into the group's CSV
    and rewrite claims.md (and ``readme``'s verdict list); returns the CSV's path. Raises DataError (another CSV
    unreadable, a variant in two folders, the README without its markers, a run not done while writing into the
    committed ``DATA_DIR``) before writing anything."""
    data: dict = {}
    excluded: list[str] = []
    for folder in folders:
        part, left_out = collect(folder, by)
        if clash := set(part) & set(data):
            raise DataError(
                f"{folder}: variant {sorted(clash)[0]!r} is in another study of the group too",
                "give each study of the group its own run names",
            )
        data.update(part)
        excluded += left_out
    if not data:
        where = ", ".join(str(f) for f in folders)
        raise DataError(
            f"{where}: no finished run" + (f" ({'; '.join(excluded[:3])})" if excluded else ""),
            "run the group without --report-only first",
        )
    if excluded and data_dir.resolve() == DATA_DIR.resolve():
        raise DataError(
            f"{len(excluded)} runs of the study are not done ({'; '.join(excluded[:2])}): the committed verdicts "
            "rest on whole studies, never on the seeds finished so far",
            "run the group without --report-only until every run is done (a failed run: see its error), or "
            "write a preview elsewhere with --data and --md",
        )
    text = to_csv(data, columns(group_module(group), set(data)))
    csv_path = data_path(group, scale, data_dir)
    datasets = read_all(data_dir, but=(group, scale))
    before, unreadable = None, None
    if csv_path.is_file():
        try:
            before = read_csv(csv_path)
        except DataError as e:  # the file this report rebuilds: said, then replaced
            unreadable = str(e)
    datasets[(group, scale)] = parse_csv(text, csv_path)  # as it will be read back, not the in-memory floats
    rerun = None if before is None else rerun_check(before, datasets[(group, scale)])
    files = {csv_path: text, **_report_files(datasets, data_dir, md, readme)}
    for folder in folders:
        sel = select([folder], by=list(by))
        files.update({folder / "compare" / name: t for name, t in table_files(sel, build_tables(sel)).items()})
    write_all(files)
    if unreadable is not None:
        print(f"claims: {csv_path.name}: the CSV it replaced was unreadable ({unreadable}), so no run was compared "
              "with it", file=sys.stderr)  # fmt: skip
    if rerun is not None:
        print(f"claims: {csv_path.name}: {rerun}", file=sys.stderr)
    if excluded:
        print(f"claims: {len(excluded)} runs left out: " + "; ".join(excluded[:3]), file=sys.stderr)
    return str(csv_path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--group", choices=GROUPS, help="the claim group (not with --from-data)")
    ap.add_argument("--scale", default="smoke", choices=SCALES)
    ap.add_argument("--out", default="studies", help="parent of the study folder (default: studies)")
    ap.add_argument("--workers", type=int, default=None, help="runs at a time (default: the study file's)")
    ap.add_argument(
        "--report-only", action="store_true", help="no runs: extract and report from the study folder"
    )
    ap.add_argument("--from-data", action="store_true", help="no study folder: claims.md from the CSVs alone")
    ap.add_argument(
        "--data", type=Path, default=DATA_DIR, help="the per-seed CSVs (default: benchmarks/claims_data)"
    )
    ap.add_argument(
        "--md", type=Path, default=None, help="the report written (default: benchmarks/claims.md)"
    )
    ap.add_argument(
        "--readme",
        type=Path,
        default=None,
        help="the README whose verdict list is rewritten (default: README.md with the default --md, else none)",
    )
    args = ap.parse_args(argv)
    if problem := _data_error(args.data, args.from_data, args.md is not None):
        print(f"error: {problem}", file=sys.stderr)
        return 2
    args.md = args.md or MD_PATH
    readme = args.readme or (README_PATH if args.md.resolve() == MD_PATH.resolve() else None)
    if clash := _one_file_twice(args.md, readme, args.data):
        print(f"error: {clash}", file=sys.stderr)
        return 2

    try:
        if args.from_data:
            if args.group or args.report_only:
                print(
                    "error: --from-data reads every CSV: give neither --group nor --report-only",
                    file=sys.stderr,
                )
                return 2
            datasets = read_all(args.data)
            files = _report_files(datasets, args.data, args.md, readme)
            write_all(files)
            print(
                f"claims: wrote {args.md}"
                + (f" and the verdicts in {readme}" if readme in files else "")
            )
            return 0
        if not args.group:
            print("error: give --group (or --from-data to rebuild claims.md from the CSVs)", file=sys.stderr)
            return 2
        from iotfl_sim.api import sweep
        from iotfl_sim.core.errors import ScenarioError
        from iotfl_sim.study import read_study

        folders = []
        try:
            for path in study_files(args.group, args.scale):
                study = read_study(path, check=False)
                folders.append(Path(args.out) / study.spec.name)
                if not args.report_only:
                    sweep(path, out=args.out, workers=args.workers, progress=True)  # hours: say how far
                elif problem := stale_folder(study, folders[-1]):
                    print(f"error: {problem}", file=sys.stderr)
                    return 2
        except ScenarioError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        if not (folders[0] / "study.json").is_file():
            print(f"error: no study folder {folders[0]}: run without --report-only first", file=sys.stderr)
            return 2
        for extra in [f for f in folders[1:] if not (f / "study.json").is_file()]:
            print(
                f"claims: no study folder {extra} yet: its variants' claims stay without seeds",
                file=sys.stderr,
            )
        folders = [f for f in folders if (f / "study.json").is_file()]
        csv_path = report(args.group, args.scale, folders, args.data, args.md, readme=readme)
        print(f"claims: wrote {csv_path} and {args.md}")
        return 0
    except DataError as e:
        print(f"error: {e}; {e.fix}", file=sys.stderr)
        return 2
    except PlotInputError as e:  # the study folder's own index, unreadable
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        where = f"{e.filename}: " if e.filename else ""
        print(f"error: {where}{e.strerror or e}; check that the path exists and is writable", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
