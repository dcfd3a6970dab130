"""Every documented example works: each ```yaml block, each shell command and the ```python block of the
README, its inline `iotfl-sim ...` synopses, and each scenario in scenarios/ with the commands and
``--set`` variants its header comment gives.

- YAML fragments (``fleet:``, ``executor:``, ``output:`` blocks) are merged into scenarios/quickstart.yaml
  (mappings merged, lists replaced) and run a round; the tour runs a system-only round; the study block is
  read with every point validated. A block needing an extra that is not installed (TensorBoard, W&B) must
  be refused naming it, and is reported skipped.
- ``iotfl-sim`` commands (``bash scripts/in-venv`` and ``python3 -m iotfl_sim.cli`` forms too) are parsed
  from the text and run through ``iotfl_sim.cli.main``: ``validate``, ``schema``, ``profiles list/show`` as
  written; ``profiles check/fit`` as written on the README's CSV block; ``profiles measure`` as written with the
  micro-benchmarks stubbed; ``run`` with small overrides (fewer rounds, a data subset for the big datasets, an
  ``--out`` in a temporary folder); ``plot`` on runs made by the README's own ``run`` commands (``runs/quickstart-<timestamp>`` becomes one); ``run --resume``
  on the README's checkpointed run stopped by a real Ctrl-C; ``sweep``, ``compare``, ``plot STUDY`` and
  ``report`` on the README's study made cheaper (synopsis placeholders such as STUDY, RUN, DIR filled in);
  ``data download`` where the dataset is present (it must fetch nothing).
- A command whose dataset is absent runs system-only (``numerics=none``) and is then reported skipped,
  naming the missing folder. Datasets come from ../shared/datasets beside the clone, or $IOTFL_TEST_DATA.
- Paper-scale scenarios (hours on a GPU) are validated with every variant, and each algorithm or model
  variant runs one system-only round; the plain files are test_scenarios_shipped's (validated, one round).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import math
import os
import re
import shlex
import signal
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from conftest import SHARED_DATA

from iotfl_sim.cli import build_parser, main
from iotfl_sim.scenario.loader import load_scenario, resolve_groups, resolved_dict

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SCENARIOS = ROOT / "scenarios"
QUICKSTART = SCENARIOS / "quickstart.yaml"

# where each dataset's files live under the data root (digits needs none)
DATASET_DIRS = {
    "mnist": "mnist",
    "fashion_mnist": "fashion_mnist",
    "cifar10": "cifar-10-batches-py",
    "cifar100": "cifar-100-python",
    "femnist": "femnist",
    "har": "uci_har",
}
# a seeded subset keeps one round of a big dataset to seconds (data.train_samples / test_samples)
SUBSET = ["data.train_samples=3000", "data.test_samples=300", "server.bn_calibration_samples=300"]

# Scenarios short enough to run for real here, with these overrides (after the command's own). The
# roofline's one-time trace of each submodel costs seconds of set-up: runs here price by FLOPs instead
# (the roofline itself runs in test_scenarios_shipped's round of every scenario).
FLOPS = "fleet.cost_model=flops"
SHORT = {
    "quickstart.yaml": ["rounds=2"],
    "adapterfl_smoke.yaml": ["rounds=1", FLOPS],
    "iot_field_deployment.yaml": ["rounds=5"],  # eval_every 5: one evaluation
    "heterofl_iot_budget.yaml": ["rounds=2"],
    "heterofl_iot_budget_random.yaml": ["rounds=2"],
    "fedx_smoke.yaml": ["rounds=1", FLOPS],
    "fedprox_smoke.yaml": ["rounds=1"],
    "fedopt_smoke.yaml": ["rounds=1"],
    "async_iot_fleet_smoke.yaml": ["rounds=3"],  # model versions in async mode, rounds in the others
    "heterofl_async_smoke.yaml": ["rounds=3"],
    "hierarchical_field_smoke.yaml": ["rounds=1"],
    # 100 devices on MNIST: a full round is minutes on CPU; one round on a seeded subset
    "heterofl_mnist_a2b8.yaml": ["rounds=1", *SUBSET, FLOPS],
}
# Not run for real here (each about 90 s on 2 cores as shipped, 10-20 s for one round on a subset): the
# FEMNIST smokes; paper-scale scenarios need a GPU. Their variants run one system-only round.
# Variants written as prose in a header rather than as `--set` (the text that must appear, the sets).
PROSE_VARIANTS = {
    "adaptivefl_smoke.yaml": [
        ("greedy | random", ["algorithm.selection=random"]),
        ("algorithm.curiosity=false", ["algorithm.curiosity=false"]),
        ("algorithm.resource=false", ["algorithm.resource=false"]),
    ],
    "adaptivefl_cifar10_vgg16.yaml": [
        ("(or 0.3)", ["data.partition.method=dirichlet", "data.partition.alpha=0.3"]),
    ],
    **{
        f"flexfl_conf{i}.yaml": [
            ("{method: dirichlet, alpha: 0.6} or 0.3", ["data.partition={method: dirichlet, alpha: 0.6}"]),
            ("{method: dirichlet, alpha: 0.6} or 0.3", ["data.partition={method: dirichlet, alpha: 0.3}"]),
        ]
        for i in (1, 2, 3)
    },
}
# Variants only validated, not run: their set-up alone takes minutes here.
VALIDATE_ONLY = {
    ("adapterfl_cifar10.yaml", ("algorithm.cuts=null",)): "the CKA cut search over full-width CIFAR-10 "
    "prototypes (part of validate's and run's set-up) takes 25-50 s on 2 cores even system-only",
}
# flexfl_conf1-3 share their header: their variants are validated and run on conf2 (the paper's default),
# and only loaded (schema, types, profiles) on the others.
VALIDATE_VARIANTS_ONLY = {"flexfl_conf1.yaml", "flexfl_conf3.yaml"}


# ---------------------------------------------------------------- reading the docs


def fenced(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def deep_merge(base: dict, over: dict) -> dict:
    """``over`` merged into ``base``: mappings merged key by key, anything else (lists too) replaced."""
    out = dict(base)
    for k, v in over.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def merged_into_quickstart(fragment: str) -> dict:
    """A README YAML fragment merged into scenarios/quickstart.yaml."""
    return deep_merge(yaml.safe_load(QUICKSTART.read_text()), yaml.safe_load(fragment))


@dataclass
class Command:
    argv: list[str]  # after `iotfl-sim`
    where: str  # e.g. README.md:42 or scenarios/x.yaml:5
    env: dict[str, str] = field(default_factory=dict)
    stdout_to: str | None = None

    @property
    def id(self) -> str:
        return f"{self.where}:{' '.join(self.argv)}"[:90]


def parse_command(text: str, where: str, env: dict[str, str] | None = None) -> list[Command]:
    """The iotfl-sim commands of one shell line (``&&`` chains, ``VAR=x`` prefixes, ``> file``)."""
    out = []
    for piece in re.split(r"&&|;", text):
        words = shlex.split(piece, comments=True)
        local = dict(env or {})
        while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
            k, v = words.pop(0).split("=", 1)
            local[k] = v
        if words[:2] == ["bash", "scripts/in-venv"]:  # runs the rest in the project's environment
            words = words[2:]
        if words[:3] in (["python3", "-m", "iotfl_sim.cli"], ["python", "-m", "iotfl_sim.cli"]):
            words = ["iotfl-sim", *words[3:]]
        if not words or words[0] != "iotfl-sim":
            continue
        stdout_to = None
        if ">" in words:
            i = words.index(">")
            stdout_to, words = words[i + 1], words[:i]
        out.append(Command(words[1:], where, local, stdout_to))
    return out


def readme_commands() -> list[Command]:
    text = README.read_text()
    cmds = []
    for m in re.finditer(r"```bash\n(.*?)```", text, flags=re.S):
        first = text[: m.start(1)].count("\n") + 1
        env: dict[str, str] = {}
        for i, line in enumerate(m.group(1).splitlines()):
            if line.startswith("export "):
                k, v = line[len("export ") :].split("=", 1)
                env[k] = v
                continue
            cmds.extend(parse_command(line, f"README.md:{first + i}", env))
    return cmds


def header(path: Path) -> list[tuple[int, str]]:
    """The leading comment block of a scenario file: (line number, text without '#')."""
    lines = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if not line.startswith("#"):
            break
        lines.append((i, line[1:].strip()))
    return lines


def header_commands(path: Path) -> list[Command]:
    cmds = []
    for i, line in header(path):
        # a command starts the line or follows a label ("Run: ...", "Same as: ..."); prose may name the tool too
        m = re.search(r"(?:^|:\s+)((?:[A-Z_]+=\S+ )*(?:iotfl-sim|python3 -m iotfl_sim\.cli) .*?)(?:\s{2,}\(.*)?$", line)
        if m:
            cmds.extend(parse_command(m.group(1), f"{path.name}:{i}"))
    return cmds


def header_variants(path: Path) -> list[tuple[str, ...]]:
    """Each run of consecutive ``--set X`` on a header line (quoted values kept whole) is one variant;
    lines holding a whole command are header_commands'."""
    text = "\n".join(t for _, t in header(path))
    lines = "\n".join(t for t in text.splitlines() if "iotfl-sim" not in t and "iotfl_sim.cli" not in t)
    variants = []
    for run in re.finditer(r"(?:--set[ \t]+(?:'[^']*'|[^\s`'|]+)[ \t]*)+", lines):
        sets = []
        for value in re.findall(r"--set\s+('[^']*'|[^\s`'|]+)", run.group(0)):
            sets.append(value[1:-1] if value.startswith("'") else value.rstrip(".,;)"))
        variants.append(tuple(sets))
    for needle, sets in PROSE_VARIANTS.get(path.name, []):
        assert needle in text, f"{path.name}: the header no longer says {needle!r}; update PROSE_VARIANTS"
        variants.append(tuple(sets))
    return list(dict.fromkeys(variants))


