"""The FedAvg job of `benchmarks/peers.py` written as a Flower simulation (run inside the Flower venv).

Flower's legacy strategy API (`flwr.server.strategy.FedAvg`) on the Ray-backed `run_simulation`: 100 virtual
nodes holding the same IID MNIST shards as the iotfl-sim run, 10 sampled per round, E=1, B=50, SGD lr 0.05 momentum 0.9,
the same `conv` model (built by iotfl-sim's recipe so the architecture is identical), centralised evaluation of
the global model on the 10,000 test images every round, as a Flower user would write it. One CPU per client
actor (Ray then runs one torch thread per actor), so two clients train at once on two cores, like the pool
executor. Prints one JSON line: wall seconds and the accuracy after every round.

    IOTFL_DATA=... PYTHONPATH=<repo>:<repo>/benchmarks <flower-venv>/bin/python benchmarks/peers_flower_app.py --rounds 10 --out r.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F
from flwr.client import ClientApp, NumPyClient
from flwr.common import Context, ndarrays_to_parameters
from flwr.server import ServerApp, ServerAppComponents, ServerConfig
from flwr.server.strategy import FedAvg
from flwr.simulation import run_simulation

from iotfl_sim.fl.data.datasets import load_dataset
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec

DEVICES, PER_ROUND = 100, 10


@lru_cache(maxsize=1)
def data():
    ds = load_dataset("mnist", None)
    shards = np.array_split(np.random.default_rng(0).permutation(len(ds.y_train)), DEVICES)
    return ds, shards


def model() -> torch.nn.Module:
    return ModelRecipe("conv", 10, 1, (28, 28), "none", False).build(SubmodelSpec(1.0))


def get_weights(m: torch.nn.Module) -> list[np.ndarray]:
    return [v.detach().numpy().copy() for v in m.state_dict().values()]


def set_weights(m: torch.nn.Module, weights: list[np.ndarray]) -> None:
    m.load_state_dict({k: torch.from_numpy(np.asarray(w)) for k, w in zip(m.state_dict(), weights, strict=True)})


class MnistClient(NumPyClient):
    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.net = model()

    def fit(self, parameters, config):
        ds, shards = data()
        set_weights(self.net, parameters)
        opt = torch.optim.SGD(self.net.parameters(), lr=0.05, momentum=0.9)
        idx = torch.as_tensor(shards[self.pid])[torch.randperm(len(shards[self.pid]))]
        self.net.train()
        for s in range(0, len(idx), 50):
            b = idx[s : s + 50]
            opt.zero_grad()
            F.cross_entropy(self.net(ds.x_train[b]), ds.y_train[b]).backward()
            opt.step()
        return get_weights(self.net), len(idx), {}


def client_fn(context: Context):
    return MnistClient(int(context.node_config["partition-id"])).to_client()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    accs: list[float] = []
    net = model()

    def evaluate(server_round, parameters, config):
        ds, _ = data()
        set_weights(net, parameters)
        net.eval()
        correct, loss = 0, 0.0
        with torch.inference_mode():
            for s in range(0, len(ds.y_test), 1000):
                out = net(ds.x_test[s : s + 1000])
                correct += int((out.argmax(1) == ds.y_test[s : s + 1000]).sum())
                loss += float(F.cross_entropy(out, ds.y_test[s : s + 1000], reduction="sum"))
        if server_round > 0:
            accs.append(correct / len(ds.y_test))
        return loss / len(ds.y_test), {"accuracy": correct / len(ds.y_test)}

    def server_fn(context: Context):
        torch.manual_seed(0)
        strategy = FedAvg(
            fraction_fit=PER_ROUND / DEVICES, fraction_evaluate=0.0, min_fit_clients=PER_ROUND,
            min_available_clients=DEVICES, evaluate_fn=evaluate,
            initial_parameters=ndarrays_to_parameters(get_weights(model())),
        )
        return ServerAppComponents(strategy=strategy, config=ServerConfig(num_rounds=args.rounds))

    t0 = time.perf_counter()
    run_simulation(
        server_app=ServerApp(server_fn=server_fn),
        client_app=ClientApp(client_fn=client_fn),
        num_supernodes=DEVICES,
        backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}},
    )
    wall = time.perf_counter() - t0
    with open(args.out, "w") as f:
        json.dump({"wall_s": wall, "acc": accs, "cpus": os.cpu_count()}, f)


if __name__ == "__main__":
    # Ray unpickles the client app by module name in its actors, which cannot import __main__: run the module
    # under its own name (the runner puts benchmarks/ on PYTHONPATH)
    import peers_flower_app

    peers_flower_app.main()
