"""msprobe's vocabulary has one home (precheck/schema.py): the pages, the console and the CSV writers take the
statuses' colours and order, the headers and the run files' names from it, and no second copy creeps back."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

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
    """List, tuple and set literals, and dicts' keys, outside schema.py holding three or more of ``names``; and any
    string outside a docstring that is one of the Chinese names alone (a dict's key, a ``row.get``): a second
    copy. compare/keydata.py is not scanned for the latter: msprobe's key-data CSV is a format of its own."""
    import ast

    chinese = {n for n in names if not n.isascii()}
    found = []
    for path, text in _sources().items():
        tree = ast.parse(text)
        docs = _docstrings(tree)
        alone = path.relative_to(PACKAGE).as_posix() != "compare/keydata.py"
        for node in ast.walk(tree):
            items = node.keys if isinstance(node, ast.Dict) else getattr(node, "elts", None)
            if isinstance(node, (ast.List, ast.Tuple, ast.Set, ast.Dict)) and items is not None:
                spelled = [e.value for e in items if isinstance(e, ast.Constant) and e.value in names]
                if len(spelled) >= 3:
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {spelled[:3]}")
            elif alone and isinstance(node, ast.Constant) and node.value in chinese and id(node) not in docs:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {node.value}")
    return found


def test_csv_headers_are_written_once():
    """The headers of run_ut's, compare's records and api_precision_compare's CSVs, the 17 metric columns and
    the second stage's columns and standard names are spelled in schema.py only; the writers and readers use them
    (a second stage that spelled its columns itself would write a cell the header has not)."""
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


_RUN_FILE_NAME = re.compile(
    r"(accuracy_checking|api_precision_compare)_(result|details|reasons)_(\{|\*|$)|^_(result|details)_$"
    r"|\bcompare_(result|records|summary|report)(\{|\*|$)|^report_$"
)


def _docstrings(tree) -> set[int]:
    import ast

    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }


def test_run_file_names_are_built_in_schema_only():
    """A run's file names, its page's, compare's four (and how one of a run's or a compare's files finds the
    others) come from schema's names and functions: no other module builds one from a literal (docstrings and
    messages may name them)."""
    import ast

    built = []
    for p, text in _sources().items():
        tree = ast.parse(text)
        docs = _docstrings(tree)
        built += [
            f"{p.relative_to(PACKAGE)}:{node.lineno}: {node.value!r}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
            and _RUN_FILE_NAME.search(node.value)
        ]  # fmt: skip
    assert built == []


def test_compare_files_find_each_other_by_their_tail(tmp_path):
    """Any of a compare's files (a rank's too) finds the other two; a file that is not a compare's is refused."""
    from precheck.frames.compare import LoadError, compare_files, is_compare
    from precheck.schema import COMPARE_RECORDS, COMPARE_RESULT, COMPARE_SUMMARY

    names = [t.format("_rank0_20260101120000") for t in (COMPARE_RESULT, COMPARE_RECORDS, COMPARE_SUMMARY)]
    for name in names:
        (tmp_path / name).write_text("")
    for name in names:
        assert is_compare(tmp_path / name)
        assert [p.name for p in compare_files(tmp_path / name)] == names
    assert [p.name for p in compare_files(tmp_path)] == names
    (tmp_path / "accuracy_checking_result_20260101120000.csv").write_text("")
    assert not is_compare(tmp_path / "accuracy_checking_result_20260101120000.csv")
    with pytest.raises(LoadError, match="not a compare file"):
        compare_files(tmp_path / "accuracy_checking_result_20260101120000.csv")


