"""analysis.write_files.write_all: several files written as one, every file or none."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis import write_files
from analysis.write_files import write_all


def _state(folder: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None for p in sorted(folder.rglob("*"))}


def test_every_file_is_written_whole(tmp_path):
    old = tmp_path / "a.md"
    old.write_text("old")
    written = write_all({old: "new é", tmp_path / "deep" / "b.png": b"\x89PNG"})
    assert written == [old, tmp_path / "deep" / "b.png"]
    assert old.read_bytes() == "new é".encode() and (tmp_path / "deep" / "b.png").read_bytes() == b"\x89PNG"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a.md", "b.png", "deep"]  # no temporary file left


@pytest.mark.parametrize("where", ["a folder at a target", "a file at a target's folder"])
def test_a_target_that_cannot_be_a_file_is_refused_before_any_write(tmp_path, where):
    (tmp_path / "keep.csv").write_text("kept")
    if where == "a folder at a target":
        (tmp_path / "b.md").mkdir()
        bad, named = tmp_path / "b.md", tmp_path / "b.md"
    else:
        (tmp_path / "sub").write_text("a file")
        bad, named = tmp_path / "sub" / "deeper" / "b.md", tmp_path / "sub"
    before = _state(tmp_path)
    with pytest.raises(OSError) as e:
        write_all({tmp_path / "keep.csv": "changed", tmp_path / "new.txt": "x", bad: "y"})
    assert e.value.filename == str(named)
    assert _state(tmp_path) == before


def test_a_write_failing_midway_leaves_every_file_as_it_was(monkeypatch, tmp_path):
    """Disk full on the second file: the first file's new text was staged but never renamed into place."""
    (tmp_path / "first.csv").write_text("first, as it was")
    (tmp_path / "second.md").write_text("second, as it was")
    before = _state(tmp_path)
    real = Path.write_bytes

    def full_disk(self, data):
        if ".second.md." in self.name:
            real(self, data[:3])  # a part written, then the disk is full
            raise OSError(28, "No space left on device")
        return real(self, data)

    monkeypatch.setattr(write_files.Path, "write_bytes", full_disk)
    with pytest.raises(OSError) as e:
        write_all({tmp_path / "first.csv": "first, new", tmp_path / "second.md": "second, new"})
    assert (e.value.errno, e.value.filename) == (28, str(tmp_path / "second.md"))  # the target, not its temporary
    assert _state(tmp_path) == before
