"""iotfl-sim: discrete-event simulation of federated learning on heterogeneous IoT fleets.

Python API (see ``iotfl_sim.api``): ``run(scenario, out=None, sets=None)`` runs a scenario (path, dict or
``Scenario``) and returns a ``RunResult``; ``load_run(path)`` and ``load_study(path)`` read run and study
folders; ``sweep(study)`` runs a study (file or dict) like ``iotfl-sim sweep``.
"""

__version__ = "0.1.0"

from iotfl_sim.api import Run, RunResult, StudyRuns, load_run, load_study, run, sweep  # noqa: E402

__all__ = ["Run", "RunResult", "StudyRuns", "load_run", "load_study", "run", "sweep", "__version__"]
