"""The catalog of names (``iotfl_sim.core.catalog``) is the one list each consumer uses: the scenario format
accepts exactly its names, and the code behind each name exists."""

from __future__ import annotations

import pytest

from iotfl_sim.core.catalog import DATASETS, MODEL_FAMILIES, PROTOTYPE_STAGES
from iotfl_sim.fl.models.build import BUILDERS, build_model
from iotfl_sim.fl.recipe import DATASET_SHAPES
from iotfl_sim.fl.submodel import SubmodelSpec
from iotfl_sim.scenario.model import Data, Model


def test_the_scenario_accepts_exactly_the_catalogued_names():
    for name in DATASETS:
        assert Data(dataset=name).dataset == name
    for family in MODEL_FAMILIES:
        assert Model(family=family).family == family
    with pytest.raises(ValueError, match="family"):
        Model(family="resnet19")
    with pytest.raises(ValueError, match="dataset"):
        Data(dataset="imagenet")


def test_every_dataset_has_its_shape_and_every_family_builds():
    assert set(DATASET_SHAPES) == set(DATASETS)
    for family in MODEL_FAMILIES:  # the smallest input each family takes: 32 x 32 covers ResNet110 and VGG
        model = build_model(family, SubmodelSpec(rate=0.25), num_classes=3, in_channels=1, image_size=(32, 32))
        assert sum(p.numel() for p in model.parameters()) > 0, family
    assert set(PROTOTYPE_STAGES) <= set(MODEL_FAMILIES)
    assert set(BUILDERS) == set(MODEL_FAMILIES)  # one builder per catalogued family, none uncatalogued


def test_every_method_is_registered_once_under_one_name_everywhere():
    """One registration per method (iotfl_sim.methods): its options class names it, its strategy takes those
    options, and the schema and the README's method table derive from the registry."""
    import json
    from pathlib import Path
    from typing import get_args

    from iotfl_sim import methods
    from iotfl_sim.scenario.model import Scenario

    names = methods.method_names()
    assert len(names) == len(set(names)) and len(names) >= 12
    for m in methods.registered():
        assert get_args(m.config.model_fields["name"].annotation) == (m.name,), m.name
        assert m.strategy_class().Config is m.config, m.name
    schema = json.dumps(Scenario.model_json_schema())  # what `iotfl-sim schema` prints
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    for name in names:
        assert f'"const": "{name}"' in schema or f'"enum": ["{name}"]' in schema, name  # the schema knows it
        assert f"| `{name}` |" in readme, f"README's method table has no row for {name}"
