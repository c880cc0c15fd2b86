"""Bounds a hostile dump or run must not get past (issue 46, round 4): a forged rank number or process group, a
size given as a 0-dim tensor, a replay with no end, a console that cannot be written. Memory is measured in a
child process of its own (its peak RSS, from os.wait4), under an address-space limit that turns a runaway
allocation into a MemoryError, never into swap."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import forward_rec, tensor_rec

from precheck.core.reasons import Reason
from precheck.execution.options import CheckOptions
from precheck.frames import reasons
from precheck.run_files.csv_files import read_csv_rows
from precheck.run_ut import run_ut

STEP = Path(__file__).parent / "data" / "record" / "ddp_gloo" / "step0"
ROOT = Path(__file__).parent.parent
ADDRESS_SPACE = 6 * 2**30  # torch's import maps about 1 GiB; past this an allocation fails at once


def precheck(*args: str, tmp: Path) -> tuple[int, str, str, float]:
    """``python -m precheck ARGS`` in a child process: its exit code, stdout, stderr and peak RSS in MiB."""

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))

    with open(tmp / "stdout", "w+") as out, open(tmp / "stderr", "w+") as err:
        child = subprocess.Popen(
            [sys.executable, "-m", "precheck", *args], stdout=out, stderr=err, preexec_fn=limited, cwd=ROOT
        )
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        return child.returncode, out.read(), err.read(), usage.ru_maxrss / 1024


def _rows(run: Path) -> dict[str, dict[str, str]]:
    [result] = run.glob("accuracy_checking_result_*.csv")
    return {row["API name"]: row for row in read_csv_rows(result)[1]}


def _run_step(step: Path, out: Path, *more: str) -> tuple[int, str, str, float]:
    common = ("-d", "cpu", "-q", "--workers", "1", "--backend", "inprocess")
    return precheck("run_ut", "-api_info", str(step), "-o", str(out), *common, *more, tmp=out.parent)


def test_a_rank_number_far_past_the_dumps_is_a_missing_rank_not_a_list_of_the_world(tmp_path):
    """rank0 and rank999999999: the world is 10^9 ranks, which no list may hold (MemoryError, exit 70 before)."""
    step = tmp_path / "step0"
    shutil.copytree(STEP / "rank0", step / "rank0")
    shutil.copytree(STEP / "rank1", step / "rank999999999")
    code, _, err, peak = _run_step(step, tmp_path / "out")
    assert code == 0, err[-2000:]
    assert peak < 1024, peak
    row = _rows(tmp_path / "out" / "rank0")["Distributed.all_reduce.0"]
    assert row["Forward Test Success"] == "SKIP"
    assert "rank 1 has no dump in" in row["Message"]
    assert "999999998 of 1000000000 ranks of its group missing" in row["Message"]
    [details] = (tmp_path / "out" / "rank0").glob("accuracy_checking_details_*.csv")
    assert reasons.read(details)["Distributed.all_reduce.0.forward.output.0"].reason == Reason.SKIP_MISSING_RANK


def _with_group(step: Path, call: str, ranks: list[int], numel: int) -> None:
    """Give each rank's record of ``call`` a process group of ``ranks``, as the recorder writes one, and a tensor
    of ``numel`` ones."""
    import torch

    for rank in ("rank0", "rank1"):
        path = step / rank / "dump.json"
        doc = json.loads(path.read_text(encoding="utf-8"))
        record = doc["data"][f"{call}.forward"]
        record["input_kwargs"]["group"] = {"type": "torch.ProcessGroup", "group_ranks": ranks}
        for spec in (record["input_args"][0], record["output"][0]):
            spec["shape"] = [numel]
            torch.save(torch.ones(numel), step / rank / "dump_tensor_data" / spec["data_name"])
        path.write_text(json.dumps(doc), encoding="utf-8")


def test_a_group_naming_a_rank_twice_is_a_malformed_record_and_the_rest_is_graded(tmp_path):
    """group_ranks holding rank 0 40,000 times (0.3 MB of dump.json) stacked 40,000 float64 copies of its tensor
    (2.8 GB peak under --max-memory 256M before): it is no process group, so its call is SKIP, saying so."""
    step = tmp_path / "step0"
    shutil.copytree(STEP, step)
    _with_group(step, "Distributed.all_reduce.0", [0] * 40_000, 2000)  # 1.5 GB peak before
    code, _, err, peak = _run_step(step, tmp_path / "out", "--max-memory", "256M")
    assert code == 0, err[-2000:]
    assert peak < 768, peak
    for rank in ("rank0", "rank1"):
        rows = _rows(tmp_path / "out" / rank)
        row = rows["Distributed.all_reduce.0"]
        assert row["Forward Test Success"] == "SKIP"
        assert "group_ranks name rank 0 more than once" in row["Message"], row["Message"]
        assert rows["Distributed.broadcast.0"]["Forward Test Success"] == "pass"


def test_a_collective_whose_golden_is_above_max_memory_is_refused_before_it_loads(tmp_path):
    """The golden holds every member's tensors in float64: its size is known from the records before any file is
    read, and a collective above --max-memory is SKIP saying how much, as run_ut's calls are."""
    step = tmp_path / "step0"
    shutil.copytree(STEP, step)
    for rank in ("rank0", "rank1"):
        path = step / rank / "dump.json"
        doc = json.loads(path.read_text(encoding="utf-8"))
        for spec in doc["data"]["Distributed.all_reduce.0.forward"]["input_args"]:
            spec["shape"] = [2**16, 2**12]  # 1 GiB of float32 each, as the record says; its file is never read
        path.write_text(json.dumps(doc), encoding="utf-8")
    code, _, err, _ = _run_step(step, tmp_path / "out", "--max-memory", "256M")
    assert code == 0, err[-2000:]
    row = _rows(tmp_path / "out" / "rank0")["Distributed.all_reduce.0"]
    assert row["Forward Test Success"] == "SKIP"
    assert "above --max-memory 0.25 GiB" in row["Message"], row["Message"]
    [details] = (tmp_path / "out" / "rank0").glob("accuracy_checking_details_*.csv")
    assert reasons.read(details)["Distributed.all_reduce.0.forward.output.0"].reason == Reason.SKIP_MEMORY


