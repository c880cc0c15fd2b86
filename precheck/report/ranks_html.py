"""The report of a step folder's run (precheck.ranks): one page over every rank's rows.

run_step writes each rank's run into a folder of its name (``out/rank0/``, msprobe's CSV pair in each). A user
with eight ranks wants one page, not eight: this one reads the newest run of each rank folder and shows every
rank's APIs with their rank, the collectives (graded across ranks) side by side, the counts per rank and in all,
and where each rank's CSVs are. It is html.py's page, given a frame with a ``rank`` column; only the ranks' own
sections are written here, escaped as html.py escapes (names and messages come from the dumps).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from urllib.parse import quote

from precheck.dump.record_names import is_collective
from precheck.dump.steps import rank_folders
from precheck.frames.run import load
from precheck.report.advice import MAX_EVIDENCE, Finding, advise
from precheck.report.html import api_rows, esc, render, run_record
from precheck.run_files.run_state import replace_atomically
from precheck.schema import DETAILS, REPORT, SIDECAR, STATUSES, result_of, run_stem

__all__ = ["rank_runs", "write_ranks_report"]

_DIRECTIONS = ("forward", "backward")


def rank_runs(path: str | os.PathLike) -> dict[str, Path]:
    """The newest details CSV of each rank folder in ``path`` (``rank0/``, ``proc123/``), by rank folder name;
    empty when ``path`` is not a step run's output folder (a run's own CSVs in it make it one run's folder)."""
    folder = Path(path)
    if not folder.is_dir() or any(folder.glob(DETAILS.format("*"))):
        return {}
    return {r.name: sorted(r.folder.glob(DETAILS.format("*")))[-1] for r in rank_folders(folder, DETAILS.format("*"))}


def write_ranks_report(runs: Mapping[str, Path], out: str | os.PathLike, into: str | os.PathLike | None = None) -> Path:
    """Write ``report_{ts}.html`` (the first rank's run's stamp) over the ranks' runs ``runs`` (rank folder
    name: its details CSV) of the step run whose output folder is ``out``, into ``into`` (default: ``out``);
    returns its path. Each rank's advice reads that rank's dump; its cards are merged by rule."""
    import pandas as pd

    frames, apis, findings, records = [], [], {}, {}
    for name, details in runs.items():
        frame = load(details)
        records[name] = run_record(details.with_name(SIDECAR.format(run_stem(details.name))))
        dump = records[name].get("dump")
        frames.append(frame.assign(rank=name))
        apis += [{**a, "rank": name} for a in api_rows(frame, dump)]
        findings[name] = advise(frame, dump)
    frame = pd.concat(frames, ignore_index=True)
    frame.attrs["reasons"] = all(f.attrs["reasons"] for f in frames)
    target_dir = Path(into) if into is not None else Path(out)
    target_dir.mkdir(parents=True, exist_ok=True)
    stem = run_stem(next(iter(runs.values())).name)
    sections = [_ranks(runs, apis, target_dir), _collectives(apis, list(runs))]
    title = f"precheck report {stem}, {len(runs)} ranks"
    text = render(frame, _step_record(records), _merged(findings), title, apis, sections)
    target = target_dir / REPORT.format(stem)
    replace_atomically(target, text.encode("utf-8", "backslashreplace"))
    return target


def _step_record(records: dict[str, dict]) -> dict:
    """The run options and versions the page shows: the first rank's (run_step gives every rank the same), its
    dump the step folder, and each rank's partial run named."""
    first = next(iter(records.values()))
    run = {k: v for k, v in first.items() if k != "partial"}
    if isinstance(first.get("dump"), str):
        run["dump"] = str(Path(first["dump"]).parent.parent)  # step0/rank0/dump.json: its step
    partial = "; ".join(f"{name}: {r['partial']}" for name, r in records.items() if r.get("partial"))
    return {**run, "partial": partial} if partial else run


