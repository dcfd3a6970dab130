"""benchmarks/claims_effects.png: every tested claim's paired effect with its 95 % interval, in units of the claim's
margin (so accuracies, rounds and energies share one axis), coloured by its verdict. A picture of claims.md's
effect column: how far each effect is from 0 and from the margin, which the verdict counts alone do not show.
The verdicts are Holm-corrected and the intervals are not, so an interval clear of 0 can still be inconclusive."""

from __future__ import annotations

import io

import claims_report
from claims_report import VERDICTS, Row
from matplotlib.figure import Figure

from analysis import claims_rule as rule

PLOT_NAME = "claims_effects.png"  # beside claims.md
COLORS = {rule.REPRODUCED: "#1a9850", rule.NOT_REPRODUCED: "#d73027", rule.INCONCLUSIVE: "#7f7f7f"}


def plotted(parts: list[tuple[str, str, object, list[Row]]]) -> list[tuple[str, Row]]:
    """(group label, row) of every claim with a paired effect and a verdict the plot colours, in claims.md's order."""
    out = []
    for g, _, _, rows in parts:
        name = claims_report.group_name(g)
        out += [(name, r) for r in rows if r.tests is not None and r.tests.effect is not None
                and r.verdict.verdict in COLORS]  # fmt: skip
    return out


def forest(parts: list[tuple[str, str, object, list[Row]]]) -> bytes | None:
    """The figure as PNG bytes (None when no claim has an effect yet)."""
    rows = plotted(parts)
    if not rows:
        return None
    fig = Figure(figsize=(8.0, 1.2 + 0.22 * len(rows)), layout="constrained")
    ax = fig.add_subplot()
    for i, (_, r) in enumerate(rows):
        e, m = r.tests.effect, r.tests.margin
        y = len(rows) - 1 - i
        color = COLORS[r.verdict.verdict]
        ax.plot([e.lo / m, e.hi / m], [y, y], color=color, linewidth=1.6)
        ax.plot([e.mean / m], [y], "o", color=color, markersize=4)
    ax.set_yticks(range(len(rows)), [f"{name}: {r.claim.cid}" for name, r in reversed(rows)], fontsize=7)
    ax.axvline(0.0, color="black", linewidth=0.8)
    ax.axvline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.axvline(-1.0, color="black", linewidth=0.5, linestyle=":")
    ax.set_xscale("symlog", linthresh=10.0)
    ax.set_xlabel(
        "paired effect, claim's direction, in margins (95 % interval; log scale past ±10)", fontsize=8
    )
    ax.grid(True, axis="x", alpha=0.3, linewidth=0.6)
    handles = [ax.plot([], [], "o-", color=c, label=v)[0] for v, c in COLORS.items() if v in VERDICTS]
    ax.legend(handles=handles, loc="lower right", fontsize=7)
    ax.set_title("The seed papers' claims: effects and verdicts (benchmarks/claims.md)", fontsize=9)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, metadata={"Software": None})
    return buf.getvalue()
