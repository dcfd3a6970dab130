"""The bad-input corpus: every malformed file in tests/bad_inputs/ is refused with ONE clear line.

Each scenario in the corpus starts with a comment ``# expect: a | b | c``: substrings the error must
contain (the YAML path or the file and line, what is wrong, and the fix). A second comment
``# needs: ...`` lists what a case needs: ``data`` the offline datasets (skipped where there are none),
``flower`` Flower installed (the flower extra) and ``no-flower`` Flower absent (the missing extra's error, which CI
gets), ``run`` a run rather than ``validate`` (the app's own code fails, which only running it shows).
Malformed device profiles live in ``bad_inputs/device_profiles/`` (beside the scenarios, where the
loader looks) and are reached through the ``profile_*.yaml`` scenarios; broken availability traces in
``bad_inputs/traces/``. Files with no readable first line carry their expectations in ``SIDECAR``.

Every case asserts: exit status 2, exactly one line on stderr starting with ``error: `` and ending
with a newline, nothing on stdout, no traceback, and each expected substring in that line.

Cases that are paths or large files are made by the tests themselves, in ``tmp_path``: paths the operating
system refuses on every command (a file where a folder goes, a symbolic link to nothing or round a loop, a
lock file that is a folder), damaged files the tool reads back (a study's index, a run's checkpoint
``meta.json`` and ``summary.json`` on ``--resume``, a CSV trace field over 128 KB) and a FedScale pickle
bomb, refused in a real process under a memory limit. Those also assert that no file changed.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from iotfl_sim.cli import main
from iotfl_sim.output.migrations import FORMAT
from iotfl_sim.scenario import safe_yaml

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path(__file__).resolve().parent / "bad_inputs"
SCENARIOS = sorted(CORPUS.glob("*.yaml"))
PROFILES = sorted((CORPUS / "device_profiles").glob("*.yaml"))
TRACES = sorted((CORPUS / "traces").iterdir())
SIDECAR = {"utf16.yaml": ["utf16.yaml", "UTF-16 text", "save the scenario file as UTF-8"]}

# validate used to say "ok" to these, and run refused them (or crashed) before its first round
RUN_ONLY_BEFORE = [
    "fleet_all_counts_zero.yaml",
    "data_root_missing.yaml",
    "data_files_missing.yaml",
    "natural_on_digits.yaml",
    "iid_more_devices_than_samples.yaml",
    "shards_more_classes_than_data.yaml",
    "fedx_proxy_classes_all.yaml",
    "flexfl_apoz_without_proxy.yaml",
    "flexfl_proxy_takes_everything.yaml",
    "infeasible_fleet.yaml",
    "scalefl_wrong_family.yaml",
    "cnn2_on_8px_digits.yaml",
    "adaptivefl_start_layer_out_of_range.yaml",
    "trace_missing_file.yaml",
    "trace_wrong_columns.yaml",
    "trace_fedscale_code.yaml",
]


def expectations(path: Path) -> tuple[list[str], set[str]]:
    """(substrings the error must contain, needs) from the file's first comment lines or SIDECAR."""
    if path.name in SIDECAR:
        return SIDECAR[path.name], set()
    head = path.read_bytes().split(b"\n", 2)
    first = head[0].decode("ascii")
    assert first.startswith("# expect: "), f"{path.name}: first line must be '# expect: ...'"
    expect = [x.strip() for x in first.removeprefix("# expect: ").split("|") if x.strip()]
    second = head[1].decode("ascii", "replace") if len(head) > 1 else ""
    needs = {x.strip() for x in second.removeprefix("# needs: ").split(",")} if second.startswith("# needs: ") else set()
    return expect, needs


def one_error_line(code: int, out: str, err: str) -> str:
    assert code == 2, (code, err)
    assert out == ""
    assert "Traceback" not in err
    assert err.endswith("\n"), repr(err)
    lines = err.splitlines()
    # what a run says before it fails (validation's notes and warnings, e.g. the memory each submodel needs) may
    # precede the error; the error itself is one line, and the last
    *before, last = lines
    assert all(x.startswith(("note: ", "warning: ")) for x in before), err
    assert last.startswith("error: "), err
    return last


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    monkeypatch.delenv("IOTFL_PROFILES", raising=False)




def test_the_corpus_covers_what_the_issue_lists():
    assert len(SCENARIOS) + len(PROFILES) + len(TRACES) >= 60
    names = {p.name for p in SCENARIOS}
    for needed in [
        "alias_bomb.yaml", "latin1_description.yaml", "binary_nul.yaml", "duplicate_top_key.yaml",
        "memory_sigma2_nan.yaml", "rounds_1e30_integer.yaml", "fleet_all_counts_zero.yaml",
        "dirichlet_alpha_zero.yaml", "unknown_availability_kind.yaml", "name_escapes_parent.yaml",
        "trace_wrong_columns.yaml", "natural_on_digits.yaml", "data_root_missing.yaml", "syntax_tab_indent.yaml",
    ]:  # fmt: skip
        assert needed in names
    # every malformed profile is reached by a scenario
    for p in PROFILES:
        assert f"profile_{p.stem}.yaml" in names, p.name


