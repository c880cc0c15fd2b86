"""The command line a user types: exit codes, one-line errors, the summary, the options."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import link_tensor_data

from precheck.commands.cli import main
from precheck.core.older_python import zip_strict

DATA = Path(__file__).parent / "data"
MLP = DATA / "mlp_fp32_tensor/step0/proc8486/dump.json"
GPT2 = DATA / "gpt2_bf16_tensor/step0/proc8493/dump.json"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_summary_names_counts_rate_and_both_csvs(tmp_path, capsys):
    code, out, _ = run(capsys, "run_ut", "-api_info", str(MLP), "-o", str(tmp_path), "-d", "cpu", "-q")
    assert code == 0
    assert "6 APIs on cpu" in out and "APIs/s" in out
    assert "forward:  pass 6, warning 0, error 0, SKIP 0" in out
    result = next(tmp_path.glob("accuracy_checking_result_*.csv"))
    details = next(tmp_path.glob("accuracy_checking_details_*.csv"))
    assert str(result) in out and str(details) in out
    assert result.name.removeprefix("accuracy_checking_result_") == details.name.removeprefix(
        "accuracy_checking_details_"
    )
    assert len(result.stem.rsplit("_", 1)[1]) == 14  # YYYYmmddHHMMSS


def test_summary_says_how_many_module_records_it_did_not_replay(tmp_path, capsys):
    """A level mix dump (msprobe 26.2) holds 14 Module records among its 16 API ones: the summary says they were
    not replayed, and the rows are those of the same dump without them, cell for cell."""
    mix = DATA / "compare/fp32_mix/step0/rank0/dump.json"
    doc = json.loads(mix.read_text())
    doc["data"] = {k: v for k, v in doc["data"].items() if not k.startswith("Module.")}
    apis_only = tmp_path / "apis_only" / "dump.json"
    apis_only.parent.mkdir()
    apis_only.write_text(json.dumps(doc))
    link_tensor_data(mix.parent / "dump_tensor_data", apis_only.parent)
    tables = []
    for dump, line in (
        (mix, "  14 module (L0) records are not replayed (precheck compare compares them)"),
        (apis_only, None),
    ):
        out_dir = tmp_path / f"out_{dump.parent.name}"
        code, out, _ = run(capsys, "run_ut", "-api_info", str(dump), "-o", str(out_dir), "-d", "cpu", "-q")
        assert code == 0
        assert "8 APIs on cpu" in out and "forward:  pass 8, warning 0, error 0, SKIP 0" in out
        assert (line in out.splitlines()) if line else "module (L0)" not in out
        tables.append([f.read_text() for f in sorted(out_dir.glob("accuracy_checking_*.csv"))])
    assert tables[0] == tables[1]


def test_progress_bar_goes_to_stderr(tmp_path, capsys):
    code, out, err = run(capsys, "run_ut", "-api_info", str(MLP), "-o", str(tmp_path), "-d", "cpu")
    assert code == 0 and "6/6" in err and "API/s" in err and "6/6" not in out


def test_fail_on_gates(tmp_path, capsys):
    assert run(capsys, "run_ut", "-api_info", str(MLP), "-o", str(tmp_path), "-q", "--fail-on", "warning")[0] == 0
    code, _, err = run(capsys, "run_ut", "-api_info", str(GPT2), "-o", str(tmp_path), "-q", "--fail-on", "warning")
    assert code == 1 and "--fail-on" in err
    # gpt2 in bf16 on the CPU: errors (the CPU's bf16 layer_norm backward is 2.5-5x worse than an honest kernel's)
    assert run(capsys, "run_ut", "-api_info", str(GPT2), "-o", str(tmp_path), "-q", "--fail-on", "error")[0] == 1
    # without its layer norms, warnings but no error
    config = tmp_path / "config.json"
    config.write_text('{"black_list": ["layer_norm"]}')
    args = ["run_ut", "-api_info", str(GPT2), "-o", str(tmp_path), "-q", "-config", str(config), "--fail-on"]
    assert run(capsys, *args, "error")[0] == 0
    assert run(capsys, *args, "warning")[0] == 1


def test_thresholds_are_options(tmp_path, capsys):
    # With a looser max-abs threshold every bf16 warning of the embedding/add chain becomes a pass.
    code, out, _ = run(
        capsys, "run_ut", "-api_info", str(GPT2), "-o", str(tmp_path), "-q", "--max-abs", "1", "--cosine", "0.9"
    )
    assert code == 0 and "forward:  pass 47, warning 0, error 0, SKIP 0" in out


@pytest.mark.parametrize(
    "content, reason",
    [
        (None, "no such file"),
        ("{not json", "not valid JSON"),
        ("[1, 2]", "not an msprobe dump"),
        ('{"task": "tensor"}', "not an msprobe dump"),
        ('{"task": "other", "data": {}}', "'task' is 'other'"),
    ],
)
def test_unusable_dump_exits_2_with_one_line(tmp_path, capsys, content, reason):
    path = tmp_path / "dump.json"
    if content is not None:
        path.write_text(content)
    code, out, err = run(capsys, "run_ut", "-api_info", str(path), "-o", str(tmp_path / "out"))
    assert code == 2
    assert err.count("\n") == 1 and reason in err and str(path) in err and "Traceback" not in err


def test_unknown_or_missing_device_exits_2(tmp_path, capsys):
    code, _, err = run(capsys, "run_ut", "-api_info", str(MLP), "-o", str(tmp_path), "-d", "tpu")
    assert code == 2 and "unknown device 'tpu'" in err
    code, _, err = run(capsys, "run_ut", "-api_info", str(MLP), "-o", str(tmp_path), "-d", "cuda:7")
    assert code == 2 and "not available" in err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["run_ut", "-api_info", str(MLP), "-n", "0"], "at least 1"),
        # these ran: overflow -n 0 read no record and said all clear, keydata --rtol nan graded against nan,
        # record --steps -1 ran the whole training to record nothing
        (["overflow", str(MLP), "-n", "0"], "at least 1"),
        (["keydata", "-target", str(MLP), "-bench", str(MLP), "--rtol", "nan"], "not finite"),
        (["keydata", "-target", str(MLP), "-bench", str(MLP), "--atol", "-1"], "below 0"),
        (["record", "-o", "dump", "--steps", "-1", "--", "python", "train.py"], "below 0"),
        (["record", "-o", "dump", "--check", "-n", "0", "--", "python", "train.py"], "at least 1"),
    ],
)
def test_bad_option_values_are_rejected(capsys, argv, said):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and said in capsys.readouterr().err


def test_installed_entry_point_runs_without_traceback(tmp_path):
    """The real process: module entry point, exit status and stdout of a bad dump and a good one."""
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps(
            {
                "task": "tensor",
                "level": "L1",
                "data": {"Torch.foo.0.forward": {"input_args": [], "input_kwargs": {}, "output": []}, "Bad key": {}},
            }
        )
    )
    proc = subprocess.run(
        [sys.executable, "-m", "precheck", "run_ut", "-api_info", str(bad), "-o", str(tmp_path / "out"), "-q"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 3, proc.stderr  # both records SKIP: nothing was graded
    assert "Traceback" not in proc.stderr
    assert "SKIP 2" in proc.stdout
    result = next((tmp_path / "out").glob("accuracy_checking_result_*.csv")).read_text(encoding="utf-8-sig")
    assert "Torch.foo.0,SKIP, ,not supported: Torch.foo" in result
    assert "Bad key,SKIP, ,malformed record name" in result


def test_fail_on_fails_a_run_that_graded_nothing(tmp_path, capsys):
    """A dump copied without its tensor files is all SKIP rows: no gate may pass it, and without a gate it is
    not green either (exit 3, its own code) unless --allow-empty."""
    dump = tmp_path / "dump.json"
    dump.write_bytes(GPT2.read_bytes())
    said = "precheck: nothing was graded: all 47 APIs are SKIP (exit 3; --allow-empty to exit 0 all the same)\n"
    for gate in ("error", "warning", "skip"):
        code, out, err = run(
            capsys, "run_ut", "-api_info", str(dump), "-o", str(tmp_path / gate), "-q", "--fail-on", gate
        )
        assert code == 3 and "SKIP 47" in out
        assert err == said
    assert run(capsys, "run_ut", "-api_info", str(dump), "-o", str(tmp_path / "no_gate"), "-q")[0] == 3
    code, _, err = run(capsys, "run_ut", "-api_info", str(dump), "-o", str(tmp_path / "empty"), "-q", "--allow-empty")
    assert (code, err) == (0, "")


def test_fail_on_skip_gates_skip_rows(tmp_path, capsys):
    # gpt2's two attention calls with dropout have a backward SKIP; the MLP has none.
    code, _, err = run(capsys, "run_ut", "-api_info", str(GPT2), "-o", str(tmp_path), "-q", "--fail-on", "skip")
    assert code == 1 and err == "precheck: some APIs are SKIP (--fail-on skip)\n"
    assert run(capsys, "run_ut", "-api_info", str(MLP), "-o", str(tmp_path), "-q", "--fail-on", "skip")[0] == 0


def test_fail_on_counts_the_rows_of_the_run_it_resumed(tmp_path, capsys):
    """An error found before an interruption still trips the gate after the resume."""
    code, _, _ = run(capsys, "run_ut", "-api_info", str(GPT2), "-o", str(tmp_path), "-q", "--max-abs", "1e-30")
    assert code == 0
    result = next(tmp_path.glob("accuracy_checking_result_*.csv"))
    argv = ["run_ut", "-api_info", str(GPT2), "-q", "--max-abs", "1e-30", "-csv_path", str(result)]
    code, out, err = run(capsys, *argv, "--fail-on", "warning")
    assert "47 APIs on" in out and "47 done before, by the run this continues; none was left to check" in out
    assert code == 1 and "at or below 'warning'" in err


def test_a_resume_prints_the_whole_runs_counts_and_how_many_were_done_before(tmp_path, capsys):
    code, first, _ = run(capsys, "run_ut", "-api_info", str(MLP), "-o", str(tmp_path), "-d", "cpu", "-q")
    result = next(tmp_path.glob("accuracy_checking_result_*.csv"))
    lines = result.read_bytes().splitlines(keepends=True)
    result.write_bytes(b"".join(lines[:3]))  # interrupted after two of the six APIs
    code, out, _ = run(capsys, "run_ut", "-api_info", str(MLP), "-d", "cpu", "-q", "-csv_path", str(result))
    assert code == 0 and "6 APIs on cpu: 2 done before, by the run this continues; 4 checked now in " in out
    counts = [line for line in out.splitlines() if line.startswith(("  forward:", "  backward:"))]
    assert counts == [line for line in first.splitlines() if line.startswith(("  forward:", "  backward:"))]


def test_save_error_data_into_a_place_that_cannot_be_written_is_one_warning(tmp_path, capsys):
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the folder would go")
    code, out, err = run(capsys, "run_ut", "-api_info", str(GPT2), "-o", str(blocked / "sub"), "-q")
    assert code == 2  # the CSVs themselves cannot be written: that is an error
    base = run(capsys, "run_ut", "-api_info", str(GPT2), "-o", str(tmp_path / "base"), "-q")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "ut_error_data").write_text("not a folder")
    code, out, err = run(
        capsys, "run_ut", "-api_info", str(GPT2), "-o", str(tmp_path / "out"), "-q", "-save_error_data"
    )
    assert code == 0 and err.count("\n") == 1
    assert err.startswith(f"precheck: warning: cannot save error data in {tmp_path / 'out' / 'ut_error_data'} (")
    assert out.split("\n")[1:3] == base[1].split("\n")[1:3]  # the same verdicts
    assert "forward:  pass 18, warning 29, error 0, SKIP 0" in out


MSPROBE_DETAILS = DATA / "msprobe" / "accuracy_checking_details_20261122032509.csv"
_WRITERS = {
    "run_ut": ["run_ut", "-api_info", str(MLP), "-q"],  # it failed after the run, with "[Errno 17] File exists"
    "generate": ["generate", "-api_info", str(MLP)],
    "repro": ["repro", "Functional.linear.0", "-api_info", str(MLP)],
    "api_precision_compare": ["api_precision_compare", "-npu", str(MSPROBE_DETAILS), "-gpu", str(MSPROBE_DETAILS)],
}


@pytest.mark.parametrize("command", list(_WRITERS))
@pytest.mark.parametrize(
    "where, reason",
    [
        ("a file", "exists and is not a folder"),
        ("/dev/null/x", "/dev/null/x: cannot make this folder: Not a directory"),
        ("/proc/self", "cannot write /proc/self/"),  # a folder nobody may write in, even root
        ("a dangling link", "a link to gone/out, which does not exist"),  # it said "File exists"
    ],
)
def test_an_output_folder_that_cannot_be_one_is_one_line(tmp_path, capsys, command, where, reason):
    if where == "a file":
        where = str(tmp_path / "taken")
        Path(where).write_text("not a folder")
    if where == "a dangling link":
        where = str(tmp_path / "out")
        Path(where).symlink_to("gone/out")
    code, _, err = run(capsys, *_WRITERS[command], "-o", where)
    assert code == 2 and err.count("\n") == 1 and err.startswith("precheck: error: "), err
    assert reason in err and where in err, err


@pytest.mark.parametrize(
    "option, value, reason",
    [
        ("--max-memory", "inf", "'inf' is not finite (expected a size such as 512M or 8G)"),
        ("--max-memory", "1e400", "'1e400' is not finite"),
        ("--max-memory", "0.5", "'0.5' is not a size from 1M up"),
        ("--max-memory", "8Q", "not a number: '8Q' (expected a size such as 512M or 8G)"),
        ("--cosine", "abc", "argument --cosine: not a number: 'abc' (expected a number in [0, 1], such as 0.99)"),
        ("--cosine", "nan", "'nan' is not finite"),
        ("--max-abs", "-1", "'-1' is not above 0"),
        ("-n", "many", "not a number: 'many' (expected a whole number, at least 1)"),
    ],
)
def test_option_values_say_what_is_expected(capsys, option, value, reason):
    with pytest.raises(SystemExit) as e:
        main(["run_ut", "-api_info", str(MLP), option, value])
    err = capsys.readouterr().err
    assert e.value.code == 2 and reason in err and "_fraction" not in err and "Traceback" not in err


@pytest.mark.parametrize("device", ["cpu:5", "cpu:1"])
def test_an_impossible_cpu_is_refused(tmp_path, capsys, device):
    code, _, err = run(capsys, "run_ut", "-api_info", str(MLP), "-o", str(tmp_path), "-d", device, "-q")
    expected = f"precheck: error: device '{device}' does not exist (the CPU is one device: cpu, or cpu:0)\n"
    assert code == 2 and err == expected
    assert not list(tmp_path.iterdir())  # refused before a CSV was made


def test_a_config_nested_beyond_the_parser_is_one_line(tmp_path, capsys):
    config = tmp_path / "config.json"
    config.write_text('{"white_list": ' + "[" * 100_000 + "]" * 100_000 + "}")
    code, _, err = run(capsys, "run_ut", "-api_info", str(MLP), "-o", str(tmp_path), "-config", str(config), "-q")
    assert code == 2 and err == f"precheck: error: {config}: nested too deeply\n"


@pytest.mark.parametrize("where", ["dump", "header"])
def test_a_5000_digit_integer_is_a_skip_row_or_one_line(tmp_path, capsys, where):
    doc = json.loads(MLP.read_text())
    path = tmp_path / "dump.json"
    text = json.dumps(doc)
    if where == "dump":
        text = text.replace('"input_args": [', '"input_args": [{"type": "int", "value": ' + "7" * 5000 + "}, ", 1)
    else:
        text = text.replace('"level": "L1"', '"level": ' + "7" * 5000, 1)
    path.write_text(text)
    link_tensor_data(MLP.parent / "dump_tensor_data", tmp_path)
    code, out, err = run(capsys, "run_ut", "-api_info", str(path), "-o", str(tmp_path / "out"), "-q")
    if where == "header":
        assert code == 2 and "not valid JSON: an integer of 5000 digits" in err and err.count("\n") == 1
        return
    assert code == 0, err
    result = next((tmp_path / "out").glob("accuracy_checking_result_*.csv")).read_text(encoding="utf-8-sig")
    first = next(line for line in result.splitlines()[1:])
    assert first.startswith(f"{next(iter(doc['data'])).removesuffix('.forward')},SKIP,SKIP,bad record: record holds an")
    assert "forward:  pass 5, warning 0, error 0, SKIP 1" in out


def test_a_file_that_never_ends_is_one_line(capsys, tmp_path):
    code, _, err = run(capsys, "run_ut", "-api_info", "/dev/zero", "-o", str(tmp_path))
    assert code == 2 and err == "precheck: error: /dev/zero: not a regular file\n"


def test_version_is_the_package_version():
    import precheck

    proc = subprocess.run([sys.executable, "-m", "precheck", "--version"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"precheck {precheck.__version__}"


TORCH_FREE = {
    "--help": "from precheck.commands.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass",
    "an argument error": "from precheck.commands.cli import main\ntry:\n    main(['run_ut', '--seed', 'x'])\n"
    "except SystemExit as e:\n    assert e.code == 2",
    "regress": "import precheck.regress",
    "api_precision_compare": "import precheck.precision_compare",
    "the result model": "import precheck.results",
    "results as frames": "import precheck, precheck.frames\nassert precheck.load is precheck.frames.load",
}


@pytest.mark.parametrize("what", TORCH_FREE)
def test_commands_that_run_nothing_load_no_torch(what):
    """`precheck --help` answers in a tenth of a second and regress reads CSVs without torch's 1-2 s import."""
    code = TORCH_FREE[what] + "\nimport sys\nassert 'torch' not in sys.modules, 'torch was imported'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_regress_end_to_end_loads_no_torch(tmp_path):
    header = "\ufeffAPI name,Forward Test Success,Backward Test Success,Message\r\n"
    for name, status in (("old.csv", "pass"), ("new.csv", "error")):
        (tmp_path / name).write_bytes((header + f"Torch.add.0,{status}, , \r\n").encode())
    code = (
        "import sys\nfrom precheck.commands.cli import main\n"
        f"code = main(['regress', '--baseline', {str(tmp_path / 'old.csv')!r}, '--current', "
        f"{str(tmp_path / 'new.csv')!r}, '-o', {str(tmp_path)!r}])\n"
        "assert code == 1, code\nassert 'torch' not in sys.modules, 'torch was imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_a_path_typed_wrong_is_answered_before_torch_is_loaded(tmp_path):
    # A missing -api_info took 4-15 s to say so: run_ut and generate imported torch first.
    cases = [
        (["run_ut", "-api_info", str(tmp_path / "dump.json")], f"{tmp_path / 'dump.json'}: no such file"),
        (["run_ut", "-api_info", str(tmp_path)], f"{tmp_path / 'dump.json'}: no such file"),
        (["acc_check", "-api_info", str(MLP), "-config", str(tmp_path / "c.json")], f"{tmp_path / 'c.json'}: no such"),
        (["run_ut", "-api_info", str(MLP), "-csv_path", str(tmp_path / "r.csv")], f"{tmp_path / 'r.csv'}: no such"),
        (["generate", "-api_info", str(tmp_path / "d"), "-o", str(tmp_path / "s")], f"{tmp_path / 'd'}: no such file"),
    ]
    done = _torch_free(
        f"for argv, _ in {cases!r}:\n    assert main(argv + ['-q'] * (argv[0] != 'generate')) == 2, argv\n"
    )
    lines = done.stderr.splitlines()
    assert all(line.startswith(f"precheck: error: {expected}") for (_, expected), line in zip_strict(cases, lines))


def test_report_end_to_end_loads_no_torch(tmp_path):
    details = DATA / "msprobe" / "accuracy_checking_details_20261122032509.csv"
    _torch_free(f"code = main(['report', {str(details)!r}, '-o', {str(tmp_path)!r}])\nassert code == 0, code\n")
    assert len(list(tmp_path.glob("report_*.html"))) == 1


def _torch_free(body: str) -> subprocess.CompletedProcess:
    """``body`` run in a fresh interpreter with the command line's ``main``, which must not have imported torch."""
    code = f"import sys\nfrom precheck.commands.cli import main\n{body}assert 'torch' not in sys.modules, 'torch'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["run_ut", "--api-info", "x"], "precheck run_ut: error: unknown option --api-info; did you mean --api_info?"),
        (["run_ut", "-apiinfo", "x"], "precheck run_ut: error: unknown option -apiinfo; did you mean -api_info?"),
        (["run_ut", "-api_info", "x", "--fail_on", "error"], "unknown option --fail_on; did you mean --fail-on?"),
        (["regress", "--baseline", "a", "--curent", "b"], "unknown option --curent; did you mean --current?"),
        (["run_ut", "-api_info", "x", "--zzz"], "precheck run_ut: error: unknown option --zzz"),
        (["run_ut", "-api_info", "x", "y"], "precheck run_ut: error: unexpected argument 'y'"),
        (["run_ut"], "precheck run_ut: error: the following arguments are required: -api_info/--api_info"),
        # the program's words after -- are not precheck's options: the missing -o is named
        (["record", "--", "python", "train.py"], "the following arguments are required: -o/--out_path"),
    ],
)
def test_a_misspelt_option_is_named_with_the_nearest_one_in_one_line(capsys, argv, expected):
    with pytest.raises(SystemExit) as e:
        main(argv)
    first, hint, *rest = capsys.readouterr().err.split("\n")
    assert e.value.code == 2 and first.endswith(expected) and rest == [""]
    assert hint == f"  (see: precheck {argv[0]} --help)"


