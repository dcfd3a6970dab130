"""FedOpt, FedX, DAdaQuant and ScaleFL run asynchronously in FedBuff's buffered form (``sim/buffered_async.py``): the
server's work and the schedules they keep over rounds count model versions (server steps)."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from conftest import BIG, base_scenario
from test_buffered_async import form, simulation, update

from iotfl_sim.algorithms.fedopt import FedOpt
from iotfl_sim.scenario.algorithms import FedOptConfig


def mixed_fleet() -> dict:
    """Four fast and four slow devices (an eighth of the FLOP/s): continuous dispatch folds stale updates."""
    slow = {**copy.deepcopy(BIG), "compute": {**BIG["compute"], "flops": BIG["compute"]["flops"] / 8}}
    return {"groups": [{"name": "fast", "count": 4, "profile": copy.deepcopy(BIG)}, {"name": "slow", "count": 4, "profile": slow}]}


def buffered(variant: str, rounds: int, numerics: str = "torch", **over) -> dict:
    """``variant`` of the resume test's methods, asynchronous: buffer 2, 4 slots, continuous dispatch."""
    from test_resume import METHODS

    given = {"fleet": mixed_fleet(), **copy.deepcopy(METHODS[variant]), **over}
    return base_scenario(rounds=rounds, numerics=numerics, server={"mode": "async", "buffer_size": 2, "concurrency": 4}, **given)


def counting(monkeypatch, owner, name: str) -> list:
    """Each call of ``owner.name`` recorded (its positional arguments, then its keywords), the call itself made."""
    calls: list = []
    real = getattr(owner, name)

    def spy(*args, **kw):
        calls.append((*args, kw))
        return real(*args, **kw)

    monkeypatch.setattr(owner, name, spy)
    return calls


def test_fedopt_takes_one_adam_step_on_the_buffers_rebased_average_by_hand():
    """x = [1, 2]; FedAdam, eta 0.1, beta1 0.9, beta2 0.99, tau 1e-3 (v starts at tau^2), count mean. Device 2, fresh,
    trained [2, 2]. Device 1, 3 versions stale (weight (3 + 1)^-1/2 = 0.5), downloaded [0, 0], trained [2, -2]: moved
    to [1 + 1, 2 - 1] = [2, 1]. The buffer's mean [2, 1.5] gives Delta = [1, -0.5] (FedBuff's mean of the weighted
    deltas), and one step: m = 0.1 Delta, v = 0.99 tau^2 + 0.01 Delta^2, x + 0.1 m / (sqrt(v) + tau)."""
    method = FedOpt(FedOptConfig(name="fedopt", server_lr=0.1, weighting="count"))
    x = {"w": torch.tensor([1.0, 2.0])}
    method.state, method.trained = x, ["w"]
    method.m, method.v = {"w": torch.zeros(2)}, {"w": torch.full((2,), 1e-6)}
    fresh = update(2, {"w": torch.tensor([2.0, 2.0])}, 0, x)
    stale = update(1, {"w": torch.tensor([2.0, -2.0])}, 3, {"w": torch.tensor([0.0, 0.0])})
    form(method, kind="polynomial").apply(1, [fresh, stale])
    delta = [1.0, -0.5]
    m = [0.1 * d for d in delta]
    v = [0.99 * 1e-6 + 0.01 * d * d for d in delta]
    want = [xi + 0.1 * mi / (math.sqrt(vi) + 1e-3) for xi, mi, vi in zip([1.0, 2.0], m, v, strict=True)]
    assert method.m["w"].tolist() == pytest.approx(m, rel=1e-6)
    assert method.v["w"].tolist() == pytest.approx(v, rel=1e-6)
    assert method.state["w"].tolist() == pytest.approx(want, rel=1e-6)


def test_fedopt_steps_and_charges_its_optimizer_once_per_model_version(monkeypatch):
    steps = counting(monkeypatch, FedOpt, "step")
    charges = counting(monkeypatch, FedOpt, "charge_step")
    sim = simulation(buffered("fedopt", rounds=3))
    sim.run()
    assert max(r["staleness_max"] for r in sim.rows) >= 1  # stale updates were folded
    assert len(steps) == len(charges) == 3
    assert [r["updates_applied"] for r in sim.rows] == [2, 4, 6]


