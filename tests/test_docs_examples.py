"""The README's examples must keep working: its tour scenario validates, its `--set` examples apply."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import assert_validates

from iotfl_sim.scenario.loader import load_scenario, resolve_groups

README = Path(__file__).resolve().parents[1] / "README.md"


def yaml_blocks() -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", README.read_text(), flags=re.S)


def tour_block() -> str:
    blocks = [b for b in yaml_blocks() if b.lstrip().startswith("name:")]
    assert blocks, "the README lost its tour scenario"
    return blocks[0]


def test_readme_tour_scenario_validates(tmp_path, capsys, data_root):
    path = tmp_path / "tour.yaml"
    path.write_text(tour_block())
    assert_validates(path, capsys, data_root)


def test_override_in_other_unit_replaces_the_profiles_battery(tmp_path):
    path = tmp_path / "tour.yaml"
    path.write_text(tour_block())
    sc = load_scenario(path)
    groups = resolve_groups(sc, None, str(path))
    phone = next(g for g in groups if g.profile.name == "phone_midrange")
    assert phone.profile.battery.capacity_j is None
    assert phone.profile.battery.joules == pytest.approx(10 * 3600.0)


def test_readme_set_examples_apply_to_the_first_group(tmp_path):
    text = README.read_text()
    sets = re.findall(r"--set ([\w.]+=\S+?)`", text)
    assert "fleet.groups.0.count=40" in sets
    path = Path(__file__).resolve().parents[1] / "scenarios" / "quickstart.yaml"
    sc = load_scenario(path, sets=["fleet.groups.0.count=40", "local.lr=0.05"])
    assert sc.fleet.groups[0].count == 40
    assert sc.local.lr == 0.05
