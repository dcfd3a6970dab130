"""Link quality from distance: path loss with shadowing, SNR, the fastest scheme that closes the link, its frame
loss, and retries. Pure functions over numpy arrays (one entry per device); nothing here keeps state or draws
numbers except from a ``numpy.random.Generator`` passed in.

Model, step by step (every number's source is in the table or constant that holds it):

1. Path loss, log-distance with log-normal shadowing (Rappaport, *Wireless Communications*, 2nd ed., section 4.9):

       PL(d) = PL(d0) + 10 n log10(max(d, d0) / d0) + X,   X ~ N(0, sigma^2)

   ``X`` is drawn once per device (static shadowing: a device that does not move keeps its obstacles) by
   ``draw_shadowing_db`` from the Generator given. Choice: distances below ``d0`` are clamped to ``d0`` (the fit is
   not valid there and the loss must not fall below PL(d0)). Presets: ``PATH_LOSS_PRESETS``.
2. Received power ``rx = tx_dbm + tx_gain_dbi + rx_gain_dbi - PL``; noise ``N = -174 dBm/Hz + 10 log10(B) + NF``
   (thermal noise density kT at 290 K); ``SNR = rx - N``. Presets per technology: ``TECHNOLOGIES``.
3. Each technology has schemes (LoRa spreading factors, Wi-Fi MCS, LTE CQI, NB-IoT coverage classes, BLE PHYs),
   each with a PHY rate, a bandwidth and a minimum SNR. A scheme closes the link when ``SNR >= min_snr + margin``
   in its own bandwidth, i.e. when ``rx >= sensitivity + margin`` with ``sensitivity = N(B_scheme) + min_snr``.
   ``select_scheme`` takes the fastest scheme that closes; none: out of range (index -1, rate 0).
   Where a source gives receiver sensitivities instead of SNRs (Wi-Fi, BLE, NB-IoT's coupling losses), the table
   stores ``min_snr = sensitivity - N(B, NF of the preset)``, so the preset reproduces the published sensitivity
   exactly, and a different noise figure shifts it by the difference.
4. Frame loss from the SNR margin ``m`` above the chosen scheme's threshold: a logistic waterfall

       PER(m) = 1 / (1 + 9 * 10^(m / w))

   equal to 10 % at the threshold (the operating point of the LTE CQI table's thresholds and of IEEE 802.11's
   minimum-sensitivity definition), falling about one decade per ``w`` dB above it and rising towards 1 below
   it. ``w`` (``Technology.per_decade_db``) is an assumption, 2 dB per decade for every preset; no source was
   fitted. ``per_from_ber`` gives the alternative for uncoded links: PER = 1 - (1 - BER)^bits, with ``ber_bpsk``
   for BPSK (and Gray-coded QPSK, per bit).
5. Retries: with per-attempt loss ``p`` and at most ``k`` retransmissions, ``expected_attempts`` =
   (1 - p^(k+1)) / (1 - p) (k + 1 when p = 1), ``failure_probability`` = p^(k+1); unbounded retries (k None):
   1 / (1 - p) and 0 (inf and 1 when p = 1).

What the model leaves out: fast fading, interference and collisions (SNR, not SINR), antenna patterns, the
uplink/downlink asymmetry beyond what the caller sets in the preset, and any correlation of shadowing between
nearby devices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from iotfl_sim.fleet.lora import LoraPhy

THERMAL_NOISE_DBM_PER_HZ = -174.0  # 10 log10(k * 290 K * 1 Hz / 1 mW) = -173.98, rounded as link budgets do
SPEED_OF_LIGHT_M_S = 299_792_458.0


# ---------------------------------------------------------------------------------------------------------------
# 1. Path loss
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PathLoss:
    """Log-distance path loss: ``PL(d0)`` dB at ``d0_m``, exponent ``n``, shadowing std ``sigma_db``."""

    pl_d0_db: float
    d0_m: float
    n: float
    sigma_db: float
    source: str = ""


def free_space(frequency_hz: float, d0_m: float = 1.0, sigma_db: float = 0.0) -> PathLoss:
    """Friis free space: PL(d0) = 20 log10(4 pi d0 f / c), n = 2 (ITU-R P.525)."""
    pl = 20.0 * math.log10(4.0 * math.pi * d0_m * frequency_hz / SPEED_OF_LIGHT_M_S)
    return PathLoss(pl, d0_m, 2.0, sigma_db, f"free space (Friis, ITU-R P.525) at {frequency_hz / 1e6:g} MHz")


PATH_LOSS_PRESETS: dict[str, PathLoss] = {
    "free_space_868": free_space(868e6),
    "free_space_2400": free_space(2.4e9),
    # Bor, Roedig, Voigt, Alonso, "Do LoRa low-power wide-area networks scale?", ACM MSWiM 2016: fitted to their
    # LoRa 868 MHz measurements (Lancaster, built-up area). The same PL(d0), n and d0 are LoRaSim's defaults (its
    # source sets the variance to 0); sigma 3.57 dB is the paper's figure as cited by the brief, not re-read here.
    "bor2016_lora": PathLoss(
        127.41, 40.0, 2.08, 3.57, "Bor et al. MSWiM 2016 (LoRaSim): PL(40 m) 127.41 dB, n 2.08, sigma 3.57 dB"
    ),
    # Petajajarvi, Mikhaylov, Roivainen, Hanninen, Pettissalo, "On the coverage of LPWANs: range evaluation and
    # channel attenuation model for LoRa technology", ITST 2015: node on a car roof, base station in Oulu, 868 MHz,
    # 14 dBm, SF12. B = 128.95 dB at d0 = 1 km, n = 2.32, sigma = 7.8 dB as implemented in FLoRa's
    # LoRaPathLossOulu (florasim/flora) and restated by LoRaFlexSim's documentation; the paper's table itself was
    # not read here. The paper's model includes the base station's antenna gain (FLoRa subtracts 2 dBi on top).
    "petajajarvi2015_oulu": PathLoss(
        128.95,
        1000.0,
        2.32,
        7.8,
        "Petajajarvi et al. ITST 2015, Oulu, node on ground: B 128.95 dB at 1 km, n 2.32, sigma 7.8 dB",
    ),
}


def path_loss_db(
    model: PathLoss, distance_m: np.ndarray | float, shadowing_db: np.ndarray | float = 0.0
) -> np.ndarray:
    """PL(d) + shadowing (dB), elementwise; ``distance_m`` below ``model.d0_m`` counts as ``d0_m``."""
    d = np.maximum(np.asarray(distance_m, dtype=float), model.d0_m)
    return model.pl_d0_db + 10.0 * model.n * np.log10(d / model.d0_m) + np.asarray(shadowing_db, dtype=float)


def draw_shadowing_db(model: PathLoss, n_devices: int, rng: np.random.Generator) -> np.ndarray:
    """One static shadowing term per device, N(0, sigma^2) dB, from ``rng`` (zeros when sigma is 0)."""
    if model.sigma_db <= 0.0:
        return np.zeros(n_devices)
    return rng.normal(0.0, model.sigma_db, n_devices)


def max_distance_m(model: PathLoss, max_loss_db: np.ndarray | float) -> np.ndarray:
    """Distance at which the median path loss (no shadowing) reaches ``max_loss_db``: the inverse of ``path_loss_db``
    (``d0_m`` where the budget does not even cover PL(d0))."""
    exp = (np.asarray(max_loss_db, dtype=float) - model.pl_d0_db) / (10.0 * model.n)
    return model.d0_m * 10.0 ** np.maximum(exp, 0.0)


# ---------------------------------------------------------------------------------------------------------------
# 2. SNR, and the technologies
# ---------------------------------------------------------------------------------------------------------------


def noise_floor_dbm(bandwidth_hz: np.ndarray | float, noise_figure_db: float) -> np.ndarray:
    """-174 dBm/Hz + 10 log10(B) + NF (dBm)."""
    return THERMAL_NOISE_DBM_PER_HZ + 10.0 * np.log10(np.asarray(bandwidth_hz, dtype=float)) + noise_figure_db


@dataclass(frozen=True)
class Scheme:
    """One modulation and coding choice: its PHY rate (bit/s), bandwidth (Hz) and minimum SNR (dB, in that
    bandwidth)."""

    name: str
    rate_bps: float
    bandwidth_hz: float
    min_snr_db: float


@dataclass(frozen=True)
class Technology:
    """A radio's link budget (transmit power, antenna gains, the receiver's noise figure) and its schemes, slowest
    first. ``per_decade_db``: the PER waterfall's slope (see the module's docstring, step 4)."""

    name: str
    tx_dbm: float
    noise_figure_db: float
    schemes: tuple[Scheme, ...]
    tx_gain_dbi: float = 0.0
    rx_gain_dbi: float = 0.0
    per_decade_db: float = 2.0
    source: str = ""

    @property
    def bandwidth_hz(self) -> float:
        """The reference bandwidth ``snr_db`` reports SNR in: the slowest (most robust) scheme's."""
        return self.schemes[0].bandwidth_hz

    def sensitivities_dbm(self) -> np.ndarray:
        """Each scheme's sensitivity: N(B_scheme, NF) + min_snr (dBm), slowest first."""
        bw = np.array([s.bandwidth_hz for s in self.schemes])
        return noise_floor_dbm(bw, self.noise_figure_db) + np.array([s.min_snr_db for s in self.schemes])

    def with_(self, **changes) -> Technology:
        """A copy with fields changed (e.g. ``tx_dbm=20``)."""
        return replace(self, **changes)


