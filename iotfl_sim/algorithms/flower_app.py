"""The method slot of a Flower app run: the app's own ServerApp decides everything a method decides here
(selection, aggregation), through the simulated fleet (``iotfl_sim.sim.flower_loop``); this class only holds its
options for the engine's set-up."""

from __future__ import annotations

from typing import Any

from iotfl_sim.algorithms.base import Strategy, StrategyContext
from iotfl_sim.scenario.algorithms.flower import FlowerConfig


class FlowerApp(Strategy):
    Config = FlowerConfig

    def setup(self, ctx: StrategyContext) -> None:
        self.ctx = ctx

    def select(self, rnd: int, fleet: Any, rng: Any) -> list:
        raise RuntimeError("a Flower app selects its nodes in its own ServerApp (iotfl_sim.sim.flower_loop)")

    def payload(self, assignment: Any) -> Any:
        raise RuntimeError("a Flower app's messages carry its own payload (iotfl_sim.sim.flower_loop)")

    def aggregate(self, rnd: int, updates: list) -> None:
        raise RuntimeError("a Flower app aggregates in its own ServerApp (iotfl_sim.sim.flower_loop)")

    def eval_targets(self) -> list:
        return []  # the app evaluates itself: its replies' metrics are the run's figures

    def candidate_specs(self) -> list:
        return []  # the app's model is its own: traced as it runs, not analysed at set-up
