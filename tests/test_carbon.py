"""Grid carbon (fleet/carbon.py, the fleet's carbon ledger, rows, summary, compare): a hand-made run priced by hand,
the constant-intensity identity carbon = grid energy x intensity, the trace readers and their refusals."""

from __future__ import annotations

import copy
import csv
import json
from pathlib import Path

import pytest
import yaml
from conftest import TINY, base_scenario

from iotfl_sim.cli import main
from iotfl_sim.fleet.carbon import CarbonError, read_intensity
from iotfl_sim.fleet.fleet import Fleet
from iotfl_sim.fleet.periodic import Periodic
from iotfl_sim.scenario.loader import load_scenario, resolve_groups


def _fleet(carbon: Periodic | None) -> Fleet:
    mains = copy.deepcopy(TINY)
    mains["battery"] = {}
    mains["power"]["idle_w"] = 2.0
    battery = copy.deepcopy(TINY)
    battery["battery"] = {"capacity_j": 1e9}
    groups = [{"name": "mains", "count": 1, "profile": mains}, {"name": "cell", "count": 1, "profile": battery}]
    sc = load_scenario(text=yaml.safe_dump(base_scenario(fleet={"groups": groups}, numerics="none")))
    return Fleet.build(resolve_groups(sc), 0, carbon=carbon)


def test_carbon_of_a_hand_made_run():
    # 100 g/kWh in the first hour, 500 in the second, repeating; the mains device idles at 2 W and trains at
    # 10 W from 3000 s to 4000 s (training replaces idle power); the battery device's draw is not the grid's
    intensity = Periodic([0.0, 3600.0], [100.0, 500.0], 7200.0)
    fleet = _fleet(intensity)
    assert fleet.spend(0, 3000.0, 1000.0, 10.0, "compute") is None
    assert fleet.spend(1, 100.0, 5000.0, 50.0, "compute") is None
    by_hand = (
        2.0 * 3000 * 100  # idle, 0-3000 s
        + 10.0 * 600 * 100  # training in the first hour
        + 10.0 * 400 * 500  # and in the second
        + 2.0 * 3200 * 500  # idle, 4000-7200 s
    ) / 3.6e6  # J x g/kWh -> g
    assert fleet.carbon_g(7200.0) == pytest.approx(by_hand)  # 1.7778 g
    # read again later without settling: the idle draw of 7200-9000 s, at 100 g/kWh, on top
    assert fleet.carbon_g(9000.0) == pytest.approx(by_hand + 2.0 * 1800 * 100 / 3.6e6)
    # a radio transfer comes on top of idle power; an LTE tail is priced at its instant's intensity
    fleet.spend(0, 9000.0, 100.0, 1.0, "radio")
    fleet.charge_lump(0, 9100.0, 36.0, "radio")
    more = (2.0 * 1800 * 100 + 3.0 * 100 * 100 + 36.0 * 100) / 3.6e6
    assert fleet.carbon_g(9100.0) == pytest.approx(by_hand + more)
    assert _fleet(None).carbon_g(7200.0) == 0.0


def _run(tmp_path: Path, carbon: dict | None, name: str) -> Path:
    data = base_scenario(numerics="none", rounds=3, clients_per_round=2, name=name)
    data["fleet"]["cost_model"] = "flops"
    mains = copy.deepcopy(TINY)
    mains["battery"] = {}
    data["fleet"]["groups"][0]["profile"] = mains
    data["fleet"]["groups"][1]["profile"]["battery"] = {"capacity_j": 1e7}  # the other group on batteries
    if carbon is not None:
        data["fleet"]["carbon"] = carbon
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["run", str(path), "--out", str(tmp_path / "runs"), "--quiet"]) == 0
    return next((tmp_path / "runs").glob(f"{name}-*"))