@pytest.fixture(autouse=True)
def data_root(monkeypatch):
    """Documented commands read datasets from $IOTFL_DATA: the offline copies."""
    monkeypatch.setenv("IOTFL_DATA", str(SHARED_DATA))


SCENARIO_FILES = sorted(SCENARIOS.glob("*.yaml"))
HEADER_COMMANDS = [c for p in SCENARIO_FILES for c in header_commands(p)]
VARIANTS = [(p, v) for p in SCENARIO_FILES for v in header_variants(p)]


# ---------------------------------------------------------------- running commands


def cli(argv: list[str]) -> tuple[int, str]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(argv)
    return rc, buf.getvalue()


def dataset_of(scenario: Path, sets: list[str]) -> str:
    return load_scenario(scenario, sets=sets).data.dataset


def missing_data(dataset: str) -> Path | None:
    sub = DATASET_DIRS.get(dataset)
    return None if sub is None or (SHARED_DATA / sub).exists() else SHARED_DATA / sub


def validate(scenario: Path, sets: list[str], capsys) -> None:
    """`iotfl-sim validate` with ``--set``s (system-only when the dataset is absent, so that a check of
    the data files cannot fail a test that is about the scenario)."""
    if missing_data(dataset_of(scenario, sets)) is not None:
        sets = [*sets, "numerics=none"]
    rc = main(["validate", str(scenario), *[a for s in sets for a in ("--set", s)]])
    assert rc == 0, capsys.readouterr().err


