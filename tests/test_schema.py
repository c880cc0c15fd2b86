"""msprobe's vocabulary has one home (precheck/schema.py): the pages, the console and the CSV writers take the
statuses' colours and order, the headers and the run files' names from it, and no second copy creeps back."""

from __future__ import annotations

import json
import re
from pathlib import Path

from precheck.report.html_assets import SCRIPT, STYLE
from precheck.schema import COLOURS, WORST_FIRST

PACKAGE = Path(__file__).resolve().parents[1] / "precheck"


def _sources() -> dict[Path, str]:
    return {p: p.read_text(encoding="utf-8") for p in PACKAGE.rglob("*.py") if p.name != "schema.py"}


def test_status_colours_are_the_schemas():
    """Each status cell of the report's table has its colour in schema.COLOURS, and no module but schema.py
    spells a status colour (a second table would drift from the badges and the plot)."""
    for status, colour in COLOURS.items():
        assert re.search(rf"td\.{status}\{{color:{colour}[;}}]", STYLE), status
    copies = [(p.name, c) for p, text in _sources().items() for c in COLOURS.values() if c.lower() in text.lower()]
    assert copies == []


def test_table_sorts_statuses_worst_first():
    """The table script sorts a status column in schema.WORST_FIRST's order, compare verdicts with their like."""
    rank = json.loads(re.search(r"var rank = (\{.*?\});", SCRIPT)[1])
    assert sorted(WORST_FIRST, key=rank.__getitem__) == list(WORST_FIRST)
    assert [rank[v] for v in ("suspect", "amplified", "inherited", "agree")] == [
        rank[s] for s in ("error", "warning", "SKIP", "pass")
    ]
    assert rank["SKIP"] < rank["unmatched"] == rank["unreadable"] < rank["pass"] < rank[""]


# A status order or spelling map written out: "pass", "warning", "error" in a row, or a rank table of them.
_ORDER_COPY = re.compile(r"""["']pass["'][^\n]{0,12}["']warning["'][^\n]{0,12}["']error["']|\bPASS: 0\b""", re.I)


def test_status_order_is_written_once():
    """Counts, rank tables and spelling maps take the statuses' order and spelling from schema.STATUSES (a
    second copy is how the console and the page came to count in different orders)."""
    copies = [f"{p.relative_to(PACKAGE)}: {m[0]}" for p, text in _sources().items() for m in _ORDER_COPY.finditer(text)]
    assert copies == []


def test_read_status_reads_either_spelling():
    from precheck.schema import Status, read_status

    assert [read_status(t) for t in (" Pass", "WARNING", "error ", "skip", "SKIP")] == [
        Status.PASS, Status.WARNING, Status.ERROR, Status.SKIP, Status.SKIP]  # fmt: skip
    assert read_status("") is None and read_status("unmatched") is None


def _header_copies(names: set[str]) -> list[str]:
    """List, tuple and dict literals outside schema.py holding three or more of ``names``: a second copy."""
    import ast

    found = []
    for path, text in _sources().items():
        for node in ast.walk(ast.parse(text)):
            items = node.values if isinstance(node, ast.Dict) else getattr(node, "elts", None)
            if isinstance(node, (ast.List, ast.Tuple, ast.Set, ast.Dict)) and items is not None:
                spelled = [e.value for e in items if isinstance(e, ast.Constant) and e.value in names]
                if len(spelled) >= 3:
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {spelled[:3]}")
    return found


def test_csv_headers_are_written_once():
    """The headers of run_ut's, compare's records and api_precision_compare's CSVs, the 17 metric columns and
    the second stage's standard names are spelled in schema.py only; the writers and readers use them."""
    from precheck import schema

    names = {
        *schema.DETAILS_HEADER,
        *schema.RESULT_HEADER,
        *schema.RECORDS_HEADER,
        *schema.PRECISION_RESULT_HEADER,
        *schema.PRECISION_DETAILS_HEADER,
        *schema.STANDARD_NAMES.values(),
    } - {"API Name", "API name", "Message"}
    assert _header_copies(names) == []
