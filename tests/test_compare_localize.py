"""compare's honest-kernel rule (precheck.compare.localize) on bug/clean twin pairs recorded with msprobe by
benchmarks/accumulation_record.py: one step recorded twice in the same dtype, once with a kernel that accumulates in
half precision. Their extra error stays below the tolerance, which named a later record (or none); the rule names the
bugged API, and the summary JSON, the records CSV, the console and the report say which rule named it."""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from precheck.compare import localize
from precheck.compare.dumps import compare_dumps
from tests.helpers import _rec, forward_rec
from tests.test_compare import compare, dump, outputs, run

# (bugged dump, clean twin, the bugged record, what the tolerance rule alone named)
TWINS = [
    ("acc_bf16_softmax_bf16", "acc_bf16_clean", "Functional.softmax.0.forward", "Torch.matmul.3.forward"),
    ("acc_fp16_softmax_fp16", "acc_fp16_clean", "Functional.softmax.0.forward", "Functional.layer_norm.0.backward"),
    ("acc_fp16_linear_fp16", "acc_fp16_clean", "Functional.linear.1.forward", "Torch.matmul.3.forward"),
]


@pytest.mark.parametrize(("bug", "clean", "bugged", "tolerance_first"), TWINS, ids=[t[0] for t in TWINS])
def test_half_precision_accumulation_bug_is_named_by_the_honest_kernel_rule(
    capsys, tmp_path, bug, clean, bugged, tolerance_first
):
    _, records, summary, out = compare(capsys, tmp_path, bug, clean, "--report")
    first, where = summary["first_divergent"], summary["localization"]
    assert first["name"] == bugged and first["rule"] == "honest kernel" and first["verdict"] == "suspect"
    assert "worse than an honest" in first["honest_kernel"] and "the bench's is not" in first["honest_kernel"]
    assert where["rule"] == "honest kernel" and where["tolerance_first"] == tolerance_first
    assert where["replayed_calls"] == 1  # the runs are identical up to the bug: one call graded, then named
    assert summary["suspects"][0]["name"] == bugged
    assert next(r for r in records if r["Record"] == bugged)["Verdict"] == "suspect"
    assert f"first divergent: {bugged}: each side graded against the float64 golden" in out
    assert "named by the honest kernel rule" in out
    page = next(tmp_path.glob("compare_report_*.html")).read_text(encoding="utf-8")
    assert "Named by the <b>honest kernel</b> rule" in page and f"First divergent record</b>: {bugged}" in page


def test_a_bench_worse_than_an_honest_kernel_is_not_the_targets_fault(capsys, tmp_path):
    """The twins swapped: the bug is on the bench's side, so no record is worse on the target only and the
    tolerance's record stands, named as such."""
    _, _, summary, out = compare(capsys, tmp_path, "acc_bf16_clean", "acc_bf16_softmax_bf16")
    where = summary["localization"]
    assert where["rule"] == "tolerance" and where["replayed_calls"] >= 1
    assert "no record graded worse than an honest kernel on the target only" in where["why"]
    assert summary["first_divergent"]["rule"] == "tolerance"
    assert summary["first_divergent"]["name"] == where["tolerance_first"] != "Functional.softmax.0.forward"
    assert "named by the tolerance rule" in out


def test_replays_stop_at_their_limit_and_say_so(tmp_path, monkeypatch):
    monkeypatch.setattr(localize, "MAX_REPLAYED", 0)
    result = compare_dumps(dump("acc_fp16_linear_fp16"), dump("acc_fp16_clean"), tmp_path)
    where = result.divergence.localization
    assert (
        where["rule"] == "tolerance"
        and where["replayed_calls"] == 0
        and "grades at most 0 calls, so the candidates after" in where["why"]
    )
    assert result.divergence.first.name == "Torch.matmul.3.forward"


