"""flowerapp: the same server in Flower's earlier layout, a ServerApp made by ``server_fn`` with the legacy FedAvg."""

import torch
from flwr.common import Context, ndarrays_to_parameters
from flwr.server import ServerApp, ServerAppComponents, ServerConfig
from flwr.server.strategy import FedAvg

from flowerapp.task import Net, get_weights


def server_fn(context: Context) -> ServerAppComponents:
    cfg = context.run_config
    torch.manual_seed(int(cfg["seed"]))
    lr = float(cfg["lr"])
    strategy = FedAvg(
        fraction_fit=float(cfg["fraction-train"]),
        fraction_evaluate=float(cfg["fraction-evaluate"]),
        min_available_clients=int(cfg["min-available-nodes"]),
        initial_parameters=ndarrays_to_parameters(get_weights(Net())),
        on_fit_config_fn=lambda server_round: {"server-round": server_round, "lr": lr},
        on_evaluate_config_fn=lambda server_round: {"server-round": server_round},
    )
    return ServerAppComponents(strategy=strategy, config=ServerConfig(num_rounds=int(cfg["num-server-rounds"])))


app = ServerApp(server_fn=server_fn)