_SIZE = 10**12  # elements no machine holds: an allocation of them fails at once, so the test never holds them
# Calls whose size is a 0-dim integer tensor, read by torch as the number it holds.
SIZED_BY_A_TENSOR = {
    "Tensor.new_zeros.0": lambda t: ([tensor_rec(shape=(2,)), t], {}),
    "Tensor.repeat.0": lambda t: ([tensor_rec(shape=(2,)), t], {}),
    "Torch.arange.0": lambda t: ([t], {}),
}


@pytest.mark.parametrize("task", ["tensor", "statistics", "forged statistics"])
def test_a_size_given_as_a_0_dim_integer_tensor_is_read_as_its_number(write_dump, tmp_path, task):
    """x.new_zeros(t), x.repeat(t), torch.arange(t) with t a 0-dim int64 tensor slipped past the size rules
    (2.6-3.4 GB peak under --max-memory 256M from a 44 KB dump, each row pass). t counts as the number it holds:
    its recorded Max, and its file's value once read (a forged Max of 1 hides nothing)."""
    import torch

    data = tmp_path / "dump_tensor_data"
    data.mkdir()
    records = {}
    for name, args_of in SIZED_BY_A_TENSOR.items():
        size = tensor_rec("torch.int64", (), **dict.fromkeys(("Max", "Min", "Mean", "Norm"), _SIZE))
        if task != "statistics":
            size["data_name"] = f"{name}.size.pt"
            torch.save(torch.tensor(_SIZE), data / size["data_name"])
        if task == "forged statistics":
            size.update(dict.fromkeys(("Max", "Min", "Mean", "Norm"), 1))
        args, kwargs = args_of(size)
        for spec in args[:-1]:
            if task != "statistics":
                spec["data_name"] = f"{name}.self.pt"
                torch.save(torch.ones(spec["shape"]), data / spec["data_name"])
        records[f"{name}.forward"] = forward_rec(*args, kwargs=kwargs, output=[tensor_rec(shape=(4,))])
    dump = write_dump(records, task="statistics" if task == "statistics" else "tensor")
    options = CheckOptions(max_memory=2**28)
    results = run_ut(dump, tmp_path / "out", device="cpu", workers=1, backend="inprocess", options=options).results
    assert {r.name for r in results} == set(SIZED_BY_A_TENSOR)
    for result in results:
        assert result.forward == "SKIP", (result.name, result.forward, result.message)
        assert "above --max-memory 0.25 GiB: its arguments ask for an output of " in result.message, result.message


