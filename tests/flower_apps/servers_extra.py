"""ServerApps for tests/test_flower.py beside the example's flowerapp package: FedAdam and FedProx from Flower's
library, a FedAvg subclass that records what its aggregation sees; the same in Flower's earlier layout
(``ServerApp(server_fn=...)`` with legacy strategies); an app that calls its Grid from a thread of its own."""

import torch
from flowerapp.task import Net
from flwr.app import ArrayRecord, ConfigRecord, Context
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAdam, FedAvg, FedProx

SEEN: list[dict] = []  # per aggregate_train call: the replies it got and how many carried an error


class RecordingFedAvg(FedAvg):
    def aggregate_train(self, server_round, replies):
        replies = list(replies)
        SEEN.append({"round": server_round, "replies": len(replies), "errors": sum(m.has_error() for m in replies),
                     "codes": sorted(m.error.code for m in replies if m.has_error())})
        return super().aggregate_train(server_round, replies)


def _start(strategy, grid: Grid, context: Context) -> None:
    torch.manual_seed(int(context.run_config["seed"]))
    strategy.start(
        grid=grid, initial_arrays=ArrayRecord(Net().state_dict()), num_rounds=int(context.run_config["num-server-rounds"]),
        train_config=ConfigRecord({"lr": float(context.run_config["lr"])}),
    )


fedadam = ServerApp()


@fedadam.main()
def _fedadam(grid: Grid, context: Context) -> None:
    _start(FedAdam(fraction_train=1.0, fraction_evaluate=1.0, min_available_nodes=2), grid, context)


fedprox = ServerApp()


@fedprox.main()
def _fedprox(grid: Grid, context: Context) -> None:
    _start(FedProx(fraction_train=1.0, fraction_evaluate=1.0, min_available_nodes=2, proximal_mu=0.1), grid, context)


recording = ServerApp()


@recording.main()
def _recording(grid: Grid, context: Context) -> None:
    _start(RecordingFedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_available_nodes=2), grid, context)


not_an_app = 42


GLOBALS: list[dict] = []  # the global arrays after each round (evaluate_fn), of the `recorded` app


def _record(server_round: int, arrays: ArrayRecord):
    GLOBALS.append({k: v.detach().clone() for k, v in arrays.to_torch_state_dict().items()})
    return None


recorded = ServerApp()


@recorded.main()
def _recorded(grid: Grid, context: Context) -> None:
    torch.manual_seed(int(context.run_config["seed"]))
    strategy = FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_available_nodes=4)
    strategy.start(
        grid=grid, initial_arrays=ArrayRecord(Net().state_dict()), num_rounds=int(context.run_config["num-server-rounds"]),
        train_config=ConfigRecord({"lr": float(context.run_config["lr"])}), evaluate_fn=_record,
    )


# ---------------------------------------------------------------- Flower's earlier layout (server_fn, legacy strategies)

LEGACY_SEEN: list[dict] = []  # per aggregate_fit call of `legacy_recording`: results, failures and their kinds
LEGACY_GLOBALS: list[dict] = []  # the global arrays after each round (evaluate_fn), of `legacy_recorded`


def _legacy_server(strategy_class, context: Context, **options):
    from flowerapp.task import get_weights
    from flwr.common import ndarrays_to_parameters
    from flwr.server import ServerAppComponents, ServerConfig

    cfg = context.run_config
    torch.manual_seed(int(cfg["seed"]))
    lr = float(cfg["lr"])
    strategy = strategy_class(
        initial_parameters=ndarrays_to_parameters(get_weights(Net())),
        on_fit_config_fn=lambda server_round: {"server-round": server_round, "lr": lr},
        on_evaluate_config_fn=lambda server_round: {"server-round": server_round}, **options,
    )  # fmt: skip
    return ServerAppComponents(strategy=strategy, config=ServerConfig(num_rounds=int(cfg["num-server-rounds"])))


def _legacy_recording(context: Context):
    from flwr.server.strategy import FedAvg as LegacyFedAvg

    class RecordingLegacyFedAvg(LegacyFedAvg):
        def aggregate_fit(self, server_round, results, failures):
            LEGACY_SEEN.append({"round": server_round, "results": len(results),
                                "failures": [str(f) if isinstance(f, BaseException) else "status" for f in failures]})
            return super().aggregate_fit(server_round, results, failures)

    return _legacy_server(RecordingLegacyFedAvg, context, fraction_evaluate=0.0, min_available_clients=2)


def _legacy_recorded(context: Context):
    from flowerapp.task import Net as AppNet
    from flowerapp.task import set_weights
    from flwr.server.strategy import FedAvg as LegacyFedAvg

    def record(server_round, ndarrays, config):
        net = AppNet()
        set_weights(net, ndarrays)
        LEGACY_GLOBALS.append({k: v.detach().clone() for k, v in net.state_dict().items()})
        return None

    return _legacy_server(LegacyFedAvg, context, fraction_evaluate=0.0, min_available_clients=4, min_fit_clients=4,
                          evaluate_fn=record)  # fmt: skip


def _legacy_fedadam(context: Context):
    from flwr.server.strategy import FedAdam as LegacyFedAdam

    return _legacy_server(LegacyFedAdam, context, fraction_evaluate=1.0, min_available_clients=2)


legacy_recording = ServerApp(server_fn=_legacy_recording)
legacy_recorded = ServerApp(server_fn=_legacy_recorded)
legacy_fedadam = ServerApp(server_fn=_legacy_fedadam)


def _legacy_components(context: Context):
    from flwr.server import ServerAppComponents, ServerConfig
    from flwr.server.strategy import FedAvg as LegacyFedAvg

    return ServerAppComponents(strategy=LegacyFedAvg(), config=ServerConfig(num_rounds=1))


legacy = ServerApp(server_fn=_legacy_components)


# ---------------------------------------------------------------- misuse

threaded = ServerApp()


@threaded.main()
def _threaded(grid: Grid, context: Context) -> None:
    import threading

    errors: list[BaseException] = []

    def ask() -> None:
        try:
            list(grid.get_node_ids())
        except BaseException as e:  # noqa: BLE001 - the app swallows it; the run must not
            errors.append(e)

    t = threading.Thread(target=ask, name="apps-own-thread")
    t.start()
    t.join()
    _start(FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_available_nodes=2), grid, context)


# ---------------------------------------------------------------- two messages to one node; a ClientApp without PyTorch

twice = ServerApp()


@twice.main()
def _twice(grid: Grid, context: Context) -> None:
    """Two train messages to the first node at once, then both replies pulled."""
    from flwr.app import Message, RecordDict

    node = sorted(grid.get_node_ids())[0]
    arrays = ArrayRecord(Net().state_dict())
    config = ConfigRecord({"lr": 0.1, "server-round": 1})
    ids = list(grid.push_messages([
        Message(RecordDict({"arrays": arrays, "config": config}), node, "train", group_id="1") for _ in range(2)
    ]))  # fmt: skip
    got: list = []
    while len(got) < 2:
        got.extend(grid.pull_messages(ids))


numpy_query = ServerApp()


@numpy_query.main()
def _numpy_query(grid: Grid, context: Context) -> None:
    """One round of "query" messages to every node, answered by numpy_client's ClientApp (no PyTorch)."""
    from flwr.app import Message, RecordDict

    nodes = sorted(grid.get_node_ids())
    replies = list(grid.send_and_receive([Message(RecordDict(), n, "query", group_id="1") for n in nodes]))
    assert len(replies) == len(nodes) and not any(r.has_error() for r in replies)