def flower_installed() -> bool:
    from importlib.util import find_spec

    return find_spec("flwr") is not None


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.name)
def test_validate_refuses_with_one_clear_line(path, capsys, request, tmp_path):
    expect, needs = expectations(path)
    if "data" in needs and request.getfixturevalue("data_root") is None:
        pytest.skip("needs the offline datasets (IOTFL_DATA or shared/datasets)")
    if "flower" in needs and not flower_installed():
        pytest.skip("needs Flower (pip install 'iotfl-sim[flower]')")
    if "no-flower" in needs and flower_installed():
        pytest.skip("the missing flower extra's error: Flower is installed here (test_flower.py fakes its absence)")
    run = "run" in needs
    code = main(["run", str(path), "--out", str(tmp_path / "runs"), "--quiet"] if run else ["validate", str(path)])
    out, err = capsys.readouterr()
    line = one_error_line(code, out if not run else "", err)
    for needle in expect:
        assert needle in line, (needle, line)
    # the line names the file the problem is in: the scenario, or the profile it uses (a run's error names the
    # field and where in the run)
    assert run or path.name in line or "device_profiles/" in line, line


@pytest.mark.parametrize("name", RUN_ONLY_BEFORE)
def test_validate_and_run_refuse_alike(name, capsys, tmp_path):
    """validate runs every check that run makes before training: same refusal, same words, no run folder."""
    path = CORPUS / name
    code = main(["validate", str(path)])
    validate_line = one_error_line(code, *capsys.readouterr())
    out = tmp_path / "runs"
    code = main(["run", str(path), "--out", str(out), "--quiet"])
    run_line = one_error_line(code, *capsys.readouterr())
    assert run_line == validate_line
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize(
    "name", ["alias_bomb.yaml", "lr_nan.yaml", "name_escapes_parent.yaml", "duplicate_top_key.yaml", "binary_nul.yaml"]
)
def test_run_refuses_too(name, capsys, tmp_path):
    expect, _ = expectations(CORPUS / name)
    code = main(["run", str(CORPUS / name), "--out", str(tmp_path / "runs"), "--quiet"])
    line = one_error_line(code, *capsys.readouterr())
    assert all(x in line for x in expect), line
    assert not (tmp_path / "runs").exists()


def test_run_refuses_an_out_that_is_a_file(capsys, tmp_path, good_scenario):
    (tmp_path / "taken").write_text("a file")
    code = main(["run", good_scenario, "--out", str(tmp_path / "taken" / "runs"), "--quiet"])
    line = one_error_line(code, *capsys.readouterr())
    assert "--out" in line and "is a file, not a folder" in line


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.name)
def test_profiles_show_names_the_malformed_file(path, capsys, monkeypatch):
    """The same profile files, found through IOTFL_PROFILES by `profiles show`."""
    monkeypatch.setenv("IOTFL_PROFILES", str(path.parent))
    code = main(["profiles", "show", path.stem])
    line = one_error_line(code, *capsys.readouterr())
    assert str(path) in line


def test_profiles_list_names_the_malformed_file(capsys, monkeypatch, tmp_path):
    (tmp_path / "broken.yaml").write_bytes((CORPUS / "device_profiles" / "inf_flops.yaml").read_bytes())
    monkeypatch.setenv("IOTFL_PROFILES", str(tmp_path))
    line = one_error_line(main(["profiles", "list"]), *capsys.readouterr())
    assert str(tmp_path / "broken.yaml") in line


def test_malformed_profile_through_iotfl_profiles(capsys, monkeypatch, tmp_path):
    (tmp_path / "mine.yaml").write_bytes((CORPUS / "device_profiles" / "nan_free_mb.yaml").read_bytes())
    monkeypatch.setenv("IOTFL_PROFILES", str(tmp_path))
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "name: s\nrounds: 1\nfleet: {groups: [{profile: mine, count: 2}]}\ndata: {dataset: digits}\n"
        "algorithm: fedavg\n"
    )
    line = one_error_line(main(["validate", str(scenario)]), *capsys.readouterr())
    assert f"{tmp_path / 'mine.yaml'}:" in line and "memory.free_mb" in line and "finite number" in line


