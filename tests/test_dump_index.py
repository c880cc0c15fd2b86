"""One index of dump.json under run_ut, compare and the report (precheck.dump.index): a dump is refused, and a
broken record worded, the same way by each, down to the byte it names."""

from __future__ import annotations

import csv
import json

import pytest

from precheck.commands.cli import main
from precheck.compare.entries import CompareInputError, open_dump
from precheck.dump.index import RecordIndex
from precheck.dump.records import DumpError, load_dump
from precheck.report.recorded import read_records

GOOD = {"input_args": [{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": 1.0, "Min": 0.0,
                       "Mean": 0.5, "Norm": 1.0, "requires_grad": False, "data_name": "-1"}]}  # fmt: skip


def _dump(tmp_path, broken: str, tail: str = "") -> str:
    path = tmp_path / "dump.json"
    good = json.dumps(GOOD | {"output": GOOD["input_args"]})
    path.write_text(
        '{"task": "statistics", "level": "L1", "framework": "pytorch", "data": {"Torch.a.0.forward": '
        + broken + ', "Torch.b.0.forward": ' + good + "}}" + tail
    )  # fmt: skip
    return str(path)


def test_a_broken_record_names_the_same_byte_in_run_ut_and_compare(tmp_path, capsys):
    path = _dump(tmp_path, '{"input_args": tru}')
    reason = "record is not valid JSON: Expecting value (byte 107)"
    assert load_dump(path).cases[0].problem == f"bad record: {reason}"  # run_ut's SKIP row
    assert main(["compare", "-target", path, "-bench", path, "-o", str(tmp_path / "o")]) == 0, capsys.readouterr()
    with open(next((tmp_path / "o").glob("compare_result_*.csv")), encoding="utf-8-sig") as f:
        rows = {row["NPU Name"]: row for row in csv.DictReader(f)}
    assert rows["Torch.a.0.forward"]["Err_message"] == json.dumps([f"record Torch.a.0.forward: {reason}"])
    assert rows["Torch.b.0.forward.output.0"]["Result"] == "pass"  # the compare went on
    assert read_records(tmp_path / "dump.json", {"Torch.b.0.forward"}) is not None


def test_extra_data_after_the_document_is_refused_by_each_reader(tmp_path):
    path = _dump(tmp_path, json.dumps(GOOD), tail=" {}")
    message = f"{path}: not valid JSON: extra data after the document (byte {len(open(path).read()) - 2})"
    with pytest.raises(DumpError) as run_ut:
        load_dump(path)
    with pytest.raises(CompareInputError) as compare:
        open_dump(path)
    assert str(run_ut.value) == str(compare.value) == message
    assert read_records(tmp_path / "dump.json", {"Torch.a.0.forward"}) is None  # the report's rules stay silent


def test_report_and_compare_read_records_through_the_index(tmp_path, monkeypatch):
    path = _dump(tmp_path, json.dumps(GOOD))
    read = RecordIndex.read
    seen: list[int] = []
    monkeypatch.setattr(RecordIndex, "read", lambda self, i, f=None: seen.append(i) or read(self, i, f))
    assert read_records(tmp_path / "dump.json", {"Torch.b.0.forward"}) == {"Torch.b.0.forward": json.loads(
        json.dumps(GOOD | {"output": GOOD["input_args"]}))}  # fmt: skip
    assert seen == [1]
    assert [r.problem for r in open_dump(path).records()] == [None, None] and seen == [1, 0, 1]
