"""FedProx and FedOpt, built in and as a user writes them in examples/: hand-computed updates, the same numbers
from a scenario outside the repository, and methods found by import path, entry point and ``run(methods=)``."""

from __future__ import annotations

import csv
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from conftest import base_scenario
from torch import nn

from iotfl_sim import methods
from iotfl_sim.cli import main
from iotfl_sim.fl.objectives import LocalObjective
from iotfl_sim.fl.train import TrainJob, train_local

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures("isolated_methods")
HOST = {"host_train_s", "host_eval_s", "host_aggregate_s", "host_other_s"}


def _job(weights, mu: float) -> TrainJob:
    return TrainJob(key=0, recipe=None, spec=None, weights=weights, indices=np.arange(8), epochs=1, batch_size=4,
                    lr=0.1, momentum=0.0, weight_decay=0.0, clip_grad_norm=None, label_mask=None, seed=5,
                    objective=LocalObjective(prox_mu=mu))  # fmt: skip


def test_the_proximal_term_pulls_the_second_step_back_by_lr_mu_times_the_first():
    """Two SGD steps from w0, without and with the term. Step 1 is the same (w = w0: the term's gradient
    mu (w - w0) is 0), w1 = w0 - lr g(w0). Step 2: w2' = w1 - lr (g(w1) + mu (w1 - w0)) = w2 - lr mu (w1 - w0),
    so w2' - w2 = lr * mu * (w0 - w1), whatever the loss."""
    torch.manual_seed(0)
    x, y = torch.randn(8, 3), torch.tensor([0, 1, 1, 0, 1, 0, 0, 1])
    w0 = {k: v.clone() for k, v in nn.Linear(3, 2).state_dict().items()}
    mu, lr = 0.5, 0.1
    plain = train_local(nn.Linear(3, 2), _job(w0, 0.0), x, y).state
    prox = train_local(nn.Linear(3, 2), _job(w0, mu), x, y).state
    # w1: the first step alone (the same first batch: same seed, batch 4 of 8 -> the permutation's first half)
    gen = torch.Generator().manual_seed(5)
    first = torch.randperm(8, generator=gen)[:4]
    m = nn.Linear(3, 2)
    m.load_state_dict(w0)
    nn.functional.cross_entropy(m(x[first]), y[first]).backward()
    w1 = {k: w0[k] - lr * p.grad for k, p in m.named_parameters()}
    for k in w0:
        assert torch.allclose(prox[k] - plain[k], lr * mu * (w0[k] - w1[k]), atol=1e-6), k
        assert not torch.allclose(prox[k], plain[k])


@pytest.mark.parametrize("kind", ["adam", "yogi", "adagrad"])
def test_one_fedopt_server_step_by_hand(kind):
    """x = [1, -2], one client returning [1.5, -2.5]: Delta = [0.5, -0.5], m = 0.1 Delta, v from tau^2 = 1e-6,
    x' = x + 0.01 m / (sqrt(v) + 1e-3), with the paper's defaults (eta 0.01, beta1 0.9, beta2 0.99, tau 1e-3)."""
    from iotfl_sim.algorithms.fedopt import server_step
    from iotfl_sim.scenario.algorithms import FedOptConfig

    cfg = FedOptConfig(name="fedopt", server_optimizer=kind)
    x, client = torch.tensor([1.0, -2.0], dtype=torch.float64), torch.tensor([1.5, -2.5], dtype=torch.float64)
    tau2 = 1e-6
    v_hand = {
        "adam": 0.99 * tau2 + 0.01 * 0.25,
        "adagrad": tau2 + 0.25,
        "yogi": tau2 - 0.01 * 0.25 * -1.0,  # sign(v - Delta^2) = sign(1e-6 - 0.25) = -1: v grows
    }[kind]
    step = 0.01 * 0.05 / (math.sqrt(v_hand) + 1e-3)
    new, m, v = server_step(x, client - x, torch.zeros(2, dtype=torch.float64), torch.full((2,), tau2, dtype=torch.float64), cfg)
    assert torch.allclose(m, torch.tensor([0.05, -0.05], dtype=torch.float64))
    assert torch.allclose(v, torch.tensor([v_hand, v_hand], dtype=torch.float64))
    assert torch.allclose(new, torch.tensor([1.0 + step, -2.0 - step], dtype=torch.float64))
    # the second step of adam and yogi differ once v is large: yogi moves v by at most (1 - beta2) Delta^2
    _, _, v2 = server_step(new, torch.zeros(2, dtype=torch.float64), m, v, cfg)
    if kind == "adam":
        assert torch.allclose(v2, 0.99 * v)  # Delta = 0: v decays
    elif kind == "yogi":
        assert torch.allclose(v2, v)  # Delta = 0: v - 0 * sign(.) stays
    else:
        assert torch.allclose(v2, v)


