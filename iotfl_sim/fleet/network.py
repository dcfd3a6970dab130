"""Radios and links: presets for power and medium access, jitter and loss, shared gateways.

Every preset in ``RADIO_PRESETS`` states where its numbers come from (datasheet or paper) in its
``source`` field.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

MTU_BYTES = 1460  # payload per packet for loss and retransmission accounting
LORAWAN_FRAME_BYTES = 222  # largest LoRaWAN application payload (EU868, DR5-7)


@dataclass(frozen=True)
class RadioPreset:
    """Power and medium-access behaviour of one radio technology.

    Power while sending/receiving comes on top of the board's idle power. ``lte_model`` uses the
    linear LTE power model of Huang et al. (MobiSys 2012): P = a * throughput + b, plus a tail of
    ``tail_s`` seconds at ``tail_w`` after every transfer. ``duty_cycle`` limits the share of time a
    device may transmit (LoRaWAN sub-bands: 1 %).
    """

    tx_w: float
    rx_w: float
    tail_s: float = 0.0
    tail_w: float = 0.0
    duty_cycle: float = 1.0
    lte_model: bool = False
    source: str = ""

    @property
    def tail_j(self) -> float:
        """Energy of the tail after a transfer (J, above idle): charged once per message, not per packet."""
        return self.tail_w * self.tail_s


LTE_A_UP_W_PER_MBPS = 0.43839
LTE_A_DOWN_W_PER_MBPS = 0.05197
LTE_BASE_W = 1.28804

RADIO_PRESETS: dict[str, RadioPreset] = {
    "wifi": RadioPreset(
        0.79, 0.33, source="ESP32 datasheet: Wi-Fi tx 240 mA, rx 95-100 mA at 3.3 V"
    ),
    "lte": RadioPreset(
        LTE_BASE_W,
        LTE_BASE_W,
        tail_s=11.576,
        tail_w=1.06,
        lte_model=True,
        source="Huang et al. MobiSys 2012 as commonly cited: a_u 438.39 mW/Mbps, a_d 51.97 mW/Mbps, "
        "b 1288.04 mW, tail 11.576 s at about 1060 mW",
    ),
    "nbiot": RadioPreset(0.551, 0.178, source="M5311 module: tx 167 mA at 23 dBm, rx 54 mA, at 3.3 V"),
    "lorawan": RadioPreset(
        0.396, 0.038, duty_cycle=0.01, source="SX1276: tx 120 mA at +20 dBm, rx 11.5 mA, at 3.3 V; EU868 1 % duty cycle"
    ),
    "ble": RadioPreset(0.0192, 0.0189, source="nRF52840: tx 6.4 mA at 0 dBm, rx 6.3 mA, at 3 V"),
    "ethernet": RadioPreset(0.1, 0.1, source="assumption: PHY power of a 100 Mb/s Ethernet port (~0.1 W)"),
}


def transfer_power(preset: RadioPreset, up: bool, throughput_bps: float) -> float:
    """Radio power (W, above idle) while moving data at ``throughput_bps``."""
    if preset.lte_model:
        a = LTE_A_UP_W_PER_MBPS if up else LTE_A_DOWN_W_PER_MBPS
        return a * throughput_bps / 1e6 + LTE_BASE_W
    return preset.tx_w if up else preset.rx_w


def transfer_energy_j(preset: RadioPreset, up: bool, nbytes: float, throughput_bps: float) -> float:
    """Radio energy (J, above the board's idle power) of one message of ``nbytes`` at ``throughput_bps`` with the
    preset's power model: power x airtime, plus the tail once after the message. A duty cycle's silences and the
    round-trip wait draw no radio power (the board's idle power covers them), so they add nothing here; this is
    what ``sim.device`` charges for a transfer on a link of its own (``network.power_model: preset``)."""
    airtime = nbytes * 8.0 / throughput_bps
    return transfer_power(preset, up, throughput_bps) * airtime + preset.tail_j


def retransmitted_bytes(nbytes: float, loss: float, rng: np.random.Generator) -> float:
    """Bytes actually sent when each packet is lost with probability ``loss`` and resent until it arrives."""
    if loss <= 0:
        return nbytes
    packets = max(1, math.ceil(nbytes / MTU_BYTES))
    resent = rng.negative_binomial(packets, 1.0 - loss)
    return nbytes * (packets + resent) / packets


def duty_cycled_duration(airtime: float, duty_cycle: float, frames: int) -> float:
    """Wall time to send ``frames`` frames of total ``airtime`` under a duty-cycle limit.

    After each frame of airtime T the device must stay silent T * (1/dc - 1) (ETSI EN 300 220);
    the silence after the last frame is not part of this transfer (it delays the next one).
    """
    if duty_cycle >= 1.0:
        return airtime
    per_frame = airtime / frames
    return airtime + (frames - 1) * per_frame * (1.0 / duty_cycle - 1.0)


def lorawan_frames(nbytes: float) -> int:
    return max(1, math.ceil(nbytes / LORAWAN_FRAME_BYTES))


class SharedMedium:
    """A gateway or access point whose capacity is shared by the transfers crossing it.

    Processor sharing with max-min fairness: each active transfer gets an equal share of the
    capacity, capped by its own link's rate, and capacity a capped transfer cannot use goes to the
    others. Rates are recomputed whenever a transfer starts or ends.
    """

    def __init__(self, env: simpy.Environment, capacity_bps: float, name: str = "") -> None:
        self.env = env
        self.capacity = capacity_bps
        self.name = name
        self._flows: dict[int, list[Any]] = {}  # id -> [remaining bits, own cap bps, done event, rate]
        self._next_id = 0
        self._last = env.now
        self._generation = 0

    def transfer(self, bits: float, own_bps: float) -> Generator[simpy.Event, Any, float]:
        """SimPy process body: move ``bits`` through the medium; returns the time it took."""
        start = self.env.now
        self._advance()
        done = self.env.event()
        self._flows[self._next_id] = [float(bits), float(own_bps), done, 0.0]
        self._next_id += 1
        self._reschedule()
        yield done
        return self.env.now - start

    def active(self) -> int:
        return len(self._flows)

    def _advance(self) -> None:
        dt = self.env.now - self._last
        if dt > 0:
            for f in self._flows.values():
                f[0] -= f[3] * dt
        self._last = self.env.now

    def _allocate(self) -> None:
        flows = sorted(self._flows.values(), key=lambda f: f[1])
        left, n = self.capacity, len(flows)
        for i, f in enumerate(flows):
            share = left / (n - i)
            f[3] = min(f[1], share)
            left -= f[3]

    def _reschedule(self) -> None:
        for key in [k for k, f in self._flows.items() if f[0] <= 1e-9]:
            self._flows.pop(key)[2].succeed()
        if not self._flows:
            return
        self._allocate()
        self._generation += 1
        wait = min(f[0] / f[3] for f in self._flows.values())
        self.env.process(self._wake(wait, self._generation))

    def _wake(self, delay: float, generation: int):
        yield self.env.timeout(delay)
        if generation != self._generation:
            return  # a later start or end already rescheduled
        self._advance()
        for f in self._flows.values():  # floating-point residue of the flow that just ended
            if f[3] > 0 and f[0] / f[3] < 1e-9:
                f[0] = 0.0
        self._reschedule()
