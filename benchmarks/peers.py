"""iotfl-sim vs Flower's simulation and FLGo on the same two FedAvg jobs, same machine, same script.

Jobs (the iotfl-sim scenarios below are the one place their facts live; `peers_job.Job.of` hands them to the peers):
- conv: the job of `benchmarks/executors.py` (FedAvg, MNIST, 100 IID devices, 10 per round, E=1, B=50, `conv`
  without norm, SGD lr 0.05 momentum 0.9, gradients clipped to norm 1 as iotfl-sim's `local.clip_grad_norm`
  default does), 3 rounds, the global model tested on the 10,000 test images every round;
- iot: many clients of a small model: FEMNIST (the LEAF sample in $IOTFL_DATA, 14,708 train / 1,685 test images,
  62 classes), 1,000 IID devices (14-15 images each; the sample has 105 writers, too few for a natural split),
  100 per round, E=1, B=10, `cnn_small` without norm, SGD lr 0.05 momentum 0.9, clipping at 1, 5 rounds, tested
  every round.
Sides, each run as its own process (interpreter, imports, data and every round count):
- iotfl-sim: `iotfl-sim run` with no executor block (the default executor of the checkout that runs this script);
- Flower: `benchmarks/peers_flower_app.py`, `flwr.simulation.run_simulation` on Ray, one CPU per client actor;
- FLGo: `benchmarks/peers_flgo_app.py`, `flgo.init(...).run()` with FLGo's fedavg, clients one after another in one
  process with FLGo's default of one torch thread (`--flgo-threads`; on this shared 2-core machine, 2 threads made
  the iot job 2.4-4x slower than 1: oversubscribed OpenMP threads).
The peers build iotfl-sim's model in plain PyTorch (`peers_job.PlainCNN`) and read the same files through
iotfl-sim's loader. Repetitions are interleaved (rep 1: every job on every side, then rep 2, ...); the fastest and
the median are reported. Memory is the peak over the run of the summed PSS of the process and every descendant
(Ray's gcs_server, raylet, workers and actors included; this script makes itself a child subreaper so daemonized
descendants stay in the tree), sampled every second from /proc; RSS where PSS is unreadable (the report says which).
Every second, not faster: reading a process's PSS (smaps_rollup) walks its page tables under its memory-map lock,
8 ms of CPU per read of the iot job's 400 MB process; at 0.2 s the sampler took 0.6-0.7 CPU s of a 13-14 s iot run
(5 % of a core, measured 2026-11-27), which a side training on both cores pays in wall time and a one-core side
(FLGo) does not.

Flower and FLGo live in their own virtual environments, outside the repository (neither is a dependency of
iotfl-sim). `--setup` creates them with exactly these commands (about 3 minutes, from the package index):

    python3 -m venv /work/venvs/flwr
    /work/venvs/flwr/bin/pip install 'flwr[simulation]==1.38.0' torch==2.13.0 orjson
    python3 -m venv /work/venvs/flgo
    /work/venvs/flgo/bin/pip install torch==2.13.0
    /work/venvs/flgo/bin/pip install --no-deps flgo==0.4.4
    /work/venvs/flgo/bin/pip install tqdm scipy matplotlib prettytable ujson pyyaml networkx requests toolz orjson

torch==2.13.0 is the CPU build on this machine's disk (a bare `torch` may pull a multi-GB CUDA build). Flower 1.38:
newer releases need a certifi newer than the package index has. FLGo is installed without its declared
dependencies because it requires torchvision, and no torchvision imports beside the CPU torch 2.13 (0.28.0, the
matching release, is a CUDA build whose _C.so needs libtorch_cuda.so; 0.29 needs torch 2.14); FLGo's core (fflow,
fedavg, the cv-classification toolkit used here) never imports torchvision, only some of its built-in
benchmarks and `flgo.utils.submodule` do. pynvml (GPU scheduling only) is left out too.

    IOTFL_DATA=/work/shared/datasets python benchmarks/peers.py [--repeat 3] [--jobs conv iot] [--sides ...]
    IOTFL_DATA=/work/shared/datasets python benchmarks/peers.py --smoke     # 1 round, 1 repetition: a check, not a measurement
"""

from __future__ import annotations

import argparse
import csv
import ctypes
import datetime as dt
import json
import os
import resource
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]

import yaml  # noqa: E402
from executors import scenario as executors_scenario  # noqa: E402
from peers_job import Job  # noqa: E402

