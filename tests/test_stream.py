"""dump.json is read piece by piece: the same cases whatever the chunk size, and the same one-line errors."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from precheck.dump import jsonstream
from precheck.dump.records import DumpError, load_dump, pair_records

DATA = Path(__file__).parent / "data"
DUMPS = [
    DATA / "gpt2_bf16_tensor/step0/proc8493/dump.json",
    DATA / "gpt2_bf16_statistics/step0/proc8497/dump.json",
    DATA / "mlp_fp32_tensor/step0/proc8486/dump.json",
]


@pytest.mark.parametrize("path", DUMPS, ids=lambda p: p.parts[-4])
@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_any_chunk_size_gives_the_same_cases(path, chunk, monkeypatch):
    whole = load_dump(path).cases
    monkeypatch.setattr(jsonstream.JsonStream, "CHUNK", chunk)
    assert load_dump(path).cases == whole


def test_numbers_cut_at_a_chunk_end_are_read_whole(tmp_path, monkeypatch):
    path = tmp_path / "dump.json"
    path.write_text(
        '{"task": "statistics", "data": {"Torch.tanh.0.forward": {"input_args": [{"type": "float", '
        '"value": 123456.789e-3}]}}}'
    )
    monkeypatch.setattr(jsonstream.JsonStream, "CHUNK", 3)
    assert load_dump(path).cases[0].args == (123.456789,)


@pytest.mark.parametrize(
    "text, reason",
    [
        ('{"task": "tensor", "data": {}} trailing', "not valid JSON: extra data after the document"),
        ('{"task": "tensor", "data": {"a": 1,}}', "not valid JSON"),
        ('{"task": "tensor", "data": {1: 2}}', "not valid JSON"),
        ('{"task": "tensor", "data": [1, 2]}', "no 'data' map"),
        ('"just a string"', "no 'data' map"),
    ],
)
def test_broken_documents_are_one_line_errors(tmp_path, text, reason):
    path = tmp_path / "dump.json"
    path.write_text(text)
    with pytest.raises(DumpError, match=reason) as e:
        load_dump(path)
    assert "\n" not in str(e.value)


OPINFO = [DATA / "opinfo_fp32_all", DATA / "opinfo_bf16_all_stats"]


def _dump_json(root: Path) -> Path:
    return next(root.rglob("dump.json"))


@pytest.mark.parametrize("path", DUMPS + [_dump_json(p) for p in OPINFO], ids=lambda p: p.parts[-4])
def test_indexed_cases_equal_the_whole_document_decoded(path):
    assert load_dump(path).cases == pair_records(json.loads(path.read_text(encoding="utf-8"))["data"])


# Non-ASCII text where a dump can hold it: API names, string arguments, the top-level fields.
_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=8)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    names=st.lists(_TEXT, min_size=1, max_size=4),
    values=st.lists(_TEXT, min_size=1, max_size=4),
    chunk=st.integers(1, 9),
    ascii_only=st.booleans(),
)
# "Ã©" written as \u00c3\u00a9 is two characters; read as Latin-1 and decoded from UTF-8 a second time it was "é".
@example(names=["Ã©"], values=["Ã©"], chunk=4, ascii_only=True)
@example(names=["Ã©"], values=["é"], chunk=1, ascii_only=False)
def test_unicode_reads_the_same_at_any_chunk_size(tmp_path, monkeypatch, names, values, chunk, ascii_only):
    data = {}
    for i, name in enumerate(names):
        data[f"Torch.{name}.{i}.forward"] = {
            "input_args": [{"type": "str", "value": v} for v in values],
            "input_kwargs": {name: {"type": "str", "value": name}},
        }
    doc = {"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": "".join(values), "data": data}
    path = tmp_path / "dump.json"
    path.write_text(json.dumps(doc, ensure_ascii=ascii_only), encoding="utf-8")
    monkeypatch.setattr(jsonstream.JsonStream, "CHUNK", chunk)
    assert load_dump(path).cases == pair_records(data)


def test_the_index_holds_no_record(tmp_path):
    # Each record carries a 20 kB string; what load_dump keeps is its name and byte span, not the record.
    big = "x" * 20_000
    data = {
        f"Torch.tanh.{i}.forward": {"input_args": [{"type": "str", "value": big}], "input_kwargs": {}}
        for i in range(500)
    }
    path = tmp_path / "dump.json"
    path.write_text(json.dumps({"task": "statistics", "data": data}))
    tracemalloc.start()
    dump = load_dump(path)
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert held < 500 * 1000  # under 1 kB a record, for a 10 MB file
    assert dump.cases[499].args == (big,)  # decoded from the file when used


class _CountingDecoder:
    """Counts the characters the C decoder reads: up to the value's end, or to where it failed."""

    def __init__(self) -> None:
        self.chars = 0

    def raw_decode(self, s: str, idx: int = 0):
        try:
            value, end = json.JSONDecoder().raw_decode(s, idx)
        except json.JSONDecodeError as e:
            self.chars += e.pos - idx
            raise
        self.chars += end - idx
        return value, end