def test_a_file_over_the_size_limit_is_refused_before_parsing(capsys, tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("name: big\ndescription: '" + "x" * safe_yaml.MAX_BYTES + "'\n")
    line = one_error_line(main(["validate", str(big)]), *capsys.readouterr())
    assert "larger than 1 MB" in line and "big.yaml" in line


@pytest.mark.parametrize(
    "what, path",
    [("a folder", "folder"), ("a missing file", "missing.yaml"), ("a device", "/dev/null")],
)
def test_scenario_path_that_is_not_a_scenario_file(what, path, capsys, tmp_path):
    (tmp_path / "folder").mkdir()
    target = path if path.startswith("/") else str(tmp_path / path)
    line = one_error_line(main(["validate", target]), *capsys.readouterr())
    assert target in line


# ---------------------------------------------------------------- --set

SET_CASES = [
    (["rounds.x=1"], ["--set rounds.x", "rounds is 2, not a mapping or a list"]),
    (["fleet.groups.5.count=1"], ["--set fleet.groups.5.count", "index 5 is out of range", "use an index 0..0"]),
    (["fleet.groups.first.count=1"], ["--set fleet.groups.first.count", "'first' is not an index"]),
    (["local.lr=.nan"], ["--set local.lr", "local.lr", "finite number"]),
    (["rounds=0"], ["--set rounds", "rounds", "greater than or equal to 1"]),
    (["rounds=1e30"], ["--set rounds", "rounds", "integer", "'1e30'"]),
    (["rounds"], ["--set 'rounds'", "write it as key.path=value"]),
    (["fleet..count=1"], ["empty key", "write it as key.path=value"]),
    (["algorithm.name=fedavgg"], ["algorithm.name", "unknown algorithm 'fedavgg'", "did you mean 'fedavg'"]),
    (["name=../../etc"], ["--set name", "is not a plain name"]),
    (["description=&a [1, *a]"], ["--set description", "recursive"]),
    (["description=[1, 2"], ["--set description", "not valid YAML"]),
    (["seed={a: 1, a: 2}"], ["--set seed", "appears twice"]),
]


@pytest.fixture
def good_scenario(tmp_path) -> str:
    path = tmp_path / "good.yaml"
    path.write_text(
        "name: good\nrounds: 2\nfleet: {groups: [{profile: raspberry_pi_4b, count: 4}]}\ndata: {dataset: digits}\n"
        "algorithm: {name: fedavg}\n"
    )
    return str(path)


def test_the_good_scenario_is_good(good_scenario, capsys):
    assert main(["validate", good_scenario]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("sets, expect", SET_CASES, ids=lambda x: x[0] if isinstance(x, list) else None)
def test_bad_set_options(sets, expect, capsys, good_scenario):
    args = ["validate", good_scenario]
    for s in sets:
        args += ["--set", s]
    line = one_error_line(main(args), *capsys.readouterr())
    for needle in expect:
        assert needle in line, (needle, line)


def test_set_alias_bomb_is_refused(capsys, good_scenario):
    bomb = "[" + ", ".join(["&a0 [x, x, x, x, x, x, x, x, x, x]"] + [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 8)]) + "]"
    line = one_error_line(
        main(["validate", good_scenario, "--set", f"description={bomb}"]),
        *capsys.readouterr(),
    )
    assert "--set description" in line and "alias bomb" in line


# ---------------------------------------------------------------- plot


def test_plot_on_folders_that_are_not_runs(capsys, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "rounds.csv").write_text("this is not,a run\n1,2\n")
    binary = tmp_path / "binary"
    binary.mkdir()
    (binary / "rounds.csv").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00\x00")
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    for target, needle in [
        (empty, "neither a run folder (no rounds.csv) nor a study folder"),
        (garbage, "no 'round' column"),
        (binary, "not a readable CSV file"),
        (a_file, "is not a directory"),
    ]:
        line = one_error_line(main(["plot", str(target), "--out", str(tmp_path / "plots")]), *capsys.readouterr())
        assert needle in line and str(target) in line, line
    assert not (tmp_path / "plots").exists() or not any((tmp_path / "plots").iterdir())


def test_plot_on_a_folder_that_is_not_a_run_says_a_study_works_too_and_names_what_is_inside(tmp_path, capsys):
    """The project folder or runs/ given to `plot`: one line saying a study folder would do too, and the command
    for the run (or, first, the study) one or two levels down; nothing written."""
    from study_fixtures import make_study, write_run

    proj = tmp_path / "proj"
    run = write_run(proj / "runs" / "quickstart-20260101-000000", "fedavg", 0, [0.3, 0.5])
    (proj / "empty").mkdir()

    def plot(path: Path) -> str:
        before = snapshot(tmp_path)
        line = one_error_line(main(["plot", str(path)]), *capsys.readouterr())
        assert f"error: {path}: neither a run folder (no rounds.csv) nor a study folder" in line, line
        assert snapshot(tmp_path) == before
        return line

    assert plot(proj).endswith(f"; inside it is a run: iotfl-sim plot {run}")  # two levels down
    assert plot(proj / "runs").endswith(f"; inside it is a run: iotfl-sim plot {run}")  # one level down
    assert plot(proj / "empty").endswith("; give a folder that `iotfl-sim run` or `iotfl-sim sweep` printed")
    write_run(proj / "runs" / "a-run", "fedavg", 1, [0.3, 0.5])
    assert plot(proj / "runs").endswith(f"; inside it are runs, the first: iotfl-sim plot {proj / 'runs' / 'a-run'}")
    study = make_study(proj / "studies" / "my study")
    assert plot(proj).endswith(f"; inside it is a study: iotfl-sim plot '{study}'")  # a study first, quoted
    (run / "rounds.csv").rename(proj / "elsewhere.csv")  # a run folder that lost its rounds.csv: said the same way
    assert "nor a study folder" in plot(run)


def test_the_search_for_runs_inside_a_folder_is_bounded(tmp_path, monkeypatch):
    """Two levels down at most, and at most MAX_ENTRIES entries read in all: a huge folder (a disk) is not walked."""
    from study_fixtures import write_run

    import analysis.folder_hint as fh

    write_run(tmp_path / "a" / "b" / "deep-run", "fedavg", 0, [0.3])  # three levels down: not looked for
    assert fh.runs_and_studies_inside(tmp_path) == []
    for i in range(30):  # 30 folders, each with a run inside: 60 entries to read
        write_run(tmp_path / f"d{i:02}" / "run", "fedavg", 0, [0.3])
    assert len(fh.runs_and_studies_inside(tmp_path)) == fh.MAX_FOUND
    monkeypatch.setattr(fh, "MAX_ENTRIES", 31)  # the first level (31 folders) uses the whole budget
    assert fh.runs_and_studies_inside(tmp_path) == []


# ---------------------------------------------------------------- the real entry point


def _cli(args: list[str], limit_bytes: int | None = None, timeout: float = 60.0) -> subprocess.CompletedProcess:
    def limit() -> None:
        if limit_bytes is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=timeout, preexec_fn=limit, env=env
    )


