"""Optional logging (output.tensorboard, output.wandb): written from rounds.csv's rows, never changing results."""

from __future__ import annotations

import csv

import pytest
from conftest import base_scenario

import iotfl_sim
from iotfl_sim.core.errors import ScenarioError

HOST = {"host_train_s", "host_eval_s", "host_aggregate_s", "host_other_s"}


def _rows(path):
    return [{k: v for k, v in r.items() if k not in HOST} for r in csv.DictReader((path / "rounds.csv").open())]


def test_missing_library_is_refused_before_the_run(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in ("tensorboard", "wandb") else real(name, *a))
    for key, value in (("output.tensorboard", "true"), ("output.wandb", "{project: p}")):
        with pytest.raises(ScenarioError, match=rf"output\.{key[7:]}: the {key[7:]} package is not installed; pip install"):
            iotfl_sim.run(base_scenario(numerics="none"), out=tmp_path, sets=[f"{key}={value}"])
    assert not list(tmp_path.iterdir())


def test_tensorboard_scalars(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    plain = iotfl_sim.run(base_scenario(), out=tmp_path / "a")
    logged = iotfl_sim.run(base_scenario(), out=tmp_path / "b", sets=["output.tensorboard=true"])
    assert _rows(plain.path) == _rows(logged.path)  # never changes a result
    acc = EventAccumulator(str(logged.path / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"acc_full", "energy_j", "bytes_up", "completed", "sim_time_s"} <= tags
    rows = list(csv.DictReader((logged.path / "rounds.csv").open()))
    got = [(e.step, e.value) for e in acc.Scalars("energy_j")]
    assert got == [(int(r["round"]), pytest.approx(float(r["energy_j"]), rel=1e-6)) for r in rows]
    assert "scenario" in str(acc.Tags())


def test_wandb_offline(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    plain = iotfl_sim.run(base_scenario(numerics="none"), out=tmp_path / "a")
    logged = iotfl_sim.run(base_scenario(numerics="none"), out=tmp_path / "b",
                           sets=["output.wandb={project: iotfl-test, mode: offline}"])  # fmt: skip
    assert _rows(plain.path) == _rows(logged.path)
    runs = list((logged.path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb")), list((logged.path / "wandb").iterdir())
