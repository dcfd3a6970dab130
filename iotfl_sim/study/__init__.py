"""Studies: one base scenario, a grid of overrides, every point run in parallel into one study folder.

A study file (YAML, read under the same limits as scenarios)::

    name: lr_vs_method
    base: quickstart.yaml              # relative to this file, or a whole scenario written inline
    grid:                              # the cartesian product of these
      algorithm.name: [fedavg, heterofl]
      seed: [0, 1, 2]
    zip:                               # varied together (equal-length lists), times the grid
      local.lr: [0.01, 0.05]
      local.epochs: [1, 2]
    workers: 4                         # parallel runs (default: every core); `--workers` overrides
    runs_per_worker: null              # runs one worker process makes before a fresh one replaces it
    executor: {kind: inline, threads: 1}   # every run's executor (default: this)
    dispatch: {kind: processes}        # or {kind: ray, address: null}: one Ray task per run (see Dispatch)

Each point is the base with ``--set``-style overrides (``scenario.loader.apply_set``), validated like
``iotfl-sim validate`` before anything runs. The study folder ``<out>/<name>/`` holds ``study.yaml`` (the
file as given), ``study.resolved.yaml`` (the base with every default filled in, and the grid),
``runs/<run_id>/`` (normal run folders) and the index ``study.json`` + ``index.csv``: one record per run
with ``id``, ``overrides``, ``status`` (pending | running | done | failed | interrupted), ``run_dir``
(relative to the study folder), ``error`` and ``host_s``. Running the same study again skips complete
runs, resumes interrupted or killed ones (``sim.runner.resume_run``) and runs the rest.

One sweep at a time writes a study folder: it holds the folder's lock (``lock_study``, the run folder's
``FolderLock``) from before its first write; a second sweep is refused before it changes anything. A run
folder appears whole under its id (``output.run_dir.new_run_dir_whole``), so the sweep never deletes one: a
folder in a run's way that is not a run fails that point.

Modules: ``spec`` (the study file, its points and run ids, reading and checking it), ``folder`` (the study
folder: its index, lock and reopening) and ``dispatch`` (the sweep over worker processes or Ray tasks).
"""

from iotfl_sim.study.dispatch import SweepResult, sweep
from iotfl_sim.study.spec import Study, read_study

__all__ = ["Study", "SweepResult", "read_study", "sweep"]
