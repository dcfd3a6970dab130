"""LoRa on the air (fleet/lora.py): Semtech's time-on-air formula by hand and against a published calculator value,
LoRaWAN frames under the duty cycle, and the wiring into a run's transfers."""

from __future__ import annotations

import copy
import csv
from pathlib import Path

import pytest
import yaml
from conftest import TINY, base_scenario

from iotfl_sim.cli import main
from iotfl_sim.fleet.lora import LoraPhy, message


def test_time_on_air_by_hand():
    # SF7, 125 kHz: T_sym = 128 / 125 kHz = 1.024 ms; 10 bytes, CRC, explicit header, 4/5:
    # 8 + ceil((80 - 28 + 28 + 16) / 28) x 5 = 28 payload symbols, + 8 + 4.25 preamble = 40.25 symbols
    assert LoraPhy(sf=7).airtime_s(10) == pytest.approx(40.25 * 1.024e-3)
    # implicit header, no CRC: 8 + ceil((80 - 28 + 28 - 20) / 28) x 5 = 23 symbols
    assert LoraPhy(sf=7, explicit_header=False, crc=False).airtime_s(10) == pytest.approx(35.25 * 1.024e-3)
    # SF12, 4/8: T_sym = 32.768 ms > 16 ms, so low-data-rate optimisation: 8 + ceil(100 / 40) x 8 = 32 symbols
    phy = LoraPhy(sf=12, coding_rate=8)
    assert phy.low_data_rate and phy.payload_symbols(13) == 32
    assert phy.airtime_s(13) == pytest.approx((12.25 + 32) * 32.768e-3)  # 1449.984 ms; preamble 401.408 ms
    assert LoraPhy(sf=11).low_data_rate and not LoraPhy(sf=11, bandwidth_hz=250e3).low_data_rate


def test_time_on_air_matches_the_published_calculator():
    # the AN1200.13 airtime calculator (docs.google.com/spreadsheets/d/1voGAtQAjC1qBmaVuP1ApNKs1ekgUjavHuVQIXyYSvNc):
    # 13 bytes, SF9, 125 kHz, 4/5, 8 preamble symbols, explicit header: 28 payload symbols, T_packet 164.864 ms
    phy = LoraPhy(sf=9)
    assert phy.payload_symbols(13) == 28
    assert phy.airtime_s(13) * 1e3 == pytest.approx(164.864, abs=1e-9)


def test_a_message_in_frames_under_the_duty_cycle():
    # 500 bytes at SF7: frames of 222 + 222 + 56 application bytes, each with 13 bytes of LoRaWAN overhead;
    # 235 bytes: 8 + ceil(1896 / 28) x 5 = 348 symbols, 368.896 ms; 69 bytes: 8 + ceil(568 / 28) x 5 = 113, 128.256 ms
    m = message(LoraPhy(sf=7), 500, duty_cycle=0.01)
    assert m.frames == 3
    assert m.airtime_s == pytest.approx(2 * 0.368896 + 0.128256)
    assert m.duration_s == pytest.approx(
        m.airtime_s + 2 * 0.368896 * 99
    )  # silent 99x a frame after each but the last
    assert m.silence_after_s == pytest.approx(0.128256 * 99)
    assert (
        message(LoraPhy(sf=12), 51).frames == 1 and message(LoraPhy(sf=12), 52).frames == 2
    )  # 51 bytes a frame
    assert message(LoraPhy(sf=7), 500).duration_s == pytest.approx(m.airtime_s)  # no duty cycle, no silence


def test_a_run_prices_its_transfers_by_time_on_air(tmp_path: Path):
    profile = copy.deepcopy(TINY)
    profile["battery"] = {}
    profile["link"] = {"radio": "lorawan", "down_mbps": 1.0, "up_mbps": 1.0}  # rates the LoRa PHY overrides
    profile["power"]["idle_w"] = 0.0
    group = {"name": "sensors", "count": 1, "profile": profile, "network": {"lora": {"sf": 9}}}
    data = base_scenario(numerics="none", rounds=1, clients_per_round=1, fleet={"groups": [group]})
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["run", str(path), "--out", str(tmp_path / "runs"), "--quiet"]) == 0
    run = next((tmp_path / "runs").iterdir())
    row = next(csv.DictReader((run / "rounds.csv").open()))
    down, up = float(row["bytes_down"]), float(row["bytes_up"])
    phy = LoraPhy(sf=9)
    p = profile["power"]
    expected = p["rx_w"] * message(phy, down).airtime_s + p["tx_w"] * message(phy, up, 0.01).airtime_s
    assert float(row["energy_radio_j"]) == pytest.approx(expected, rel=1e-9)


def test_lora_on_another_radio_is_refused(tmp_path: Path, capsys):
    data = base_scenario(numerics="none", rounds=1)
    data["fleet"]["groups"][0]["network"] = {"lora": {"sf": 9}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "fleet.groups[0].network.lora: the group's radio is" in err and "set network.radio: lorawan" in err
