"""Link-quality model (fleet.link_quality) and device positions (fleet.positions), checked against values derived
by hand in the comments, not against the implementation's own output."""

from __future__ import annotations

import math

import numpy as np
import pytest

from iotfl_sim.fleet import link_quality as lq
from iotfl_sim.fleet import positions as pos
from iotfl_sim.fleet.lora import LoraPhy
from iotfl_sim.fleet.traces import TraceError

BOR = lq.PATH_LOSS_PRESETS["bor2016_lora"]
OULU = lq.PATH_LOSS_PRESETS["petajajarvi2015_oulu"]
LORA = lq.TECHNOLOGIES["lora"]


# --- path loss -------------------------------------------------------------------------------------------------


def test_path_loss_at_d0_and_ten_d0():
    # At d0 the log term is 0: PL = PL(d0) = 127.41 dB. At 10 d0 = 400 m: + 10 n log10(10) = + 10 * 2.08 = 20.8 dB.
    got = lq.path_loss_db(BOR, np.array([40.0, 400.0]))
    assert got == pytest.approx([127.41, 148.21], abs=1e-9)
    # Oulu: 128.95 at 1 km; 10 km adds 23.2 dB -> 152.15 dB.
    assert lq.path_loss_db(OULU, 10_000.0) == pytest.approx(152.15, abs=1e-9)


def test_path_loss_clamps_below_d0_and_adds_shadowing():
    # 5 m < d0 = 40 m counts as 40 m; shadowing adds dB for dB.
    got = lq.path_loss_db(BOR, np.array([5.0, 40.0]), np.array([3.0, -2.0]))
    assert got == pytest.approx([130.41, 125.41])


def test_free_space_constant():
    # Friis at 868 MHz, 1 m: 20 log10(4 pi * 868e6 / 299792458) = 20 log10(36.383) = 31.218 dB; at 2.4 GHz 40.05 dB.
    assert lq.PATH_LOSS_PRESETS["free_space_868"].pl_d0_db == pytest.approx(31.218, abs=1e-3)
    assert lq.PATH_LOSS_PRESETS["free_space_2400"].pl_d0_db == pytest.approx(40.05, abs=1e-2)
    assert lq.PATH_LOSS_PRESETS["free_space_868"].n == 2.0


def test_max_distance_inverts_path_loss():
    # Bor: a budget of 14 + 137 = 151 dB -> 40 m * 10^((151 - 127.41) / 20.8) = 40 * 10^1.134135 = 40 * 13.6187 = 544.75 m.
    assert lq.max_distance_m(BOR, 151.0) == pytest.approx(40.0 * 10 ** (23.59 / 20.8), rel=1e-12)
    assert lq.max_distance_m(BOR, 151.0) == pytest.approx(544.75, abs=0.01)


def test_shadowing_reproducible_and_its_std():
    a = lq.draw_shadowing_db(BOR, 5, np.random.default_rng(7))
    b = lq.draw_shadowing_db(BOR, 5, np.random.default_rng(7))
    assert np.array_equal(a, b)
    big = lq.draw_shadowing_db(OULU, 200_000, np.random.default_rng(1))
    # Sample std of 200k normal draws: relative standard error ~ 1 / sqrt(2 * 200000) = 0.16 %; allow 2 %.
    assert big.std() == pytest.approx(7.8, rel=0.02)
    assert abs(big.mean()) < 0.1  # standard error 7.8 / sqrt(2e5) = 0.017 dB
    assert not lq.draw_shadowing_db(lq.PATH_LOSS_PRESETS["free_space_868"], 3, np.random.default_rng(0)).any()


# --- SNR -------------------------------------------------------------------------------------------------------


def test_noise_floor_and_snr_by_hand():
    # -174 + 10 log10(125e3) = -174 + 50.969 = -123.03 dBm; + NF 6 dB = -117.03 dBm.
    assert lq.noise_floor_dbm(125e3, 0.0) == pytest.approx(-123.031, abs=1e-3)
    assert lq.noise_floor_dbm(125e3, 6.0) == pytest.approx(-117.031, abs=1e-3)
    # LoRa at 14 dBm over 140 dB: rx = -126 dBm, SNR = -126 - (-117.031) = -8.969 dB.
    assert lq.rx_power_dbm(LORA, 140.0) == pytest.approx(-126.0)
    assert lq.snr_db(LORA, 140.0) == pytest.approx(-8.969, abs=1e-3)
    # Antenna gains add to the received power.
    assert lq.rx_power_dbm(LORA.with_(tx_gain_dbi=2.0, rx_gain_dbi=3.0), 140.0) == pytest.approx(-121.0)