def run_scenario_cli(scenario: Path, sets: list[str], out: Path, monkeypatch, *, system_only: bool = False) -> Path:
    """`iotfl-sim run` with overrides into a fresh ``out``; a missing dataset makes it system-only and then
    skips with the reason. Returns the run folder."""
    monkeypatch.setenv("IOTFL_DATA", str(SHARED_DATA))
    absent = None if system_only else missing_data(dataset_of(scenario, sets))
    extra = ["numerics=none"] if system_only or absent is not None else []
    argv = ["run", str(scenario), *[a for s in [*sets, *extra] for a in ("--set", s)], "--out", str(out), "--quiet"]
    rc, printed = cli(argv)
    assert rc == 0, f"iotfl-sim {' '.join(argv)} failed"
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    assert f"run: {run}" in printed
    summary = json.loads((run / "summary.json").read_text())
    assert summary["rounds"] >= 1 and summary["tasks"] > 0
    if absent is not None:
        pytest.skip(f"ran system-only: dataset folder {absent} not present (set IOTFL_TEST_DATA)")
    return run


def run_overrides(scenario: Path, sets: list[str]) -> tuple[list[str], bool]:
    """(the overrides a documented `run` gets here, whether it runs system-only): a short scenario runs
    for real with its SHORT overrides (after the command's own sets), a paper-scale one one system-only
    round priced by FLOPs (its roofline trace of big models alone takes seconds)."""
    short = SHORT.get(scenario.name)
    if short is not None:
        return [*sets, *short], False
    return [*sets, "rounds=1", "fleet.cost_model=flops"], True


_RUNS: dict[str, Path] = {}


def readme_run(cmd: Command, tmp_path_factory, monkeypatch) -> Path:
    """Run a README (or scenario header) `run` command once per test session (plots reuse it)."""
    key = " ".join(cmd.argv)
    if key not in _RUNS:
        args = cmd.argv[1:]
        scenario = ROOT / args[0]
        sets = [args[i + 1] for i, a in enumerate(args) if a == "--set"]
        assert "--out" not in args or args[args.index("--out") + 1] == "runs/"  # replaced by a temporary folder
        sets, system_only = run_overrides(scenario, sets)
        _RUNS[key] = run_scenario_cli(scenario, sets, tmp_path_factory.mktemp("readme_run"), monkeypatch,
                                      system_only=system_only)
    return _RUNS[key]


def readme_runs_of(name: str, tmp_path_factory, monkeypatch) -> list[Path]:
    """The README's own runs of scenario ``name`` (all its quickstart runs for a generic placeholder)."""
    runs = [c for c in readme_commands() if c.argv[0] == "run" and c.argv[1] != "--resume"
            and not any("output.checkpoint" in a for a in c.argv)]  # fmt: skip
    mine = [c for c in runs if Path(c.argv[1]).stem == name] or [c for c in runs if "quickstart" in c.argv[1]]
    return [readme_run(c, tmp_path_factory, monkeypatch) for c in mine]


