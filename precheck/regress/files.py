"""The gate's files in ``-o``: ``regress_report.md`` (a CI job summary or a PR comment), ``regress_report.json``
(for scripts) and ``regress_report.html``, a page of its own with the same tables, for a CI system that publishes
artifacts as pages. Fixed names, so a CI job publishes them without globbing; no timestamps, so the same inputs
give the same bytes.

The page is static HTML in the run report's style (precheck/report/html_assets.py), no script: every name and
message from a run's CSVs is escaped and becomes text, never markup.
"""

from __future__ import annotations

import html
import os
from pathlib import Path

from precheck.escape import escape
from precheck.regress.verdict import (
    OUTCOMES,
    PASS_OUTCOME,
    REPORT_JSON,
    REPORT_MD,
    ApiOutcome,
    RegressReport,
    ReportUnwritable,
    Statuses,
)
from precheck.report.html_assets import STYLE

REPORT_HTML = "regress_report.html"


def write_report(report: RegressReport, out_dir: str | os.PathLike = ".") -> tuple[Path, Path]:
    """Write regress_report.md, regress_report.json and regress_report.html into out_dir (made if needed).
    Returns (markdown path, JSON path), the page lying beside them as :data:`REPORT_HTML`; ReportUnwritable says
    why not."""
    folder = Path(out_dir)
    md_path, json_path, page_path = folder / REPORT_MD, folder / REPORT_JSON, folder / REPORT_HTML
    texts = ((md_path, report.to_markdown()), (json_path, report.to_json()), (page_path, to_html(report)))
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for path, text in texts:
            tmp = path.with_name(path.name + ".tmp")
            with open(tmp, "w", encoding="utf-8", newline="\n") as f:  # LF on every OS: byte-identical files
                f.write(text)
            os.replace(tmp, path)  # no reader ever sees half a report
    except OSError as e:
        raise ReportUnwritable(f"cannot write the report: {e}") from e
    return md_path, json_path


def _text(value: object) -> str:
    """Text from a run's files for the page: one line (terminal escapes shown, not obeyed), then HTML-escaped."""
    return html.escape(escape(str(value)), quote=True)


def to_html(report: RegressReport) -> str:
    """The page: the two runs, the counts, what was not compared, a step's ranks, then one table per outcome
    that is not PASS, the outcomes that need a person first (the markdown's tables, with the reason)."""
    counts = report.counts
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>precheck regress</title><style>{STYLE}</style></head><body>",
        "<h1>precheck regress</h1>",
        f"<p>baseline: <code>{_text(report.baseline_path)}</code><br>"
        f"current: <code>{_text(report.current_path)}</code></p>",
        '<table class="counts"><tr><th>outcome</th><th>APIs</th></tr>',
        *(f"<tr><th>{o}</th><td>{counts[o]}</td></tr>" for o in OUTCOMES),
        f"<tr><th>total</th><td>{len(report.apis)}</td></tr></table>",
    ]
    if report.settings:
        parts += ['<h2>The two runs were made with different settings</h2><ul class="partial">']
        parts += [f"<li>{_text(d)}</li>" for d in report.settings]
        parts.append("</ul>")
    parts += _ranks(report)
    for outcome in OUTCOMES:
        rows = [a for a in report.apis if a.outcome == outcome]
        if outcome != PASS_OUTCOME and rows:
            parts += [f"<h2>{outcome} ({len(rows)})</h2>", _table(rows, bool(report.ranks))]
    return "\n".join([*parts, "</body></html>"]) + "\n"


def _ranks(report: RegressReport) -> list[str]:
    if not report.ranks:
        return []
    rows = [
        f"<tr><td>{_text(r.rank)}</td><td>{report.rank_outcome(r)}</td>"
        + "".join(f"<td>{'absent' if p is None else _text(p)}</td>" for p in (r.baseline, r.current))
        + "</tr>"
        for r in report.ranks
    ]
    return ["<h2>Ranks</h2><table><tr><th>rank</th><th>outcome</th><th>baseline</th><th>current</th></tr>", *rows,
            "</table>"]  # fmt: skip


def _table(rows: list[ApiOutcome], ranks: bool) -> str:
    header = ["rank"] * ranks + ["API", "baseline forward", "baseline backward", "current forward",
                                 "current backward", "reason"]  # fmt: skip
    lines = ["<table><tr>" + "".join(f"<th>{h}</th>" for h in header) + "</tr>"]
    for a in rows:
        cells = [f"<td>{_text(a.rank)}</td>"] * ranks + [f"<td>{_text(a.api)}</td>"]
        cells += [*_status_cells(a.baseline), *_status_cells(a.current), f'<td class="message">{_text(a.reason)}</td>']
        lines.append("<tr>" + "".join(cells) + "</tr>")
    return "\n".join([*lines, "</table>"])


def _status_cells(side: Statuses | None) -> list[str]:
    if side is None:
        return ["<td>absent</td>", "<td>absent</td>"]
    return [f'<td class="{s}">{s}</td>' if s else "<td>-</td>" for s in (side.forward, side.backward)]
