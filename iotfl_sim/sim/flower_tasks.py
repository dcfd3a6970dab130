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
from typing import Any

from flwr.app import Error, Message
from flwr.common.constant import ErrorCode
from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects

from iotfl_sim.fl.cost.energy import training_power_w
from iotfl_sim.flower.node import NodeWork, run_node
from iotfl_sim.sim.device import DeviceTasks
from iotfl_sim.sim.round import Task

UNAVAILABLE = "the node is unavailable (iotfl-sim: {reason} during {phase})"


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
        self, client_app: Any, sent_of: Callable[[Task], Sent], context_of: Callable[[int], Any], header_bytes: float
    ) -> None:
        self.client_app = client_app
        self.sent_of = sent_of
        self.context_of = context_of
        self.header_bytes = header_bytes
        self.unpriced = 0  # messages whose ClientApp ran no PyTorch operation: no work to price

    def run(self, task: Task):
        host, f = self.host, self.fleet
        d, rnd = task.assignment.device, task.rnd
        sent = self.sent_of(task)
        msg = sent.message
        try:
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
            context = self.context_of(d)
            before = copy.deepcopy(context.state)
            work = run_node(self.client_app, msg, context, f"node {msg.metadata.dst_node_id} (partition {d}), "
                            f"message {msg.metadata.message_type} of group {msg.metadata.group_id!r}")  # fmt: skip
            need = float(work.peak_bytes)
            if need > free:
                context.state = before
                return self.refuse(task, sent, "oom", "train", need=round(need / host.memory_scale, 4),
                                   free=round(free / host.memory_scale, 4))  # fmt: skip
            if work.trace.n_ops == 0:
                self.unpriced += 1
            duration, power = self.price(work, d, rnd)
            host.log(rnd, d, "train_start", flops=work.flops)
            reason, at = yield from self.activity(task, duration, power, "compute", memory_need=need)
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
        finally:
            f.busy[d] = False

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
        profile has a memory bandwidth, else FLOPs / FLOP/s; times the round's compute jitter."""
        f = self.fleet
        rates = f.roofline(d)
        if rates is None:
            base = work.trace.total_flops / float(f.flops[d])
            parts = None
        else:
            flops_s, bw, overhead, kernels, _ = rates
            base = work.trace.time(flops_s, bw, overhead, kernels)
            parts = work.trace.parts(flops_s, bw, overhead, kernels)
        terms = f.activity_power[f.group_of[d]] if f.activity_power else None
        power = float(f.train_w[d]) if terms is None or parts is None else training_power_w(terms, parts)
        return f.jittered(d, base, rnd), power
