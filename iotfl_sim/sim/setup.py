"""Data side of a run: the dataset, the clients' partitions, evaluation. Empty in system-only mode."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from iotfl_sim.core.errors import ScenarioError
from iotfl_sim.exec.auto import Choice, choose
from iotfl_sim.exec.base import NumericData
from iotfl_sim.exec.cores import available_cores
from iotfl_sim.exec.inline import InlineExecutor
from iotfl_sim.fl.data.datasets import Dataset, DatasetError, load_dataset
from iotfl_sim.fl.data.images import Images, subset
from iotfl_sim.fl.data.partition import PartitionError, label_sets, partition
from iotfl_sim.fl.recipe import DATASET_SHAPES
from iotfl_sim.scenario.model import Executor as ExecutorConfig
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
    proxy: np.ndarray | None = None  # train indices held out for the server (a method's proxy set)
    dataset: Dataset | None = None
    calib_x: Images | None = None
    test_subset: torch.Tensor | None = None  # test indices scored (server.eval_subset); None = all

    def numeric_data(self) -> NumericData:
        """The tensors an executor's workers share: train set, calibration inputs, the test samples scored."""
        assert self.dataset is not None and self.calib_x is not None
        ds = self.dataset
        x_test, y_test = ds.x_test, ds.y_test
        if self.test_subset is not None:
            x_test, y_test = subset(x_test, self.test_subset), y_test[self.test_subset]
        return NumericData(ds.x_train, ds.y_train, self.calib_x, x_test, y_test)

    def make_executor(self, cfg: ExecutorConfig | None = None, choice: Choice | None = None) -> Any:
        """The executor ``choice`` names (``exec.auto.choose``; None: ``cfg``'s kind, ``auto`` with no work
        estimate), with the scenario's thread count and address."""
        cfg = cfg or ExecutorConfig()
        if choice is None:
            choice = choose(cfg.kind, cfg.workers, cfg.threads, torch.cuda.is_available(), available_cores(), None)
        data = self.numeric_data()
        if choice.kind == "threads":
            from iotfl_sim.exec.threads import ThreadExecutor

            return ThreadExecutor(data, choice.workers, cfg.threads)
        if choice.kind == "pool":
            from iotfl_sim.exec.pool import PoolExecutor

            return PoolExecutor(data, choice.workers, cfg.threads)
        if choice.kind == "fused" and torch.cuda.is_available():
            from iotfl_sim.exec.fused import FusedExecutor
            from iotfl_sim.exec.threads import ThreadExecutor

            host = ThreadExecutor(data, choice.workers, cfg.threads)  # evaluation and the jobs it does not fuse
            return FusedExecutor(data.x_train, data.y_train, device="cuda", host=host)
        if choice.kind == "fused":  # on a CPU: a pool whose workers fuse their shares, using every core
            from iotfl_sim.exec.pool import PoolExecutor

            return PoolExecutor(data, choice.workers, cfg.threads, fuse=True)
        if choice.kind == "ray":
            from iotfl_sim.exec.ray_exec import RayExecutor

            return RayExecutor(data, choice.workers, cfg.threads, cfg.address)
        return InlineExecutor(data, cfg.threads)


def split_proxy(n: int, fraction: float, seed: int) -> tuple[np.ndarray | None, np.ndarray]:
    """(server proxy indices, the rest for the clients): a seeded random ``fraction`` of the train set.

    A method whose config has ``proxy_fraction`` > 0 (FlexFL's pretraining set) gets these samples on
    the server; the clients' partitions are drawn from the rest, so no sample is in both.
    """
    everything = np.arange(n)
    if fraction <= 0:
        return None, everything
    k = max(1, int(round(n * fraction)))
    if k >= n:
        raise ScenarioError(f"algorithm.proxy_fraction: {fraction:g} leaves no training data for the clients")
    proxy = np.sort(stream(seed, "proxy").choice(n, size=k, replace=False))
    return proxy, np.setdiff1d(everything, proxy, assume_unique=True)


def subset_dataset(ds: Dataset, train: int | None, test: int | None, seed: int) -> Dataset:
    """``ds`` cut to seeded random subsets of ``train`` train and ``test`` test samples (None: all)."""
    changes: dict[str, Any] = {}
    if train is not None and train < len(ds.y_train):
        keep = np.sort(stream(seed, "train_subset").choice(len(ds.y_train), size=train, replace=False))
        changes.update(x_train=subset(ds.x_train, torch.as_tensor(keep)), y_train=ds.y_train[keep])
        if ds.groups_train is not None:
            changes["groups_train"] = ds.groups_train[keep]
    if test is not None and test < len(ds.y_test):
        keep = np.sort(stream(seed, "test_subset").choice(len(ds.y_test), size=test, replace=False))
        changes.update(x_test=subset(ds.x_test, torch.as_tensor(keep)), y_test=ds.y_test[keep])
        if ds.groups_test is not None:
            changes["groups_test"] = ds.groups_test[keep]
    return replace(ds, **changes) if changes else ds


