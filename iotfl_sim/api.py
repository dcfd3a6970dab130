"""The Python API: run a scenario, and read run folders and study folders, from a script or a notebook.

>>> import iotfl_sim
>>> res = iotfl_sim.run("scenarios/quickstart.yaml", sets=["rounds=3"])      # doctest: +SKIP
>>> res.summary["final_accuracy"]                                           # doctest: +SKIP
{'acc_full': 0.62, 'acc_avg': 0.55, ...}
>>> run = iotfl_sim.load_run(res.path)                                      # doctest: +SKIP
>>> run.rounds[["round", "acc_full", "energy_j"]]      # a DataFrame when pandas is installed   # doctest: +SKIP
>>> study = iotfl_sim.sweep("lr_vs_method.study.yaml", workers=4)            # doctest: +SKIP
>>> study = iotfl_sim.load_study("studies/lr_vs_method")                    # doctest: +SKIP
>>> study.table()                                      # one row per run: overrides + figures   # doctest: +SKIP
>>> study.crossings()                                  # one row per run and target accuracy   # doctest: +SKIP
>>> iotfl_sim.compare("studies/lr_vs_method").tables["time_to_accuracy"]     # doctest: +SKIP
>>> iotfl_sim.plot("studies/lr_vs_method")             # the figures' paths  # doctest: +SKIP

An argument of the wrong kind raises ``api_args.ArgumentError`` (a ``TypeError``), a file of a run or a study
that cannot be read back ``api_args.DamagedFile`` (a ``ValueError``), each naming the argument or the file and
the fix; both are ``ScenarioError``s, the API's bad input.

Everything here only reads what ``iotfl-sim run`` / ``iotfl-sim sweep`` write (see the README's "Outputs"
and "Studies"); nothing is computed that the files do not hold. ``compare`` and ``plot`` are the commands of
the same names (``analysis/``). Without pandas, tables are lists of dicts with numbers parsed (empty cells
are None).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from iotfl_sim.core import safe_json

# summary.json figures that study tables show, in this order (final_accuracy's acc_* keys come first)
TABLE_FIGURES = (
    "best_acc_full", "sim_time_s", "energy_j", "bytes_down", "bytes_up", "completed", "tasks", "comm_waste",
    "bytes_wasted", "rounds",
)  # fmt: skip


def _pandas():
    try:
        import pandas
    except ImportError:
        return None
    return pandas


def _number(text: str) -> Any:
    if text == "":
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def read_table(path: str | Path) -> Any:
    """A CSV file as a pandas DataFrame, or (without pandas) a list of dicts with numbers parsed."""
    pd = _pandas()
    if pd is not None:
        return pd.read_csv(path)
    with open(path, newline="") as f:
        return [{k: _number(v) for k, v in row.items()} for row in csv.DictReader(f)]


def _table(rows: list[dict[str, Any]]) -> Any:
    pd = _pandas()
    return pd.DataFrame(rows) if pd is not None else rows


def _number_arg(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _targets(given: Any) -> list[float] | None:
    """``targets=`` of the functions below: None, one accuracy or several, as fractions (or percent)."""
    if given is None:
        return None
    if not _number_arg(given) and (
        isinstance(given, str) or not isinstance(given, Sequence) or not all(_number_arg(t) for t in given)
    ):
        from iotfl_sim.api_args import ArgumentError

        raise ArgumentError(f"targets: an accuracy or a list of them (targets=[0.5, 0.7]), got {given!r:.80}")
    values = [float(given)] if _number_arg(given) else [float(t) for t in given]
    bad = [t for t in values if not 0 < t <= 100]
    if bad:
        from iotfl_sim.core.errors import ScenarioError

        raise ScenarioError(f"targets: accuracies are fractions in (0, 1] (or percent), got {bad[0]}")
    return [t / 100 if t > 1 else t for t in values]


def _crossing_rows(
    runs: list[tuple[dict[str, Any], Path]], targets: Any, column: str
) -> list[dict[str, Any]]:
    """For each (leading columns, run folder) and each target: whether and where the run first reached it."""
    from analysis.compare import CROSSING_FIELDS, crossing
    from analysis.rundir import load_run as read_run
    from analysis.targets import resolve_targets

    loaded = [(head, read_run(path, device_columns=())) for head, path in runs]
    chosen = resolve_targets([r for _, r in loaded], _targets(targets)).values
    rows = []
    for head, run in loaded:
        for t in chosen:
            hit = crossing(run, t, column)
            row = {**head, "target": t, "reached": hit is not None}
            for f in CROSSING_FIELDS:
                v = None if hit is None or math.isnan(hit[f]) else hit[f]  # nan: the run has no such column
                row[f] = int(v) if f == "round" and v is not None else v
            rows.append(row)
    return rows


def _damaged(path: Path, what: str) -> Exception:
    from iotfl_sim.api_args import DamagedFile

    return DamagedFile(f"{path}: {what}; the run may have been stopped while writing it: resume it with iotfl-sim run "
                       f"--resume {path.parent}, or move the file away")  # fmt: skip


def _read_run_table(path: Path) -> Any:
    try:
        return read_table(path)
    except (ValueError, csv.Error) as e:  # pandas' ParserError and EmptyDataError, UnicodeDecodeError: ValueErrors
        raise _damaged(path, f"not a readable CSV table ({type(e).__name__}: {str(e)[:200]})") from None


class Run:
    """A run folder, read lazily: ``rounds`` and ``devices`` (tables), ``summary`` and ``scenario`` (dicts),
    ``events()`` (an iterator over events.jsonl).

    >>> run = load_run("runs/quickstart-20250101-120000")     # doctest: +SKIP
    >>> run.summary["status"], run.scenario["algorithm"]["name"]   # doctest: +SKIP
    ('complete', 'heterofl')
    >>> sum(1 for e in run.events() if e["event"] == "oom")    # doctest: +SKIP
    """

    def __init__(self, path: str | Path) -> None:
        from iotfl_sim import api_args

        self.path = api_args.path("load_run: path", path)
        if not (self.path / "scenario.resolved.yaml").is_file():
            raise FileNotFoundError(f"{self.path}: not a run folder (no scenario.resolved.yaml)")
        self._cache: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"Run({str(self.path)!r})"

    def _once(self, key: str, make: Any) -> Any:
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    @property
    def rounds(self) -> Any:
        """rounds.csv: one row per round (README "Outputs" lists the columns)."""
        return self._once("rounds", lambda: _read_run_table(self.path / "rounds.csv"))

    @property
    def devices(self) -> Any:
        """devices.csv: one row per device (written at the end of a run, or when it is interrupted)."""
        return self._once("devices", lambda: _read_run_table(self.path / "devices.csv"))

    @property
    def summary(self) -> dict[str, Any]:
        """summary.json ({} while the run has not written one: still running, or killed)."""

        def read() -> dict[str, Any]:
            p = self.path / "summary.json"
            if not p.is_file():
                return {}
            try:
                summary = safe_json.read(p)
            except ValueError as e:
                summary = f"not readable JSON ({e})"
            if not isinstance(summary, dict):
                raise _damaged(p, summary if isinstance(summary, str) else "not a run summary (not a JSON object)")
            return summary

        return self._once("summary", read)

    @property
    def scenario(self) -> dict[str, Any]:
        """scenario.resolved.yaml: every default filled in, profiles inlined."""
        from iotfl_sim.core.errors import ScenarioError
        from iotfl_sim.scenario.loader import read_yaml

        def read() -> dict[str, Any]:
            p = self.path / "scenario.resolved.yaml"
            try:
                doc = read_yaml(p).data  # the YAML reader's limits (size, aliases, depth) and its one-line errors
            except ScenarioError as e:
                raise _damaged(p, str(e).removeprefix(f"{p}: ")) from None
            if not isinstance(doc, dict):
                raise _damaged(p, "not a scenario (not a YAML mapping)")
            return doc

        return self._once("scenario", read)

    def crossings(self, targets: Any = None, column: str = "acc_full") -> Any:
        """One row per target accuracy: ``target``, ``reached`` and the first rounds.csv row at or above it
        (``round``, ``sim_time_s``, cumulative ``bytes_down`` / ``bytes_up``, ``energy_j``, ``comm_waste_cum``,
        ``bytes_wasted``; None where never reached). ``targets``: None = the run's own
        ``server.target_accuracies``.

        >>> run.crossings([0.5, 0.7])[["target", "round", "sim_time_s"]]     # doctest: +SKIP
        """
        _column(column)
        return _table(_crossing_rows([({}, self.path)], targets, column))

    def events(self) -> Iterator[dict[str, Any]]:
        """The event log, one dict at a time (read as you iterate; a torn last line is skipped)."""
        p = self.path / "events.jsonl"
        if not p.is_file():
            return
        with open(p) as f:
            for line in f:
                try:
                    yield safe_json.loads(line)
                except ValueError:
                    continue


def _column(column: Any) -> None:
    if not isinstance(column, str):
        from iotfl_sim.api_args import ArgumentError

        raise ArgumentError(f"crossings: column: a rounds.csv column name such as 'acc_full', got {column!r:.80}")


def load_run(path: str | Path) -> Run:
    """Open a run folder (``iotfl-sim run``'s, or a study's ``runs/<run_id>``).

    >>> run = iotfl_sim.load_run("runs/quickstart-20250101-120000")   # doctest: +SKIP
    >>> run.rounds["acc_full"].max()                                  # doctest: +SKIP
    """
    return Run(path)


@dataclass
class RunResult:
    """What :func:`run` returns: the run folder, its summary and its rounds table."""

    path: Path
    summary: dict[str, Any]
    rounds: Any = field(repr=False)

    def load(self) -> Run:
        return Run(self.path)


def run(
    scenario: Any,
    out: str | Path | None = None,
    sets: list[str] | None = None,
    progress: bool = False,
    methods: Sequence[type] = (),
    executor: Callable[..., Any] | None = None,
) -> RunResult:
    """Run a scenario into a new run folder, as ``iotfl-sim run`` does, and return the result.

    ``scenario``: a YAML file path, a dict (the YAML as Python data) or a ``Scenario`` model;
    ``out``: the parent of the run folder (default: the scenario's ``output.dir``); ``sets``: ``--set``
    overrides (``["rounds=5", "local.lr=0.05"]``); ``methods``: your own Strategy subclasses, registered before
    the scenario is read, so that its ``algorithm.name`` may name one (by its ``name`` class attribute, else
    its import path ``module:Class``); ``executor``: your own executor, as a factory called with the run's data and the scenario's ``executor`` block, ``executor(data: NumericData, cfg)`` (a class with that ``__init__`` will do; ``docs/add_an_executor_or_profile.md``). Bad input raises ``ScenarioError`` (one line per problem); relative
    paths in a dict or model resolve from the current folder.

    >>> import iotfl_sim
    >>> res = iotfl_sim.run("scenarios/quickstart.yaml", out="runs", sets=["rounds=3"])   # doctest: +SKIP
    >>> res.path, res.summary["status"], res.rounds["acc_full"].iloc[-1]                    # doctest: +SKIP
    >>> sc = {"name": "mini", "rounds": 2, "numerics": "none", "algorithm": "fedavg",
    ...       "fleet": {"groups": [{"profile": "raspberry_pi_4b", "count": 10}]}}
    >>> iotfl_sim.run(sc, out="runs").summary["energy_j"]                                  # doctest: +SKIP
    >>> iotfl_sim.run({**sc, "algorithm": "myprox"}, methods=[MyProx])   # MyProx.name == "myprox"  # doctest: +SKIP
    """
    import yaml

    from iotfl_sim import api_args
    from iotfl_sim import methods as registry
    from iotfl_sim.core.errors import ScenarioError
    from iotfl_sim.scenario.loader import load_scenario, resolve_groups, resolved_dict
    from iotfl_sim.scenario.model import Scenario
    from iotfl_sim.sim.preflight import preflight
    from iotfl_sim.sim.runner import run_scenario

    sets = api_args.strings("run: sets", sets, "--set overrides, e.g. sets=['rounds=5', 'local.lr=0.05']")
    out = api_args.path("run: out", out, optional=True)
    progress = api_args.flag("run: progress", progress)
    executor = api_args.callable_or_none(
        "run: executor", executor, "a factory (data, cfg) -> executor, e.g. your executor class (docs/add_an_executor_or_profile.md)"
    )
    for cls in api_args.classes("run: methods", methods):
        try:
            registry.register_method(cls)
        except registry.MethodError as e:
            raise ScenarioError(f"run: methods: {e}") from None
    if isinstance(scenario, Scenario):
        scenario = scenario.model_dump(mode="json", by_alias=True)
    if isinstance(scenario, Mapping):
        base_dir = Path.cwd()
        source = "<scenario>"
        sc = load_scenario(text=yaml.safe_dump(dict(scenario), sort_keys=False), sets=sets)
    elif isinstance(scenario, (str, Path)):
        base_dir = Path(scenario).resolve().parent
        source = str(scenario)
        sc = load_scenario(scenario, sets=sets)
    else:
        raise api_args.ArgumentError(f"run: scenario: give a scenario path, a dict or a Scenario, not {type(scenario).__name__}")
    groups = resolve_groups(sc, base_dir / "device_profiles", source)
    preflight(sc, groups, base_dir, source, None if out is None else str(out))
    path, summary = run_scenario(
        sc, groups, out if out is not None else sc.output.dir, resolved_dict(sc, groups), progress=progress, base_dir=base_dir,
        executor_factory=executor,
    )  # fmt: skip
    assert path is not None
    return RunResult(path, summary, read_table(path / "rounds.csv"))


class _LazyRuns(Mapping):
    """run id -> Run, each opened on first access."""

    def __init__(self, folder: Path, records: list[dict[str, Any]]) -> None:
        self._folder = folder
        self._dirs = {r["id"]: r["run_dir"] for r in records}
        self._open: dict[str, Run] = {}

    def __getitem__(self, rid: str) -> Run:
        if rid not in self._open:
            self._open[rid] = Run(self._folder / self._dirs[rid])
        return self._open[rid]

    def __iter__(self) -> Iterator[str]:
        return iter(self._dirs)

    def __len__(self) -> int:
        return len(self._dirs)


RECORD_KEYS = {"id": str, "run_dir": str, "status": str, "overrides": dict}  # what StudyRuns reads of a record


def _study_index(sj: Path) -> dict[str, Any]:
    """study.json, checked for what ``StudyRuns`` reads: its name and its runs' records."""
    from iotfl_sim.api_args import DamagedFile

    if not sj.is_file():
        raise FileNotFoundError(f"{sj.parent}: not a study folder (no study.json); give a folder that iotfl-sim sweep made")
    fix = "the sweep rewrites it when run again on the same study"
    try:
        index = safe_json.read(sj)
    except ValueError as e:
        raise DamagedFile(f"{sj}: not readable JSON ({e}); {fix}") from None
    if not isinstance(index, dict) or not isinstance(index.get("name"), str) or not isinstance(index.get("runs"), list):
        raise DamagedFile(f"{sj}: not a study index (an object with a 'name' and a 'runs' list); {fix}")
    for i, r in enumerate(index["runs"]):
        if not isinstance(r, dict) or any(not isinstance(r.get(k), t) for k, t in RECORD_KEYS.items()):
            raise DamagedFile(f"{sj}: run record {i} is not a run record ({', '.join(RECORD_KEYS)}); {fix}")
    return index


class StudyRuns:
    """A study folder (``iotfl-sim sweep``): ``records`` (study.json's, one per run), ``runs`` (run id ->
    :class:`Run`, opened lazily) and :meth:`table`."""

    def __init__(self, path: str | Path) -> None:
        from iotfl_sim import api_args

        p = api_args.path("load_study: path", path)
        assert p is not None
        self.path = p.parent if p.name == "study.json" else p
        index = _study_index(self.path / "study.json")
        self.name: str = index["name"]
        self.records: list[dict[str, Any]] = index["runs"]
        self.runs = _LazyRuns(self.path, self.records)

    def __repr__(self) -> str:
        counts: dict[str, int] = {}
        for r in self.records:
            counts[r["status"]] = counts.get(r["status"], 0) + 1
        return f"StudyRuns({str(self.path)!r}, {counts})"

    def table(self) -> Any:
        """One row per run: ``id``, ``status``, one column per override key, then the summary's figures
        (``acc_*`` final accuracies, ``best_acc_full``, ``sim_time_s``, ``energy_j`` and its split
        ``energy_compute_j`` / ``energy_radio_j`` / ``energy_idle_j``, ``comm_waste``, ``bytes_wasted`` ...),
        ``devices_trained`` and ``trained_share`` (devices.csv: devices that completed a task, and their share of
        the fleet) and ``host_s``; a run without a summary (or devices.csv) has those figures empty.

        >>> iotfl_sim.load_study("studies/lr").table().groupby("algorithm.name")["acc_full"].mean()  # doctest: +SKIP
        """
        rows = []
        for r in self.records:
            row: dict[str, Any] = {"id": r["id"], "status": r["status"], **r["overrides"]}
            summary = self.runs[r["id"]].summary if (self.path / r["run_dir"] / "summary.json").is_file() else {}
            row.update(summary.get("final_accuracy") or {})
            for k in TABLE_FIGURES:
                row[k] = summary.get(k)
                if k == "energy_j":  # then its split: idle is most of a fleet's energy, whatever the method
                    row.update({f"energy_{kind}_j": v for kind, v in (summary.get("energy_by_kind_j") or {}).items()})
            row["devices_trained"], row["trained_share"] = self._trained(r["run_dir"])
            row["host_s"] = r.get("host_s")
            row["error"] = r.get("error")
            rows.append(row)
        return _table(rows)

    def _trained(self, run_dir: str) -> tuple[int | None, float | None]:
        """(devices that completed a task, their share of the fleet) from the run's devices.csv; Nones when the
        run has none (yet) or it cannot be read."""
        from analysis.rundir import PlotInputError, read_devices, trained_devices

        try:
            trained = trained_devices(read_devices(self.path / run_dir / "devices.csv", ["completed"]))
        except PlotInputError:
            return None, None
        if not trained or not trained[1]:
            return None, None
        return trained[0], trained[0] / trained[1]

    def crossings(self, targets: Any = None, column: str = "acc_full") -> Any:
        """One row per finished run (status ``done``) and target accuracy: ``id``, the overrides, ``target``,
        ``reached``, then where the run first reached it (``Run.crossings``'s columns). ``targets``: None = the
        runs' own ``server.target_accuracies`` (every target any run declared, when they differ).

        >>> t = iotfl_sim.load_study("studies/lr").crossings()                     # doctest: +SKIP
        >>> t[t.target == 0.8].groupby("algorithm.name")["sim_time_s"].mean()      # doctest: +SKIP
        """
        done = [({"id": r["id"], **r["overrides"]}, self.path / r["run_dir"]) for r in self.records
                if r["status"] == "done" and (self.path / r["run_dir"] / "rounds.csv").is_file()]  # fmt: skip
        _column(column)
        return _table(_crossing_rows(done, targets, column))


def sweep(
    study: Any, out: str | Path = "studies", workers: int | None = None, progress: bool = False
) -> StudyRuns:
    """Run a study, as ``iotfl-sim sweep`` does, and open its folder ``<out>/<name>/``.

    ``study``: a study YAML file, or a dict of the same fields (a relative ``base`` path then resolves from
    the current folder). Complete runs already in the folder are kept; bad input raises ``ScenarioError``;
    failed runs are in the records with their ``error``.

    >>> study = iotfl_sim.sweep({"name": "lr", "base": "scenarios/quickstart.yaml",
    ...                          "grid": {"local.lr": [0.01, 0.05], "seed": [0, 1]}}, workers=2)  # doctest: +SKIP
    >>> study.table()[["local.lr", "seed", "acc_full"]]                                        # doctest: +SKIP
    """
    import yaml

    from iotfl_sim import api_args
    from iotfl_sim.study import read_study
    from iotfl_sim.study import sweep as run_study

    out = api_args.path("sweep: out", out)
    workers = api_args.count("sweep: workers", workers)
    progress = api_args.flag("sweep: progress", progress)
    if isinstance(study, Mapping):
        spec = read_study(Path.cwd() / "<study>", text=yaml.safe_dump(dict(study), sort_keys=False))
    else:
        spec = read_study(api_args.path("sweep: study (a study file or a dict)", study))
    res = run_study(spec, out, workers=workers, progress=progress)
    return StudyRuns(res.folder)


def load_study(path: str | Path) -> StudyRuns:
    """Open a study folder (``<out>/<name>/``, or its ``study.json``).

    >>> study = iotfl_sim.load_study("studies/lr_vs_method")        # doctest: +SKIP
    >>> [r["status"] for r in study.records]                         # doctest: +SKIP
    >>> study.runs["seed=1"].rounds                                  # doctest: +SKIP
    """
    return StudyRuns(path)


@dataclass
class Comparison:
    """What :func:`compare` returns: the tables (name -> table of ``<column> mean/std/n`` per method, as the
    CSV files), the Markdown ``iotfl-sim compare`` prints, the targets used and the files written."""

    tables: dict[str, Any] = field(repr=False)
    markdown: str = field(repr=False)
    targets: tuple[float, ...]
    written: list[Path]


def _paths(where: str, paths: Any) -> list[Path]:
    from iotfl_sim import api_args

    return api_args.paths(where, paths)


def compare(
    paths: Any, targets: Any = None, by: list[str] | None = None, out: str | Path | None = None
) -> Comparison:
    """Compare methods over seeds, as ``iotfl-sim compare`` does: ``paths`` a study folder or run folders (one
    or a list); ``targets`` None = the runs' own ``server.target_accuracies``; ``by`` scenario keys that define
    a method; ``out`` a folder for compare.md and the CSVs (None: nothing written). A selection with no
    finished run raises ``ScenarioError``, as bad input does.

    >>> cmp = iotfl_sim.compare("studies/lr_vs_method", targets=[0.5, 0.7])     # doctest: +SKIP
    >>> print(cmp.markdown)                                                    # doctest: +SKIP
    >>> cmp.tables["energy"]                      # compute / radio / idle per method   # doctest: +SKIP
    """
    from analysis.compare import build_tables, compare_markdown, selection_targets, write_tables
    from analysis.rundir import PlotInputError
    from analysis.study import require_runs, select
    from iotfl_sim import api_args
    from iotfl_sim.core.errors import ScenarioError

    ps = _paths("compare: paths", paths)
    by = api_args.strings("compare: by", by, "scenario keys that define a method, e.g. by=['algorithm.name']")
    out = api_args.path("compare: out", out, optional=True)
    try:
        sel = select(ps, by or None)
        require_runs(sel, ps, "compare")
    except PlotInputError as e:
        raise ScenarioError(str(e)) from None
    chosen = selection_targets(sel, _targets(targets))
    tables = build_tables(sel, chosen)
    written = write_tables(sel, tables, Path(out)) if out is not None else []
    by_name = {}
    for t in tables:
        head, rows = t.csv_rows()
        by_name[t.name] = _table([{h: _number(str(v)) for h, v in zip(head, row, strict=True)} for row in rows])
    return Comparison(by_name, compare_markdown(sel, tables), chosen.values, written)


def plot(paths: Any, out: str | Path | None = None, targets: Any = None) -> list[Path]:
    """Write figures, as ``iotfl-sim plot`` does: a study folder's figures (mean ± std over seeds), or run
    folders overlaid; ``out`` defaults to ``<first path>/plots``; ``targets`` None = the runs' own. Returns the
    files written.

    >>> iotfl_sim.plot(res.path)                       # one run: accuracy, energy, timeline ...  # doctest: +SKIP
    """
    from analysis.rundir import PlotInputError
    from analysis.study_plots import plot_paths
    from iotfl_sim import api_args
    from iotfl_sim.core.errors import ScenarioError

    ps = _paths("plot: paths", paths)
    out = api_args.path("plot: out", out, optional=True)
    try:
        written, _ = plot_paths(ps, out, _targets(targets))
    except PlotInputError as e:
        raise ScenarioError(str(e)) from None
    return written