def test_constant_intensity_is_grid_energy_times_intensity(tmp_path):
    run = _run(tmp_path, {"g_per_kwh": 400.0}, "carbon")
    rows = list(csv.DictReader((run / "rounds.csv").open()))
    groups = yaml.safe_load((run / "scenario.resolved.yaml").read_text())["fleet"]["groups"]
    mains_class = groups[0]["profile"]["device_class"]
    assert all(g["profile"]["device_class"] != mains_class for g in groups[1:])  # the mains group has its own class
    for r in rows:
        grid_j = float(r[f"energy_{mains_class}_j"]) + float(r["server_energy_j"])
        assert float(r["carbon_g"]) == pytest.approx(grid_j * 400.0 / 3.6e6, rel=1e-9)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["carbon_g"] == pytest.approx(float(rows[-1]["carbon_g"]))
    # without fleet.carbon nothing changes: no column, no summary key
    plain = _run(tmp_path, None, "plain")
    assert "carbon_g" not in (plain / "rounds.csv").read_text().splitlines()[0].split(",")
    assert "carbon_g" not in json.loads((plain / "summary.json").read_text())


def test_traces_read_by_hand(tmp_path):
    plain = tmp_path / "plain.csv"
    plain.write_text("time_s,g_per_kwh\n0,300\n1800,250\n3600,200\n")
    s = read_intensity(plain)
    assert s.times_s.tolist() == [0.0, 1800.0, 3600.0] and s.values.tolist() == [300.0, 250.0, 200.0]
    assert s.period_s == 5400.0
    maps = tmp_path / "maps.csv"  # Electricity Maps' layout: ISO time first, a direct and a life-cycle intensity
    maps.write_text(
        "Datetime (UTC),Zone Id,Carbon Intensity gCO2eq/kWh (direct),Carbon Intensity gCO2eq/kWh (LCA)\n"
        "2024-01-01 00:00:00,DE,400,450\n2024-01-01 01:00:00,DE,380,430\n"
    )
    with pytest.raises(CarbonError, match=r"2 columns read as a carbon intensity .*set fleet.carbon.column"):
        read_intensity(maps)
    s = read_intensity(maps, column="Carbon Intensity gCO2eq/kWh (LCA)")
    assert s.values.tolist() == [450.0, 430.0] and s.period_s == 7200.0


@pytest.mark.parametrize(
    "carbon, expected",
    [
        ({"g_per_kwh": 300, "trace": "x.csv"}, "give g_per_kwh (a constant) or trace (a CSV over time), exactly one"),
        ({}, "exactly one"),
        ({"g_per_kwh": -1}, "greater than or equal to 0"),
        ({"trace": "bad.csv"}, "carbon intensity -5 g/kWh is outside [0, 3000]"),
        ({"trace": "missing.csv"}, "no such carbon intensity trace"),
    ],
)
def test_bad_carbon_settings_one_line_each(tmp_path, capsys, carbon, expected):
    (tmp_path / "bad.csv").write_text("time_s,g_per_kwh\n0,100\n60,-5\n")
    data = base_scenario(numerics="none", rounds=1)
    data["fleet"]["carbon"] = carbon
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert expected in err and "fleet.carbon" in err and err.count("\n") == 1


def test_a_run_with_carbon_a_panel_and_a_real_cell_resumes_to_the_same_numbers(tmp_path, write_scenario, monkeypatch):
    from test_resume import resumed_run

    (tmp_path / "grid.csv").write_text("time_s,g_per_kwh\n0,300\n1,100\n2,500\n")  # changes within the rounds
    (tmp_path / "sun.csv").write_text("time_s,w_m2\n0,0\n1,800\n2,200\n")
    data = base_scenario(rounds=2, clients_per_round=4)
    data["fleet"]["carbon"] = {"trace": str(tmp_path / "grid.csv")}
    tiny = data["fleet"]["groups"][0]
    tiny["profile"]["battery"] = {"capacity_j": 5000.0, "charge_efficiency": 0.9, "fade_per_cycle": 0.01}
    tiny["harvest"] = {"kind": "solar", "area_m2": 0.01, "efficiency": 0.2, "trace": str(tmp_path / "sun.csv")}
    whole = resumed_run(data, tmp_path, write_scenario, monkeypatch)
    assert float(list(csv.DictReader((whole / "rounds.csv").open()))[-1]["carbon_g"]) > 0
