"""A round on its own (``sim/round.py``) and a device task driven through ``TaskHost`` by a host that is not the
engine: both work without a ``Simulation``, which is what makes them readable pieces."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import simpy
import yaml
from conftest import base_scenario

from iotfl_sim.algorithms.base import Assignment
from iotfl_sim.fl.submodel import SubmodelSpec
from iotfl_sim.scenario.loader import load_scenario, resolve_groups
from iotfl_sim.scenario.resolved import ResolvedScenario
from iotfl_sim.sim.device import DeviceTasks
from iotfl_sim.sim.engine import Simulation
from iotfl_sim.sim.round import Round, RoundStart
from iotfl_sim.sim.setup import build_simulation
from iotfl_sim.sim.traffic import Traffic

REASONS = ("oom", "depleted", "offline", "refused", "deadline", "surplus")


def counting_fleet(n: int) -> SimpleNamespace:
    """The fleet arrays a round counts on (busy, tasks, completed, failures by reason)."""
    return SimpleNamespace(
        busy=np.zeros(n, bool), tasks=np.zeros(n, int), completed=np.zeros(n, int),
        failures={r: np.zeros(n, int) for r in REASONS},
    )


def play(wanted: int, finish_at: list[float], deadline: float | None) -> tuple[list, float, SimpleNamespace, list]:
    """Dispatch one task per entry of ``finish_at``; each completes at that instant (None: never reports)."""
    env = simpy.Environment()
    fleet = counting_fleet(len(finish_at))
    rd = Round(env, 0, wanted, RoundStart(0.0, 0.0, 0.0, 0.0))

    def run(task):
        t = finish_at[task.assignment.device]
        yield env.timeout(t)
        task.status, task.finished_at = "completed", env.now
        if not task.round_over:
            rd.arrived_in_time(task)

    rd.dispatch([Assignment(d, SubmodelSpec(1.0)) for d in range(len(finish_at))], fleet, run)

    def server():
        yield rd.closing(deadline)

    env.run(until=env.process(server()))
    closed_at = env.now
    log = []
    outcomes = rd.close(fleet, lambda rnd, d, event, **f: log.append((d, event, f.get("reason"))))
    return outcomes, closed_at, fleet, log


def test_the_round_closes_once_enough_updates_arrived_and_keeps_the_first_k():
    outcomes, closed_at, fleet, log = play(wanted=2, finish_at=[3.0, 1.0, 2.0, 5.0], deadline=None)
    assert closed_at == 2.0  # the second arrival
    assert [o.status for o in outcomes] == ["surplus", "completed", "completed", "surplus"]
    assert fleet.completed.tolist() == [0, 1, 1, 0] and fleet.failures["surplus"].tolist() == [1, 0, 0, 1]
    assert fleet.tasks.tolist() == [1, 1, 1, 1] and fleet.busy.all()  # busy until each device process ends
    assert (1, "accepted", None) in log and (0, "dropped", "surplus") in log


def test_the_deadline_drops_what_has_not_arrived():
    outcomes, closed_at, fleet, _ = play(wanted=4, finish_at=[1.0, 9.0, 2.0, 9.0], deadline=2.5)
    assert closed_at == 2.5
    assert [o.status for o in outcomes] == ["completed", "deadline", "completed", "deadline"]
    assert fleet.failures["deadline"].tolist() == [0, 1, 0, 1]


def test_every_task_reported_closes_the_round_before_the_deadline():
    outcomes, closed_at, _, _ = play(wanted=5, finish_at=[1.0, 4.0], deadline=10.0)
    assert closed_at == 4.0 and [o.status for o in outcomes] == ["completed", "completed"]


class RecordingHost:
    """A ``TaskHost`` that is not the engine: fixed message sizes, no adaptation, everything it is asked logged."""

    seed = 3
    memory_scale = 1.0

    def __init__(self, sim: Simulation, down_bytes: float, up_bytes: float) -> None:
        self.recipe, self.down_bytes, self.up_bytes = sim.recipe, down_bytes, up_bytes
        self.calls: list[str] = []

    def log(self, rnd, device, event, at=None, **fields):
        self.calls.append(event)

    def hold_log(self, t0):
        return None

    def release_log(self, hold):
        pass

    def silent(self, reason):
        return False

    def medium(self, d, up):
        return None

    def recipe_for(self, a):
        return self.recipe

    def wire_bytes(self, a, recipe, up):
        self.calls.append("wire_up" if up else "wire_down")
        return self.up_bytes if up else self.down_bytes

    def adapt(self, a, state):
        self.calls.append("adapt")
        return a

    def training_memory(self, recipe, a):
        return None


def test_a_device_task_runs_against_any_task_host_hand_timed():
    """Download, training and upload of device 0 (tiny profile: no jitter, no loss) add up to the hand sum of
    bytes x 8 / rate + RTT each way and the profile's FLOP time, with the host's own message sizes."""
    sc = load_scenario(text=yaml.safe_dump(base_scenario(numerics="none", rounds=1)))
    sim = build_simulation(ResolvedScenario(sc, resolve_groups(sc)))
    env, traffic = simpy.Environment(), Traffic()
    host = RecordingHost(sim, down_bytes=2e5, up_bytes=5e4)
    tasks = DeviceTasks(env, sim.fleet, sim.system.availability, host, traffic, sim.system.training_time)
    rd = Round(env, 0, 1, RoundStart(0.0, 0.0, 0.0, 0.0))
    rd.dispatch([Assignment(0, SubmodelSpec(1.0))], sim.fleet, tasks.run)
    env.run()
    (task,) = rd.tasks
    f = sim.fleet
    samples = int(sim.numerics.samples_per_device[0])
    train_s = 3 * sim.recipe.cost(SubmodelSpec(1.0)).flops_forward_per_sample * samples / f.flops[0]
    hand = 2e5 * 8 / f.down_bps[0] + f.rtt_s[0] + train_s + 5e4 * 8 / f.up_bps[0] + f.rtt_s[0]
    assert task.status == "completed" and task.finished_at == pytest.approx(hand, rel=1e-12)
    assert rd.arrived == 1 and rd.enough.triggered
    assert host.calls == ["dispatch", "wire_down", "arrive", "adapt", "train_start", "train_end", "wire_up", "upload"]
    assert (traffic.down, traffic.up, traffic.wasted) == (2e5, 5e4, 0.0) and task.wire_bytes == 2.5e5
