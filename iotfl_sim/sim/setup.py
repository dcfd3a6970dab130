"""Data side of a run: the dataset, the clients' partitions, evaluation. Empty in system-only mode."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from iotfl_sim.exec.inline import InlineExecutor
from iotfl_sim.fl.data import Dataset, DatasetError, load_dataset
from iotfl_sim.fl.evaluate import evaluate
from iotfl_sim.fl.partition import PartitionError, label_sets, partition
from iotfl_sim.fl.recipe import DATASET_SHAPES, ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec
from iotfl_sim.scenario.loader import ScenarioError
from iotfl_sim.scenario.model import Scenario
from iotfl_sim.seeding import stream


@dataclass
class NumericsSetup:
    num_classes: int
    in_channels: int
    image_size: tuple[int, int]
    samples_per_device: np.ndarray
    labels_per_device: list[np.ndarray]
    parts: list[np.ndarray] = field(default_factory=list)
    dataset: Dataset | None = None
    calib_x: torch.Tensor | None = None

    def make_executor(self) -> Any:
        assert self.dataset is not None
        return InlineExecutor(self.dataset.x_train, self.dataset.y_train)

    def evaluate(self, recipe: ModelRecipe, spec: SubmodelSpec, state: dict, batch_size: int) -> tuple[float, float]:
        assert self.dataset is not None and self.calib_x is not None
        return evaluate(recipe, spec, state, self.calib_x, self.dataset.x_test, self.dataset.y_test, batch_size)


def prepare_numerics(sc: Scenario, num_devices: int) -> NumericsSetup:
    channels, height, width, classes, nominal = DATASET_SHAPES[sc.data.dataset]
    if sc.numerics == "none":
        # Costs only: clients are sized as an IID split of the nominal train set, no file is read.
        sizes = np.full(num_devices, nominal // num_devices, dtype=np.int64)
        sizes[: nominal % num_devices] += 1
        sizes = np.maximum(sizes, 1)
        all_labels = np.arange(classes)
        return NumericsSetup(classes, channels, (height, width), sizes, [all_labels] * num_devices)
    try:
        ds = load_dataset(sc.data.dataset, sc.data.root, test_fraction=sc.data.test_fraction, seed=sc.seed)
    except DatasetError as e:
        raise ScenarioError(f"data.dataset: {e}") from None
    p = sc.data.partition
    labels = ds.y_train.numpy()
    try:
        parts = partition(
            labels,
            num_devices,
            p.method,
            stream(sc.seed, "partition"),
            alpha=p.alpha,
            classes_per_client=p.classes_per_client,
            groups=ds.groups_train,
        )
    except PartitionError as e:
        raise ScenarioError(f"data.partition: {e}") from None
    cap = sc.server.bn_calibration_samples
    if cap is not None and cap < len(ds.x_train):
        pick = np.sort(stream(sc.seed, "bn_calibration").choice(len(ds.x_train), size=cap, replace=False))
        calib = ds.x_train[torch.as_tensor(pick)]
    else:
        calib = ds.x_train
    return NumericsSetup(
        num_classes=ds.num_classes,
        in_channels=ds.in_channels,
        image_size=ds.image_size,
        samples_per_device=np.array([len(x) for x in parts], dtype=np.int64),
        labels_per_device=label_sets(labels, parts),
        parts=parts,
        dataset=ds,
        calib_x=calib,
    )
