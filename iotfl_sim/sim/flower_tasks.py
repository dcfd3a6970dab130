"""A message's life on one simulated device: the download, the ClientApp run for real (``node.run_node``), its
work priced on the device's profile, the upload of the reply; a failure on the way becomes the error reply
Flower's SuperLink gives for it.

Failures and their replies: a device offline or run dry (at dispatch, or during the download, the work or the
upload) answers ``NODE_UNAVAILABLE``, as a SuperLink answers for a node that stopped heartbeating; training memory
over the device's free memory answers ``CLIENT_APP_CRASHED`` (an out-of-memory kill); a reply arriving after the
message's TTL (simulated seconds from its push) answers ``REPLY_MESSAGE_UNAVAILABLE``. A device that fails keeps no
trace of the message: its node's ``context.state`` is put back as it was before the ClientApp ran.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import simpy
from flwr.app import Error, Message
from flwr.common.constant import ErrorCode
from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects

from iotfl_sim.fl.cost.energy import training_power_w
from iotfl_sim.flower.node import NodeWork, run_node
from iotfl_sim.sim.device import DeviceTasks
from iotfl_sim.sim.round import Task

UNAVAILABLE = "the node is unavailable (iotfl-sim: {reason} during {phase})"


@lru_cache(maxsize=1)
def host_flops_per_s() -> float:
    """This machine's FLOP/s by the benchmark a profile's ``compute.flops`` is measured with (``profiles measure``:
    a dense 3x3 convolution's training work), measured once per process (0.3 s)."""
    from iotfl_sim.fl.cost.measure import conv_flops_per_s

    return conv_flops_per_s(0.3)[0]


def wire_bytes(message: Message) -> int:
    """The bytes of ``message`` as Flower ships it: every object of its tree, deflated (header, metadata, each
    record and each array chunk)."""
    return sum(len(obj.deflate()) for obj in get_all_nested_objects(message).values())


@dataclass
class Sent:
    """One pushed message: its node (device ``d``), when it was pushed, its task and what answers it."""

    message: Message
    device: int
    pushed_at: float
    task: Task | None = None
    reply: Message | None = None


class FlowerTasks(DeviceTasks):
    """``DeviceTasks`` whose task is a Flower message: ``sent_of(task)`` gives it, ``context_of(d)`` the node's
    Flower context, ``header_bytes`` is added to each transfer."""

    def configure(
        self,
        client_app: Any,
        sent_of: Callable[[Task], Sent],
        context_of: Callable[[int], Any],
        header_bytes: float,
        stopping: Callable[[], bool],
        host_clock: Any,
    ) -> None:
        self.client_app = client_app
        self.sent_of = sent_of
        self.context_of = context_of
        self.header_bytes = header_bytes
        self.stopping = stopping  # a stop was requested: no ClientApp starts any more
        self.host_clock = host_clock  # sim.host: the run's host seconds by kind (times["train"], times["eval"])
        self.host_timed = 0  # messages whose ClientApp ran no PyTorch operation: priced by host time
        self.not_run = 0  # messages whose ClientApp never ran because the run was stopping
        self.queue_end: dict[int, simpy.Event] = {}  # device -> when its last queued message is done

    def run(self, task: Task):
        """A node handles its messages one at a time, in the order they were pushed (as a SuperNode does): a
        message pushed while its node is busy waits for the one before it (its TTL counting from the push)."""
        d = task.assignment.device
        before = self.queue_end.get(d)
        done = self.queue_end[d] = self.env.event()
        try:
            if before is not None and not before.triggered:
                yield before
            self.fleet.busy[d] = True
            yield from self.handle(task)
        finally:
            done.succeed()
            if self.queue_end.get(d) is done:
                del self.queue_end[d]
                self.fleet.busy[d] = False

    def handle(self, task: Task):
        host, f = self.host, self.fleet
        d, rnd = task.assignment.device, task.rnd
        sent = self.sent_of(task)
        msg = sent.message
        host.log(rnd, d, "dispatch", message=msg.metadata.message_type)
        if not f.alive(d, self.env.now):
            return self.refuse(task, sent, "depleted", "dispatch")
        if not self.availability.online(d, self.env.now, rnd):
            return self.refuse(task, sent, "offline", "dispatch")
        nbytes = wire_bytes(msg) + self.header_bytes
        self.traffic.downloaded(task, nbytes)
        reason, at = yield from self.transfer(task, nbytes, up=False)
        if reason is not None:
            return self.refuse(task, sent, reason, "download", at)
        free = f.sample_free_memory(d, self.env.now, rnd)
        host.log(rnd, d, "arrive", free=round(free / host.memory_scale, 4))
        f.settle(d, self.env.now)
        if self.stopping():  # the app is stopped at its next message: this one's real work would be wasted
            self.not_run += 1
            f.tasks[d] -= 1  # not a task of the run: it never started
            if not task.report.triggered:
                task.report.succeed()
            return
        context = self.context_of(d)
        before = copy.deepcopy(context.state)
        work = run_node(self.client_app, msg, context, f"node {msg.metadata.dst_node_id} (partition {d}), "
                        f"message {msg.metadata.message_type} of group {msg.metadata.group_id!r}")  # fmt: skip
        self.host_clock.times["eval" if msg.metadata.message_type == "evaluate" else "train"] += work.host_s
        need = float(work.peak_bytes)
        if need > free:
            context.state = before
            return self.refuse(task, sent, "oom", "train", need=round(need / host.memory_scale, 4),
                               free=round(free / host.memory_scale, 4))  # fmt: skip
        reason, at = yield from self.choose_mode(task, task.assignment)  # the group's power_policy
        if reason is not None:
            context.state = before
            return self.refuse(task, sent, reason, "train", at)
        duration, power = self.price(work, d, rnd)
        host.log(rnd, d, "train_start", flops=work.flops)
        reason, at = yield from self.train(task, duration, power, need)
        if reason is not None:
            context.state = before
            return self.refuse(task, sent, reason, "train", at)
        host.log(rnd, d, "train_end")
        reply = work.reply
        nbytes = wire_bytes(reply) + self.header_bytes
        reason, at = yield from self.transfer(task, nbytes, up=True)
        if reason is not None:
            context.state = before
            return self.refuse(task, sent, reason, "upload", at)
        self.traffic.uploaded(task, nbytes)
        task.upload_bytes = nbytes
        task.status = "completed"
        task.finished_at = self.env.now
        host.log(rnd, d, "upload", bytes=nbytes)
        ttl = msg.metadata.ttl
        if ttl is not None and self.env.now - sent.pushed_at > ttl:
            reply = Message(Error(ErrorCode.REPLY_MESSAGE_UNAVAILABLE, "the reply arrived after the message's "
                                  f"TTL of {ttl:g} simulated seconds"), reply_to=msg)  # fmt: skip
        sent.reply = reply
        if not task.report.triggered:
            task.report.succeed()

    def refuse(self, task: Task, sent: Sent, reason: str, phase: str, at: float | None = None, **fields: Any) -> None:
        """The task failed for ``reason``: the server's error reply, and the failure recorded as any task's."""
        if reason == "oom":
            error = Error(ErrorCode.CLIENT_APP_CRASHED, f"the ClientApp ran out of memory (iotfl-sim: needs "
                          f"{fields['need']:g}, has {fields['free']:g} free)")  # fmt: skip
        else:
            error = Error(ErrorCode.NODE_UNAVAILABLE, UNAVAILABLE.format(reason=reason, phase=phase))
        sent.reply = Message(error, reply_to=sent.message)
        self.fail(task, reason, at=at, phase=phase, **fields)

    def price(self, work: NodeWork, d: int, rnd: int) -> tuple[float, float]:
        """(seconds, watts) of the ops ``work`` ran, on device ``d``'s profile: the per-operator roofline where the
        profile has a memory bandwidth, else FLOPs / FLOP/s; times the round's compute jitter. A ClientApp that ran
        no PyTorch operation (NumPy, scikit-learn, pure Python) has no op table: its host seconds times this
        machine's speed over the device's (``host_flops_per_s`` / ``compute.flops``), at the training power."""
        f = self.fleet
        if work.trace.n_ops == 0:
            self.host_timed += 1
            return work.host_s * host_flops_per_s() / float(f.flops[d]), float(f.train_w[d])
        rates = f.roofline(d)
        if rates is None:
            base = work.trace.total_flops / float(f.flops[d])
            parts = None
        else:
            flops_s, bw, overhead, kernels, _ = rates
            base = work.trace.time(flops_s, bw, overhead, kernels)
            parts = work.trace.parts(flops_s, bw, overhead, kernels)
        terms = f.activity_terms(d)
        power = float(f.train_w[d]) if terms is None or parts is None else training_power_w(terms, parts)
        return f.jittered(d, base, rnd), power
