"""How to build a model: the family and the dataset's shape, independent of any submodel."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from torch import nn

from iotfl_sim.fl.cost.footprint import ModelCost, measure_cost
from iotfl_sim.fl.models.build import build_model
from iotfl_sim.fl.submodel import Shapes, SubmodelSpec, shapes_of

# (channels, height, width, classes, nominal train size) of each dataset: lets the system-only mode
# size models and clients without reading any data file.
DATASET_SHAPES: dict[str, tuple[int, int, int, int, int]] = {
    "digits": (1, 8, 8, 10, 1437),
    "mnist": (1, 28, 28, 10, 60000),
    "fashion_mnist": (1, 28, 28, 10, 60000),
    "cifar10": (3, 32, 32, 10, 50000),
    "cifar100": (3, 32, 32, 100, 50000),
    "femnist": (1, 28, 28, 62, 14708),
    "har": (9, 1, 128, 6, 7352),
}


@dataclass(frozen=True)
class ModelRecipe:
    family: str
    num_classes: int
    in_channels: int
    image_size: tuple[int, int]
    norm: str = "bn"
    scaler: bool = True
    global_rate: float = 1.0

    def build(self, spec: SubmodelSpec, track_bn: bool = False) -> nn.Module:
        return build_model(
            self.family,
            spec,
            num_classes=self.num_classes,
            in_channels=self.in_channels,
            image_size=self.image_size,
            global_rate=self.global_rate,
            scaler=self.scaler,
            track_bn=track_bn,
            norm=self.norm,
        )

    def cost(self, spec: SubmodelSpec) -> ModelCost:
        return _cost(self, spec)

    def shapes(self, spec: SubmodelSpec) -> Shapes:
        return _shapes(self, spec)


@lru_cache(maxsize=1024)
def _cost(recipe: ModelRecipe, spec: SubmodelSpec) -> ModelCost:
    # keyed on the two frozen dataclasses: the engine asks for costs several times per task, and
    # measure_cost's keyword-argument cache key costs more to build than this one
    return measure_cost(
        recipe.family,
        spec,
        num_classes=recipe.num_classes,
        in_channels=recipe.in_channels,
        image_size=recipe.image_size,
        norm=recipe.norm,
    )


@lru_cache(maxsize=256)
def _shapes(recipe: ModelRecipe, spec: SubmodelSpec) -> Shapes:
    return shapes_of(recipe.build(spec).state_dict())