# ---------------------------------------------------------------- the README: a project folder
#
# The README's commands use paths relative to the repository root (scenarios/quickstart.yaml, runs/,
# method_vs_lr.study.yaml, studies/). They run in a temporary folder laid out the same way, whose
# scenarios/quickstart.yaml is the real one cut to 1 round, and whose study file is the README's own
# study block cut to 2 seeds and the first row of its zip (4 runs instead of 12, one worker).

STUDY_FILE = "method_vs_lr.study.yaml"  # the name the README's sweep command gives its study block


def readme_yaml_blocks() -> list[dict]:
    return [yaml.safe_load(b) for b in fenced(README.read_text(), "yaml")]


def readme_study() -> dict:
    (study,) = [b for b in readme_yaml_blocks() if "base" in b and "grid" in b]
    return study


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("project")
    (root / "scenarios").mkdir()
    quick = yaml.safe_load(QUICKSTART.read_text())
    (root / "scenarios" / "quickstart.yaml").write_text(yaml.safe_dump({**quick, "rounds": 1}, sort_keys=False))
    study = readme_study()
    assert study["base"] == "scenarios/quickstart.yaml" and "seed" in study["grid"]
    cheap = {**study, "grid": {**study["grid"], "seed": study["grid"]["seed"][:2]},
             "zip": {k: v[:1] for k, v in study.get("zip", {}).items()}, "workers": 1}  # fmt: skip
    (root / STUDY_FILE).write_text(yaml.safe_dump(cheap, sort_keys=False))
    return root


def readme_command(sub: str, first: str | None = None) -> Command:
    (cmd,) = [c for c in readme_commands() if c.argv[0] == sub and (first is None or c.argv[1:2] == [first])]
    return cmd


@pytest.fixture(scope="module")
def study_dir(project) -> Path:
    """The README's `iotfl-sim sweep` run in the project folder (one worker instead of --workers 4)."""
    args = readme_command("sweep").argv[1:]
    assert args[0] == STUDY_FILE, "the README's sweep no longer runs the study file this test writes"
    args = [str(project / args[0]), *args[1:]]
    args[args.index("--out") + 1] = str(project / args[args.index("--out") + 1])
    if "--workers" in args:
        args[args.index("--workers") + 1] = "1"
    rc, _ = cli(["sweep", *args, "--quiet"])
    assert rc == 0
    name = readme_study()["name"]
    return Path(args[args.index("--out") + 1]) / name


@pytest.fixture(scope="module")
def interrupted_run(project) -> tuple[Path, int]:
    """The README's checkpointed `run`, stopped by a Ctrl-C (a real SIGINT to this process, sent as the row
    of the round after its first checkpoint is written: the run finishes that round, checkpoints, writes
    an interrupted summary and exits 130): what `run --resume runs/quickstart-<timestamp>` continues."""
    from iotfl_sim import faults

    cmds = [c for c in readme_commands() if c.argv[0] == "run" and any("output.checkpoint" in a for a in c.argv)]
    assert len(cmds) == 1, "expected one README run command that sets output.checkpoint"
    args = cmds[0].argv
    every = int(next(a for a in args if "checkpoint.every_rounds=" in a).split("=")[1])
    rows = {"n": 0}

    def ctrl_c_at(point: str) -> None:
        if point == "row_written":
            rows["n"] += 1
            if rows["n"] == every + 1:
                os.kill(os.getpid(), signal.SIGINT)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(faults, "hit", ctrl_c_at)
        mp.chdir(project)
        rc, _ = cli([*args, "--set", f"rounds={every + 3}", "--out", "runs", "--quiet"])
    assert rc == 130
    (run,) = [q for q in (project / "runs").glob("quickstart-*") if (q / "checkpoints").is_dir()]
    assert json.loads((run / "summary.json").read_text())["status"] == "interrupted"
    return run, every + 3


def concrete(words: list[str], values: dict[str, str]) -> list[str]:
    """A synopsis made runnable: brackets and `...` dropped, each UPPERCASE placeholder replaced."""
    out = []
    for w in words:
        w = w.strip("[]")
        if w in ("", "..."):
            continue
        out.append(values[w] if re.fullmatch(r"[A-Z_]+", w) else w)
    return out


# ---------------------------------------------------------------- the README: YAML


def test_readme_has_the_examples_this_file_covers():
    text = README.read_text()
    assert len(fenced(text, "yaml")) >= 3
    subs = [c.argv[0] for c in readme_commands()]
    for needed in ("run", "plot", "validate", "profiles", "schema", "sweep"):
        assert needed in subs, f"no `iotfl-sim {needed}` example found in the README"


EXTRAS = {"tensorboard": "tensorboard", "wandb": "wandb"}  # output.<key> -> the package it needs


