"""Flower's earlier ServerApp, ``ServerApp(server_fn=...)`` (a ``flwr.server.Server`` running one of Flower's legacy
strategies), on the simulated grid: on one thread, with the same numbers in every run.

Flower runs such an app through ``flwr.server.compat.start_grid``: a thread polls the Grid for node ids every 5 s
of real time, and each round the Server sends one message per client from a pool of threads, each thread waiting
for its own reply (``GridClientProxy``). Here the app's Server, Strategy and client manager run as they are, with
two differences, both in how messages reach the grid:

- the client manager is brought up to date from ``grid.get_node_ids()`` before each of its ``num_available``,
  ``all`` and ``sample`` calls (the calls Flower's polling thread refreshes it on too), on the app's own thread;
  a ``sample`` that needs more nodes than are selectable waits, in simulated time, until that many are (Flower's
  waits up to a day of real time), and fails in one line if the fleet never has them;
- a round's ``fit`` (or ``evaluate``) messages go out together, in one ``send_and_receive`` that waits at most the
  round's timeout (``ServerConfig.round_timeout``, simulated seconds, also each message's TTL): Flower's
  ``fit_clients`` and ``evaluate_clients`` are replaced for the run. Results and failures come back in the order
  the strategy configured its clients (Flower's threads give them in the order they finish, which changes from
  run to run); a failure is the exception ``GridClientProxy`` would have raised for that reply (an error reply,
  or no reply within the timeout), a reply whose status is not OK a (proxy, result) pair, as in Flower.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from flwr.app import Message
from flwr.app.message_type import MessageType
from flwr.common import Code
from flwr.compat.common import recorddict_compat as compat
from flwr.server import server as flower_server
from flwr.server.compat.grid_client_proxy import GridClientProxy
from flwr.server.server import init_defaults, run_fl
from flwr.serverapp import server_app as flower_server_app

from iotfl_sim.flower.grid import SimulatedGrid

REFRESHED = ("num_available", "all")  # ``sample`` is refreshed too, with a wait for the nodes it needs


@contextmanager
def legacy_runtime() -> Iterator[None]:
    """While the run lasts, Flower's ``start_grid`` (what a ServerApp without ``main`` calls, after its lifespan and
    ``server_fn``) is ``start_on_the_grid``: a Message API app never calls it, so every app runs through its own
    ``ServerApp.__call__``."""
    saved = flower_server_app.start_grid
    flower_server_app.start_grid = start_on_the_grid
    try:
        yield
    finally:
        flower_server_app.start_grid = saved


def start_on_the_grid(
    *, grid: SimulatedGrid, server: Any = None, config: Any = None, strategy: Any = None, client_manager: Any = None
) -> Any:
    """``flwr.server.compat.start_grid`` run as described above: the app's Server (or the default one with its
    strategy and client manager) following the grid, its rounds' messages in batches."""
    server, config = init_defaults(server=server, config=config, strategy=strategy, client_manager=client_manager)
    follow_the_grid(grid, server.client_manager())
    with messages_in_batches(grid):
        return run_fl(server=server, config=config)


def follow_the_grid(grid: SimulatedGrid, client_manager: Any) -> None:
    """Keep ``client_manager``'s clients the grid's selectable nodes, refreshed before each of its queries."""
    registered: dict[int, GridClientProxy] = {}
    run_id = grid.run.run_id

    def refresh(at_least: int | None = None) -> None:
        ids = list(grid.get_node_ids() if at_least is None else grid.wait_for_nodes(at_least))
        for node_id in [n for n in registered if n not in set(ids)]:
            client_manager.unregister(registered.pop(node_id))
        for node_id in ids:
            if node_id not in registered:
                proxy = GridClientProxy(node_id=node_id, grid=grid, run_id=run_id)
                if not client_manager.register(proxy):
                    raise RuntimeError(f"the app's client manager refused to register node {node_id}")
                registered[node_id] = proxy

    def refreshed(name: str) -> Callable[..., Any]:
        original = getattr(client_manager, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            refresh()
            return original(*args, **kwargs)

        return call

    sample = client_manager.sample

    def sample_when_available(num_clients: int, min_num_clients: int | None = None, criterion: Any = None) -> Any:
        refresh(num_clients if min_num_clients is None else min_num_clients)
        return sample(num_clients, min_num_clients, criterion)

    for name in REFRESHED:
        setattr(client_manager, name, refreshed(name))
    client_manager.sample = sample_when_available


@contextmanager
def messages_in_batches(grid: SimulatedGrid) -> Iterator[None]:
    """``flwr.server.server``'s ``fit_clients`` / ``evaluate_clients`` replaced by one batched exchange each."""

    def fit_clients(client_instructions: list, max_workers: Any, timeout: float | None, group_id: int) -> tuple:
        return exchange(grid, client_instructions, timeout, group_id, MessageType.TRAIN,
                        lambda ins: compat.fitins_to_recorddict(ins, keep_input=True),
                        lambda content: compat.recorddict_to_fitres(content, keep_input=False))  # fmt: skip

    def evaluate_clients(client_instructions: list, max_workers: Any, timeout: float | None, group_id: int) -> tuple:
        return exchange(grid, client_instructions, timeout, group_id, MessageType.EVALUATE,
                        lambda ins: compat.evaluateins_to_recorddict(ins, keep_input=True),
                        compat.recorddict_to_evaluateres)  # fmt: skip

    saved = flower_server.fit_clients, flower_server.evaluate_clients
    flower_server.fit_clients, flower_server.evaluate_clients = fit_clients, evaluate_clients
    try:
        yield
    finally:
        flower_server.fit_clients, flower_server.evaluate_clients = saved


def exchange(
    grid: SimulatedGrid,
    client_instructions: list,
    timeout: float | None,
    group_id: int,
    message_type: str,
    to_content: Callable[[Any], Any],
    from_content: Callable[[Any], Any],
) -> tuple[list, list]:
    """One message per (proxy, instruction), sent together; (results, failures) as Flower's threads make them."""
    messages = [
        Message(content=to_content(ins), message_type=message_type, dst_node_id=proxy.node_id,
                group_id=str(group_id) if group_id else "", ttl=timeout)
        for proxy, ins in client_instructions
    ]  # fmt: skip
    replies = {r.metadata.reply_to_message_id: r for r in grid.send_and_receive(messages, timeout=timeout)}
    results: list = []
    failures: list = []
    for (proxy, _), message in zip(client_instructions, messages, strict=True):
        reply = replies.get(message.metadata.message_id)
        if reply is None:  # GridClientProxy's words for a reply that never came
            failures.append(ValueError("Expected one Message but got: 0"))
        elif reply.has_error():
            failures.append(ValueError(
                f"Message contains an Error (reason: {reply.error.reason}). It originated during client-side "
                "execution of a message."
            ))  # fmt: skip
        else:
            res = from_content(reply.content)
            (results if res.status.code == Code.OK else failures).append((proxy, res))
    return results, failures