@pytest.mark.parametrize(
    ("target", "bench", "mode"),
    [("bf16_statistics_gelu_bug", "fp32_statistics", "statistics"), ("fp32_md5_gelu_bug", "fp32_md5", "md5")],
)
def test_statistics_and_md5_dumps_keep_the_tolerance_rule_and_say_so(capsys, tmp_path, target, bench, mode):
    _, _, summary, out = compare(capsys, tmp_path, target, bench, "--report")
    where = summary["localization"]
    assert where["rule"] == "tolerance" and where["replayed_calls"] == 0
    assert where["why"] == f"a {mode} dump holds no tensors to grade against a golden: the tolerance rule alone"
    assert summary["first_divergent"]["rule"] == "tolerance"
    assert f"named by the tolerance rule: a {mode} dump holds no tensors" in out
    page = next(tmp_path.glob("compare_report_*.html")).read_text(encoding="utf-8")
    assert "Named by the <b>tolerance</b> rule" in page


def test_identical_runs_replay_nothing(capsys, tmp_path):
    _, _, summary, out = compare(capsys, tmp_path, "acc_fp16_clean", "acc_fp16_clean")
    assert summary["first_divergent"] is None and summary["localization"]["candidates"] == 0
    assert "the two runs agree everywhere" in out and "named by" not in out
    assert outputs(tmp_path)[2]["localization"]["replayed_calls"] == 0


def test_what_the_rule_graded_is_said_where_it_named_nothing(capsys, tmp_path):
    """Layer norm written out by hand against the fused one: records deviate within rounding, each is graded, none
    is worse on the target only; the console and the summary say what was graded rather than nothing."""
    _, _, summary, out = compare(capsys, tmp_path, "fp32_tensor_unfused_ln", "fp32_tensor")
    where = summary["localization"]
    assert summary["first_divergent"] is None and where["rule"] == "tolerance" and where["replayed_calls"] > 0
    assert where["why"].endswith(": no record parts the runs")
    assert "  the honest-kernel rule: no record graded worse than an honest kernel on the target only" in out


def test_a_bench_record_that_cannot_be_graded_names_nothing(capsys, tmp_path):
    """Where the bench's side of a record cannot be graded (its input file is gone), nothing says the bench is no
    worse than an honest kernel: the record is not named."""
    bench = tmp_path / "bench"
    shutil.copytree(dump("acc_bf16_clean").parent, bench)
    (bench / "dump_tensor_data" / "Functional.softmax.0.forward.input.0.pt").unlink()
    code, out, err = run(capsys, "compare", "-target", str(dump("acc_bf16_softmax_bf16")), "-bench",
                         str(bench / "dump.json"), "-o", str(tmp_path / "out"))  # fmt: skip
    assert code == 0, err
    summary = outputs(tmp_path / "out")[2]
    assert summary["localization"]["rule"] == "tolerance"
    assert (summary["first_divergent"] or {}).get("name") != "Functional.softmax.0.forward"


def _encoded(value, data: Path, name: str) -> dict:
    """A tensor as its file and statistics (tests/helpers._rec), any other argument as msprobe writes a value."""
    if isinstance(value, torch.Tensor):
        return _rec(value, data, name)
    return {"type": type(value).__name__, "value": value}


def hostile_twins(root: Path, calls: list[tuple[str, list, dict, torch.Tensor, torch.Tensor]]) -> tuple[Path, Path]:
    """Target and bench tensor dumps of the same ``calls`` (name, args, kwargs, the target's output, the bench's)
    from the same input files; outputs that differ by less than rounding make every call a candidate the
    honest-kernel rule replays."""
    found = []
    for side in (0, 1):
        folder = root / ("target", "bench")[side]
        data = folder / "dump_tensor_data"
        data.mkdir(parents=True)
        records = {}
        for name, args, kwargs, *outs in calls:
            key = f"{name}.forward"
            encoded = [_encoded(a, data, f"{key}.input.{i}.pt") for i, a in enumerate(args)]
            named = {k: _encoded(v, data, f"{key}.input.{k}.pt") for k, v in kwargs.items()}
            output = [_rec(outs[side], data, f"{key}.output.0.pt")]
            records[key] = forward_rec(*encoded, kwargs=named, output=output)
        doc = {"task": "tensor", "level": "L1", "framework": "pytorch", "dump_data_dir": None, "data": records}
        (folder / "dump.json").write_text(json.dumps(doc), encoding="utf-8")
        found.append(folder / "dump.json")
    return found[0], found[1]


