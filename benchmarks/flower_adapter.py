"""The example Flower app (examples/flower_app) under iotfl-sim against Flower's own simulation runtime.

Both sides run the same app, unchanged, from the same folder: 10 nodes, its pyproject.toml's run config (3 rounds,
half the nodes train and evaluate each round). iotfl-sim: ``iotfl-sim run`` of a scenario beside the app (an
ideal fleet: memory to spare, always online). Flower: its simulation runtime on Ray (``_run_simulation`` with the
app's folder, as ``flwr run`` on a local-simulation federation starts it, without the SuperLink process), one CPU
per ClientApp actor. Each repetition runs in a fresh process tree, the sides interleaved (A B A B ...):

- wall: seconds from start to exit;
- CPU: user + system seconds of every process of the tree (sampled every 0.1 s from /proc: Ray's daemons and
  actors are not children the driver waits for, so rusage would miss them; a process that lives under 0.1 s is
  missed);
- peak memory: the largest sum of the tree's resident set sizes at one sample (pages shared between processes,
  Ray's object store among them, counted once per process).

    IOTFL_DATA=... python benchmarks/flower_adapter.py [--reps 3] [--out benchmarks/flower_adapter.md]

Needs the flower extra (``pip install -e '.[flower]'``). Writes the table as the figures came.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "examples" / "flower_app"
TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")

SCENARIO = """name: flower_bench
seed: 0
rounds: 3
algorithm: {name: flower, server_app: "flowerapp.server_app:app", client_app: "flowerapp.client_app:app"}
fleet:
  groups:
    - {profile: raspberry_pi_4b, count: 10, availability: {kind: always}}
"""

FLOWER_DRIVER = """
import sys
from pathlib import Path
app = Path(sys.argv[1])
sys.path.insert(0, str(app))
from flwr.app import Context, RecordDict
from flwr.common.constant import SUPERLINK_NODE_ID
from flwr.simulation.run_simulation import _run_simulation
from flwr.supercore.constant import NOOP_FEDERATION_ID
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity
from flwr.supercore.telemetry import EventType
sys.path.insert(0, sys.argv[2])
from iotfl_sim.flower.apps import run_config
run = Run.create_empty(1)
run.primary_task_id, run.federation_id = 1, NOOP_FEDERATION_ID
TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, SUPERLINK_NODE_ID
from flowerapp.server_app import app as server
_run_simulation(
    num_supernodes=10, exit_event=EventType.PYTHON_API_RUN_SIMULATION_LEAVE, client_app_attr="flowerapp.client_app:app",
    server_app=server, backend_config={"client_resources": {"num_cpus": 1}},
    server_app_context=Context(1, 0, {}, RecordDict(), run_config(app, {})), app_dir=str(app), run=run, is_app=True,
)
"""


def _children() -> dict[int, int]:
    """pid -> parent pid of every process."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
                out[int(entry)] = int(fields[1])
            except (OSError, IndexError, ValueError):
                pass
    return out


def _tree(root: int) -> list[int]:
    parents = _children()
    tree, frontier = [root], [root]
    while frontier:
        frontier = [p for p, pp in parents.items() if pp in frontier and p not in tree]
        tree += frontier
    return tree


def _cpu_and_rss(pid: int) -> tuple[float, int]:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK, int(fields[21]) * PAGE


def measure(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, float]:
    """(wall s, CPU s, peak MB) of ``cmd``'s process tree."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)  # fmt: skip
    cpu: dict[int, float] = {}
    peak = 0
    while proc.poll() is None:
        rss = 0
        for pid in _tree(proc.pid):
            try:
                c, r = _cpu_and_rss(pid)
            except (OSError, IndexError, ValueError):
                continue
            cpu[pid] = max(cpu.get(pid, 0.0), c)
            rss += r
        peak = max(peak, rss)
        time.sleep(0.1)
    wall = time.perf_counter() - t0
    try:
        os.killpg(proc.pid, 9)  # Ray's daemons, should any outlive the driver
    except ProcessLookupError:
        pass
    if proc.returncode != 0:
        raise SystemExit(f"error: {' '.join(cmd[:3])} ... exited {proc.returncode}")
    return wall, sum(cpu.values()), peak / 2**20


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "flower_adapter.md")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="flower-bench-"))
    app = work / "app"
    shutil.copytree(APP, app, ignore=shutil.ignore_patterns("__pycache__"))
    (app / "bench.yaml").write_text(SCENARIO)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FLWR_TELEMETRY_ENABLED": "0", "OMP_NUM_THREADS": "1"}
    sides = {
        "iotfl-sim": lambda i: [sys.executable, "-m", "iotfl_sim.cli", "run", "bench.yaml", "--out", str(work / f"runs{i}"), "--quiet"],
        "Flower run_simulation (Ray)": lambda i: [sys.executable, "-c", FLOWER_DRIVER, str(app), str(ROOT)],
    }  # fmt: skip
    results: dict[str, list[tuple[float, float, float]]] = {k: [] for k in sides}
    for i in range(args.reps):
        for name, cmd in sides.items():
            results[name].append(measure(cmd(i), env, app))
            print(f"{name} rep {i + 1}: wall {results[name][-1][0]:.1f} s, CPU {results[name][-1][1]:.1f} s, "
                  f"peak {results[name][-1][2]:.0f} MB", flush=True)  # fmt: skip
    load = os.getloadavg()[0]
    lines = [
        "# The example Flower app under iotfl-sim and under Flower's simulation runtime",
        "",
        f"`python benchmarks/flower_adapter.py --reps {args.reps}` ({time.strftime('%Y-%m-%d')}, 2 cores, load "
        f"{load:.1f} at the end; the same app, 10 nodes, 3 rounds; sides interleaved). Medians over the repetitions:",
        "",
        "| side | wall (s) | CPU (s) | peak memory (MB) | each repetition: wall / CPU / MB |",
        "|---|---:|---:|---:|---|",
    ]
    for name, rs in results.items():
        med = [statistics.median(x[j] for x in rs) for j in range(3)]
        each = "; ".join(f"{w:.1f} / {c:.1f} / {m:.0f}" for w, c, m in rs)
        lines.append(f"| {name} | {med[0]:.1f} | {med[1]:.1f} | {med[2]:.0f} | {each} |")
    a, b = (results[k] for k in sides)
    ratio = [statistics.median(x[j] for x in b) / statistics.median(x[j] for x in a) for j in range(3)]
    lines += ["", f"Flower / iotfl-sim: wall {ratio[0]:.2f}x, CPU {ratio[1]:.2f}x, peak memory {ratio[2]:.2f}x.", ""]
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