def rx_power_dbm(tech: Technology, path_loss: np.ndarray | float) -> np.ndarray:
    """tx_dbm + tx_gain + rx_gain - PL (dBm)."""
    return tech.tx_dbm + tech.tx_gain_dbi + tech.rx_gain_dbi - np.asarray(path_loss, dtype=float)


def snr_db(tech: Technology, path_loss: np.ndarray | float, bandwidth_hz: float | None = None) -> np.ndarray:
    """SNR (dB) in ``bandwidth_hz`` (default: the technology's reference bandwidth)."""
    bw = tech.bandwidth_hz if bandwidth_hz is None else bandwidth_hz
    return rx_power_dbm(tech, path_loss) - noise_floor_dbm(bw, tech.noise_figure_db)


def _from_sensitivity(name: str, rate: float, bw: float, sens_dbm: float, nf: float) -> Scheme:
    return Scheme(name, rate, bw, float(sens_dbm - noise_floor_dbm(bw, nf)))


# LoRa: Semtech SX1276/77/78/79 datasheet (rev. 7, 2020), section 4.1.1.2, table "Range of spreading factors":
# demodulator SNR limits SF7 -7.5 dB ... SF12 -20 dB (2.5 dB per SF). Bit rate R = SF * (BW / 2^SF) * 4 / (4 + CR)
# (same section; ``lora_bit_rate_bps``), here at 125 kHz and CR 4/5: SF7 5468.75 bit/s ... SF12 292.97 bit/s.
LORA_SNR_LIMIT_DB = {7: -7.5, 8: -10.0, 9: -12.5, 10: -15.0, 11: -17.5, 12: -20.0}


