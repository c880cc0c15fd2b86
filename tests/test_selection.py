"""-config white/black lists and --filter_api: which calls a run checks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from precheck.commands.cli import main
from precheck.dump.selection import ConfigError, load_api_lists
from precheck.run_ut import run_ut

DATA = Path(__file__).parent / "data"
GPT2 = DATA / "gpt2_bf16_tensor/step0/proc8493/dump.json"
GPT2_STATS = DATA / "gpt2_bf16_statistics/step0/proc8497/dump.json"


def config(tmp_path: Path, doc) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    return path


def test_black_list_in_msprobe_format_gives_msprobe_skip_rows(tmp_path):
    lists = load_api_lists(
        config(tmp_path, {"task": "run_ut", "run_ut": {"black_list": ["addmm", "Functional.layer_norm"]}})
    )
    summary = run_ut(GPT2, tmp_path / "out", device="cpu", api_lists=lists)
    rows = {r.name: r for r in summary.results}
    assert len(rows) == 47
    assert rows["Torch.addmm.3"].forward == "SKIP"
    assert rows["Torch.addmm.3"].message == "API addmm in black list or not in white list. SKIP."
    assert rows["Functional.layer_norm.0"].forward == "SKIP"
    assert rows["Functional.linear.0"].forward == "warning"


def test_white_list_keeps_only_its_apis(tmp_path):
    lists = load_api_lists(config(tmp_path, {"white_list": ["tanh", "Tensor.__mul__"]}))
    summary = run_ut(GPT2, tmp_path / "out", device="cpu", api_lists=lists)
    graded = sorted(r.name for r in summary.results if r.forward != "SKIP")
    assert graded == ["Tensor.__mul__.0", "Tensor.__mul__.1", "Torch.tanh.0", "Torch.tanh.1"]


@pytest.mark.parametrize(
    "text, reason",
    [("[1]", "expected a JSON object"), ("{", "not JSON"), ('{"white_list": "addmm"}', "white_list must be a list")],
)
def test_bad_config_is_one_line_exit_2(tmp_path, capsys, text, reason):
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match=reason):
        load_api_lists(path)
    assert main(["run_ut", "-api_info", str(GPT2), "-o", str(tmp_path), "-q", "-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and reason in err


@pytest.mark.parametrize("dump", [GPT2, GPT2_STATS], ids=["tensor", "statistics"])
def test_filter_api_checks_one_call_per_signature_and_says_how_many_it_left_out(tmp_path, dump, capsys):
    summary = run_ut(dump, tmp_path / "out", device="cpu", filter_api=True)
    names = [r.name for r in summary.results]
    assert summary.filtered == 47 - len(names) > 0
    # the five dropouts share one signature, the two attention calls another: the first of each is kept
    assert [n for n in names if n.startswith("Functional.dropout")] == ["Functional.dropout.0"]
    assert "Functional.scaled_dot_product_attention.1" not in names
    # addmm.0 (192 outputs) and addmm.1 (64 outputs) differ in shape: both kept
    assert {"Torch.addmm.0", "Torch.addmm.1"} <= set(names)
    assert main(["run_ut", "-api_info", str(dump), "-o", str(tmp_path / "cli"), "-q", "-f"]) == 0
    assert (
        f"{summary.filtered} calls with an already checked signature skipped by --filter_api" in capsys.readouterr().out
    )


def test_a_config_that_is_a_fifo_is_one_line_not_a_wait(tmp_path):
    """The config was read by name: a FIFO there waited for a writer forever (a child process with a time limit,
    so a regression fails instead of hanging the suite)."""
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    argv = ["run_ut", "-api_info", str(GPT2), "-o", str(tmp_path / "out"), "-q", "-config", str(fifo)]
    run = subprocess.run([sys.executable, "-m", "precheck", *argv], capture_output=True, text=True, timeout=120)
    assert (run.returncode, run.stderr) == (2, f"precheck: error: {fifo}: not a regular file\n")
