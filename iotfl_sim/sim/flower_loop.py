"""The server mode of a Flower app run (``algorithm.name: flower``): the app's ServerApp, on its own thread
(``bridge``), drives the simulated fleet through ``grid.SimulatedGrid``; this loop answers its requests on the
simulated clock and turns its rounds into ``rounds.csv`` rows.

A round is a message group: the group id of a message, else the ``server-round`` of its config (Flower's Message
API strategies put it in every train and evaluate message; its legacy ones set the group id). When the app pushes
messages of a new round, the previous round's row is written (at that instant); the last one's when the app returns. Each row has the system's columns of any run (time, tasks by outcome, energy, bytes)
and the app's metrics: each metric ``algorithm.metrics`` names, averaged over the round's replies (train and
evaluate alike) with ``num-examples`` as weight (how Flower's FedAvg aggregates them), one column each;
``algorithm.accuracy_metric`` is also ``acc_full``.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import simpy
from flwr.app import Context, Message, RecordDict
from flwr.supercore.run import Run

from iotfl_sim.algorithms.base import AggregateWork, Assignment
from iotfl_sim.core.errors import ScenarioError
from iotfl_sim.fl.submodel import SubmodelSpec
from iotfl_sim.flower.apps import FlowerApp, app_folder
from iotfl_sim.flower.bridge import AppStopped, AppThread, Finished
from iotfl_sim.flower.grid import NodeIds, Pull, Push, SendReceive, SimulatedGrid
from iotfl_sim.flower.legacy import legacy_runtime
from iotfl_sim.flower.runtime import serverapp_process
from iotfl_sim.seeding import stream
from iotfl_sim.sim.flower_tasks import FlowerTasks, Sent, host_flops_per_s
from iotfl_sim.sim.round import Round, RoundStart, start_task
from iotfl_sim.sim.server_loop import ServerLoop
from iotfl_sim.sim.toolkit import Toolkit

if TYPE_CHECKING:
    from iotfl_sim.sim.engine import Simulation

APP_SPEC = SubmodelSpec(1.0, name="app")  # a task's "submodel": whatever the app's message carries
WEIGHT_KEY = "num-examples"  # the metric Flower's strategies weigh replies by
LEGACY_REPLIES = ("fitres", "evaluateres")  # the record prefixes of an earlier NumPyClient's replies


@dataclass
class Group:
    """One message group (a round of the app): its Round and the metrics of the replies handed over so far."""

    rd: Round
    metrics: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # metric -> (weight, value) per reply


def round_key(msg: Message) -> str:
    """The round a message belongs to: its group id, else the ``server-round`` its config records carry (what
    Flower's Message API strategies send), else "" (the current round goes on)."""
    if msg.metadata.group_id:
        return str(msg.metadata.group_id)
    if msg.has_content():
        for record in msg.content.config_records.values():
            if "server-round" in record:
                return str(record["server-round"])
    return ""


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def reply_metrics(content: RecordDict) -> list[tuple[float, dict[str, Any]]]:
    """(weight, metrics) of a reply's content. The Message API's: each MetricRecord, weighted by its
    ``num-examples``. An earlier NumPyClient's (``fitres.*`` / ``evaluateres.*`` records, Flower's compat layout):
    its metrics dict weighted by its ``num_examples``, an evaluation's loss as ``eval_loss``."""
    metric_records, config_records = content.metric_records, content.config_records
    for res in LEGACY_REPLIES:
        if f"{res}.num_examples" in metric_records:
            weight = float(metric_records[f"{res}.num_examples"]["num_examples"])
            values = dict(config_records.get(f"{res}.metrics", {}))
            if f"{res}.loss" in metric_records:
                values.setdefault("eval_loss", metric_records[f"{res}.loss"]["loss"])
            return [(weight, values)]
    return [(float(r.get(WEIGHT_KEY, 1.0)), dict(r)) for r in metric_records.values()]


def node_ids(seed: int, n: int) -> list[int]:
    """``n`` distinct node ids, random 62-bit numbers as a SuperLink gives (never 0 or its own id, 1), the same
    for the same seed."""
    rng = stream(seed, "flower_nodes")
    ids: list[int] = []
    seen: set[int] = set()
    while len(ids) < n:
        x = int(rng.integers(2, 2**62))
        if x not in seen:
            seen.add(x)
            ids.append(x)
    return ids


class FlowerLoop(ServerLoop):
    stop_note = "at the app's next message"

    def __init__(self, sim: Simulation, app: FlowerApp, tasks: FlowerTasks, folder: Path) -> None:
        self.sim = sim
        self.folder = folder
        self.app = app
        self.tasks = tasks
        self.metrics = list(sim.sc.algorithm.metrics)
        self.columns = tuple(m for m in self.metrics if m != "train_loss")
        self.unrecorded: set[str] = set()
        n = sim.fleet.n
        self.node_ids = node_ids(sim.sc.seed, n)
        self.device_of = {nid: d for d, nid in enumerate(self.node_ids)}
        self.run_id = int(stream(sim.sc.seed, "flower_run").integers(1, 2**62))
        self.contexts = [
            Context(self.run_id, nid, {"partition-id": d, "num-partitions": n}, RecordDict(), dict(app.run_config))
            for d, nid in enumerate(self.node_ids)
        ]
        self.sent: dict[str, Sent] = {}
        self.counter = 0
        self.group: Group | None = None
        self.group_id: str | None = None
        self.rounds = 0
        self.kit = Toolkit(sim)
        tasks.configure(app.client_app, lambda t: t.assignment.extras["sent"], lambda d: self.contexts[d],
                        sim.sc.server.header_bytes, lambda: sim.status.stop_requested, sim.host)  # fmt: skip

    # ------------------------------------------------------------ the process

    def run(self) -> Generator[Any, Any, None]:
        context = Context(self.run_id, 0, {}, RecordDict(), dict(self.app.run_config))
        grids: list[SimulatedGrid] = []
        server_app = self.app.server_app
        thread = AppThread(lambda: server_app(grid=grids[0], context=context))
        grids.append(SimulatedGrid(thread, Run.create_empty(self.run_id)))
        # an app in Flower's earlier layout runs its Server and legacy strategy through flower.legacy
        with serverapp_process(self.run_id, self.sim.sc.seed), app_folder(self.folder), legacy_runtime():
            request = yield from self.serve(thread)
        if self.tasks.not_run:  # stopped in the middle of a round: its row would count only the messages that ran
            self.group = None
        self.close_group()
        error = request.error
        if error is not None and not isinstance(error, AppStopped):
            if isinstance(error, ScenarioError):
                raise error
            raise ScenarioError(
                f"algorithm.server_app raised {type(error).__name__}: {error}; fix the app (under `flwr run` it "
                "gives the traceback)"
            )

    def serve(self, thread: AppThread) -> Generator[Any, Any, Finished]:
        """Answer the app's requests until it returns (or a stop request ends it)."""
        sim = self.sim
        request = thread.start()
        while not isinstance(request, Finished):
            if sim.status.stop_requested:
                sim.status.interrupted = True
                return thread.stop()
            try:
                answer = yield from self.handle(request)
            except BaseException:
                thread.stop()  # the app's thread unwinds before the error (a ClientApp's, the simulator's) is reported
                raise
            request = thread.answer(answer)
            if thread.misuse is not None:
                if not isinstance(request, Finished):
                    thread.stop()
                raise ScenarioError(thread.misuse)
        return request

    def handle(self, request: Any) -> Generator[Any, Any, Any]:
        if isinstance(request, NodeIds):
            return (yield from self.node_ids_now(request.at_least))
        if isinstance(request, Push):
            return [s.message.metadata.message_id for s in self.push(request.messages)]
        if isinstance(request, Pull):
            return (yield from self.pull(request.message_ids))
        if isinstance(request, SendReceive):
            pushed = self.push(request.messages)
            events = [self.report_of(s) for s in pushed]
            waiting: list[simpy.Event] = [simpy.AllOf(self.sim.env, events)]
            if request.timeout is not None:
                waiting.append(self.sim.env.timeout(max(0.0, float(request.timeout))))
            if events:
                yield simpy.AnyOf(self.sim.env, waiting)
            replies = self.collect([s.message.metadata.message_id for s in pushed])
            for s in pushed:  # a reply still out is not waited for any more: dropped when it comes, as Flower does
                self.sent.pop(s.message.metadata.message_id, None)
            yield from self.aggregate(replies)
            return replies
        raise TypeError(f"unknown request {request!r}")

    # ------------------------------------------------------------ the grid's answers

    def node_ids_now(self, at_least: int | None = None) -> Generator[Any, Any, list[int]]:
        """The nodes selectable now (online, alive, not busy with another message, not known to be depleted), once
        at least ``at_least`` are, default ``server.min_participants`` (waiting ``retry_s`` at a time)."""
        sim = self.sim
        possible = at_least is None or at_least <= sim.fleet.n
        if not possible or not (yield from self.kit.wait_for_participants(self.rounds, need=at_least)):
            if at_least is None:
                raise ScenarioError(
                    f"server.min_participants: fewer than {sim.sc.server.min_participants} devices ever became "
                    "selectable for the app's next request; lower it or give the fleet more devices"
                )
            raise ScenarioError(
                f"algorithm.server_app: the app's strategy waits for {at_least} available nodes (its "
                f"min_available_clients, min_fit_clients or min_evaluate_clients), and fewer ever became selectable "
                f"(the fleet has {sim.fleet.n} devices); lower those minimums or give the fleet more devices"
            )
        return [self.node_ids[int(d)] for d in sim.view.selectable()]

    def push(self, messages: list[Any]) -> list[Sent]:
        sim = self.sim
        pushed = []
        for msg in messages:
            if not isinstance(msg, Message):
                raise ScenarioError(f"algorithm.server_app pushed a {type(msg).__name__}, not a flwr Message")
            d = self.device_of.get(int(msg.metadata.dst_node_id))
            if d is None:
                raise ScenarioError(
                    f"algorithm.server_app sent a message to node {msg.metadata.dst_node_id}, which is not one of the "
                    "grid's nodes (get_node_ids lists them)"
                )
            self.open_group(round_key(msg))
            self.counter += 1
            msg.metadata.__dict__["_message_id"] = hashlib.sha256(f"{sim.sc.seed}:{self.counter}".encode()).hexdigest()
            msg.metadata.__dict__["_delivered_at"] = ""
            sent = Sent(msg, d, sim.env.now)
            assert self.group is not None
            rd = self.group.rd
            # the task finds its message in its assignment (FlowerTasks.sent_of)
            a = Assignment(d, APP_SPEC, level=msg.metadata.message_type, extras={"sent": sent})
            sent.task = start_task(sim.env, a, rd, sim.fleet, self.tasks.run)
            rd.tasks.append(sent.task)
            self.sent[msg.metadata.message_id] = sent
            pushed.append(sent)
        return pushed

    def report_of(self, sent: Sent) -> simpy.Event:
        assert sent.task is not None
        return sent.task.report

    def pull(self, ids: list[str]) -> Generator[Any, Any, list[Message]]:
        waiting = [self.sent[i] for i in ids if i in self.sent and self.sent[i].reply is None]
        ready = [i for i in ids if i in self.sent and self.sent[i].reply is not None]
        if not ready and waiting:
            yield simpy.AnyOf(self.sim.env, [self.report_of(s) for s in waiting])
        replies = self.collect(ids)
        yield from self.aggregate(replies)
        return replies

    def aggregate(self, replies: list[Message]) -> Generator[Any, Any, None]:
        """The server's work on the arrays ``replies`` bring (what a strategy's aggregate_train averages), priced by
        the server profile as every method's aggregation is (``AggregateWork``) and spent on the simulated clock
        before the app gets them."""
        sizes, tensors = [], 0
        for reply in replies:
            if reply.has_error() or not reply.has_content():
                continue
            arrays = [a for record in reply.content.array_records.values() for a in record.values()]
            if arrays:
                sizes.append(sum(math.prod(a.shape) for a in arrays))
                tensors += len(arrays)
        if not sizes or self.group is None:
            return
        self.sim.system.server_work.charge("aggregate", AggregateWork(float(sum(sizes)), float(max(sizes)), tensors))
        yield from self.kit.serve(self.group.rd)

    def collect(self, ids: list[str]) -> list[Message]:
        """The replies in for ``ids``, each handed over once (as a SuperLink deletes what it delivered)."""
        out = []
        for i in ids:
            sent = self.sent.get(i)
            if sent is None or sent.reply is None:
                continue
            del self.sent[i]  # the message and its reply go with it: a long run keeps no past model in memory
            self.note_metrics(sent.reply)
            out.append(sent.reply)
        return out

    def summary(self) -> dict[str, Any]:
        """What summary.json says of the app: which, under which Flower, what it reported that no column holds."""
        from importlib import metadata

        cfg = self.sim.sc.algorithm
        return {"flower": {
            "version": metadata.version("flwr"),
            "server_app": cfg.server_app,
            "client_app": cfg.client_app,
            "rounds": self.rounds,
            "metrics_not_recorded": sorted(self.unrecorded),
            # a ClientApp that ran no PyTorch operation: its time is host time x this machine's speed over the
            # device's (FlowerTasks.price), which changes from run to run
            "messages_timed_by_the_host": self.tasks.host_timed,
            "host_flops_per_s": host_flops_per_s() if self.tasks.host_timed else None,
            # a stop in the middle of a round: the messages whose ClientApp it kept from starting (that round's row
            # is left out)
            "messages_not_run_at_the_stop": self.tasks.not_run,
            "checkpoints": "none: the app's state lives in its own code",
        }}  # fmt: skip

    # ------------------------------------------------------------ rounds and rows

    def open_group(self, group_id: str) -> None:
        if self.group is not None and group_id in ("", self.group_id):
            return
        self.close_group()
        sim = self.sim
        now = sim.env.now
        energy = float(sum(v.sum() for v in sim.fleet.class_energy(now).values()))
        start = RoundStart(now, energy, sim.system.traffic.down, sim.system.traffic.up)
        rd = Round(sim.env, self.rounds, 0, start)
        rd.enough = sim.env.event()
        self.group, self.group_id = Group(rd), group_id

    def note_metrics(self, reply: Message) -> None:
        if self.group is None or reply.has_error() or not reply.has_content():
            return
        for weight, record in reply_metrics(reply.content):
            values = {k: float(v) for k, v in record.items() if is_number(v) and k in self.metrics}
            self.unrecorded.update(k for k in record if k not in self.metrics and k != WEIGHT_KEY)
            for k, v in values.items():
                self.group.metrics.setdefault(k, []).append((weight, v))

    def close_group(self) -> None:
        group, sim = self.group, self.sim
        if group is None:
            return
        self.group = None
        rd = group.rd
        rd.wanted = len(rd.tasks)  # the app takes every reply in (a task still running missed its timeout)
        outcomes = rd.close(sim.fleet, sim.log)
        for o in outcomes:
            if o.status == "depleted":
                sim.view.known_gone[o.assignment.device] = True
        row = rd.row(sim.env.now, outcomes, [], sim.fleet, sim.system.traffic)
        row.update(self.metric_columns(group))
        row["server_time_s"] = rd.server_s
        row.update({f"server_{k}_s": v for k, v in rd.server_split.items()})
        row["server_energy_j"] = sim.system.server_time * sim.system.server_cost.power_w
        self.kit.add_carbon(row)
        sim.record(self.rounds, row)
        self.rounds += 1

    def metric_columns(self, group: Group) -> dict[str, Any]:
        out: dict[str, Any] = dict.fromkeys(self.metrics)
        for k, pairs in group.metrics.items():
            total = sum(w for w, _ in pairs)
            out[k] = sum(w * v for w, v in pairs) / total if total > 0 else None
        out["acc_full"] = out.get(self.sim.sc.algorithm.accuracy_metric)
        return out


def flower_loop(sim: Simulation, availability: Any, folder: Any) -> FlowerLoop:
    """The loop of a Flower app run: the app loaded from ``folder`` (the scenario's) and its device tasks."""
    from iotfl_sim.flower.apps import load_app

    cfg = sim.sc.algorithm
    if sim.system.memory_need.relative:
        raise ScenarioError(
            "fleet.memory_units: a Flower app's memory is measured in bytes; give the fleet's memory in MB "
            "(memory_units: mb)"
        )
    base = Path(folder) if folder is not None else Path.cwd()
    app = load_app(cfg.server_app, cfg.client_app, cfg.run_config, base)
    tasks = FlowerTasks(sim.env, sim.fleet, availability, sim, sim.system.traffic, sim.system.training_time)
    sim.system.tasks = tasks
    return FlowerLoop(sim, app, tasks, base)
