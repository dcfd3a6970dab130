"""Options of each FL method, validated with the rest of the scenario.

These are plain data (no PyTorch); the methods themselves live in ``iotfl_sim.algorithms``. ``base`` holds
``MethodConfig``, the modes a method may run in (``MODES``) and the option groups several methods share; each other
module the options of a few related methods. Importing them registers nothing: ``iotfl_sim.methods.BUILTINS`` names
each built-in method's options class.
"""

from iotfl_sim.scenario.algorithms.base import MethodConfig, candidate_cuts, parse_proportions  # noqa: I001
from iotfl_sim.scenario.algorithms.nested import DecoupledConfig, FedAvgConfig, HeteroFLConfig, HeteroFLIoTConfig
from iotfl_sim.scenario.algorithms.pruning import AdaptiveFLConfig, FlexFLConfig, ScaleFLConfig
from iotfl_sim.scenario.algorithms.prototypes import AdapterFLConfig, FedBaseConfig, FedDFConfig
from iotfl_sim.scenario.algorithms.quantized import DAdaQuantConfig, FedXConfig
from iotfl_sim.scenario.algorithms.server_optim import FedOptConfig, FedProxConfig
from iotfl_sim.scenario.algorithms.asynchronous import FedAsyncConfig, FedBuffConfig, Staleness

__all__ = [
    "AdapterFLConfig", "AdaptiveFLConfig", "DAdaQuantConfig", "DecoupledConfig", "FedAsyncConfig", "FedAvgConfig",
    "FedBaseConfig", "FedBuffConfig", "FedDFConfig", "FedOptConfig", "FedProxConfig", "FedXConfig", "FlexFLConfig", "HeteroFLConfig",
    "HeteroFLIoTConfig", "MethodConfig", "ScaleFLConfig", "Staleness", "candidate_cuts", "parse_proportions",
]  # fmt: skip