def _rounds(run: Path) -> list[dict[str, str]]:
    return [{k: v for k, v in r.items() if k not in HOST} for r in csv.DictReader((run / "rounds.csv").open())]


def _run(folder: Path, algorithm: dict, tag: str, capsys) -> Path:
    sc = base_scenario(rounds=2, algorithm=algorithm, name=tag)
    path = folder / f"{tag}.yaml"
    path.write_text(yaml.safe_dump(sc, sort_keys=False))
    out = folder / "runs"
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0, capsys.readouterr().err if capsys else ""
    (run,) = out.glob(f"{tag}-*")
    return run


# the tests comparing with ``builtin``'s runs share them in one xdist worker (each worker would make its own)
BUILTIN_GROUP = pytest.mark.xdist_group("method_examples_builtin")


@pytest.fixture(scope="module")
def builtin(tmp_path_factory):
    """The built-in methods' runs, each made once for this file: ``builtin(algorithm) -> rows``."""
    import json

    made: dict[str, list] = {}
    folder = tmp_path_factory.mktemp("builtin")

    def rows(algorithm: dict) -> list[dict[str, str]]:
        key = json.dumps(algorithm, sort_keys=True)
        if key not in made:
            made[key] = _rounds(_run(folder, algorithm, f"b{len(made)}", None))
        return made[key]

    return rows


@BUILTIN_GROUP
def test_fedprox_with_mu_0_is_fedavg(builtin):
    assert builtin({"name": "fedprox", "mu": 0.0}) == builtin({"name": "fedavg"})


@BUILTIN_GROUP
@pytest.mark.parametrize(("module", "options"), [("fedprox", {"mu": 0.1}), ("fedopt", {"server_optimizer": "yogi", "server_lr": 0.05})])
def test_the_example_in_a_folder_outside_the_repository_gives_the_builtins_numbers(tmp_path, capsys, builtin, module, options):
    """examples/<module>.py copied beside a scenario in a folder of its own, named by import path: the same
    rows as the built-in method (and not those of plain FedAvg: the method's own rule matters)."""
    study = tmp_path / "my_study"
    study.mkdir()
    shutil.copy(ROOT / "examples" / f"{module}.py", study / f"my_{module}.py")
    cls = {"fedprox": "FedProx", "fedopt": "FedOpt"}[module]
    mine = _run(study, {"name": f"my_{module}:{cls}", **options}, "mine", capsys)
    assert _rounds(mine) == builtin({"name": module, **options})
    assert _rounds(mine) != builtin({"name": "fedavg"})
    resolved = yaml.safe_load((mine / "scenario.resolved.yaml").read_text())
    assert resolved["algorithm"] == {"name": f"my_{module}:{cls}", **(resolved["algorithm"] | options)}


def _validate_error(tmp_path, capsys, name: str) -> str:
    sc = base_scenario(algorithm={"name": name})
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sc, sort_keys=False))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    *before, line = err.strip().splitlines()
    # the one error line, after at most the note naming the module being imported (and from where)
    assert line.startswith("error: ") and "Traceback" not in err, err
    assert len(before) <= 1 and all(x.startswith("note: importing method module ") for x in before), err
    return line


