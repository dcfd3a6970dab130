"""A run records the user's own source files it loaded (sources.json, by SHA-256), and ``--resume`` refuses a
run whose files changed or went away since it started, naming the file, before it writes anything."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

import pytest
import yaml
from conftest import base_scenario
from test_bad_input_corpus import one_error_line, snapshot

from iotfl_sim.cli import main
from iotfl_sim.output.sources import user_sources
from iotfl_sim.sim import engine

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures("isolated_methods")



@pytest.fixture(autouse=True)
def fresh_modules():
    """Each test imports its own files again (the same module names, another folder)."""
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        del sys.modules[name]


HELPER = "SCALE = 1.0\n"
METHOD = "import my_scaling\n\nfrom my_prox_impl import FedProx  # noqa: F401\n"


def _study(folder: Path, tag: str) -> Path:
    """A scenario whose method (``{tag}_method:FedProx``) imports two more files of its folder at top level."""
    folder.mkdir()
    shutil.copy(ROOT / "examples" / "fedprox.py", folder / "my_prox_impl.py")
    (folder / "my_scaling.py").write_text(HELPER)
    (folder / f"{tag}_method.py").write_text(METHOD)
    sc = base_scenario(rounds=2, numerics="none", algorithm={"name": f"{tag}_method:FedProx", "mu": 0.1}, name=tag)
    sc["output"] = {"progress": False, "checkpoint": {"every_rounds": 1, "every_s": None}}
    (folder / "s.yaml").write_text(yaml.safe_dump(sc, sort_keys=False))
    return folder / "s.yaml"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _stopped_run(tmp_path: Path, monkeypatch, tag: str) -> tuple[Path, Path]:
    """(the scenario's folder, a run of it stopped after its round-1 checkpoint, as a first Ctrl-C would)."""
    path = _study(tmp_path / tag, tag)
    checkpoint = engine.Simulation.checkpoint

    def stop_after_one(sim, done):
        checkpoint(sim, done)
        sim.stop_requested = True

    with monkeypatch.context() as m:
        m.setattr(engine.Simulation, "checkpoint", stop_after_one)
        assert main(["run", str(path), "--out", str(tmp_path / f"{tag}_runs"), "--quiet"]) == 130
    (run,) = (tmp_path / f"{tag}_runs").iterdir()
    return path.parent, run


def test_a_run_records_every_user_file_its_method_comes_from(tmp_path, monkeypatch, capsys):
    """The method module, and the two files of the scenario's folder it imports, by path, module and SHA-256 (as
    hashlib computes them here); nothing of iotfl_sim, the standard library or site-packages. A built-in method
    records no file."""
    folder, run = _stopped_run(tmp_path, monkeypatch, "rec")
    doc = json.loads((run / "sources.json").read_text())
    expected = [
        {"path": str(folder / name), "module": name.removesuffix(".py"), "sha256": _sha(folder / name)}
        for name in sorted(["rec_method.py", "my_prox_impl.py", "my_scaling.py"])
    ]
    assert doc == {"files": expected}
    sc = base_scenario(rounds=1, numerics="none")
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(sc))
    assert main(["run", str(tmp_path / "b.yaml"), "--out", str(tmp_path / "b_runs"), "--quiet"]) == 0
    (builtin,) = (tmp_path / "b_runs").iterdir()
    assert json.loads((builtin / "sources.json").read_text()) == {"files": []}


@pytest.mark.parametrize(
    "edit, needle",
    [
        (lambda f: (f / "ed0_method.py").write_text(METHOD + "# a comment\n"), "ed0_method.py (module ed0_method) changed since the run started"),
        (lambda f: (f / "my_scaling.py").write_text("SCALE = 2.0\n"), "my_scaling.py (module my_scaling) changed since the run started"),
        (lambda f: (f / "my_prox_impl.py").unlink(), "my_prox_impl.py (module my_prox_impl) is gone since the run started"),
    ],
    ids=["method_edited", "helper_edited", "helper_deleted"],
)
def test_a_resume_refuses_changed_code_naming_the_file_before_any_write(tmp_path, monkeypatch, capsys, edit, needle):
    folder, run = _stopped_run(tmp_path, monkeypatch, "ed0")
    capsys.readouterr()
    backup = {p.name: p.read_bytes() for p in folder.glob("*.py")}
    edit(folder)
    before = snapshot(run)
    line = one_error_line(main(["run", "--resume", str(run), "--quiet"]), *capsys.readouterr())
    assert needle in line and str(run) in line and "start a new run" in line, line
    assert snapshot(run) == before  # byte-identical: nothing written, no lock file left
    # the files put back as they were: the same resume goes through
    for name, data in backup.items():
        (folder / name).write_bytes(data)
    assert main(["run", "--resume", str(run), "--quiet"]) == 0, capsys.readouterr().err
    assert json.loads((run / "summary.json").read_text())["status"] == "complete"


def test_an_executor_factory_and_its_module_are_user_sources(tmp_path, monkeypatch):
    """A factory (a function of a user module, and the executor class it makes, from another) counts, as does the
    module a class's base comes from; iotfl_sim's own executor does not."""
    (tmp_path / "u_exec_base.py").write_text("class Base:\n    pass\n")
    (tmp_path / "u_exec.py").write_text(
        "from u_exec_base import Base\n\n\nclass Timed(Base):\n    pass\n\n\ndef make(data, cfg):\n    return Timed()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import u_exec  # noqa: PLC0415 - made just above

    from iotfl_sim.exec.inline import InlineExecutor

    try:
        found = user_sources([u_exec.make, u_exec.make(None, None), InlineExecutor])
        assert found == {str(tmp_path / "u_exec.py"): "u_exec", str(tmp_path / "u_exec_base.py"): "u_exec_base"}
        assert user_sources([InlineExecutor, json.dumps, yaml.safe_dump]) == {}
    finally:
        for name in ("u_exec", "u_exec_base"):
            sys.modules.pop(name, None)