@pytest.mark.parametrize(
    "argv, expected, help_of",
    [
        (
            ["run_ut", "-api_info", "x", "-j", "2"],
            "run_ut: error: unknown option -j: worker processes are -n N",
            "run_ut ",
        ),
        (
            ["record", "-o", "d", "-j", "2", "--", "python", "x.py"],
            "unknown option -j: worker processes are -n N",
            "record ",
        ),
        (
            ["run_ut", "-api_info", "x", "--jit_compile"],
            "jit_compile: precheck leaves torch_npu's jit compilation",
            "run_ut ",
        ),
        (["runut", "-api_info", "x"], "precheck: error: unknown command 'runut'; did you mean run_ut?", ""),
        (
            ["run_ut", "-api_info", "x", "--forward_only"],
            "unknown option --forward_only: a call's backward is graded only where the dump recorded one",
            "run_ut ",
        ),
        # argparse read -forward_only as -f -o rward_only: the output folder, silently
        (
            ["acc_check", "-api_info", "x", "-forward_only"],
            "unknown option -forward_only: a call's backward",
            "run_ut ",
        ),
        (["run_ut", "-api_info", "x", "-fa"], "run_ut: error: unknown option -fa", "run_ut "),
        (
            ["compare", "-target", "a", "-bench", "b", "-s", "True"],
            "compare: error: argument -s/--stack_path: 'True' is msprobe's stack-mode switch; here -s is a "
            "stack.json path",
            "compare ",
        ),
    ],
)
def test_msprobes_habits_are_answered_with_what_precheck_uses_instead(capsys, argv, expected, help_of):
    with pytest.raises(SystemExit) as e:
        main(argv)
    first, hint, *rest = capsys.readouterr().err.split("\n")
    assert e.value.code == 2 and expected in first and rest == [""]
    assert hint == f"  (see: precheck {help_of}--help)"