def test_lora_sensitivities_follow_from_noise_and_snr_limits():
    # Sensitivity = -117.031 + SNR limit: SF12 -137.03 ... SF7 -124.53 dBm (slowest first).
    expect = [-117.031 + s for s in (-20.0, -17.5, -15.0, -12.5, -10.0, -7.5)]
    assert LORA.sensitivities_dbm() == pytest.approx(expect, abs=1e-3)


def test_sensitivity_tables_are_reproduced():
    # Wi-Fi and BLE store sensitivities as SNRs with the preset's NF: the round trip gives the published figures.
    assert lq.TECHNOLOGIES["wifi"].sensitivities_dbm() == pytest.approx(
        [-82, -79, -77, -74, -70, -66, -65, -64]
    )
    assert lq.TECHNOLOGIES["ble"].sensitivities_dbm() == pytest.approx([-103, -99, -95, -92])
    # NB-IoT: rx >= 23 dBm - MCL: -141, -131, -121 dBm for 164, 154, 144 dB.
    assert lq.TECHNOLOGIES["nbiot"].sensitivities_dbm() == pytest.approx([-141, -131, -121])
    # Wi-Fi MCS0: -82 - (-174 + 73.010 + 10) = 8.99 dB.
    assert lq.TECHNOLOGIES["wifi"].schemes[0].min_snr_db == pytest.approx(8.99, abs=1e-2)


# --- rates and scheme choice -----------------------------------------------------------------------------------


def test_lora_bit_rate_by_hand():
    # SF7, 125 kHz, CR 4/5: 7 * 125000 / 128 * 4/5 = 6835.9375 * 0.8 = 5468.75 bit/s.
    assert lq.lora_bit_rate_bps(LoraPhy(7, 125e3, 5)) == pytest.approx(5468.75)
    # SF12: 12 * 125000 / 4096 * 0.8 = 292.96875 bit/s; SF9 at CR 4/8: 9 * 125000 / 512 * 0.5 = 1098.6328125.
    assert lq.lora_bit_rate_bps(LoraPhy(12, 125e3, 5)) == pytest.approx(292.96875)
    assert lq.lora_bit_rate_bps(LoraPhy(9, 125e3, 8)) == pytest.approx(1098.6328125)


@pytest.mark.parametrize(
    ("snr", "margin", "sf"),
    [
        (-7.5, 0.0, 7),  # exactly at SF7's limit: closes
        (-7.51, 0.0, 8),
        (-10.0, 0.0, 8),
        (-19.99, 0.0, 12),
        (-20.0, 0.0, 12),
        (-20.01, 0.0, None),  # out of range
        (0.0, 0.0, 7),
        (-5.0, 5.0, 8),  # -5 >= -10 + 5 but not >= -7.5 + 5
        (-10.0, 10.0, 12),  # -10 >= -20 + 10: SF12 exactly
        (-10.01, 10.0, None),
    ],
)
def test_lora_pick_sf_at_boundaries(snr, margin, sf):
    assert lq.lora_pick_sf(snr, margin) == sf


def test_select_scheme_vectorised_lora():
    # rx levels against sensitivities -137.03 (SF12) .. -124.53 (SF7): -120 -> SF7 (index 5), -125 -> SF8 (4),
    # -137 -> SF12 (0), -138 -> none.
    idx = lq.select_scheme(LORA, np.array([-120.0, -125.0, -137.0, -138.0]))
    assert idx.tolist() == [5, 4, 0, -1]
    rates = lq.scheme_rates_bps(LORA, idx)
    assert rates == pytest.approx([5468.75, 3125.0, 292.96875, 0.0])
    assert lq.best_scheme(LORA, 3.0) == ("SF7", pytest.approx(5468.75))
    assert lq.best_scheme(LORA, -25.0) is None


