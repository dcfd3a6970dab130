"""Joining an existing Ray cluster by address: a real two-node cluster on this machine (`ray start --head` and
`ray start --address`, as on two hosts), which a run's executor and a study's sweep join; the same bits as the
inline executor, and work on both nodes. Addresses where no cluster answers are refused in one line."""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from conftest import base_scenario

from iotfl_sim.cli import main
from iotfl_sim.core.errors import ScenarioError
from iotfl_sim.exec.cores import Cores
from iotfl_sim.study import read_study, sweep

NO_RAY = "Ray is not installed (pip install 'iotfl-sim[ray]')"
STARTUP_S = 120  # a node not up by then has failed; its log is shown


@dataclass
class Cluster:
    address: str  # the head's GCS, host:port
    node_ids: set[str]
    caches: dict[str, Path]  # node name -> the IOTFL_CACHE_DIR its workers see
    settle: Callable[[], set[str]]  # waits until both CPUs are free again


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(what: str, done, procs: list[subprocess.Popen], logs: list[Path]) -> None:
    deadline = time.monotonic() + STARTUP_S
    while not done():
        dead = [log for p, log in zip(procs, logs, strict=True) if p.poll() is not None]
        if dead or time.monotonic() > deadline:
            tail = "\n".join(log.read_text()[-2000:] for log in dead or logs)
            pytest.fail(f"ray start: {what} did not happen ({'a node exited' if dead else 'timed out'}):\n{tail}")
        time.sleep(0.1)