def test_a_bad_import_path_is_one_line_naming_algorithm_name(tmp_path, capsys):
    (tmp_path / "not_a_method.py").write_text("class Thing:\n    pass\n")
    (tmp_path / "broken.py").write_text("raise RuntimeError('boom')\n")
    (tmp_path / "script.py").write_text("import sys\nsys.exit(0)\n")  # would end `validate` with status 0
    (tmp_path / "lazy.py").write_text("def __getattr__(name):\n    raise KeyError(name)\n")
    cases = {
        "no_such_module_here:X": "no module 'no_such_module_here'",
        "not_a_method:Missing": "has no 'Missing'",
        "not_a_method:Thing": "is not a subclass of iotfl_sim.Strategy",
        "broken:X": "importing broken failed: RuntimeError: boom",
        "script:X": "importing script failed: it called sys.exit(0) at import",
        "lazy:X": "reading 'X' from lazy failed: KeyError",
        "fedprocs": "did you mean 'fedprox'",
    }
    for name, expected in cases.items():
        err = _validate_error(tmp_path, capsys, name)
        assert "algorithm.name" in err and expected in err, (name, err)


def test_a_method_that_calls_sys_exit_mid_run_fails_naming_the_line(tmp_path, capsys):
    """sys.exit(0) in a user's aggregate would otherwise end `run` with status 0, as if the run had finished."""
    source = (ROOT / "examples" / "fedprox.py").read_text()
    (tmp_path / "quits.py").write_text(source + "\n\nclass Quits(FedProx):\n    def aggregate(self, rnd, updates):\n"
                                       "        sys.exit(0)\n\n\nimport sys  # noqa: E402\n")
    lines = (tmp_path / "quits.py").read_text().splitlines()
    line_no = 1 + max(i for i, line in enumerate(lines) if "sys.exit(0)" in line)
    path = tmp_path / "quits.yaml"
    path.write_text(yaml.safe_dump(base_scenario(rounds=2, algorithm={"name": "quits:Quits"}), sort_keys=False))
    assert main(["run", str(path), "--out", str(tmp_path / "runs"), "--quiet"]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"error: sys.exit(0) called at {tmp_path / 'quits.py'}:{line_no} (in aggregate)"), err


@BUILTIN_GROUP
def test_an_installed_entry_point_names_a_method(tmp_path, monkeypatch, capsys, builtin):
    """A package that declares ``[project.entry-points."iotfl_sim.methods"] shipped_prox = ...``: a scenario
    names its method by the entry point's name, and the schema lists its options."""
    site = tmp_path / "site"
    (site / "ep_methods").mkdir(parents=True)
    shutil.copy(ROOT / "examples" / "fedprox.py", site / "ep_methods" / "prox.py")
    (site / "ep_methods" / "__init__.py").write_text("")
    info = site / "ep_methods-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ep-methods\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[iotfl_sim.methods]\nshipped_prox = ep_methods.prox:FedProx\n")
    assert main(["schema"]) == 0
    options_before = capsys.readouterr().out.count('"mu"')
    monkeypatch.syspath_prepend(str(site))
    assert "shipped_prox" in methods.method_names()
    run = _run(tmp_path, {"name": "shipped_prox", "mu": 0.1}, "ep", capsys)
    assert _rounds(run) == builtin({"name": "fedprox", "mu": 0.1})
    assert main(["schema"]) == 0
    assert capsys.readouterr().out.count('"mu"') > options_before  # its options joined the schema