@pytest.mark.parametrize("command", ["run_ut", "acc_check", "multi_acc_check"])
def test_msprobes_names_and_single_dash_options_of_run_ut_are_taken(command):
    from precheck.commands.parser import build_parser
    from precheck.commands.run_ut_cli import COMMAND

    args = build_parser().parse_args([command, "-api_info", "d.json", "-filter_api", "-qf", "-n4"])
    assert args.func is COMMAND.handler and args.filter_api and args.quiet and args.workers == 4
    assert args.out_path == "."


def test_resuming_a_csv_that_is_not_there_says_no_such_file_on_a_line_of_its_own(tmp_path, capsys):
    missing = tmp_path / "e2" / "nope.csv"  # with the progress bar on: its line is not the error's
    assert main(["run_ut", "-api_info", str(MLP), "-d", "cpu", "-csv_path", str(missing)]) == 2
    assert capsys.readouterr().err == f"precheck: error: {missing}: no such file\n"


def test_every_option_has_help_and_the_two_targets_say_which_they_are():
    import argparse

    from precheck.commands.parser import build_parser

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    bare = [
        (n, a.option_strings[0]) for n, p in commands.items() for a in p._actions if a.option_strings and not a.help
    ]
    assert bare == []
    helps = {n: {a.dest: a.help for a in commands[n]._actions} for n in ("compare", "run_ut")}
    assert "the dump under test" in helps["compare"]["target"] and "not run_ut's --target" in helps["compare"]["target"]
    assert "reference run's dump" in helps["compare"]["bench"]
    assert "A mode, not a dump: compare's -target is the dump under test" in helps["run_ut"]["target"]


