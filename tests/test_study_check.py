"""A study's check before its sweep: each distinct setting once (not each point), each problem once with the
points it affects, bounded output; a base that is a study file is named as such (issue 19)."""

from __future__ import annotations

import pytest
import yaml
from conftest import base_scenario

from iotfl_sim import study_check
from iotfl_sim.cli import main
from iotfl_sim.core.errors import ScenarioError
from iotfl_sim.study import read_study, spec


def write(tmp_path, spec: dict, base: dict | None = None):
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base or base_scenario(numerics="none"), sort_keys=False))
    p = tmp_path / "study.yaml"
    p.write_text(yaml.safe_dump({"name": "s", "base": "base.yaml", **spec}, sort_keys=False))
    return p


@pytest.fixture
def loads(monkeypatch):
    """Counts the points loaded (each check loads one), with a small budget so the test stays fast."""
    monkeypatch.setattr(study_check, "MAX_CHECKS", 12)
    monkeypatch.setattr(study_check, "MAX_FULL", 2)
    calls = []
    real = spec.load_point

    def counting(*a, **k):
        calls.append(a[1])
        return real(*a, **k)

    monkeypatch.setattr(spec, "load_point", counting)  # where read_study looks it up
    return calls


def test_100000_points_are_checked_setting_by_setting(tmp_path, loads, capsys):
    """1000 seeds x 100 learning rates, one of them negative: one line for it, counting the 1000 points that
    hold it (100,000 - 1000 x 99), after at most MAX_CHECKS loads (plus the base's), not 100,000."""
    lrs = [0.5, -1.0] + [round(0.001 * i, 3) for i in range(1, 99)]
    p = write(tmp_path, {"grid": {"seed": list(range(1000)), "local.lr": lrs}})
    with pytest.raises(ScenarioError) as e:
        read_study(p)
    lines = str(e.value).splitlines()
    assert lines == [
        "1,000 of 100,000 points (local.lr=-1.0; e.g. seed=0,local.lr=-1.0): --set local.lr: local.lr: "
        "Input should be greater than 0 (got -1.0)"
    ]
    assert len(loads) == 1 + 12
    # the settings past the budget: a note says how many (1 + 999 + 99 settings, 12 checked)
    assert "1,087 of the study's 1,099 settings are checked only when their runs start" in capsys.readouterr().err


def test_a_problem_of_the_anchor_is_put_down_to_its_setting(tmp_path, loads):
    """lr=-1 is the first value, so the first point (the anchor) fails; lr=0.1 clears it, the seeds do not:
    the problem belongs to lr=-1, in 3 of the 6 points."""
    p = write(tmp_path, {"grid": {"local.lr": [-1, 0.1], "seed": [0, 1, 2]}})
    with pytest.raises(ScenarioError) as e:
        read_study(p)
    assert str(e.value).startswith("3 of 6 points (local.lr=-1; e.g. local.lr=-1,seed=0): --set local.lr:")
    assert len(str(e.value).splitlines()) == 1


def test_a_problem_of_the_base_is_said_once_for_every_point(tmp_path, loads):
    base = base_scenario()
    base["data"] = {"dataset": "mnist", "root": str(tmp_path / "no_such_root")}
    p = write(tmp_path, {"grid": {"seed": [0, 1, 2], "local.epochs": [1, 2]}}, base)
    with pytest.raises(ScenarioError) as e:
        read_study(p)
    (line,) = str(e.value).splitlines()
    assert line.startswith("all 6 points (e.g. seed=0,local.epochs=1): ") and "data.dataset" in line
    assert "no_such_root" in line


def test_a_zip_row_is_one_setting(tmp_path, loads):
    p = write(tmp_path, {"grid": {"seed": [0, 1]}, "zip": {"local.lr": [0.1, 0.2, 0.3], "local.epochs": [1, 0, 2]}})
    with pytest.raises(ScenarioError) as e:
        read_study(p)
    (line,) = str(e.value).splitlines()
    assert line.startswith("2 of 6 points (local.lr=0.2,local.epochs=0; e.g. seed=0,local.lr=0.2,local.epochs=0): ")
    assert "local.epochs" in line and "greater than or equal to 1" in line


def test_the_output_is_bounded(tmp_path, loads, capsys):
    """Thirty bad values: the first MAX_SHOWN problems, then one line counting the rest; through the CLI,
    exit 2, one `error:` line each, nothing made."""
    p = write(tmp_path, {"grid": {"local.lr": [0.1] + [-float(i) for i in range(1, 31)]}})
    assert main(["sweep", str(p), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err.splitlines()
    errors = [x for x in err if x.startswith("error: ")]
    assert len(errors) == study_check.MAX_SHOWN + 1
    assert errors[0].startswith("error: point local.lr=-1.0: --set local.lr:")
    # 12 checks: the anchor and 11 settings; 11 problems found, 10 shown
    assert errors[-1] == "error: and 1 more problems; fix these and validate again"
    assert all(x.startswith(("error: ", "note: ")) for x in err)
    assert not (tmp_path / "out").exists()


def test_a_good_study_passes_and_keeps_every_point(tmp_path, loads):
    p = write(tmp_path, {"grid": {"seed": [0, 1, 2], "local.lr": [0.1, 0.2]}})
    st = read_study(p)
    assert [pt.id for pt in st.points][:2] == ["seed=0,local.lr=0.1", "seed=0,local.lr=0.2"]
    assert len(st.points) == 6
    assert len(loads) == 1 + 1 + 3  # the base, the anchor, seed=1, lr=0.2, seed=2


def test_base_that_is_the_study_file_itself(tmp_path, capsys):
    p = tmp_path / "study.yaml"
    p.write_text("name: s\nbase: study.yaml\ngrid: {seed: [0, 1]}\n")
    assert main(["sweep", str(p), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: {p}:2: base: study.yaml is this study file itself")


def test_base_that_is_another_study_file(tmp_path, capsys):
    (tmp_path / "other.yaml").write_text("name: o\nbase: base.yaml\ngrid: {seed: [0, 1]}\n")
    p = tmp_path / "study.yaml"
    p.write_text("name: s\nbase: other.yaml\n")
    assert main(["sweep", str(p), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "base:" in line and "is a study file (it has base:), not a scenario" in line
