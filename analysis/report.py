"""One self-contained HTML report of a study (``iotfl-sim report``).

Everything is inside the one file: figures as base64 PNG ``<img>`` (data: URLs), the comparison tables,
the resolved base scenario and the grid, and the host time per run and in total. No external CSS,
JavaScript or fonts, so it opens offline.
"""

from __future__ import annotations

import base64
import html
import json
import os
from collections.abc import Sequence
from pathlib import Path

import yaml

from analysis.compare import Table, build_tables, selection_targets
from analysis.rundir import PlotInputError
from analysis.study import EXAMPLES, Selection, Study, excluded_counts, require_runs, select
from analysis.study_plots import figure_png, iter_study_figures
from analysis.targets import target_label

__all__ = ["build_report", "write_report"]

CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,Helvetica,Arial,sans-serif;margin:2em auto;max-width:1100px;
color:#222;padding:0 1em;line-height:1.45}
h1{font-size:1.6em;margin-bottom:.2em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.8em}
h3{font-size:1.05em;margin-bottom:.3em}
table{border-collapse:collapse;margin:.5em 0 1.2em;font-size:.9em}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:right}th{background:#f3f3f3}
td:first-child,th:first-child{text-align:left}table.left td,table.left th{text-align:left}
.note{color:#555;font-size:.88em;max-width:70em}
figure{display:inline-block;margin:.5em;vertical-align:top}figure img{width:520px;height:auto;border:1px solid #eee}
figcaption{font-size:.85em;color:#555;text-align:center}
pre{background:#f7f7f7;border:1px solid #e3e3e3;padding:.7em;overflow:auto;max-height:28em;font-size:.82em}
.excluded{color:#9a3412}
"""


# a study folder written before study.json kept the study's definition
NOT_RECORDED = (
    '<p class="note" data-block="not-recorded">Not recorded: this study folder was written before study.json kept '
    "the study's base scenario, grid and zip (its study.yaml is the study file as given); running "
    "<code>iotfl-sim sweep</code> on the study file again records them.</p>"
)


def _e(s: object) -> str:
    return html.escape(str(s), quote=True)


def _table_html(t: Table) -> str:
    rows = []
    head = "".join(f"<th>{_e(c)}</th>" for c in ["method", "seeds", *t.columns])
    for m, r in t.rows.items():
        n = max((c.n for c in r.values()), default=0)
        cells = []
        for col in t.columns:
            txt = t.cell_text(r.get(col))
            bold = txt.startswith("**")
            txt = _e(txt.replace("**", ""))
            cells.append(f"<td><b>{txt}</b></td>" if bold else f"<td>{txt}</td>")
        rows.append(f"<tr><td>{_e(m)}</td><td>{n}</td>{''.join(cells)}</tr>")
    note = f'<p class="note">{_e(t.note)}</p>' if t.note else ""
    return (
        f'<h3>{_e(t.title)}</h3>{note}<table class="cmp" data-table="{_e(t.name)}">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _hms(s: float) -> str:
    if s >= 3600:
        return f"{s / 3600:.2f} h"
    if s >= 60:
        return f"{s / 60:.1f} min"
    return f"{s:.1f} s"


def _host_table(studies: Sequence[Study]) -> str:
    out = []
    for st in studies:
        rows = []
        for r in st.runs:
            host = "" if r.host_s is None else f"{r.host_s:.1f}"
            ov = ", ".join(f"{k}={json.dumps(v)}" for k, v in r.overrides.items())
            rows.append(
                f"<tr><td>{_e(r.id)}</td><td>{_e(r.status)}</td><td>{_e(ov)}</td><td>{host}</td>"
                f"<td>{_e(r.error or '')}</td></tr>"
            )
        out.append(
            f'<table class="left" data-table="host_time"><thead><tr><th>run</th><th>status</th><th>overrides</th>'
            f"<th>host time (s)</th><th>error</th></tr></thead><tbody>{''.join(rows)}</tbody>"
            f"<tfoot><tr><th>total</th><td></td><td></td><th>{st.host_s_total:.1f} ({_e(_hms(st.host_s_total))})</th>"
            f"<td></td></tr></tfoot></table>"
        )
    return "".join(out)


def build_report(sel: Selection, targets: Sequence[float] | None = None, title: str | None = None) -> str:
    """The report as one HTML string; ``targets`` None: the runs' own ``server.target_accuracies``."""
    studies = sel.studies
    name = title or (studies[0].name if studies else "runs")
    chosen = selection_targets(sel, targets)
    targets = chosen.values
    tables = build_tables(sel, chosen)
    figs = []
    for fname, fig in iter_study_figures(sel, targets):
        b64 = base64.b64encode(figure_png(fig)).decode("ascii")
        cap = fig.get_suptitle() or fname
        figs.append(
            f'<figure data-figure="{_e(fname)}"><img alt="{_e(cap)}" src="data:image/png;base64,{b64}">'
            f"<figcaption>{_e(cap)}</figcaption></figure>"
        )
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(name)} — iotfl-sim report</title><style>{CSS}</style></head><body>",
        f"<h1>{_e(name)}</h1>",
        f'<p class="note">{sum(len(m.runs) for m in sel.methods)} runs in {len(sel.methods)} methods; '
        f"target accuracies {_e(', '.join(target_label(t) for t in targets))} ({_e(chosen.source)}). Curves: mean over seeds with a "
        "band of ± 1 sample std (ddof=1), seeds interpolated onto a common x grid.</p>",
    ]
    parts.append("<h2>Methods</h2><table class=\"left\" data-table=\"methods\"><thead><tr><th>method</th><th>runs</th><th>seeds</th>"
                 "</tr></thead><tbody>")  # fmt: skip
    for m in sel.methods:
        parts.append(
            f"<tr><td>{_e(m.label)}</td><td>{_e(', '.join(m.run_ids))}</td>"
            f"<td>{_e(', '.join(str(s) for s in m.seeds))}</td></tr>"
        )
    parts.append("</tbody></table>")
    if sel.excluded:
        parts.append(
            f'<p class="excluded"><b>Excluded runs ({len(sel.excluded)})</b>, not counted in any table or figure:</p><ul>'
        )
        parts += [f'<li class="excluded"><code>{_e(x.id)}</code>: {_e(x.reason)}</li>' for x in sel.excluded[:EXAMPLES]]
        if len(sel.excluded) > EXAMPLES:
            parts.append(f'<li class="excluded">and {len(sel.excluded) - EXAMPLES:,} more ({_e(excluded_counts(sel.excluded))} in all)</li>')
        parts.append("</ul>")
    parts.append("<h2>Figures</h2>")
    parts += figs
    parts.append("<h2>Tables</h2>")
    parts += [_table_html(t) for t in tables]
    for st in studies:
        parts.append(f"<h2>Study set-up: {_e(st.name)}</h2>")
        if st.grid is None and st.zip is None:
            parts.append(f"<h3>Grid</h3>{NOT_RECORDED}")
        else:
            grid = {"grid": st.grid or {}, "zip": st.zip or {}}
            parts.append(f'<h3>Grid</h3><pre data-block="grid">{_e(yaml.safe_dump(grid, sort_keys=False))}</pre>')
        if st.base is None:
            parts.append(f"<h3>Resolved base scenario</h3>{NOT_RECORDED}")
        else:
            parts.append("<h3>Resolved base scenario</h3><pre data-block=\"base\">"
                         + _e(yaml.safe_dump(st.base, sort_keys=False)) + "</pre>")  # fmt: skip
        parts.append("<h3>Host time per run</h3>")
        parts.append(_host_table([st]))
    parts.append("</body></html>")
    return "\n".join(parts)


def _is_report(path: Path) -> bool:
    """Whether the file at ``path`` is a report this module wrote (its title says so, near the top)."""
    with open(path, "rb") as f:
        return b"iotfl-sim report</title>" in f.read(1 << 16)


def write_report(paths: Sequence[str | Path], out: Path | None = None, targets: Sequence[float] | None = None,
                 by: Sequence[str] | None = None) -> Path:  # fmt: skip
    """Write the report of ``paths`` (a study folder, or run folders) to ``out`` (default <study>/report.html)."""
    sel = select(paths, by)
    require_runs(sel, paths, "report")  # before anything is written: nothing lands in a folder that is no run
    if out is None:
        first = Path(paths[0])
        out = first / "report.html"
    if out.is_file() and not out.is_symlink() and not _is_report(out):
        raise PlotInputError(
            f"report --out: {out} is a file, and not a report iotfl-sim wrote (a report is rewritten, nothing else "
            "is): give a new file name, or move that file away"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.part")
    try:
        tmp.write_text(build_report(sel, targets), encoding="utf-8")
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out
