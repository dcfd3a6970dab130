"""FL methods: the ``Strategy`` base (``base``) and the built-in methods, one module each.

Methods are found by name through ``iotfl_sim.methods`` (built-ins are registered beside their options in
``scenario/algorithms/``); nothing here lists them.
"""

from __future__ import annotations

from iotfl_sim import methods
from iotfl_sim.algorithms.base import Strategy


def make_strategy(cfg) -> Strategy:
    """The strategy for a method's options (their ``name`` picks the method)."""
    return methods.method(cfg.name).strategy_class()(cfg)
