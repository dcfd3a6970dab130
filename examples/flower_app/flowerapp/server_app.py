"""flowerapp: the ServerApp (Message API, FedAvg from Flower's library)."""

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from flowerapp.task import Net

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    torch.manual_seed(int(cfg["seed"]))
    arrays = ArrayRecord(Net().state_dict())
    strategy = FedAvg(
        fraction_train=float(cfg["fraction-train"]),
        fraction_evaluate=float(cfg["fraction-evaluate"]),
        min_available_nodes=int(cfg["min-available-nodes"]),
    )
    strategy.start(
        grid=grid,
        initial_arrays=arrays,
        num_rounds=int(cfg["num-server-rounds"]),
        train_config=ConfigRecord({"lr": float(cfg["lr"])}),
    )
