"""Text from a dump never becomes code: `generate` and `repro` write Python, and a dump's directory name, file
names, API names, keyword names and string arguments may hold quotes, newlines and calls. Each hostile text is
put into a real dump (tests/data's MLP), the suite is run with pytest and the repro script with Python, and the
payload must not have run; a fuzzer then puts generated hostile text through the same places."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import inplace_dump, link_tensor_data, real_dump_json
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from precheck.commands.cli import main
from precheck.repro import write_repro
from precheck.testgen import generate

MLP = real_dump_json("mlp_fp32_tensor")
API = "Functional.gelu.0"
# Each closes what the code generator might have opened (a docstring, a string, a line, a format field) and
# then runs `touch PWNED` in the current folder.
CALL = '__import__("os").system("touch PWNED")'
PAYLOADS = [
    f'x""";{CALL};"""',
    f"x''';{CALL};'''",
    f'x";{CALL};"',
    f"x';{CALL};'",
    f"x\n{CALL}\n#",
    f"x\\\n{CALL}#",
    f"x{{{CALL}}}\"\"\"'''\\",
]


def hostile_dump(root: Path, text: str) -> Path:
    """The MLP dump's gelu call in a folder named ``text``, its input file named after ``text``, a keyword argument
    named ``text`` and a string argument ``text``, and a malformed record whose key is ``text``."""
    folder = root / (text.replace("/", "_").replace("\0", "_")[:100] or "_")
    data_dir = folder / "dump_tensor_data"
    data_dir.mkdir(parents=True)
    doc = json.loads(MLP.read_text(encoding="utf-8"))
    forward = doc["data"][f"{API}.forward"]
    file_name = f"{text[:100]}.pt".replace("/", "_").replace("\0", "_")
    shutil.copyfile(MLP.parent / "dump_tensor_data" / forward["input_args"][0]["data_name"], data_dir / file_name)
    forward["input_args"][0]["data_name"] = file_name
    forward["input_kwargs"] = {"approximate": {"type": "str", "value": text}, text: {"type": "int", "value": 1}}
    for record in (forward, doc["data"][f"{API}.backward"]):
        for spec in record.get("output", []) + record.get("input", []):
            shutil.copyfile(MLP.parent / "dump_tensor_data" / spec["data_name"], data_dir / spec["data_name"])
    doc["data"] = {f"{API}.forward": forward, f"{API}.backward": doc["data"][f"{API}.backward"], text: {}}
    (folder / "dump.json").write_text(json.dumps(doc), encoding="utf-8")
    return folder / "dump.json"


# Every generated suite has a module of the same name: importlib mode collects them side by side.
PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--import-mode=importlib"]


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=300)


def shape_of(source: str) -> str:
    """The source's syntax tree with every string constant blanked: what the code does, not the text it holds."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            node.value = ""
    return ast.dump(tree)


