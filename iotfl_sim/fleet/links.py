"""A group's links as the scenario describes them, set on the fleet's per-device arrays at build: rates and loss from
each device's distance to its gateway (``network.link``: fleet/link_quality.py, fleet/positions.py), or rates over
time from a measured trace (``network.bandwidth``: fleet/bandwidth.py).

- Positions, shadowing and bandwidth offsets are drawn from the scenario's seed, per group.
- ``network.link``: the group's radio (``network.radio`` or the profile's) picks the technology's scheme table
  (lorawan: LoRa SF12-SF7; nbiot, lte, wifi, ble); ethernet has no path loss and is refused. The chosen scheme's PHY
  rate becomes both directions' rate, and its packet error rate at the device's margin the loss of each packet
  (retransmitted until it gets through, as ``network.loss`` is). With ``network.lora``, each device's frames are
  timed at its own spreading factor. A device no scheme reaches is out of range: every transfer it starts fails at
  once as ``offline`` (the server hears nothing, as from a device that went away).
- ``network.bandwidth``: both directions follow the trace (repeated with its span); with ``offsets: random`` each
  device starts at a uniformly drawn point of it, so a group does not fade in lockstep.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from iotfl_sim.core.errors import ScenarioError
from iotfl_sim.fleet.bandwidth import links as trace_links
from iotfl_sim.fleet.bandwidth import read_bandwidth
from iotfl_sim.fleet.link_quality import (
    PATH_LOSS_PRESETS,
    TECHNOLOGIES,
    PathLoss,
    draw_shadowing_db,
    link_quality,
    lora_schemes,
)
from iotfl_sim.fleet.positions import distance_m, fixed, read_positions_csv, uniform_disc, uniform_rectangle
from iotfl_sim.scenario.loader import ResolvedGroup
from iotfl_sim.scenario.model import LinkConfig, PositionsConfig
from iotfl_sim.seeding import stream

if TYPE_CHECKING:
    from iotfl_sim.fleet.fleet import Fleet

TECHNOLOGY_OF_RADIO = {"lorawan": "lora", "nbiot": "nbiot", "lte": "lte", "wifi": "wifi", "ble": "ble"}


def _path(p: str, base_dir: Path | None) -> Path:
    path = Path(p).expanduser()
    return base_dir / path if not path.is_absolute() and base_dir is not None else path


def positions(
    i: int, cfg: PositionsConfig, count: int, seed: int, base_dir: Path | None
) -> tuple[np.ndarray, ...]:
    """Group ``i``'s device positions (x, y), m."""
    rng = stream(seed, "positions", i)
    if cfg.kind == "fixed":
        return fixed(count, cfg.x_m, cfg.y_m)
    if cfg.kind == "disc":
        return uniform_disc(count, cfg.x_m, cfg.y_m, cfg.radius_m, rng)
    if cfg.kind == "rectangle":
        return uniform_rectangle(count, cfg.x_m, cfg.x_m + cfg.width_m, cfg.y_m, cfg.y_m + cfg.height_m, rng)
    path = _path(cfg.path, base_dir)
    table = read_positions_csv(path)
    x, y = np.full(count, np.nan), np.full(count, np.nan)
    inside = table.ids < count
    x[table.ids[inside]], y[table.ids[inside]] = table.x_m[inside], table.y_m[inside]
    missing = np.flatnonzero(np.isnan(x))
    if missing.size:
        raise ScenarioError(
            f"{path}: no row for device {int(missing[0])} of fleet.groups[{i}] ({count} devices); give a row per "
            "device 0 .. count-1"
        )
    return x, y


def _model(cfg: LinkConfig) -> PathLoss:
    if isinstance(cfg.path_loss, str):
        return PATH_LOSS_PRESETS[cfg.path_loss]
    p = cfg.path_loss
    return PathLoss(p.pl_d0_db, p.d0_m, p.n, p.sigma_db, "scenario")


def apply(fleet: Fleet, seed: int, base_dir: Path | None) -> None:
    """Set the rates, losses and per-device PHY of every group with ``network.link`` or ``network.bandwidth``."""
    n = fleet.n
    fleet.bandwidth = [None] * len(fleet.groups)
    for i, g in enumerate(fleet.groups):
        net = g.config.network
        members = np.flatnonzero(fleet.group_of == i)
        if net.link is not None:
            _link(fleet, i, g, members, seed, base_dir, n)
        if net.bandwidth is not None:
            b = net.bandwidth
            trace = read_bandwidth(_path(b.trace, base_dir), b.format, b.run, b.up_ratio)
            fleet.bandwidth[i] = trace_links(trace, b.start_s)
            if not fleet.bw_offset.size:
                fleet.bw_offset = np.zeros(n)
            if b.offsets == "random":
                fleet.bw_offset[members] = stream(seed, "bandwidth_offset", i).uniform(
                    0.0, trace.period_s, members.size
                )


def _link(
    fleet: Fleet, i: int, g: ResolvedGroup, members: np.ndarray, seed: int, base_dir: Path | None, n: int
) -> None:
    cfg = g.config.network.link
    radio = g.config.network.radio or g.profile.link.radio
    if radio not in TECHNOLOGY_OF_RADIO:
        raise ScenarioError(
            f"fleet.groups[{i}].network.link: the group's radio is {radio}, which has no path-loss model; use one of "
            f"{', '.join(TECHNOLOGY_OF_RADIO)} (network.radio) or drop network.link"
        )
    tech = TECHNOLOGIES[TECHNOLOGY_OF_RADIO[radio]]
    phy = fleet.lora[i]
    if phy is not None:  # the scheme table at the group's own bandwidth and coding rate
        tech = replace(tech, schemes=lora_schemes(phy.bandwidth_hz, phy.coding_rate))
    model = _model(cfg)
    x, y = positions(i, cfg.positions, members.size, seed, base_dir)
    dist = distance_m(x, y, *cfg.gateway_m)
    shadow = (
        draw_shadowing_db(model, members.size, stream(seed, "shadowing", i)) if model.sigma_db > 0 else 0.0
    )
    q = link_quality(tech, model, dist, shadow, cfg.margin_db)
    if not fleet.out_of_range.size:
        fleet.out_of_range = np.zeros(n, dtype=bool)
        fleet.distance_m = np.full(n, np.nan)
    fleet.distance_m[members] = dist
    fleet.out_of_range[members] = q.scheme < 0
    rate = np.where(
        q.scheme >= 0, q.rate_bps, tech.schemes[0].rate_bps
    )  # out of range: it would try the slowest
    fleet.up_bps[members] = rate
    fleet.down_bps[members] = rate
    fleet.link_loss[members] = np.where(q.scheme >= 0, q.per, 0.0)
    if phy is not None:
        if not fleet.lora_sf.size:
            fleet.lora_sf = np.zeros(n, dtype=np.int8)
        fleet.lora_sf[members] = np.where(q.scheme >= 0, 12 - q.scheme, 0)  # schemes run SF12 .. SF7