def test_wifi_lte_nbiot_ble_choices():
    wifi = lq.TECHNOLOGIES["wifi"]
    # rx -75 dBm: MCS2 (-77) closes, MCS3 (-74) does not -> 19.5 Mb/s.
    i = lq.select_scheme(wifi, -75.0)
    assert wifi.schemes[int(i[0])].rate_bps == 19.5e6
    lte = lq.TECHNOLOGIES["lte"]
    # SNR 10 dB in 9 MHz: CQI 8 (8.1) closes, CQI 9 (10.3) not; rate 1.9141 * 8.4e6 = 16.078 Mb/s.
    name, rate = lq.best_scheme(lte, 10.0)
    assert name.startswith("CQI8") and rate == pytest.approx(1.9141 * 8.4e6)
    nb = lq.TECHNOLOGIES["nbiot"]
    # Coupling loss 150 dB: rx = 23 - 150 = -127 dBm: CE1 (-131) closes, CE0 (-121) not.
    i = lq.select_scheme(nb, lq.rx_power_dbm(nb, 150.0))
    assert nb.schemes[int(i[0])].name.startswith("CE1")
    ble = lq.TECHNOLOGIES["ble"]
    # 0 dBm over 96 dB: rx -96: LE Coded S=2 (-99) closes, LE 1M (-95) not -> 500 kb/s.
    i = lq.select_scheme(ble, -96.0)
    assert lq.scheme_rates_bps(ble, i)[0] == 500e3


def test_link_quality_bundle():
    # Bor model, LoRa 14 dBm, 400 m: PL 148.21, rx -134.21 dBm: SF11 (-134.53) closes, SF10 (-132.03) not.
    q = lq.link_quality(LORA, BOR, np.array([400.0, 5000.0]))
    assert q.path_loss_db[0] == pytest.approx(148.21)
    assert q.rx_dbm[0] == pytest.approx(-134.21)
    assert LORA.schemes[int(q.scheme[0])].name == "SF11"
    assert q.margin_db[0] == pytest.approx(-134.21 - (-117.031 - 17.5), abs=1e-3)  # 0.321 dB
    assert q.scheme[1] == -1 and q.rate_bps[1] == 0.0 and q.per[1] == 1.0 and math.isnan(q.margin_db[1])


# --- loss and retries ------------------------------------------------------------------------------------------


def test_per_waterfall():
    # 1 / (1 + 9) = 0.1 at the threshold; 2 dB above (one decade): 1 / (1 + 90) = 0.010989; 2 dB below:
    # 1 / (1 + 0.9) = 0.526.
    assert lq.per_waterfall(np.array([0.0, 2.0, -2.0]), 2.0) == pytest.approx([0.1, 1 / 91, 1 / 1.9])


def test_ber_and_per_from_ber():
    # BPSK at Eb/N0 = 0 dB: erfc(1) / 2 = 0.157299 / 2 = 0.0786496.
    assert lq.ber_bpsk(0.0) == pytest.approx(0.0786496, rel=1e-5)
    # PER of 100 bits at BER 1e-3: 1 - 0.999^100 = 0.0952079.
    assert lq.per_from_ber(1e-3, 100) == pytest.approx(0.0952079, rel=1e-6)
    # Eb/N0 = SNR + 10 log10(B / R): -7.5 dB at 125 kHz, 5468.75 bit/s -> -7.5 + 13.590 = 6.090 dB.
    assert lq.ebn0_db(-7.5, 125e3, 5468.75) == pytest.approx(6.090, abs=1e-3)


def test_expected_attempts_and_failure():
    # p = 0.2, k = 3: (1 - 0.2^4) / 0.8 = (1 - 0.0016) / 0.8 = 1.248; failure 0.2^4 = 0.0016.
    assert lq.expected_attempts(0.2, 3) == pytest.approx(1.248)
    assert lq.failure_probability(0.2, 3) == pytest.approx(0.0016)
    # No retries: one attempt, failure p. Unbounded: 1 / (1 - 0.2) = 1.25, never fails.
    assert lq.expected_attempts(0.2, 0) == pytest.approx(1.0)
    assert lq.failure_probability(0.2, 0) == pytest.approx(0.2)
    assert lq.expected_attempts(0.2) == pytest.approx(1.25)
    assert lq.failure_probability(0.2) == 0.0
    # p = 0: one attempt; p = 1: every attempt made (k + 1), all fail; unbounded: infinite.
    got = lq.expected_attempts(np.array([0.0, 1.0]), 3)
    assert got.tolist() == [1.0, 4.0]
    assert lq.failure_probability(1.0, 3) == 1.0
    assert math.isinf(lq.expected_attempts(1.0))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        lq.expected_attempts(1.5, 2)


# --- positions -------------------------------------------------------------------------------------------------


