"""The run's C heap (``exec.glibc_heap``): one malloc arena for worker threads with large steps unless the user chose
otherwise, and freed pages handed back."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from iotfl_sim.exec.glibc_heap import chosen_elsewhere

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc arenas: Linux only")

# Two threads allocate blocks glibc's malloc serves from an arena (64 KB: above Python's small-object allocator,
# below the mmap threshold), then malloc_stats() lists the arenas on stderr ("Arena 0:", "Arena 1:", ...).
PROBE = """
import ctypes, sys, threading
from iotfl_sim.exec.glibc_heap import single_malloc_arena
print(single_malloc_arena())
both = threading.Barrier(2, timeout=30)
def work():
    blocks = [bytearray(65536) for _ in range(20)]
    both.wait()  # both threads alive at once: an exited thread's arena would be handed to the next
threads = [threading.Thread(target=work) for _ in range(2)]
for t in threads: t.start()
for t in threads: t.join()
sys.stdout.flush()
ctypes.CDLL(None).malloc_stats()
"""


def _arenas(env: dict[str, str]) -> tuple[str, int]:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=60, check=True)
    return done.stdout.strip(), sum(line.startswith("Arena ") for line in done.stderr.splitlines())


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MALLOC_ARENA_MAX", "GLIBC_TUNABLES", "IOTFL_MALLOC_ARENAS")}
    return {**env, **extra}


def test_threads_share_one_arena_and_the_opt_out_restores_glibcs_own():
    set_here, ours = _arenas(_env())
    if set_here != "True":
        pytest.skip("not glibc: no arenas to limit")
    assert ours == 1
    assert _arenas(_env(IOTFL_MALLOC_ARENAS="default")) == ("False", 3)  # the main thread's arena, one per thread


@pytest.mark.parametrize(
    ("environ", "chosen"),
    [
        ({}, False),
        ({"MALLOC_ARENA_MAX": "4"}, True),
        ({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1:glibc.malloc.arena_max=2"}, True),
        ({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}, False),
        ({"IOTFL_MALLOC_ARENAS": "Default"}, True),
    ],
)
def test_a_users_own_choice_wins(environ, chosen):
    assert chosen_elsewhere(environ) is chosen


# 40 MB of 64 KB blocks (heap, not mmap), each written and followed by a small block that stays, then the 40 MB
# freed: holes glibc keeps resident until they are trimmed. Resident KB before and after release_free_heap().
TRIM_PROBE = """
import os
from iotfl_sim.exec.glibc_heap import release_free_heap
def resident_kb():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
blocks, pins = [], []
for _ in range(640):
    blocks.append(bytearray(b"x") * 65536)
    pins.append(bytearray(b"y") * 1024)