def lora_bit_rate_bps(phy: LoraPhy) -> float:
    """LoRa PHY bit rate: SF bits per symbol of ``phy.symbol_s`` = 2^SF / BW (``fleet.lora``), times the code rate
    4 / ``phy.coding_rate`` (4/5 .. 4/8)."""
    return phy.sf * (4.0 / phy.coding_rate) / phy.symbol_s


def lora_schemes(bandwidth_hz: float = 125e3, coding_rate: int = 5) -> tuple[Scheme, ...]:
    """SF12 (slowest) .. SF7 at ``bandwidth_hz`` and code rate 4/``coding_rate``."""
    return tuple(
        Scheme(
            f"SF{sf}",
            lora_bit_rate_bps(LoraPhy(sf, bandwidth_hz, coding_rate)),
            bandwidth_hz,
            LORA_SNR_LIMIT_DB[sf],
        )
        for sf in range(12, 6, -1)
    )


# Wi-Fi 802.11n, 20 MHz, one spatial stream, 800 ns guard interval: MCS0-7 rates 6.5 .. 65 Mb/s (IEEE 802.11-2012
# Table 20-30) and the standard's minimum input sensitivity -82 .. -64 dBm (Table 20-22, PER 10 % on 4096-byte
# frames); stored as SNRs with the preset's NF of 10 dB (the receiver that sensitivity table assumes: NF 10 dB plus
# 5 dB implementation margin), so min SNR = sensitivity + 90.99 dB: MCS0 8.99 dB .. MCS7 26.99 dB. Conservative:
# shipping chips are several dB better than the standard's floor.
WIFI_NF_DB = 10.0
_WIFI_MCS = (
    ("MCS0 BPSK 1/2", 6.5e6, -82.0),
    ("MCS1 QPSK 1/2", 13e6, -79.0),
    ("MCS2 QPSK 3/4", 19.5e6, -77.0),
    ("MCS3 16-QAM 1/2", 26e6, -74.0),
    ("MCS4 16-QAM 3/4", 39e6, -70.0),
    ("MCS5 64-QAM 2/3", 52e6, -66.0),
    ("MCS6 64-QAM 3/4", 58.5e6, -65.0),
    ("MCS7 64-QAM 5/6", 65e6, -64.0),
)

