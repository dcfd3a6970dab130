"""The AdapterFL and HeteroFL-IoT claim groups (benchmarks/claims_groups/) against their study files and papers: every
variant a claim reads is a run name of the group's studies at every scale, the same names at every scale, seeds
0-4, one run at a time at hour scale, and every paper claim quotes words that stand on its cited line."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from iotfl_sim.study import read_study  # noqa: E402

CLAIMS_DIR = ROOT / "scenarios" / "claims"
SEEDS = ROOT.parent / "shared" / "seeds"  # the papers, in shared/ beside the clone
GROUPS = ("adapterfl", "heterofl_iot")
SCALES = ("smoke", "hour", "paper")


def _module(group: str):
    return importlib.import_module(f"claims_groups.{group}")


def _variants(claim) -> set[str]:
    return {side.split(":")[0] for side in (*claim.a, *claim.b, *claim.sweep)}


@pytest.mark.parametrize("group", GROUPS)
def test_every_claimed_variant_is_in_the_groups_studies(group):
    needed = set().union(*(_variants(c) for c in _module(group).CLAIMS))
    names = {}
    for scale in SCALES:
        study = read_study(CLAIMS_DIR / f"{group}_{scale}.yaml", check=False)  # schema and overrides, no data
        assert study.spec.name == f"claims_{group}_{scale}"
        assert study.spec.grid["seed"] == [0, 1, 2, 3, 4]
        if scale == "hour":
            assert study.spec.workers == 1
        names[scale] = study.spec.zip_["name"]
        assert needed <= set(names[scale]), f"{group} {scale}: no variant {sorted(needed - set(names[scale]))}"
    assert names["smoke"] == names["hour"] == names["paper"]


@pytest.mark.parametrize("group", GROUPS)
def test_every_paper_claim_quotes_its_line(group):
    for c in _module(group).CLAIMS:
        if c.section != "paper":
            assert not c.source, f"{c.cid}: only the paper's claims name a source line"
            continue
        m = re.fullmatch(r"([a-z0-9_]+\.txt):([0-9]+)", c.source)
        assert m, f"{c.cid}: source {c.source!r} is not file.txt:LINE"
        assert c.paper, f"{c.cid}: no paper numbers or 'no numbers' note"
        path = SEEDS / m.group(1)
        if not path.is_file():
            pytest.skip(f"{path} not here")
        line = path.read_text(encoding="utf-8").splitlines()[int(m.group(2)) - 1]
        quote = c.sentence.split(": ")[0]  # the paper's words come before the first ': '
        assert quote in line, f"{c.cid}: {quote!r} is not on {c.source}"


def test_paced_is_never_a_paper_claim():
    """paced selection is this project's extension: no paper-section claim of HeteroFL-IoT reads it."""
    for c in _module("heterofl_iot").CLAIMS:
        if "paced" in _variants(c):
            assert c.section != "paper", c.cid