def test_run_with_methods_registers_them(tmp_path, monkeypatch):
    import importlib.util

    import iotfl_sim

    spec = importlib.util.spec_from_file_location("example_fedopt", ROOT / "examples" / "fedopt.py")
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "example_fedopt", mod)  # as an import would (pydantic reads its names)
    spec.loader.exec_module(mod)

    class MyOpt(mod.FedOpt):
        name = "my_opt"

    assert issubclass(MyOpt, iotfl_sim.Strategy) and iotfl_sim.MethodConfig is mod.MethodConfig  # the top-level names

    sc = base_scenario(rounds=2, numerics="none", algorithm={"name": "my_opt", "server_optimizer": "adagrad"})
    res = iotfl_sim.run(sc, out=tmp_path / "runs", methods=[MyOpt])
    assert res.summary["status"] == "complete"
    assert yaml.safe_load((res.path / "scenario.resolved.yaml").read_text())["algorithm"]["name"] == "my_opt"
    with pytest.raises(Exception, match="not a subclass of iotfl_sim.Strategy"):
        iotfl_sim.run(sc, out=tmp_path / "runs", methods=[dict])
    # a subclass of a built-in method under a name of its own: the built-in's options, that name
    from iotfl_sim.algorithms.fedprox import FedProx

    class Tweaked(FedProx):
        name = "tweaked_prox"

    sc = base_scenario(rounds=1, numerics="none", algorithm={"name": "tweaked_prox", "mu": 0.5})
    res = iotfl_sim.run(sc, out=tmp_path / "runs", methods=[Tweaked])
    assert res.summary["status"] == "complete"


def test_the_write_a_method_page_runs_as_written(tmp_path, capsys):
    """docs/write_a_method.md: its method file and its scenario, written to a folder of their own, validate and
    run through the two commands the page gives."""
    import re

    page = (ROOT / "docs" / "write_a_method.md").read_text()
    blocks = re.findall(r"```(python|yaml)\n# (\S+)\n(.*?)```", page, flags=re.S)
    assert {name for _, name, _ in blocks} == {"fedavgm.py", "study.yaml", "async_mean.py", "fedavgm_tiers.py"}, blocks
    for _, name, body in blocks:
        (tmp_path / name).write_text(body)
    # the asynchronous example: named by its import path beside the scenario, run with server.mode async
    # (BN statistics recomputed on 64 samples before each evaluation, not 2,000: no figure checked here depends on it)
    calibration = {"bn_calibration_samples": 64}
    sc = base_scenario(rounds=3, clients_per_round=2, algorithm={"name": "async_mean:AsyncMean"},
                       server={"mode": "async", **calibration})  # fmt: skip
    (tmp_path / "async.yaml").write_text(yaml.safe_dump(sc, sort_keys=False))
    assert main(["run", str(tmp_path / "async.yaml"), "--out", str(tmp_path / "async_runs"), "--quiet"]) == 0, capsys.readouterr().err
    (run,) = (tmp_path / "async_runs").iterdir()
    assert [r["updates_applied"] for r in _rounds(run)] == ["1", "2", "3"]
    # the hierarchical example: two gateways of four devices; the cloud's momentum steps once per cloud round
    sc = base_scenario(rounds=2, clients_per_round=2, algorithm={"name": "fedavgm_tiers:TieredFedAvgM"}, server=calibration)
    sc["fleet"]["gateways"] = [{"name": "gw", "down_mbps": 50.0, "up_mbps": 20.0, "devices_per_gateway": 4}]
    for g in sc["fleet"]["groups"]:
        g.setdefault("network", {})["gateway"] = "gw"
    sc["hierarchy"] = {}
    (tmp_path / "tiers.yaml").write_text(yaml.safe_dump(sc, sort_keys=False))
    assert main(["run", str(tmp_path / "tiers.yaml"), "--out", str(tmp_path / "tier_runs"), "--quiet"]) == 0, capsys.readouterr().err
    (run,) = (tmp_path / "tier_runs").iterdir()
    assert [float(r["bytes_backhaul_up"]) > 0 for r in _rounds(run)] == [True, True]
    _check_the_clouds_momentum(tmp_path)
    commands = re.findall(r"^iotfl-sim (validate|run) (\S+)", page, flags=re.M)
    assert commands == [("validate", "study.yaml"), ("run", "study.yaml")]
    assert main(["validate", str(tmp_path / "study.yaml")]) == 0, capsys.readouterr().err
    assert main(["run", str(tmp_path / "study.yaml"), "--out", str(tmp_path / "runs"), "--quiet"]) == 0, capsys.readouterr().err
    (run,) = (tmp_path / "runs").glob("fedavgm_digits-*")
    rows = _rounds(run)
    assert len(rows) == 3 and float(rows[-1]["acc_full"]) > 0.3
    # a misspelt option is refused naming it
    text = (tmp_path / "study.yaml").read_text().replace("server_momentum:", "server_momentun:")
    (tmp_path / "bad.yaml").write_text(text)
    assert main(["validate", str(tmp_path / "bad.yaml")]) == 2
    assert "algorithm.server_momentun: unknown key (did you mean 'server_momentum'?)" in capsys.readouterr().err