def readme_yaml_cases() -> list[tuple[str, dict, bool]]:
    """Each README YAML block: a whole scenario (the tour) or a study as they are, fragments merged."""
    cases = []
    for i, block in enumerate(fenced(README.read_text(), "yaml")):
        data = yaml.safe_load(block)
        whole = "name" in data
        cases.append((f"{i}-{next(iter(data))}", data if whole else merged_into_quickstart(block), whole))
    return cases


@pytest.mark.parametrize("key, data, whole", readme_yaml_cases(), ids=lambda x: x if isinstance(x, str) else "")
def test_readme_yaml_block_validates_and_runs(key, data, whole, tmp_path, project, monkeypatch, capsys):
    """Fragments merged into the quickstart run a round for real; the tour (a 100-round MNIST study over
    200 devices) runs a system-only round; the study block is read with every point validated, as
    `iotfl-sim sweep` does before running (the sweep itself is the README command's test)."""
    if "base" in data:  # a study file: its base path is relative to it
        from iotfl_sim.study import read_study

        path = project / f"readme_study_{key}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        study = read_study(path, check=True)
        assert len(study.points) == math.prod(map(len, data["grid"].values())) * len(next(iter(data["zip"].values())))
        return
    path = tmp_path / f"{key}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    needs = [pkg for k, pkg in EXTRAS.items() if data.get("output", {}).get(k)]
    missing = [pkg for pkg in needs if importlib.util.find_spec(pkg) is None]
    if missing:  # refused before any run, naming the package; run where it is installed
        rc = main(["validate", str(path)])
        err = capsys.readouterr().err
        assert rc == 2 and any(pkg in err for pkg in missing), err
        pytest.skip(f"validated the refusal only: {', '.join(missing)} not installed (pip install 'iotfl-sim[{missing[0]}]')")
    run_scenario_cli(path, ["rounds=1", FLOPS], tmp_path / "runs", monkeypatch, system_only=whole)  # run validates


def test_merge_helper_merges_mappings_and_replaces_lists():
    base = {"a": {"b": 1, "c": [1, 2]}, "d": 1}
    assert deep_merge(base, {"a": {"c": [3]}, "e": 2}) == {"a": {"b": 1, "c": [3]}, "d": 1, "e": 2}
    merged = merged_into_quickstart("executor: {kind: inline}\nfleet: {gateways: []}\n")
    assert merged["executor"] == {"kind": "inline"} and merged["fleet"]["groups"] and merged["name"] == "quickstart"


# The README's commands and its Python block share module-scoped work (the sweep's study, the checkpointed run
# stopped by Ctrl-C, the quickstart runs the plots draw): one xdist group runs them in one worker, which makes
# each once, instead of each worker making its own (``--dist loadgroup`` spreads the rest of the file).
README_GROUP = pytest.mark.xdist_group("readme_project")


@README_GROUP
def test_readme_python_api_example_runs(project, study_dir, monkeypatch, capsys):
    """The README's Python API block, as written, in the project folder (its sweep finds the study done)."""
    (code,) = fenced(README.read_text(), "python")
    monkeypatch.chdir(project)
    scope: dict = {}
    exec(compile(code, "README.md python block", "exec"), scope)  # noqa: S102 - our own README
    assert scope["res"].path.is_dir() and len(scope["study"].records) == 4
    assert scope["oom"] >= 0 and scope["run"].summary["status"] == "complete"


# ---------------------------------------------------------------- the README: shell commands

TOUR = "my_scenario.yaml"  # the README's placeholder for a scenario of one's own: its tour scenario


def tour_file(tmp_path: Path) -> Path:
    block = next(b for b in fenced(README.read_text(), "yaml") if b.lstrip().startswith("name:") and "base:" not in b)
    path = tmp_path / TOUR
    path.write_text(block)
    return path


# the README commands that train, sweep or draw (each a run, a study or figures: 15-70 s under load) are
# slow; validate, schema, profiles and data stay in the fast subset
HEAVY_SUBCOMMANDS = ("run", "sweep", "compare", "plot", "report")