def test_recording_again_into_a_recorded_folder_is_refused_before_the_command_runs(tmp_path, capsys):
    (tmp_path / "step0" / "proc8486").mkdir(parents=True)
    ran = tmp_path / "ran"
    code, _, err = run(capsys, "record", "-o", str(tmp_path), "--", sys.executable, "-c", f"open({str(ran)!r}, 'w')")
    assert code == 2 and not ran.exists()
    assert err == (
        f"precheck: error: {tmp_path / 'step0'} already holds a recording (proc8486): record into another -o, or "
        "remove that one first\n"
    )


def test_record_check_ends_each_step_as_run_ut_ends_a_run_labelled_by_its_step(tmp_path, capsys, monkeypatch):
    from precheck.recording import launch
    from precheck.recording.runlog import Written

    code, by_run_ut, _ = run(capsys, "run_ut", "-api_info", str(GPT2), "-o", str(tmp_path), "-d", "cpu", "-q")
    (result,) = tmp_path.glob("accuracy_checking_result_*.csv")
    done = launch.Recorded(0, None, Written(dumps=[GPT2], results=[result]))
    monkeypatch.setattr(launch, "run_recorded", lambda *args, **kwargs: done)  # the step's check, as it left it
    code, out, _ = run(capsys, "record", "-o", str(tmp_path / "rec"), "--check", "-d", "cpu", "--", "python", "t.py")
    assert code == 0 and "\nstep0 (proc8493): 47 APIs checked\n  forward:  pass " in out
    closing = [line for line in by_run_ut.splitlines() if line.startswith(("    ", "  worst APIs", "  2 APIs SKIP"))]
    assert len(closing) > 3 and all(line in out.splitlines() for line in closing)  # SKIP reasons and worst APIs