BOMB_LIMIT = 512 * 1024**2  # refusing a bad file takes ~50 MB of address space; the bomb would take > 10 GB


def test_the_memory_limit_of_the_subprocess_bites():
    """So that the alias-bomb test below cannot pass by accident: a child asking for 1 GB is refused."""
    proc = _cli(["-c", "b = bytearray(1024**3)"], BOMB_LIMIT)
    assert proc.returncode != 0 and "MemoryError" in proc.stderr


def test_alias_bomb_in_a_real_process_under_a_memory_limit():
    proc = _cli(["-m", "iotfl_sim.cli", "validate", str(CORPUS / "alias_bomb.yaml")], BOMB_LIMIT, timeout=30)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.endswith("\n") and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "alias bomb" in proc.stderr


@pytest.mark.parametrize("name", ["latin1_description.yaml", "binary_nul.yaml", "utf16.yaml", "python_object_tag.yaml"])
def test_undecodable_files_in_a_real_process(name):
    expect, _ = expectations(CORPUS / name)
    proc = _cli(["-m", "iotfl_sim.cli", "validate", str(CORPUS / name)], BOMB_LIMIT, timeout=30)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.startswith("error: ") and proc.stderr.endswith("\n") and proc.stderr.count("\n") == 1
    assert "Traceback" not in proc.stderr
    assert all(x in proc.stderr for x in expect), proc.stderr


def test_set_error_in_a_real_process(good_scenario):
    proc = _cli(["-m", "iotfl_sim.cli", "validate", good_scenario, "--set", "rounds=.inf"])
    assert proc.returncode == 2 and proc.stderr.endswith("\n") and "Traceback" not in proc.stderr
    assert "--set rounds" in proc.stderr and "finite number" in proc.stderr


# ---------------------------------------------------------------- operating-system errors on paths
# A path the system refuses (a file where a folder goes, a symbolic link to nothing, a loop of links, a lock
# file that is a folder) is one line naming the path and the fix, whatever the command; nothing is written.