del blocks
before = resident_kb()
release_free_heap()
print(before, resident_kb())
"""


def test_freed_heap_pages_go_back_to_the_system():
    done = subprocess.run([sys.executable, "-c", TRIM_PROBE], capture_output=True, text=True, env=_env(), timeout=60, check=True)
    before, after = map(int, done.stdout.split())
    assert before - after > 30_000, (before, after)  # most of the 40 MB (40,960 KB) returned


@pytest.mark.parametrize(("kind", "threshold", "asked"), [("threads", 0.0, True), ("threads", 1e15, False), ("inline", 0.0, False)])
def test_worker_threads_share_one_arena_only_where_a_step_is_large(monkeypatch, kind, threshold, asked):
    import yaml
    from conftest import base_scenario

    from iotfl_sim.exec import glibc_heap
    from iotfl_sim.scenario.loader import load_scenario, resolve_groups
    from iotfl_sim.scenario.resolved import ResolvedScenario
    from iotfl_sim.sim import host, setup

    calls: list[bool] = []
    monkeypatch.setattr(host, "single_malloc_arena", lambda: calls.append(True) or True)
    monkeypatch.setattr(glibc_heap, "HEAP_TUNING_MIN_STEP_FLOPS", threshold)
    sc = load_scenario(text=yaml.safe_dump(base_scenario(executor={"kind": kind, "workers": 2} if kind == "threads" else {"kind": kind})))
    sim = setup.build_simulation(ResolvedScenario(sc, resolve_groups(sc)))
    sim.host.executor.close()
    assert sim.host.choice.kind == kind and calls == ([True] if asked else [])


@pytest.mark.parametrize(("threshold", "trims"), [(0.0, 4), (1e15, 0)])
def test_freed_pages_are_returned_after_each_phase_only_where_a_step_is_large(monkeypatch, threshold, trims):
    """Two rounds, each a training and an evaluation phase: four trims with large steps, none with small ones
    (re-faulting the returned pages cost the IoT job more than it kept)."""
    import yaml
    from conftest import base_scenario

    from iotfl_sim.exec import glibc_heap
    from iotfl_sim.scenario.loader import load_scenario, resolve_groups
    from iotfl_sim.scenario.resolved import ResolvedScenario
    from iotfl_sim.sim import host, learning, setup

    calls: list[bool] = []
    monkeypatch.setattr(learning, "release_free_heap", lambda: calls.append(True))
    monkeypatch.setattr(host, "single_malloc_arena", lambda: True)
    monkeypatch.setattr(glibc_heap, "HEAP_TUNING_MIN_STEP_FLOPS", threshold)
    sc = load_scenario(text=yaml.safe_dump(base_scenario(executor={"kind": "inline"})))
    sim = setup.build_simulation(ResolvedScenario(sc, resolve_groups(sc)))
    try:
        sim.run()
    finally:
        sim.host.executor.close()
    assert len(calls) == trims


def test_the_rule_sits_between_the_measured_jobs():
    from iotfl_sim.exec.glibc_heap import heap_tuning_pays
    from iotfl_sim.fl.recipe import ModelRecipe
    from iotfl_sim.fl.submodel import SubmodelSpec

    def step(family: str, classes: int, batch: int) -> float:  # forward and backward: 3 forward passes a sample
        return 3 * batch * ModelRecipe(family, classes, 1, (28, 28), norm="none", scaler=False).cost(SubmodelSpec(1.0)).flops_forward_per_sample

    assert heap_tuning_pays(step("conv", 10, 50))  # the peers conv job: 40 MB less peak, the same time
    assert not heap_tuning_pays(step("cnn_small", 62, 10))  # the peers IoT job: 7-8 % more CPU, no memory gained


def test_a_run_starts_no_thread_before_its_workers(monkeypatch):
    """A thread started before the workers (tqdm's monitor was one) keeps an arena the one-arena limit hands on."""
    import threading

    import yaml
    from conftest import base_scenario

    from iotfl_sim.scenario.loader import load_scenario, resolve_groups
    from iotfl_sim.sim.runner import run_scenario

    started: list[str] = []
    start = threading.Thread.start
    monkeypatch.setattr(threading.Thread, "start", lambda self: (started.append(self.name), start(self))[1])
    sc = load_scenario(text=yaml.safe_dump(base_scenario(rounds=1, executor={"kind": "threads", "workers": 2})))
    run_scenario(sc, resolve_groups(sc), None, {}, progress=True, quiet=True)  # None: no folder written
    assert started and all(name.startswith("iotfl-worker") for name in started), started


# A fresh process runs a scenario up to the engine's one-arena call and lists the arenas there (malloc_stats, stderr).
ARENAS_AT_THE_CALL = """
import ctypes, sys
import yaml
from iotfl_sim.exec import glibc_heap
from iotfl_sim.scenario.loader import load_scenario, resolve_groups
from iotfl_sim.scenario.resolved import ResolvedScenario
from iotfl_sim.sim import host, setup
glibc_heap.HEAP_TUNING_MIN_STEP_FLOPS = 0.0
asked = host.single_malloc_arena
def listing():
    ctypes.CDLL(None).malloc_stats()
    return asked()
host.single_malloc_arena = listing
sc = load_scenario(text=sys.argv[1])
setup.build_simulation(ResolvedScenario(sc, resolve_groups(sc))).host.executor.close()
"""


def test_a_run_makes_no_arena_before_the_one_arena_call(data_root):
    """Torch ops on several threads before the engine pins them (loading MNIST) started OpenMP threads whose
    arenas the one-arena limit then handed to the workers: the run pins its threads before it loads anything."""
    import yaml
    from conftest import base_scenario

    if data_root is None:
        pytest.skip("no offline datasets on this machine (IOTFL_DATA)")
    scenario = yaml.safe_dump(base_scenario(data={"dataset": "mnist"}, executor={"kind": "threads", "workers": 2}))
    env = _env(OMP_NUM_THREADS="2")  # torch's default on a machine of 2 or more cores
    done = subprocess.run([sys.executable, "-c", ARENAS_AT_THE_CALL, scenario], capture_output=True, text=True,
                          env=env, timeout=120, check=True)  # fmt: skip
    assert sum(line.startswith("Arena ") for line in done.stderr.splitlines()) == 1, done.stderr


def test_the_run_loads_its_data_on_its_pinned_threads(monkeypatch):
    """Where no MNIST is at hand: the engine has pinned torch's threads when it starts loading the data."""
    import torch
    import yaml
    from conftest import base_scenario

    from iotfl_sim.scenario.loader import load_scenario, resolve_groups
    from iotfl_sim.scenario.resolved import ResolvedScenario
    from iotfl_sim.sim import setup

    seen: list[int] = []
    load = setup.prepare_numerics
    monkeypatch.setattr(setup, "prepare_numerics", lambda *a: (seen.append(torch.get_num_threads()), load(*a))[1])
    sc = load_scenario(text=yaml.safe_dump(base_scenario(executor={"kind": "inline", "threads": 1})))
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        setup.build_simulation(ResolvedScenario(sc, resolve_groups(sc))).host.executor.close()
    finally:
        torch.set_num_threads(before)
    assert seen == [1]
