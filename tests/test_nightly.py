"""The nightly job, one command per step, on the bundled dumps (issue 52 items 6-7 and the recipe of
docs/guide/regress.md): ``generate`` takes the step folder run_ut takes, a ``--copy-data`` suite's data is a dump
run_ut replays, and a run_ut that graded nothing exits 3 (not green in CI) unless ``--allow-empty``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from precheck.commands.cli import main

DATA = Path(__file__).parent / "data"
MLP_STEP = DATA / "mlp_fp32_tensor" / "step0"  # one process: proc8486/
DDP_STEP = DATA / "record" / "ddp_gloo" / "step0"  # two ranks: rank0/, rank1/


def run(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ================================================================================================= item 6


def test_generate_takes_a_one_process_step_folder(tmp_path, capsys) -> None:
    # "dump/step0/dump.json: no such file", though run_ut takes that folder.
    code, out, err = run(capsys, "generate", "-api_info", str(MLP_STEP), "-o", str(tmp_path / "suite"), "-d", "cpu")
    assert code == 0, err
    config = json.loads((tmp_path / "suite" / "precheck_suite.json").read_text())
    assert (tmp_path / "suite" / config["dump"]).resolve() == (MLP_STEP / "proc8486" / "dump.json").resolve()
    assert len(config["apis"]) == 6 and "suite written to" in out


def test_generate_takes_a_step_folder_of_ranks_as_one_suite_of_every_rank(tmp_path, capsys) -> None:
    suite = tmp_path / "suite"
    code, out, err = run(capsys, "generate", "-api_info", str(DDP_STEP), "-o", str(suite), "-d", "cpu", "--copy-data")
    assert code == 0, err
    assert "2 ranks' suites written to" in out and "(rank0, rank1)" in out
    for rank in ("rank0", "rank1"):
        assert (suite / rank / f"test_precheck_apis_{rank}.py").is_file()
        assert json.loads((suite / rank / "precheck_suite.json").read_text())["dump"] == "data/dump.json"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", str(suite)],
        capture_output=True,
        text=True,
        cwd=suite,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed" in done.stdout.splitlines()[-1]  # both ranks' tests collected and run, none colliding