def test_msprobes_top_level_framework_option_is_taken(tmp_path, capsys):
    # msprobe -f mindspore run_ut -api_info ...: the MLP's PyTorch calls read as MindSpore's have no equivalent.
    code, out, _ = run(capsys, "-f", "mindspore", "run_ut", "-api_info", str(MLP), "-o", str(tmp_path), "-q")
    assert code == 0 and "forward:  pass 1, warning 0, error 0, SKIP 5" in out
    code, _, err = run(capsys, "-f", "mindspore", "run_ut", "-api_info", str(MLP), "--framework", "pytorch")
    assert (code, err) == (2, "precheck: error: -f mindspore before run_ut contradicts its --framework pytorch\n")


def test_an_all_skip_run_says_why_and_what_to_do(tmp_path, capsys):
    # A dump.json copied without its dump_tensor_data/: every API SKIP, exit 0, and the console said nothing.
    (tmp_path / "d").mkdir()
    dump = tmp_path / "d" / "dump.json"
    dump.write_bytes(MLP.read_bytes())
    code, out, _ = run(capsys, "run_ut", "-api_info", str(dump), "-o", str(tmp_path / "o"), "-q")
    assert code == 3  # nothing was graded: not green in CI
    lines = out.splitlines()
    at = lines.index("  nothing was graded: every API is SKIP; why (the result CSV's Message has each):")
    assert lines[at + 1] == (
        "    6 APIs: tensor files not found (the first: Functional.linear.0.forward.input.0.pt: file not found in "
        f"{tmp_path / 'd' / 'dump_tensor_data'}): copy the dump's dump_tensor_data/ beside its dump.json, or add "
        "--random to generate inputs from the recorded statistics"
    )
    assert lines[at + 2].startswith("  report:")
    code, out, _ = run(capsys, "run_ut", "-api_info", str(dump), "-o", str(tmp_path / "o"), "-q", "--random")
    assert (
        code == 0 and "forward:  pass 6, warning 0, error 0, SKIP 0" in out and "SKIP; why" not in out
    )  # the fix works