def test_fixed_and_distance():
    x, y = pos.fixed(3, 30.0, 40.0)
    # (30, 40) to the origin: 50 m (3-4-5); to (30, 0): 40 m.
    assert pos.distance_m(x, y, 0.0, 0.0).tolist() == [50.0, 50.0, 50.0]
    assert pos.distance_m(x, y, 30.0, 0.0)[0] == 40.0


def test_uniform_rectangle_bounds_and_seed():
    x, y = pos.uniform_rectangle(10_000, -5.0, 5.0, 100.0, 300.0, np.random.default_rng(3))
    assert (x >= -5).all() and (x < 5).all() and (y >= 100).all() and (y < 300).all()
    # Mean of U(-5, 5) is 0, std 10 / sqrt(12) = 2.887; standard error of the mean 0.029: allow 0.15.
    assert abs(x.mean()) < 0.15
    x2, _ = pos.uniform_rectangle(10_000, -5.0, 5.0, 100.0, 300.0, np.random.default_rng(3))
    assert np.array_equal(x, x2)
    with pytest.raises(ValueError, match="min <= max"):
        pos.uniform_rectangle(1, 1.0, 0.0, 0.0, 1.0, np.random.default_rng(0))


def test_uniform_disc_bounds_and_area_uniformity():
    x, y = pos.uniform_disc(40_000, 100.0, -50.0, 1000.0, np.random.default_rng(5))
    r = pos.distance_m(x, y, 100.0, -50.0)
    assert (r <= 1000.0 + 1e-9).all()
    # Uniform in area: P(r < R/2) = 1/4; binomial std sqrt(0.25 * 0.75 / 40000) = 0.0022: allow 0.015.
    assert (r < 500.0).mean() == pytest.approx(0.25, abs=0.015)


def _write(tmp_path, text: str):
    p = tmp_path / "pos.csv"
    p.write_text(text)
    return p


def test_read_positions_csv(tmp_path):
    got = pos.read_positions_csv(_write(tmp_path, "device,x_m,y_m\n2,10,20\n0,-3.5,4\n\n1,0,0\n"))
    assert got.ids.tolist() == [2, 0, 1]
    assert got.x_m.tolist() == [10.0, -3.5, 0.0] and got.y_m.tolist() == [20.0, 4.0, 0.0]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("id,x,y\n0,1,2\n", ":1: the header is 'id,x,y'"),
        ("", ":1: the header is nothing"),
        ("device,x_m,y_m\n", "no device rows"),
        ("device,x_m,y_m\n0,1\n", ":2: 2 fields, not 3"),
        ("device,x_m,y_m\n-1,1,2\n", ":2: device -1 is not an integer"),
        ("device,x_m,y_m\n1.5,1,2\n", ":2: device 1.5 is not an integer"),
        ("device,x_m,y_m\nnan,1,2\n", ":2: device is nan"),
        ("device,x_m,y_m\n0,nan,2\n", ":2: x_m is nan"),
        ("device,x_m,y_m\n0,1,inf\n", ":2: y_m is inf"),
        ("device,x_m,y_m\n0,1,abc\n", ":2: y_m 'abc' is not a number"),
        ("device,x_m,y_m\n0,1,2\n3,1,2\n0,5,5\n", ":4: device 0 again (first on line 2)"),
    ],
)
def test_read_positions_csv_refusals(tmp_path, text, needle):
    p = _write(tmp_path, text)
    with pytest.raises(pos.PositionsError) as err:
        pos.read_positions_csv(p)
    msg = str(err.value)
    assert str(p) in msg and needle in msg and ";" in msg and "\n" not in msg
    assert isinstance(err.value, TraceError)


def test_read_positions_csv_caps_rows_and_missing_file(tmp_path):
    p = _write(tmp_path, "device,x_m,y_m\n" + "".join(f"{i},0,0\n" for i in range(5)))
    with pytest.raises(pos.PositionsError, match=r":6: more than 4 rows"):
        pos.read_positions_csv(p, max_rows=4)
    assert pos.read_positions_csv(p, max_rows=5).ids.size == 5
    with pytest.raises(pos.PositionsError, match="no such positions file"):
        pos.read_positions_csv(tmp_path / "absent.csv")
    (tmp_path / "bin.csv").write_bytes(b"\xff\xfe\x00\x81")
    with pytest.raises(pos.PositionsError, match="not a text CSV"):
        pos.read_positions_csv(tmp_path / "bin.csv")
