"""Checkpoint formats (``output.migrations``): every checkpoint fixture kept in tests/fixtures/checkpoint_v<N>/,
written by the release of format N, resumes with today's code to the files of a run never stopped; an older
layout is migrated, one that cannot be is refused in one line."""

from __future__ import annotations

import csv
import json
import shutil
import sys
from pathlib import Path

import pytest
import torch
from test_bad_input_corpus import one_error_line, snapshot

from iotfl_sim.cli import main
from iotfl_sim.output.checkpoint import sha256
from iotfl_sim.output.migrations import FORMAT

FIXTURES = Path(__file__).parent / "fixtures"
KEPT = sorted(p for p in FIXTURES.glob("checkpoint_v*/*") if p.is_dir())
HOST = {"host_train_s", "host_eval_s", "host_aggregate_s", "host_other_s"}
LEARNING = ("acc_", "loss_", "train_loss")  # columns from the numerics (platform-dependent in the last bits)


def _platform() -> str:
    sys.path.insert(0, str(FIXTURES))
    from make_checkpoint_fixture import platform_key

    return platform_key()


def _rows(run: Path, learning: bool) -> list[dict[str, str]]:
    keep = lambda k: k not in HOST and (learning or not k.startswith(LEARNING))  # noqa: E731
    return [{k: v for k, v in r.items() if keep(k)} for r in csv.DictReader((run / "rounds.csv").open())]


def _summary(run: Path) -> dict:
    s = json.loads((run / "summary.json").read_text())
    return {k: v for k, v in s.items() if not k.startswith("host")}


def test_this_release_keeps_a_fixture_of_its_format():
    """A format change comes with a fixture of the new format (tests/fixtures/README.md)."""
    assert [p for p in KEPT if p.parent.name == f"checkpoint_v{FORMAT}"], f"no tests/fixtures/checkpoint_v{FORMAT}/"
    assert sum(f.stat().st_size for f in FIXTURES.rglob("*") if f.is_file()) < 1_000_000


@pytest.mark.parametrize("fixture", KEPT, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_kept_checkpoint_resumes_to_the_files_of_a_run_never_stopped(fixture, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(fixture, run)
    written = _rows(run, learning=True)
    assert main(["run", "--resume", str(run), "--quiet"]) == 0, capsys.readouterr().err
    assert json.loads((run / "summary.json").read_text())["status"] == "complete"
    assert main(["run", str(run / "scenario.resolved.yaml"), "--out", str(tmp_path / "whole"), "--quiet"]) == 0
    (whole,) = (tmp_path / "whole").iterdir()
    resumed = _rows(run, learning=True)
    assert resumed[: len(written)] == written  # the rows on disk at the checkpoint stay as they were
    # the system (the simulated clock, energy, bytes, events) is the cost model's: equal on every platform
    assert _rows(run, learning=False) == _rows(whole, learning=False)
    for name in ("devices.csv", "events.jsonl"):
        assert (run / name).read_text() == (whole / name).read_text(), name
    recorded = json.loads((fixture / "platform.json").read_text()) if (fixture / "platform.json").is_file() else {}
    if recorded.get("platform") == _platform():  # the numerics too, where the fixture's were computed
        assert resumed == _rows(whole, learning=True)
        assert _summary(run) == _summary(whole)
    else:  # written by an older release or elsewhere: its numbers continue, finite
        assert all(float(r["train_loss"]) == float(r["train_loss"]) for r in resumed)


def _rewrite(run: Path, edit) -> Path:
    (folder,) = (run / "checkpoints").glob("round-*")
    state = torch.load(folder / "state.pt", weights_only=True)
    meta = json.loads((folder / "meta.json").read_text())
    edit(state, meta)
    torch.save(state, folder / "state.pt")
    meta["state_sha256"] = sha256(folder / "state.pt")
    (folder / "meta.json").write_text(json.dumps(meta, indent=1))
    return folder / "state.pt"


BEFORE_API = FIXTURES / "checkpoint_v1" / "fedavg_qsgd_before_api"  # written at commit 6b25955^
NOW = FIXTURES / f"checkpoint_v{FORMAT}" / "fedavg_qsgd"  # the same scenario


def test_fedavg_state_of_before_the_strategy_api_is_regrouped_exactly(tmp_path):
    """Today's FedAvg checkpoint turned into the layout of before the Strategy API (all public attributes, the
    QSGD channel in ``wire``, its switch and precisions beside it, as the kept format-1 fixture holds them)
    resumes to the very files the checkpoint itself resumes to."""
    old = torch.load(next((BEFORE_API / "checkpoints").glob("round-*/state.pt")), weights_only=True)["strategy"]
    assert set(old) == {"download_bits", "eligible", "recipe", "spec", "state", "upload_bits", "wire", "wire_on"}

    def before_api(state: dict, meta: dict) -> None:
        now = state["strategy"]
        wire = now["wire"]["__obj__"]
        state["strategy"] = {
            "state": now["state"], "wire": wire["channel"], "wire_on": wire["on"], "upload_bits": wire["upload_bits"],
            "download_bits": wire["download_bits"], "recipe": old["recipe"], "spec": old["spec"], "eligible": old["eligible"],
        }  # fmt: skip
        meta["format"] = 1

    for name in ("now", "before"):
        shutil.copytree(NOW, tmp_path / name)
    _rewrite(tmp_path / "before", before_api)
    for name in ("now", "before"):
        assert main(["run", "--resume", str(tmp_path / name), "--quiet"]) == 0
    assert _rows(tmp_path / "before", True) == _rows(tmp_path / "now", True)
    for f in ("devices.csv", "events.jsonl"):
        assert (tmp_path / "before" / f).read_text() == (tmp_path / "now" / f).read_text(), f
    assert _summary(tmp_path / "before") == _summary(tmp_path / "now")


def test_a_layout_no_migration_knows_is_refused_naming_the_formats(tmp_path, capsys):
    """Another method's state of before the Strategy API cannot be regrouped: one line naming the format that
    wrote it, the one this release reads and the release that resumes it; nothing written."""
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / f"checkpoint_v{FORMAT}" / "fedasync", run)

    def before_api(state: dict, meta: dict) -> None:
        state["strategy"]["recipe"] = "a set-up attribute saved then"
        meta["format"] = 1

    _rewrite(run, before_api)
    before = snapshot(run)
    line = one_error_line(main(["run", "--resume", str(run), "--quiet"]), *capsys.readouterr())
    for words in ("state.pt", "checkpoint format 1 holds FedAsync state (recipe, state)", f"reads format {FORMAT}",
                  "at commit 6b25955^"):  # fmt: skip
        assert words in line, line
    assert snapshot(run) == before