@README_GROUP
@pytest.mark.parametrize(
    "cmd",
    [pytest.param(c, marks=pytest.mark.slow) if c.argv[0] in HEAVY_SUBCOMMANDS else c for c in readme_commands()],
    ids=lambda c: c.id,
)
def test_readme_command_works(cmd, tmp_path, tmp_path_factory, monkeypatch, capsys, request):
    sub, args = cmd.argv[0], list(cmd.argv[1:])
    placeholders = {"STUDY": "", "RUN": "", "DIR": str(tmp_path / "out"), "FILE": str(tmp_path / "report.html"),
                    "KEY": "algorithm.name", "NAME": "mnist"}  # fmt: skip
    if any(re.fullmatch(r"\[?[A-Z_]+\]?", a.strip("[]")) for a in args):  # a synopsis: fill it in
        placeholders["STUDY"] = str(request.getfixturevalue("study_dir"))
        placeholders["RUN"] = str(readme_runs_of("quickstart", tmp_path_factory, monkeypatch)[0])
        args = concrete(args, placeholders)
    build_parser().parse_args([sub, *args])  # exits on a flag the CLI does not have
    if sub == "validate":
        args = [str(tour_file(tmp_path)) if a == TOUR else str(ROOT / a) for a in args]
        rc, out = cli(["validate", *args])
        absent = missing_data(dataset_of(Path(args[0]), []))
        if absent is not None:  # validate checks the dataset files: refused, as documented
            assert rc == 2 and "data.dataset" in capsys.readouterr().err
            pytest.skip(f"validate refused as it should: dataset folder {absent} not present (set IOTFL_TEST_DATA)")
        assert rc == 0 and ": ok (" in out, capsys.readouterr().err
    elif sub == "schema":
        rc, out = cli(["schema"])
        assert rc == 0
        if cmd.stdout_to:
            (tmp_path / cmd.stdout_to).write_text(out)
        schema = json.loads(out)
        assert {"rounds", "fleet", "algorithm"} <= set(schema["properties"])
    elif sub == "profiles" and args[0] in ("list", "show"):
        rc, out = cli(["profiles", *args])
        assert rc == 0 and out.strip()
        if args[0] == "show":
            assert yaml.safe_load(out)["name"] == args[1]
        else:
            assert "jetson_nano" in out
    elif sub == "profiles" and args[0] == "measure":
        # the command as written, writing a real profile file; the micro-benchmarks themselves (20 s by
        # default) are test_profiles_measure's: here they return fixed figures at once
        from iotfl_sim.fl.cost import measure

        fixed = measure.Measured(2.0e10, 1.0e10, 5e-6, 0.05, ["fixed figures (test)"], {})
        monkeypatch.setattr(measure, "measure", lambda *a, **k: fixed)
        i = args.index("--out")
        target = tmp_path / args[i + 1]
        args[i + 1] = str(target)
        rc, out = cli(["profiles", *args])
        assert rc == 0 and target.is_file()
        assert load_scenario_profile(target)
    elif sub == "profiles" and args[0] in ("check", "fit"):
        # as written, on the measurements the README's own CSV block shows
        (block,) = fenced(README.read_text(), "csv")
        monkeypatch.chdir(tmp_path)
        Path(args[args.index("--against") + 1]).write_text(block)
        rc, out = cli(["profiles", *args])
        written = [args[i + 1] for i, a in enumerate(args) if a in ("--out", "--plot", "--csv")]
        assert rc == 0 and written and all(Path(w).is_file() for w in written), capsys.readouterr().err
        if args[0] == "fit":
            assert load_scenario_profile(Path(written[0]))
    elif sub == "run" and args[0] == "--resume":
        run, rounds = request.getfixturevalue("interrupted_run")
        assert args[1].startswith("runs/quickstart-<")
        rc, out = cli(["run", "--resume", str(run), "--quiet"])
        assert rc == 0
        summary = json.loads((run / "summary.json").read_text())
        assert summary["status"] == "complete" and summary["rounds"] == rounds
        assert len((run / "rounds.csv").read_text().splitlines()) == 1 + rounds
    elif sub == "run" and any("output.checkpoint" in a for a in args):
        run, _ = request.getfixturevalue("interrupted_run")
        assert any((run / "checkpoints").iterdir()), "interrupted after a checkpoint round, yet none was written"
    elif sub == "run":
        run = readme_run(cmd, tmp_path_factory, monkeypatch)
        assert (run / "rounds.csv").is_file() and (run / "scenario.resolved.yaml").is_file()
    elif sub == "sweep":
        study = request.getfixturevalue("study_dir")
        index = json.loads((study / "study.json").read_text())
        assert [r["status"] for r in index["runs"]] == ["done"] * 4
        assert (study / "index.csv").is_file() and (study / "study.resolved.yaml").is_file()
    elif sub == "compare":
        rc, out = cli(["compare", *args])
        assert rc == 0
        folder = Path(args[args.index("--out") + 1]) if "--out" in args else Path(args[0]) / "compare"
        text = (folder / "compare.md").read_text()
        assert "fedavg" in text and "heterofl" in text
        assert (folder / "accuracy.csv").is_file() and (folder / "time_to_accuracy.csv").is_file()
    elif sub == "report":
        rc, out = cli(["report", *args])
        assert rc == 0
        target = Path(args[args.index("--out") + 1]) if "--out" in args else Path(args[0]) / "report.html"
        assert target.read_text().lstrip().lower().startswith("<!doctype html")
    elif sub == "plot" and placeholders["STUDY"] and args[0] == placeholders["STUDY"]:
        rc, out = cli(["plot", *args])
        assert rc == 0
        folder = Path(args[args.index("--out") + 1]) if "--out" in args else Path(args[0]) / "plots"
        assert (folder / "accuracy_vs_time.png").is_file() and (folder / "accuracy_vs_time.svg").is_file()
    elif sub == "plot":
        runs = [a for a in args if a.startswith("runs/")]
        found: list[Path] = []
        for i, placeholder in enumerate(runs):
            name = placeholder.split("/", 1)[1].rsplit("-<", 1)[0]
            candidates = readme_runs_of(name, tmp_path_factory, monkeypatch)
            found.append(candidates[min(i, len(candidates) - 1)])
        if len(runs) > 1:
            assert len(set(found)) == len(runs), "the README overlays runs it does not show how to make"
        argv = ["plot", *map(str, found)]
        if "--out" in args:
            out_dir = tmp_path / args[args.index("--out") + 1]
            argv += ["--out", str(out_dir)]
        else:
            out_dir = found[0] / "plots"
        rc, out = cli(argv)
        assert rc == 0
        pngs = sorted(p.name for p in out_dir.glob("*.png"))
        assert "timeline.png" in pngs and "bytes_per_round.png" in pngs, pngs
    elif sub == "data" and args[0] == "download":
        # a data root where the dataset is already present (links to the offline copy): the command must
        # say so and fetch nothing, writing nothing into the shared copy
        import urllib.request

        src = SHARED_DATA / DATASET_DIRS[args[1]]
        if not src.exists():
            pytest.skip(f"dataset folder {src} not present (set IOTFL_TEST_DATA)")
        root = tmp_path / "datasets"
        root.mkdir()
        (root / src.name).symlink_to(src, target_is_directory=True)
        monkeypatch.setenv("IOTFL_DATA", str(root))

        def no_network(*a, **k):
            raise AssertionError("data download went to the network for a dataset that is present")

        monkeypatch.setattr(urllib.request, "urlopen", no_network)
        rc, out = cli(["data", *args])
        assert rc == 0 and "already present" in out
    else:  # pragma: no cover - a new kind of example: teach this test to run it
        pytest.fail(f"{cmd.where}: no rule to run `iotfl-sim {' '.join(cmd.argv)}`")


