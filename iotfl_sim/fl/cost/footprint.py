"""What a submodel costs a device: parameters, FLOPs and training memory, measured from the real module.

Measurements run once per (family, spec, shape, options) on CPU and are cached, so the simulator can
ask for them freely. FLOPs count 2 per multiply-accumulate of matmuls and convolutions
(``torch.utils.flop_counter.FlopCounterMode``); element-wise work (norms, activations, biases) is
ignored, as in the papers' FLOP figures. Activation memory is an estimate: the bytes of every leaf
module's output in a training-mode forward pass, the tensors autograd would keep for backward.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from iotfl_sim.core.errors import ScenarioError
from iotfl_sim.fl import disk_cache
from iotfl_sim.fl.models.build import build_model
from iotfl_sim.fl.models.layers import count_params
from iotfl_sim.fl.submodel import SubmodelSpec

# Samples in the probe batch: BatchNorm1d refuses a single sample in training mode.
_PROBE_BATCH = 2


@dataclass(frozen=True)
class ModelCost:
    """Per-sample costs of one submodel; weights and gradients are float32."""

    params: int
    flops_forward_per_sample: float
    activation_bytes_per_sample: float

    def train_flops(self, samples: int) -> float:
        """FLOPs of training on ``samples`` samples (backward ~ 2x forward)."""
        return 3.0 * self.flops_forward_per_sample * samples

    def memory_bytes(self, batch_size: int, optimizer_slots: int = 1) -> float:
        """Peak training memory: weights + gradients + optimizer state + a batch of activations.

        ``optimizer_slots`` is the number of per-parameter state tensors (1 for SGD with momentum,
        2 for Adam, 0 for plain SGD).
        """
        param_bytes = self.params * 4 * (2 + optimizer_slots)
        return float(param_bytes + self.activation_bytes_per_sample * batch_size)

    @property
    def param_bytes(self) -> int:
        """Bytes of the float32 weights (what one uncompressed transfer carries)."""
        return self.params * 4


class ModelInputError(ScenarioError):
    """A model whose layers cannot take the input shape it is asked to train on (2-D pooling over HAR's 1 x 128
    windows, say): the user's choice of model and dataset, not a fault of the code."""

    def __init__(self, family: str, shape: tuple[int, int, int], reason: str) -> None:
        self.family, self.reason = family, reason
        self.shape = f"{' x '.join(map(str, shape))} (channels x height x width)"
        super().__init__(f"{family} cannot take inputs of {self.shape}: {reason}")


def _is_leaf(module: nn.Module) -> bool:
    return next(module.children(), None) is None


def _storage_owner(t: torch.Tensor) -> torch.Tensor:
    return t._base if t._base is not None else t


@lru_cache(maxsize=512)
def measure_cost(
    family: str,
    spec: SubmodelSpec,
    *,
    num_classes: int,
    in_channels: int,
    image_size: tuple[int, int],
    **model_kwargs: Any,
) -> ModelCost:
    """Measure (and cache) the cost of ``build_model(family, spec, ...)`` for one input sample.

    All arguments must be hashable (``image_size`` a tuple). The model is probed in training mode
    with a small batch under ``torch.no_grad``; results are divided by the batch size.
    """
    name = disk_cache.key("measure_cost", family, spec, num_classes, in_channels, tuple(image_size),
                          sorted(model_kwargs.items()))  # fmt: skip
    kept = disk_cache.load("costs", name, _valid_cost)
    if kept is not None:
        return ModelCost(int(kept["params"]), float(kept["flops"]), float(kept["activation_bytes"]))
    cost = _probe(family, spec, num_classes, in_channels, image_size, model_kwargs)
    kept = {
        "params": np.int64(cost.params),
        "flops": np.float64(cost.flops_forward_per_sample),
        "activation_bytes": np.float64(cost.activation_bytes_per_sample),
    }
    disk_cache.store("costs", name, kept)
    return cost


def _valid_cost(arrays: disk_cache.Arrays) -> bool:
    return disk_cache.has(arrays, {"params": ("i", 0), "flops": ("f", 0), "activation_bytes": ("f", 0)})


def _probe(
    family: str,
    spec: SubmodelSpec,
    num_classes: int,
    in_channels: int,
    image_size: tuple[int, int],
    model_kwargs: dict[str, Any],
) -> ModelCost:
    # Shapes are all the probe needs: on the meta device nothing is allocated or initialised, so
    # even VGG16 costs milliseconds (FedX's OFA model, whose meta kernels run in Python, seconds).
    # The numbers equal a CPU run's (same operators, same shapes).
    with torch.device("meta"):
        model = build_model(
            family,
            spec,
            num_classes=num_classes,
            in_channels=in_channels,
            image_size=tuple(image_size),
            **model_kwargs,
        )
    model.train()
    act_bytes = 0

    def hook(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> None:
        nonlocal act_bytes
        if not isinstance(output, torch.Tensor):
            return
        # Identity / Flatten return their input or a view of it: no new memory.
        owner = _storage_owner(output)
        if any(isinstance(t, torch.Tensor) and _storage_owner(t) is owner for t in inputs):
            return
        act_bytes += output.numel() * output.element_size()

    handles = [m.register_forward_hook(hook) for m in model.modules() if _is_leaf(m)]
    x = torch.zeros(_PROBE_BATCH, in_channels, *image_size, device="meta")
    counter = FlopCounterMode(display=False)
    try:
        with torch.no_grad(), counter:
            model(x)
    except RuntimeError as e:  # torch's shape checks: the only errors a forward of zeros on meta tensors can meet
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelInputError(family, (in_channels, *image_size), reason) from None
    finally:
        for h in handles:
            h.remove()
    return ModelCost(
        params=count_params(model),
        flops_forward_per_sample=counter.get_total_flops() / _PROBE_BATCH,
        activation_bytes_per_sample=act_bytes / _PROBE_BATCH,
    )
