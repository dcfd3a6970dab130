"""flowerapp: the model, the data and the training, as in Flower's PyTorch template.

The data are scikit-learn's handwritten digits (8x8 images, 10 classes; no download), split IID over the
partitions with a fixed seed, each partition 80 % train and 20 % test. Training and evaluation seed PyTorch from
(seed, partition, round), so the app gives the same numbers in any process: under `flwr run`, under Flower's
`run_simulation` and under `iotfl-sim run`.
"""

import numpy as np
import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    """A small CNN for 8x8 grey images."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(32 * 2 * 2, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(torch.relu(self.conv1(x)))
        x = self.pool(torch.relu(self.conv2(x)))
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


def load_data(partition_id: int, num_partitions: int, batch_size: int, seed: int = 0):
    """(train loader, test loader) of one partition: an IID shard of the digits, 80 % train, 20 % test."""
    digits = load_digits()
    x = torch.tensor(digits.images / 16.0, dtype=torch.float32).unsqueeze(1)
    y = torch.tensor(digits.target, dtype=torch.long)
    order = np.random.default_rng(seed).permutation(len(y))
    shard = np.array_split(order, num_partitions)[partition_id]
    cut = int(len(shard) * 0.8)
    train, test = shard[:cut], shard[cut:]
    return (
        DataLoader(TensorDataset(x[train], y[train]), batch_size=batch_size, shuffle=True),
        DataLoader(TensorDataset(x[test], y[test]), batch_size=batch_size),
    )


def seed_for(seed: int, partition_id: int, server_round: int) -> None:
    """Seed PyTorch for one node's work in one round (the shuffling of its batches)."""
    torch.manual_seed(seed * 1_000_003 + partition_id * 1009 + server_round)


def train(net: nn.Module, loader: DataLoader, epochs: int, lr: float) -> float:
    """Train ``net`` with SGD; the mean loss of the last epoch."""
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    net.train()
    total, count = 0.0, 0
    for _ in range(epochs):
        total, count = 0.0, 0
        for x, y in loader:
            optimizer.zero_grad()
            loss = criterion(net(x), y)
            loss.backward()
            optimizer.step()
            total += loss.item() * len(y)
            count += len(y)
    return total / max(count, 1)


def test(net: nn.Module, loader: DataLoader) -> tuple[float, float]:
    """(mean loss, accuracy) of ``net`` on ``loader``."""
    criterion = nn.CrossEntropyLoss(reduction="sum")
    net.eval()
    loss, correct, count = 0.0, 0, 0
    with torch.no_grad():
        for x, y in loader:
            out = net(x)
            loss += criterion(out, y).item()
            correct += int((out.argmax(1) == y).sum())
            count += len(y)
    return loss / max(count, 1), correct / max(count, 1)


def get_weights(net: nn.Module) -> list[np.ndarray]:
    """The model's parameters and buffers as NumPy arrays (the earlier layout's NumPyClient currency)."""
    return [v.cpu().numpy() for v in net.state_dict().values()]


def set_weights(net: nn.Module, weights: list[np.ndarray]) -> None:
    """Load arrays made by ``get_weights`` into ``net``."""
    keys = net.state_dict().keys()
    net.load_state_dict({k: torch.tensor(w) for k, w in zip(keys, weights, strict=True)}, strict=True)
