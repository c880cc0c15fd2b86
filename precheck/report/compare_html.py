"""The report of a ``precheck compare``: where along the step the two runs part, on one self-contained page.

The divergence curve plots every record in execution order: its output deviation (the relative error the
divergence search judges by) coloured by its verdict, and 1 - cosine of its worst output where the dumps hold
tensors; the first divergent record is marked, and each point links to its row in the table of records, which
holds the verdicts, the deviations and the pre-check verdicts of the suspects. The page escapes every text from a
dump as the run report does (precheck/report/html.py) and uses the same table script.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy

from precheck.compare.divergence import Finding, agreement, precision_line
from precheck.core.status import ERROR, PASS, SKIP, WARNING
from precheck.frames.compare import compare_files, load_compare, load_records, read_summary
from precheck.report.html import MAX_POINTS, PAD, esc, log_scale, page, table_shell
from precheck.run_files.run_state import replace_atomically
from precheck.schema import COLOURS, COMPARE_REPORT, CompareConst, compare_tail

if TYPE_CHECKING:
    import pandas

__all__ = ["write_compare_report", "render_compare", "VERDICT_COLOURS"]

VERDICT_COLOURS = {"suspect": COLOURS[ERROR], "amplified": COLOURS[WARNING], "inherited": "#8d6e63",
                   "agree": COLOURS[PASS], "unmatched": "#9e9e9e", "unreadable": "#212121", "undefined": "#bdbdbd",
                   "": "#607d8b"}  # fmt: skip
RESULT_COLOURS = {r: COLOURS[SKIP if r == CompareConst.UNMATCHED else r] for r in CompareConst.RESULTS}
WIDTH, HEIGHT, LEFT, BOTTOM = 960, 400, 64, 44
LOW, HIGH = 1e-12, 1e2  # the curve's log axis: an exact match lies on the floor


def write_compare_report(path: str | os.PathLike, into: str | os.PathLike | None = None) -> Path:
    """Write ``compare_report{tail}.html`` for the compare at ``path`` (its CSV, records CSV or summary, or a folder:
    its newest compare) into ``into`` (default: beside the CSVs); also the run report of its pre-checked suspects
    when that run is beside it, linked from the page. Returns the page's path."""
    from precheck.report.html import write_report

    csv_path, records_path, summary_path = compare_files(path)
    tail = compare_tail(csv_path.name)
    summary = read_summary(summary_path)
    out = Path(into) if into is not None else csv_path.parent
    out.mkdir(parents=True, exist_ok=True)
    run_page = None
    run_csv = Path(summary["precheck_csv"]) if isinstance(summary.get("precheck_csv"), str) else None
    if run_csv is not None and run_csv.is_file():
        run_page = write_report(run_csv, out)
    frame = load_compare(csv_path)
    records = load_records(records_path) if records_path else None
    title = f"precheck compare report {tail.strip('_').replace('_', ' ')}"
    text = render_compare(frame, records, summary, title, run_page)
    target = out / COMPARE_REPORT.format(tail)
    replace_atomically(target, text.encode("utf-8", "backslashreplace"))  # whole or not at all, as a run's page
    return target


def render_compare(
    frame: pandas.DataFrame, records: pandas.DataFrame | None, summary: dict, title: str, run_page: Path | None = None
) -> str:
    """The page: summary, divergence curve, suspects and the table of records."""
    entries = _entries(frame, records, summary)
    sections = [_summary(frame, entries, summary, run_page), _curve(entries, frame.attrs.get("mode", ""), summary),
                _suspects(summary), _table(entries)]  # fmt: skip
    return page(title, sections, entries)


