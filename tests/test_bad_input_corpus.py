"""The bad-input corpus: every malformed file in tests/bad_inputs/ is refused with ONE clear line.

Each scenario in the corpus starts with a comment ``# expect: a | b | c``: substrings the error must
contain (the YAML path or the file and line, what is wrong, and the fix). A second comment
``# needs: data`` marks cases that load the offline datasets (skipped where there are none).
Malformed device profiles live in ``bad_inputs/device_profiles/`` (beside the scenarios, where the
loader looks) and are reached through the ``profile_*.yaml`` scenarios; broken availability traces in
``bad_inputs/traces/``. Files with no readable first line carry their expectations in ``SIDECAR``.

Every case asserts: exit status 2, exactly one line on stderr starting with ``error: `` and ending
with a newline, nothing on stdout, no traceback, and each expected substring in that line.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from iotfl_sim.cli import main
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
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    return lines[0]


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


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.name)
def test_validate_refuses_with_one_clear_line(path, capsys, request):
    expect, needs = expectations(path)
    if "data" in needs and request.getfixturevalue("data_root") is None:
        pytest.skip("needs the offline datasets (IOTFL_DATA or shared/datasets)")
    code = main(["validate", str(path)])
    out, err = capsys.readouterr()
    line = one_error_line(code, out, err)
    for needle in expect:
        assert needle in line, (needle, line)
    # the line names the file the problem is in: the scenario, or the profile it uses
    assert path.name in line or "device_profiles/" in line, line


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
        (empty, "rounds.csv: missing"),
        (garbage, "no 'round' column"),
        (binary, "not a readable CSV file"),
        (a_file, "is not a directory"),
    ]:
        line = one_error_line(main(["plot", str(target), "--out", str(tmp_path / "plots")]), *capsys.readouterr())
        assert needle in line and str(target) in line, line
    assert not (tmp_path / "plots").exists() or not any((tmp_path / "plots").iterdir())


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