# torch.arange with a 0-dim float tensor as its end (1e12) or its step (1e-12 over [0, 1)): 10^12 elements either way
ARANGE_BY_A_FLOAT = {"Torch.arange.0": (float(_SIZE), None), "Torch.arange.1": (1.0, 1.0 / _SIZE)}


@pytest.mark.parametrize("task", ["tensor", "statistics"])
def test_a_0_dim_float_tensor_as_aranges_end_or_step_counts_as_its_value(write_dump, tmp_path, task):
    """torch.arange(t) with t = tensor(1e12), or arange(0, 1, t) with t = tensor(1e-12), peaked at 3.3 GB under
    --max-memory 256M and was graded pass (only 0-dim integer tensors were read as numbers). Any 0-dim tensor in a
    size, end or step place counts as its value."""
    import torch

    data = tmp_path / "dump_tensor_data"
    data.mkdir()
    records = {}
    for name, (end, step) in ARANGE_BY_A_FLOAT.items():
        value = end if step is None else step
        spec = tensor_rec("torch.float64", (), **dict.fromkeys(("Max", "Min", "Mean", "Norm"), value))
        if task == "tensor":
            spec["data_name"] = f"{name}.t.pt"
            torch.save(torch.tensor(value, dtype=torch.float64), data / spec["data_name"])
        args = [spec] if step is None else [{"type": "int", "value": 0}, {"type": "float", "value": end}, spec]
        records[f"{name}.forward"] = forward_rec(*args, output=[tensor_rec("torch.float32", (4,))])
    dump = write_dump(records, task=task)
    options = CheckOptions(max_memory=2**28)
    results = run_ut(dump, tmp_path / "out", device="cpu", workers=1, backend="inprocess", options=options).results
    assert {r.name for r in results} == set(ARANGE_BY_A_FLOAT)
    for result in results:
        assert result.forward == "SKIP", (result.name, result.forward, result.message)
        assert "above --max-memory 0.25 GiB: its arguments ask for an output of " in result.message, result.message


