"""The same seed gives the same run whatever torch threading the caller set up.

CPU kernels split reductions by thread, so training on 1 and on 2 threads differs in the last bits
(quickstart's loss_full moves in the 5th digit). The simulator therefore pins its own threads to
``executor.threads`` (README "Same bits everywhere"); this guards that against the calling
environment: OMP_NUM_THREADS, and ``torch.set_num_threads`` called before ``iotfl_sim.cli.main``.
Each run is a fresh process, since the thread pools are set up once per process.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOST_COLUMNS = ("host_train_s", "host_eval_s", "host_aggregate_s", "host_other_s")

CALLER = r"""
import sys
import torch
n = int(sys.argv[1])
if n:
    torch.set_num_threads(n)
before = torch.get_num_threads()
from iotfl_sim.cli import main
rc = main(sys.argv[2:])
print("threads", before, torch.get_num_threads())
sys.exit(rc)
"""

# (OMP_NUM_THREADS, torch.set_num_threads before main: 0 = not called). Unpinned, the first would train on
# 1 thread and the second on 2: checked to fail with the pinning in Simulation and InlineExecutor removed.
SETTINGS = [("1", 0), ("2", 2)]


def rows_without_host_time(run: Path) -> list[dict[str, str]]:
    with open(run / "rounds.csv") as f:
        return [{k: v for k, v in r.items() if k not in HOST_COLUMNS} for r in csv.DictReader(f)]


def test_rounds_do_not_depend_on_the_callers_thread_settings(tmp_path):
    procs = []
    for i, (omp, n) in enumerate(SETTINGS):
        out = tmp_path / f"run{i}"
        env = {**os.environ, "OMP_NUM_THREADS": omp, "MKL_NUM_THREADS": omp}
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
        argv = ["run", "scenarios/quickstart.yaml", "--set", "rounds=2", "--out", str(out), "--quiet"]
        procs.append((out, omp, n, subprocess.Popen(
            [sys.executable, "-c", CALLER, str(n), *argv], cwd=ROOT, env=env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )))
    results = []
    for out, omp, n, p in procs:
        stdout, stderr = p.communicate(timeout=600)
        assert p.returncode == 0, stderr[-2000:]
        before, after = map(int, stdout.split("threads", 1)[1].split())
        assert before == (n or int(omp)), "the caller's setting did not take: the test would prove nothing"
        assert after == before, "the simulator did not give the caller its thread count back"
        (run,) = list(out.iterdir())
        assert f"run: {run}" in stdout
        results.append((omp, n, rows_without_host_time(run), (run / "devices.csv").read_text()))
    (_, _, rows0, devices0) = results[0]
    assert len(rows0) == 2 and rows0[-1]["acc_full"] and rows0[-1]["loss_full"]
    for omp, n, rows, devices in results[1:]:
        assert rows == rows0, f"OMP_NUM_THREADS={omp}, torch.set_num_threads({n}) changed rounds.csv"
        assert devices == devices0