# LTE: the 4-bit CQI table of 3GPP TS 36.213 (Table 7.2.3-1; the first of several CQI tables in later releases):
# spectral efficiency 0.1523 .. 5.5547 bit per resource element, with the SNR thresholds (10 % BLER, AWGN, SISO)
# -6.7 .. 22.7 dB used by many system-level simulators (they trace to link-level curves such as the Vienna LTE
# simulators'; the attribution was not verified here, treat them as a common convention). Rate = efficiency x
# resource elements per second of a 10 MHz carrier: 50 RB x 12 subcarriers x 14 symbols x 1000 subframes/s =
# 8.4e6 RE/s, no control or reference-signal overhead deducted, one layer. Noise in the 50 RB's 9 MHz.
LTE_RB = 50
LTE_RE_PER_S = LTE_RB * 12 * 14 * 1000
LTE_BANDWIDTH_HZ = LTE_RB * 180e3
_LTE_CQI = (
    (1, "QPSK", 0.1523, -6.7),
    (2, "QPSK", 0.2344, -4.7),
    (3, "QPSK", 0.3770, -2.3),
    (4, "QPSK", 0.6016, 0.2),
    (5, "QPSK", 0.8770, 2.4),
    (6, "QPSK", 1.1758, 4.3),
    (7, "16QAM", 1.4766, 5.9),
    (8, "16QAM", 1.9141, 8.1),
    (9, "16QAM", 2.4063, 10.3),
    (10, "64QAM", 2.7305, 11.7),
    (11, "64QAM", 3.3223, 14.1),
    (12, "64QAM", 3.9023, 16.3),
    (13, "64QAM", 4.5234, 18.7),
    (14, "64QAM", 5.1152, 21.0),
    (15, "64QAM", 5.5547, 22.7),
)