def _check_the_clouds_momentum(folder: Path) -> None:
    """The page's TieredFedAvgM, by hand: the cloud averages the gateways' models by the samples each aggregated
    (1 and 3: (3 + 3 x 5) / 4 = 4.5), then steps its momentum (beta 0.9) from its own model: v = 4.5 - 1 = 3.5,
    w = 4.5; the next cloud round, mean 6: v = 0.9 x 3.5 + (6 - 4.5) = 4.65, w = 4.5 + 4.65 = 9.15."""
    import sys

    import torch

    from iotfl_sim.strategy import Tier

    sys.path.insert(0, str(folder))
    try:
        import fedavgm_tiers
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("fedavgm", None)
    s = fedavgm_tiers.TieredFedAvgM(fedavgm_tiers.TieredConfig(name="fedavgm_tiers:TieredFedAvgM", server_momentum=0.9))
    s.state, s.velocity = {"w": torch.tensor([1.0])}, {"w": torch.tensor([0.0])}

    def gateways(a: float, b: float, samples: tuple[float, float]) -> list[Tier]:
        return [Tier(x, {"state": {"w": torch.tensor([v])}}, n) for x, v, n in zip("ab", (a, b), samples, strict=True)]

    s.combine(0, gateways(3.0, 5.0, (1.0, 3.0)))
    assert (float(s.state["w"]), float(s.velocity["w"])) == pytest.approx((4.5, 3.5))
    s.combine(1, gateways(6.0, 6.0, (2.0, 2.0)))
    assert (float(s.state["w"]), float(s.velocity["w"])) == pytest.approx((9.15, 4.65))
    sys.modules.pop("fedavgm_tiers", None)


@BUILTIN_GROUP
def test_a_method_named_by_import_path_resumes_in_a_new_process(tmp_path, monkeypatch, builtin):
    """The run stops after round 1 (as a first Ctrl-C would); ``run --resume`` in a fresh interpreter started
    elsewhere finds the method's module again in the scenario's own folder (the run folder's origin.json)."""
    import os
    import subprocess

    from iotfl_sim.sim import engine

    study = tmp_path / "my_study"
    study.mkdir()
    shutil.copy(ROOT / "examples" / "fedprox.py", study / "my_prox.py")
    sc = base_scenario(rounds=2, algorithm={"name": "my_prox:FedProx", "mu": 0.1})
    sc["output"] = {"progress": False, "checkpoint": {"every_rounds": 1, "every_s": None}}
    path = study / "s.yaml"
    path.write_text(yaml.safe_dump(sc, sort_keys=False))
    checkpoint = engine.Simulation.checkpoint

    def stop_after_one(sim, done):
        checkpoint(sim, done)
        sim.stop_requested = True

    monkeypatch.setattr(engine.Simulation, "checkpoint", stop_after_one)
    assert main(["run", str(path), "--out", str(tmp_path / "cut"), "--quiet"]) == 130
    monkeypatch.setattr(engine.Simulation, "checkpoint", checkpoint)
    (cut,) = (tmp_path / "cut").iterdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "iotfl_sim.cli", "run", "--resume", str(cut), "--quiet"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert _rounds(cut) == builtin({"name": "fedprox", "mu": 0.1})
