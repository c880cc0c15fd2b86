"""Generated suites, repro scripts and saved error data: what a team commits and runs every night."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch

from precheck.commands.cli import main
from precheck.commands.testgen import CONFIG_NAME, TEST_NAME, generate
from precheck.execution.options import CheckOptions
from precheck.run_ut import run_ut

DATA = Path(__file__).parent / "data"
MLP = DATA / "mlp_fp32_tensor/step0/proc8486/dump.json"
GPT2 = DATA / "gpt2_bf16_tensor/step0/proc8493/dump.json"
AUTO = CheckOptions(standard="auto", device="cpu")


def run_suite(suite: Path, *extra: str) -> dict[str, str]:
    """Outcome per test id ('passed', 'failed', 'skipped') from the suite's junit XML."""
    xml = suite / "junit.xml"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(suite), f"--junitxml={xml}", *extra],
        capture_output=True,
        text=True,
        cwd=suite,
    )
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    outcomes = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        api = case.get("name").removeprefix("test_api[").removesuffix("]")
        kinds = {child.tag for child in case}
        outcomes[api] = "failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds else "passed"
    return outcomes


def expected_outcomes(dump: Path, tmp: Path, options: CheckOptions) -> dict[str, str]:
    summary = run_ut(dump, tmp, options=options)
    out = {}
    for r in summary.results:
        if "error" in (r.forward, r.backward):
            out[r.name] = "failed"
        elif r.forward == "SKIP":
            out[r.name] = "skipped"
        else:
            out[r.name] = "passed"
    return out


@pytest.fixture(scope="module")
def gpt2_suite(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("suite")
    generate(GPT2, root / "suite", options=AUTO)
    return root / "suite", expected_outcomes(GPT2, root / "run_ut", AUTO)


def test_suite_fails_exactly_where_run_ut_says_error(gpt2_suite):
    suite, expected = gpt2_suite
    assert set(expected.values()) == {"passed", "failed"}  # auto grades gpt2's bf16 pow as error
    assert run_suite(suite) == expected


@pytest.mark.skipif(importlib.util.find_spec("xdist") is None, reason="pytest-xdist not installed")
def test_suite_runs_under_xdist(gpt2_suite):
    suite, expected = gpt2_suite
    assert run_suite(suite, "-n", "2") == expected


def test_failing_test_shows_the_graders_full_message(gpt2_suite):
    suite, _ = gpt2_suite
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(suite), "-k", "Torch.pow.0"],
        capture_output=True,
        text=True,
        cwd=suite,
    )
    assert proc.returncode == 1
    assert "Torch.pow.0.forward.output.0: error (torch.bfloat16 vs golden torch.float64" in proc.stdout
    assert "of normal elements above relative error 0.00390625" in proc.stdout
    assert "Minimum tolerance that would have passed" in proc.stdout


def test_options_live_in_the_config_not_in_the_tests(tmp_path):
    generate(MLP, tmp_path / "a", options=CheckOptions(standard="ulp", max_abs=1e-3, device="cpu"))
    config = (tmp_path / "a" / CONFIG_NAME).read_text()
    assert '"standard": "ulp"' in config and '"max_abs": 0.001' in config
    test = (tmp_path / "a" / TEST_NAME).read_text()
    assert "ulp" not in test and "0.001" not in test


def test_regenerating_gives_the_same_bytes(tmp_path):
    for name in ("a", "b"):
        generate(GPT2, tmp_path / name, options=AUTO, copy_data=True)
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert files and files == sorted(p.relative_to(tmp_path / "b") for p in (tmp_path / "b").rglob("*") if p.is_file())
    for rel in files:
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes(), rel


def test_copy_data_copies_only_what_the_tests_read_and_travels(tmp_path):
    generate(MLP, tmp_path / "suite", options=CheckOptions(device="cpu"), copy_data=True)
    copied = {p.name for p in (tmp_path / "suite" / "data" / "dump_tensor_data").iterdir()}
    assert copied and all(".forward.input." in n or ".backward.input." in n for n in copied)
    assert "Functional.linear.0.forward.input.0.pt" in copied
    assert not any(".output." in n for n in copied)  # outputs are not read with the device target
    moved = shutil.move(str(tmp_path / "suite"), str(tmp_path / "elsewhere"))
    assert set(run_suite(Path(moved)).values()) == {"passed"}


def renamed_mlp(tmp_path: Path) -> Path:
    """The MLP dump with legitimate spellings of its file names: in a sub-folder, through ``sub/..``, absolute."""
    folder = tmp_path / "dump"
    shutil.copytree(MLP.parent, folder)
    files = folder / "dump_tensor_data"
    (files / "sub").mkdir()
    text = (folder / "dump.json").read_text(encoding="utf-8")
    gelu = "Functional.gelu.0.forward.input.0.pt"
    shutil.move(files / gelu, files / "sub" / gelu)
    text = text.replace(f'"{gelu}"', f'"sub/{gelu}"')
    text = text.replace('"Functional.linear.0.forward.input.0.pt"', '"sub/../Functional.linear.0.forward.input.0.pt"')
    absolute = json.dumps(str(files.resolve() / "Functional.linear.0.forward.input.1.pt"))
    text = text.replace('"Functional.linear.0.forward.input.1.pt"', absolute)
    (folder / "dump.json").write_text(text, encoding="utf-8")
    return folder / "dump.json"