# NB-IoT coverage classes by maximum coupling loss (3GPP TR 45.820 and TR 36.888 link budgets: 144 dB the GPRS/LTE
# reference, 164 dB the NB-IoT target; 154 dB the middle class, CE0/CE1/CE2). A class closes while
# tx_dbm - rx_dbm <= MCL, i.e. rx >= 23 dBm - MCL, stored as an SNR in a 15 kHz single tone with NF 5 dB (an
# assumed base-station noise figure; the choice only shifts the reported SNR, not which class closes at 23 dBm).
# Rates: CE0 62.5 kb/s (the Cat-NB1 uplink peak, the project's nbiot preset rate); CE2 160 bit/s (TR 45.820's
# target: 160 bit/s at the application layer at 164 dB MCL); CE1 3162 bit/s is NOT from a source: the geometric
# mean of the two (an interpolation, assumption).
NBIOT_TX_DBM = 23.0  # UE power class 3, 3GPP TS 36.101
NBIOT_NF_DB = 5.0
NBIOT_TONE_HZ = 15e3
_NBIOT_CE = (
    ("CE2 (MCL 164 dB)", 160.0, 164.0),
    ("CE1 (MCL 154 dB)", math.sqrt(62.5e3 * 160.0), 154.0),
    ("CE0 (MCL 144 dB)", 62.5e3, 144.0),
)

# BLE: Nordic nRF52840 product specification, radio sensitivity (typical, ideal transmitter): LE Coded S=8
# (125 kb/s) -103 dBm, LE Coded S=2 (500 kb/s) -99 dBm, LE 1M -95 dBm, LE 2M -92 dBm; quoted from the product
# specification as remembered, not re-read here (-103 dBm at 125 kb/s is corroborated by third-party summaries).
# Bandwidth 1 MHz (2 MHz for LE 2M), NF 6 dB assumed (it only shifts the reported SNR).
BLE_NF_DB = 6.0
_BLE_PHY = (
    ("LE Coded S=8", 125e3, 1e6, -103.0),
    ("LE Coded S=2", 500e3, 1e6, -99.0),
    ("LE 1M", 1e6, 1e6, -95.0),
    ("LE 2M", 2e6, 2e6, -92.0),
)

TECHNOLOGIES: dict[str, Technology] = {
    "lora": Technology(
        "lora",
        14.0,
        6.0,
        lora_schemes(),
        source="SX1276: +14 dBm (EU868 limit 25 mW ERP; the datasheet's high-efficiency PA), 125 kHz, CR 4/5; "
        "NF 6 dB (Semtech SX1276Lib NOISE_FIGURE_HF; AN1200.22); SNR limits from the SX1276 datasheet",
    ),
    "nbiot": Technology(
        "nbiot",
        NBIOT_TX_DBM,
        NBIOT_NF_DB,
        tuple(
            _from_sensitivity(n, r, NBIOT_TONE_HZ, NBIOT_TX_DBM - mcl, NBIOT_NF_DB) for n, r, mcl in _NBIOT_CE
        ),
        source="3GPP TS 36.101 power class 3 (23 dBm); coverage classes by MCL 144/154/164 dB (TR 45.820); "
        "15 kHz single tone, NF 5 dB assumed; CE1's rate interpolated",
    ),
    "lte": Technology(
        "lte",
        23.0,
        5.0,
        tuple(
            Scheme(f"CQI{c} {m}", eff * LTE_RE_PER_S, LTE_BANDWIDTH_HZ, snr) for c, m, eff, snr in _LTE_CQI
        ),
        source="3GPP TS 36.101 UE power class 3 (23 dBm); 10 MHz carrier, 50 RB; TS 36.213 CQI table with the "
        "common 10 % BLER SNR mapping; eNB NF 5 dB assumed",
    ),
    "wifi": Technology(
        "wifi",
        20.0,
        WIFI_NF_DB,
        tuple(_from_sensitivity(n, r, 20e6, s, WIFI_NF_DB) for n, r, s in _WIFI_MCS),
        source="2.4 GHz, 20 dBm (ETSI EN 300 328 EIRP limit 100 mW); 802.11n HT20 1 stream, IEEE 802.11-2012 "
        "rates and minimum sensitivities, NF 10 dB",
    ),
    "ble": Technology(
        "ble",
        0.0,
        BLE_NF_DB,
        tuple(_from_sensitivity(n, r, bw, s, BLE_NF_DB) for n, r, bw, s in _BLE_PHY),
        source="nRF52840 at 0 dBm (the project's ble preset); its sensitivities per PHY; NF 6 dB assumed",
    ),
}


