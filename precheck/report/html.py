"""``precheck report``: one self-contained HTML page of a run, readable from file:// with no network.

The page holds its styles, its script and its data inline, and draws its scatter plot as static SVG (no
charting library to vendor). Every text that came from a dump (names, messages, shapes) is escaped where it is
written: into markup with html.escape, into the embedded JSON with ``<``, ``>`` and ``&`` as \\u escapes, and the
script renders it with textContent only, so a record name is never markup or code.
"""

from __future__ import annotations

import html
import json
import math
import os
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy

from precheck.core.older_python import zip_strict
from precheck.core.reasons import Reason
from precheck.escape import shell_command, unescape, unformula
from precheck.frames.run import csv_pair, load
from precheck.grader.choices import NORMWISE_FACTOR
from precheck.report.advice import NO_REASONS, Finding, advise
from precheck.report.html_assets import SCRIPT, STYLE
from precheck.run_files.run_state import SIDECAR, RunFileError, installed_version, read_sidecar, replace_atomically
from precheck.schema import COLOURS, REPORT, STATUSES, WORST_FIRST, run_stem

if TYPE_CHECKING:
    import pandas

__all__ = ["write_report", "render", "api_rows", "run_record", "MAX_POINTS"]

MAX_POINTS = 5000  # scatter points drawn: every non-pass output, then an even sample of the passing ones
WIDTH, HEIGHT, LEFT, BOTTOM, PAD = 760, 430, 64, 44, 16
FLOOR, CEIL = 1e-16, 1e2  # log axes: a zero error is drawn on the floor
RATIO_LOW, RATIO_HIGH = 1e-2, 1e2  # the honest-kernel plot's axis of multiples


def write_report(path: str | os.PathLike, into: str | os.PathLike | None = None) -> Path:
    """Write ``report_{ts}.html`` for the run_ut run at ``path`` (an output folder, a details or a result CSV)
    into ``into`` (default: beside the CSVs); returns its path. ``precheck report`` chooses between this page and
    a compare's in precheck/report/pages.py."""
    details_path, result_path = csv_pair(path)
    frame = load(details_path)
    stem = run_stem(details_path.name)
    run = run_record(details_path.with_name(SIDECAR.format(stem)))
    text = render(frame, run, advise(frame, run.get("dump")), f"precheck report {stem}")
    out = Path(into) if into is not None else details_path.parent
    out.mkdir(parents=True, exist_ok=True)
    target = out / REPORT.format(stem)
    # Whole or not at all (a killed report leaves the page it replaces); a lone surrogate, from a file name
    # Python could not decode, is written as its escape.
    replace_atomically(target, text.encode("utf-8", "backslashreplace"))
    return target


def run_record(sidecar: Path) -> dict:
    """What the run's sidecar says, or nothing (a report from the CSVs alone) when there is none or it is not one
    precheck wrote: that is one warning naming the file and what is wrong with it."""
    try:
        return read_sidecar(sidecar)
    except FileNotFoundError:
        return {}
    except RunFileError as e:
        warnings.warn(f"{e}; the report shows what the CSVs say without it", stacklevel=3)
        return {}


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def embed_json(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, default=str)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def render(
    frame: pandas.DataFrame,
    run: dict,
    findings: list[Finding],
    title: str,
    apis: list[dict] | None = None,
    sections: Sequence[str] = (),
) -> str:
    """The page: summary, ``sections``, scatter plot, expert advice and the table of APIs. A step's ranks
    (precheck/report/ranks_html.py) give a frame with a ``rank`` column, their ``apis`` (each with its
    ``rank``) and their own sections; the plots and the table then say each row's rank."""
    apis = api_rows(frame, run.get("dump")) if apis is None else apis
    index = {(a.get("rank"), a["call"]): i for i, a in enumerate(apis)}
    parts = [
        _summary(frame, run, apis),
        *sections,
        _scatter(frame, index, run),
        _advice(findings, frame.attrs.get("reasons", False)),
        _table_shell(apis),
    ]
    return page(title, parts, apis)