OUT_MD = HERE / "peers.md"
VENVS = Path("/work/venvs")
FLOWER = "flwr[simulation]==1.38.0"  # newer releases need a certifi newer than this machine's package index has
FLGO = "flgo==0.4.4"
TORCH = "torch==2.13.0"  # the CPU build on this machine's disk
READER_NEEDS = ["orjson"]  # iotfl-sim's dataset loader, which every side reads its data with (FEMNIST's json)
FLGO_NEEDS = ["tqdm", "scipy", "matplotlib", "prettytable", "ujson", "pyyaml", "networkx", "requests", "toolz",
              *READER_NEEDS]
SAMPLE_S = 1.0  # the module docstring says why not faster


def conv_scenario(rounds: int) -> dict:
    sc = executors_scenario(rounds, {})
    del sc["executor"]  # iotfl-sim's default executor
    sc["name"] = "peers_conv_mnist"
    return sc


def iot_scenario(rounds: int) -> dict:
    sc = conv_scenario(rounds)
    sc.update(
        name="peers_iot_femnist", clients_per_round=100,
        fleet={"groups": [{"name": "pi4", "profile": "raspberry_pi_4b", "count": 1000}]},
        data={"dataset": "femnist", "partition": {"method": "iid"}},
        model={"family": "cnn_small", "norm": "none", "scaler": False}, local={**sc["local"], "batch_size": 10},
    )  # fmt: skip
    return sc


JOBS: dict[str, tuple[Callable[[int], dict], int]] = {"conv": (conv_scenario, 3), "iot": (iot_scenario, 5)}
SIDES = ("iotfl-sim", "flower", "flgo")


# --------------------------------------------------------------------------------------------- process trees


def become_subreaper() -> None:
    """Orphaned descendants (daemonized Ray processes) get this process as parent, so they stay in the tree."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def memory_kb(pid: int) -> tuple[int, str] | None:
    """(PSS in kB, "PSS") from smaps_rollup, else (RSS in kB, "RSS"); None once the process is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]), "PSS"
    except PermissionError:
        pass
    except OSError:
        return None
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]), "RSS"
    except OSError:
        return None
    return 0, "RSS"  # a zombie: no memory left


