"""LoRa frames on the air: time on air by Semtech's formula, LoRaWAN's frame sizes, and a message cut into frames
under a duty cycle.

Time on air (Semtech SX1276/77/78/79 datasheet, section 4.1.1.7; AN1200.13, the LoRa Modem Designer's Guide):

    T_sym = 2^SF / BW
    T_preamble = (n_preamble + 4.25) T_sym
    n_payload = 8 + max(ceil((8 PL - 4 SF + 28 + 16 CRC - 20 IH) / (4 (SF - 2 DE))) (CR + 4), 0)
    T_packet = T_preamble + n_payload T_sym

PL the PHY payload in bytes, CRC 1 with the payload CRC (LoRaWAN uplinks), IH 1 with an implicit header, DE 1 with
low-data-rate optimisation (required, and set automatically here, when T_sym exceeds 16 ms: SF11 and SF12 at
125 kHz), CR 1-4 for the coding rates 4/5-4/8.

A LoRaWAN message carries at most ``max_app_payload`` application bytes per frame (EU868, by spreading factor at
125 kHz: 51 bytes at SF12-SF10, 115 at SF9, 222 at SF8 and SF7; LoRaWAN Regional Parameters RP002, EU863-870),
plus ``LORAWAN_OVERHEAD`` bytes of MAC header, frame header, port and MIC. After each frame a device on a sub-band
with duty cycle ``dc`` stays silent ``T_frame x (1 / dc - 1)`` (ETSI EN 300 220).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

LORAWAN_OVERHEAD = 13  # MHDR 1 + FHDR 7 (no FOpts) + FPort 1 + MIC 4
MAX_APP_PAYLOAD_EU868 = {12: 51, 11: 51, 10: 51, 9: 115, 8: 222, 7: 222}
LDRO_SYMBOL_S = 0.016  # low-data-rate optimisation is required above this symbol time


@dataclass(frozen=True)
class LoraPhy:
    sf: int = 7
    bandwidth_hz: float = 125e3
    coding_rate: int = 5  # the denominator: 4/5 .. 4/8
    preamble: int = 8
    explicit_header: bool = True
    crc: bool = True

    @property
    def symbol_s(self) -> float:
        return 2.0**self.sf / self.bandwidth_hz

    @property
    def low_data_rate(self) -> bool:
        return self.symbol_s > LDRO_SYMBOL_S

    def payload_symbols(self, phy_bytes: int) -> int:
        de = 1 if self.low_data_rate else 0
        ih = 0 if self.explicit_header else 1
        num = 8 * phy_bytes - 4 * self.sf + 28 + 16 * int(self.crc) - 20 * ih
        return 8 + max(math.ceil(num / (4 * (self.sf - 2 * de))) * self.coding_rate, 0)

    def airtime_s(self, phy_bytes: int) -> float:
        """Time on air of one frame of ``phy_bytes`` PHY payload bytes."""
        return (self.preamble + 4.25 + self.payload_symbols(phy_bytes)) * self.symbol_s

    @property
    def max_app_payload(self) -> int:
        return MAX_APP_PAYLOAD_EU868.get(self.sf, 51)


@dataclass(frozen=True)
class LoraMessage:
    """A message of ``nbytes`` application bytes cut into LoRaWAN frames."""

    frames: int
    airtime_s: float  # all frames' time on air
    duration_s: float  # from the first frame's start to the last one's end, silences between frames included
    silence_after_s: float  # the silence the last frame leaves before the sub-band opens again


def message(phy: LoraPhy, nbytes: float, duty_cycle: float = 1.0) -> LoraMessage:
    """``nbytes`` (rounded up to whole bytes) in full frames of ``phy.max_app_payload`` bytes and one last frame with
    the rest, each with ``LORAWAN_OVERHEAD`` bytes on top, under ``duty_cycle``."""
    size = max(1, math.ceil(nbytes))
    full, rest = divmod(size, phy.max_app_payload)
    t_full = phy.airtime_s(phy.max_app_payload + LORAWAN_OVERHEAD)
    t_last = phy.airtime_s(rest + LORAWAN_OVERHEAD) if rest else t_full
    frames = full + (1 if rest else 0)
    airtime = t_full * (frames - 1) + t_last
    gap = 1.0 / duty_cycle - 1.0
    duration = airtime + t_full * gap * (frames - 1)
    return LoraMessage(frames, airtime, duration, t_last * gap)