def test_api_precision_compare_twice_in_one_second_keeps_both(tmp_path, monkeypatch):
    """api_precision_compare claims its stem as run_ut does (paths.claim_stamp): a second compare started in the
    same second writes ``_2`` files instead of overwriting the first's."""
    import time

    from helpers import DATA

    from precheck.precision_compare import api_precision_compare

    details = DATA / "msprobe" / "accuracy_checking_details_20261122032509.csv"
    monkeypatch.setattr(time, "strftime", lambda fmt, *a: "20260101120000")
    first = api_precision_compare(details, details, tmp_path)
    second = api_precision_compare(details, details, tmp_path)
    assert first.result_path.name == "api_precision_compare_result_20260101120000.csv"
    assert second.result_path.name == "api_precision_compare_result_20260101120000_2.csv"
    assert second.details_path.name == "api_precision_compare_details_20260101120000_2.csv"
    assert first.details_path.read_bytes() == second.details_path.read_bytes() != b""


def test_a_stem_is_claimed_whole(tmp_path):
    """A stem one of whose names is taken (a stray details CSV) is passed over, and the names made for it go."""
    from precheck.paths import claim_stamp
    from precheck.schema import DETAILS, RESULT

    (tmp_path / DETAILS.format("20260101120000")).write_text("stray")
    assert claim_stamp(tmp_path, RESULT, DETAILS, stamp="20260101120000") == "20260101120000_2"
    names = [DETAILS.format("20260101120000"), DETAILS.format("20260101120000_2"), RESULT.format("20260101120000_2")]
    assert sorted(p.name for p in tmp_path.iterdir()) == names


def _grammar_copies(path: Path, tree) -> list[str]:
    """Where a module reads a record's or a row's name itself: a regular expression of its directions or roles,
    a split of a name at its last dots (``rsplit(".", 3)``), or its own tuple of the module prefixes."""
    import ast

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _GRAMMAR.search(node.value):
            found.append(f"{path}:{node.lineno}: {node.value[:40]!r}")
        elif (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("split", "rsplit") and len(node.args) == 2
            and all(isinstance(a, ast.Constant) for a in node.args)
            and node.args[0].value == "." and node.args[1].value >= 2
        ):  # fmt: skip
            found.append(f"{path}:{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            if {"Module", "Cell"} <= {e.value for e in node.elts if isinstance(e, ast.Constant)}:
                found.append(f"{path}:{node.lineno}: {ast.unparse(node)}")
    return found


_GRAMMAR = re.compile(r"forward\|backward|input\|output")
_NAME_HOMES = {"schema.py", "dump/record_names.py"}


def test_names_are_read_in_schema_and_record_names_only():
    """A details row's name is read by schema.split_row_name, a record's or a compare tensor's by
    dump/record_names (split_key, is_module, split_item): no reader splits one itself, so the grammar changes in one
    place. precheck/recording is the writer of these names, not a reader, and is not scanned."""
    import ast

    copies = [
        found
        for p in PACKAGE.rglob("*.py")
        if (rel := p.relative_to(PACKAGE).as_posix()) not in _NAME_HOMES and not rel.startswith("recording/")
        for found in _grammar_copies(p.relative_to(PACKAGE), ast.parse(p.read_text(encoding="utf-8")))
    ]
    assert copies == []


def test_compare_tensor_names_split_into_record_call_and_api():
    """The compare frame's record, call, API, direction, role and place of a tensor, L1 and L0 (a module's call
    is the module), and a name of no role as its own record."""
    from precheck.dump.record_names import split_item

    assert split_item("Functional.linear.0.forward.input.1") == (
        "Functional.linear.0.forward", "Functional.linear.0", "Functional.linear", "forward", "input", "1")  # fmt: skip
    assert split_item("Module.fc.Linear.backward.2.output.0") == (
        "Module.fc.Linear.backward.2", "Module.fc.Linear", "Module.fc.Linear", "backward", "output", "0")  # fmt: skip
    assert split_item("Tensor.add.3.forward.kwargs") == (
        "Tensor.add.3.forward", "Tensor.add.3", "Tensor.add", "forward", "kwargs", None)  # fmt: skip
    assert split_item("Module.fc.Linear.parameters_grad.weight") == (
        "Module.fc.Linear.parameters_grad.weight", "Module.fc.Linear.parameters_grad.weight",
        "Module.fc.Linear.parameters_grad.weight", "", "", None)  # fmt: skip


def _metric_counts(tree) -> list[int]:
    """Lines that count the metric columns themselves: ``[None] * 17``, a slice ``[4:21]`` / ``[:17]`` of a row,
    or the Metrics dataclass's fields taken as its columns (its first 17 only by accident of order)."""
    import ast

    def number(node, value: int) -> bool:
        return isinstance(node, ast.Constant) and node.value == value

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult) and number(node.right, 17):
            lines.append(node.lineno)
        elif isinstance(node, ast.Slice) and (number(node.upper, 21) or number(node.upper, 17)):
            lines.append(node.lineno)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "fields":
            if any(getattr(a, "id", "") == "Metrics" for a in node.args):
                lines.append(node.lineno)
    return lines