def snapshot(root: Path) -> dict[str, str]:
    """Every entry under ``root``: file contents, symbolic link targets, folders (links are not followed)."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        out[rel] = f"-> {os.readlink(p)}" if p.is_symlink() else ("dir" if p.is_dir() else p.read_bytes().hex())
    return out


ODD = ["a_file", "dangling", "loop"]


@pytest.fixture
def odd(tmp_path) -> Path:
    """``a_file`` (a file where a folder goes), ``dangling`` (a symbolic link to nothing), ``loop`` (a link
    to itself), and a tiny synthetic study ``demo`` to read."""
    from study_fixtures import make_study

    (tmp_path / "a_file").write_text("mine\n")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    make_study(tmp_path / "demo")
    return tmp_path


def _odd_line(args: list[str], capsys, root: Path, name: str) -> str:
    before = snapshot(root)
    line = one_error_line(main(args), *capsys.readouterr())
    assert str(root / name) in line, line
    fix = "symbolic link" if name != "a_file" else "file"
    assert fix in line and ("give another" in line or "give a folder" in line), line
    assert snapshot(root) == before  # nothing written, the odd path itself untouched
    return line


@pytest.mark.parametrize("name", ODD)
@pytest.mark.parametrize("command", ["run", "sweep", "compare", "plot", "report", "data download"])
def test_an_output_path_the_system_refuses(command, name, odd, good_scenario, capsys, monkeypatch):
    monkeypatch.setenv("IOTFL_DATA_MIRROR", "http://127.0.0.1:9")  # never the network: refused before it
    out = str(odd / name)
    study = odd / "study.yaml"
    study.write_text(f"name: st\nbase: {good_scenario}\ngrid: {{seed: [0]}}\n")
    args = {
        "run": ["run", good_scenario, "--out", out, "--quiet"],
        "sweep": ["sweep", str(study), "--out", out, "--quiet"],
        "compare": ["compare", str(odd / "demo"), "--out", out],
        "plot": ["plot", str(odd / "demo"), "--out", out],
        "report": ["report", str(odd / "demo"), "--out", f"{out}/report.html"],
        "data download": ["data", "download", "mnist", "--root", out],
    }[command]
    if command == "data download" and name == "dangling":
        pytest.skip("a link to a missing folder is a data root to make: the download follows it")
    _odd_line(args, capsys, odd, name)


@pytest.mark.parametrize("name", ["dangling", "loop"])
@pytest.mark.parametrize("command", ["validate", "run", "run --resume", "sweep", "compare", "plot", "report"])
def test_an_input_path_that_is_a_broken_symlink(command, name, odd, capsys):
    path = str(odd / name)
    args = {"run --resume": ["run", "--resume", path, "--quiet"]}.get(command, [command, path])
    before = snapshot(odd)
    line = one_error_line(main(args), *capsys.readouterr())
    assert path in line, line
    assert snapshot(odd) == before


def test_a_lock_file_that_is_a_folder(tmp_path, good_scenario, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "scenario.resolved.yaml").write_text(Path(good_scenario).read_text())
    (run / ".lock").mkdir()
    study = tmp_path / "study.yaml"
    study.write_text(f"name: st\nbase: {good_scenario}\ngrid: {{seed: [0]}}\n")
    (tmp_path / "studies" / "st" / ".lock").mkdir(parents=True)
    before = snapshot(tmp_path)
    for args, lock in [
        (["run", "--resume", str(run), "--quiet"], run / ".lock"),
        (["sweep", str(study), "--out", str(tmp_path / "studies"), "--quiet"], tmp_path / "studies" / "st" / ".lock"),
    ]:
        line = one_error_line(main(args), *capsys.readouterr())
        assert f"{lock}: cannot open the lock file" in line and "move it away" in line, line
    assert snapshot(tmp_path) == before


def test_only_os_errors_become_one_line(monkeypatch, capsys):
    """A bug (any other exception) still ends in its traceback: main() translates OSError and nothing else."""
    import iotfl_sim.cli as cli

    def boom(args):
        raise KeyError("a bug")

    monkeypatch.setattr(cli, "cmd_schema", boom)
    with pytest.raises(KeyError):
        main(["schema"])


# ---------------------------------------------------------------- files the tool reads back

DEEP = "[" * 100_000 + "]" * 100_000  # RecursionError in Python's JSON decoder, in a fraction of a second


def _study_edit(name: str, data: str | bytes):
    def edit(study: Path) -> None:
        if name == "index.csv":
            (study / "study.json").unlink()  # index.csv is read only where there is no study.json
        path = study / name
        path.write_bytes(data if isinstance(data, bytes) else data.encode())

    return edit


STUDY_CASES = {
    "study_json_invalid": (_study_edit("study.json", "{not json"), ["study.json", "not readable JSON"]),
    "study_json_binary": (_study_edit("study.json", b"\x89PNG\r\n\x1a\n\xff\xfe\x00"), ["study.json", "not readable JSON"]),
    "study_json_deep": (_study_edit("study.json", DEEP), ["study.json", "nested"]),
    "study_json_deep_record": (
        _study_edit("study.json", '{"runs": [{"id": "a", "overrides": ' + "[" * 200 + "]" * 200 + "}]}"),
        ["study.json", "nested more than 100 levels"],
    ),
    "study_json_no_runs": (_study_edit("study.json", '{"name": "x"}'), ["study.json", "'runs' list"]),
    "study_json_base_not_object": (
        _study_edit("study.json", '{"name": "x", "base": [1, 2], "runs": []}'), ["study.json", "'base' is list, expected an object"]
    ),
    "study_json_grid_not_object": (
        _study_edit("study.json", '{"name": "x", "grid": "seed", "runs": []}'), ["study.json", "'grid' is str, expected an object"]
    ),
    "study_json_zip_values_not_a_list": (
        _study_edit("study.json", '{"name": "x", "zip": {"local.lr": 0.1}, "runs": []}'),
        ["study.json", "'zip.local.lr' is float, expected a list of values"],
    ),
    "index_csv_ragged": (
        _study_edit("index.csv", "id,overrides,status,run_dir\nfedavg-s0,{},done,runs/fedavg-s0,extra\n"),
        ["index.csv", "line 2 has 5 cells, the header 4"],
    ),
    "index_csv_short_row": (_study_edit("index.csv", "id,overrides,status,run_dir\nfedavg-s0\n"), ["index.csv", "line 2 has 1 cells"]),
    "index_csv_binary": (_study_edit("index.csv", b"\x89PNG\r\n\x1a\n\xff\xfe\x00\x00"), ["index.csv", "not a readable CSV"]),
    "index_csv_field_over_128k": (
        _study_edit("index.csv", 'id,overrides,status,run_dir\nfedavg-s0,"' + "x" * 200_000 + '",done,runs/fedavg-s0\n'),
        ["index.csv", "field larger than field limit"],
    ),
}


@pytest.mark.parametrize("case", list(STUDY_CASES))
@pytest.mark.parametrize("command", ["compare", "plot", "report"])
def test_a_corrupt_study_index(case, command, tmp_path, capsys):
    from study_fixtures import make_study

    study = make_study(tmp_path / "demo")
    edit, needles = STUDY_CASES[case]
    edit(study)
    before = snapshot(tmp_path)
    line = one_error_line(main([command, str(study)]), *capsys.readouterr())
    assert all(n in line for n in needles), line
    assert "iotfl-sim sweep" in line  # the fix: the sweep rewrites the index
    assert snapshot(tmp_path) == before


def test_a_study_still_compares_around_a_corrupt_run_file(tmp_path, capsys):
    """A run's summary.json nested thousands deep, or its scenario.resolved.yaml nested deeper than Python
    recurses, is read as missing (a half-written file must not stop the study's tables): no traceback."""
    from study_fixtures import make_study

    study = make_study(tmp_path / "demo")
    (study / "runs" / "fedavg-s0" / "summary.json").write_text(DEEP)
    (study / "runs" / "fedavg-s1" / "scenario.resolved.yaml").write_text("x: " + "[" * 1500 + "]" * 1500 + "\n")
    (study / "runs" / "fedavg-s2" / "events.jsonl").write_text('{"device": 1, "x": ' + DEEP + "}\n")
    assert main(["compare", str(study), "--out", str(tmp_path / "cmp")]) == 0, capsys.readouterr().err
    assert "fedavg" in capsys.readouterr().out


@pytest.fixture(scope="module")
def resumable(tmp_path_factory) -> Path:
    """A run folder killed after its round-1 checkpoint (its summary.json removed): system-only, 2 rounds."""
    import yaml
    from conftest import base_scenario

    tmp = tmp_path_factory.mktemp("resumable")
    sc = base_scenario(numerics="none", output={"progress": False, "checkpoint": {"every_rounds": 1, "every_s": None}})
    (tmp / "s.yaml").write_text(yaml.safe_dump(sc))
    assert main(["run", str(tmp / "s.yaml"), "--out", str(tmp / "runs"), "--quiet"]) == 0
    (run,) = (tmp / "runs").iterdir()
    (run / "summary.json").unlink()
    assert (run / "checkpoints" / "round-000001" / "meta.json").is_file()
    return run


def _meta(change):
    def edit(run: Path) -> None:
        path = run / "checkpoints" / "round-000001" / "meta.json"
        meta = json.loads(path.read_text())
        out = change(meta)
        path.write_text(out if isinstance(out, str) else json.dumps(meta))

    return edit


RESUME_CASES = {
    "meta_invalid": (_meta(lambda m: "{"), ["meta.json", "not readable JSON", "remove this checkpoint folder"]),
    "meta_deep": (_meta(lambda m: DEEP), ["meta.json", "nested more than 100 levels"]),
    "meta_a_list": (_meta(lambda m: "[1]"), ["meta.json", "a JSON list, not an object"]),
    "meta_no_rows": (_meta(lambda m: m.pop("rows")), ["meta.json", "no 'rows'"]),
    "meta_no_host": (_meta(lambda m: m.pop("host")), ["meta.json", "no 'host'"]),
    "meta_tape_not_files": (_meta(lambda m: m.update(tape=[1, 2])), ["meta.json", "'tape' is not a list of tape files"]),
    "meta_row_nested": (
        _meta(lambda m: m["rows"][0].update(x=json.loads("[" * 50 + "]" * 50))),
        ["meta.json", "'rows' is not a list of metric rows"],
    ),
    "meta_round_not_its_folder": (_meta(lambda m: m.update(round=7)), ["meta.json", "round 7, not 1"]),
    # a checkpoint of a newer release (output.migrations): which format wrote it, which ones this release reads
    "meta_newer_format": (
        _meta(lambda m: m.update(format=FORMAT + 1)),
        ["meta.json", f"checkpoint format {FORMAT + 1}, written by a newer iotfl-sim", f"reads formats 1 to {FORMAT}"],
    ),
    "meta_format_not_a_number": (_meta(lambda m: m.update(format="2")), ["meta.json", "format '2', not a checkpoint format number"]),
    "meta_step_not_a_count": (_meta(lambda m: m.update(step="x")), ["meta.json", "'step' is not a step count"]),
    "meta_step_in_a_round_run": (
        _meta(lambda m: m.update(step=3)),
        ["checkpoint", "between two versions of an asynchronous run", "start a new run"],
    ),
    "meta_negative_offset": (
        _meta(lambda m: m["offsets"].update({"rounds.csv": -5})),
        ["checkpoints", "offsets are not byte counts"],
    ),
    "sources_invalid": (lambda run: (run / "sources.json").write_text("{"), ["sources.json", "not readable JSON", "start a new run"]),
    "sources_not_files": (
        lambda run: (run / "sources.json").write_text('{"files": [{"path": 1}]}'),
        ["sources.json", "not the list of source files", "start a new run"],
    ),
    "sources_file_gone": (
        lambda run: (run / "sources.json").write_text(json.dumps({"files": [{"path": str(run / "gone_method.py"), "module": "gone_method", "sha256": "0" * 64}]})),
        ["gone_method.py (module gone_method) is gone since the run started", "put it back"],
    ),
    # a path edited to a device that never ends (or a pipe that blocks): refused without reading it
    "sources_a_device": (
        lambda run: (run / "sources.json").write_text(json.dumps({"files": [{"path": "/dev/zero", "module": "m", "sha256": "0" * 64}]})),
        ["/dev/zero (module m) is not a regular file", "put the file back"],
    ),
    "summary_invalid": (lambda run: (run / "summary.json").write_text("{"), ["summary.json", "not readable JSON", "move it away"]),
    "summary_deep": (lambda run: (run / "summary.json").write_text(DEEP), ["summary.json", "nested more than 100 levels"]),
    "summary_a_list": (lambda run: (run / "summary.json").write_text("[1]"), ["summary.json", "not a run summary"]),
}


@pytest.mark.parametrize("case", list(RESUME_CASES))
def test_resume_of_a_run_with_a_corrupt_file(case, resumable, tmp_path, capsys):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(resumable, run, symlinks=True)
    edit, needles = RESUME_CASES[case]
    edit(run)
    before = snapshot(run)
    line = one_error_line(main(["run", "--resume", str(run), "--quiet"]), *capsys.readouterr())
    assert all(n in line for n in needles), line
    assert snapshot(run) == before


def test_sweep_refuses_a_corrupt_study_record(tmp_path, good_scenario, capsys):
    """The study folder's study.resolved.yaml (which study it holds) is read under the YAML limits."""
    study = tmp_path / "study.yaml"
    study.write_text(f"name: st\nbase: {good_scenario}\ngrid: {{seed: [0]}}\n")
    folder = tmp_path / "studies" / "st"
    folder.mkdir(parents=True)
    bomb = "a0: &a0 [x,x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]\n" for i in range(1, 9)
    )
    (folder / "study.resolved.yaml").write_text(bomb)
    before = snapshot(tmp_path)
    line = one_error_line(main(["sweep", str(study), "--out", str(tmp_path / "studies"), "--quiet"]), *capsys.readouterr())
    assert "study.resolved.yaml" in line and "alias" in line and "give another --out" in line, line
    assert snapshot(tmp_path) == before


