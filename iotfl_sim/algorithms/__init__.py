"""FL methods, each a Strategy, found by name."""

from __future__ import annotations

from iotfl_sim.algorithms.adapterfl import AdapterFL, FedBase
from iotfl_sim.algorithms.adaptivefl import AdaptiveFL
from iotfl_sim.algorithms.base import Strategy
from iotfl_sim.algorithms.dadaquant import DAdaQuant
from iotfl_sim.algorithms.decoupled import Decoupled
from iotfl_sim.algorithms.fedavg import FedAvg
from iotfl_sim.algorithms.feddf import FedDF
from iotfl_sim.algorithms.fedx import FedX
from iotfl_sim.algorithms.flexfl import FlexFL
from iotfl_sim.algorithms.heterofl import HeteroFL
from iotfl_sim.algorithms.heterofl_iot import HeteroFLIoT
from iotfl_sim.algorithms.scalefl import ScaleFL

STRATEGIES: tuple[type, ...] = (
    FedAvg, Decoupled, HeteroFL, HeteroFLIoT, AdaptiveFL, FlexFL, ScaleFL, AdapterFL, FedBase, FedDF, FedX, DAdaQuant,
)
REGISTRY: dict[str, type] = {cls.name: cls for cls in STRATEGIES}  # keyed by each class's ``name``


def make_strategy(cfg) -> Strategy:
    """The strategy for an algorithm config (its ``name`` picks the class)."""
    return REGISTRY[cfg.name](cfg)
