"""validate and run say, per submodel, its training memory need and how many devices hold it, and warn when a
heterogeneous method has nothing to adapt to (every device holds every submodel): issue 19."""

from __future__ import annotations

import copy

import yaml
from conftest import BIG, TINY, base_scenario

from iotfl_sim.cli import main


def heterofl(tmp_path, tiny_free_mb: float, big_free_mb: float = 2000):
    """4 devices whose free memory sits between the needs of levels e (1/16 width) and a (full width) of
    cnn_small with batch 16 (about 0.1 and 3 MB), and 4 with 2 GB; HeteroFL a-e by capacity."""
    tiny, big = copy.deepcopy(TINY), copy.deepcopy(BIG)
    tiny["memory"].update(free_mb=tiny_free_mb, total_mb=max(tiny["memory"]["total_mb"], tiny_free_mb))
    big["memory"].update(free_mb=big_free_mb, total_mb=max(big["memory"]["total_mb"], big_free_mb))
    sc = base_scenario(numerics="none", algorithm={"name": "heterofl", "proportions": "a1-e1", "assign": "by_capacity"})
    sc["fleet"]["groups"] = [{"name": "tiny", "count": 4, "profile": tiny}, {"name": "big", "count": 4, "profile": big}]
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sc, sort_keys=False))
    return str(path)


def memory_lines(err: str) -> tuple[list[str], list[str]]:
    notes = [x for x in err.splitlines() if x.startswith("note: memory: ")]
    warnings = [x for x in err.splitlines() if x.startswith("warning: memory: ")]
    return notes, warnings


def test_validate_says_how_many_devices_hold_each_level(tmp_path, capsys):
    assert main(["validate", heterofl(tmp_path, tiny_free_mb=0.5)]) == 0
    notes, warnings = memory_lines(capsys.readouterr().err)
    assert len(notes) == 2 and not warnings
    assert notes[0].startswith("note: memory: heterofl submodel a (width 1) needs ")
    assert notes[0].endswith(" MB to train; 4 of 8 devices declare that much free")  # the big group only
    assert notes[1].startswith("note: memory: heterofl submodel e (width 0.0625) needs ")
    assert notes[1].endswith("; 8 of 8 devices declare that much free")


def test_a_heterogeneous_method_with_nothing_to_adapt_to_is_warned_about(tmp_path, capsys):
    """Every device with 1 GB free: HeteroFL by capacity gives everyone level a, i.e. FedAvg."""
    assert main(["validate", heterofl(tmp_path, tiny_free_mb=1000)]) == 0
    notes, warnings = memory_lines(capsys.readouterr().err)
    assert all(n.endswith("8 of 8 devices declare that much free") for n in notes)
    (w,) = warnings
    assert "every device declares room for every submodel of heterofl" in w
    assert "the tightest device has 1,000 MB free" in w and "Making memory bind" in w


def test_run_prints_the_same_before_training(tmp_path, capsys):
    path = heterofl(tmp_path, tiny_free_mb=1000)
    assert main(["validate", path]) == 0
    expected = memory_lines(capsys.readouterr().err)
    assert main(["run", path, "--set", "rounds=1", "--out", str(tmp_path / "runs"), "--quiet"]) == 0
    assert memory_lines(capsys.readouterr().err) == expected


def test_one_model_methods_say_nothing(tmp_path, capsys):
    sc = base_scenario(numerics="none")
    (tmp_path / "f.yaml").write_text(yaml.safe_dump(sc))
    assert main(["validate", str(tmp_path / "f.yaml")]) == 0
    assert memory_lines(capsys.readouterr().err) == ([], [])