def test_skip_reasons_are_counted_commonest_first_with_their_fixes(tmp_path):
    # Grouped by the reasons file's codes: the Messages are words of any kind (reworded, or a placeholder).
    from precheck.report.skips import describe_skips, skip_reasons

    rows = [("Mint.abs.0", "skip_other_framework", "any words"), ("Mint.relu.0", "skip_other_framework", "other")]
    rows += [(f"Torch.x{i}.0", "skip_unsupported", f"Torch.x{i} is new to precheck") for i in range(3)]
    rows += [(f"Torch.mm.{i}", "skip_inputs", f"a link out, file {i}") for i in range(2)]
    rows += [("Torch.ok.0", "passed", ""), ("Torch.old.0", None, "from an older precheck")]
    result = tmp_path / "accuracy_checking_result_20260101000000.csv"
    with open(result, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["API name", "Forward Test Success", "Backward Test Success", "Message"])
        writer.writerows(
            (name, "pass" if code == "passed" else "SKIP", "SKIP", message) for name, code, message in rows
        )
    lines = [
        {"row": f"{name}.forward.output.0", "reason": code, "standard": "", "ratio": None, "nonfinite": 0,
         "generated": False}
        for name, code, _ in rows if name != "Torch.old.0"
    ]  # fmt: skip
    sidecar = tmp_path / "accuracy_checking_reasons_20260101000000.jsonl"
    sidecar.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert describe_skips(*skip_reasons(result)) == [
        "  8 APIs SKIP; why (the result CSV's Message has each):",
        "    3 APIs: not supported (the first: Torch.x0 is new to precheck): precheck apis lists the APIs precheck "
        "checks",
        "    2 APIs: MindSpore APIs read as PyTorch's: add --framework mindspore (or precheck -f mindspore run_ut ...)",
        "    2 APIs: inputs that cannot be rebuilt (the first: a link out, file 0)",
        "    1 API: 1 other reasons",
    ]
    assert describe_skips(*skip_reasons(result), shown=4)[-1] == (
        "    1 API: no reason code recorded (rows of an older precheck): the result CSV's Message says why"
    )


