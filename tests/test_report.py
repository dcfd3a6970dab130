"""iotfl-sim report: one self-contained HTML file, opened in a real headless browser (Debian's chromium)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from study_fixtures import make_study

from analysis.study_plots import STUDY_FIGURES
from iotfl_sim.cli import main

SHOWN = tuple(f for f in STUDY_FIGURES if f != "carbon_to_accuracy")  # the fixture's runs have no fleet.carbon

SCREENSHOT = Path(__file__).resolve().parents[1] / "benchmarks" / "report_screenshot.png"
TABLES = ("accuracy", "time_to_accuracy", "rounds_to_accuracy", "energy_to_accuracy", "download_to_accuracy",
          "upload_to_accuracy", "costs", "failures", "methods", "host_time")  # fmt: skip

# put first in <head>: records console errors, uncaught errors and failed resource loads
PROBE_HEAD = """<script>
window.__errors = [];
const __err = console.error.bind(console);
console.error = (...a) => { window.__errors.push(a.join(' ')); __err(...a); };
window.addEventListener('error', e => window.__errors.push('error: ' + (e.message || (e.target && (e.target.src || e.target.href)))), true);
</script>"""
# put last in <body>: after load, write a marker with image decode results and the errors into the DOM
PROBE_BODY = """<script>
window.addEventListener('load', () => {
  const imgs = Array.from(document.images);
  const ok = imgs.filter(i => i.complete && i.naturalWidth > 0).length;
  const pre = document.createElement('pre');
  pre.id = '__probe';
  pre.textContent = 'PROBE images=' + imgs.length + ' decoded=' + ok + ' errors=' + JSON.stringify(window.__errors);
  document.body.appendChild(pre);
});
</script>"""


def _chromium_flags(tmp: Path) -> list[str]:
    return ["--headless", "--disable-gpu", "--no-sandbox", "--disable-dev-shm-usage", "--hide-scrollbars",
            f"--user-data-dir={tmp / 'profile'}", "--enable-logging=stderr", "--v=0",
            "--virtual-time-budget=10000"]  # fmt: skip


@pytest.fixture(scope="session")
def chromium() -> str:
    """Path of a chromium binary; installed with apt-get when missing and we are root, else the test skips."""
    found = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
    if found:
        return found
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("chromium is not installed and we cannot install it (not root or no apt-get)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        subprocess.run(["apt-get", "update", "-q"], check=True, capture_output=True, timeout=600, env=env)
        subprocess.run(
            ["apt-get", "install", "-y", "-q", "chromium"],
            check=True,
            capture_output=True,
            timeout=1200,
            env=env,
        )
    except (subprocess.SubprocessError, OSError) as e:
        pytest.skip(f"chromium could not be installed with apt-get: {e}")
    if not os.path.exists("/usr/bin/chromium"):
        pytest.skip("apt-get install chromium finished but /usr/bin/chromium is absent")
    return "/usr/bin/chromium"


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    study = make_study(tmp_path_factory.mktemp("rep") / "demo")
    out = study / "report.html"
    assert main(["report", str(study), "--out", str(out)]) == 0
    return out


def test_report_is_self_contained(report: Path) -> None:
    html = report.read_text()
    assert html.startswith("<!DOCTYPE html>")
    # nothing fetched from elsewhere: no external src/href, no CSS imports or url(http...), no script at all
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", html, re.I)
    assert not re.search(r"@import|url\(\s*['\"]?https?:", html, re.I)
    assert "<script" not in html.lower() and "<link" not in html.lower()
    for name in SHOWN:
        assert f'data-figure="{name}"' in html
    assert html.count('src="data:image/png;base64,') == len(SHOWN)
    for t in TABLES:
        assert f'data-table="{t}"' in html
    assert 'data-block="base"' in html and "dataset: digits" in html  # the resolved base scenario
    assert "algorithm.name:" in html and 'data-block="grid"' in html  # the grid
    assert "9.2 (9.2 s)" in html  # host time total: 6 x 1.5 + 0.25
    assert "fedavg-s3" in html and "ValueError: boom" in html  # the failed run, listed and excluded


@pytest.mark.slow  # a real browser, twice (and apt-get install chromium where it is missing)
def test_report_renders_in_headless_chromium(report: Path, chromium: str, tmp_path: Path) -> None:
    html = report.read_text()
    probed = tmp_path / "probed.html"
    probed.write_text(
        html.replace("<head>", "<head>" + PROBE_HEAD, 1).replace("</body>", PROBE_BODY + "</body>", 1)
    )
    proc = subprocess.run(
        [chromium, *_chromium_flags(tmp_path), "--dump-dom", probed.as_uri()],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    dom = proc.stdout
    m = re.search(r"PROBE images=(\d+) decoded=(\d+) errors=(.*)", dom)
    assert m, f"no probe marker in the DOM: {dom[:500]}\n{proc.stderr[-2000:]}"
    assert int(m.group(1)) == len(SHOWN) and m.group(2) == m.group(1), m.group(0)
    assert m.group(3).strip().startswith("[]"), f"console / load errors: {m.group(3)}"
    console = [
        ln for ln in proc.stderr.splitlines() if "CONSOLE" in ln and ("rror" in ln or "Uncaught" in ln)
    ]
    assert not console, console
    for name in SHOWN:
        assert f'data-figure="{name}"' in dom
    for t in TABLES:
        assert f'data-table="{t}"' in dom
    # a screenshot of the report itself (no probe), for the repository
    shot = tmp_path / "shot.png"
    proc = subprocess.run(
        [chromium, *_chromium_flags(tmp_path), "--window-size=1280,2400", f"--screenshot={shot}", report.as_uri()],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0 and shot.is_file() and shot.stat().st_size > 20_000, proc.stderr[-2000:]
    if os.environ.get("IOTFL_SCREENSHOT_WRITE") == "1":  # refresh the repository's copy only when asked: a test
        SCREENSHOT.parent.mkdir(exist_ok=True)  # run must leave the tracked files as they were
        shutil.copyfile(shot, SCREENSHOT)


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_report_on_a_folder_that_is_no_run_or_study_is_refused_and_writes_nothing(tmp_path: Path, capsys) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("mine\n")
    before = _tree(notes)
    assert main(["report", str(notes)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: report: no finished run in") and "unreadable" in err[0]
    assert _tree(notes) == before  # no report.html landed in the user's folder


def test_plot_of_a_study_with_no_finished_run_says_so(tmp_path: Path, capsys) -> None:
    import json

    study = make_study(tmp_path / "demo")
    data = json.loads((study / "study.json").read_text())
    for r in data["runs"]:
        r["status"] = "pending"
    (study / "study.json").write_text(json.dumps(data))
    assert main(["plot", str(study)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "plot: no finished run in" in err[0] and "status pending" in err[0]
    assert not (study / "plots").exists()


def test_a_study_record_pointing_outside_the_study_is_not_read(tmp_path: Path) -> None:
    import json

    from study_fixtures import write_run

    from analysis.study import load_study

    study = make_study(tmp_path / "demo")
    write_run(tmp_path / "elsewhere", "fedavg", 0, [0.9, 0.9])  # a complete run, but not this study's
    data = json.loads((study / "study.json").read_text())
    data["runs"][0]["run_dir"] = "../elsewhere"
    (study / "study.json").write_text(json.dumps(data))
    rec = load_study(study).runs[0]
    assert rec.status == "failed" and "outside the study folder" in (rec.error or "")


def test_report_uses_the_runs_own_targets(tmp_path: Path, monkeypatch) -> None:
    import analysis.report as report
    from analysis.study import select

    monkeypatch.setattr(report, "iter_study_figures", lambda sel, targets: iter(()))  # the tables are the point
    study = make_study(tmp_path / "t", targets={"fedavg": [0.5, 0.7], "heterofl": [0.5, 0.7]})
    html = report.build_report(select([study]))
    assert "target accuracies 50%, 70% (the runs&#x27; server.target_accuracies)" in html
    assert "<th>50%</th><th>70%</th>" in html and "<th>60%</th>" not in html


def _tables_only(monkeypatch):
    import analysis.report as report

    monkeypatch.setattr(report, "iter_study_figures", lambda sel, targets: iter(()))  # the tables are the point
    return report


def _time_note(html: str) -> str:
    part = html[html.index("<h3>Simulated time to reach") :]
    return part[: part.index("</p>")]


def test_the_time_to_accuracy_note_says_where_the_targets_came_from(tmp_path: Path, monkeypatch) -> None:
    """No --targets: the note names the runs' own targets, not "given (--targets)" (issue 44, item 14)."""
    from analysis.study import select

    report = _tables_only(monkeypatch)
    study = make_study(tmp_path / "t", targets={"fedavg": [0.5, 0.7], "heterofl": [0.5, 0.7]})
    note = _time_note(report.build_report(select([study])))
    assert "Targets: the runs&#x27; server.target_accuracies." in note and "given" not in note
    assert "Targets: given (--targets)." in _time_note(report.build_report(select([study]), targets=[0.6]))
    bare = make_study(tmp_path / "bare")  # no run declares any: the fallback, said so
    assert "no run declares server.target_accuracies" in _time_note(report.build_report(select([bare])))


def test_a_study_json_without_the_definition_is_reported_as_not_recorded(tmp_path: Path, monkeypatch) -> None:
    """A study folder written before study.json kept base, grid and zip: the report says so, never `{}`."""
    import json

    from analysis.study import select

    report = _tables_only(monkeypatch)
    study = make_study(tmp_path / "old")
    data = json.loads((study / "study.json").read_text())
    (study / "study.json").write_text(json.dumps({"name": data["name"], "runs": data["runs"]}))
    html = report.build_report(select([study]))
    assert html.count('data-block="not-recorded"') == 2 and "{}" not in html
    assert "Not recorded: this study folder was written before study.json kept" in html
    assert "<td>fedavg</td>" in html  # the tables are all there
