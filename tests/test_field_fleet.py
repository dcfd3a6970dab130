"""The solar-powered field fleet (scenarios/solar_field.yaml) and its ready study at smoke scale: every model of
issue 49 on at once (panels, real cells, LoRa and NB-IoT from distance, heat, carbon, reports) runs, reports its
columns, and resumes to the same numbers."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml
from conftest import base_scenario

from iotfl_sim.cli import main

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "solar_field.yaml"


def test_the_field_fleet_runs_with_every_model_on(tmp_path, capsys):
    out = tmp_path / "out"
    args = ["run", str(SCENARIO), "--out", str(out), "--set", "rounds=2", "--set", "numerics=none", "--quiet"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "out of radio range" in err  # some sensors and boards are placed beyond every scheme's reach
    (run,) = out.iterdir()
    rows = list(csv.DictReader((run / "rounds.csv").open()))
    for column in ("carbon_g", "soc_mcu", "harvest_w_mcu", "soc_phone", "temp_c_sbc"):
        assert column in rows[-1], column
    assert float(rows[-1]["carbon_g"]) > 0  # the mains boards drew from the grid
    summary = json.loads((run / "summary.json").read_text())
    assert summary["carbon_g"] == pytest.approx(float(rows[-1]["carbon_g"]), rel=1e-9)


def test_the_ready_study_names_three_methods_and_three_seeds(tmp_path):
    study = yaml.safe_load((ROOT / "scenarios" / "studies" / "solar_field.yaml").read_text())
    assert [a["name"] for a in study["zip"]["algorithm"]] == ["fedavg", "heterofl_iot", "fedbuff"]
    assert study["grid"]["seed"] == [0, 1, 2]


def test_every_new_model_on_resumes_to_the_same_numbers(tmp_path, write_scenario, monkeypatch):
    """A charger with day-to-day variation, heat, a LoRa link from distance with losses, a bandwidth trace, a power
    policy and carbon, all in one 2-round run: stopped after round 1 and resumed, the files are the same."""
    from test_resume import resumed_run

    (tmp_path / "bw.csv").write_text("time_s,up_mbps,down_mbps\n0,0.5,1\n1,0,0\n2,2,4\n")
    data = base_scenario(rounds=2, clients_per_round=6, numerics="none")  # the fleet's state is what resumes here
    data["fleet"]["carbon"] = {"g_per_kwh": 300}
    data["fleet"]["reports"] = ["battery", "power"]
    tiny, big = data["fleet"]["groups"]
    tiny["profile"]["battery"] = {"capacity_j": 5000.0, "charge_efficiency": 0.9, "fade_per_cycle": 0.01}
    tiny["profile"]["compute"]["power_modes"] = {
        "hi": {"flops": 1.0e9, "train_w": 1.0},
        "lo": {"flops": 5e8, "train_w": 0.4},
    }
    tiny["profile"]["compute"]["default_mode"] = "hi"
    tiny["harvest"] = {
        "kind": "charger",
        "power_w": 2.0,
        "start_hour": 12,
        "hours": 12,
        "day_s": 4.0,
        "variants": 3,
    }
    tiny["power_policy"] = {"low_mode": "lo", "below": 0.9999}
    tiny["network"] = {"bandwidth": {"trace": str(tmp_path / "bw.csv")}}
    big["thermal"] = {"board": "raspberry_pi_4", "ambient_c": 40}
    big["network"] = {
        "radio": "lorawan",
        "lora": {"sf": 7},
        "link": {"path_loss": "petajajarvi2015_oulu", "positions": {"kind": "disc", "radius_m": 5000}},
    }
    data["algorithm"] = {"name": "fedavg", "prefer": "on_power"}
    whole = resumed_run(data, tmp_path, write_scenario, monkeypatch)
    summary = json.loads((whole / "summary.json").read_text())
    assert summary["carbon_g"] > 0
    assert summary["power_mode_switches"] > 0  # the policy moved the charger group to its low mode