def test_a_proc_folder_beside_the_ranks_is_its_own_run_and_the_ranks_collectives_are_graded(tmp_path):
    """A launcher that calls an API in its own process while it starts the ranks leaves a proc* dump beside
    rank0 and rank1: every collective of the ranks was SKIP before. The ranks are graded; the proc dump is run on
    its own (its collectives SKIP, as a single dump's are)."""
    from precheck.dump.steps import find_dumps
    from precheck.ranks import run_step

    step = tmp_path / "step0"
    shutil.copytree(STEP, step)
    shutil.copytree(STEP / "rank0", step / "proc4242")
    summary = run_step(find_dumps(step), tmp_path / "out", device="cpu", workers=1, backend="inprocess")
    assert sorted(summary.ranks) == ["proc4242", "rank0", "rank1"]
    for rank in ("rank0", "rank1"):
        rows = _rows(tmp_path / "out" / rank)
        assert rows["Distributed.all_reduce.0"]["Forward Test Success"] == "pass", rows["Distributed.all_reduce.0"]
        assert rows["Distributed.broadcast.0"]["Forward Test Success"] == "pass"
    alone = _rows(tmp_path / "out" / "proc4242")
    assert alone["Distributed.all_reduce.0"]["Forward Test Success"] == "SKIP"
    assert alone["Functional.linear.0"]["Forward Test Success"] == "pass"


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_a_console_that_cannot_be_written_leaves_the_programs_exit_code(tmp_path):
    """record --check with its stdout on /dev/full exited 2 though the training exited 0: precheck's own lines
    are lost, the recording and the exit code are the program's."""
    (tmp_path / "train.py").write_text(
        "import torch\n"
        "w = torch.nn.Parameter(torch.ones(4)); opt = torch.optim.SGD([w], lr=0.1)\n"
        "for _ in range(2):\n"
        "    (w * 2).sum().backward(); opt.step(); opt.zero_grad()\n"
    )
    cmd = [sys.executable, "-m", "precheck", "record", "--check", "-o", "dump", "--", sys.executable, "train.py"]
    with open("/dev/full", "w") as full:
        done = subprocess.run(cmd, stdout=full, stderr=subprocess.PIPE, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "No space left" not in done.stderr
    assert list((tmp_path / "dump").glob("step0/*/dump.json"))


def test_a_spent_replay_budget_stops_compares_replay_and_its_summary_says_where(tmp_path):
    """compare's honest-kernel replay had no total budget: 50 matrix_power(2000x2000, 2**62) records, each under
    its own limit, held it past 360 s with no summary. Once --replay-budget is spent the replay stops, and the
    summary is written, saying where it stopped."""
    from precheck.compare.dumps import compare_dumps
    from tests.test_compare_localize import TANH, hostile_twins

    target, bench = hostile_twins(tmp_path, [TANH, ("Torch.tanh.1", *TANH[1:])])
    result = compare_dumps(target, bench, tmp_path / "out", replay_budget=1e-9)
    where = json.loads(result.summary_path.read_text(encoding="utf-8"))["localization"]
    assert result.complete and where["replayed_calls"] == 0 and where["replay_budget"] == 1e-9
    assert "stopped at Torch.tanh.0, the replay's time budget of 1e-09 s spent" in where["why"], where["why"]


def test_a_call_never_runs_past_the_replay_budget(tmp_path):
    """A matrix power that would run for minutes is cut where the budget ends, not at its own limit: the
    candidate before it is graded, and the summary says how far the replay reached and where it stopped."""
    import torch

    from tests.test_compare_localize import TANH, hostile_twins

    power = ("Torch.matrix_power.0", [torch.full((1,), 0.5).expand(4000, 4000), 2**62], {})
    power += (torch.ones(1).expand(4000, 4000) * (1 + 2**-20), torch.ones(1).expand(4000, 4000))
    target, bench = hostile_twins(tmp_path, [TANH, power, ("Torch.tanh.1", *TANH[1:])])
    argv = ["compare", "-target", str(target), "-bench", str(bench), "-o", str(tmp_path / "out")]
    done = subprocess.run(
        [sys.executable, "-m", "precheck", *argv, "--replay-budget", "20"], capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-2000:]
    [summary] = (tmp_path / "out").glob("compare_summary_*.json")
    where = json.loads(summary.read_text(encoding="utf-8"))["localization"]
    assert where["graded_up_to"] == "Torch.tanh.0.forward" and where["replayed_calls"] == 2
    assert "stopped at Torch.matrix_power.0, the replay's time budget of 20 s spent" in where["why"], where["why"]
    assert where["not_graded"][0]["record"] == "Torch.matrix_power.0"


def test_a_matrix_powers_cost_counts_its_exponent():
    """matrix_power(A, 2**62) is 124 products of A's size: its cost and time limit follow them, not A's elements."""
    import torch

    from precheck.dump.decode import Stats, TensorSpec
    from precheck.dump.records import Case
    from precheck.execution.limits import work

    a = TensorSpec(torch.float32, (2000, 2000), Stats(1.0, 0.0, 0.5, 1.0), data_name="a.pt")
    square, huge = (Case("Torch.matrix_power.0", "Torch.matrix_power", 0, (a, n), {}, (a,)) for n in (2, 2**62))
    assert work(square) == 2 * 2 * 2000**3
    assert work(huge) == 62 * 2 * 2 * 2000**3
    by_name = Case("Torch.linalg.matrix_power.0", "Torch.linalg.matrix_power", 0, (a,), {"n": 2**62}, (a,))
    assert work(by_name) == work(huge)


SKIPPING = """
import torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu")
for i in range(8):
    x = torch.randn(2, 4)
    if i < 6:
        x[0, 0] = float("inf")  # inf in the gradients: the scaler skips optimizer.step(), as early fp16 steps do
    loss = F.mse_loss(model(x), torch.randn(2, 1))
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    opt.zero_grad()
print(model.weight.sum().item().hex(), scaler.get_scale())
"""


def test_a_step_a_grad_scaler_skipped_is_a_step_of_its_own(tmp_path):
    """Six iterations whose optimizer step a GradScaler skipped were one "step 0" of 78 records under precheck
    record (mse_loss.0 ... .5): each is a step, as msprobe's users count them, and the program's numbers stay."""
    (tmp_path / "train.py").write_text(SKIPPING)
    plain = subprocess.run([sys.executable, "train.py"], capture_output=True, text=True, cwd=tmp_path, check=True)
    cmd = [sys.executable, "-m", "precheck", "record", "-o", "dump", "--steps", "0", "6", "--"]
    done = subprocess.run([*cmd, sys.executable, "train.py"], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[0] == plain.stdout.strip()
    names = {}
    for step in ("step0", "step6"):
        [dump] = (tmp_path / "dump" / step).glob("*/dump.json")
        names[step] = [k for k in json.loads(dump.read_text(encoding="utf-8"))["data"] if "mse_loss" in k]
    assert names["step0"] == names["step6"] == ["Functional.mse_loss.0.forward", "Functional.mse_loss.0.backward"]


@pytest.mark.parametrize("left", ["empty", "torn"])
def test_a_rank_killed_mid_step_is_left_out_and_the_others_are_graded(tmp_path, left):
    """One rank killed mid-step leaves a 0-byte (or torn) dump.json: the step was refused as a whole (exit 2, "file
    is empty") and rank 0 was never graded. The rank is left out, said so in one line with the likely cause, its
    collectives are SKIP as a missing rank's, and the other rank's own calls are graded."""
    step = tmp_path / "step0"
    shutil.copytree(STEP, step)
    text = (step / "rank1" / "dump.json").read_text(encoding="utf-8")
    (step / "rank1" / "dump.json").write_text("" if left == "empty" else text[: len(text) // 2], encoding="utf-8")
    code, out, err, _ = _run_step(step, tmp_path / "out")
    assert code == 0, err[-2000:]
    assert not (tmp_path / "out" / "rank1").exists()
    rows = _rows(tmp_path / "out" / "rank0")
    assert rows["Functional.linear.0"]["Forward Test Success"] == "pass"
    collective = rows["Distributed.all_reduce.0"]
    assert collective["Forward Test Success"] == "SKIP" and "rank 1 has no dump" in collective["Message"]
    said = [line for line in (out + err).splitlines() if "rank1: left out, not graded:" in line]
    assert len(said) == 1, out + err
    if left == "empty":
        assert said[0].endswith(
            f"{step}/rank1/dump.json is empty (0 bytes): its process likely ended before the dump was written "
            "(killed or crashed mid-step, or still running)"
        )
        assert "rank1 left out: " in collective["Message"] and "is empty (0 bytes)" in collective["Message"]


def test_a_step_whose_every_dump_is_unreadable_is_refused_in_one_line(tmp_path):
    step = tmp_path / "step0"
    shutil.copytree(STEP, step)
    for rank in ("rank0", "rank1"):
        (step / rank / "dump.json").write_text("", encoding="utf-8")
    code, out, err, _ = _run_step(step, tmp_path / "out")
    assert code == 2 and err == f"precheck: error: {step}/rank0/dump.json: not valid JSON: the file is empty (byte 0)\n"
