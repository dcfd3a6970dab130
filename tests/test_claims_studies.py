"""benchmarks/claims.py: every study file in scenarios/claims/ validates and names every variant its group's claims
read; a study folder's figures go to a CSV that reads back as the same floats; claims.md is built from the group
modules and the CSVs alone, byte for byte the committed file. The decision rule itself: tests/test_claims_rule.py."""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))

import claims  # noqa: E402
import claims_figures  # noqa: E402
import claims_plot  # noqa: E402
import claims_report  # noqa: E402
from claims_groups import Claim, gt  # noqa: E402
from study_fixtures import make_study  # noqa: E402

from analysis import claims_rule  # noqa: E402
from iotfl_sim.study import read_study  # noqa: E402

SEEDS = ROOT.parent / "shared" / "seeds"  # the papers, beside the clone (CI has a copy)


@pytest.mark.parametrize("group", claims.GROUPS)
def test_claim_studies_validate_and_hold_every_variant(group):
    """Every variant a claim reads is a run name of the group's studies (the main file and its EXTRA_STUDIES) at
    every scale, the same names at every scale, no name in two studies, seeds 0..n-1."""
    mod = claims_report.group_module(group)
    names = {}
    for scale in claims.SCALES:
        found: list[str] = []
        for path in claims.study_files(group, scale):
            study = read_study(path, check=False)  # the schema, every point's overrides and scenario; no data read
            assert study.spec.name == path.stem.replace(f"{group}_", f"claims_{group}_", 1)
            seeds = study.spec.grid["seed"]
            assert seeds == list(range(len(seeds))) and len(seeds) >= claims_rule.MIN_SEEDS  # the rule's paired seeds
            found += study.spec.zip_["name"]
        assert len(found) == len(set(found)), f"{group} {scale}: a variant name in two studies"
        needed = set().union(*(claims_report.variants_of(c, set(found)) for c in mod.CLAIMS if not c.untestable))
        assert needed <= set(found), f"{group} {scale}: no variant {sorted(needed - set(found))}"
        names[scale] = sorted(found)
    assert names["smoke"] == names["hour"] == names["paper"]  # the same variants at every scale
    for c in mod.CLAIMS:  # every claim has a margin, its own or its metric's
        assert c.margin is not None or claims_rule.default_margin(c.metric)


def test_committed_claims_md_is_the_generated_one():
    """No hand-edited number survives: claims.md is what the group modules and the committed CSVs give."""
    expected = claims_report.render(claims_report.read_all())
    assert claims_report.MD_PATH.read_text(encoding="utf-8") == expected, (
        "benchmarks/claims.md differs from what benchmarks/claims.py --from-data writes: rerun it"
    )


def _same(a: dict, b: dict) -> bool:
    """Equal as floats, nan equal to nan."""
    if a.keys() != b.keys():
        return False
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, dict):
            if not _same(x, y):
                return False
        elif not (x == y or (math.isnan(x) and math.isnan(y))):
            return False
    return True


