"""FedX's utility on each device's own test data (fedx.txt:213): the test label distributions and the mean over
devices, derived by hand, and the run's ``acc_devices`` column."""

from __future__ import annotations

import csv

import numpy as np
import pytest
from conftest import base_scenario

from iotfl_sim.algorithms.device_test import device_accuracy, label_distributions
from iotfl_sim.cli import main


def test_label_distributions_mix_the_devices_own_classes_with_the_servers_test_share():
    # 3 classes, the server holds class 2; the test set has 2 x class 0, 2 x class 1, 4 x class 2: s = 4 / 8
    train = np.array([0, 0, 0, 1, 1, 2, 2])
    parts = [np.array([0, 1, 2, 3]), np.array([4])]  # device 0: three 0s and a 1; device 1: one 1
    test = np.array([0, 0, 1, 1, 2, 2, 2, 2])
    p = label_distributions(train, parts, test, 3, [2])
    assert p.tolist() == [[0.5 * 0.75, 0.5 * 0.25, 0.5], [0.0, 0.5, 0.5]]
    # no server classes: the device's own histogram
    assert label_distributions(train, parts, test, 3, None).tolist() == [[0.75, 0.25, 0.0], [0.0, 1.0, 0.0]]


def test_device_accuracy_weights_each_devices_model_by_its_distribution():
    p = np.array([[0.5, 0.5], [1.0, 0.0], [0.0, 1.0]])
    class_acc = np.array([[0.9, 0.1], [0.6, 0.8]])  # model 0, model 1: accuracy per class
    # device 0 holds model 1: 0.5 * 0.6 + 0.5 * 0.8 = 0.7; device 1 model 0: 0.9; device 2 none
    assert device_accuracy(p, np.array([1, 0, -1]), class_acc) == pytest.approx((0.7 + 0.9) / 2)
    assert np.isnan(device_accuracy(p, np.array([-1, -1, -1]), class_acc))


def _rows(tmp_path, write_scenario, **algo):
    data = base_scenario(
        model={"family": "harwild"}, rounds=1,
        algorithm={"name": "fedx", "proxy_classes": [8, 9], "pretrain_epochs": 1, "finetune_samples": 32, **algo},
        output={"progress": False},
    )  # fmt: skip
    data["server"] = {"bn_calibration_samples": 64}
    assert main(["run", str(write_scenario(data)), "--out", str(tmp_path / "runs"), "--quiet"]) == 0
    (run,) = (tmp_path / "runs").iterdir()
    return list(csv.DictReader((run / "rounds.csv").open()))


def test_one_subnetwork_for_all_scores_the_devices_mix_of_its_class_accuracies(tmp_path, write_scenario, monkeypatch):
    # every device holds the medium sub-network, so acc_devices = sum_c pbar(c) a(c) with pbar the mean of the
    # devices' distributions; a(c) is checked against the engine's own whole-test-set acc_medium
    from iotfl_sim.algorithms import device_test

    seen = {}
    real, real_correct = device_test.device_accuracy, device_test.class_correct

    def spy(p, model_of, class_acc):
        seen.update(p=p, model_of=model_of, class_acc=class_acc)
        return real(p, model_of, class_acc)

    def spy_correct(*args):
        seen["hits"], seen["y"] = real_correct(*args).numpy(), args[5].numpy()
        return real_correct(*args)

    monkeypatch.setattr(device_test, "device_accuracy", spy)
    monkeypatch.setattr(device_test, "class_correct", spy_correct)
    (row,) = _rows(tmp_path, write_scenario, mix={"medium": 1.0})
    n_c = np.bincount(seen["y"], minlength=10)
    assert seen["hits"].sum() / n_c.sum() == pytest.approx(float(row["acc_medium"]), abs=1e-9)  # the engine's model
    assert np.allclose(seen["class_acc"][0], seen["hits"] / n_c)
    assert (seen["model_of"] == 0).all()
    hand = float(np.mean(seen["p"] @ (seen["hits"] / n_c)))
    assert float(row["acc_devices"]) == pytest.approx(hand, abs=1e-9)
    assert np.allclose(seen["p"].sum(1), 1.0) and (seen["p"][:, 8:].sum(1) > 0).all()  # server classes tested too
    (global_row,) = _rows(tmp_path / "g", write_scenario, mix={"medium": 1.0}, utility_test="global")
    assert "acc_devices" not in global_row
    assert global_row["acc_medium"] == row["acc_medium"]  # the option adds a figure, it changes no other
