"""dump.json is read piece by piece: the same cases whatever the chunk size, and the same one-line errors."""
from __future__ import annotations

from pathlib import Path

import pytest

from precheck import dump as dump_module
from precheck.dump import DumpError, load_dump

DATA = Path(__file__).parent / "data"
DUMPS = [DATA / "gpt2_bf16_tensor/step0/proc8493/dump.json", DATA / "gpt2_bf16_statistics/step0/proc8497/dump.json",
         DATA / "mlp_fp32_tensor/step0/proc8486/dump.json"]


@pytest.mark.parametrize("path", DUMPS, ids=lambda p: p.parts[-4])
@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_any_chunk_size_gives_the_same_cases(path, chunk, monkeypatch):
    whole = load_dump(path).cases
    monkeypatch.setattr(dump_module._JsonStream, "CHUNK", chunk)
    assert load_dump(path).cases == whole


def test_numbers_cut_at_a_chunk_end_are_read_whole(tmp_path, monkeypatch):
    path = tmp_path / "dump.json"
    path.write_text('{"task": "statistics", "data": {"Torch.tanh.0.forward": {"input_args": [{"type": "float", '
                    '"value": 123456.789e-3}]}}}')
    monkeypatch.setattr(dump_module._JsonStream, "CHUNK", 3)
    assert load_dump(path).cases[0].args == (123.456789,)


@pytest.mark.parametrize("text, reason", [
    ('{"task": "tensor", "data": {}} trailing', "not valid JSON: extra data after the document"),
    ('{"task": "tensor", "data": {"a": 1,}}', "not valid JSON"),
    ('{"task": "tensor", "data": {1: 2}}', "not valid JSON"),
    ('{"task": "tensor", "data": [1, 2]}', "no 'data' map"),
    ('"just a string"', "no 'data' map"),
])
def test_broken_documents_are_one_line_errors(tmp_path, text, reason):
    path = tmp_path / "dump.json"
    path.write_text(text)
    with pytest.raises(DumpError, match=reason) as e:
        load_dump(path)
    assert "\n" not in str(e.value)