def test_report_from_a_study_folder_round_trips_and_reproduces(monkeypatch, tmp_path, capsys):
    mod = _fake_group(monkeypatch, [gt("x", "heterofl beats fedavg", "x.txt:1", "acc_avg", "heterofl", "fedavg")],
                      cols=("acc_full", "comm_waste", "acc_a"))  # fmt: skip
    monkeypatch.setattr(claims, "group_module", lambda g: mod)
    study = make_study(tmp_path / "study", with_failed=False)  # fedavg and heterofl, seeds 0-2
    data_dir, md = tmp_path / "data", tmp_path / "claims.md"
    by = ("algorithm.name",)
    csv_path = Path(claims.report("fedx", "smoke", [study], data_dir, md, by))
    assert csv_path == data_dir / "fedx_smoke.csv"
    collected, _ = claims_figures.collect(study, by)
    back = claims_figures.read_csv(csv_path)
    # the fixture's comm_waste is 0.1 * (seed + 1): 0.30000000000000004 at seed 2 must come back exactly
    assert back["fedavg"][2]["comm_waste"] == 0.1 * 3 == collected["fedavg"][2]["comm_waste"]
    assert back["heterofl"][0]["acc_full"] == 0.85  # the fixture's last round
    assert math.isnan(back["fedavg"][0]["host_time_s"])  # the fixture's summary has none
    cols = claims_report.columns(mod, set(collected))
    assert cols == ["acc_full", "comm_waste", "acc_a", "acc_avg"]  # the table's, then the claims'
    assert math.isnan(back["fedavg"][0]["acc_a"]) and back["heterofl"][1]["acc_a"] == 0.84  # 0.84 - 0.1 * 0
    assert _same(back, {v: {s: {c: f.get(c, math.nan) for c in [*cols, "host_time_s"]} for s, f in per.items()}
                        for v, per in collected.items()})  # fmt: skip
    assert list(back) == ["fedavg", "heterofl"] and list(back["fedavg"]) == [0, 1, 2]
    first_csv, first_md = csv_path.read_bytes(), md.read_bytes()
    assert (study / "compare").is_dir()
    capsys.readouterr()
    claims.report("fedx", "smoke", [study], data_dir, md, by)  # the report rebuilt from the folder
    assert (csv_path.read_bytes(), md.read_bytes()) == (first_csv, first_md)
    # the six runs the replaced CSV held were rerun (here: read again) and said to give the same figures
    assert "fedx_smoke.csv: 6 of the 6 runs the replaced CSV also holds give the same figures\n" in capsys.readouterr().err
    md.unlink()
    assert claims.main(["--from-data", "--data", str(data_dir), "--md", str(md)]) == 0
    assert md.read_bytes() == first_md


def test_a_rerun_is_compared_with_the_csv_it_replaces():
    """Seeds rerun (a lost study folder run again) are checked bit for bit against the committed figures: the host
    time may differ, a NaN equals a NaN, one changed figure is named; seeds only one side has are not compared."""
    nan = math.nan
    before = {"a": {0: {"acc_full": 0.5, "acc_x": nan, "host_time_s": 1.0}, 1: {"acc_full": 0.6, "acc_x": nan}}}
    same = {"a": {0: {"acc_full": 0.5, "acc_x": nan, "host_time_s": 9.0}, 1: {"acc_full": 0.6, "acc_x": nan},
                  2: {"acc_full": 0.1}}, "b": {0: {"acc_full": 0.2}}}  # fmt: skip
    assert claims_figures.rerun_check(before, same) == "2 of the 2 runs the replaced CSV also holds give the same figures"
    moved = {"a": {0: {"acc_full": 0.5, "acc_x": nan}, 1: {"acc_full": 0.6000000000000001, "acc_x": nan}}}
    assert claims_figures.rerun_check(before, moved) == (
        "1 of the 2 runs the replaced CSV also holds give the same figures; 1 differ, the first a seed 1: "
        "acc_full 0.6 -> 0.6000000000000001"
    )
    assert claims_figures.rerun_check(before, {"a": {5: {"acc_full": 0.5}}}) is None


CORRUPT_CSV = {
    "a seed not a number": ("variant,seed,utility,host_time_s\nfedx,0,0.5,1.0\nfedx,x,0.5,1.0\n", "line 3"),
    "an infinite figure": ("variant,seed,utility,host_time_s\nfedx,0,0.5,1.0\nfedx,1,-inf,1.0\n",
                           "line 3: utility is infinite"),
    "far too large": ("variant,seed,utility,host_time_s\n" + "fedx,0,0.5,1.0\n" * 1_200_000, "bytes, more than a claims CSV"),
}  # fmt: skip