class TreeSampler(threading.Thread):
    """Peak summed memory of this process's descendants (the one measured run), sampled every SAMPLE_S."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak_kb, self.peak_procs, self.kinds = 0, 0, set()
        self._halt = threading.Event()

    def run(self) -> None:
        me = os.getpid()
        while not self._halt.is_set():
            total, procs = 0, 0
            for pid in descendants(me):
                got = memory_kb(pid)
                if got is not None:
                    total += got[0]
                    procs += 1
                    self.kinds.add(got[1])
            self.peak_kb = max(self.peak_kb, total)
            self.peak_procs = max(self.peak_procs, procs)
            self._halt.wait(SAMPLE_S)

    def stop(self) -> None:
        self._halt.set()
        self.join()


def reap_leftovers(grace_s: float = 30.0) -> int:
    """Wait for the measured run's descendants (Ray shutting down) to end, killing them by pid after grace_s;
    reap the zombies handed to this subreaper. Returns how many had to be killed."""
    deadline, killed = time.monotonic() + grace_s, 0
    while True:
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass
        left = descendants(os.getpid())
        if not left:
            return killed
        if time.monotonic() > deadline:
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 5
        time.sleep(0.2)


# --------------------------------------------------------------------------------------------- one run


@dataclass
class Result:
    job: str
    side: str
    rep: int
    started: str
    load: tuple[float, float, float]
    wall_s: float
    cpu_s: float
    peak_mb: float
    mem_kind: str
    procs: int
    acc: list[float]
    loss: list[float]
    killed: int
    executor: str = ""  # what iotfl-sim's executor: auto chose




def measure(job: str, side: str, rep: int, cmd: list[str], env: dict, read: Callable[[], tuple[list, list, str]],
            log: Path) -> Result:
    load = tuple(float(x) for x in Path("/proc/loadavg").read_text().split()[:3])
    started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    sampler = TreeSampler()
    sampler.start()
    t0 = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - t0
    sampler.stop()
    killed = reap_leftovers()
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.stderr.write(log.read_text()[-6000:])
        raise SystemExit(f"{side} on the {job} job failed (exit {proc.returncode}); its output is above")
    acc, loss, executor = read()
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    kind = "+".join(sorted(sampler.kinds)) or "none"
    return Result(job, side, rep, started, load, wall, cpu, sampler.peak_kb / 1024, kind, sampler.peak_procs, acc,
                  loss, killed, executor)


def run_side(side: str, job: str, rep: int, rounds: int, tmp: Path, args: argparse.Namespace) -> Result:
    sc = JOBS[job][0](rounds)
    work = tmp / f"{job}-{side}-{rep}"
    work.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)])}
    if side == "iotfl-sim":
        path = work / "scenario.yaml"
        path.write_text(yaml.safe_dump(sc))
        cmd = [sys.executable, "-m", "iotfl_sim.cli", "run", str(path), "--out", str(work / "out"), "--quiet"]

        def read() -> tuple[list, list, str]:
            (run,) = list((work / "out").iterdir())
            with (run / "rounds.csv").open() as f:
                rows = list(csv.DictReader(f))
            ex = json.loads((run / "summary.json").read_text()).get("executor", {})
            chose = ex.get("kind", "?") + (f", {ex['workers']} workers" if ex.get("workers") else "")
            return [float(r["acc_full"]) for r in rows], [float(r["loss_full"]) for r in rows], chose
    else:
        app = {"flower": "peers_flower_app.py", "flgo": "peers_flgo_app.py"}[side]
        out = work / "result.json"
        cmd = [str(venv_python(args.venvs, side)), str(HERE / app), "--job", Job.of(job, sc).dumps(), "--out", str(out)]
        if side == "flgo":
            cmd += ["--threads", str(args.flgo_threads)]
        env["RAY_DEDUP_LOGS"] = "1"

        def read() -> tuple[list, list, str]:
            got = json.loads(out.read_text())
            return got["acc"], got["loss"], ""

    return measure(job, side, rep, cmd, env, read, work / "log.txt")


# --------------------------------------------------------------------------------------------- venvs


def venv_python(venvs: Path, side: str) -> Path:
    return venvs / {"flower": "flwr", "flgo": "flgo"}[side] / "bin" / "python"


def setup_commands(venvs: Path) -> list[list[str]]:
    fl, fg = venvs / "flwr", venvs / "flgo"
    return [
        ["python3", "-m", "venv", str(fl)],
        [str(fl / "bin" / "pip"), "install", FLOWER, TORCH, *READER_NEEDS],
        ["python3", "-m", "venv", str(fg)],
        [str(fg / "bin" / "pip"), "install", TORCH],
        [str(fg / "bin" / "pip"), "install", "--no-deps", FLGO],
        [str(fg / "bin" / "pip"), "install", *FLGO_NEEDS],
    ]


def versions(venvs: Path, sides: list[str]) -> dict[str, str]:
    probe = {"flower": "import flwr, ray, torch; print(f'Flower {flwr.__version__}, Ray {ray.__version__}, torch {torch.__version__}')",
             "flgo": "import flgo, torch; from importlib.metadata import version; print(f'FLGo {version(\"flgo\")}, torch {torch.__version__}')"}  # fmt: skip
    out = {"iotfl-sim": subprocess.run(
        [sys.executable, "-c", "import iotfl_sim, torch; print(f'iotfl-sim {iotfl_sim.__version__}, torch {torch.__version__}')"],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout.strip()}  # fmt: skip
    for side in sides:
        if side in probe:
            out[side] = subprocess.run([str(venv_python(venvs, side)), "-W", "ignore", "-c", probe[side]],
                                       capture_output=True, text=True).stdout.strip().splitlines()[-1]
    return out


def git_head() -> str:
    got = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%h of %cs"], capture_output=True, text=True)
    return got.stdout.strip()


# --------------------------------------------------------------------------------------------- report

LABEL = {"iotfl-sim": "iotfl-sim (`iotfl-sim run`, no executor block)",
         "flower": "Flower `run_simulation` (Ray, 1 CPU per client actor)",
         "flgo": "FLGo `flgo.init(...).run()` (fedavg, clients one after another, torch_num_threads {threads})"}  # fmt: skip
TARGETS = {"conv": {"flower": 2.0}, "iot": {"flower": 3.0, "flgo": 3.0}}
MEMORY_TARGET = 4.0  # iotfl-sim's peak at most 1/4 of Flower's


def job_text(job: str, rounds: int) -> str:
    j = Job.of(job, JOBS[job][0](rounds))
    clip = f", gradients clipped to norm {j.clip:g}" if j.clip is not None else ""
    return (f"FedAvg on {j.dataset}, {j.devices} IID devices, {j.per_round} per round, E={j.epochs}, B={j.batch}, "
            f"`{j.family}` without norm, SGD lr {j.lr} momentum {j.momentum}{clip}, {j.rounds} round"
            f"{'s' * (j.rounds != 1)}, the global model tested on the whole test set every round")


def report(results: list[Result], args: argparse.Namespace, rounds: dict[str, int], vers: dict[str, str],
           head: str, started: str, ended: str) -> str:
    smoke = args.repeat < 3 or any(rounds[j] < JOBS[j][1] for j in rounds)
    lines = ["# iotfl-sim vs Flower and FLGo (same jobs, same machine, same script)", ""]
    if smoke:
        lines += ["**SMOKE RUN: fewer than 3 repetitions or fewer rounds than the jobs' own; a check that every side "
                  "runs, not a measurement.**", ""]
    kinds = sorted({r.mem_kind for r in results})
    command = " ".join([f"IOTFL_DATA={os.environ.get('IOTFL_DATA', '')}", "python benchmarks/peers.py", *args.argv])
    lines += [
        "Generated by `benchmarks/peers.py`; the script overwrites this file.",
        f"Command: `{command}`",
        f"Run {started} to {ended} UTC on {os.cpu_count()} cores; checkout `{head}`.",
        "Versions: " + "; ".join(vers[s] for s in vers) + ".",
        f"Interleaved repetitions: {args.repeat} per job and side (rep 1 runs every job on every side, then rep 2, ...), "
        "after one untimed 1-round iotfl-sim run per job (the disk cache warm, as after any earlier run). "
        "Wall: the whole process (interpreter, imports, data, every round). CPU: user+system seconds of the process "
        f"tree. Memory: peak over the run of the summed {'/'.join(kinds)} of the process and all its descendants "
        f"(Ray's processes included), sampled every {SAMPLE_S} s.",
        "The sides draw initial weights, client samples and batches from their own random streams (Flower's are not "
        "seeded at all), so accuracies after a few rounds differ by as much as iotfl-sim's own seeds differ (`benchmarks/peers_seed_spread.md`); the "
        "test loss is the finer check that every side trains the same job.",
        "",
    ]
    for job in rounds:
        mine = [r for r in results if r.job == job]
        if not mine:
            continue
        lines += [f"## {job}: {job_text(job, rounds[job])}", "",
                  "| side | fastest wall s | median wall s | median CPU s | peak memory MB (median, max) | processes "
                  "| accuracy after the last round (each rep) | test loss (each rep) |",
                  "|---|---|---|---|---|---|---|---|"]
        stats = {}
        for side in SIDES:
            rs = [r for r in mine if r.side == side]
            if not rs:
                continue
            walls = [r.wall_s for r in rs]
            peaks = [r.peak_mb for r in rs]
            stats[side] = (min(walls), statistics.median(walls), statistics.median(peaks), max(peaks))
            lines.append(
                f"| {LABEL[side].format(threads=args.flgo_threads)} | {min(walls):.1f} | {statistics.median(walls):.1f} | "
                f"{statistics.median(r.cpu_s for r in rs):.1f} | {statistics.median(peaks):.0f}, {max(peaks):.0f} | "
                f"{max(r.procs for r in rs)} | {', '.join(f'{r.acc[-1]:.4f}' for r in rs)} | "
                f"{', '.join(f'{r.loss[-1]:.4f}' for r in rs)} |")
        lines.append("")
        if "iotfl-sim" in stats:
            ours = stats["iotfl-sim"]
            ours_acc = statistics.median(r.acc[-1] for r in mine if r.side == "iotfl-sim")
            for side in ("flower", "flgo"):
                if side not in stats:
                    continue
                peer = stats[side]
                gap = abs(ours_acc - statistics.median(r.acc[-1] for r in mine if r.side == side)) * 100
                speed = peer[0] / ours[0]
                line = (f"- vs {side}: iotfl-sim is **{speed:.2f}x** faster (fastest runs; medians "
                        f"{peer[1] / ours[1]:.2f}x), uses **{peer[2] / ours[2]:.2f}x** less memory (median peaks); final "
                        f"accuracies (medians) differ by {gap:.2f} points ({'within' if gap <= 1 else 'NOT within'} 1 point).")
                target = TARGETS[job].get(side)
                if target:
                    line += f" Speed target >= {target:g}x: **{'met' if speed >= target else 'NOT met'}**."
                if side == "flower":
                    line += (f" Memory target <= 1/{MEMORY_TARGET:g} of Flower's: "
                             f"**{'met' if peer[2] / ours[2] >= MEMORY_TARGET else 'NOT met'}**.")
                lines.append(line)
            lines.append("")
        lines.append("Accuracy per round (first rep): " + "; ".join(
            f"{r.side} {', '.join(f'{a:.3f}' for a in r.acc)}" for r in mine if r.rep == 0) + ".")
        lines.append("")
    lines += ["## Every run", "",
              "| started (UTC) | load avg 1/5/15 min | job | side | rep | wall s | CPU s | peak MB | kind | processes | killed after | executor |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r.started} | {' '.join(f'{x:.2f}' for x in r.load)} | {r.job} | {r.side} | {r.rep + 1} | "
                     f"{r.wall_s:.1f} | {r.cpu_s:.1f} | {r.peak_mb:.0f} | {r.mem_kind} | {r.procs} | {r.killed} | {r.executor} |")
    lines += ["", "`killed after`: descendants still alive 30 s after the run's process ended (then killed by pid). "
              "`executor`: what iotfl-sim's `executor: auto` chose (its summary.json).",
              "", "The venvs (recreate with `python benchmarks/peers.py --setup`, commands in its docstring):", ""]
    lines += [f"    {shlex.join(c)}" for c in setup_commands(args.venvs)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="interleaved repetitions of every job on every side")
    ap.add_argument("--jobs", nargs="+", default=list(JOBS), choices=list(JOBS))
    ap.add_argument("--sides", nargs="+", default=list(SIDES), choices=SIDES)
    ap.add_argument("--rounds", type=int, help="override every job's rounds (default: conv 3, iot 5)")
    ap.add_argument("--smoke", action="store_true", help="1 round, 1 repetition: a check that every side runs")
    ap.add_argument("--venvs", type=Path, default=VENVS, help="folder holding the flwr and flgo venvs")
    ap.add_argument("--flgo-threads", type=int, default=1, help="FLGo's torch_num_threads (FLGo's default: 1)")
    ap.add_argument("--setup", action="store_true", help="create the Flower and FLGo venvs, then exit")
    ap.add_argument("--out", type=Path, default=OUT_MD)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.setup:
        for cmd in setup_commands(args.venvs):
            print("+", " ".join(cmd), file=sys.stderr)
            subprocess.run(cmd, check=True)
        return 0
    if args.smoke:
        args.repeat, args.rounds = 1, args.rounds or 1
    if args.repeat < 1 or (args.rounds is not None and args.rounds < 1):
        print("peers.py: --repeat and --rounds must be at least 1", file=sys.stderr)
        return 2
    for side in args.sides:
        if side != "iotfl-sim" and not venv_python(args.venvs, side).exists():
            print(f"peers.py: no {side} venv at {venv_python(args.venvs, side).parent.parent}; create it with "
                  f"`python benchmarks/peers.py --setup --venvs {args.venvs}`", file=sys.stderr)
            return 2
    rounds = {job: args.rounds or JOBS[job][1] for job in args.jobs}
    become_subreaper()
    vers = versions(args.venvs, args.sides)
    head = git_head()
    started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M")
    results: list[Result] = []
    with tempfile.TemporaryDirectory() as tmp:
        if "iotfl-sim" in args.sides:  # untimed: fills the disk cache (FEMNIST's arrays, which every side reads
            for job in args.jobs:      # through iotfl-sim's loader, and iotfl-sim's cost tables) as any earlier run would
                warm = run_side("iotfl-sim", job, -1, 1, Path(tmp), args)
                print(f"warm-up {job} iotfl-sim (1 round, untimed): {warm.wall_s:.1f} s", file=sys.stderr, flush=True)
        for rep in range(args.repeat):
            for job in args.jobs:
                for side in args.sides:
                    r = run_side(side, job, rep, rounds[job], Path(tmp), args)
                    results.append(r)
                    print(f"rep {rep + 1} {job} {side}: {r.wall_s:.1f} s, CPU {r.cpu_s:.1f} s, peak {r.peak_mb:.0f} MB "
                          f"{r.mem_kind} over {r.procs} processes, accuracy {r.acc[-1]:.4f}, load {r.load[0]:.2f}",
                          file=sys.stderr, flush=True)
    ended = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M")
    text = report(results, args, rounds, vers, head, started, ended)
    print(text)
    if not args.no_write:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