def load_data(sc: Scenario) -> Dataset:
    """The scenario's dataset, cut to its train/test subsets; a missing or broken file is a ScenarioError."""
    try:
        ds = load_dataset(sc.data.dataset, sc.data.root, test_fraction=sc.data.test_fraction, seed=sc.seed)
    except DatasetError as e:
        raise ScenarioError(f"data.dataset: {e}") from None
    return subset_dataset(ds, sc.data.train_samples, sc.data.test_samples, sc.seed)


def split_clients(
    sc: Scenario, ds: Dataset, num_devices: int
) -> tuple[np.ndarray, np.ndarray | None, list[np.ndarray]]:
    """(train labels, the server's proxy indices or None, one index array per client); an impossible split
    is a ScenarioError naming the setting."""
    p = sc.data.partition
    labels = ds.y_train.numpy()
    server_classes = sc.algorithm.held_out_classes()
    if server_classes:  # FedX's disjoint split: the server holds every sample of its classes
        held = np.isin(labels, np.asarray(server_classes))
        public = sc.algorithm.held_out_public_fraction()
        if public > 0:  # the server's public samples of the clients' classes (FedX's D_S: fedx.txt:205)
            rest = np.flatnonzero(~held)
            held[np.sort(stream(sc.seed, "public").choice(rest, size=int(round(len(rest) * public)), replace=False))] = True
        proxy, clients = np.flatnonzero(held), np.flatnonzero(~held)
        if len(proxy) == 0 or len(clients) == 0:
            raise ScenarioError(f"algorithm.proxy_classes: {server_classes} leaves the server or the clients no data")
    else:
        proxy, clients = split_proxy(len(labels), sc.algorithm.held_out_fraction(), sc.seed)
    try:
        parts = partition(
            labels[clients],
            num_devices,
            p.method,
            stream(sc.seed, "partition"),
            alpha=p.alpha,
            classes_per_client=p.classes_per_client,
            groups=None if ds.groups_train is None else ds.groups_train[clients],
        )
    except PartitionError as e:
        raise ScenarioError(f"data.partition: {e}") from None
    if proxy is not None:
        parts = [clients[x] for x in parts]
    return labels, proxy, parts


def nominal_train_samples(sc: Scenario) -> int:
    """The train samples a scenario splits over its clients, without reading the files: the dataset's nominal
    train set, or ``data.train_samples`` of it."""
    nominal = DATASET_SHAPES[sc.data.dataset][4]
    return nominal if sc.data.train_samples is None else min(nominal, sc.data.train_samples)


def prepare_numerics(sc: Scenario, num_devices: int) -> NumericsSetup:
    channels, height, width, classes, _ = DATASET_SHAPES[sc.data.dataset]
    if sc.numerics == "none":
        # Costs only: clients are sized as an IID split of the nominal train set (data.train_samples of it when
        # given, as a real run keeps), no file is read.
        nominal = nominal_train_samples(sc)
        sizes = np.full(num_devices, nominal // num_devices, dtype=np.int64)
        sizes[: nominal % num_devices] += 1
        sizes = np.maximum(sizes, 1)
        all_labels = np.arange(classes)
        return NumericsSetup(classes, channels, (height, width), sizes, [all_labels] * num_devices)
    ds = load_data(sc)
    labels, proxy, parts = split_clients(sc, ds, num_devices)
    cap = sc.server.bn_calibration_samples
    if cap != "all" and cap < len(ds.x_train):
        pick = np.sort(stream(sc.seed, "bn_calibration").choice(len(ds.x_train), size=cap, replace=False))
        calib = subset(ds.x_train, torch.as_tensor(pick))
    else:
        calib = ds.x_train
    scored = None
    if sc.server.eval_subset is not None and sc.server.eval_subset < len(ds.y_test):
        pick = stream(sc.seed, "eval_subset").choice(len(ds.y_test), size=sc.server.eval_subset, replace=False)
        scored = torch.as_tensor(np.sort(pick))
    return NumericsSetup(
        num_classes=ds.num_classes,
        in_channels=ds.in_channels,
        image_size=ds.image_size,
        samples_per_device=np.array([len(x) for x in parts], dtype=np.int64),
        labels_per_device=label_sets(labels, parts),
        parts=parts,
        proxy=proxy,
        dataset=ds,
        calib_x=calib,
        test_subset=scored,
    )
