"""A job of `benchmarks/peers.py` written for FLGo (run inside the FLGo venv).

As FLGo's documentation has a user bring their own data and model: a benchmark generated from a config file
(`flgo.gen_benchmark_from_file`) whose `train_data` / `test_data` are the tensors iotfl-sim's loader reads
(`peers_job.load`, wrapped as map-style datasets giving one (image, label) pair at a time, as `TensorDataset` does) and whose `get_model` is iotfl-sim's model rewritten in plain
PyTorch (`peers_job.PlainCNN`); a task from FLGo's `IIDPartitioner` over the job's devices; `flgo.algorithm.fedavg`
with uniform sampling without replacement, updates weighted by sample counts, E epochs of SGD with momentum in
batches of B, no local validation hold-out. A small logger tests the global model on the whole test set every
round (FLGo's default logger would also test every client's local data). FLGo trains the sampled clients one
after another in this process, with `torch_num_threads` torch threads (FLGo's default, 1, unless --threads says
otherwise). Gradients are clipped as iotfl-sim clips them (FLGo's `clip_grad`). Writes one JSON file: the accuracy
and loss after every round.

    IOTFL_DATA=... PYTHONPATH=<repo>:<repo>/benchmarks <flgo-venv>/bin/python benchmarks/peers_flgo_app.py --job '<Job json>' --out r.json
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile
from functools import lru_cache
from pathlib import Path

import torch
from peers_job import Job, load, model
from torch.utils.data import Dataset

JOB: Job | None = None

CONFIG = "from peers_flgo_app import get_model, train_data, test_data  # noqa: F401\n"


class Split(Dataset):
    """(image, label) pairs, one at a time as TensorDataset gives them, over iotfl-sim's loaded split (whose
    images may be uint8 codes standardized on indexing, as torchvision's datasets convert per item)."""

    def __init__(self, x, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]


@lru_cache(maxsize=1)
def datasets() -> tuple[Split, Split]:
    ds = load(JOB)
    return Split(ds.x_train, ds.y_train), Split(ds.x_test, ds.y_test)


def get_model() -> torch.nn.Module:
    ds = load(JOB)  # cached by the loader
    return model(JOB, ds)


def __getattr__(name: str):  # the benchmark's config.py reads train_data and test_data from here
    if name in ("train_data", "test_data"):
        return datasets()[name == "test_data"]
    raise AttributeError(name)


def main() -> None:
    global JOB
    ap = argparse.ArgumentParser()
    ap.add_argument("--job", required=True, help="a peers_job.Job as JSON")
    ap.add_argument("--out", required=True)
    ap.add_argument("--threads", type=int, default=1, help="FLGo's torch_num_threads (FLGo's default: 1)")
    args = ap.parse_args()
    JOB = Job.loads(args.job)
    out_path = Path(args.out).resolve()
    sys.argv = sys.argv[:1]  # flgo.init reads its options from the command line too

    import flgo
    import flgo.algorithm.fedavg as fedavg
    from flgo.benchmark.toolkits.cv.classification import FromDatasetPipe
    from flgo.benchmark.toolkits.partition import IIDPartitioner
    from flgo.experiment.logger import BasicLogger

    # torch >= 2.6 refuses a Subset that overrides __getitem__ but not __getitems__ (FLGo 0.4.4 predates that):
    # the fix torch's own error message gives, the per-sample fetch FLGo's DataLoaders always did
    FromDatasetPipe.TaskDataset.__getitems__ = lambda self, indices: [self[i] for i in indices]

    class TestLogger(BasicLogger):
        def initialize(self, *a, **k) -> None:
            return

        def log_once(self, *a, **k) -> None:
            metrics = self.coordinator.test()
            self.output["test_accuracy"].append(metrics["accuracy"])
            self.output["test_loss"].append(metrics["loss"])

    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)  # FLGo names the benchmark module by its path relative to the working directory
        sys.path.insert(0, tmp)
        Path("config.py").write_text(CONFIG)
        bmk = importlib.import_module(flgo.gen_benchmark_from_file("peers_bmk", "config.py", target_path="."))
        # gen_task_by_ draws the partition with matplotlib (a figure per task, once per task for a FLGo user; over
        # 15 minutes for MNIST's 60,000 samples on this machine): not part of the job, turned off
        bmk.visualize = lambda *a, **k: None
        flgo.gen_task_by_(bmk, IIDPartitioner(num_clients=JOB.devices), "task", seed=0)
        option = {
            "num_rounds": JOB.rounds, "proportion": JOB.per_round / JOB.devices, "sample": "uniform",
            "aggregate": "weighted", "num_epochs": JOB.epochs, "batch_size": JOB.batch, "learning_rate": JOB.lr,
            "momentum": JOB.momentum, "weight_decay": 0.0, "clip_grad": JOB.clip or 0.0, "train_holdout": 0.0, "test_holdout": 0.0, "seed": 0,
            "dataseed": 0, "eval_interval": 1, "test_batch_size": 1000, "torch_num_threads": args.threads,
            "num_parallels": 1, "no_tqdm": True, "log_level": "WARNING",
        }
        runner = flgo.init("task", fedavg, option=option, Logger=TestLogger)
        runner.run()
        out = runner.gv.logger.output
    # log_once runs before the first round too (the initial model): drop it
    with open(out_path, "w") as f:
        json.dump({"acc": out["test_accuracy"][1:], "loss": out["test_loss"][1:]}, f)


if __name__ == "__main__":
    import peers_flgo_app  # the benchmark's config.py imports this module by name: run it under that name

    peers_flgo_app.main()
