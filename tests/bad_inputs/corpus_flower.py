"""Flower apps for the bad-input corpus (tests/bad_inputs/flower_*.yaml): a ServerApp that runs one FedAvg round,
a ClientApp that fails on purpose, and an object that is no app."""

import torch
from flwr.app import ArrayRecord, Context
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

not_an_app = 42

server = ServerApp()


@server.main()
def _main(grid: Grid, context: Context) -> None:
    strategy = FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_available_nodes=2)
    strategy.start(grid=grid, initial_arrays=ArrayRecord({"w": torch.zeros(2)}), num_rounds=1)


raising = ClientApp()


@raising.train()
def _train(msg, context):
    raise RuntimeError("this ClientApp fails on purpose")
