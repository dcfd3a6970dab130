"""Nothing a user produced is lost, on real `iotfl-sim` processes: a refused `--resume` and a refused second
sweep leave every file byte-identical; a run that finds no disk space stops with one line that says how to
continue, and continues, once there is space, to the files of a run never stopped."""

from __future__ import annotations

import hashlib
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import test_crash_resume
import yaml
from conftest import base_scenario
from test_bad_input_corpus import one_error_line
from test_crash_resume import iotfl, scenario
from test_resume import assert_same_run, only_run, rounds

ROOT = Path(__file__).resolve().parents[1]
# real processes resumed and swept: slow (left out of the fast subset); in test_crash_resume's xdist group,
# whose worker has the uninterrupted run (``whole``) and the fork helper already
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("crash")]
whole = test_crash_resume.whole  # the fixture: a run of ``scenario`` never stopped


def snapshot(folder: Path) -> dict[str, str | None]:
    """Every file (hidden ones included) under ``folder`` by SHA-256, every folder by name."""
    out: dict[str, str | None] = {}
    for root, dirs, files in os.walk(folder):
        rel = Path(root).relative_to(folder)
        out.update({f"{rel / d}/": None for d in dirs})
        out.update({str(rel / f): hashlib.sha256((Path(root) / f).read_bytes()).hexdigest() for f in files})
    return out


def one_line(proc: subprocess.CompletedProcess) -> str:
    return one_error_line(proc.returncode, proc.stdout, proc.stderr)


def refused(run: Path, *needles: str) -> str:
    """``--resume run`` is refused with one line holding ``needles``, and no file of the run changed."""
    before = snapshot(run)
    line = one_line(iotfl("run", "--resume", str(run)))
    assert all(n in line for n in needles), line
    assert snapshot(run) == before
    return line


def test_a_refused_resume_changes_no_file_then_the_run_resumes(tmp_path, whole):
    """Killed after round 3's row, before its checkpoint (the last is after round 2): every refusal leaves
    the folder as it was, row 3 included (it used to be cut off before the scenario's hash was checked)."""
    killed = iotfl("run", str(scenario(tmp_path)), "--out", str(tmp_path / "runs"), fault="row_written:3")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    run = only_run(tmp_path / "runs")
    assert len(rounds(run)) == 3 and (run / ".lock").is_file()  # the killed process's lock file stays
    ckpt = run / "checkpoints" / "round-000002"

    def edited(path: Path, data: bytes):
        original = path.read_bytes()
        path.write_bytes(data)
        return lambda: path.write_bytes(original)

    resolved = run / "scenario.resolved.yaml"
    restore = edited(resolved, resolved.read_bytes() + b"# edited\n")
    refused(run, "scenario.resolved.yaml", "changed since the checkpoint")
    restore()

    # a checkpoint whose replay does not reproduce the run: refused only after the replay, still nothing cut
    meta = json.loads((ckpt / "meta.json").read_text())
    restore = edited(ckpt / "meta.json", json.dumps({**meta, "digest": [x + 1 for x in meta["digest"]]}).encode())
    refused(run, "round 2", "does not reproduce")
    restore()

    events = run / "events.jsonl"
    restore = edited(events, events.read_bytes()[: meta["offsets"]["events.jsonl"] - 1])
    refused(run, "events.jsonl", "shorter than when the last checkpoint was written")
    restore()

    (run / ".lock").unlink()  # no lock file: taking the lock makes one, and a refusal removes it again
    state = ckpt / "state.pt"
    restore = edited(state, state.read_bytes()[:-10])
    refused(run, "state.pt", "SHA-256")
    restore()

    holder = subprocess.Popen(  # another process holds the run's lock
        [sys.executable, "-c", "import fcntl,sys,time; f=open(sys.argv[1],'a'); fcntl.flock(f, fcntl.LOCK_EX); "
         "print('held', flush=True); time.sleep(600)", str(run / ".lock")], stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline() == "held\n"
        refused(run, "another iotfl-sim process is writing this run folder")
    finally:
        holder.kill()
        holder.wait()

    (run / "checkpoints").rename(tmp_path / "checkpoints.away")  # a file where the checkpoints were
    (run / "checkpoints").write_text("not a folder")
    refused(run, "checkpoints", "not a folder")
    (run / "checkpoints").unlink()
    (tmp_path / "checkpoints.away").rename(run / "checkpoints")

    assert len(rounds(run)) == 3  # nothing was lost on the way
    resumed = iotfl("run", "--resume", str(run))
    assert resumed.returncode == 0, resumed.stderr
    assert_same_run(whole, run)
    assert not (run / ".lock").exists()  # a finished run leaves no lock file


def _limited(max_bytes: int):
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))

    return limit


def _system_only_scenario(tmp: Path, rounds_: int) -> Path:
    data = yaml.safe_load(scenario(tmp, rounds_=rounds_).read_text())
    data["numerics"] = "none"  # small checkpoints: the events log outgrows them within a few rounds
    path = tmp / "system.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _assert_no_space_line(proc: subprocess.CompletedProcess, run: Path) -> str:
    line = one_line(proc)
    assert f"error: {run}/" in line  # names the file it could not write
    assert "the disk is full" in line and line.rstrip().endswith(f"continue with: iotfl-sim run --resume {run}")
    return line


