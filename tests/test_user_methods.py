"""Methods from the user's own files, as a new user writes them: a method missing required methods is one line
naming them, a setup that forgets ``self.ctx = ctx`` just works, and a module that hangs at import is named
before it is imported and ends with one line on Ctrl-C."""

from __future__ import annotations

import csv
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import base_scenario

from iotfl_sim.cli import main

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "bad_inputs"
pytestmark = pytest.mark.usefixtures("isolated_methods")
HOST = {"host_train_s", "host_eval_s", "host_aggregate_s", "host_other_s"}


def test_a_method_missing_required_methods_is_refused_by_run_as_by_validate(capsys, tmp_path):
    """The corpus case (``HalfMethod`` defines setup and select only): validate and run refuse it with the same
    line naming algorithm.name and the three missing methods, and no run folder is made."""
    path = CORPUS / "algorithm_import_path_abstract.yaml"
    assert main(["validate", str(path)]) == 2
    validate_err = capsys.readouterr().err
    out = tmp_path / "runs"
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 2
    run_err = capsys.readouterr().err
    for err in (validate_err, run_err):
        assert "Traceback" not in err and "Can't instantiate" not in err, err
    line = validate_err.splitlines()[-1]
    assert line == run_err.splitlines()[-1]
    assert "algorithm.name" in line and "does not define aggregate, eval_targets, payload" in line, line
    assert not out.exists()


def test_an_asynchronous_method_missing_apply_names_it(tmp_path, capsys):
    """``Asynchronous`` gives select and aggregate; what it leaves abstract is what the line names."""
    (tmp_path / "no_apply.py").write_text(
        "from iotfl_sim.strategy import Asynchronous, Strategy\n\n\n"
        "class NoApply(Asynchronous, Strategy):\n"
        "    def setup(self, ctx): pass\n"
        "    def payload(self, a): return {}\n"
        "    def eval_targets(self): return []\n"
        "    def buffer_size(self): return 1\n"
        "    def select_some(self, wave, fleet, rng, k): return []\n"
    )
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(base_scenario(algorithm={"name": "no_apply:NoApply"}, server={"mode": "async"})))
    assert main(["validate", str(path)]) == 2
    line = capsys.readouterr().err.splitlines()[-1]
    assert line.startswith("error: ") and "NoApply does not define apply, which every method must" in line, line


FORGETFUL = '''
from iotfl_sim.strategy import Assignment, EvalTarget, Strategy, SubmodelSpec, average, select_uniform


class Forgetful(Strategy):
    def setup(self, ctx):
        {keep}
        self.spec = SubmodelSpec(1.0, name="full")
        self.state = ctx.initial_state(ctx.recipe, self.spec)
        self.eligible = self.fits(ctx.recipe, self.spec, ctx.declared_free_memory)  # self.c inside setup

    def select(self, rnd, fleet, rng):
        chosen = select_uniform(fleet, self.c.clients_per_round, rng, self.eligible)
        return [Assignment(int(d), self.spec, level="full") for d in chosen]

    def payload(self, assignment):
        return self.state

    def aggregate(self, rnd, updates):
        self.state = average(self.state, updates)

    def eval_targets(self):
        return [EvalTarget("full", self.spec, self.state, self.c.recipe)]
'''


def _rows(run: Path) -> list[dict[str, str]]:
    return [{k: v for k, v in r.items() if k not in HOST} for r in csv.DictReader((run / "rounds.csv").open())]


def test_a_setup_that_forgets_self_ctx_runs_as_one_that_keeps_it(tmp_path, capsys):
    """The same method twice, in two folders: its setup with and without ``self.ctx = ctx`` (using ``self.c``
    inside setup and in select): both run, to the same rounds."""
    rows = {}
    for variant, keep in (("keeps", "self.ctx = ctx"), ("forgets", "pass")):
        folder = tmp_path / variant
        folder.mkdir()
        (folder / f"{variant}_method.py").write_text(FORGETFUL.format(keep=keep))
        sc = base_scenario(rounds=2, numerics="none", algorithm={"name": f"{variant}_method:Forgetful"}, name=variant)
        (folder / "s.yaml").write_text(yaml.safe_dump(sc, sort_keys=False))
        code = main(["run", str(folder / "s.yaml"), "--out", str(folder / "runs"), "--quiet"])
        assert code == 0, capsys.readouterr().err
        (run,) = (folder / "runs").iterdir()
        rows[variant] = _rows(run)
    assert len(rows["keeps"]) == 2 and int(rows["keeps"][0]["selected"]) > 0
    assert rows["forgets"] == rows["keeps"]


def test_a_strategy_used_outside_the_engine_without_context_says_how_to_give_it():
    from iotfl_sim.algorithms.fedavg import FedAvg
    from iotfl_sim.scenario.algorithms import MethodConfig

    strategy = FedAvg.__new__(FedAvg)  # an __init__ that skipped Strategy's: no ctx attribute at all
    with pytest.raises(RuntimeError, match=r"FedAvg: no context yet: .*set strategy.ctx = ctx before calling setup"):
        strategy.c  # noqa: B018
    assert isinstance(FedAvg(FedAvg.Config(name="fedavg")).cfg, MethodConfig)


def _read_until(proc: subprocess.Popen, needle: str, timeout: float) -> str:
    """stderr of ``proc`` until it holds ``needle`` (or ``timeout`` seconds pass, or the process ends)."""
    sel = selectors.DefaultSelector()
    sel.register(proc.stderr, selectors.EVENT_READ)
    got = b""
    end = time.monotonic() + timeout
    while needle.encode() not in got and time.monotonic() < end:
        if sel.select(timeout=max(0.0, end - time.monotonic())):
            chunk = os.read(proc.stderr.fileno(), 65536)
            if not chunk:
                break
            got += chunk
    return got.decode()


def test_a_module_that_hangs_at_import_is_named_and_ctrl_c_ends_it(tmp_path):
    """``validate`` of a scenario whose method module sleeps at its top level: stderr names the module and its
    file before importing it; SIGINT then ends the process within seconds, exit 130, one line, no traceback."""
    (tmp_path / "sleepy_method.py").write_text("import time\n\ntime.sleep(600)\n")
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(base_scenario(algorithm={"name": "sleepy_method:Sleepy"})))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # Ctrl-C reaches the child as in a terminal: its SIGINT at the default, whatever the test worker's is (in the
    # full suite an earlier test in the same xdist worker can leave SIGINT ignored, which a child inherits: CI then
    # timed out here, the child silent; reproduced by running this test from a process with SIGINT ignored)
    proc = subprocess.Popen([sys.executable, "-m", "iotfl_sim.cli", "validate", str(path)], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    try:
        announced = _read_until(proc, "...\n", timeout=120)
        expected = f"note: importing method module sleepy_method from {tmp_path / 'sleepy_method.py'} ...\n"
        assert announced == expected, announced
        time.sleep(0.5)  # well inside the module's sleep
        assert proc.poll() is None  # still importing
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=10)
        assert time.monotonic() - t0 < 10
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130
    assert out == b"" and err == b"interrupted\n", err
