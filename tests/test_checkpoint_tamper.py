"""A checkpoint edited with its SHA-256 rewritten (so the hashes agree) is refused when a tensor a resume reads
is not what the run builds: NaN, another shape, another dtype, in a synchronous run's model and in the weights
an asynchronous run's devices in flight downloaded. One ``error:`` line naming the state file and the entry,
exit status 2, the run folder byte for byte as it was."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import yaml
from conftest import base_scenario
from test_bad_input_corpus import one_error_line, snapshot

from iotfl_sim.cli import main
from iotfl_sim.output.checkpoint import sha256
from iotfl_sim.sim import engine

KEY = "features.0.conv.weight"  # cnn_small's first tensor, float32
MODES = {
    "sync": ({"algorithm": {"name": "fedavg"}}, ("strategy", "state")),
    # round 1's checkpoint holds devices still in flight and their downloaded weights (tests/test_resume.py)
    "async": (
        {"algorithm": {"name": "fedbuff", "buffer_size": 2, "server_momentum": 0.9}, "server": {"mode": "async"}},
        ("in_flight", "states", 0),
    ),
}


def _stopped_run(root: Path, over: dict) -> Path:
    """A 2-round run stopped after its round-1 checkpoint, as a first Ctrl-C stops it."""
    data = base_scenario(rounds=2, **over)
    data["output"] = {"progress": False, "checkpoint": {"every_rounds": 1, "every_s": None}}
    (root / "s.yaml").write_text(yaml.safe_dump(data))
    checkpoint = engine.Simulation.checkpoint
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(engine.Simulation, "checkpoint", lambda sim, done: (checkpoint(sim, done), setattr(sim, "stop_requested", True)))
        assert main(["run", str(root / "s.yaml"), "--out", str(root / "runs"), "--quiet"]) == 130
    (run,) = (root / "runs").iterdir()
    return run


@pytest.fixture(scope="module")
def stopped(tmp_path_factory) -> dict[str, Path]:
    return {mode: _stopped_run(tmp_path_factory.mktemp(mode), over) for mode, (over, _) in MODES.items()}


def _rewrite(run: Path, edit: Callable[[dict], None]) -> Path:
    """Edit the checkpoint's state and write its SHA-256 into meta.json, as a deliberate edit would."""
    folder = run / "checkpoints" / "round-000001"
    state = torch.load(folder / "state.pt", weights_only=True)
    edit(state)
    torch.save(state, folder / "state.pt")
    meta = json.loads((folder / "meta.json").read_text())
    meta["state_sha256"] = sha256(folder / "state.pt")
    (folder / "meta.json").write_text(json.dumps(meta, indent=1))
    return folder / "state.pt"


def _at(state: dict, path: tuple) -> dict:
    for k in path:
        state = state[k]
    return state


def _nan(t: torch.Tensor) -> torch.Tensor:
    t = t.clone()
    t.view(-1)[3] = float("nan")
    return t


# each: the tampered tensor from the saved one, and what the refusal says given the saved one's shape
TAMPERS = {
    "nan": (_nan, lambda shape: "holds non-finite values"),
    "shape": (lambda t: torch.zeros(3, 3), lambda shape: f"of shape (3, 3), where the run builds a float32 tensor of shape {shape}"),
    "dtype": (lambda t: t.double(), lambda shape: f"float64 tensor of shape {shape}, where the run builds a float32"),
}


@pytest.mark.parametrize("tamper", list(TAMPERS))
@pytest.mark.parametrize("mode", list(MODES))
def test_a_tampered_tensor_is_refused_before_any_write(mode, tamper, stopped, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(stopped[mode], run)
    change, words = TAMPERS[tamper]
    path = MODES[mode][1]

    shape = []

    def edit(state: dict) -> None:
        weights = _at(state, path)
        assert weights[KEY].dtype == torch.float32  # the checkpoint holds what this test means to change
        shape.append(tuple(weights[KEY].shape))
        weights[KEY] = change(weights[KEY])

    state_file = _rewrite(run, edit)
    before = snapshot(run)
    capsys.readouterr()
    line = one_error_line(main(["run", "--resume", str(run), "--quiet"]), *capsys.readouterr())
    entry = "".join(f"[{k!r}]" for k in path[1:]) + f"[{KEY!r}]"
    assert str(state_file) in line and f"{path[0]}{entry}" in line and words(shape[0]) in line, line
    assert snapshot(run) == before


def test_a_server_buffer_of_the_wrong_shape_and_a_damaged_rng_state_are_refused(stopped, tmp_path, capsys):
    """State the run builds only later (FedBuff's momentum, made at the first server step) is held to the
    model's shapes; the RNG state to the one this process has."""
    cases = {
        "momentum": (lambda s: s["strategy"]["momentum"].update({KEY: torch.zeros(16, 2, 3, 3, dtype=torch.float64)}),
                     f"strategy['momentum'][{KEY!r}] is a float64 tensor of shape (16, 2, 3, 3), which fits no tensor"),  # cnn_small's first layer has 1 input channel
        "rng": (lambda s: s["rng"].update(torch=torch.zeros(7, dtype=torch.uint8)), "rng['torch'] is a uint8 tensor of shape (7,)"),
    }  # fmt: skip
    for name, (edit, words) in cases.items():
        run = tmp_path / name
        shutil.copytree(stopped["async"], run)
        state_file = _rewrite(run, edit)
        before = snapshot(run)
        capsys.readouterr()
        line = one_error_line(main(["run", "--resume", str(run), "--quiet"]), *capsys.readouterr())
        assert str(state_file) in line and words in line, line
        assert snapshot(run) == before


def test_an_untouched_checkpoint_still_resumes(stopped, tmp_path):
    """The checks refuse only what was changed: both runs, copied as they are, resume to the end."""
    for mode in MODES:
        run = tmp_path / mode
        shutil.copytree(stopped[mode], run)
        assert main(["run", "--resume", str(run), "--quiet"]) == 0
        assert json.loads((run / "summary.json").read_text())["status"] == "complete"