# ---------------------------------------------------------------------------------------------------------------
# 3. Scheme selection
# ---------------------------------------------------------------------------------------------------------------


def select_scheme(tech: Technology, rx_dbm: np.ndarray | float, margin_db: float = 0.0) -> np.ndarray:
    """Index into ``tech.schemes`` of the fastest scheme with ``rx >= sensitivity + margin``, per device; -1 where
    none closes (out of range). Schemes are ordered slowest first, so the index grows with the rate."""
    rx = np.atleast_1d(np.asarray(rx_dbm, dtype=float))
    ok = rx[:, None] >= tech.sensitivities_dbm()[None, :] + margin_db
    count = ok.shape[1]
    last = count - 1 - np.argmax(ok[:, ::-1], axis=1)
    return np.where(ok.any(axis=1), last, -1)


def scheme_rates_bps(tech: Technology, index: np.ndarray) -> np.ndarray:
    """PHY rate (bit/s) of each chosen scheme; 0 where the index is -1."""
    rates = np.array([s.rate_bps for s in tech.schemes] + [0.0])
    return rates[np.asarray(index)]


def best_scheme(tech: Technology, snr: float, margin_db: float = 0.0) -> tuple[str, float] | None:
    """Scalar form: (scheme name, rate in bit/s) of the fastest scheme closing at ``snr`` dB (in the technology's
    reference bandwidth) with ``margin_db``; None: out of range."""
    rx = snr + float(noise_floor_dbm(tech.bandwidth_hz, tech.noise_figure_db))
    i = int(select_scheme(tech, rx, margin_db)[0])
    return None if i < 0 else (tech.schemes[i].name, tech.schemes[i].rate_bps)


def lora_pick_sf(snr: float, margin_db: float = 0.0) -> int | None:
    """ADR-like: the smallest spreading factor (fastest) whose demodulation limit plus ``margin_db`` is at most
    ``snr`` (dB, 125 kHz); None when even SF12 does not close. At the limit itself the link closes (>=). LoRaWAN
    network servers add an installation margin of several dB here (ChirpStack's default: 10 dB)."""
    for sf in range(7, 13):
        if snr >= LORA_SNR_LIMIT_DB[sf] + margin_db:
            return sf
    return None


# ---------------------------------------------------------------------------------------------------------------
# 4. Loss from SNR, and retries
# ---------------------------------------------------------------------------------------------------------------


def per_waterfall(margin_db: np.ndarray | float, per_decade_db: float = 2.0) -> np.ndarray:
    """PER = 1 / (1 + 9 * 10^(margin / per_decade_db)): 0.1 at margin 0, about a decade lower per
    ``per_decade_db`` above, towards 1 below."""
    x = np.clip(np.asarray(margin_db, dtype=float) / per_decade_db, -300.0, 300.0)
    return 1.0 / (1.0 + 9.0 * 10.0**x)


def ber_bpsk(ebn0_db: np.ndarray | float) -> np.ndarray:
    """Bit error rate of coherent BPSK (and per bit of Gray-coded QPSK) in AWGN: Q(sqrt(2 Eb/N0)) =
    erfc(sqrt(Eb/N0)) / 2 (Proakis, *Digital Communications*)."""
    from scipy.special import erfc  # here: scipy.special takes half a second to import, and only this uses it

    ebn0 = 10.0 ** (np.asarray(ebn0_db, dtype=float) / 10.0)
    return 0.5 * erfc(np.sqrt(ebn0))


