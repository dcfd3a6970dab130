"""ServerApps for tests/test_flower.py beside the example's flowerapp package: FedAdam and FedProx from Flower's
library, and a FedAvg subclass that records what its aggregation sees."""

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


def _legacy_components(context: Context):
    from flwr.server import ServerAppComponents, ServerConfig
    from flwr.server.strategy import FedAvg as LegacyFedAvg

    return ServerAppComponents(strategy=LegacyFedAvg(), config=ServerConfig(num_rounds=1))


legacy = ServerApp(server_fn=_legacy_components)
