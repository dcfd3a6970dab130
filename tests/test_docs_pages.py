"""docs/add_an_executor_or_profile.md runs as written: its executor, its device profile, its scenario and its
commands, in a folder of their own."""

from __future__ import annotations

import csv
import re
import runpy
import sys
from pathlib import Path

import pytest
import yaml

from iotfl_sim.cli import main
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec

PAGE = Path(__file__).resolve().parents[1] / "docs" / "add_an_executor_or_profile.md"


def write_page(folder: Path) -> dict[str, str]:
    """Every block of the page that names its file on its first line, written under ``folder``."""
    blocks = re.findall(r"```(?:python|yaml)\n# (\S+)\n(.*?)```", PAGE.read_text(), flags=re.S)
    files = {name: body for name, body in blocks}
    assert set(files) == {"timed_executor.py", "run_timed.py", "device_profiles/pi_zero_2w.yaml", "field.yaml"}, files
    for name, body in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(body)
    return files


def rows(run: Path) -> list[dict[str, str]]:
    with (run / "rounds.csv").open(newline="") as fh:
        return list(csv.DictReader(fh))


def without_host_time(table: list[dict[str, str]]) -> list[dict[str, str]]:
    return [{k: v for k, v in r.items() if not k.startswith("host_")} for r in table]


def test_the_page_runs_as_written(tmp_path, monkeypatch, capsys):
    write_page(tmp_path)
    monkeypatch.chdir(tmp_path)
    commands = re.findall(r"^(iotfl-sim|python) (.+?)(?:\s+#.*)?$", PAGE.read_text(), flags=re.M)
    assert commands == [
        ("python", "run_timed.py"),
        ("iotfl-sim", "profiles show pi_zero_2w"),
        ("iotfl-sim", "validate field.yaml"),
        ("iotfl-sim", "run field.yaml"),
    ]
    # the profile, found in the scenario's folder, reads back with the page's figures
    assert main(["profiles", "show", "pi_zero_2w"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["compute"]["flops"] == 2.0e9 and shown["battery"]["capacity_j"] == 26640
    assert main(["validate", "field.yaml"]) == 0, capsys.readouterr().err
    # the inline executor named: ``auto`` is the fused one on a CUDA machine, equal only within float tolerance
    assert main(["run", "field.yaml", "--set", "executor.kind=inline", "--out", "inline", "--quiet"]) == 0, capsys.readouterr().err
    (inline,) = Path("inline").glob("field_trial-*")
    # the executor of the page: used for every accepted update, and the same numbers as the inline executor
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "timed_executor", raising=False)
    script = runpy.run_path("run_timed.py")
    assert "training jobs" in capsys.readouterr().out
    (timed,) = Path("runs").glob("field_trial-*")
    completed = sum(int(r["completed"]) for r in rows(timed))
    assert len(script["made"]) == 1 and len(script["made"][0].seconds) == completed > 0
    assert without_host_time(rows(timed)) == without_host_time(rows(inline))
    # the profile's groups took part: the zero boards spent energy on their batteries
    with (timed / "devices.csv").open(newline="") as fh:
        devices = list(csv.DictReader(fh))
    assert sum(float(d["energy_j"]) for d in devices if d["group"] == "zero") > 0


def test_the_page_profile_figures_give_the_round_time_and_energy(tmp_path, monkeypatch):
    """One Pi Zero, one system-only round on the FLOP rule without jitter: the round lasts the hand sum of
    download (bytes x 8 / down rate + RTT), 3 x forward FLOPs / FLOP/s, and upload, from the page's figures;
    training draws train_w for the compute time, the radio rx_w / tx_w for each transfer's air time (Wi-Fi:
    no tail), both from the page's power figures."""
    files = write_page(tmp_path)
    profile = yaml.safe_load(files["device_profiles/pi_zero_2w.yaml"])
    profile["compute"]["jitter"] = {"dist": "none"}
    (tmp_path / "device_profiles" / "pi_zero_2w.yaml").write_text(yaml.safe_dump(profile))
    scenario = yaml.safe_load(files["field.yaml"])
    scenario.update(rounds=1, clients_per_round=1, numerics="none", fleet={
        "cost_model": "flops", "groups": [{"name": "zero", "profile": "pi_zero_2w", "count": 1}]})
    (tmp_path / "one.yaml").write_text(yaml.safe_dump(scenario))
    monkeypatch.chdir(tmp_path)
    assert main(["run", "one.yaml", "--out", "runs", "--quiet"]) == 0
    (run,) = Path("runs").glob("field_trial-*")
    (row,) = rows(run)
    cost = ModelRecipe("cnn_small", 10, 1, (8, 8)).cost(SubmodelSpec(1.0))
    nbytes = cost.params * 4 + 1024  # float32 weights and the default header
    samples = 1437  # digits' 80 % train split, all on the one device
    link, power = profile["link"], profile["power"]
    down_air, up_air = nbytes * 8 / (link["down_mbps"] * 1e6), nbytes * 8 / (link["up_mbps"] * 1e6)
    compute = 3 * cost.flops_forward_per_sample * samples / profile["compute"]["flops"]
    hand = down_air + link["rtt_ms"] / 1000 + compute + up_air + link["rtt_ms"] / 1000
    assert float(row["sim_time_s"]) - float(row["server_time_s"]) == pytest.approx(hand, rel=1e-9)
    assert float(row["energy_compute_j"]) == pytest.approx(power["train_w"] * compute, rel=1e-9)
    assert float(row["energy_radio_j"]) == pytest.approx(power["rx_w"] * down_air + power["tx_w"] * up_air, rel=1e-9)


@pytest.mark.parametrize(("edit", "at", "message"), [
    (("  flops: 2.0e+9", "  flopz: 2.0e+9"), "  flopz: 2.0e+9", "compute.flopz: unknown key (did you mean 'flops'?)"),
    (("  idle_w: 0.6\n", ""), "power:", "power.idle_w: required field is missing"),
], ids=["misspelt key", "missing figure"])  # fmt: skip
def test_a_bad_profile_is_one_line_naming_file_line_and_key(tmp_path, monkeypatch, capsys, edit, at, message):
    """The page's promise: a misspelt key is refused at its own line, a missing figure at its section's."""
    write_page(tmp_path)
    path = tmp_path / "device_profiles" / "pi_zero_2w.yaml"
    path.write_text(path.read_text().replace(*edit))
    monkeypatch.chdir(tmp_path)
    assert main(["validate", "field.yaml"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    line = 1 + path.read_text().splitlines().index(at)
    assert len(err) == 1 and f"pi_zero_2w.yaml:{line}: {message}" in err[0], err


def test_an_executor_that_is_not_a_factory_is_one_clear_error(tmp_path):
    import iotfl_sim
    from iotfl_sim.core.errors import ScenarioError

    files = write_page(tmp_path)
    with pytest.raises(ScenarioError, match=r"^run: executor: str is not callable; give a factory"):
        iotfl_sim.run(yaml.safe_load(files["field.yaml"]), out=tmp_path / "runs", executor="inline")
    assert not (tmp_path / "runs").exists()  # refused before anything was written
