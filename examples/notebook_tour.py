# %% [markdown]
# # A tour of the iotfl-sim Python API
#
# Run this file as a script (`python examples/notebook_tour.py`) or cell by cell (`# %%`) in VS Code,
# Jupyter (jupytext) or Spyder. It runs one scenario and a tiny study (digits: no dataset files needed)
# and prints a table. About a minute on 2 CPU cores.

# %%
import tempfile
from pathlib import Path

import iotfl_sim

work = Path(tempfile.mkdtemp(prefix="iotfl-tour-"))

# A scenario can be a YAML file, a dict (the YAML as Python data) or a `Scenario` model.
scenario = {
    "name": "tour",
    "seed": 0,
    "rounds": 3,
    "clients_per_round": 6,
    "fleet": {"num_devices": 20, "groups": [
        {"profile": "raspberry_pi_4b", "fraction": 0.5},
        {"profile": "phone_low", "fraction": 0.5},
    ]},
    "data": {"dataset": "digits"},
    "model": {"family": "cnn_small"},
    "algorithm": {"name": "heterofl", "proportions": "a5-b5"},
    "local": {"epochs": 1, "batch_size": 16, "lr": 0.05},
}

# %% One run: its folder, its summary and its rounds table
res = iotfl_sim.run(scenario, out=work / "runs")
print(res.path)
print("final accuracy:", res.summary["final_accuracy"])

# %% Read any run folder back (lazily): rounds, devices, summary, scenario, events
run = iotfl_sim.load_run(res.path)
failures = sum(1 for e in run.events() if e["event"] in ("oom", "depleted", "refused"))
print(f"{run.scenario['algorithm']['name']}: {len(run.devices)} devices, {failures} failed tasks")

# %% A tiny study: two methods x two seeds, run in parallel worker processes
study = iotfl_sim.sweep(
    {
        "name": "tour_study",
        "base": scenario,
        "grid": {"algorithm.name": ["fedavg", "heterofl"], "seed": [0, 1]},
        "workers": 2,
    },
    out=work / "studies",
)
print(study)

# %% One row per run: the overrides as columns, then the summary's figures
table = study.table()
cols = ["algorithm.name", "seed", "status", "acc_full", "energy_j", "sim_time_s"]
try:  # a pandas DataFrame when pandas is installed
    print(table[cols].to_string(index=False))
except TypeError:  # else a list of dicts
    print("  ".join(f"{c:>14}" for c in cols))
    for row in table:
        print("  ".join(f"{row[c]:>14.4g}" if isinstance(row[c], float) else f"{row[c]!s:>14}" for c in cols))

# %% Open one run of the study
first = next(iter(study.runs))
print(first, study.runs[first].rounds[-1] if isinstance(study.runs[first].rounds, list) else study.runs[first].rounds.tail(1))
