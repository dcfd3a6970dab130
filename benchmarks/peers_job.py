"""What every side of `benchmarks/peers.py` shares: the job, iotfl-sim's model rewritten in plain PyTorch, the data.

Imported by the runner (iotfl-sim's venv) and by the peer apps inside their own venvs (Flower, FLGo), so it needs
only numpy, torch and iotfl-sim's dataset loader (`iotfl_sim.fl.data.datasets`, plain numpy/torch: every side
reads the same files into the same normalized tensors). The job's facts come from the iotfl-sim scenario
(`Job.of`), so the peers run exactly what iotfl-sim runs.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Job:
    """One FedAvg job: dataset, model family (no norm, no scaler), fleet size, clients per round, local recipe."""

    name: str
    dataset: str
    family: str
    devices: int
    per_round: int
    epochs: int
    batch: int
    lr: float
    momentum: float
    clip: float | None  # clip every gradient to this total norm (iotfl-sim's local.clip_grad_norm)
    rounds: int

    @classmethod
    def of(cls, name: str, scenario: dict) -> Job:
        """The job an iotfl-sim scenario (FedAvg, one fleet group, iid, norm none, eval every round) describes,
        with iotfl-sim's defaults for what the scenario leaves out (read on the runner's side only)."""
        from iotfl_sim.scenario.model import Scenario

        sc = Scenario.model_validate(scenario)
        loc = sc.local
        (group,) = scenario["fleet"]["groups"]
        assert scenario["algorithm"]["name"] == "fedavg" and sc.data.partition.method == "iid"
        assert sc.model.norm == "none" and not sc.model.scaler and sc.server.eval_every == 1
        assert loc.optimizer == "sgd" and loc.lr_schedule.kind == "constant" and loc.weight_decay == 0
        return cls(name, sc.data.dataset, sc.model.family, group["count"], sc.clients_per_round, loc.epochs,
                   loc.batch_size, loc.lr, loc.momentum, loc.clip_grad_norm, sc.rounds)

    def dumps(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def loads(cls, text: str) -> Job:
        return cls(**json.loads(text))


# iotfl-sim's PlainCNN (fl/models/plain_nets.py) at full width, norm "none", no scaler: conv3x3 (bias) -> ReLU
# units, a 2x2 max-pool after some, global average pool, linear classifier. Widths and pools copied from
# fl/models/families.py (CONV_HIDDEN, CNN_SMALL_HIDDEN) and fl/models/plain.py; tests/test_peers_job.py checks
# that the outputs equal iotfl-sim's model's for the same weights.
FAMILIES: dict[str, tuple[tuple[int, ...], tuple[bool, ...]]] = {
    "conv": ((64, 128, 256, 512), (True, True, True, False)),
    "cnn_small": ((32, 64, 128), (False, True, False)),
}


class PlainCNN(nn.Module):
    def __init__(self, family: str, in_channels: int, num_classes: int) -> None:
        super().__init__()
        widths, pools = FAMILIES[family]
        layers: list[nn.Module] = []
        cin = in_channels
        for width, pool in zip(widths, pools, strict=True):
            layers += [nn.Conv2d(cin, width, kernel_size=3, padding=1), nn.ReLU()]
            if pool:
                layers.append(nn.MaxPool2d(2))
            cin = width
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(cin, num_classes)
        nn.init.zeros_(self.classifier.bias)  # iotfl-sim's init_params: zero Linear biases, PyTorch's default else

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(F.adaptive_avg_pool2d(self.features(x), 1).flatten(1))


def load(job: Job):
    """The dataset (iotfl-sim's loader, from $IOTFL_DATA): float32 (N, C, H, W) tensors, int64 labels."""
    from iotfl_sim.fl.data.datasets import load_dataset

    return load_dataset(job.dataset, None)


def model(job: Job, ds) -> PlainCNN:
    return PlainCNN(job.family, ds.x_train.shape[1], ds.num_classes)


def iid_shards(n: int, devices: int, seed: int = 0) -> list[np.ndarray]:
    """Shuffle, then cut into near-equal parts (iotfl-sim's `iid` split, with its own seed)."""
    return np.array_split(np.random.default_rng(seed).permutation(n), devices)


def train_local(net: nn.Module, x: torch.Tensor, y: torch.Tensor, idx: np.ndarray, job: Job) -> None:
    """E epochs of SGD with momentum over the client's samples, reshuffled every epoch, batches of B, gradients
    clipped as iotfl-sim clips them."""
    opt = torch.optim.SGD(net.parameters(), lr=job.lr, momentum=job.momentum)
    net.train()
    own = torch.as_tensor(idx)
    for _ in range(job.epochs):
        order = own[torch.randperm(len(own))]
        for s in range(0, len(order), job.batch):
            b = order[s : s + job.batch]
            opt.zero_grad()
            F.cross_entropy(net(x[b]), y[b]).backward()
            if job.clip is not None:
                nn.utils.clip_grad_norm_(net.parameters(), job.clip)
            opt.step()


def test(net: nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int = 1000) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) on the test set."""
    net.eval()
    correct, loss = 0, 0.0
    with torch.inference_mode():
        for s in range(0, len(y), batch):
            out = net(x[s : s + batch])
            correct += int((out.argmax(1) == y[s : s + batch]).sum())
            loss += float(F.cross_entropy(out, y[s : s + batch], reduction="sum"))
    return correct / len(y), loss / len(y)
