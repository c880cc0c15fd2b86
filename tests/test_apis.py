"""precheck apis: the supported list, and a dump's would-be SKIPs without running anything."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import DATA, link_tensor_data

from precheck.commands.cli import main
from precheck.run_ut import run_ut
from precheck.support import supported, would_skip

GPT2 = Path(__file__).parent / "data/gpt2_bf16_tensor/step0/proc8493/dump.json"


def test_supported_counts_every_prefix_and_class():
    table = supported()
    assert set(table) >= {"Functional", "Torch", "Tensor"}
    assert table["Torch"]["matmul"] >= 10 and table["Functional"]["conv"] >= 6


def test_check_predicts_exactly_the_skip_rows_of_a_run(tmp_path):
    doc = json.loads(GPT2.read_text())
    doc["data"]["Torch.not_an_api.0.forward"] = {"input_args": [], "input_kwargs": {}, "output": []}
    doc["data"]["bad key"] = {}
    dump = tmp_path / "dump.json"
    dump.write_text(json.dumps(doc))
    link_tensor_data(GPT2.parent / "dump_tensor_data", tmp_path)
    total, reasons = would_skip(dump)
    predicted = {name for names in reasons.values() for name in names}
    summary = run_ut(dump, tmp_path / "out", device="cpu")
    assert total == len(summary.results) == 49
    assert predicted == {r.name for r in summary.results if r.forward == "SKIP"}
    assert reasons["not supported: Torch.not_an_api"] == ["Torch.not_an_api.0"]


def test_cli(capsys):
    assert main(["apis"]) == 0
    assert "Functional" in capsys.readouterr().out
    assert main(["apis", "--check", str(GPT2)]) == 0
    out = capsys.readouterr().out
    assert "47 forward records, 0 would be SKIP rows, 47 checked" in out  # dropout and SDPA: statistically
    assert main(["apis", "--check", "/nonexistent/dump.json"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_check_sees_a_dump_copied_without_its_tensor_files(tmp_path, capsys):
    """The run would be 47 SKIP rows (every input file missing): the check must say so, not '0 would be SKIP'."""
    dump = tmp_path / "dump.json"
    dump.write_bytes(GPT2.read_bytes())
    total, reasons = would_skip(dump)
    summary = run_ut(dump, tmp_path / "out", device="cpu")
    assert total == 47 and summary.counts["SKIP"] == 47
    assert {name for names in reasons.values() for name in names} == {r.name for r in summary.results}
    assert main(["apis", "--check", str(dump)]) == 0
    out = capsys.readouterr().out
    assert "47 forward records, 47 would be SKIP rows, 0 checked" in out
    assert f"tensor file not found in {tmp_path / 'dump_tensor_data'}" in out


def test_check_says_how_many_module_records_a_mix_dump_holds(capsys):
    """A level mix dump (msprobe 26.2): 14 of its 30 records are Module ones, which no run replays; the check says
    so, and a dump without them gets no such line."""
    mix = DATA / "compare/fp32_mix/step0/rank0/dump.json"
    assert main(["apis", "--check", str(mix)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "8 forward records, 0 would be SKIP rows, 8 checked" in lines[0]
    assert lines[1] == "  14 module (L0) records are not replayed (precheck compare compares them)"
    assert main(["apis", "--check", str(GPT2)]) == 0
    assert "module (L0)" not in capsys.readouterr().out
