"""Generated suites, repro scripts and saved error data: what a team commits and runs every night."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch

from precheck.commands.cli import main
from precheck.execution.options import CheckOptions
from precheck.run_ut import run_ut
from precheck.testgen import CONFIG_NAME, TEST_NAME, generate

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


def copied_files(suite: Path) -> dict[str, str]:
    """data_name -> the file generate copied it to (its names, not the dump's), asserting no other file lies there."""
    listing = json.loads((suite / "data" / "files.json").read_text(encoding="utf-8"))
    files = suite / "data" / "dump_tensor_data"
    assert sorted(p.name for p in files.rglob("*")) == sorted(set(listing["copied"].values()))
    assert all(re.fullmatch(r"[0-9]{6}\.(pt|npy)", name) for name in listing["copied"].values())
    return listing["copied"]


def test_copy_data_copies_only_what_the_tests_read_and_travels(tmp_path):
    generate(MLP, tmp_path / "suite", options=CheckOptions(device="cpu"), copy_data=True)
    copied = copied_files(tmp_path / "suite")
    # inputs, incoming gradients and the recorded outputs, graded beside the replay; not the recorded gradients
    assert copied and all(".input." in n or ".forward.output." in n for n in copied)
    assert "Functional.linear.0.forward.input.0.pt" in copied and "Functional.linear.0.forward.output.0.pt" in copied
    assert not any(".backward.output." in n for n in copied)
    source = MLP.parent / "dump_tensor_data" / "Functional.linear.0.forward.input.0.pt"
    copy = tmp_path / "suite" / "data" / "dump_tensor_data" / copied["Functional.linear.0.forward.input.0.pt"]
    assert copy.read_bytes() == source.read_bytes()
    moved = shutil.move(str(tmp_path / "suite"), str(tmp_path / "elsewhere"))
    assert set(run_suite(Path(moved)).values()) == {"passed"}


def absolute_name(tmp_path: Path) -> str:
    """The JSON string naming one of renamed_mlp's files by its absolute path."""
    return json.dumps(
        str((tmp_path / "dump" / "dump_tensor_data").resolve() / "Functional.linear.0.forward.input.1.pt")
    )


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
    text = text.replace('"Functional.linear.0.forward.input.1.pt"', absolute_name(tmp_path))
    (folder / "dump.json").write_text(text, encoding="utf-8")
    return folder / "dump.json"


def test_copy_data_takes_every_legitimate_name_and_replaces_an_earlier_suite(tmp_path):
    dump = renamed_mlp(tmp_path)
    expected = expected_outcomes(dump, tmp_path / "run", CheckOptions(device="cpu"))
    assert set(expected.values()) == {"passed"}  # the renamed files are found where they lie
    suite = tmp_path / "suite"
    generate(GPT2, suite, options=AUTO, copy_data=True)  # an earlier suite of another dump, in the same folder
    generate(dump, suite, options=CheckOptions(device="cpu"), copy_data=True)
    copied = copied_files(suite)
    assert "sub/Functional.gelu.0.forward.input.0.pt" in copied
    linear = ["sub/../Functional.linear.0.forward.input.0.pt", json.loads(absolute_name(tmp_path))]
    assert set(linear) <= set(copied)
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
    shutil.rmtree(mine)
    (tmp_path / "suite" / "conftest.py").write_text("# mine\n")  # nor a conftest.py
    assert main(args) == 2
    assert "conftest.py: exists and is not the conftest of a generated suite" in capsys.readouterr().err
    assert (tmp_path / "suite" / "conftest.py").read_text() == "# mine\n" and not mine.exists()


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_copied_data_honours_the_umask(tmp_path, capsys, umask):
    # data/ came from mkdtemp, 0700 whatever the umask: a suite shared with a group could not read its data.
    previous = os.umask(umask)
    try:
        assert main(["generate", "-api_info", str(MLP), "-o", str(tmp_path / "suite"), "--copy-data"]) == 0
    finally:
        os.umask(previous)
    data = tmp_path / "suite" / "data"
    for path in (data, data / "dump_tensor_data"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o777 & ~umask, path
    assert stat.S_IMODE((data / "dump.json").stat().st_mode) == 0o666 & ~umask
    assert [p.name for p in (tmp_path / "suite").iterdir() if p.name.startswith(".data.")] == []


def hostile_mlp(tmp_path: Path, names: dict[str, str], records: str = "") -> Path:
    """A copy of the MLP dump whose records name other files (``names``: its file name -> the name written
    instead, a JSON string) and that holds ``records`` (raw JSON members) before its own."""
    folder = tmp_path / "dump"
    shutil.copytree(MLP.parent, folder)
    text = (folder / "dump.json").read_text(encoding="utf-8")
    for old, new in names.items():
        text = text.replace(json.dumps(old), new)
    (folder / "dump.json").write_text(text.replace('"data": {', '"data": {' + records, 1), encoding="utf-8")
    return folder / "dump.json"


def test_copy_data_copies_the_indexed_dump_json_never_a_link_swapped_in(tmp_path, monkeypatch, capsys):
    """dump.json swapped for a link to an outside file after generate indexed it (a concurrent writer): the
    outside file's bytes never land in the suite (they were copied by name, 5 of 5 tries); generate says why."""
    import precheck.testgen as testgen

    folder = tmp_path / "dump"
    shutil.copytree(MLP.parent, folder)
    outside = tmp_path / "outside.json"
    outside.write_text('{"secret": "outside bytes", "data": {}}')
    indexed = testgen.target_for

    def swap_then_target(options):  # _copy_data's first step: after the index, before the copy
        (folder / "dump.json").unlink()
        (folder / "dump.json").symlink_to(outside)
        return indexed(options)

    monkeypatch.setattr(testgen, "target_for", swap_then_target)
    suite = tmp_path / "suite"
    code = main(["generate", "-api_info", str(folder / "dump.json"), "-o", str(suite), "--copy-data"])
    assert not any(b"outside bytes" in p.read_bytes() for p in suite.rglob("*") if p.is_file())
    assert code == 2 and "dump.json: refused, it was replaced since it was indexed" in capsys.readouterr().err


def test_pytest_runs_no_file_a_record_names(tmp_path):
    """Records naming the dump's own conftest.py and test_x.py as tensor files: generate --copy-data copies
    neither (run_ut refuses both), pytest never looks into the suite's data/, and `pytest suite/` runs no code of
    the dump: those two tests are SKIPs with run_ut's reason, the rest pass."""
    ran = tmp_path / "payload_ran"
    payload = f"import pathlib\npathlib.Path({str(ran)!r}).write_text('ran')\ndef test_x():\n    pass\n"
    gelu, linear = "Functional.gelu.0.forward.input.0.pt", "Functional.linear.1.forward.input.0.pt"
    dump = hostile_mlp(tmp_path, {gelu: '"conftest.py"', linear: '"test_x.py"'})
    for name in ("conftest.py", "test_x.py"):
        (dump.parent / "dump_tensor_data" / name).write_text(payload)
    expected = expected_outcomes(dump, tmp_path / "run", CheckOptions(device="cpu"))
    suite = tmp_path / "suite"
    assert main(["generate", "-api_info", str(dump), "-o", str(suite), "-d", "cpu", "--copy-data"]) == 0
    (suite / "data" / "test_dropped.py").write_text(payload)  # nothing that lands in data/ later is collected
    outcomes = run_suite(suite)
    assert not ran.exists(), "code of the dump ran under pytest"
    assert outcomes == expected
    assert not {"conftest.py", "test_x.py"} & set(copied_files(suite))
    refused = json.loads((suite / "data" / "files.json").read_text())["refused"]
    assert refused["test_x.py"] == "test_x.py: unknown file type '.py' (expected .pt or .npy)"
    assert outcomes["Functional.gelu.0"] == outcomes["Functional.linear.1"] == "skipped"


def test_records_run_ut_only_skips_are_skip_cases_of_the_suite(tmp_path, capsys):
    """A name over 255 bytes, a record nested past the JSON parser and one holding a 5000-digit integer, beside a
    respelled name (``sub/../``): generate writes the suite (exit 0, nothing on stderr) and the suite's tests are
    SKIP exactly where run_ut's rows are, the rest graded as run_ut grades them."""
    deep = '"Torch.deep.0.forward": ' + "[" * 100_000 + "]" * 100_000
    digits = '"Torch.digits.0.forward": {"input_args": [{"type": "int", "value": ' + "9" * 5000 + "}]}"
    names = {
        "Functional.gelu.0.forward.input.0.pt": json.dumps("x" * 300 + ".pt"),
        "Functional.linear.0.forward.input.0.pt": '"sub/../Functional.linear.0.forward.input.0.pt"',
    }
    dump = hostile_mlp(tmp_path, names, f"{deep}, {digits}, ")
    expected = expected_outcomes(dump, tmp_path / "run", CheckOptions(device="cpu"))
    assert expected["Functional.gelu.0"] == expected["Torch.deep.0"] == expected["Torch.digits.0"] == "skipped"
    assert expected["Functional.linear.0"] == "passed"
    capsys.readouterr()
    assert main(["generate", "-api_info", str(dump), "-o", str(tmp_path / "suite"), "-d", "cpu", "--copy-data"]) == 0
    assert capsys.readouterr().err == ""
    assert run_suite(tmp_path / "suite") == expected


def test_generate_cli_and_bad_dump(tmp_path, capsys):
    assert main(["generate", "-api_info", str(MLP), "-o", str(tmp_path / "s"), "-d", "cpu"]) == 0
    assert "suite written to" in capsys.readouterr().out
    assert main(["generate", "-api_info", str(tmp_path / "none.json"), "-o", str(tmp_path / "t")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_the_printed_pytest_command_runs_nothing_of_the_folder_name(tmp_path, capsys):
    """The `(run: pytest SUITE)` line is pasted into a shell: a suite folder named with ``$(...)`` and a quote is
    one word there, and nothing runs."""
    suite = tmp_path / "s $(touch pwned) 'x"
    assert main(["generate", "-api_info", str(MLP), "-o", str(suite), "-d", "cpu"]) == 0
    line = capsys.readouterr().out.rstrip("\n")
    assert line.endswith(")") and line.count("\n") == 0
    command = line.split(" (run: ", 1)[1][:-1]
    words = subprocess.run(["bash", "-c", f"printf '%s\\0' {command}"], capture_output=True, cwd=tmp_path, check=True)
    assert words.stdout.split(b"\0")[:-1] == [b"pytest", str(suite).encode()]
    assert not (tmp_path / "pwned").exists()


def test_repro_script_needs_only_torch_and_reproduces(tmp_path, capsys):
    assert main(["repro", "Functional.linear.0", "-api_info", str(MLP), "-o", str(tmp_path)]) == 0
    script = tmp_path / "repro_Functional.linear.0.py"
    inputs = torch.load(tmp_path / "Functional.linear.0.inputs.pt", weights_only=True)
    assert set(inputs) == {"input_args[0]", "input_args[1]", "input_args[2]", "backward.input[0]"}
    text = script.read_text()  # precheck only inside the verdict, where it is tried: the numbers need only torch
    assert [line.strip() for line in text.splitlines() if "import precheck" in line] == ["import precheck"]
    assert text.index("import precheck") > text.index("    try:\n        import precheck") - 1 > 0
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