def test_copy_data_takes_every_legitimate_name_and_replaces_an_earlier_suite(tmp_path):
    dump = renamed_mlp(tmp_path)
    expected = expected_outcomes(dump, tmp_path / "run", CheckOptions(device="cpu"))
    assert set(expected.values()) == {"passed"}  # the renamed files are found where they lie
    suite = tmp_path / "suite"
    generate(GPT2, suite, options=AUTO, copy_data=True)  # an earlier suite of another dump, in the same folder
    generate(dump, suite, options=CheckOptions(device="cpu"), copy_data=True)
    copied = {p.relative_to(suite / "data" / "dump_tensor_data").as_posix() for p in suite.rglob("*.pt")}
    assert "sub/Functional.gelu.0.forward.input.0.pt" in copied
    assert {"Functional.linear.0.forward.input.0.pt", "Functional.linear.0.forward.input.1.pt"} <= copied
    assert not any("dropout" in name or "Functional.embedding" in name for name in copied), "GPT-2 files left"
    assert not list(suite.glob(".data.*")) and not list(suite.glob("*.tmp"))
    shutil.rmtree(tmp_path / "dump")  # the suite travels without the dump
    assert run_suite(suite) == expected
    generate(MLP, suite, options=CheckOptions(device="cpu"))  # no copy this time: the copied data goes
    assert not (suite / "data").exists()


def test_copy_data_never_replaces_a_folder_it_did_not_write(tmp_path, capsys):
    mine = tmp_path / "suite" / "data"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("mine")
    args = ["generate", "-api_info", str(MLP), "-o", str(tmp_path / "suite"), "--copy-data"]
    assert main(args) == 2
    assert "is not the data of a generated suite; not replaced" in capsys.readouterr().err
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]


def test_generate_cli_and_bad_dump(tmp_path, capsys):
    assert main(["generate", "-api_info", str(MLP), "-o", str(tmp_path / "s"), "-d", "cpu"]) == 0
    assert "suite written to" in capsys.readouterr().out
    assert main(["generate", "-api_info", str(tmp_path / "none.json"), "-o", str(tmp_path / "t")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_repro_script_needs_only_torch_and_reproduces(tmp_path, capsys):
    assert main(["repro", "Functional.linear.0", "-api_info", str(MLP), "-o", str(tmp_path)]) == 0
    script = tmp_path / "repro_Functional.linear.0.py"
    inputs = torch.load(tmp_path / "Functional.linear.0.inputs.pt", weights_only=True)
    assert set(inputs) == {"input_args[0]", "input_args[1]", "input_args[2]", "backward.input[0]"}
    assert "precheck" not in script.read_text().replace("precheck's", "")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("forward.output.0: (4, 32) torch.float32: max abs error")
    assert any(line.startswith("gradient of input_args[1]: (32, 16)") for line in lines)
    assert main(["repro", "Torch.nothing.0", "-api_info", str(MLP), "-o", str(tmp_path)]) == 2
    assert "no such forward record" in capsys.readouterr().err


def test_a_random_call_has_no_numerical_repro(tmp_path, capsys):
    assert main(["repro", "Functional.dropout.0", "-api_info", str(GPT2), "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Functional.dropout.0: random op: p=0.1 in training mode" in err
    assert "two random draws never match" in err and not list(tmp_path.iterdir())


def test_save_error_data_writes_every_non_pass_api_once(tmp_path):
    summary = run_ut(GPT2, tmp_path, options=CheckOptions(standard="auto", save_error_data=str(tmp_path / "err")))
    not_pass = {r.name for r in summary.results if {r.forward, r.backward} & {"warning", "error"}}
    assert {p.name for p in (tmp_path / "err").iterdir()} == not_pass
    pow0 = {p.name for p in (tmp_path / "err" / "Torch.pow.0").iterdir()}
    assert pow0 == {
        "input_args[0].pt",
        "backward.input[0].pt",
        "forward.output.0.target.pt",
        "forward.output.0.golden.pt",
        "backward.output.0.target.pt",
        "backward.output.0.golden.pt",
    }
    target = torch.load(tmp_path / "err" / "Torch.pow.0" / "forward.output.0.target.pt", weights_only=True)
    golden = torch.load(tmp_path / "err" / "Torch.pow.0" / "forward.output.0.golden.pt", weights_only=True)
    assert target.dtype == torch.bfloat16 and golden.dtype == torch.float64 and target.shape == golden.shape
    # results shipped back carry no tensors
    assert all(r.inputs is None and all(d.target is None for d in r.details) for r in summary.results)
