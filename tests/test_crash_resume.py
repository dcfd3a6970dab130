"""Real `iotfl-sim run` processes killed with SIGKILL at many points, interrupted with SIGINT / SIGTERM, and
resumed: each ends with the same rounds.csv, summary.json, devices.csv and events.jsonl as a run never stopped."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import cli_fork
import pytest
import yaml
from cli_fork import Started, run_cli, start_cli
from conftest import BIG, base_scenario
from test_resume import assert_same_run, only_run, rounds

# real processes: the fast subset leaves them out. One worker runs this file and test_data_safety one test
# after another (xdist group): they share one uninterrupted run (``whole``) and one fork helper (cli_fork)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("crash")]

ROUNDS = 4  # the last kill points (eval:4, round_train:4, eval:7: round 4's first slice) fall in round 4
# the asynchronous and hierarchical modes' runs (``uninterrupted``): their kill point (round_train:3) and their
# signals (after the first row) fall before the third round's end; a fourth round would add only work (a
# hierarchical round is two gateway rounds of every device)
MODE_ROUNDS = 3


def scenario(
    tmp: Path, executor: dict | None = None, rounds_: int = ROUNDS, epochs: int = 1, mode: dict | None = None,
    checkpoint_every: int = 1,
) -> Path:
    """The run these tests kill; ``mode``: the algorithm and server mode of an asynchronous variant."""
    mode = mode or {}
    data = base_scenario(rounds=rounds_, algorithm=mode.get("algorithm", {"name": "heterofl", "proportions": "a1-b1"}))
    data["local"]["epochs"] = epochs
    data["fleet"]["cost_model"] = "flops"
    data["server"] = {"bn_calibration_samples": 64, **mode.get("server", {})}
    data["output"] = {"progress": False, "checkpoint": {"every_rounds": checkpoint_every, "every_s": None}}
    if "hierarchy" in mode:  # every device behind one gateway copy per 4 devices
        data["fleet"]["gateways"] = [{"name": "gw", "down_mbps": 50.0, "up_mbps": 20.0, "devices_per_gateway": 4}]
        for g in data["fleet"]["groups"]:
            g.setdefault("network", {})["gateway"] = "gw"
        data["hierarchy"] = mode["hierarchy"]
    for key in ("numerics", "fleet"):
        if key in mode:
            data[key] = mode[key]
    if executor:
        data["executor"] = executor
    path = tmp / f"scenario-{len(list(tmp.glob('scenario-*')))}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def iotfl(*args: str, fault: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """``iotfl-sim *args --quiet`` in its own process, forked from a helper that imported torch and the
    package once (tests/cli_fork.py: the imports are three quarters of a fresh interpreter's CPU here)."""
    env = {k: v for k, v in os.environ.items() if k != "IOTFL_FAULT"}
    if fault:
        env["IOTFL_FAULT"] = fault
    return run_cli([*args, "--quiet"], env, timeout=timeout)


def fresh_run(tmp: Path, mode: dict | None = None, rounds_: int = ROUNDS) -> Path:
    """The run of ``scenario(tmp, rounds_=rounds_, mode=mode)`` never stopped, by a fresh interpreter (``python -m
    iotfl_sim.cli``, not a fork: the forked runs compared with it must give a fresh process's bits)."""
    cli_fork._start()  # the fork helper imports (seconds) while this run runs, not after it
    env = {k: v for k, v in os.environ.items() if k != "IOTFL_FAULT"}
    cmd = [sys.executable, "-m", "iotfl_sim.cli", "run", str(scenario(tmp, rounds_=rounds_, mode=mode)), "--out",
           str(tmp / "runs"), "--quiet"]  # fmt: skip
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return only_run(tmp / "runs")


@pytest.fixture(scope="session")
def whole(tmp_path_factory) -> Path:
    """The run never stopped (``fresh_run``); shared by this file and test_data_safety."""
    return fresh_run(tmp_path_factory.mktemp("whole"))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict[str, Path]:
    """Each server mode's run never stopped (``fresh_run``, made on first use; ``SIGNAL_MODES`` by name), shared
    by the SIGKILL test of the asynchronous modes and the SIGINT and SIGTERM tests."""
    made: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in made:
            made[name] = fresh_run(tmp_path_factory.mktemp(f"whole-{name}"), SIGNAL_MODES[name], MODE_ROUNDS)
        return made[name]

    return get


def killed_then_resumed(
    tmp: Path, faults: list[str], executor: dict | None = None, mode: dict | None = None, checkpoint_every: int = 1,
    rounds_: int = ROUNDS,
) -> Path:
    """Run, killed by the first fault; resume, killed by the next; ...; then resume to the end."""
    sc = scenario(tmp, executor, rounds_=rounds_, mode=mode, checkpoint_every=checkpoint_every)
    first = iotfl("run", str(sc), "--out", str(tmp / "runs"), fault=faults[0])
    assert first.returncode == -signal.SIGKILL, (first.returncode, first.stderr)
    run = only_run(tmp / "runs")
    for fault in faults[1:]:
        again = iotfl("run", "--resume", str(run), fault=fault)
        assert again.returncode == -signal.SIGKILL, (again.returncode, again.stderr)
    last = iotfl("run", "--resume", str(run))
    assert last.returncode == 0, last.stderr
    assert "Traceback" not in last.stderr
    return run


# (point, n): killed the n-th time the run reaches the point (iotfl_sim/faults.py)
KILL_POINTS = [
    "train:3",  # in the middle of round 2's training (inline: this process trains)
    "checkpoint_write:2",  # half of round 2's checkpoint state file on disk
    "checkpoint_done:2",  # just after round 2's checkpoint
    "row_written:3",  # round 3's row flushed, its checkpoint not yet written
    "row_torn:3",  # half of round 3's row on disk
    "eval:4",  # during round 4's evaluation
    "summary:1",  # every round done, no summary yet
]


@pytest.mark.parametrize("point", KILL_POINTS)
def test_sigkill_then_resume_gives_the_uninterrupted_results(tmp_path, whole, point):
    run = killed_then_resumed(tmp_path, [point])
    assert_same_run(whole, run)


def test_several_kills_and_resumes_in_a_row(tmp_path, whole):
    run = killed_then_resumed(tmp_path, ["train:2", "checkpoint_write:1", "row_torn:2"])
    assert_same_run(whole, run)


@pytest.mark.parametrize("point", ["round_train:3", "checkpoint_write:2"])
def test_pool_executor_run_resumes_to_the_same_results(tmp_path, whole, point):
    run = killed_then_resumed(tmp_path, [point], executor={"kind": "pool", "workers": 2})
    assert_same_run(whole, run)  # the pool gives the inline executor's bits


@pytest.mark.parametrize("point", ["round_train:4", "eval:7"])
def test_a_run_evaluating_beside_the_next_round_resumes_to_the_same_results(tmp_path, whole, point):
    """Worker threads evaluate round r while round r + 1 trains (its row held until then), a checkpoint every two
    rounds: killed while round 3's row waits for its evaluation (round 4 training; round 4's evaluation, two
    calibration slices per evaluation), resumed from round 2's checkpoint."""
    run = killed_then_resumed(tmp_path, [point], executor={"kind": "threads", "workers": 2, "overlap_eval": True},
                              checkpoint_every=2)
    assert_same_run(whole, run)


def _start(
    tmp: Path, rounds_: int, epochs: int = 1, mode: dict | None = None, ready: tuple[str, int] = ("rounds.csv", 2)
) -> tuple[Started, Path]:
    """A run in its own process (forked by the helper: tests/cli_fork.py), once its file ``ready[0]`` has
    ``ready[1]`` lines (default: the first row)."""
    env = {k: v for k, v in os.environ.items() if k != "IOTFL_FAULT"}
    out = tmp / "runs"
    path = scenario(tmp, rounds_=rounds_, epochs=epochs, mode=mode)
    proc = start_cli(["run", str(path), "--out", str(out), "--quiet"], env)
    name, lines = ready
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        runs = list(out.glob(f"*/{name}")) if out.exists() else []
        if runs and len(runs[0].read_text().splitlines()) >= lines:
            return proc, runs[0].parent
        time.sleep(0.05)
    proc.kill()
    pytest.fail(f"the run wrote no {lines} lines of {name} within 120 s")


ASYNC_MODES = {
    # devices in flight at every checkpoint, their downloaded weights saved with it
    "fedbuff": {"algorithm": {"name": "fedbuff", "buffer_size": 2, "server_momentum": 0.9}, "server": {"mode": "async"}},
    # round 1's late updates still out at its checkpoint, joining a later round after the resume
    "semi_async": {"algorithm": {"name": "fedavg"}, "server": {"mode": "semi_async", "deadline_s": 10.0}},
}


@pytest.mark.parametrize("name", sorted(ASYNC_MODES))
def test_sigkill_then_resume_in_the_asynchronous_modes_gives_the_uninterrupted_results(tmp_path, uninterrupted, name):
    mode = ASYNC_MODES[name]
    # during the third training (an update's, or a round's): before the last of the MODE_ROUNDS
    run = killed_then_resumed(tmp_path, ["round_train:3"], mode=mode, rounds_=MODE_ROUNDS)
    assert_same_run(uninterrupted({"fedbuff": "async", "semi_async": "semi_async"}[name]), run)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_first_signal_finishes_the_round_checkpoints_and_exits_128_plus_the_signal(tmp_path, whole, sig):
    proc, run = _start(tmp_path, ROUNDS)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, err  # 130 for Ctrl-C, 143 for SIGTERM, as a shell reports them
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    done = len(rounds(run))
    assert 1 <= done < ROUNDS and summary["rounds"] == done
    assert (run / "checkpoints" / f"round-{done:06d}").is_dir()
    assert f"--resume {run}" in out
    resumed = iotfl("run", "--resume", str(run))
    assert resumed.returncode == 0, resumed.stderr
    assert_same_run(whole, run)


# every server mode beyond sync's rounds: model versions, rounds with late updates, gateway and cloud rounds
SIGNAL_MODES = {
    "async": ASYNC_MODES["fedbuff"],
    "semi_async": ASYNC_MODES["semi_async"],
    "hierarchy": {"algorithm": {"name": "fedavg"}, "hierarchy": {"gateway_rounds": 2}},
}
SIGNAL_ROUNDS = MODE_ROUNDS  # enough that the signal comes before the end; ``uninterrupted`` runs as many
STOP_WITHIN_S = 10.0


def _stopped(proc: Started, sig: int) -> tuple[str, str]:
    """Send ``sig``; the process must end within ``STOP_WITHIN_S`` with status 128 + sig, in a line saying so."""
    sent = time.monotonic()
    proc.send_signal(sig)
    try:
        out, err = proc.communicate(timeout=STOP_WITHIN_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"still running {STOP_WITHIN_S:g} s after {signal.Signals(sig).name}")
    assert time.monotonic() - sent < STOP_WITHIN_S
    assert proc.returncode == 128 + sig, err
    assert "Traceback" not in err and "continue with: iotfl-sim run --resume" in out
    return out, err


# every mode once, SIGINT and SIGTERM alternating: one handler takes both (sim/runner.py), which a loop never sees (it
# reads the stop request), and test_first_signal_finishes_the_round... checks each signal's exit status and name
@pytest.mark.parametrize(
    ("name", "sig"),
    [("async", signal.SIGINT), ("hierarchy", signal.SIGTERM), ("semi_async", signal.SIGINT)],
    ids=["async-SIGINT", "hierarchy-SIGTERM", "semi_async-SIGINT"],
)
def test_a_signal_stops_every_server_mode_within_10_s_and_the_resume_gives_the_uninterrupted_files(
    tmp_path, uninterrupted, name, sig
):
    proc, run = _start(tmp_path, SIGNAL_ROUNDS, mode=SIGNAL_MODES[name])
    _stopped(proc, sig)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["stopped_by"] == signal.Signals(sig).name
    assert 1 <= len(rounds(run)) < SIGNAL_ROUNDS
    resumed = iotfl("run", "--resume", str(run))
    assert resumed.returncode == 0, resumed.stderr
    assert_same_run(uninterrupted(name), run)


# every task misses its 0.1 s deadline (training ~7 s, a lognormal factor: validate cannot refuse it): no model
# version ever comes; the run would go on until 1,500 tasks were dispatched (about 15 s here)
NO_VERSION = {
    "algorithm": {"name": "fedbuff", "buffer_size": 2},
    "server": {"mode": "async", "concurrency": 3, "deadline_s": 0.1, "max_tasks_per_version": 1500},
    "numerics": "none",
    "fleet": {"groups": [{"name": "slow", "count": 30, "profile": {
        **BIG, "compute": {"flops": 1e8, "jitter": {"dist": "lognormal", "sigma": 0.1}}}}]},
}  # fmt: skip


@pytest.fixture(scope="module")
def no_version_whole(tmp_path_factory) -> tuple[Path, str]:
    """The ``NO_VERSION`` run never stopped: its folder and its error line."""
    tmp = tmp_path_factory.mktemp("no-version")
    whole = iotfl("run", str(scenario(tmp, rounds_=2, mode=NO_VERSION)), "--out", str(tmp / "runs"))
    assert whole.returncode == 2, whole.stderr
    return only_run(tmp / "runs"), whole.stderr.splitlines()[-1]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_an_async_run_that_makes_no_version_and_its_resume_goes_on_as_if_never_stopped(
    tmp_path, no_version_whole, sig
):
    """Before issue 44 the stop waited for a model version that never came. It now takes effect at the next event,
    with a checkpoint of that step; the resumed run ends as the run never stopped does (no version after 1,500
    tasks: one error line, status 2) with the same rows and events."""
    proc, run = _start(tmp_path, 2, mode=NO_VERSION, ready=("events.jsonl", 100))
    _stopped(proc, sig)
    (ck,) = (run / "checkpoints").glob("round-*")
    assert ck.name == "round-000000" and json.loads((ck / "meta.json").read_text())["step"] > 0
    resumed = iotfl("run", "--resume", str(run))
    assert resumed.returncode == 2 and "no progress: 1,500 tasks dispatched" in resumed.stderr
    whole, error = no_version_whole
    assert resumed.stderr.splitlines()[-1] == error
    for name in ("rounds.csv", "events.jsonl"):
        assert (whole / name).read_text() == (run / name).read_text()


def test_second_sigint_stops_at_once_and_leaves_a_resumable_folder(tmp_path):
    # long rounds (many local epochs), so that the second Ctrl-C lands in the middle of one
    proc, run = _start(tmp_path, 2, epochs=8)
    time.sleep(0.3)  # into round 2 (a few seconds long)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "stopped at once" in err and "interrupted after round" not in out
    assert not (run / "summary.json").exists()  # it did not wait for the round to end
    resumed = iotfl("run", "--resume", str(run))
    assert resumed.returncode == 0, resumed.stderr
    whole = iotfl("run", str(scenario(tmp_path, rounds_=2, epochs=8)), "--out", str(tmp_path / "whole"))
    assert whole.returncode == 0, whole.stderr
    assert_same_run(only_run(tmp_path / "whole"), run)


def test_a_run_never_overwrites_an_existing_folder(tmp_path):
    """Folders named like the runs about to start are left alone; two runs started together get two folders."""
    out = tmp_path / "runs"
    out.mkdir()
    stamp = time.time()
    mine = []
    # every name a run started in the next 2 minutes could take (a process start on a machine busy with
    # parallel test workers can take tens of seconds; a run named later would prove nothing)
    for dt in range(0, 120):
        folder = out / f"t-{time.strftime('%Y%m%d-%H%M%S', time.localtime(stamp + dt))}"
        folder.mkdir(exist_ok=True)
        (folder / "my_notes.txt").write_text("mine")
        mine.append(folder)
    path = scenario(tmp_path, rounds_=1, mode={"numerics": "none"})  # the folders are the point, not the numbers
    env = {k: v for k, v in os.environ.items() if k != "IOTFL_FAULT"}
    cmd = [sys.executable, "-m", "iotfl_sim.cli", "run", str(path), "--out", str(out), "--quiet"]
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    made = {Path(line.split(": ", 1)[1]) for o, _ in outs for line in o.splitlines() if line.startswith("run: ")}
    assert len(made) == 2 and not made & set(mine)
    for folder in mine:
        assert sorted(p.name for p in folder.iterdir()) == ["my_notes.txt"]
        assert (folder / "my_notes.txt").read_text() == "mine"
    # a folder that another process is writing (this one holds its lock) cannot be resumed at the same time
    with open(sorted(made)[0] / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        lock_busy = iotfl("run", "--resume", str(sorted(made)[0]), timeout=120)
    assert lock_busy.returncode == 2 and "another iotfl-sim process" in lock_busy.stderr