def _entries(frame: pandas.DataFrame, records: pandas.DataFrame | None, summary: dict) -> list[dict]:
    """One entry per record in execution order: verdict, deviations, the worst cosine and relative error of its
    outputs, the record that produced a differing input and the suspect's pre-check verdict."""
    import pandas as pd

    if records is None:  # msprobe's compare CSV alone: the records as its rows name them, with no verdict
        records = pd.DataFrame({"record": frame["record"].drop_duplicates(), "verdict": ""})
    outputs = frame[frame["role"] == "output"].groupby("record")
    worst = pd.DataFrame(index=records["record"])
    worst["cosine"] = outputs["cosine"].min() if "cosine" in frame else numpy.nan
    relative = "max_rel_err" if "max_rel_err" in frame else "norm_rel_diff" if "norm_rel_diff" in frame else None
    worst["relative"] = outputs[relative].max() if relative else numpy.nan
    table = records.reset_index(drop=True).join(worst.reset_index(drop=True))
    first = (summary.get("first_divergent") or {}).get("name")
    entries = []
    for row in table.to_dict("records"):
        entry = {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}
        entry["inputs_agree"] = {True: "yes", False: "no"}.get(row.get("inputs_agree"), "")
        entry["first"] = row["record"] == first
        entries.append(entry)
    return entries


def _badges(counts: dict, colours: dict) -> str:
    return "".join(
        f'<span class="badge" style="background:{c}">{esc(k)} {int(counts.get(k, 0))}</span>'
        for k, c in colours.items()
        if counts.get(k)
    )


def _summary(frame: pandas.DataFrame, entries: list[dict], summary: dict, run_page: Path | None) -> str:
    results = frame["status"].value_counts().to_dict()
    verdicts: dict[str, int] = {}
    for e in entries:
        verdicts[e.get("verdict") or ""] = verdicts.get(e.get("verdict") or "", 0) + 1
    first = summary.get("first_divergent")
    lines = [
        _unfinished(entries, summary),
        f"<p>{len(entries)} records, {len(frame)} compared tensors ({esc(frame.attrs.get('mode', ''))} mode): "
        f"{_badges(results, RESULT_COLOURS)}</p><p>verdicts: {_badges(verdicts, VERDICT_COLOURS)}</p>",
        f'<p id="first">{_first(first, summary)}</p>',
        _rule(summary.get("localization"), named=bool(first)),
        _step(summary.get("step")),
    ]
    if summary.get("first_overflow"):
        lines.append(f"<p>First overflow on the target only: {esc(summary['first_overflow'])}</p>")
    for run in summary.get("unmatched") or []:
        if isinstance(run, dict):
            span = run.get("first") if run.get("count") == 1 else f"{run.get('first')} .. {run.get('last')}"
            lines.append(f"<p>Only in the {esc(run.get('side'))}: {esc(span)} ({esc(run.get('count'))} records)</p>")
    sides = [("target", summary.get("target")), ("bench", summary.get("bench")), ("compare CSV",
             summary.get("compare_csv")), ("records CSV", summary.get("records_csv"))]  # fmt: skip
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in sides if v)
    if run_page is not None:
        rows += f'<tr><th>pre-check of the suspects</th><td><a href="{esc(run_page.name)}">{esc(run_page.name)}</a>'
        rows += "</td></tr>"
    return f'<section id="summary"><h2>Summary</h2>{"".join(lines)}<table class="options">{rows}</table></section>'


def _step(step: object) -> str:
    """A rank's page in a step of ranks: the step's verdict (precheck.compare.steps), where it first went wrong and
    how it reached the other ranks."""
    lines = step.get("lines") if isinstance(step, dict) else None
    if not isinstance(lines, list) or not lines:
        return ""
    return '<p id="step"><b>The step</b>: ' + "<br>".join(esc(str(line).strip()) for line in lines) + "</p>"


def _unfinished(entries: list[dict], summary: dict) -> str:
    """A warning when the compare stopped before its end (killed, out of memory): its summary, written when the
    records were aligned, still says it is not complete. A summary from before that field is a finished one."""
    if summary.get("complete") is not False:
        return ""
    total = summary.get("records_total")
    return (f'<p class="finding" id="unfinished"><b>This compare did not finish</b>: {len(entries)} of '
            f"{esc(total)} records compared; the verdicts below are those of the records compared, and the first "
            "divergent record may lie in the others.</p>")  # fmt: skip


