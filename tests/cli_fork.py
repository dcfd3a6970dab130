"""``iotfl-sim`` commands as real processes, without paying a fresh interpreter's imports for each one.

A fresh ``python -m iotfl_sim.cli run`` of a tiny scenario spends about 9 s of CPU importing PyTorch (with
torch._dynamo, which FLOP counting loads), scikit-learn's digits loader and the package, then about 3 s on
the run itself; the crash tests start dozens of them. Here one helper process per test worker imports all
of that once and forks one child per command: the child sets the command's environment (``IOTFL_FAULT``
included: ``iotfl_sim.faults`` is re-read), runs ``iotfl_sim.cli.main`` as ``python -m iotfl_sim.cli`` does
and exits with its status, or dies by its signal (a fault's SIGKILL). Every command is still its own
process, writing its own files, killed for real; only the interpreter start is shared. The crash tests
compare these children's runs with a run of a fresh interpreter (``test_crash_resume.whole``), which also
checks that a forked run gives the bits of a fresh one.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Run with -c: a __main__ without a file, so that the spawn start method of the children's worker pools
# does not re-import it (it imports iotfl_sim.cli as a fresh run's workers do).
_SERVER = r"""
import importlib, json, os, sys, traceback
import torch, torch._dynamo, sklearn.datasets, sklearn.model_selection
import iotfl_sim.cli, iotfl_sim.faults, iotfl_sim.sim.runner, iotfl_sim.study
reply = os.fdopen(os.dup(1), "w")
for line in sys.stdin:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            for fd, path, mode in ((0, os.devnull, os.O_RDONLY), (1, req["stdout"], os.O_WRONLY),
                                   (2, req["stderr"], os.O_WRONLY)):
                os.dup2(os.open(path, mode), fd)
            os.environ.clear()
            os.environ.update(req["env"])
            os.chdir(req["cwd"])
            importlib.reload(iotfl_sim.faults)  # IOTFL_FAULT is read when the module loads
            sys.argv = ["iotfl-sim", *req["args"]]
            code = iotfl_sim.cli.main(req["args"])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code if isinstance(code, int) else 1)
    reply.write(json.dumps({"pid": pid}) + "\n")
    reply.flush()
    _, status = os.waitpid(pid, 0)
    reply.write(json.dumps({"status": status}) + "\n")
    reply.flush()
"""

_server: subprocess.Popen | None = None


def _start() -> subprocess.Popen:
    global _server, _replies, _running
    if _server is None or _server.poll() is not None:
        _replies, _running = b"", None
        env = {k: v for k, v in os.environ.items() if k != "IOTFL_FAULT"}
        _server = subprocess.Popen([sys.executable, "-c", _SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   bufsize=0, env=env, cwd=ROOT)  # fmt: skip
        atexit.register(_stop, _server)
    return _server


def _stop(server: subprocess.Popen) -> None:
    if server.poll() is None:
        server.stdin.close()
        server.wait(timeout=60)


_replies = b""  # what the helper wrote and was not read yet (its two lines may come in one read)


def _read(server: subprocess.Popen, timeout: float) -> dict:
    """The helper's next line (unbuffered reads: a line already read must not wait for select)."""
    global _replies
    deadline = time.monotonic() + timeout
    while b"\n" not in _replies:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([server.stdout], [], [], left)[0]:
            raise TimeoutError
        chunk = os.read(server.stdout.fileno(), 4096)
        if not chunk:
            raise RuntimeError(f"the fork helper exited with status {server.wait()}")
        _replies += chunk
    line, _, _replies = _replies.partition(b"\n")
    return json.loads(line)


class Started:
    """A command forked by the helper and still running, as ``subprocess.Popen`` offers it to the tests that
    signal a run (``pid``, ``send_signal``, ``kill``, ``communicate``, ``returncode``): a real process of its
    own, which the helper (its parent) reaps and reports."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        global _running
        _drain()
        self.args = args
        self.returncode: int | None = None
        self._tmp = tempfile.TemporaryDirectory()
        self._out, self._err = Path(self._tmp.name, "out"), Path(self._tmp.name, "err")
        self._out.touch()
        self._err.touch()
        server = _start()
        req = {"args": args, "env": env, "cwd": os.getcwd(), "stdout": str(self._out), "stderr": str(self._err)}
        server.stdin.write(json.dumps(req).encode() + b"\n")
        self.pid: int = _read(server, 120)["pid"]
        _running = self

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:  # it ended and the helper reaped it: its status is on the way
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Its exit status (negative: the signal that killed it); ``subprocess.TimeoutExpired`` past ``timeout``."""
        global _running
        if self.returncode is None:
            try:
                status = _read(_server, 3600 if timeout is None else timeout)["status"]
            except TimeoutError:
                raise subprocess.TimeoutExpired(self.args, timeout) from None
            self.returncode = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            _running = None
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        out, err = self._out.read_text(), self._err.read_text()
        self._tmp.cleanup()
        return out, err


_running: Started | None = None  # the helper serves one command at a time


def _drain() -> None:
    """A command a failed test left running is killed and reaped, so that its status is not read as the next's."""
    if _running is not None and _running.returncode is None:
        _running.kill()
        _running.wait(60)


def start_cli(args: list[str], env: dict[str, str]) -> Started:
    """``python -m iotfl_sim.cli *args`` with environment ``env``, forked by the helper and left running."""
    return Started(args, env)


def run_cli(args: list[str], env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m iotfl_sim.cli *args`` with environment ``env`` in a forked child of the helper: its exit
    status (negative: the signal that killed it), stdout and stderr, as ``subprocess.run`` gives them."""
    proc = Started(args, env)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(60)
        raise
    out, err = proc.communicate()
    return subprocess.CompletedProcess(args, proc.returncode, out, err)
