"""The names the scenario format accepts and the code dispatches on, each list in one place.

Configuration builds its ``Literal`` types from these tuples (``scenario/``); the data loaders, model builders
and methods check against them. This module imports nothing, so every layer may use it.
"""

from __future__ import annotations

DATASETS: tuple[str, ...] = ("digits", "mnist", "fashion_mnist", "cifar10", "cifar100", "femnist", "har")

MODEL_FAMILIES: tuple[str, ...] = (
    "cnn_small", "conv", "resnet18", "vgg16", "mobilenetv2", "mlp",
    "conv_ee", "resnet18_ee", "vgg16_ee", "conv_ee_light", "resnet18_ee_light", "vgg16_ee_light",
    "ofa_mbv3", "harwild", "cnn2", "resnet110", "resnet110_ee", "resnet110_ee_light",
)  # fmt: skip

# Why a task failed (``Outcome.status`` when not "completed"; the ``failed_<reason>`` columns): out of memory,
# battery run dry, device went offline, refused by the device (adapt), past the round's deadline, arrived after
# the round had its updates (over-selection)
FAILURE_REASONS: tuple[str, ...] = ("oom", "depleted", "offline", "refused", "deadline", "surplus")

# AdapterFL's prototype families and the number of stages each is cut into (its reassembly points lie between
# stages; ``scenario.algorithms.candidate_cuts``)
PROTOTYPE_STAGES: dict[str, int] = {"cnn2": 3, "mobilenetv2": 9, "resnet18": 6, "vgg16": 6}

# The kinds of server work priced apart (``algorithms.base.work_kind``; rounds.csv: one server_<kind>_s column each)
SERVER_WORK_KINDS: tuple[str, ...] = ("train", "infer", "aggregate", "qsgd", "other")
