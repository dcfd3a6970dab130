"""One device's part of a round, as a SimPy process: download, memory check, training, upload.

Every activity ends early at the first of: the device going offline (availability), free memory
falling below the task's need (OU memory, during training), the battery running dry. The task
then fails with that reason at that instant.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

from iotfl_sim.algorithms.base import Assignment, DeviceState
from iotfl_sim.core.errors import ScenarioError
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fleet.availability import Availability
from iotfl_sim.fleet.fleet import Fleet
from iotfl_sim.fleet.lora import message
from iotfl_sim.fleet.network import SharedMedium, duty_cycled_duration, lorawan_frames, retransmitted_bytes
from iotfl_sim.fleet.thermal import power_at
from iotfl_sim.seeding import momentary
from iotfl_sim.sim.round import Task
from iotfl_sim.sim.traffic import Traffic
from iotfl_sim.sim.training_time import TrainingTime

SILENT_FAILURES = ("depleted", "offline")  # the server hears nothing back; it notices at the deadline


class TaskHost(Protocol):
    """What a device's task asks of the engine: the one way ``sim/device.py`` reaches it (``Simulation`` is one).

    The method's answers (``recipe_for``, ``wire_bytes``, ``adapt``) come through here so that the engine can
    record them for a resume; the event log through ``log`` / ``hold_log`` / ``release_log``.
    """

    seed: int
    memory_scale: float  # bytes per unit of the event log's memory figures (MB, or 1 for relative units)

    def log(self, rnd: int, device: int, event: str, at: float | None = None, **fields: Any) -> None:
        """Append an event to the run's event log (``at``: an instant in the past, default now)."""

    def hold_log(self, t0: float) -> int | None:
        """Keep the event log from passing ``t0`` until ``release_log``: a failure settled later is logged at t0."""

    def release_log(self, hold: int) -> None: ...

    def silent(self, reason: str) -> bool:
        """Whether the server does not hear of a failure for ``reason`` until its deadline."""

    def medium(self, d: int, up: bool) -> SharedMedium | None:
        """The shared gateway direction device ``d``'s transfers cross (None: its own link only)."""

    def recipe_for(self, a: Assignment) -> ModelRecipe: ...

    def wire_bytes(self, a: Assignment, recipe: ModelRecipe, up: bool) -> float:
        """Bytes of the task's download (``up`` False) or upload, header included."""

    def adapt(self, a: Assignment, state: DeviceState) -> Assignment | None:
        """The method's device-side decision on arrival: the assignment to train, or None to refuse it."""

    def training_memory(self, recipe: ModelRecipe, a: Assignment) -> float | None:
        """Memory training ``a`` needs, in the fleet's units (None: the method declares memory does not bind)."""


