"""iotfl-sim: discrete-event simulation of federated learning on heterogeneous IoT fleets.

Python API (see ``iotfl_sim.api``): ``run(scenario, out=None, sets=None)`` runs a scenario (path, dict or
``Scenario``) and returns a ``RunResult``; ``load_run(path)`` and ``load_study(path)`` read run and study
folders (``crossings()``: where each run first reached each target accuracy); ``sweep(study)`` runs a study
(file or dict) like ``iotfl-sim sweep``; ``compare(paths)`` and ``plot(paths)`` are ``iotfl-sim compare`` and
``iotfl-sim plot``. ``run(..., methods=[MyStrategy])`` runs your own method; ``iotfl_sim.Strategy``,
``iotfl_sim.MethodConfig`` and ``iotfl_sim.register_method`` (loaded on first use, with PyTorch) are the method
API of ``iotfl_sim.strategy`` (docs/write_a_method.md).
"""

__version__ = "0.1.0"

from iotfl_sim.api import (  # noqa: E402
    Comparison,
    Run,
    RunResult,
    StudyRuns,
    compare,
    load_run,
    load_study,
    plot,
    run,
    sweep,
)

__all__ = [
    "Comparison", "MethodConfig", "Run", "RunResult", "Strategy", "StudyRuns", "compare", "load_run", "load_study",
    "plot", "register_method", "run", "sweep", "__version__",
]  # fmt: skip

_METHOD_API = ("Strategy", "MethodConfig", "register_method")


def __getattr__(name: str):
    if name in _METHOD_API:  # imported on first use: `import iotfl_sim` stays free of PyTorch
        from iotfl_sim import strategy

        return getattr(strategy, name)
    raise AttributeError(f"module 'iotfl_sim' has no attribute {name!r}")