# ---------------------------------------------------------------- traces the loaders must not expand


def _trace_scenario(tmp_path: Path, fmt: str, name: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: t\nrounds: 2\nclients_per_round: 2\nfleet:\n  groups:\n"
        f"    - {{profile: raspberry_pi_4b, count: 4, availability: {{kind: trace, format: {fmt}, path: {name}}}}}\n"
        "data: {dataset: digits}\nalgorithm: {name: fedavg}\nnumerics: none\n"
    )
    return path


def test_a_csv_trace_field_over_128_kb(tmp_path, capsys):
    (tmp_path / "t.csv").write_text('device,online_from,online_until\n0,1,2\n1,"' + "9" * 200_000 + '",3\n')
    line = one_error_line(main(["validate", str(_trace_scenario(tmp_path, "csv", "t.csv"))]), *capsys.readouterr())
    assert "t.csv: line 3" in line and "field larger than field limit" in line and "device,online_from" in line


def _pickle_bomb(path: Path, shared: int = 20_000, clients: int = 100_000) -> int:
    """A FedScale trace whose clients all name ONE list of ``shared`` times: about 2.8 MB that a loader
    copying each client's lists would expand to 2 x shared x clients times (4e9: 32 GB as float64)."""
    import pickle

    times = [0.0] * shared
    data = {c: {"active": times, "inactive": times, "finish_time": 10.0} for c in range(clients)}
    path.write_bytes(pickle.dumps(data, protocol=4))
    return 2 * shared * clients