def literals(source: str) -> set[str]:
    return {n.value for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


# Runs every repro script given in one process (gelu refuses the hostile keyword: each ends in an exception).
RUN_ALL = """
import runpy, sys
for path in sys.argv[1:]:
    sys.argv = [path]
    try:
        runpy.run_path(path, run_name="__main__")
    except Exception as e:
        print(path, type(e).__name__)
"""


@pytest.fixture(scope="module")
def benign(tmp_path_factory) -> tuple[str, str]:
    """The generated test module and repro script of the same dump with an ordinary name everywhere."""
    root = tmp_path_factory.mktemp("benign")
    dump = hostile_dump(root, "plain")
    test = generate(dump, root / "suite")
    return test.read_text(encoding="utf-8"), shape_of(write_repro(API, dump, root / "repro").read_text("utf-8"))


def test_hostile_text_everywhere_never_runs(tmp_path, benign):
    dumps = [hostile_dump(tmp_path / f"d{i}", text) for i, text in enumerate(PAYLOADS)]
    for i, dump in enumerate(dumps):
        suite = tmp_path / f"suite{i}"
        test = generate(dump, suite, copy_data=i % 2 == 1)
        assert test.read_text(encoding="utf-8") == benign[0], "the test module holds nothing of the dump"
        script = write_repro(API, dump, tmp_path / f"repro{i}")
        source = script.read_text(encoding="utf-8")
        assert shape_of(source) == benign[1], "dump text only inside string literals"
        assert PAYLOADS[i] in literals(source), "the string argument reaches the call as the string it was"
    # One pytest process collects and runs every suite, one Python process every repro script.
    proc = run([*PYTEST, *map(str, tmp_path.glob("suite*"))], tmp_path)
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    # Each suite: the gelu call refuses the hostile keyword (SKIP, as in run_ut), the malformed record is SKIP.
    assert f"{2 * len(PAYLOADS)} skipped" in proc.stdout.splitlines()[-1], proc.stdout[-3000:]
    run([sys.executable, "-c", RUN_ALL, *map(str, tmp_path.glob("repro*/repro_*.py"))], tmp_path)
    assert not list(tmp_path.rglob("PWNED")), "a payload from the dump ran"


# ------------------------------------------------------------------------------------------------- the fuzzer

EXAMPLES = int(os.environ.get("PRECHECK_FUZZ_EXAMPLES", "300"))
FUZZ = settings(
    max_examples=max(1, EXAMPLES // 10),  # each example writes a dump, a suite and a repro
    deadline=None,
    derandomize=os.environ.get("PRECHECK_FUZZ_RANDOM") != "1",
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    database=None,
)
# Mostly what closes a literal, a line or a format field, and some of any other text.
HOSTILE = st.text(
    alphabet=st.one_of(
        st.sampled_from(list("\"'\\{}\n\r#;()`$ \t\x1b\u2028x")), st.characters(blacklist_categories=["Cs"])
    ),
    min_size=1,
    max_size=24,
).map(lambda s: s + f";{CALL};")


@FUZZ
@given(text=HOSTILE)
def test_fuzzed_names_only_ever_become_literals(tmp_path_factory, benign, text):
    root = tmp_path_factory.mktemp("fuzz")
    dump = hostile_dump(root, text)
    assert generate(dump, root / "suite").read_text(encoding="utf-8") == benign[0]
    script = write_repro(API, dump, root / "repro")
    assert shape_of(script.read_text(encoding="utf-8")) == benign[1]


@settings(FUZZ, max_examples=1)
@given(texts=st.lists(HOSTILE, min_size=3, max_size=3))
def test_fuzzed_names_through_pytest_and_the_repro(tmp_path_factory, texts):
    """Fuzzed names all the way: the suites under one pytest, the scripts under one Python."""
    root = tmp_path_factory.mktemp("fuzz_run")
    dumps = [hostile_dump(root / f"d{i}", text) for i, text in enumerate(texts)]
    suites = [generate(dump, root / f"suite{i}", copy_data=True).parent for i, dump in enumerate(dumps)]
    proc = run([*PYTEST, *map(str, suites)], root)
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    scripts = [write_repro(API, dump, root / f"repro{i}") for i, dump in enumerate(dumps)]
    run([sys.executable, "-c", RUN_ALL, *map(str, scripts)], root)
    assert not list(root.rglob("PWNED"))


def test_repro_of_a_248_character_name_writes_files_a_file_system_takes(tmp_path, capsys):
    """Two 248-character names (256 with ``.forward``, the longest run_ut takes) that differ only at the end: each
    gets its script and inputs, under names cut to fit 255 bytes, and the script runs."""
    doc = json.loads(MLP.read_text(encoding="utf-8"))
    names = [f"Functional.gelu.{'0' * 231}{n}" for n in (1, 2)]
    doc["data"] = {f"{name}.{kind}": doc["data"][f"Functional.gelu.0.{kind}"] for name in names
                   for kind in ("forward", "backward")}  # fmt: skip
    dump = tmp_path / "dump" / "dump.json"
    dump.parent.mkdir()
    link_tensor_data(MLP.parent / "dump_tensor_data", dump.parent)
    dump.write_text(json.dumps(doc), encoding="utf-8")
    for name in names:
        assert len(name) == 248 and main(["repro", name, "-api_info", str(dump), "-o", str(tmp_path / "out")]) == 0
    scripts = sorted((tmp_path / "out").glob("repro_*.py"))
    assert len(scripts) == 2 and len(list((tmp_path / "out").glob("*.inputs.pt"))) == 2
    assert all(len(p.name.encode()) <= 255 for p in (tmp_path / "out").iterdir())
    proc = subprocess.run([sys.executable, str(scripts[0])], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.startswith("forward.output.0: (4, 32) torch.float32"), proc.stderr


@pytest.mark.parametrize("api", ["Functional.relu.0", "Tensor.__iadd__.0"])
def test_repro_of_an_inplace_call_runs_forward_and_backward(api, tmp_path):
    """``F.relu(x, inplace=True)`` on an input that needs a gradient: the script modifies a copy of the input, as
    run_ut does (it stopped at 'a leaf Variable that requires grad is being used in an in-place operation')."""
    script = write_repro(api, inplace_dump(tmp_path / "dump", "tensor"), tmp_path / "repro")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("forward.output.0: (32, 32) torch.float32: max abs error ")
    assert "gradient of input_args[0]: (32, 32) torch.float32: max abs error 0 " in proc.stdout


def test_a_repro_of_a_bad_kernel_prints_the_verdict_and_exits_1(tmp_path):
    """The repro printed numbers but no verdict and exited 0 for a kernel run_ut graded error: the CPU's bf16
    layer_norm backward (its weight and bias gradients worse than an honest kernel's). It grades each output as
    run_ut does, with the honest kernel run, and exits 1."""
    script = write_repro("Functional.layer_norm.0", real_dump_json("gpt2_bf16_tensor"), tmp_path / "repro")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    said = [line for line in proc.stdout.splitlines() if line.startswith("verdict")]
    assert said[0].startswith("verdict forward.output.0: warning: ") and said[-1] == "verdict: error"
    assert said[2].startswith("verdict gradient of input_args[2]: error: worse than an honest bf16 kernel: ")
    assert "the honest kernel's (normwise, 2x allowed)" in said[2]  # run, not modeled


def test_a_repro_of_a_sound_kernel_exits_0_and_without_precheck_3(tmp_path):
    script = write_repro("Functional.linear.0", MLP, tmp_path / "repro")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0 and proc.stdout.splitlines()[-1] == "verdict: no output is an error", proc.stdout
    blocked = tmp_path / "no_precheck"
    blocked.mkdir()
    (blocked / "precheck.py").write_text("raise ImportError('not installed here')\n")
    env = {**os.environ, "PYTHONPATH": str(blocked)}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == (
        "verdict: not graded: precheck is not installed here (pip install precheck grades it as run_ut does)"
    )