def test_the_metric_columns_are_counted_in_schema_only():
    """The 17 metric columns are schema.METRIC_HEADERS / METRIC_FIELDS: a writer's blank row and a standard's
    filled metrics take their length and names from there, so an 18th column is one edit."""
    import ast

    found = {p.relative_to(PACKAGE).as_posix(): lines for p, text in _sources().items()
             if (lines := _metric_counts(ast.parse(text)))}  # fmt: skip
    assert found == {}


# The logits and key-data CSVs are formats of their own (a Result, a Cosine and N/A cells of their own).
_OWN_CSVS = {"compare/logits.py", "compare/keydata.py", "commands/compare_cli.py"}
# The modules of compare's CSV, where its cell words are compare's (elsewhere "unsupported" is any API's).
_COMPARE_CSV = ("compare/", "frames/compare.py", "report/compare_html.py")


def _compare_copies(path: str, tree, headers: set[str], words: set[str]) -> list[str]:
    """Strings outside docstrings that are one of compare's headers or, in its modules, cell words; and f-strings
    whose fixed text builds a header (``f"{side} Tensor Shape"``)."""
    import ast

    docs, spelled = _docstrings(tree), headers | (words if path.startswith(_COMPARE_CSV) else set())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            if node.value in spelled:
                found.append(f"{path}:{node.lineno}: {node.value!r}")
        elif isinstance(node, ast.JoinedStr):
            parts = [re.escape(v.value) if isinstance(v, ast.Constant) else ".+" for v in node.values]
            fixed = "".join(v.value for v in node.values if isinstance(v, ast.Constant)).strip()
            if len(fixed) >= 3 and any(re.fullmatch("".join(parts), h) for h in headers):
                found.append(f"{path}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_compare_vocabulary_is_written_once():
    """msprobe compare's headers ("NPU Name", "Cosine", "Err_message" ...) and the words of its cells ("N/A",
    "Nan", "unsupported", "shape unmatched") are spelled in schema.CompareConst only: the writer, its rules, the
    reader and the page take them from there, so precheck's compare CSV cannot drift from msprobe's."""
    import ast

    from precheck import schema
    from precheck.schema import CompareConst as C

    headers = {*C.BASIC_INFO, *C.SUMMARY_INFO, *C.SUMMARY_COMPARE_INDEX, *C.BUILTIN_COMPARE_COLUMNS, *C.MD5_COLUMNS,
               *C.EXTRACT_INDEX, C.STACK, C.DATA_NAME}  # fmt: skip
    words = {C.N_A, C.NAN, C.UNSUPPORTED, C.SHAPE_UNMATCH}
    assert len(headers) == 36 and C.RESULTS[-1] == C.UNMATCHED
    headers -= set(schema.DETAILS_HEADER)  # "Bench Dtype" is run_ut's details column too
    copies = [
        found
        for p, text in _sources().items()
        if (rel := p.relative_to(PACKAGE).as_posix()) not in _OWN_CSVS
        for found in _compare_copies(rel, ast.parse(text), headers, words)
    ]
    assert copies == []
