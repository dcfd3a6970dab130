"""iotfl-sim: discrete-event simulation of federated learning on heterogeneous IoT fleets.

Python API (see ``iotfl_sim.api``): ``run(scenario, out=None, sets=None)`` runs a scenario (path, dict or
``Scenario``) and returns a ``RunResult``; ``load_run(path)`` and ``load_study(path)`` read run and study
folders (``crossings()``: where each run first reached each target accuracy); ``sweep(study)`` runs a study
(file or dict) like ``iotfl-sim sweep``; ``compare(paths)`` and ``plot(paths)`` are ``iotfl-sim compare`` and
``iotfl-sim plot``.
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
    "Comparison", "Run", "RunResult", "StudyRuns", "compare", "load_run", "load_study", "plot", "run", "sweep",
    "__version__",
]  # fmt: skip
