"""One device's part of a round, as a SimPy process: download, memory check, training, upload.

Every activity ends early at the first of: the device going offline (availability), free memory
falling below the task's need (OU memory, during training), the battery running dry. The task
then fails with that reason at that instant.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import simpy

from iotfl_sim.algorithms.base import Assignment, DeviceState
from iotfl_sim.fl.cost import opcost
from iotfl_sim.fleet.network import duty_cycled_duration, lorawan_frames, retransmitted_bytes
from iotfl_sim.seeding import stream

if TYPE_CHECKING:
    from iotfl_sim.sim.engine import Simulation

SILENT_FAILURES = ("depleted", "offline")  # the server hears nothing back; it notices at the deadline


@dataclass
class Task:
    assignment: Assignment
    report: simpy.Event
    rnd: int
    status: str | None = None
    trained: Assignment | None = None
    finished_at: float = math.nan
    round_over: bool = False
    sent: bool = False  # the model went on the air (counts as sent for the communication waste)
    wire_bytes: float = 0.0  # bytes this task put on the air so far, as counted in bytes_down / bytes_up
    hold: int | None = None  # the event log waits for this task's failure, settled in the past (transfer)


def declared_train_seconds(sim: Simulation, recipe: Any, spec: Any, d: int) -> float:
    """Seconds of device ``d``'s local training of ``spec`` by its declared profile, before jitter.

    With ``fleet.cost_model: roofline`` and a memory bandwidth in the profile every step is priced per
    operator (``fl.cost.opcost``: roofline plus dispatch overhead, batch by batch as ``train_local`` runs them);
    without one, 3 x forward FLOPs / FLOP/s. This is what a server can predict from the declared profile
    (FedX's T(theta_u) of eq. 2, ``Simulation.predict_train_seconds``); a task's real duration adds the
    round's compute jitter (``DeviceTasks.compute_cost``).
    """
    f = sim.fleet
    per_epoch, epochs = int(sim.numerics.samples_per_device[d]), sim.sc.local.epochs
    rates = f.roofline(d) if sim.sc.fleet.cost_model == "roofline" else None
    if rates is None:
        return float(recipe.cost(spec).train_flops(per_epoch * epochs) / f.flops[d])
    flops_s, bw, overhead, kernels, steps = rates
    batch, opts = sim.sc.local.batch_size, sim.step_options
    return opcost.train_seconds(recipe, spec, per_epoch, epochs, batch, flops_s, bw, overhead, opts, kernels, steps)


class DeviceTasks:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.env = sim.env
        self.fleet = sim.fleet

    # ------------------------------------------------------------ bookkeeping

    def fail(self, task: Task, reason: str, at: float | None = None, **fields: Any) -> None:
        d = task.assignment.device
        task.status = reason
        task.finished_at = self.env.now if at is None else at
        self.sim.event(task.rnd, d, reason, at=at, **fields)
        self.release(task)
        if reason in SILENT_FAILURES and self.sim.sc.server.deadline_s is not None:
            return  # the server only notices at the deadline
        if not task.report.triggered:
            task.report.succeed()

    def release(self, task: Task) -> None:
        if task.hold is not None:
            self.sim.recorder.release(task.hold)  # type: ignore[union-attr]
            task.hold = None

    # ------------------------------------------------------------ activities

    def activity(self, task: Task, duration: float, power_w: float, kind: str, memory_need: float | None = None):
        """Run for ``duration`` at ``power_w``; returns (reason, instant) of an early end, or (None, end)."""
        f, d, t0 = self.fleet, task.assignment.device, self.env.now
        end, reason = t0 + duration, None
        t_off = self.sim.availability.offline_at(d, t0, task.rnd)
        if t_off < end:
            end, reason = t_off, "offline"
        if memory_need is not None:
            t_oom = f.memory_shortfall(d, t0, end - t0, memory_need)
            if t_oom is not None and t_oom < end:
                end, reason = t_oom, "oom"
        dead = f.spend(d, t0, end - t0, power_w, kind)
        if dead is not None:
            end, reason = dead, "depleted"
        if end > t0:
            yield self.env.timeout(end - t0)
        return reason, end

    def transfer(self, task: Task, nbytes: float, up: bool):
        """Move a message over the device's link (or its gateway); returns (reason, instant) like ``activity``."""
        f, sim = self.fleet, self.sim
        d = task.assignment.device
        g = f.group_of[d]
        preset = f.radio[g]
        loss, sigma = float(f.link_loss[d]), float(f.link_jitter[d])
        # the stream only when a draw is made: building a generator is most of a clean link's cost
        rng = stream(sim.sc.seed, "link", d, task.rnd, int(up)) if loss > 0 or sigma > 0 else None
        sent = retransmitted_bytes(nbytes, loss, rng) if rng is not None else nbytes
        jitter = float(rng.lognormal(0.0, sigma)) if rng is not None and sigma > 0 else 1.0
        bps = float(f.up_bps[d] if up else f.down_bps[d])
        rtt = float(f.rtt_s[d])
        medium = sim.medium(d, up)
        if medium is not None:
            t0 = self.env.now
            if sim.recorder is not None:  # a failure found afterwards is at an instant >= t0: keep the log in order
                task.hold = sim.recorder.hold(t0)
            air = yield self.env.process(medium.transfer(sent * 8.0 * jitter, bps))
            yield self.env.timeout(rtt)
            # the shared medium fixes the duration only as it unfolds: settle energy and failures afterwards
            power = f.radio_power(d, up, sent * 8.0 / max(air, 1e-12)) * air / (air + rtt)
            end, reason = self.env.now, None
            t_off = sim.availability.offline_at(d, t0, task.rnd)
            if t_off < end:
                end, reason = t_off, "offline"
            dead = f.spend(d, t0, end - t0, power, "radio")
            if dead is not None:
                end, reason = dead, "depleted"
            if reason is None:
                self.release(task)  # else once the failure is recorded (``fail``)
        else:
            air = sent * 8.0 / bps * jitter
            duration = air
            if up and preset.duty_cycle < 1.0:
                wait = f.next_tx[d] - self.env.now
                if wait > 0:  # the sub-band is still closed after the last frame
                    reason, end = yield from self.activity(task, wait, 0.0, "radio")
                    if reason is not None:
                        return reason, end
                frames = lorawan_frames(sent)
                duration = duty_cycled_duration(air, preset.duty_cycle, frames)
                f.next_tx[d] = self.env.now + duration + (air / frames) * (1.0 / preset.duty_cycle - 1.0)
            power = f.radio_power(d, up, sent * 8.0 / air) * air / (duration + rtt)
            reason, end = yield from self.activity(task, duration + rtt, power, "radio")
        if reason is None and preset.tail_s > 0:
            dead = f.charge_lump(d, self.env.now, preset.tail_w * preset.tail_s, "radio")
            if dead is not None:
                reason, end = "depleted", dead
        return reason, end

    # ------------------------------------------------------------ the task

    def compute_cost(self, recipe: Any, spec: Any, d: int, rnd: int) -> tuple[float, float]:
        """(training FLOPs, jittered seconds) of device ``d``'s local training of ``spec``
        (``declared_train_seconds`` times the round's jitter). Energy follows: the caller charges training
        power for this duration."""
        sim, f = self.sim, self.fleet
        if sim.sc.fleet.cost_model == "roofline" and f.roofline(d) is not None:
            per_epoch, epochs = int(sim.numerics.samples_per_device[d]), sim.sc.local.epochs
            flops = opcost.train_flops(recipe, spec, per_epoch, epochs, sim.sc.local.batch_size, sim.step_options)
        else:
            flops = recipe.cost(spec).train_flops(int(sim.numerics.samples_per_device[d]) * sim.sc.local.epochs)
        return flops, f.jittered(d, declared_train_seconds(sim, recipe, spec, d), rnd)

    def run(self, task: Task):
        sim, f, a = self.sim, self.fleet, task.assignment
        d, rnd = a.device, task.rnd
        try:
            recipe = sim.strategy.recipe_for(a)
            sim.event(rnd, d, "dispatch", level=a.level, rate=a.spec.rate)
            if not f.alive(d, self.env.now):
                self.fail(task, "depleted", phase="dispatch")
                return
            if not sim.availability.online(d, self.env.now, rnd):
                self.fail(task, "offline", phase="dispatch")
                return
            nbytes = sim.wire_bytes(a, recipe, up=False)
            sim.bytes_down += nbytes
            task.wire_bytes += nbytes
            task.sent = True
            reason, at = yield from self.transfer(task, nbytes, up=False)
            if reason is not None:
                self.fail(task, reason, at=at, phase="download")
                return
            free = f.sample_free_memory(d, self.env.now, rnd)
            sim.event(rnd, d, "arrive", free=round(free / sim.memory_scale, 4))
            f.settle(d, self.env.now)
            b = sim.adapt(a, DeviceState(d, free, float(f.capacity_j[d] - f.used(d))))
            if b is None:
                self.fail(task, "refused")
                return
            task.trained = b
            recipe_b = sim.strategy.recipe_for(b)
            need = None if sim.memory_ignored else sim.memory_need(recipe_b, b.spec)
            if need is not None and need > free:
                self.fail(task, "oom", need=round(need / sim.memory_scale, 4), free=round(free / sim.memory_scale, 4))
                return
            flops, duration = self.compute_cost(recipe_b, b.spec, d, rnd)
            sim.event(rnd, d, "train_start", level=b.level, flops=flops)
            reason, at = yield from self.activity(task, duration, float(f.train_w[d]), "compute", memory_need=need)
            if reason is not None:
                oom = {"need": round(need / sim.memory_scale, 4)} if reason == "oom" and need is not None else {}
                self.fail(task, reason, at=at, phase="train", **oom)
                return
            sim.event(rnd, d, "train_end")
            nbytes = sim.wire_bytes(b, recipe_b, up=True)
            reason, at = yield from self.transfer(task, nbytes, up=True)
            if reason is not None:
                self.fail(task, reason, at=at, phase="upload")
                return
            sim.bytes_up += nbytes
            if task.round_over:  # a late update: its round closed without it, its bytes were for nothing
                sim.bytes_wasted += nbytes
            else:
                task.wire_bytes += nbytes
            task.status = "completed"
            task.finished_at = self.env.now
            sim.event(rnd, d, "upload", bytes=nbytes)
            if task.round_over:
                sim.event(rnd, d, "late")
            else:
                sim.on_completed(task)
        finally:
            f.busy[d] = False
