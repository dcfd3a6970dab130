"""A job of `benchmarks/peers.py` written as a Flower simulation (run inside the Flower venv).

Flower's legacy strategy API (`flwr.server.strategy.FedAvg`) on the Ray-backed `run_simulation`, as a Flower user
would write it: one virtual node per device, each holding an IID shard of the train set (`peers_job.iid_shards`),
`per_round` sampled per round, E epochs of SGD with momentum in batches of B (gradients clipped as iotfl-sim clips
them), iotfl-sim's model rewritten in plain
PyTorch (`peers_job.PlainCNN`), centralised evaluation of the global model on the whole test set every round. One
CPU per client actor (Ray then runs one torch thread per actor), so as many clients train at once as there are
cores. Every actor loads the data itself (a Ray actor cannot share the driver's tensors). Writes one JSON file:
the accuracy and loss after every round.

    IOTFL_DATA=... PYTHONPATH=<repo>:<repo>/benchmarks <flower-venv>/bin/python benchmarks/peers_flower_app.py --job '<Job json>' --out r.json
"""

from __future__ import annotations

import argparse
import json
import os
from functools import lru_cache

import numpy as np
import torch
from flwr.client import ClientApp, NumPyClient
from flwr.common import Context, ndarrays_to_parameters
from flwr.server import ServerApp, ServerAppComponents, ServerConfig
from flwr.server.strategy import FedAvg
from flwr.simulation import run_simulation
from peers_job import Job, iid_shards, load, model, test, train_local

JOB: Job | None = None  # set from --job in the driver, and from the environment in every Ray actor


def job() -> Job:
    return JOB or Job.loads(os.environ["PEERS_JOB"])


@lru_cache(maxsize=1)
def data():
    ds = load(job())
    return ds, iid_shards(len(ds.y_train), job().devices)


def get_weights(m: torch.nn.Module) -> list[np.ndarray]:
    return [v.detach().numpy().copy() for v in m.state_dict().values()]


def set_weights(m: torch.nn.Module, weights: list[np.ndarray]) -> None:
    m.load_state_dict({k: torch.from_numpy(np.asarray(w)) for k, w in zip(m.state_dict(), weights, strict=True)})


class PeerClient(NumPyClient):
    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.net = model(job(), data()[0])

    def fit(self, parameters, config):
        ds, shards = data()
        set_weights(self.net, parameters)
        train_local(self.net, ds.x_train, ds.y_train, shards[self.pid], job())
        return get_weights(self.net), len(shards[self.pid]), {}


def client_fn(context: Context):
    return PeerClient(int(context.node_config["partition-id"])).to_client()


def main() -> None:
    global JOB
    ap = argparse.ArgumentParser()
    ap.add_argument("--job", required=True, help="a peers_job.Job as JSON")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    JOB = Job.loads(args.job)
    os.environ["PEERS_JOB"] = args.job  # the Ray actors inherit the driver's environment
    history: list[tuple[float, float]] = []
    ds, _ = data()
    net = model(JOB, ds)

    def evaluate(server_round, parameters, config):
        set_weights(net, parameters)
        acc, loss = test(net, ds.x_test, ds.y_test)
        if server_round > 0:
            history.append((acc, loss))
        return loss, {"accuracy": acc}

    def server_fn(context: Context):
        torch.manual_seed(0)
        strategy = FedAvg(
            fraction_fit=JOB.per_round / JOB.devices, fraction_evaluate=0.0, min_fit_clients=JOB.per_round,
            min_available_clients=JOB.devices, evaluate_fn=evaluate,
            initial_parameters=ndarrays_to_parameters(get_weights(model(JOB, ds))),
        )
        return ServerAppComponents(strategy=strategy, config=ServerConfig(num_rounds=JOB.rounds))

    run_simulation(
        server_app=ServerApp(server_fn=server_fn),
        client_app=ClientApp(client_fn=client_fn),
        num_supernodes=JOB.devices,
        # address "local": a Ray of its own, as on a machine with no other Ray (this shared machine may have a
        # `ray start` cluster, which a bare ray.init() would join, its processes outside this run's tree)
        backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}, "init_args": {"address": "local"}},
    )
    with open(args.out, "w") as f:
        json.dump({"acc": [a for a, _ in history], "loss": [v for _, v in history]}, f)


if __name__ == "__main__":
    # Ray unpickles the client app by module name in its actors, which cannot import __main__: run the module
    # under its own name (the runner puts benchmarks/ on PYTHONPATH)
    import peers_flower_app

    peers_flower_app.main()