@pytest.mark.parametrize("kind", CORRUPT_CSV)
def test_a_corrupt_csv_is_refused_and_nothing_written(tmp_path, capsys, kind):
    """An infinite figure would otherwise drop out of a mean and move verdicts without a word."""
    text, words = CORRUPT_CSV[kind]
    data_dir, md = tmp_path / "data", tmp_path / "claims.md"
    data_dir.mkdir()
    (data_dir / "fedx_hour.csv").write_text(text)
    md.write_text("before")
    assert claims.main(["--from-data", "--data", str(data_dir), "--md", str(md)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {data_dir / 'fedx_hour.csv'}") and words in err
    assert err.count("\n") == 1 and claims_figures.CSV_FIX in err
    assert md.read_text() == "before" and sorted(p.name for p in tmp_path.iterdir()) == ["claims.md", "data"]


@pytest.mark.parametrize("what", ["a dangling link", "a folder"])
def test_something_not_a_csv_at_a_csvs_name_is_refused(tmp_path, capsys, what):
    """A group whose CSV name holds a dangling link or a folder would otherwise be shown as not yet run."""
    data_dir, md = tmp_path / "data", tmp_path / "claims.md"
    data_dir.mkdir()
    (data_dir / "fedx_hour.csv").write_text("variant,seed,utility,host_time_s\nfedx,0,0.5,1.0\n")
    bad = data_dir / "heterofl_iot_hour.csv"
    bad.symlink_to(tmp_path / "gone.csv") if what == "a dangling link" else bad.mkdir()
    assert claims.main(["--from-data", "--data", str(data_dir), "--md", str(md)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {bad}: cannot read it") and err.count("\n") == 1, err
    assert not md.exists()


def _fake_group(monkeypatch, claims_list, classes=10, cols=("acc_full",)):
    mod = SimpleNamespace(TITLE="Fake", SETTING="A made-up setting.", CLASSES=classes, TABLE_COLS=list(cols),
                          CLAIMS=claims_list)  # fmt: skip
    monkeypatch.setattr(claims_report, "GROUPS", ("fedx",))
    monkeypatch.setattr(claims_report, "group_module", lambda g: mod)
    return mod


def _csv(path: Path, values: dict[str, list[float]], col: str = "acc_full") -> None:
    rows = ["variant,seed," + col + ",host_time_s"]
    rows += [f"{v},{s},{x!r},10.0" for v, xs in values.items() for s, x in enumerate(xs)]
    path.write_text("\n".join(rows) + "\n")


def test_claims_md_rows_from_a_hand_made_csv(monkeypatch, tmp_path):
    _fake_group(
        monkeypatch,
        [
            gt("up", "A beats B", "x.txt:1", "acc_full", "a", "b", paper="80 vs 70"),
            gt("down", "B beats A", "x.txt:2", "acc_full", "b", "a"),
            Claim("eq", "A about equals C", "x.txt:3", "approx", "acc_full", ("a",), ("c",)),
            gt("own", "our option", "", "acc_full", "a", "c", section="extension"),
            gt("cant", "cannot be set up", "x.txt:4", "acc_full", "a", "b", untestable="no such dataset"),
        ],
    )
    _csv(tmp_path / "fedx_hour.csv", {"a": [0.8, 0.82, 0.81, 0.83, 0.84], "b": [0.7, 0.71, 0.7, 0.72, 0.73],
                                      "c": [0.8, 0.821, 0.809, 0.83, 0.84]})  # fmt: skip
    text = claims_report.render(claims_report.read_all(tmp_path), tmp_path)
    lines = {ln.split(" | ")[0][2:]: ln for ln in text.splitlines() if ln.startswith("| ")}
    # per-seed values in points, the effect (a - b: 0.10, 0.11, 0.11, 0.11, 0.11; mean 0.108)
    assert (
        "seeds 0-4 · a: 80.00, 82.00, 81.00, 83.00, 84.00 · b: 70.00, 71.00, 70.00, 72.00, 73.00"
        in lines["up"]
    )
    assert "+10.80 [" in lines["up"] and "**reproduced**" in lines["up"] and "80 vs 70" in lines["up"]
    assert "A beats B (`x.txt:1`)" in lines["up"]
    assert "**not reproduced**" in lines["down"] and "reversed" in lines["down"]
    assert "**reproduced**" in lines["eq"]
    assert "**not testable** | no such dataset" in lines["cant"]
    assert "our option [extension]" in lines["own"]
    assert text.index("| up |") < text.index("**Not the paper's claims**") < text.index("| own |")
    assert "**not reproduced**" in lines["own"]  # a - c is 0 on average: below the margin
    assert "| fedx | hour | 5 | 2 | 2 | 0 | 1 | 0 |" in text  # the overall table
    assert "2 reproduced, 2 not reproduced, 0 inconclusive, 1 not testable, 0 pending (5 claims)" in text
    assert "(15 runs, 0.04 h of host time" in text  # 15 runs x 10 s = 150 s = 0.0417 h


def test_the_readme_verdict_list_from_a_hand_made_csv(monkeypatch, tmp_path, capsys):
    """The README's list says per method what claims.md decides: counts, the decided claims with what they compare
    and their section tag, the ids of the rest; only between its markers, and only where asked (--readme, or the
    default claims.md); a README without its markers is refused before anything is written."""
    _fake_group(
        monkeypatch,
        [
            gt("up", "A beats B: a > b", "x.txt:1", "acc_full", "a", "b"),
            gt("own", "our option: a > c", "", "acc_full", "a", "c", section="extension"),
            gt("cant", "cannot be set up", "x.txt:4", "acc_full", "a", "b", untestable="no such dataset"),
        ],
    )
    data_dir, md, readme = tmp_path / "data", tmp_path / "claims.md", tmp_path / "README.md"
    data_dir.mkdir()
    _csv(data_dir / "fedx_hour.csv", {"a": [0.8, 0.82, 0.81, 0.83, 0.84], "b": [0.7, 0.71, 0.7, 0.72, 0.73],
                                      "c": [0.8, 0.821, 0.809, 0.83, 0.84]})  # fmt: skip
    readme.write_text(f"# Intro\n{claims_report.README_BEGIN}\nstale\n{claims_report.README_END}\nafter\n")
    assert claims.main(["--from-data", "--data", str(data_dir), "--md", str(md), "--readme", str(readme)]) == 0
    block = (
        "- **Fake**, scale hour, seeds 0-4 (section 1 of claims.md): 3 claims. reproduced 1: up (a > b). "
        "not reproduced 1: own (a > c) [extension]. not testable 1: cant.\n"
    )
    assert readme.read_text() == f"# Intro\n{claims_report.README_BEGIN}\n{block}{claims_report.README_END}\nafter\n"
    assert (tmp_path / "claims_effects.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # beside claims.md
    pending = "- **Fake**, scale hour (section 1 of claims.md): 3 claims, pending: its study is not finished.\n"
    assert claims_report.verdict_block({}) == pending
    drawn = claims_plot.plotted(claims_report.decide_all(claims_report.read_all(data_dir)))
    assert [(name, r.claim.cid) for name, r in drawn] == [("Fake", "up"), ("Fake", "own")]  # not "cant": no effect
    assert claims_plot.forest(claims_report.decide_all({})) is None  # nothing run: no figure
    before = claims_report.README_PATH.read_bytes()
    assert claims.main(["--from-data", "--data", str(data_dir), "--md", str(md)]) == 0  # no --readme, md elsewhere
    assert claims_report.README_PATH.read_bytes() == before
    readme.write_text("no markers\n")
    md.write_text("before")
    capsys.readouterr()
    assert claims.main(["--from-data", "--data", str(data_dir), "--md", str(md), "--readme", str(readme)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "no claim-verdict markers" in err and err.count("\n") == 1
    assert (md.read_text(), readme.read_text()) == ("before", "no markers\n")
    readme.write_bytes(b"\xff\xfe not text")
    assert claims.main(["--from-data", "--data", str(data_dir), "--md", str(md), "--readme", str(readme)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "README.md: cannot read it" in err and err.count("\n") == 1
    assert md.read_text() == "before"


def test_committed_readme_verdicts_are_the_generated_ones():
    text = claims_report.README_PATH.read_text(encoding="utf-8")
    expected = claims_report.with_verdict_block(text, claims_report.verdict_block(claims_report.read_all()))
    assert text == expected, "README.md's claim verdicts differ from benchmarks/claims.py --from-data's: rerun it"


def test_near_chance_and_pending(monkeypatch, tmp_path):
    _fake_group(monkeypatch, [gt("low", "A beats B", "x.txt:1", "acc_full", "a", "b"),
                              gt("cant", "no", "x.txt:2", "acc_full", "a", "b", untestable="stated")])  # fmt: skip
    text = claims_report.render({}, tmp_path)
    assert "**pending** | not yet run at scale hour" in text and "**not testable** | stated" in text
    _csv(tmp_path / "fedx_hour.csv", {"a": [0.25, 0.26, 0.27, 0.28, 0.29], "b": [0.1] * 5})
    text = claims_report.render(claims_report.read_all(tmp_path), tmp_path)
    low = next(ln for ln in text.splitlines() if ln.startswith("| low |"))
    assert "**not testable**" in low and "below 3 x chance (30.00 %)" in low
    assert "– / –" not in low and "| – | **not testable**" in low  # no p-value


@pytest.mark.parametrize("group", claims.GROUPS)
def test_every_paper_claim_quotes_its_line(group):
    for c in claims_report.group_module(group).CLAIMS:
        if c.section != "paper":
            continue
        m = re.fullmatch(r"([a-z0-9_]+\.txt):([0-9]+)", c.source)
        assert m, f"{c.cid}: source {c.source!r} is not file.txt:LINE"
        assert c.paper, f"{c.cid}: no paper numbers or 'no numbers' note"
        path = SEEDS / m.group(1)
        if not path.is_file():
            pytest.skip(f"{path} not here")
        line = path.read_text(encoding="utf-8").splitlines()[int(m.group(2)) - 1]
        # the paper's words: in "double quotes" at the start, else everything before the first ': '
        quoted = re.match(r'"([^"]+)"', c.sentence)
        quote = quoted.group(1) if quoted else c.sentence.split(": ")[0]
        # the text copy renders numbers as LaTeX debris ("40%percent4040\\%40 %"): compare the words, in order
        words = re.findall(r"[A-Za-z]+", line)
        at = 0
        for word in re.findall(r"[A-Za-z]+", quote):
            at = words.index(word, at) + 1 if word in words[at:] else -1
            assert at > 0, f"{c.cid}: {word!r} of {quote!r} is not (in order) on {c.source}"


def test_paced_is_never_a_paper_claim():
    """paced selection is this project's extension: no paper-section claim of HeteroFL-IoT reads it."""
    for c in claims_report.group_module("heterofl_iot").CLAIMS:
        if "paced" in claims_report.variants_of(c, {"paced"}):
            assert c.section != "paper", c.cid


def _cut_last_line(p: Path) -> None:
    p.write_text("".join(p.read_text().splitlines(keepends=True)[:-1]))


DAMAGE = {  # what a damaged run folder looks like -> the words the refusal must say
    "a last line cut short": (lambda run: run.joinpath("rounds.csv").write_text(run.joinpath("rounds.csv").read_text()[:-7]),
                              "its last line is cut short"),
    "a round missing": (lambda run: _cut_last_line(run / "rounds.csv"), "4 rounds where summary.json says 5"),
    "a row short of fields": (lambda run: run.joinpath("rounds.csv").write_text(
        run.joinpath("rounds.csv").read_text().replace("\n", "\n1,2\n", 1)), "line 2: 2 fields"),
    "no summary": (lambda run: run.joinpath("summary.json").unlink(), "summary.json"),
    "undecodable rounds": (lambda run: run.joinpath("rounds.csv").write_bytes(b"\xff\xfe\x00"), "unreadable"),
    "an event cut short": (lambda run: run.joinpath("events.jsonl").write_text(
        '{"event": "dispatch", "round": 0, "device": 1, "level": "a"}\n{"event": "dispatch", "rou\n'), "line 2"),
    "a broken scenario": (lambda run: (  # read for the level quotas when the run has dispatch events
        run.joinpath("events.jsonl").write_text('{"event": "dispatch", "round": 0, "device": 1, "level": "a"}\n'),
        run.joinpath("scenario.resolved.yaml").write_text("algorithm: [\n")), "cannot read its figures"),
}  # fmt: skip


@pytest.mark.parametrize("kind", DAMAGE)
def test_a_damaged_run_the_study_calls_done_is_refused_and_nothing_written(monkeypatch, tmp_path, kind):
    """The plots tolerate a half-written run folder; a verdict must not rest on one: the report names the folder
    and says how to recompute that run, before writing anything."""
    mod = _fake_group(monkeypatch, [gt("x", "heterofl beats fedavg", "x.txt:1", "acc_avg", "heterofl", "fedavg")])
    monkeypatch.setattr(claims, "group_module", lambda g: mod)
    study = make_study(tmp_path / "study", with_failed=False)
    damage, words = DAMAGE[kind]
    damage(study / "runs" / "heterofl-s1")
    data_dir, md = tmp_path / "data", tmp_path / "claims.md"
    with pytest.raises(claims_figures.DataError) as e:
        claims.report("fedx", "smoke", [study], data_dir, md, ("algorithm.name",))
    assert "heterofl-s1" in str(e.value) and words in str(e.value) and "\n" not in str(e.value)
    assert e.value.fix == claims_figures.RUN_FIX
    assert not data_dir.exists() and not md.exists() and not (study / "compare").exists()


def test_a_study_not_done_is_refused_into_the_committed_data_only(monkeypatch, tmp_path, capsys):
    """Committed verdicts rest on whole studies (claims.md's rule "More seeds"): a report into the committed
    folder with a run not done is refused; elsewhere it is a preview that says what it left out."""
    mod = _fake_group(monkeypatch, [gt("x", "heterofl beats fedavg", "x.txt:1", "acc_avg", "heterofl", "fedavg")])
    monkeypatch.setattr(claims, "group_module", lambda g: mod)
    study = make_study(tmp_path / "study", with_failed=True)  # fedavg seed 3 failed
    committed = tmp_path / "committed"
    monkeypatch.setattr(claims, "DATA_DIR", committed)
    with pytest.raises(claims_figures.DataError, match="1 runs of the study are not done .*fedavg-s3: status failed"):
        claims.report("fedx", "smoke", [study], committed, tmp_path / "claims.md", ("algorithm.name",))
    assert not committed.exists() and not (tmp_path / "claims.md").exists()
    claims.report("fedx", "smoke", [study], tmp_path / "preview", tmp_path / "claims.md", ("algorithm.name",))
    assert "1 runs left out: fedavg-s3: status failed" in capsys.readouterr().err
    assert (tmp_path / "preview" / "fedx_smoke.csv").is_file()


def test_data_folder_that_would_rewrite_claims_md_wrongly_is_refused(tmp_path, capsys):
    """A --data that is a file, or holds no CSV to rebuild from, or is not the committed folder while claims.md
    (the committed report) would be written: one line naming --data, exit 2, nothing written."""
    (tmp_path / "afile").write_text("x")
    (tmp_path / "empty").mkdir()
    md = tmp_path / "claims.md"
    cases = [
        (["--from-data", "--data", str(tmp_path / "afile"), "--md", str(md)], "not a folder"),
        (["--from-data", "--data", str(tmp_path / "empty"), "--md", str(md)], "no per-seed CSV"),
        (["--from-data", "--data", str(tmp_path / "missing"), "--md", str(md)], "no per-seed CSV"),
        (["--group", "fedx", "--report-only", "--data", str(tmp_path / "empty")], "give --md too"),
    ]
    before = claims_report.MD_PATH.read_bytes()
    for argv, words in cases:
        assert claims.main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: --data ") and words in err and err.count("\n") == 1, err
    assert not md.exists() and claims_report.MD_PATH.read_bytes() == before
    assert list((tmp_path / "empty").iterdir()) == []


def test_two_outputs_that_are_one_file_are_refused(tmp_path, capsys):
    """--md, --readme, the figure beside --md and the per-seed CSVs must be distinct files: one written over
    another would keep only the last (--md onto a CSV would replace a group's figures with markdown)."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "fedx_hour.csv").write_text("variant,seed,utility,host_time_s\nfedx,0,0.5,1.0\n")
    before = (data / "fedx_hour.csv").read_bytes()
    cases = [
        (["--md", str(data / "fedx_hour.csv")], "--md and the CSV fedx_hour.csv in --data are one file"),
        (["--md", str(tmp_path / "r.md"), "--readme", str(tmp_path / "x" / ".." / "r.md")], "--md and --readme"),
        (["--md", str(tmp_path / "c.md"), "--readme", str(tmp_path / "claims_effects.png")],
         "--readme and the figure claims_effects.png beside --md"),
    ]  # fmt: skip
    for argv, words in cases:
        assert claims.main(["--from-data", "--data", str(data), *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {words}") and err.count("\n") == 1, err
    assert (data / "fedx_hour.csv").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]


def test_an_unwritable_report_is_one_line_naming_it(tmp_path, capsys):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "fedx_hour.csv").write_text("variant,seed,utility,host_time_s\nfedx,0,0.5,1.0\n")
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro" / "claims.md").mkdir()  # a folder where the file should go: the rename fails
    assert claims.main(["--from-data", "--data", str(tmp_path / "data"), "--md", str(tmp_path / "ro" / "claims.md")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path / 'ro' / 'claims.md'}: ") and err.count("\n") == 1
    assert [p.name for p in (tmp_path / "ro").iterdir()] == ["claims.md"]  # the temporary files are gone


@pytest.mark.parametrize("blocked", ["md", "compare"])
def test_a_report_with_one_target_it_cannot_write_changes_no_file(monkeypatch, tmp_path, capsys, blocked):
    """The CSV, claims.md, its figure and the study's comparison tables are written as one: when one target cannot
    be written (here a file where its folder should be), every file stays as it was and no temporary file is
    left."""
    mod = _fake_group(monkeypatch, [gt("x", "heterofl beats fedavg", "x.txt:1", "acc_avg", "heterofl", "fedavg")])
    monkeypatch.setattr(claims, "group_module", lambda g: mod)
    study = make_study(tmp_path / "study", with_failed=False)
    data_dir, out = tmp_path / "data", tmp_path / "out"
    data_dir.mkdir()
    out.mkdir()
    csv_path = data_dir / "fedx_smoke.csv"
    csv_path.write_text("variant,seed,acc_full,host_time_s\nfedavg,0,0.5,1.0\n")
    if blocked == "md":
        (out / "sub").write_text("a file, not a folder")
        md = out / "sub" / "claims.md"
    else:
        md = out / "claims.md"
        (study / "compare").write_text("a file, not a folder")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(OSError) as e:
        claims.report("fedx", "smoke", [study], data_dir, md, ("algorithm.name",))
    assert e.value.filename == str(out / "sub" if blocked == "md" else study / "compare")
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_the_groups_own_csv_unreadable_is_rebuilt_and_said(monkeypatch, tmp_path, capsys):
    """A report rebuilds its group's CSV from the study folder: a damaged copy of that CSV (whose error message
    says to do exactly this) is replaced, and the report says no run could be compared with it. Another group's
    damaged CSV still stops the report."""
    mod = _fake_group(monkeypatch, [gt("x", "heterofl beats fedavg", "x.txt:1", "acc_avg", "heterofl", "fedavg")])
    monkeypatch.setattr(claims, "group_module", lambda g: mod)
    study = make_study(tmp_path / "study", with_failed=False)
    data_dir, md = tmp_path / "data", tmp_path / "claims.md"
    data_dir.mkdir()
    csv_path = data_dir / "fedx_smoke.csv"
    csv_path.write_text("variant,seed,acc_full,host_time_s\nfedavg,0,0.5\n")  # a row cut short
    claims.report("fedx", "smoke", [study], data_dir, md, ("algorithm.name",))
    err = capsys.readouterr().err
    assert "fedx_smoke.csv: the CSV it replaced was unreadable (" in err and "line 2" in err
    assert "so no run was compared with it" in err and "give the same figures" not in err
    assert set(claims_figures.read_csv(csv_path)) == {"fedavg", "heterofl"}
    (data_dir / "fedx_hour.csv").write_text("variant,seed,utility,host_time_s\nfedx,x,0.5,1.0\n")
    before = csv_path.read_bytes()
    with pytest.raises(claims_figures.DataError, match="fedx_hour.csv line 2"):
        claims.report("fedx", "smoke", [study], data_dir, md, ("algorithm.name",))
    assert csv_path.read_bytes() == before


def test_a_study_folder_from_another_version_of_the_study_file_is_named(tmp_path):
    """--report-only reads the folder as the last sweep left it: a run the file no longer defines (a variant's
    options changed), one it adds, or another base scenario is said, never mixed into the figures."""
    folder = make_study(tmp_path / "study", with_failed=False)
    recorded = json.loads((folder / "study.json").read_text())
    ids = [r["id"] for r in recorded["runs"]]
    base = recorded["base"]

    def study(point_ids, base=base):
        points = [SimpleNamespace(id=i, overrides={}) for i in point_ids]
        return SimpleNamespace(points=points, source=Path("claims/g_hour.yaml"), base_resolved=base)

    assert claims.stale_folder(study(ids), folder) is None
    assert claims.stale_folder(study(ids), tmp_path / "none yet") is None
    gone = claims.stale_folder(study(ids[1:]), folder)
    assert f"lists run {ids[0]}, which claims/g_hour.yaml no longer defines" in gone and "without --report-only" in gone
    assert "lacks run fedavg-s9, which" in claims.stale_folder(study([*ids, "fedavg-s9"]), folder)
    other = claims.stale_folder(study(ids, {**base, "rounds": 6}), folder)
    assert "base scenario differs" in other and "(rounds: 5 -> 6)" in other and "another --out" in other
