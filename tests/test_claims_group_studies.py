"""The AdaptiveFL and FlexFL claim groups (benchmarks/claims_groups/) against their study files: every variant a claim
reads is a run name of the group's studies at every scale (the main file and the ``EXTRA_STUDIES`` ones), the
same names at every scale, at least 5 seeds, one run at a time at hour scale, and every claim names its source
line in the paper's seed file."""

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
SEEDS = ROOT.parent / "shared" / "seeds"  # the papers, in shared/ beside the clone (CI gets a copy there)
GROUPS = ("adaptivefl", "flexfl")
SCALES = ("smoke", "hour", "paper")


def _module(group: str):
    return importlib.import_module(f"claims_groups.{group}")


def _variants(claim) -> set[str]:
    return {side.split(":")[0] for side in (*claim.a, *claim.b, *claim.sweep)}


@pytest.mark.parametrize("group", GROUPS)
def test_every_claimed_variant_is_in_the_groups_studies(group):
    mod = _module(group)
    needed = set().union(*(_variants(c) for c in mod.CLAIMS))
    names = {}
    for scale in SCALES:
        found: list[str] = []
        for suffix in ("", *getattr(mod, "EXTRA_STUDIES", ())):
            path = CLAIMS_DIR / f"{group}_{scale}{'_' + suffix if suffix else ''}.yaml"
            study = read_study(
                path, check=False
            )  # the schema, every point's overrides and scenario; no data read
            assert study.spec.name == path.stem.replace(f"{group}_", f"claims_{group}_", 1)
            assert study.spec.grid["seed"] == [0, 1, 2, 3, 4]
            if scale == "hour":
                assert study.spec.workers == 1
            found += study.spec.zip_["name"]
        assert len(found) == len(set(found)), f"{group} {scale}: a variant name in two studies"
        assert needed <= set(found), f"{group} {scale}: no variant {sorted(needed - set(found))}"
        names[scale] = sorted(found)
    assert names["smoke"] == names["hour"] == names["paper"]


@pytest.mark.parametrize("group", GROUPS)
def test_every_paper_claim_quotes_its_line(group):
    for c in _module(group).CLAIMS:
        if c.section != "paper":
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