@pytest.mark.parametrize("shape", ["one huge record", "many records", "huge header field"])
def test_parsing_is_linear_in_the_files_size(tmp_path, monkeypatch, shape):
    # A value that runs past the buffer was re-parsed from its start after every chunk (a 100 MB list: 131 s).
    record = {"input_args": [{"type": "float", "value": 1.5}] * 100_000}  # 3 MB, past MAX_TEXT
    doc = {"task": "statistics", "data": {"Torch.tanh.0.forward": record}}
    if shape == "many records":
        doc["data"] = {f"Torch.tanh.{i}.forward": {"input_args": [1.5] * 200} for i in range(3000)}
    elif shape == "huge header field":
        doc["dump_data_dir"] = ["x" * 30] * 100_000
    path = tmp_path / "dump.json"
    path.write_text(json.dumps(doc))
    counter = _CountingDecoder()
    monkeypatch.setattr(jsonstream, "_DECODER", counter)
    monkeypatch.setattr(jsonstream.JsonStream, "CHUNK", 1 << 14)
    cases = load_dump(path).cases
    assert counter.chars < 4 * path.stat().st_size
    assert len(cases) == len(doc["data"]) and cases[0].problem is None


@pytest.mark.parametrize(
    "head, reason",
    [
        (bytes(range(256)), r"not valid JSON: a JSON document cannot start with b'\\x00\\x01"),
        (b"\x89PNG\r\n", r"not valid JSON: a JSON document cannot start with b'\\x89PNG"),
        (b"", "not valid JSON: the file is empty"),
        (b'{"data": [' + b"1, " * 10, "no 'data' map"),
        (b"[" + b"1, " * 10, "no 'data' map"),
    ],
)
def test_what_cannot_be_a_dump_is_refused_from_its_first_bytes(tmp_path, head, reason):
    # 300 MB of random bytes took 46 s to be called "not valid JSON": only the start is read now.
    path = tmp_path / "dump.json"
    path.write_bytes(head + b"\x00" * (8 << 20) if head else b"")
    with pytest.raises(DumpError, match=reason) as e:
        load_dump(path)
    assert "\n" not in str(e.value)


def test_a_file_that_never_ends_is_refused(tmp_path):
    # `-api_info /dev/zero` read on forever (1 GB and growing).
    with pytest.raises(DumpError, match="/dev/zero: not a regular file"):
        load_dump("/dev/zero")


def test_a_name_longer_than_any_record_name_is_refused_in_bounded_memory(tmp_path):
    path = tmp_path / "dump.json"
    path.write_text('{"task": "tensor", "data": {"' + "x" * (3 << 20) + '": 1}}')
    with pytest.raises(DumpError, match=f"a record name at byte 28 is longer than {jsonstream.MAX_TEXT} bytes"):
        load_dump(path)


@pytest.mark.parametrize(
    "record, reason",
    [
        ('{"input_args": [1 2]}', "record is not valid JSON: Expecting ',' delimiter (byte 67)"),
        ('{"input_args": tru}', "record is not valid JSON: Expecting value (byte 64)"),
        ('"\\ud800 x"', "forward record is not a map"),
    ],
)
def test_a_record_broken_inside_is_its_own_skip_row(tmp_path, record, reason):
    path = tmp_path / "dump.json"
    path.write_text(
        '{"task": "tensor", "data": {"Torch.a.0.forward": ' + record + ', "Torch.b.0.forward": {"input_args": []}}}'
    )
    bad, good = load_dump(path).cases
    assert bad.problem == f"bad record: {reason}"
    assert good.problem is None


def test_an_error_early_in_a_long_file_is_named_not_read_past(tmp_path):
    # A broken header field was read on to the size limit, then called too long instead of broken.
    path = tmp_path / "dump.json"
    path.write_text('{"task": tru, "data": {' + '"x": 1, ' * 500_000 + '"y": 2}}')
    with pytest.raises(DumpError, match=r"not valid JSON: Expecting value \(byte 9\)"):
        load_dump(path)