TRACE_LIMIT = 4 * 1024**3  # validate imports torch to read a trace (its libraries alone map over 512 MB)


def test_a_fedscale_pickle_bomb_in_a_real_process_under_a_memory_limit(tmp_path):
    assert _pickle_bomb(tmp_path / "t.pkl") * 8 > 7 * TRACE_LIMIT
    scenario = _trace_scenario(tmp_path, "fedscale", "t.pkl")
    proc = _cli(["-m", "iotfl_sim.cli", "validate", str(scenario)], TRACE_LIMIT, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "t.pkl" in proc.stderr and "pickle bomb" in proc.stderr and "own 'active' and 'inactive' lists" in proc.stderr


def test_a_fedscale_trace_within_its_file_size_still_loads(tmp_path):
    """The bound refuses expansion past one time per byte of the file, not sharing itself: clients naming one
    short list (as a pickle of equal lists may) load, each with its own copy."""
    import pickle

    from iotfl_sim.fleet.traces import load_fedscale_trace

    shared = [0.0, 5.0]
    path = tmp_path / "t.pkl"
    path.write_bytes(pickle.dumps({c: {"active": shared, "inactive": [1.0, 6.0], "finish_time": 10.0} for c in range(3)}))
    trace = load_fedscale_trace(path)
    assert sorted(trace) == [0, 1, 2]
    assert all(list(t.starts) == [0.0, 5.0] and list(t.ends) == [1.0, 6.0] for t in trace.values())


def test_report_out_never_overwrites_a_file_that_is_not_a_report(odd, capsys):
    """`report --out` is a file name: a report there is rewritten (as a sweep's report.html is), any other
    file is the user's and stays."""
    notes = odd / "a_file"
    before = snapshot(odd)
    line = one_error_line(main(["report", str(odd / "demo"), "--out", str(notes)]), *capsys.readouterr())
    assert str(notes) in line and "not a report" in line and "give a new file name" in line, line
    assert snapshot(odd) == before
    report = odd / "report.html"  # an earlier report (a stand-in with a report's title) is rewritten
    report.write_text("<!DOCTYPE html><html><head><title>demo — iotfl-sim report</title></head></html>\n")
    assert main(["report", str(odd / "demo"), "--out", str(report)]) == 0, capsys.readouterr().err
    assert b"data-table=" in report.read_bytes()


@pytest.mark.parametrize(
    "error, needles",
    [
        (PermissionError(13, "Permission denied", "/srv/x"), ["/srv/x: Permission denied", "owner and mode"]),
        (OSError(30, "Read-only file system", "/ro/runs"), ["/ro/runs: Read-only file system", "writable disk"]),
        (OSError(28, "No space left on device", "/full/rounds.csv"), ["/full/rounds.csv", "disk is full", "run the command again"]),
        (IsADirectoryError(21, "Is a directory", "/tmp"), ["/tmp: Is a directory", "a folder, not a file"]),
        (OSError(5, "Input/output error"), ["Input/output error", "check the paths"]),
        (OSError(2, "No such file or directory", 3), ["3: No such file or directory"]),
    ],
)
def test_os_error_line_names_the_path_and_a_fix(error, needles):
    from iotfl_sim.cli import os_error_line

    line = os_error_line(error)
    assert "\n" not in line and all(n in line for n in needles), line


@pytest.mark.parametrize("damage", ["truncated", "a_folder"])
def test_a_damaged_femnist_file_is_named_before_anything_is_written(damage, capsys, tmp_path, monkeypatch):
    """FEMNIST's json is hashed (for the disk cache) and then parsed: a truncated file and a folder where a file
    goes each give one line naming it, and no run folder appears."""
    monkeypatch.setenv("IOTFL_CACHE_DIR", str(tmp_path / "cache"))
    for split in ("train", "test"):
        (tmp_path / "data" / "femnist" / split).mkdir(parents=True)
        (tmp_path / "data" / "femnist" / split / "a.json").write_text(
            '{"users": ["w"], "num_samples": [1], "user_data": {"w": {"x": [[' + ",".join(["0.5"] * 784) + ']], "y": [3]}}}')
    bad = tmp_path / "data" / "femnist" / "train" / "b.json"
    if damage == "truncated":
        bad.write_text('{"users": ["v"], "user_data": {"v": {"x": [[0.1, 0.2')
    else:
        bad.mkdir()
    scenario = tmp_path / "femnist.yaml"
    scenario.write_text(
        "name: femnist_bad\nrounds: 1\nfleet: {groups: [{profile: raspberry_pi_4b, count: 2}]}\n"
        f"data: {{dataset: femnist, root: {tmp_path / 'data'}}}\nalgorithm: {{name: fedavg}}\n"
    )
    code = main(["run", str(scenario), "--out", str(tmp_path / "runs"), "--quiet"])
    line = one_error_line(code, *capsys.readouterr())
    assert str(bad) in line and ("replace it" in line or "check the file" in line), line
    assert not (tmp_path / "runs").exists() and not (tmp_path / "cache" / "datasets").exists()