def load_scenario_profile(path: Path) -> bool:
    from iotfl_sim.scenario.profile import DeviceProfile

    return DeviceProfile.model_validate(yaml.safe_load(path.read_text())).name == path.stem


def inline_commands() -> list[str]:
    """`iotfl-sim ...` in inline code spans (a span may wrap across lines)."""
    return [" ".join(m.split()) for m in re.findall(r"(?<!`)`(iotfl-sim [^`]+)`(?!`)", README.read_text())]


@pytest.mark.parametrize("text", inline_commands())
def test_readme_inline_command_names_real_subcommands_and_flags(text):
    """Inline mentions and synopses (``[--flag X]`` optional, UPPERCASE a placeholder, `...` more of the
    same) name a real subcommand, action and flags of it."""
    words = [w.strip("[]") for w in shlex.split(text)[1:]]
    words = [w for w in words if w not in ("", "...")]
    if not words:
        return  # `iotfl-sim ...`: the tool in general
    subs = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert words[0] in subs.choices, text
    parser = subs.choices[words[0]]
    flags = {f for a in parser._actions for f in a.option_strings}
    for w in words[1:]:
        if w.startswith("--"):
            assert w in flags, f"{text}: {w} is not an option of `iotfl-sim {words[0]}`"
    positional = [a for a in parser._actions if not a.option_strings and a.choices]
    if positional and len(words) > 1 and not words[1].startswith("-"):
        assert words[1] in positional[0].choices, text


def test_readme_inline_set_examples_apply(tmp_path):
    """`--set ...` spans in the README's prose apply to the quickstart."""
    spans = re.findall(r"`(--set [^`]+)`", README.read_text())
    assert spans
    for span in spans:
        sets = re.findall(r"--set (\S+)", span)
        sc = load_scenario(QUICKSTART, sets=sets)
        for s in sets:
            key, value = s.split("=", 1)
            node = sc.model_dump()
            for part in key.split("."):
                node = node[int(part)] if part.isdigit() else node[part]
            assert node == yaml.safe_load(value), s


# ---------------------------------------------------------------- scenarios/: header commands and variants


def test_every_scenario_header_says_how_to_run_or_vary_it():
    described = {c.where.split(":")[0] for c in HEADER_COMMANDS} | {p.name for p, _ in VARIANTS}
    readme = README.read_text()
    for p in SCENARIO_FILES:
        assert p.name in described or f"scenarios/{p.name}" in readme or p.stem in readme, p.name