def test_fedx_fine_tunes_the_eq4_average_once_per_model_version_with_each_versions_draw(monkeypatch):
    """Each version: eq. 4 over the buffer, then one fine-tuning of that average (seeded by the version), charged
    once; three versions, three fine-tunings, not one per update or per dispatch wave."""
    from iotfl_sim.algorithms import fedx

    averaged = []
    gateway_aggregate = fedx.FedX.gateway_aggregate

    def eq4(self, rnd, updates):
        gateway_aggregate(self, rnd, updates)
        averaged.append({k: v.clone() for k, v in self.state.items()})

    monkeypatch.setattr(fedx.FedX, "gateway_aggregate", eq4)
    tuned = counting(monkeypatch, fedx, "fine_tune")
    charges = counting(monkeypatch, fedx.FedX, "_charge_fine_tune")
    sim = simulation(buffered("fedx", rounds=3))
    sim.run()
    assert max(r["staleness_max"] for r in sim.rows) >= 1
    assert len(tuned) == len(averaged) == len(charges) == 3
    for (_, _, state, *_), avg in zip(tuned, averaged, strict=True):
        assert all(torch.equal(state[k], avg[k]) for k in avg)
    assert [call[-1]["rnd"] for call in tuned] == [0, 1, 2]  # version v + 1's fine-tuning draws are keyed by v


def test_dadaquant_decodes_a_stale_upload_against_the_model_its_device_downloaded_by_hand():
    """The wire's base is the model of now, p_v = [10, 10]. A device 2 versions stale downloaded [1, 1] and trained
    [4, 5]: its update [3, 4] (norm 5) at q = 5 has exact levels 3 and 4, so it decodes to [1, 1] + [3, 4] = [4, 5],
    and the buffered form moves it to p_v + 3^-1/2 [3, 4] (polynomial staleness, a = 0.5). Decoded against p_v it
    would be [10, 10] + Q([-6, -5]), some other point."""
    from test_buffered_async import Mean

    from iotfl_sim.algorithms.dadaquant import UpdateWire

    now = {"w": torch.tensor([10.0, 10.0])}
    wire = UpdateWire(seed=0)
    wire.base = now
    up = update(1, {"w": torch.tensor([4.0, 5.0])}, 2, {"w": torch.tensor([1.0, 1.0])})
    up.assignment.extras["q"] = 5
    wire.receive(7, up)
    assert up.state["w"].tolist() == [4.0, 5.0]
    method = Mean(now)
    form(method, kind="polynomial").apply(8, [up])
    s = 1 / math.sqrt(3)
    assert method.state["w"].tolist() == pytest.approx([10 + 3 * s, 10 + 4 * s], rel=1e-6)


def test_dadaquant_steps_its_level_schedule_once_per_model_version_phi_a_tenth_of_the_versions(monkeypatch):
    from iotfl_sim.algorithms import dadaquant

    steps = counting(monkeypatch, dadaquant.LevelSchedule, "observe")
    received = counting(monkeypatch, dadaquant.UpdateWire, "receive")
    sim = simulation(buffered("dadaquant", rounds=3))
    sim.run()
    assert len(steps) == 3 and len(sim.strategy.schedule.averages) == 3
    stale = [u for _, _, u, _ in received if u.staleness > 0]
    assert stale and all(u.base is not None for _, _, u, _ in received)  # each decoded against its own download
    thirty = simulation(buffered("dadaquant", rounds=30, numerics="none", algorithm={"name": "dadaquant"}))
    assert thirty.strategy.schedule.phi == 3  # a tenth of 30 versions


def test_scalefl_starts_exit_kd_after_kd_start_of_the_versions_not_of_the_dispatch_waves(monkeypatch):
    """4 versions, kd_start 0.25: a task trains with KD when the version it downloads is past 0.25 x 4 = 1, that is
    versions 2 and 3, whatever wave dispatched it (continuous dispatch makes many more waves than versions)."""
    from iotfl_sim.algorithms.scalefl import ScaleFL

    sim = simulation(buffered("scalefl", rounds=4, numerics="none", fleet=mixed_fleet()))
    seen = []
    select = ScaleFL.select

    def spy(self, rnd, fleet, rng):
        out = select(self, rnd, fleet, rng)
        seen.extend((rnd, sim.loop.version, a) for a in out)
        return out

    monkeypatch.setattr(ScaleFL, "select", spy)
    sim.run()
    assert sim.rows[-1]["round"] == 4
    assert any(wave != version for wave, version, _ in seen)  # waves are not versions here
    assert all(a.extras["round"] == version for _, version, a in seen)
    kd = {(version, sim.strategy.local_objective(a).kd_active) for _, version, a in seen}
    assert kd == {(v, v >= 2) for v, _ in kd} and {v for v, _ in kd} == {0, 1, 2, 3}
