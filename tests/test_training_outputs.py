"""A default run (--target device) also grades the outputs a tensor dump recorded: the kernel that ran in
training, which a replay on this machine does not run. tests/data/record/gpt_bf16_silu6_* is a GPT step whose
SiLU was rounded to 6 mantissa bits in training (make_fixtures.py); its fp32 and clean bf16 twins are beside it."""

from __future__ import annotations

from pathlib import Path

from precheck.commands.cli import main
from precheck.execution.options import CheckOptions
from precheck.frames import load
from precheck.report.advice import advise
from precheck.run_ut import run_ut

REC = Path(__file__).parent / "data" / "record"
SILU6 = next((REC / "gpt_bf16_silu6_tensor").glob("step0/*/dump.json"))
CLEAN = next((REC / "gpt_bf16_tensor").glob("step0/*/dump.json"))


def test_a_recorded_output_worse_than_an_honest_kernel_is_an_error_of_a_default_run(tmp_path, capsys):
    # The replay on this CPU computes a correct SiLU: run_ut's default reported 0 errors.
    assert main(["run_ut", "-api_info", str(SILU6), "-o", str(tmp_path), "-q", "-d", "cpu"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("  kernels: cpu's (each call replayed), and the training device's (the outputs")
    assert out[2].startswith("  forward:  pass ") and out[2].endswith("error 1, SKIP 0")
    worst = out[out.index("  worst APIs:") + 1]
    assert worst.startswith(
        "    Functional.silu.0 forward.output.0: its recorded value is worse than an honest bf16 kernel: error 4."
    )
    assert worst.endswith("the kernel that ran in training (or the program around it) computed it")  # not cut
    frame = load(tmp_path)
    silu = frame[frame["call"] == "Functional.silu.0"].set_index("direction")
    assert silu.loc["forward", "status"] == "error" and silu.loc["forward", "forward_status"] == "error"
    assert "this machine's replay on cpu is not (" in silu.loc["forward", "message"]
    assert bool(silu.loc["forward", "recorded"]) and frame["recorded"].sum() == 1
    assert frame[frame["status"] == "error"]["call"].tolist() == ["Functional.silu.0"]
    findings = {f.rule: f for f in advise(frame)}
    assert findings["recorded_beyond_rounding"].rows == ("Functional.silu.0.forward.output.0",)
    assert "--target recorded" in findings["recorded_beyond_rounding"].action and "beyond_rounding" not in findings


def test_a_clean_recording_gains_no_error_and_a_recorded_run_reproduces_what_was_graded(tmp_path):
    clean = run_ut(CLEAN, tmp_path / "clean", device="cpu", workers=1)
    assert clean.counts["error"] == 0 and not load(clean.details_path)["recorded"].any()
    recorded = run_ut(SILU6, tmp_path / "rec", device="cpu", workers=1, options=CheckOptions(target="recorded"))
    frame = load(recorded.details_path)
    assert frame["recorded"].all()  # every row of --target recorded was graded on what the dump saved
    assert {f.rule for f in advise(frame)} >= {"recorded_beyond_rounding"}
    assert "beyond_rounding" not in {f.rule for f in advise(frame)}  # its advice was "reproduce with repro"


def test_the_console_says_whose_kernels_a_run_checks(tmp_path, capsys):
    assert main(["run_ut", "-api_info", str(SILU6), "-o", str(tmp_path), "-q", "--target", "recorded"]) == 0
    line = "  kernels: the training device's (the outputs the dump recorded); nothing is replayed here"
    assert capsys.readouterr().out.splitlines()[1] == line
    stats = next((REC / "gpt_bf16_silu6_statistics").glob("step0/*/dump.json"))
    assert main(["run_ut", "-api_info", str(stats), "-o", str(tmp_path / "s"), "-q", "-d", "cpu"]) == 0
    assert (
        capsys.readouterr()
        .out.splitlines()[1]
        .startswith(
            "  kernels: cpu's (each call replayed) only: a statistics dump saved no outputs of the training device's"
        )
    )