def _first(first: object, summary: dict) -> str:
    if isinstance(first, dict):
        return f"<b>First divergent record</b>: {esc(Finding.from_dict(first).why())}{_precheck(first)}"
    if not summary:
        return "No compare_summary beside this CSV (msprobe's own compare writes none), so no record has a verdict."
    if summary.get("complete") is False:
        return "No divergent record among those compared before the compare stopped."
    line = precision_line(summary.get("explained"), summary.get("localization")) or agreement(
        summary.get("rounding"), summary.get("localization")
    )
    return line[0].upper() + line[1:] + "."


def _rule(localization: object, named: bool) -> str:
    """Which rule named the first divergent record (precheck.compare.localize), the honest kernel's or the
    tolerance's, why, and what grading the records cost; where none was named, what the honest-kernel rule graded."""
    if not isinstance(localization, dict) or not localization.get("rule"):
        return ""
    graded = localization.get("replayed_calls") or 0
    if not named and not graded:
        return ""
    cost = f" ({esc(graded)} call(s) graded in {esc(localization.get('replay_seconds'))} s)" if graded else ""
    head = f"Named by the <b>{esc(localization['rule'])}</b> rule" if named else "The honest-kernel rule"
    return f'<p id="rule">{head}: {esc(localization.get("why", ""))}{cost}</p>'


def _precheck(finding: dict) -> str:
    from precheck.compare.record_log import verdict_text

    v = finding.get("precheck")
    return f"; precheck: {esc(verdict_text(v))}" if isinstance(v, dict) and "forward" in v else ""