@pytest.mark.parametrize("backend", ["inprocess", "process"])
def test_warnings_of_the_replayed_calls_stay_off_the_console(tmp_path, capfd, backend):
    # torch's deprecation of upsample_nearest, raised by the recorded call itself, broke the progress bar.
    from helpers import forward_rec, tensor_rec

    call = forward_rec(
        tensor_rec(shape=(1, 1, 2, 2)), kwargs={"scale_factor": 2}, output=[tensor_rec(shape=(1, 1, 4, 4))]
    )
    dump = tmp_path / "dump.json"
    dump.write_text(json.dumps({"task": "statistics", "level": "L1", "framework": "pytorch",
                                "data": {"Functional.upsample_nearest.0.forward": call}}))  # fmt: skip
    argv = ["run_ut", "-api_info", str(dump), "-o", str(tmp_path / "o"), "-q", "--backend", backend]
    assert main(argv) == 0
    out, err = capfd.readouterr()  # the descriptors: a worker process writes to them, not to sys.stderr
    assert "forward:  pass 1," in out and err == ""


def test_main_returns_to_a_caller_in_its_own_process_and_the_program_ends_with_its_code(tmp_path):
    """``precheck`` (the program) ends without the interpreter's teardown of torch once its rows are written;
    ``main()`` called by someone's own script returns the code to it, whose program goes on."""
    caller = (
        "import atexit, sys\n"
        "sys.argv = ['precheck', 'run_ut', '-api_info', sys.argv[1], '-o', sys.argv[2], '-q']\n"
        "from precheck.commands.cli import main\n"
        "atexit.register(lambda: print('exit handler ran'))\n"
        "print('returned', main())\n"
    )
    done = subprocess.run([sys.executable, "-c", caller, str(GPT2), str(tmp_path / "a")], capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0 and "returned 0" in done.stdout and "exit handler ran" in done.stdout, done.stderr
    program = subprocess.run([sys.executable, "-m", "precheck", "run_ut", "-api_info", str(GPT2), "-o",
                              str(tmp_path / "b"), "-q", "--fail-on", "error"], capture_output=True, text=True,
                             timeout=300)  # fmt: skip
    assert program.returncode == 1, program.stderr  # GPT-2's bf16 backward has errors: --fail-on's code, kept
    rows = next((tmp_path / "b").glob("accuracy_checking_result_*.csv")).read_text(encoding="utf-8").splitlines()
    assert len(rows) == 48 and program.stdout.startswith("precheck run_ut: 47 APIs")  # every row, and the summary