def ebn0_db(snr: np.ndarray | float, bandwidth_hz: float, rate_bps: float) -> np.ndarray:
    """Eb/N0 = SNR x B / R (dB)."""
    return np.asarray(snr, dtype=float) + 10.0 * math.log10(bandwidth_hz / rate_bps)


def per_from_ber(ber: np.ndarray | float, bits: int) -> np.ndarray:
    """Frame error rate of ``bits`` independent bit errors: 1 - (1 - BER)^bits (computed stably)."""
    b = np.asarray(ber, dtype=float)
    return -np.expm1(bits * np.log1p(-np.minimum(b, 1.0 - 1e-300)))


def _probability(p: np.ndarray | float) -> np.ndarray:
    a = np.asarray(p, dtype=float)
    if not np.all((a >= 0.0) & (a <= 1.0)):
        raise ValueError(
            f"a loss probability must lie in [0, 1], got {a[~((a >= 0.0) & (a <= 1.0))].ravel()[:3]}"
        )
    return a


def expected_attempts(p: np.ndarray | float, max_retries: int | None = None) -> np.ndarray:
    """Expected transmissions of a frame lost with probability ``p`` per attempt, sent until it arrives or after
    ``max_retries`` retransmissions (``max_retries + 1`` attempts): (1 - p^(k+1)) / (1 - p), k + 1 at p = 1;
    unbounded (None): 1 / (1 - p), inf at p = 1."""
    p = _probability(p)
    one = p >= 1.0
    q = np.where(one, 0.0, p)  # p = 1 is handled apart
    if max_retries is None:
        return np.where(one, np.inf, 1.0 / (1.0 - q))
    k1 = max_retries + 1
    return np.where(one, float(k1), (1.0 - q**k1) / (1.0 - q))


def failure_probability(p: np.ndarray | float, max_retries: int | None = None) -> np.ndarray:
    """Probability that all ``max_retries + 1`` attempts fail: p^(k+1); unbounded (None): 0, or 1 at p = 1."""
    p = _probability(p)
    if max_retries is None:
        return np.where(p >= 1.0, 1.0, 0.0)
    return p ** (max_retries + 1)


# ---------------------------------------------------------------------------------------------------------------
# Everything at once, for a fleet
# ---------------------------------------------------------------------------------------------------------------


class LinkQuality(NamedTuple):
    """Per-device arrays (one entry per distance)."""

    path_loss_db: np.ndarray
    rx_dbm: np.ndarray
    snr_db: np.ndarray  # in the technology's reference bandwidth
    scheme: np.ndarray  # index into tech.schemes, -1: out of range
    rate_bps: np.ndarray  # 0 where out of range
    margin_db: np.ndarray  # rx - the chosen scheme's sensitivity (>= margin asked); nan where out of range
    per: np.ndarray  # frame loss at the chosen scheme (per_waterfall); 1 where out of range


def link_quality(
    tech: Technology,
    model: PathLoss,
    distance_m: np.ndarray | float,
    shadowing_db: np.ndarray | float = 0.0,
    margin_db: float = 0.0,
) -> LinkQuality:
    """Path loss, received power, SNR, the fastest scheme closing with ``margin_db``, its rate and its PER, for
    devices at ``distance_m`` with static ``shadowing_db`` (from ``draw_shadowing_db``)."""
    pl = np.atleast_1d(path_loss_db(model, distance_m, shadowing_db))
    rx = rx_power_dbm(tech, pl)
    idx = select_scheme(tech, rx, margin_db)
    sens = np.append(tech.sensitivities_dbm(), np.nan)
    margin = rx - sens[idx]
    per = np.where(idx >= 0, per_waterfall(np.nan_to_num(margin), tech.per_decade_db), 1.0)
    return LinkQuality(pl, rx, snr_db(tech, pl), idx, scheme_rates_bps(tech, idx), margin, per)
