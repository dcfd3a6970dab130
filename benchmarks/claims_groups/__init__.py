"""The seed papers' claims, one module per claim group (``adaptivefl``, ``flexfl``, ``adapterfl``, ``heterofl_iot``,
``fedx``), and the one record every claim is written in.

Each group module defines: ``TITLE`` (the section heading in claims.md), ``SETTING`` (markdown: the setting at
each scale and the variants with their switches; prose only, no result numbers), ``CLASSES`` (classes of the
dataset the accuracy claims are read on: chance is 1 / CLASSES), ``TABLE_COLS`` (the figures of the per-variant
table) and ``CLAIMS`` (a list of :class:`Claim`); optionally ``SCALE``, the scale claims.md shows the group as
pending at before any CSV exists (default ``hour``). ``benchmarks/claims.py`` runs a group's study, decides each
claim with ``analysis.claims_rule`` and writes benchmarks/claims.md from these modules and the per-seed figures.
"""

from __future__ import annotations

from dataclasses import dataclass

GROUPS = ("adaptivefl", "flexfl", "adapterfl", "heterofl_iot", "fedx")
KINDS = ("gt", "approx", "peak", "gain")
SECTIONS = ("paper", "extension", "issue")


@dataclass(frozen=True)
class Claim:
    """One claim, fixed before the runs.

    ``kind``: gt (``a[0]`` beats ``b[0]`` on ``metric``), approx (``a[0]`` about equals ``b[0]``: within ``margin``),
    peak (the best of ``sweep`` is one of ``a``), gain (the per-seed gain ``a[0] - a[1]`` beats ``b[0] - b[1]``).
    A side is a variant (a run ``name`` of the group's study), ``variant:column`` (another figure of that
    variant), or ``heterofl_full`` / ``heterofl_avg`` (that variant's ``acc_full`` / ``acc_avg``).
    ``source``: the seed file and line of the paper's sentence (``adaptivefl_dac24.txt:254``), empty for a claim
    of the project's own (section ``extension`` or ``issue``). ``paper``: the paper's numbers for the compared
    sides, with where they are ("83.14 vs 74.96, Table 2, CIFAR-10 VGG16 IID"). ``margin``: the smallest effect
    of interest in the metric's units (accuracies are fractions: 0.01 is one point); None takes the metric's
    default (``analysis.claims_rule.default_margin``). ``untestable``: set before the runs when the paper's setting
    cannot be expressed here, with why; such a claim gets no verdict.
    """

    cid: str
    sentence: str
    source: str
    kind: str
    metric: str
    a: tuple[str, ...]
    b: tuple[str, ...] = ()
    sweep: tuple[str, ...] = ()
    lower_is_better: bool = False
    paper: str = ""
    margin: float | None = None
    section: str = "paper"
    untestable: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"claim {self.cid}: kind {self.kind!r} is not one of {KINDS}")
        if self.section not in SECTIONS:
            raise ValueError(f"claim {self.cid}: section {self.section!r} is not one of {SECTIONS}")
        if self.section == "paper" and not self.source:
            raise ValueError(f"claim {self.cid}: a paper claim names its source (file:line)")


def gt(cid: str, sentence: str, source: str, metric: str, a: str, b: str, **kw: object) -> Claim:
    """``a`` beats ``b`` on ``metric``."""
    return Claim(cid, sentence, source, "gt", metric, (a,), (b,), **kw)  # type: ignore[arg-type]


def paper_gt(seed_file: str, cid: str, sentence: str, line: int, metric: str, a: str, b: str, paper: str, **kw: object) -> Claim:
    """A paper's "``a`` beats ``b``" claim at ``seed_file``'s ``line`` (a group binds its file:
    ``functools.partial(paper_gt, "adapterfl.txt")``)."""
    return gt(cid, sentence, f"{seed_file}:{line}", metric, a, b, paper=paper, **kw)