def _kept(entries: list[dict]) -> list[int]:
    """The records to draw: all up to MAX_POINTS, else every record that does not agree and an even sample of
    those that do."""
    if len(entries) <= MAX_POINTS:
        return list(range(len(entries)))
    loud = [i for i, e in enumerate(entries) if e.get("verdict") != "agree"][:MAX_POINTS]
    quiet = [i for i, e in enumerate(entries) if e.get("verdict") == "agree"]
    room = MAX_POINTS - len(loud)
    sample = [quiet[k] for k in (numpy.arange(room) * len(quiet) // room)] if room > 0 and quiet else []
    return sorted(loud + sample)


def _curve(entries: list[dict], mode: str, summary: dict) -> str:
    w, h = WIDTH - LEFT - PAD, HEIGHT - BOTTOM - PAD
    kept = _kept(entries)

    def x(i: int) -> float:
        return LEFT + (i + 0.5) / max(len(entries), 1) * w

    def y(value: float | None) -> float:
        return PAD + h - log_scale(value or 0.0, LOW, HIGH, h)

    marks, cosines, line = [], [], []
    for i in kept:
        e = entries[i]
        verdict = e.get("verdict") or ""
        deviation = e.get("output_deviation")
        at = (x(i), y(deviation) if verdict not in ("unmatched", "unreadable", "undefined") else PAD + h)
        tip = f"#{i} {e['record']} {verdict or 'no verdict'}: output deviation {_g(deviation)}, "
        tip += f"cosine {_g(e.get('cosine'))}"
        if e.get("precheck"):
            tip += f", precheck {e['precheck']}"
        marks.append(
            f'<a class="pt" href="#rec-{i}" data-verdict="{esc(verdict)}"><title>{esc(tip[:600])}</title>'
            f'<circle cx="{at[0]:.1f}" cy="{at[1]:.1f}" r="{5 if e["first"] else 3.5}" '
            f'fill="{VERDICT_COLOURS.get(verdict, "#000")}"/></a>'
        )
        if deviation is not None:
            line.append(f"{at[0]:.1f},{at[1]:.1f}")
        if e.get("cosine") is not None:
            cx, cy = x(i), y(max(1 - e["cosine"], 0.0))
            cosines.append(f"{cx:.1f},{cy:.1f}")
    first = next((i for i, e in enumerate(entries) if e["first"]), None)
    marker = ""
    if first is not None:
        fx = x(first)
        marker = (f'<line id="first-line" x1="{fx:.1f}" y1="{PAD}" x2="{fx:.1f}" y2="{PAD + h}" class="limit"/>'
                  f'<text x="{fx + 4:.1f}" y="{PAD + 12}" class="tick">first divergent: '
                  f"{esc(entries[first]['record'])}</text>")  # fmt: skip
    shown = f"{len(kept)} of {len(entries)}" if len(kept) < len(entries) else f"all {len(entries)}"
    cosine_note = "; the blue line is 1 - cosine of its worst output" if mode == "tensor" else ""
    return (
        '<section id="curve"><h2>Divergence along the step</h2>'
        f'<p class="note">{shown} records in execution order (forward in call order, then the backward as the '
        f"gradients flowed). A point is a record's output deviation, coloured by its verdict{cosine_note}; log "
        "axis, an exact match lies on the floor, records of one side only sit on the axis. Click a point for its "
        "row.</p>"
        f'<svg id="divergence" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img">'
        f"{_axes(w, h, len(entries))}"
        f'<polyline class="deviation" points="{" ".join(line)}"/><polyline class="cos" points="{" ".join(cosines)}"/>'
        f'{marker}<g id="points">{"".join(marks)}</g></svg><p class="legend">{_legend()}</p></section>'
    )


def _g(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"


def _axes(w: float, h: float, n: int) -> str:
    parts = [f'<rect x="{LEFT}" y="{PAD}" width="{w}" height="{h}" class="frame"/>']
    for exponent in range(round(math.log10(LOW)), round(math.log10(HIGH)) + 1, 2):
        y = PAD + h - log_scale(10.0**exponent, LOW, HIGH, h)
        parts.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" class="tick end">1e{exponent}</text>')
    for k in range(0, 5):
        i = round(k * max(n - 1, 0) / 4)
        parts.append(f'<text x="{LEFT + (i + 0.5) / max(n, 1) * w:.1f}" y="{PAD + h + 16}" class="tick">{i}</text>')
    parts.append(f'<text x="{LEFT + w / 2}" y="{HEIGHT - 6}" class="axis">record, in execution order</text>')
    middle = PAD + h / 2
    parts.append(f'<text x="14" y="{middle}" class="axis" transform="rotate(-90 14 {middle})">deviation</text>')
    return "".join(parts)


def _legend() -> str:
    return " ".join(
        f'<span class="badge" style="background:{c}">{esc(v)}</span>' for v, c in VERDICT_COLOURS.items() if v
    )


def _suspects(summary: dict) -> str:
    found = [s for s in summary.get("suspects") or [] if isinstance(s, dict)]
    if not found:
        return '<section id="suspects"><h2>Suspects</h2><p>No record parted the runs by itself.</p></section>'
    items = "".join(f"<li>{esc(Finding.from_dict(s).why())}{_precheck(s)}</li>" for s in found)
    return f'<section id="suspects"><h2>Suspects</h2><ul>{items}</ul></section>'


def _table(entries: list[dict]) -> str:
    headers = [("record", "record", "text"), ("direction", "direction", "text"), ("verdict", "verdict", "status"),
               ("inputs_agree", "inputs agree", "text"), ("input_deviation", "input deviation", "number"),
               ("output_deviation", "output deviation", "number"), ("cosine", "worst cosine", "number"),
               ("relative", "worst relative error", "number"), ("produced_by", "produced by", "text"),
               ("precheck", "precheck", "text")]  # fmt: skip
    verdicts = sorted({e.get("verdict") or "" for e in entries} - {""})
    directions = sorted({e.get("direction") or "" for e in entries} - {""})
    filters = [("verdict", "verdict", verdicts), ("direction", "direction", directions)]
    return table_shell("records-section", "records", "rec-", headers, filters)