class DeviceTasks:
    """Runs tasks as SimPy processes on the fleet: every activity drains the battery, and ends early when the
    device goes offline, runs dry or (training, ``memory.process: ou``) runs out of memory."""

    def __init__(
        self,
        env: Any,
        fleet: Fleet,
        availability: Availability,
        host: TaskHost,
        traffic: Traffic,
        training_time: TrainingTime,
    ) -> None:
        self.env = env
        self.fleet = fleet
        self.availability = availability
        self.host = host
        self.traffic = traffic
        self.training_time = training_time

    # ------------------------------------------------------------ bookkeeping

    def fail(self, task: Task, reason: str, at: float | None = None, **fields: Any) -> None:
        d = task.assignment.device
        task.status = reason
        task.finished_at = self.env.now if at is None else at
        self.host.log(task.rnd, d, reason, at=at, **fields)
        self.release(task)
        if self.host.silent(reason):
            return  # the server only notices at the deadline
        if not task.report.triggered:
            task.report.succeed()

    def release(self, task: Task) -> None:
        if task.hold is not None:
            self.host.release_log(task.hold)
            task.hold = None

    # ------------------------------------------------------------ activities

    def activity(self, task: Task, duration: float, power_w: float, kind: str, memory_need: float | None = None):
        """Run for ``duration`` at ``power_w``; returns (reason, instant) of an early end, or (None, end)."""
        f, d, t0 = self.fleet, task.assignment.device, self.env.now
        end, reason = t0 + duration, None
        t_off = self.availability.offline_at(d, t0, task.rnd)
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

    def choose_mode(self, task: Task, a: Assignment):
        """Put the device in the power mode its task trains in: the method's (``a.power_mode``), else its group's
        ``power_policy`` by its battery, else the one it is in; a change takes the profile's ``mode_switch_s`` at
        idle power. Returns like ``activity``."""
        f, d = self.fleet, a.device
        g = f.groups[f.group_of[d]]
        mode = a.power_mode
        policy = g.config.power_policy
        if mode is None and policy is not None:
            cap = float(f.capacity_j[d])
            charge = f.battery_left(d) / cap if math.isfinite(cap) and cap > 0 else 1.0
            mode = policy.low_mode if charge < policy.below else (g.power_mode or g.profile.compute.default_mode)
        now = f.power_mode(d)
        if mode is None or mode == now:
            return None, self.env.now
        if mode not in (g.profile.compute.power_modes or {}):
            modes = ", ".join(g.profile.compute.power_modes or {}) or "none"
            raise ScenarioError(
                f"algorithm: asked device {d} ({g.name}, profile {g.profile.name}) to train in power mode {mode!r}, "
                f"which its profile does not define (modes: {modes}); pick one of them"
            )
        switch_s = g.profile.compute.mode_switch_s
        if switch_s:
            reason, end = yield from self.activity(task, switch_s, float(f.idle_w[d]), "compute")
            if reason is not None:
                return reason, end
        f.set_power_mode(d, mode)
        self.host.log(task.rnd, d, "power_mode", was=now, mode=mode)
        return None, self.env.now

    def train(self, task: Task, work_s: float, power_w: float, memory_need: float | None):
        """Train for ``work_s`` seconds of full-clock work at ``power_w``; a device with a thermal model slows as it
        heats (its energy is the phases' power x time, drawn at their mean power). Returns like ``activity``."""
        f, d, t0 = self.fleet, task.assignment.device, self.env.now
        phases = f.hot_work(d, t0, work_s, power_w)
        if phases is None:
            return (yield from self.activity(task, work_s, power_w, "compute", memory_need=memory_need))
        wall = phases[-1].start_s + phases[-1].duration_s
        energy = sum(power_at(float(f.idle_w[d]), max(power_w, float(f.idle_w[d])), p.clock) * p.duration_s for p in phases)
        reason, end = yield from self.activity(task, wall, energy / wall, "compute", memory_need=memory_need)
        throttled = sum(p.duration_s for p in phases if p.clock < 1.0 and p.start_s < end - t0)
        temp = f.cooled_to(d, end, phases, t0)
        self.host.log(task.rnd, d, "heat", temp_c=round(temp, 2), throttled_s=round(min(throttled, end - t0), 4))
        return reason, end

    def transfer(self, task: Task, nbytes: float, up: bool):
        """Move a message over the device's link (or its gateway); returns (reason, instant) like ``activity``."""
        f, host = self.fleet, self.host
        d = task.assignment.device
        g = f.group_of[d]
        preset = f.radio[g]
        if f.out_of_range.size and f.out_of_range[d]:  # no scheme reaches the gateway: nothing gets through
            return "offline", self.env.now
        if preset.tail_s > 0:
            f.cut_tail(d, self.env.now, preset.tail_w)
        loss, sigma = float(f.link_loss[d]), float(f.link_jitter[d])
        # the stream only when a draw is made: building a generator is most of a clean link's cost
        rng = momentary(host.seed, "link", d, task.rnd, int(up)) if loss > 0 or sigma > 0 else None
        sent = retransmitted_bytes(nbytes, loss, rng) if rng is not None else nbytes
        self.traffic.resent += sent - nbytes
        jitter = float(rng.lognormal(0.0, sigma)) if rng is not None and sigma > 0 else 1.0
        rtt = float(f.rtt_s[d])
        medium = host.medium(d, up)
        if medium is not None:
            bps = f.rate_for(d, up, self.env.now, sent * 8.0)
            t0 = self.env.now
            task.hold = host.hold_log(t0)  # a failure found afterwards is at an instant >= t0: keep the log in order
            air = yield self.env.process(medium.transfer(sent * 8.0 * jitter, bps))
            yield self.env.timeout(rtt)
            # the shared medium fixes the duration only as it unfolds: settle energy and failures afterwards
            power = f.radio_power(d, up, sent * 8.0 / max(air, 1e-12)) * air / (air + rtt)
            end, reason = self.env.now, None
            t_off = self.availability.offline_at(d, t0, task.rnd)
            if t_off < end:
                end, reason = t_off, "offline"
            dead = f.spend(d, t0, end - t0, power, "radio")
            if dead is not None:
                end, reason = dead, "depleted"
            if reason is None:
                self.release(task)  # else once the failure is recorded (``fail``)
        else:
            phy = f.phy(d)
            if phy is not None:  # LoRaWAN frames timed on air (the duty cycle on uplinks only, as below)
                lora = message(phy, sent, preset.duty_cycle if up else 1.0)
                air, duration = lora.airtime_s * jitter, lora.duration_s * jitter
                silence = lora.silence_after_s * jitter
            else:
                air = f.air_time(d, up, self.env.now, sent * 8.0) * jitter
                duration, silence = air, 0.0
            if up and preset.duty_cycle < 1.0:
                wait = f.next_tx[d] - self.env.now
                if wait > 0:  # the sub-band is still closed after the last frame
                    reason, end = yield from self.activity(task, wait, 0.0, "radio")
                    if reason is not None:
                        return reason, end
                if phy is None:
                    frames = lorawan_frames(sent)
                    duration = duty_cycled_duration(air, preset.duty_cycle, frames)
                    silence = (air / frames) * (1.0 / preset.duty_cycle - 1.0)
                f.next_tx[d] = self.env.now + duration + silence
            # an empty message, or one on a link too fast to time, is on the air for no time and costs no energy
            power = f.radio_power(d, up, sent * 8.0 / air) * air / (duration + rtt) if air > 0 else 0.0
            reason, end = yield from self.activity(task, duration + rtt, power, "radio")
        if reason is None and preset.tail_s > 0:
            dead = f.charge_lump(d, self.env.now, preset.tail_j, "radio")
            f.tail_until[d] = self.env.now + preset.tail_s
            if dead is not None:
                reason, end = "depleted", dead
        return reason, end

    # ------------------------------------------------------------ the task

    def run(self, task: Task):
        """The task as a SimPy process: download, memory check and adaptation, training, upload."""
        host, f, a = self.host, self.fleet, task.assignment
        d, rnd = a.device, task.rnd
        try:
            recipe = host.recipe_for(a)
            host.log(rnd, d, "dispatch", level=a.level, rate=a.spec.rate)
            if not f.alive(d, self.env.now):
                self.fail(task, "depleted", phase="dispatch")
                return
            if not self.availability.online(d, self.env.now, rnd):
                self.fail(task, "offline", phase="dispatch")
                return
            nbytes = host.wire_bytes(a, recipe, up=False)
            self.traffic.downloaded(task, nbytes)
            reason, at = yield from self.transfer(task, nbytes, up=False)
            if reason is not None:
                self.fail(task, reason, at=at, phase="download")
                return
            free = f.sample_free_memory(d, self.env.now, rnd)
            host.log(rnd, d, "arrive", free=round(free / host.memory_scale, 4))
            f.settle(d, self.env.now)
            b = host.adapt(a, DeviceState(d, free, f.battery_left(d)))
            if b is None:
                self.fail(task, "refused")
                return
            task.trained = b
            recipe_b = host.recipe_for(b)
            need = host.training_memory(recipe_b, b)
            if need is not None and need > free:
                self.fail(task, "oom", need=round(need / host.memory_scale, 4), free=round(free / host.memory_scale, 4))
                return
            reason, at = yield from self.choose_mode(task, b)
            if reason is not None:
                self.fail(task, reason, at=at, phase="train")
                return
            flops, duration = self.training_time.task_cost(recipe_b, b.spec, d, rnd)
            host.log(rnd, d, "train_start", level=b.level, flops=flops)
            power = self.training_time.task_power(recipe_b, b.spec, d)
            reason, at = yield from self.train(task, duration, power, need)
            if reason is not None:
                oom = {"need": round(need / host.memory_scale, 4)} if reason == "oom" and need is not None else {}
                self.fail(task, reason, at=at, phase="train", **oom)
                return
            host.log(rnd, d, "train_end")
            nbytes = host.wire_bytes(b, recipe_b, up=True)
            reason, at = yield from self.transfer(task, nbytes, up=True)
            if reason is not None:
                self.fail(task, reason, at=at, phase="upload")
                return
            self.traffic.uploaded(task, nbytes)
            task.upload_bytes = nbytes
            task.status = "completed"
            task.finished_at = self.env.now
            host.log(rnd, d, "upload", bytes=nbytes)
            if task.round_over:  # a late update: its round closed without it
                host.log(rnd, d, "late")
            else:
                task.owner.arrived_in_time(task)
        finally:
            f.busy[d] = False