def _all_cpus_free(address: str, procs: list[subprocess.Popen], logs: list[Path]) -> set[str]:
    """Wait, connected to the cluster, until both nodes are up and both CPUs free (Ray's view of a killed actor's
    CPU lags behind the kill); the nodes' ids."""
    import ray

    ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        _wait("two nodes with a free CPU each",
              lambda: ray.available_resources().get("CPU") == 2 and sum(n["Alive"] for n in ray.nodes()) == 2,
              procs, logs)  # fmt: skip
        return {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    finally:
        ray.shutdown()  # the code under test connects by itself


def _session_members(sid: int) -> list[int]:
    """Live processes of the session ``sid``, zombies left out (Linux /proc; elsewhere none are found)."""
    found = []
    for d in Path("/proc").glob("[0-9]*"):
        try:
            # the fields after the command's closing parenthesis: state ppid pgrp session ...
            fields = (d / "stat").read_text().rpartition(")")[2].split()
            if int(fields[3]) == sid and fields[0] != "Z":
                found.append(int(d.name))
        except (OSError, ValueError, IndexError):
            pass
    return found


def _kill_sessions(sids: list[int]) -> list[int]:
    """SIGKILL every process of these sessions (each a node's `ray start` and what it started) until none is
    left; the processes still there after 10 s."""
    for sid in sids:  # its process group: all of it where there is no /proc to find the session by
        with contextlib.suppress(ProcessLookupError):
            os.killpg(sid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while (left := [pid for sid in sids for pid in _session_members(sid)]) and time.monotonic() < deadline:
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    return left


def _die_with_the_test() -> None:
    """Run in a node's `ray start` before it starts: SIGKILL it when the test process dies, however it dies
    (Linux's PR_SET_PDEATHSIG); the processes it starts die with it (Ray's fate-sharing under --block)."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)


@pytest.fixture
def two_nodes() -> Iterator[Cluster]:
    """A head and a second node of one CPU each, started with `ray start --block` in sessions of their own and
    a temporary folder of their own, every port chosen free: nothing is shared with a Ray the user runs. The
    teardown kills these two sessions (`ray stop` would stop every Ray on the machine; SIGTERM makes a node
    drain for up to 30 s) and checks that none of their processes is left."""
    ray = pytest.importorskip("ray", reason=NO_RAY)
    if ray.is_initialized():  # the local Ray other tests share: the runs here must join the cluster instead
        ray.shutdown()
    # short: Ray's socket paths live under it (at most 107 characters), so not under a long TMPDIR
    root = Path(tempfile.mkdtemp(prefix="iotfl-ray-", dir="/tmp" if os.path.isdir("/tmp") else None))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAY_worker_niceness"] = "0"  # as start_ray does for a local Ray: nice-15 workers crawl on a busy machine
    # Ray 2.60's token authentication must be the same on the nodes as in this process (the driver): on where a
    # local ray.init() here turned it on (RAY_AUTH_MODE=token; the nodes read the same ~/.ray/auth_token), else
    # off, even where ~/.ray/auth_token exists (`ray start --head` would then turn it on, a driver given an
    # address would not)
    env["RAY_AUTH_MODE"] = os.environ.get("RAY_AUTH_MODE") or "disabled"
    cli = [sys.executable, "-m", "ray.scripts.scripts", "start", "--block", "--num-cpus", "1", "--disable-usage-stats",
           "--dashboard-agent-listen-port", "0"]  # fmt: skip
    procs: list[subprocess.Popen] = []
    logs: list[Path] = []
    caches = {name: root / f"cache-{name}" for name in ("head", "node2")}

    def start(name: str, args: list[str]) -> None:
        logs.append(root / f"{name}.log")
        with logs[-1].open("w") as log:
            procs.append(subprocess.Popen(
                [*cli, "--temp-dir", str(root / name), *args], env={**env, "IOTFL_CACHE_DIR": str(caches[name])},
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_the_test,
            ))  # fmt: skip

    try:
        # where ray[client] is installed the head also serves ray:// (default port 10001): a free port instead
        client = ["--ray-client-server-port", str(_free_port())] if importlib.util.find_spec("grpc") else []
        start("head", ["--head", "--port", "0", "--include-dashboard", "false", "--dashboard-port", "0", *client])
        address_file = root / "head" / "ray_current_cluster"
        _wait("the head wrote its address", lambda: address_file.is_file() and address_file.read_text().strip(), procs, logs)
        address = address_file.read_text().strip()
        start("node2", ["--address", address])
        yield Cluster(address, _all_cpus_free(address, procs, logs), caches, lambda: _all_cpus_free(address, procs, logs))
    finally:
        if ray.is_initialized():
            ray.shutdown()
        left = _kill_sessions([p.pid for p in procs])
        for p in procs:
            p.wait()
        shutil.rmtree(root, ignore_errors=True)
        assert not left, f"processes of the test's Ray nodes outlived their session's kill: {left}"


def _rows(run_dir: Path) -> list[dict]:
    rows = list(csv.DictReader((run_dir / "rounds.csv").open()))
    return [{k: v for k, v in r.items() if not k.startswith("host_")} for r in rows]


def _run(tmp_path: Path, name: str, scenario: dict) -> list[dict]:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(scenario, sort_keys=False))
    out = tmp_path / name
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    (run_dir,) = list(out.iterdir())
    return _rows(run_dir)


@pytest.mark.slow
@pytest.mark.xdist_group("ray")  # one Ray at a time on the machine (the other Ray tests' local one)
def test_a_run_and_a_sweep_join_a_two_node_cluster_with_the_inline_bits(tmp_path, two_nodes, monkeypatch):
    import ray

    from iotfl_sim.exec.ray_exec import RayExecutor

    base = base_scenario(seed=3, rounds=2, clients_per_round=4)
    inline = _run(tmp_path, "inline", {**base, "executor": {"kind": "inline"}})
    assert len(inline) == 2 and {"acc_full", "loss_full", "train_loss", "energy_j", "sim_time_s", "bytes_up"} <= set(inline[0])
    assert float(inline[-1]["acc_full"]) > 0 and float(inline[-1]["train_loss"]) > 0  # trained: real numbers to compare

    # (a) a run's executor joins the cluster; workers unset: one actor per CPU of the cluster, i.e. one on
    # each node (an actor holds its CPU). Each actor says where it ran before the executor closes.
    where: list[str] = []
    close = RayExecutor.close

    def close_noting_nodes(self: RayExecutor) -> None:
        where.extend(self.ray.get([a.__ray_call__.remote(lambda _: ray.get_runtime_context().get_node_id())
                                   for a in self.actors]))  # fmt: skip
        close(self)

    monkeypatch.setattr(RayExecutor, "close", close_noting_nodes)
    on_cluster = _run(tmp_path, "cluster", {**base, "executor": {"kind": "ray", "address": two_nodes.address}})
    assert on_cluster == inline
    assert sorted(where) == sorted(two_nodes.node_ids)  # two actors, one per node
    assert not ray.is_initialized()  # it connected by itself, and let go

    # (b) a sweep's runs are Ray tasks on the cluster: two runs of the same numbers (only their names differ),
    # each the inline run's bits. Workers unset: as many in flight as the cluster has CPUs, not this machine's
    # cores (made one here), so both at once, one on each node. A task keeps its node's environment, so each
    # run fills the disk cache of the node it ran on.
    assert not any(c.exists() and any(c.iterdir()) for c in two_nodes.caches.values())  # actors cache nothing
    assert two_nodes.settle() == two_nodes.node_ids  # the actors' CPUs are free again, both nodes still up
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base, sort_keys=False))
    study = {"name": "c", "base": "base.yaml", "grid": {"name": ["a", "b"]},
             "dispatch": {"kind": "ray", "address": two_nodes.address}}  # fmt: skip
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(study, sort_keys=False))
    in_flight: list[int] = []  # the tasks the sweep waits on, at each wait
    wait = ray.wait

    def counting_wait(refs, *args, **kwargs):
        in_flight.append(len(refs))
        return wait(refs, *args, **kwargs)

    with monkeypatch.context() as m:
        # one usable core here: only the cluster's CPU count can put 2 runs in flight
        m.setattr("iotfl_sim.study.dispatch.available_cores", lambda: Cores(1, 1, None))
        m.setattr(ray, "wait", counting_wait)
        res = sweep(read_study(tmp_path / "study.yaml"), tmp_path / "studies", progress=False)
    assert max(in_flight) == 2
    assert [r["status"] for r in res.records] == ["done", "done"], [r["error"] for r in res.records]
    for r in res.records:
        assert _rows(res.folder / r["run_dir"]) == inline, r["id"]
    assert all(c.is_dir() and any(c.iterdir()) for c in two_nodes.caches.values())  # both nodes ran a run
    assert not ray.is_initialized()


@pytest.mark.xdist_group("ray")
def test_an_address_that_cannot_be_joined_is_refused_in_one_line(tmp_path, write_scenario, capsys, monkeypatch):
    ray = pytest.importorskip("ray", reason=NO_RAY)
    if ray.is_initialized():  # connected already, start_ray would not look at the address
        ray.shutdown()
    from iotfl_sim.exec.ray_exec import start_ray

    nobody = f"127.0.0.1:{_free_port()}"  # nothing listens there (Ray would retry for minutes)
    t0 = time.monotonic()
    sc = base_scenario(rounds=1, executor={"kind": "ray", "address": nobody})
    assert main(["run", str(write_scenario(sc)), "--out", str(tmp_path / "runs"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"executor.address: no Ray cluster answers at {nobody}" in err and "ray start --head" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "runs").exists()
    with pytest.raises(ScenarioError, match=f"dispatch.address: no Ray cluster answers at ray://{nobody}"):
        start_ray(f"ray://{nobody}", 1, "dispatch.address")
    with pytest.raises(ScenarioError, match="dispatch.address: 'headnode' is not a Ray address"):
        start_ray("headnode", 1, "dispatch.address")
    assert time.monotonic() - t0 < 30 and not ray.is_initialized()

    # a cluster that wants a token refuses a driver given its address without one: Ray retries ~20 s, then
    # raises this chain (as Ray 2.60 does); the run says what to set
    def refused(**kw):
        gcs = RuntimeError("Failed to connect to GCS. Last connection error: Traceback (most recent call last):\n"
                           "ray.exceptions.AuthenticationError: RPC error: InvalidAuthToken: Authentication token is "
                           "missing or incorrect.")  # fmt: skip
        raise ConnectionError(f"Failed to connect to Ray cluster at {kw['address']}") from gcs

    monkeypatch.setattr(ray, "init", refused)
    with socket.socket() as head:
        head.bind(("127.0.0.1", 0))
        head.listen()
        there = f"127.0.0.1:{head.getsockname()[1]}"
        with pytest.raises(ScenarioError, match=f"executor.address: the Ray cluster at {there} wants an authentication "
                                                "token: run with RAY_AUTH_MODE=token"):  # fmt: skip
            start_ray(there, 1)