def page(title: str, sections: list[str], rows: list[dict]) -> str:
    """A self-contained page: the sections, the table's rows as embedded JSON, the style and the table script."""
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>",
            f"<h1>{esc(title)}</h1>",
            *sections,
            f'<script type="application/json" id="rows">{embed_json(rows)}</script>',
            f"<script>{SCRIPT}</script>",
            "</body></html>",
        ]
    )


def _counts(frame: pandas.DataFrame, column: str) -> str:
    """Compared outputs (details rows) by ``column`` and status."""
    table = frame.groupby([column, "status"]).size().unstack(fill_value=0)
    statuses = [s for s in STATUSES if s in table.columns]
    head = "".join(f"<th>{esc(s)}</th>" for s in statuses)
    body = "".join(
        f"<tr><th>{esc(key or '-')}</th>" + "".join(f"<td>{int(row[s])}</td>" for s in statuses) + "</tr>"
        for key, row in table.iterrows()
    )
    return (
        f'<table class="counts" id="outputs-by-{column}"><tr><th>outputs by {esc(column)}</th>{head}</tr>{body}</table>'
    )


def _api_counts(apis: list[dict]) -> str:
    """APIs by direction and status, as the console counts them: the result CSV's verdict of each API (its
    worst output where there is no result CSV); an API with no backward status has no backward."""
    head = "".join(f"<th>{esc(s)}</th>" for s in STATUSES)
    body = "".join(
        f"<tr><th>{d}</th>" + "".join(f"<td>{sum(a[d] == s for a in apis)}</td>" for s in STATUSES) + "</tr>"
        for d in ("forward", "backward")
    )
    return f'<table class="counts" id="api-counts"><tr><th>APIs</th>{head}</tr>{body}</table>'


def _graded(frame: pandas.DataFrame) -> pandas.DataFrame:
    """The outputs the scatter plot can place: not SKIP, with a cosine or a max abs error."""
    return frame[(frame["status"] != "SKIP") & (frame["max_abs_err"].notna() | frame["cosine"].notna())]


def _summary(frame: pandas.DataFrame, run: dict, apis: list[dict]) -> str:
    totals = frame["status"].value_counts()
    badges = "".join(
        f'<span class="badge" style="background:{COLOURS[s]}">{esc(s)} {int(totals.get(s, 0))}</span>' for s in STATUSES
    )
    plotted, skips = len(_graded(frame)), int(totals.get("SKIP", 0))
    outputs = (
        f"Outputs are rows of the details CSV, APIs rows of the result CSV (as the console counts them). Of the "
        f"{len(frame)} compared outputs, {plotted} have a cosine or max abs error and are plotted below, {skips} "
        f"are SKIP and {len(frame) - plotted - skips} were graded without those metrics (exact, statistical or "
        "statistics-only checks)."
    )
    options = {k: run[k] for k in sorted(run) if k not in ("dump_sha256_head_tail", "dump_size", "versions", "partial")}
    versions = run.get("versions")
    if isinstance(versions, dict):  # what the run recorded
        options.update({f"{name} (the run)": version for name, version in versions.items()})
    else:  # a run from before its sidecar held versions, or msprobe's
        options["precheck (this report)"] = installed_version("precheck")
        options["torch (this report)"] = installed_version("torch")
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in options.items())
    columns = ("rank", "direction", "prefix", "dtype") if "rank" in frame else ("direction", "prefix", "dtype")
    grids = _api_counts(apis) + "".join(_counts(frame, c) for c in columns)
    standard = esc(run.get("standard", "not recorded"))
    late = frame["call"][frame["reason"] == Reason.TIMED_OUT]
    late_apis = f"; {late.nunique()} APIs timed out (SKIP, not graded; raise --timeout to grade them)"
    partial = run.get("partial")
    partial_line = f'<p class="partial" id="partial">Partial run: {esc(partial)}; APIs are missing.</p>' * bool(partial)
    return (
        f'<section id="summary"><h2>Summary</h2>{partial_line}<p>{len(frame)} compared outputs of {len(apis)} APIs, '
        f"standard {standard}; outputs: {badges}{late_apis if len(late) else ''}</p>"
        f'<p class="note">{esc(outputs)}</p>'
        f'<div class="grids">{grids}</div><details><summary>Run options and versions</summary>'
        f'<table class="options">{rows or "<tr><td>no run record beside the CSVs</td></tr>"}</table>'
        "</details></section>"
    )