@pytest.mark.parametrize("cmd", HEADER_COMMANDS, ids=lambda c: c.id)
def test_scenario_header_command_works(cmd, tmp_path_factory, monkeypatch, capsys):
    assert cmd.argv[0] == "run", cmd
    build_parser().parse_args(cmd.argv)
    args = cmd.argv[1:]
    scenario = ROOT / args[0]
    assert scenario.is_file(), f"{cmd.where}: {args[0]} does not exist"
    sets = [args[i + 1] for i, a in enumerate(args) if a == "--set"]
    if "IOTFL_DATA" in cmd.env:  # the documented data root (or a /path/to placeholder) is where ours is
        assert cmd.env["IOTFL_DATA"] in ("../shared/datasets", "/path/to/datasets"), cmd.env
    if scenario.name not in SHORT and not sets:
        return  # the file as shipped: test_scenarios_shipped validates it and runs its system-only round
    # `run` makes every check `validate` makes before its first round: no separate validate here. The same
    # command written in two headers (heterofl_iot_budget.yaml's and _random.yaml's) or in the README (the
    # quickstart's) runs once in this worker: readme_run's runs, with the same overrides
    readme_run(cmd, tmp_path_factory, monkeypatch)


def variant_id(x) -> str:
    return x.name if isinstance(x, Path) else " ".join(x)[:60]


@pytest.mark.parametrize("path, sets", VARIANTS, ids=variant_id)
def test_scenario_header_variant_loads(path, sets):
    """Every variant a header shows loads (schema, types, profiles); the full tier's test below also runs it."""
    load_scenario(path, sets=list(sets))


@pytest.mark.parametrize("path, sets", VARIANTS, ids=variant_id)
def test_scenario_header_variant_works(path, sets, tmp_path, monkeypatch, capsys):
    sets = list(sets)
    reason = VALIDATE_ONLY.get((path.name, tuple(sets)))
    if reason is not None:  # the schema, types and profiles (validate's method set-up is the slow part)
        load_scenario(path, sets=sets)
        pytest.skip(f"checked by load_scenario only: {reason}")
    if path.name in VALIDATE_VARIANTS_ONLY:
        load_scenario(path, sets=sets)
        pytest.skip("checked by load_scenario only: the same header's variants are validated and run on flexfl_conf2.yaml")
    if path.name not in SHORT and not any(s.startswith(("algorithm", "model")) for s in sets):
        # data.* and numerics changes do not change a system-only round: test_scenarios_shipped's round is it
        validate(path, sets, capsys)
        return
    run_sets, system_only = run_overrides(path, sets)
    run_scenario_cli(path, run_sets, tmp_path / "runs", monkeypatch, system_only=system_only)


STUDY_FILES = sorted((SCENARIOS / "studies").glob("*.yaml"))


@pytest.mark.parametrize("cmd", [c for p in STUDY_FILES for c in header_commands(p)], ids=lambda c: c.id)
def test_ready_study_header_command_names_real_files_and_flags(cmd):
    """scenarios/studies/: their header commands (sweep, compare, report) parse and name files that exist;
    the study's 33 runs are not run here (test_ready_study validates every point)."""
    build_parser().parse_args(cmd.argv)
    if cmd.argv[0] == "sweep":
        assert (ROOT / cmd.argv[1]).is_file(), cmd.argv[1]
        assert "IOTFL_DATA" not in cmd.env or cmd.env["IOTFL_DATA"] == "../shared/datasets"
    else:  # compare / report read the folder the sweep writes: <--out>/<name>
        source = SCENARIOS / "studies" / cmd.where.rsplit(":", 1)[0]  # the study file the command is in
        sweep = next(c for c in header_commands(source) if c.argv[0] == "sweep")
        out = sweep.argv[sweep.argv.index("--out") + 1]
        name = yaml.safe_load((ROOT / sweep.argv[1]).read_text())["name"]
        assert cmd.argv[1] == f"{out}/{name}", cmd.argv


@pytest.mark.parametrize("variant", ["random", "paced"])
def test_heterofl_iot_budget_variant_is_the_documented_override(variant):
    """heterofl_iot_budget_<variant>.yaml says it is heterofl_iot_budget.yaml with --set algorithm.selection=<variant>."""
    (cmd,) = header_commands(SCENARIOS / f"heterofl_iot_budget_{variant}.yaml")
    args = cmd.argv[1:]
    sets = [args[i + 1] for i, a in enumerate(args) if a == "--set"]
    assert sets == [f"algorithm.selection={variant}"]
    base = load_scenario(ROOT / args[0], sets=sets)
    ours = load_scenario(SCENARIOS / f"heterofl_iot_budget_{variant}.yaml")
    a, b = (resolved_dict(s, resolve_groups(s)) for s in (base, ours))
    a.pop("name"), b.pop("name")
    a.pop("description", None), b.pop("description", None)
    assert a == b