def test_a_file_size_limit_mid_run_gives_one_line_and_the_run_resumes_to_the_same_files(tmp_path):
    """RLIMIT_FSIZE (``ulimit -f``) below what the events log reaches: a write fails mid-run, after some
    checkpoints; the resume, without the limit, ends with the files of a run never stopped."""
    path = _system_only_scenario(tmp_path, rounds_=12)
    done = iotfl("run", str(path), "--out", str(tmp_path / "whole"))
    assert done.returncode == 0, done.stderr
    full = only_run(tmp_path / "whole")
    sizes = {p: p.stat().st_size for p in full.rglob("*") if p.is_file()}
    events = sizes.pop(full / "events.jsonl")
    limit = max(sizes.values()) + 1024  # every other file fits; the events log does not
    assert events > limit + 2048, (events, limit)

    env = {k: v for k, v in os.environ.items() if k != "IOTFL_FAULT"}
    cmd = [sys.executable, "-m", "iotfl_sim.cli", "run", str(path), "--out", str(tmp_path / "runs"), "--quiet"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, preexec_fn=_limited(limit))
    run = only_run(tmp_path / "runs")
    line = _assert_no_space_line(proc, run)
    assert "events.jsonl" in line
    assert list((run / "checkpoints").glob("round-*")) and not (run / "summary.json").exists()
    resumed = iotfl("run", "--resume", str(run))
    assert resumed.returncode == 0, resumed.stderr
    assert_same_run(full, run)


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 1 MB tmpfs (root only; skipped where it cannot be mounted), unmounted afterwards."""
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_full_disk_gives_one_line_and_the_run_resumes_once_space_is_freed(tmp_path, whole, small_tmpfs):
    """A real ENOSPC: the run's third checkpoint no longer fits on a 1 MB tmpfs. Once the tmpfs is grown,
    the resume ends with the files of the uninterrupted run (accuracy included)."""
    proc = iotfl("run", str(scenario(tmp_path)), "--out", str(small_tmpfs / "runs"))
    run = only_run(small_tmpfs / "runs")
    line = _assert_no_space_line(proc, run)
    assert "No space left on device" in line and "checkpoints" in line
    assert len(rounds(run)) >= 2 and not (run / "summary.json").exists()
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_tmpfs)], check=True)
    resumed = iotfl("run", "--resume", str(run))
    assert resumed.returncode == 0, resumed.stderr
    assert_same_run(whole, run)


# ---------------------------------------------------------------- studies


def _sweep_cmd(study: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "iotfl_sim.cli", "sweep", str(study), "--out", str(out), "--quiet"]


def test_a_second_sweep_of_a_running_study_is_refused_and_touches_nothing(tmp_path):
    """While a sweep runs (frozen with SIGSTOP, so that its files hold still), a second sweep of the same study
    is refused with one line and changes no file. A lock file a dead sweep left does not block the first
    sweep, and a folder in the way of a run (not a run: no scenario.resolved.yaml) is left alone: that point
    fails with a message, the others finish."""
    # 2 rounds: frozen at seed 1's first checkpoint, the sweep still has a round of it and all of seed 2 to run
    base = base_scenario(rounds=2)
    base["output"] = {"progress": False, "checkpoint": {"every_rounds": 1}}
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base, sort_keys=False))
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({"name": "s", "base": "base.yaml", "grid": {"seed": [1, 2, 3]}, "workers": 1}))
    out = tmp_path / "out"
    folder = out / "s"
    (folder / "runs" / "seed=3").mkdir(parents=True)
    (folder / "runs" / "seed=3" / "my_notes.txt").write_text("mine")
    (folder / ".lock").write_text("")  # as a sweep killed with SIGKILL leaves it
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    first = subprocess.Popen(_sweep_cmd(study, out), env=env, start_new_session=True, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and first.poll() is None:
            if list(folder.glob("runs/*/checkpoints/round-*")):
                break
            time.sleep(0.05)
        assert first.poll() is None, first.communicate()
        os.killpg(first.pid, signal.SIGSTOP)  # the sweep and its worker
        before = snapshot(folder)
        second = iotfl("sweep", str(study), "--out", str(out))  # forked by the helper: no interpreter start
        line = one_line(second)
        assert str(folder) in line and "another `iotfl-sim sweep` is running this study" in line
        assert snapshot(folder) == before
    finally:
        os.killpg(first.pid, signal.SIGCONT)
    _, err = first.communicate(timeout=600)
    assert first.returncode == 1, err  # one point failed
    records = {r["id"]: r for r in json.loads((folder / "study.json").read_text())["runs"]}
    assert [records[f"seed={s}"]["status"] for s in (1, 2, 3)] == ["done", "done", "failed"]
    assert "runs/seed=3: already exists" in records["seed=3"]["error"]
    assert sorted(p.name for p in (folder / "runs" / "seed=3").iterdir()) == ["my_notes.txt"]
    assert not (folder / ".lock").exists()
    for s in (1, 2):
        assert json.loads((folder / "runs" / f"seed={s}" / "summary.json").read_text())["status"] == "complete"