def log_scale(value: float, low: float, high: float, size: float) -> float:
    v = min(max(value, low), high) if math.isfinite(value) else high
    return (math.log10(v) - math.log10(low)) / (math.log10(high) - math.log10(low)) * size


def _points(frame: pandas.DataFrame) -> tuple[pandas.DataFrame, int]:
    """The rows to plot (graded, with a metric) and how many there were: all of them up to MAX_POINTS, else the
    errors first, then the warnings, then the passes, each tier whole while it fits and evenly sampled to fill
    what room is left (a 50,000-API run with 30,000 warnings still draws 5,000 points)."""
    graded = _graded(frame)
    if len(graded) <= MAX_POINTS:
        return graded, len(graded)
    kept, room = [], MAX_POINTS
    for status in ("error", "warning", "pass"):
        tier = graded.index[graded["status"] == status]
        if room <= 0 or tier.empty:
            continue
        chosen = tier if len(tier) <= room else tier[numpy.arange(room) * len(tier) // room]
        kept.append(chosen)
        room -= len(chosen)
    return graded.loc[sorted(i for part in kept for i in part)], len(graded)


def _scatter(frame: pandas.DataFrame, index: dict[tuple, int], run: dict) -> str:
    points, total = _points(frame)
    w, h = WIDTH - LEFT - PAD, HEIGHT - BOTTOM - PAD
    marks = []
    for _, r in points.iterrows():
        gap = 1 - float(r["cosine"]) if r["cosine"] == r["cosine"] else 0.0
        marks.append(_mark(r, _x(r, w), PAD + h - log_scale(gap, FLOOR, CEIL, h), index))
    axes = _axes(w, h, float(run.get("max_abs", 1e-4)), 1 - float(run.get("cosine", 0.99)))
    shown = f"{len(points)} of {total}" if len(points) < total else f"all {total}"
    return (
        '<section id="scatter"><h2>Every graded output</h2>'
        f'<p class="note">{shown} outputs with a cosine or max abs error, of {len(frame)} compared (the summary '
        "says what the others are). Left: 1 - cosine against max absolute error, the card's thresholds dashed. "
        "Right: what decides by default, the output's error as a multiple of an honest kernel's (accurate "
        "accumulation, one rounding in the target dtype): above 2x is an error; an error decided by another "
        "clause (one element far off, errors leaning one way, inf/nan) lies on its top edge, an output whose "
        "multiple its row does not say (a pass, a warning within one rounding) on its bottom edge. Log axes; "
        "circles are forward outputs, squares gradients; hover for the row, click to jump to its API. Zero errors "
        "lie on the axes.</p>"
        f'<div class="plots"><svg id="plot" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'role="img">{axes}<g id="points">{"".join(marks)}</g></svg>{_honest_plot(points, index, run)}</div>'
        "</section>"
    )


def _x(r: pandas.Series, w: float) -> float:
    return LEFT + log_scale(float(r["max_abs_err"]) if r["max_abs_err"] == r["max_abs_err"] else 0.0, FLOOR, CEIL, w)


def _mark(r: pandas.Series, x: float, y: float, index: dict[tuple, int]) -> str:
    """One output's point: its colour, its shape (circle forward, square gradient), its row (and its rank, on
    a step's page) as a tooltip."""
    colour = COLOURS.get(r["status"], "#000")
    rank = r.get("rank")
    name = f"{rank + ' ' if rank else ''}{r['call']}.{r['direction']}.output.{r['output']}"
    tip = f"{name} {r['dtype']} {r['shape']} {r['status']}: {r['message']}"[:600]
    shape = (
        f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{colour}"/>'
        if r["direction"] == "forward"
        else f'<rect x="{x - 3.5:.1f}" y="{y - 3.5:.1f}" width="7" height="7" fill="{colour}"/>'
    )
    return (
        f'<a class="pt" href="#api-{index.get((rank, r["call"]), 0)}" data-status="{esc(r["status"])}">'
        f"<title>{esc(tip)}</title>{shape}</a>"
    )


def _honest_plot(points: pandas.DataFrame, index: dict[tuple, int], run: dict) -> str:
    """The default standard's verdict drawn: each output's normwise error as a multiple of an honest kernel's
    (from its Message) against its max abs error, with the 2x line above which it is an error. An error decided
    by another clause (one element far off, errors leaning one way, inf/nan) lies on the top edge; an output
    whose multiple is not written (a pass, a warning within one rounding) on the bottom edge."""
    standard = run.get("standard", "default")
    if standard != "default":
        return f'<p class="note" id="honest-plot">Standard {esc(standard)} does not grade by an honest kernel.</p>'
    w, h = WIDTH - LEFT - PAD, HEIGHT - BOTTOM - PAD
    marks = []
    for _, r in points.iterrows():
        multiple = r["honest_multiple"]
        if multiple == multiple:  # not NaN: the verdict states one
            y = PAD + h - log_scale(max(multiple, RATIO_LOW), RATIO_LOW, RATIO_HIGH, h)
        else:
            y = PAD if r["status"] == "error" else PAD + h
        marks.append(_mark(r, _x(r, w), y, index))
    parts = [f'<rect x="{LEFT}" y="{PAD}" width="{w}" height="{h}" class="frame"/>', *_x_ticks(w, h)]
    for exponent in range(round(math.log10(RATIO_LOW)), round(math.log10(RATIO_HIGH)) + 1):
        y = PAD + h - log_scale(10.0**exponent, RATIO_LOW, RATIO_HIGH, h)
        parts.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" class="tick end">{10.0**exponent:g}x</text>')
    y2 = PAD + h - log_scale(NORMWISE_FACTOR, RATIO_LOW, RATIO_HIGH, h)
    parts.append(f'<line x1="{LEFT}" y1="{y2:.1f}" x2="{LEFT + w}" y2="{y2:.1f}" class="limit"/>')
    parts.append(f'<text x="{LEFT + w - 4}" y="{y2 - 4:.1f}" class="tick end">{NORMWISE_FACTOR:g}x: error above</text>')
    parts.append(f'<text x="{LEFT + w / 2}" y="{HEIGHT - 6}" class="axis">max absolute error</text>')
    middle = PAD + h / 2
    parts.append(
        f'<text x="14" y="{middle}" class="axis" transform="rotate(-90 14 {middle})">'
        "error / an honest kernel's (normwise)</text>"
    )
    return (
        f'<svg id="honest-plot" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img">'
        f'{"".join(parts)}<g class="points">{"".join(marks)}</g></svg>'
    )


def _x_ticks(w: float, h: float) -> list[str]:
    return [
        f'<text x="{LEFT + log_scale(10.0**e, FLOOR, CEIL, w):.1f}" y="{PAD + h + 16}" class="tick">1e{e}</text>'
        for e in range(round(math.log10(FLOOR)), round(math.log10(CEIL)) + 1, 2)
    ]


def _axes(w: float, h: float, max_abs: float, gap: float) -> str:
    parts = [f'<rect x="{LEFT}" y="{PAD}" width="{w}" height="{h}" class="frame"/>']
    for exponent in range(round(math.log10(FLOOR)), round(math.log10(CEIL)) + 1, 2):
        x = LEFT + log_scale(10.0**exponent, FLOOR, CEIL, w)
        y = PAD + h - log_scale(10.0**exponent, FLOOR, CEIL, h)
        parts.append(f'<text x="{x:.1f}" y="{PAD + h + 16}" class="tick">1e{exponent}</text>')
        parts.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" class="tick end">1e{exponent}</text>')
    tx = LEFT + log_scale(max_abs, FLOOR, CEIL, w)
    ty = PAD + h - log_scale(gap, FLOOR, CEIL, h)
    parts.append(f'<line x1="{tx:.1f}" y1="{PAD}" x2="{tx:.1f}" y2="{PAD + h}" class="limit"/>')
    parts.append(f'<line x1="{LEFT}" y1="{ty:.1f}" x2="{LEFT + w}" y2="{ty:.1f}" class="limit"/>')
    parts.append(f'<text x="{tx + 4:.1f}" y="{PAD + 12}" class="tick">max abs {max_abs:g}</text>')
    parts.append(f'<text x="{LEFT + w - 4}" y="{ty - 4:.1f}" class="tick end">cosine {1 - gap:g}</text>')
    parts.append(f'<text x="{LEFT + w / 2}" y="{HEIGHT - 6}" class="axis">max absolute error</text>')
    middle = PAD + h / 2
    parts.append(f'<text x="14" y="{middle}" class="axis" transform="rotate(-90 14 {middle})">1 - cosine</text>')
    return "".join(parts)


def _advice(findings: list[Finding], has_reasons: bool) -> str:
    if not findings:
        said = "No rule fired on this run." if has_reasons else esc(NO_REASONS)
        return f'<section id="advice"><h2>Expert advice</h2><p>{said}</p></section>'
    items = []
    for f in findings:
        evidence = "".join(f"<li>{esc(line)}</li>" for line in f.evidence)
        more = f"<li>and {f.count - len(f.evidence)} more</li>" if f.count > len(f.evidence) else ""
        items.append(
            f'<div class="finding" data-rule="{esc(f.rule)}"><h3>{esc(f.title)} ({f.count})</h3>'
            f'<p>{esc(f.advice)}</p><p class="action"><b>What to do:</b> {esc(f.action)}</p>'
            f"<details><summary>evidence</summary><ul>{evidence}{more}</ul></details></div>"
        )
    return f'<section id="advice"><h2>Expert advice</h2>{"".join(items)}</section>'


def api_rows(frame: pandas.DataFrame, dump: str | None) -> list[dict]:
    """One entry per API in dump order: statuses, worst metrics, message and, when not all pass, the repro
    command. Grouped once by column, not API by API: a 50,000-API run has as many groups."""
    import pandas as pd

    calls = frame.groupby("call", sort=False)
    table = pd.DataFrame({"family": calls["prefix"].first(), "cosine": calls["cosine"].min(),
                          "max_abs": calls["max_abs_err"].max()})  # fmt: skip
    table["dtype"] = frame[frame["dtype"] != ""].groupby("call")["dtype"].first().reindex(table.index, fill_value="")
    for direction in ("forward", "backward"):
        table[direction] = _worst_status(frame, direction).reindex(table.index, fill_value="")
        column = f"{direction}_status"
        if column in frame:  # the result CSV's verdict per API, where it says one
            said = calls[column].first().fillna("").str.strip()
            table[direction] = said.where(said != "", table[direction])
    loud = frame[frame["status"] != "pass"].groupby("call")["message"].agg(lambda m: "; ".join(m.head(3)))
    table["message"] = loud.reindex(table.index, fill_value="")
    if "api_message" in frame:
        said = calls["api_message"].first().fillna("").str.strip()
        table["message"] = said.where(said != "", table["message"])
    table["message"] = table["message"].str.slice(0, 2000)
    apis = [
        {"call": call, **{k: None if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}}
        for call, row in zip_strict(table.index, table.to_dict("records"))
    ]
    _offer_repro(apis, dump)
    return apis


def _offer_repro(apis: list[dict], dump: str | None) -> None:
    """The repro command of each API that is not all pass, where repro accepts it (its own checks: a random
    call or an unsupported API is refused, so it is not offered). Reading the dump needs torch, so only a page
    with such an API and a dump to read pays for it."""
    records = {
        a["call"]: unescape(unformula(a["call"]))  # the key in the dump, as the CSV cell escaped it
        for a in apis
        if {a["forward"], a["backward"]} & {"warning", "error", "SKIP"}
    }
    if not records or not dump:
        return
    from precheck.dump.repro_check import reproducible

    accepted = reproducible(dump, list(records.values()))
    for a in apis:
        record = records.get(a["call"])
        if record in accepted:
            a["repro"] = shell_command("precheck", "repro", record, "-api_info", dump)


_RANK = {status: i for i, status in enumerate(WORST_FIRST)}


def _worst_status(frame: pandas.DataFrame, direction: str) -> pandas.Series:
    """Per API, the worst status of its outputs in ``direction`` (error, warning, SKIP, pass)."""
    rows = frame[frame["direction"] == direction]
    ranks = rows["status"].map(_RANK).fillna(len(_RANK)).groupby(rows["call"]).min()
    names = {rank: status for status, rank in _RANK.items()}
    return ranks.map(lambda r: names.get(r, ""))


def _table_shell(apis: list[dict]) -> str:
    """The table of APIs; on a step's page, with each API's rank as a column and a filter."""
    families = sorted({a["family"] for a in apis})
    dtypes = sorted({a["dtype"] for a in apis if a["dtype"]})
    ranks = list(dict.fromkeys(a["rank"] for a in apis if "rank" in a))
    headers = [("call", "API", "text"), *[("rank", "rank", "text")] * bool(ranks), ("family", "family", "text"),
               ("forward", "forward", "status"), ("backward", "backward", "status"), ("dtype", "dtype", "text"),
               ("cosine", "worst cosine", "number"), ("max_abs", "worst max abs error", "number"),
               ("message", "message", "message")]  # fmt: skip
    filters = [
        ("status", "forward backward", list(STATUSES)),
        *[("rank", "rank", ranks)] * bool(ranks),
        ("family", "family", families),
        ("dtype", "dtype", dtypes),
    ]
    return table_shell("apis-section", "APIs", "api-", headers, filters)


def _options(values: list[str]) -> str:
    return '<option value="">all</option>' + "".join(f'<option value="{esc(v)}">{esc(v)}</option>' for v in values)


def table_shell(
    section: str, noun: str, prefix: str, headers: list[tuple[str, str, str]], filters: list[tuple[str, str, list]]
) -> str:
    """The table the page's script fills: its headers (key, label, kind), its filters (the query parameter, the
    row fields a chosen value must match, the choices) and a name filter, and the pager."""
    head = "".join(
        f'<th data-key="{k}" data-kind="{kind}" tabindex="0">{esc(label)}</th>' for k, label, kind in headers
    )
    selects = "".join(
        f'<label>{esc(name)} <select id="f-{name}" data-query="{name}" data-filter="{fields}">{_options(values)}'
        "</select></label>"
        for name, fields, values in filters
    )
    return (
        f'<section id="{section}"><h2>{esc(noun[:1].upper() + noun[1:])}</h2><div class="filters">{selects}'
        '<label>name <input id="f-text" type="search" data-query="name" data-filter="text" '
        'placeholder="filter by name"></label><span id="count"></span></div>'
        f'<table id="table" data-prefix="{prefix}" data-noun="{esc(noun)}"><thead><tr>{head}</tr></thead>'
        '<tbody></tbody></table><div class="pager"><button id="prev">previous</button><span id="page"></span>'
        f'<button id="next">next</button></div><p class="note">Generated {time.strftime("%Y-%m-%d %H:%M:%S")}.</p>'
        "</section>"
    )
