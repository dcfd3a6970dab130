"""Bad input: one clear line naming the field, exit status 2, no traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import base_scenario

from iotfl_sim.cli import main


def run_cli(capsys, *args: str) -> tuple[int, str]:
    code = main(list(args))
    err = capsys.readouterr().err
    return code, err


def assert_one_clear_line(code: int, err: str, *needles: str) -> None:
    assert code == 2
    lines = [x for x in err.strip().splitlines() if x]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    assert "Traceback" not in err
    for n in needles:
        assert n in lines[0], (n, lines[0])


def test_unknown_key_suggests_the_right_one(capsys, write_scenario):
    data = base_scenario()
    data["fleet"]["groups"][0]["cont"] = data["fleet"]["groups"][0].pop("count")
    code, err = run_cli(capsys, "validate", str(write_scenario(data)))
    assert code == 2
    assert "fleet.groups[0].cont: unknown key (did you mean 'count'?)" in err
    assert "scenario.yaml:" in err  # the line number is given


def test_unknown_top_level_key_with_line(capsys, write_scenario):
    data = base_scenario()
    data["round"] = 3
    path = write_scenario(data)
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if t.startswith("round:"))
    code, err = run_cli(capsys, "validate", str(path))
    assert_one_clear_line(code, err, f"scenario.yaml:{line}: round: unknown key (did you mean 'rounds'?)")


def test_wrong_type(capsys, write_scenario):
    data = base_scenario(rounds="many")
    code, err = run_cli(capsys, "validate", str(write_scenario(data)))
    assert_one_clear_line(code, err, "rounds:", "integer", "'many'")


def test_unknown_profile(capsys, write_scenario):
    data = base_scenario()
    data["fleet"]["groups"][0]["profile"] = "raspbery_pi_4b"
    code, err = run_cli(capsys, "validate", str(write_scenario(data)))
    assert_one_clear_line(code, err, "fleet.groups[0].profile", "unknown device profile", "raspberry_pi_4b")


def test_unknown_algorithm(capsys, write_scenario):
    data = base_scenario(algorithm={"name": "heterofll"})
    code, err = run_cli(capsys, "validate", str(write_scenario(data)))
    assert_one_clear_line(code, err, "algorithm.name", "unknown algorithm 'heterofll'", "heterofl")


def test_unknown_algorithm_option(capsys, write_scenario):
    data = base_scenario(algorithm={"name": "heterofl", "proportion": "a2-b8"})
    code, err = run_cli(capsys, "validate", str(write_scenario(data)))
    assert_one_clear_line(code, err, "algorithm.proportion", "did you mean 'proportions'")


def test_missing_dataset_files(capsys, write_scenario, tmp_path):
    data = base_scenario(data={"dataset": "mnist", "root": str(tmp_path / "nowhere")})
    code, err = run_cli(capsys, "run", str(write_scenario(data)), "--out", str(tmp_path / "runs"), "--quiet")
    assert_one_clear_line(code, err, "data.dataset", "mnist", "data.root")
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_fractions_that_do_not_add_up(capsys, write_scenario):
    data = base_scenario()
    data["fleet"]["num_devices"] = 10
    for g, f in zip(data["fleet"]["groups"], (0.5, 0.4), strict=True):
        g.pop("count")
        g["fraction"] = f
    code, err = run_cli(capsys, "validate", str(write_scenario(data)))
    assert_one_clear_line(code, err, "fleet", "fractions add up to 0.9")


def test_fleet_where_nothing_fits(capsys, write_scenario, tmp_path):
    data = base_scenario()
    for g in data["fleet"]["groups"]:
        g["profile"]["memory"] = {"total_mb": 0.1, "free_mb": 0.05, "sigma_mb": 0.0}
    code, err = run_cli(capsys, "run", str(write_scenario(data)), "--out", str(tmp_path / "runs"), "--quiet")
    assert_one_clear_line(code, err, "fleet:", "no device can hold", "memory.free_mb")


def test_bad_override_value(capsys, write_scenario):
    code, err = run_cli(capsys, "validate", str(write_scenario(base_scenario())), "--set", "local.lr=-1")
    assert_one_clear_line(code, err, "local.lr", "greater than 0")


def test_not_yaml(capsys, tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("name: [unclosed\n")
    code, err = run_cli(capsys, "validate", str(p))
    assert_one_clear_line(code, err, "bad.yaml", "not valid YAML")


@pytest.mark.parametrize("args", [["profiles", "show", "nope"], ["plot", "/nonexistent/run"]])
def test_other_commands_bad_input(capsys, args):
    code, err = run_cli(capsys, *args)
    assert_one_clear_line(code, err)


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--seconds", "inf"], ["--seconds", "at most 3600", "got inf"]),  # used to hang
        (["--seconds", "nan"], ["--seconds", "got nan"]),
        (["--batch", "-1"], ["--batch", "1 to 4096", "got -1"]),  # used to measure for 37 s, then crash
    ],
)
def test_profiles_measure_checks_its_arguments_before_measuring(capsys, args, needles):
    code, err = run_cli(capsys, "profiles", "measure", *args)
    assert_one_clear_line(code, err, "profiles measure", *needles)


def test_a_set_index_that_only_unicode_calls_a_digit_is_one_clear_line(capsys, write_scenario):
    # '²'.isdigit() is True and int('²') raises: the key is read as a name, and a list has none
    code, err = run_cli(capsys, "validate", str(write_scenario(base_scenario())), "--set", "fleet.groups.²=1")
    assert_one_clear_line(code, err, "fleet.groups.²", "is not an index")


def test_more_clients_per_round_than_devices_is_said(capsys, write_scenario):
    code, err = run_cli(capsys, "validate", str(write_scenario(base_scenario(numerics="none", clients_per_round=50))))
    assert code == 0
    assert "warning: clients_per_round: 50 is more than the fleet's 8 devices" in err


def test_validate_warns_about_a_profile_with_zero_power(capsys, write_scenario):
    data = base_scenario(numerics="none")
    data["fleet"]["groups"][0]["profile"]["power"].update(train_w=0.0, idle_w=0.0)
    code, err = run_cli(capsys, "validate", str(write_scenario(data)))
    assert code == 0
    assert "warning: profile tiny: power.idle_w, power.train_w are 0 W" in err and "--train-w" in err
    assert "profile big: power" not in err


def test_console_exit_status_is_2(write_scenario):
    data = base_scenario(rounds=0)
    proc = subprocess.run(
        [sys.executable, "-m", "iotfl_sim.cli", "validate", str(write_scenario(data))], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "rounds" in proc.stderr and "Traceback" not in proc.stderr


def test_the_command_exits_with_mains_status_and_an_otherwise_normal_interpreter_exit(tmp_path):
    # The console command skips the final garbage collections (cli.entry): files still open are still flushed
    # and atexit handlers (logging, worker pools, Ray) still run; os._exit would lose both.
    script = (
        "import atexit, sys\n"
        "from iotfl_sim import cli\n"
        "cli.main = lambda: 3\n"
        f"held = open({str(tmp_path / 'held.txt')!r}, 'w')\n"
        "held.write('written, never closed')\n"
        f"atexit.register(lambda: open({str(tmp_path / 'atexit.txt')!r}, 'w').write('ran'))\n"
        "cli.entry()\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 3, proc.stderr
    assert (tmp_path / "held.txt").read_text() == "written, never closed"
    assert (tmp_path / "atexit.txt").read_text() == "ran"


def test_the_command_freezes_the_collector_before_exiting(monkeypatch):
    # what spares the exit the final collections over PyTorch's objects (cli.entry's docstring)
    import gc

    from iotfl_sim import cli

    monkeypatch.setattr(cli, "main", lambda: 0)
    frozen_before = gc.get_freeze_count()
    try:
        with pytest.raises(SystemExit) as ended:
            cli.entry()
        assert ended.value.code == 0 and gc.get_freeze_count() > frozen_before
    finally:
        gc.unfreeze()