def _merged(found: dict[str, list[Finding]]) -> list[Finding]:
    """Each rule's cards of every rank as one: its count in all, its evidence named by rank."""
    merged: dict[str, Finding] = {}
    for name, findings in found.items():
        for f in findings:
            evidence = tuple(f"{name}: {line}" for line in f.evidence)
            have = merged.get(f.rule)
            merged[f.rule] = (
                replace(f, evidence=evidence)
                if have is None
                else replace(
                    have,
                    evidence=(have.evidence + evidence)[:MAX_EVIDENCE],
                    count=have.count + f.count,
                    rows=have.rows + f.rows,
                )  # fmt: skip
            )
    return list(merged.values())


def _ranks(runs: Mapping[str, Path], apis: list[dict], out: Path) -> str:
    """APIs per rank and in all, by direction and status (as the console counts them), and each rank's CSVs."""
    head = "".join(f"<th>{d} {esc(s)}</th>" for d in _DIRECTIONS for s in STATUSES)
    rows = []
    for name, details in [*runs.items(), ("all ranks", None)]:
        mine = [a for a in apis if details is None or a["rank"] == name]
        cells = "".join(f"<td>{sum(a[d] == s for a in mine)}</td>" for d in _DIRECTIONS for s in STATUSES)
        files = "" if details is None else "<br>".join(_link(p, out) for p in _pair(details))
        rows.append(f"<tr><th>{esc(name)}</th><td>{len(mine)}</td>{cells}<td>{files}</td></tr>")
    return (
        '<section id="ranks"><h2>Ranks</h2><p class="note">Each rank\'s run is msprobe\'s CSV pair in a folder of '
        "its name, read by every reader of one run; the table below lists every rank's APIs, with its rank.</p>"
        f'<table class="counts" id="rank-counts"><tr><th>rank</th><th>APIs</th>{head}<th>CSVs</th></tr>'
        f"{''.join(rows)}</table></section>"
    )


def _pair(details: Path) -> list[Path]:
    result = details.with_name(result_of(details.name))
    return [p for p in (result, details) if p.is_file()]


def _link(path: Path, page_dir: Path) -> str:
    """A link to ``path`` from the page in ``page_dir`` (relative, so a copied folder keeps its links), its full
    path as its tooltip."""
    relative = os.path.relpath(path, page_dir).replace(os.sep, "/")
    return f'<a href="{esc(quote(relative))}" title="{esc(path)}">{esc(relative)}</a>'


def _collectives(apis: list[dict], ranks: list[str]) -> str:
    """Each collective call's verdict on every rank side by side: it was graded from every rank's inputs, so a
    rank whose output is wrong shows as the one error in its row."""
    calls: dict[str, dict[str, dict]] = {}
    for a in apis:
        if is_collective(a["call"]):
            calls.setdefault(a["call"], {})[a["rank"]] = a
    note = (
        "A collective's golden is the float64 collective of every rank's recorded inputs; each rank's recorded "
        "output is graded against it. A rank without the call, or without its dump, leaves the others SKIP "
        "(skip_missing_rank); - : the rank did not record the call."
    )
    if not calls:
        return '<section id="collectives"><h2>Collectives</h2><p>No collective was recorded in this step.</p></section>'
    body = []
    for call, by_rank in calls.items():
        cells = "".join(_status_cell(by_rank[r]["forward"]) if r in by_rank else "<td>-</td>" for r in ranks)
        said = "; ".join(f"{r}: {a['message']}" for r, a in by_rank.items() if a.get("message"))
        body.append(f'<tr><th>{esc(call)}</th>{cells}<td class="message">{esc(said[:2000])}</td></tr>')
    head = "".join(f"<th>{esc(r)}</th>" for r in ranks)
    return (
        f'<section id="collectives"><h2>Collectives ({len(calls)})</h2><p class="note">{esc(note)}</p>'
        f'<table class="counts" id="collective-table"><tr><th>collective</th>{head}<th>message</th></tr>'
        f"{''.join(body)}</table></section>"
    )


def _status_cell(status: str) -> str:
    return f'<td class="{esc(status)}">{esc(status)}</td>'