_X = torch.linspace(-2, 2, 16)
# tanh, the bench's output off by 2**-20 (within the tolerance, worse than an honest kernel) and the target's not:
# graded on the target's side only, and named by neither rule
TANH = ("Torch.tanh.0", [_X], {}, torch.tanh(_X), torch.tanh(_X) * (1 + 2**-20))


def test_a_segfaulting_candidate_is_not_graded_and_a_slow_one_is_cut(tmp_path):
    """An unsafe=True segment_reduce whose lengths point past its data segfaults torch: replayed in the compare's
    own process, it killed compare (exit 139, nothing printed). matrix_power(A, 2**62) of a stride-0 2000x2000
    matrix (a file of one element) squares it 62 times in float64, and 50 such records kept compare busy past 120 s.
    Now the first runs in a worker process, as in run_ut, whose death is the call's "not graded" line; the next
    candidate is graded; the third is cut at --timeout, not graded, and the replay stops there (its helper may
    still run: more such records would hold compare once each)."""
    segment_reduce = (
        "Torch.segment_reduce.0",
        [torch.ones(8), "sum"],
        {"lengths": torch.tensor([10**9, 10**9]), "unsafe": True},
        torch.tensor([1.0, 2.0]) * (1 + 2**-20),
        torch.tensor([1.0, 2.0]),
    )
    power = ("Torch.matrix_power.0", [torch.full((1,), 0.5).expand(2000, 2000), 2**62], {})
    power += (torch.ones(1).expand(2000, 2000) * (1 + 2**-20), torch.ones(1).expand(2000, 2000))
    target, bench = hostile_twins(tmp_path, [segment_reduce, TANH, power, ("Torch.tanh.1", *TANH[1:])])
    argv = ["compare", "-target", str(target), "-bench", str(bench), "-o", str(tmp_path / "out"), "--timeout", "2"]
    done = subprocess.run([sys.executable, "-m", "precheck", *argv], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, (done.returncode, done.stderr)
    summary = outputs(tmp_path / "out")[2]
    where = summary["localization"]
    assert where["not_graded"] == [
        {"record": "Torch.segment_reduce.0", "side": "target", "why": "worker crashed: signal 11 (SIGSEGV)"},
        {"record": "Torch.matrix_power.0", "side": "target", "why": "timed out after 2 s; not graded"},
    ]
    assert where["replayed_calls"] == 3 and "stopped at Torch.matrix_power.0, past its time limit" in where["why"]
    assert summary["first_divergent"] is None and where["rule"] == "tolerance"
    assert "  not graded: Torch.segment_reduce.0 (target): worker crashed: signal 11 (SIGSEGV)" in done.stdout
    assert "  not graded: Torch.matrix_power.0 (target): timed out after 2 s; not graded" in done.stdout


def test_a_candidate_above_max_memory_is_refused_before_anything_is_built(capsys, tmp_path):
    """histc(bins=5e7) in a dump of a few KB took 1.8 GB of the compare's memory, with no --max-memory to refuse
    it; under --max-memory it is refused from its arguments, as run_ut refuses it, and not graded."""
    histc = ("Torch.histc.0", [_X], {"bins": 5 * 10**7}, torch.ones(4) * (1 + 2**-20), torch.ones(4))
    target, bench = hostile_twins(tmp_path, [histc, TANH])
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # bytes (Linux counts KiB)
    code, out, err = run(capsys, "compare", "-target", str(target), "-bench", str(bench), "-o",
                         str(tmp_path / "out"), "--max-memory", "256M")  # fmt: skip
    assert code == 0, err
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - peak < 2**29  # no 1.8 GB histogram
    where = outputs(tmp_path / "out")[2]["localization"]
    (refused,) = where["not_graded"]
    assert refused["record"] == "Torch.histc.0" and "above --max-memory 0.25 GiB" in refused["why"]
    assert "output of 5e+07 elements" in refused["why"] and where["replayed_calls"] == 2
    assert "  not graded: Torch.histc.0 (target): needs about" in out
