"""The ready study in scenarios/studies/ names every method the simulator has, and every point validates."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import SHARED_DATA

from iotfl_sim import methods

STUDY = Path(__file__).resolve().parents[1] / "scenarios" / "studies" / "all_methods_mnist.yaml"


def test_ready_study_covers_every_method_and_validates(monkeypatch):
    if not (SHARED_DATA / "mnist").is_dir():
        pytest.skip(f"MNIST files not found under {SHARED_DATA}: the study's points validate against the dataset")
    monkeypatch.setenv("IOTFL_DATA", str(SHARED_DATA))
    from iotfl_sim.study import read_study

    study = read_study(STUDY)  # checks every point as `run` would before training
    points = study.points
    names = {p.overrides["algorithm"]["name"] for p in points}
    registered = set(methods.method_names())
    assert names == registered, sorted(registered ^ names)
    assert len(points) == 3 * len(registered)
