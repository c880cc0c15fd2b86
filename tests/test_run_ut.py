"""run_ut end to end on the real dumps and on crafted ones: CSV rows, columns, statuses and order."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
import torch

from precheck.commands.cli import main
from precheck.execution import limits
from precheck.run_files.csv_files import DETAILS_HEADER, RESULT_HEADER
from precheck.run_ut import run_ut
from precheck.scheduling import costs

DATA = Path(__file__).parent / "data"
MLP = DATA / "mlp_fp32_tensor/step0/proc8486/dump.json"
GPT2 = DATA / "gpt2_bf16_tensor/step0/proc8493/dump.json"
GPT2_STATS = DATA / "gpt2_bf16_statistics/step0/proc8497/dump.json"


def read_csv(path: Path) -> list[list[str]]:
    raw = path.read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf"), "msprobe CSVs start with a UTF-8 BOM"
    with open(path, encoding="utf-8-sig", newline="") as f:
        return list(csv.reader(f))


def forward_names(dump: Path) -> list[str]:
    data = json.loads(dump.read_text())["data"]
    return [k.removesuffix(".forward") for k in data if k.endswith(".forward")]


def test_mlp_fp32_is_pass_pass_on_every_row_in_dump_order(tmp_path):
    summary = run_ut(MLP, tmp_path, device="cpu")
    result = read_csv(summary.result_path)
    assert result[0] == RESULT_HEADER
    assert [r[0] for r in result[1:]] == forward_names(MLP)
    assert all(r[1:3] == ["pass", "pass"] for r in result[1:]), result
    details = read_csv(summary.details_path)
    assert details[0] == DETAILS_HEADER and len(DETAILS_HEADER) == 23
    names = [r[0] for r in details[1:]]
    # linear.0's input x does not require grad: only weight (1) and bias (2) have gradient rows.
    assert "Functional.linear.0.backward.output.1" in names and "Functional.linear.0.backward.output.2" in names
    assert "Functional.linear.0.backward.output.0" not in names
    assert names.count("Functional.layer_norm.0.backward.output.0") == 1
    assert all(len(r) == 23 for r in details)


def test_gpt2_bf16_tensor_grades_every_api_random_ones_by_their_law(tmp_path):
    summary = run_ut(GPT2, tmp_path, device="cpu")
    rows = read_csv(summary.result_path)[1:]
    assert [r[0] for r in rows] == forward_names(GPT2)
    details = read_csv(summary.details_path)[1:]
    statistical = {
        r[0].split(".forward.")[0].split(".backward.")[0]
        for r in details
        if r[22].startswith("random op, checked statistically")
    }
    # 5 dropouts and 2 attentions with dropout_p > 0 draw masks: checked by the law of their outputs.
    assert len(statistical) == 7
    rows_by = {r[0]: r[1:3] for r in rows}.__getitem__
    for name, forward, _, message in rows:
        if "dropout" in name:
            assert name in statistical and rows_by(name) == ["pass", "pass"], (name, message)
        elif "scaled_dot_product_attention" in name:
            assert name in statistical and rows_by(name) == ["pass", "SKIP"], (name, message)
            assert message == (
                "backward: not checked (the gradients of a random call are checked for the dropout "
                "family on a device target)"
            )
        else:
            assert forward in ("pass", "warning"), (name, forward, message)
    # bf16 outputs against a float64 golden carry bf16 rounding: most are warnings, none are errors.
    assert summary.counts["error"] == 0 and summary.counts["warning"] > 0
    addmm = next(r for r in details if r[0] == "Torch.addmm.0.forward.output.0")
    assert addmm[1:4] == ["torch.float64", "torch.bfloat16", "(32, 192)"]
    assert float(addmm[4]) > 0.999 and addmm[21] == "warning"
    # Backward of addmm: gradients of bias, mat1 and mat2, numbered by positional tensor.
    assert {f"Torch.addmm.0.backward.output.{i}" for i in range(3)} <= {r[0] for r in details}


def test_statistics_dump_is_graded_from_generated_inputs(tmp_path):
    summary = run_ut(GPT2_STATS, tmp_path, device="cpu")
    rows = read_csv(summary.result_path)[1:]
    assert [r[0] for r in rows] == forward_names(GPT2_STATS)
    for name, forward, _, message in rows:
        assert forward in ("pass", "warning"), (name, forward, message)
        assert "inputs generated from statistics (seed 0)" in message


def test_max_memory_turns_big_records_into_skip_rows(tmp_path):
    from precheck.execution.options import CheckOptions

    summary = run_ut(MLP, tmp_path, device="cpu", options=CheckOptions(max_memory=4096))
    rows = {r[0]: r for r in read_csv(summary.result_path)[1:]}
    # linear.0 holds 4x16 + 32x16 + 32 fp32 inputs plus a 4x32 gradient: far above 4 KiB.
    assert rows["Functional.linear.0"][1] == "SKIP"
    assert "above --max-memory 3.81e-06 GiB" in rows["Functional.linear.0"][3]
    assert rows["Tensor.sum.0"][1] == "pass"  # a (4, 8) input and a scalar gradient fit


def test_random_flag_generates_inputs_even_in_a_tensor_dump(tmp_path):
    from precheck.execution.options import CheckOptions

    dump = copy_dump(MLP, tmp_path / "dump")
    (dump.parent / "dump_tensor_data" / "Functional.gelu.0.forward.input.0.pt").unlink()
    summary = run_ut(dump, tmp_path / "out", device="cpu", options=CheckOptions(force_random=True, seed=7))
    rows = read_csv(summary.result_path)[1:]
    assert all(r[1] == "pass" and "inputs generated from statistics (seed 7)" in r[3] for r in rows), rows


def test_pool_run_writes_the_same_rows_in_dump_order(tmp_path, monkeypatch):
    pooled = run_ut(MLP, tmp_path / "pool", device="cpu", workers=2, backend="process")
    serial = run_ut(MLP, tmp_path / "serial", device="cpu", workers=1)
    assert read_csv(pooled.result_path) == read_csv(serial.result_path)
    assert read_csv(pooled.details_path) == read_csv(serial.details_path)


def _heavy_tail_dump(path: Path) -> Path:
    """Two small records, then an LLaMA-sized LM head (100 GFLOP with its backward), then a small matmul:
    the order of a training step's records, whose heaviest call comes late."""
    from helpers import forward_rec, tensor_rec

    bf16 = "torch.bfloat16"
    x, w, out = (2, 256, 1024), (32000, 1024), (2, 256, 32000)
    head = forward_rec(tensor_rec(bf16, x, requires_grad=True), tensor_rec(bf16, w, requires_grad=True),
                       output=[tensor_rec(bf16, out, requires_grad=True)])  # fmt: skip
    small = forward_rec(tensor_rec(), tensor_rec(shape=(3, 2)), output=[tensor_rec(shape=(2, 2))])
    data = {
        "Functional.relu.0.forward": forward_rec(tensor_rec()),
        "Torch.matmul.0.forward": small,
        "Functional.linear.0.forward": head,
        "Functional.linear.0.backward": {"input": [tensor_rec(bf16, out)], "output": [tensor_rec(bf16, x), None]},
        "Torch.matmul.1.forward": small,
    }
    path.write_text(json.dumps({"task": "statistics", "level": "L1", "framework": "pytorch", "data": data}))
    return path


def test_a_pool_starts_the_heaviest_matmul_first_and_the_rest_in_dump_order(tmp_path):
    from precheck.dump.records import load_dump

    cases = load_dump(_heavy_tail_dump(tmp_path / "dump.json")).cases
    assert limits.flops(cases[2]) == 2 * 2 * 256 * 32000 * 1024 * 3  # output x K, forward and backward
    assert limits.flops(cases[1]) == 2 * 4 * 3 and limits.flops(cases[0]) == 0  # a tiny matmul; relu is no matmul
    order = [case.name for case in costs.largest_first(cases)]
    assert order == ["Functional.linear.0", "Functional.relu.0", "Torch.matmul.0", "Torch.matmul.1"]
    picked = cases.select([0, 2])  # a resumed run's cases are named without decoding too
    assert picked.names == ["Functional.relu.0", "Functional.linear.0"]
    assert [case.name for case in costs.largest_first(picked)] == ["Functional.linear.0", "Functional.relu.0"]


def test_the_default_time_limit_follows_a_calls_predicted_cost(tmp_path):
    """The LLaMA-sized LM head took 72 s alone on a CPU without bf16 instructions; the limit of 120 s plus 1 s
    per million input elements gave it 170 s, which a busy machine ran past. Its limit now follows its FLOPs; a
    small call keeps the floor, and --timeout overrides both."""
    from precheck.dump.records import load_dump
    from precheck.execution.options import CheckOptions

    cases = load_dump(_heavy_tail_dump(tmp_path / "dump.json")).cases
    options = CheckOptions()
    assert costs.case_timeout(cases[2], options) >= limits.TIMEOUT_SAFETY * 72
    for small in (cases[0], cases[1]):
        assert limits.TIMEOUT_FLOOR <= costs.case_timeout(small, options) < limits.TIMEOUT_FLOOR + 1
    assert costs.case_timeout(cases[2], CheckOptions(timeout=0.5)) == 0.5


def test_a_pool_starts_a_large_loss_at_the_end_of_the_step_before_the_light_calls(tmp_path):
    # The LLaMA step's cross_entropy over 512 x 32,000 logits is its last call and ran alone at the end of -n 2.
    from helpers import forward_rec, tensor_rec

    from precheck.dump.records import load_dump

    logits = tensor_rec("torch.bfloat16", (512, 32000), requires_grad=True)
    data = {
        "Functional.relu.0.forward": forward_rec(tensor_rec()),
        "Torch.matmul.0.forward": forward_rec(
            tensor_rec(), tensor_rec(shape=(3, 2)), output=[tensor_rec(shape=(2, 2))]
        ),
        "Functional.cross_entropy.0.forward": forward_rec(logits, tensor_rec("torch.int64", (512,))),
    }
    path = tmp_path / "dump.json"
    path.write_text(json.dumps({"task": "statistics", "level": "L1", "framework": "pytorch", "data": data}))
    cases = load_dump(path).cases
    assert limits.work(cases[2]) >= costs.HEAVY_FLOPS > limits.work(cases[0])
    order = [case.name for case in costs.largest_first(cases)]
    assert order == ["Functional.cross_entropy.0", "Functional.relu.0", "Torch.matmul.0"]


def test_small_dump_does_not_start_a_pool():
    from precheck.dump.records import load_dump

    assert not costs.use_pool(load_dump(GPT2).cases, 2)


def copy_dump(src: Path, dst: Path) -> Path:
    shutil.copytree(src.parent, dst)
    return dst / "dump.json"


def test_bad_records_become_skip_rows_and_the_run_goes_on(tmp_path):
    dump = copy_dump(MLP, tmp_path / "dump")
    data_dir = dump.parent / "dump_tensor_data"
    (data_dir / "Functional.gelu.0.forward.input.0.pt").unlink()  # missing file
    torch.save(torch.zeros(3, 3), data_dir / "Torch.softmax.0.forward.input.0.pt")  # wrong shape
    (data_dir / "Tensor.sum.0.forward.input.0.pt").write_bytes(b"not a tensor file")  # unreadable
    doc = json.loads(dump.read_text())
    doc["data"] = {k.replace("Functional.layer_norm", "Functional.not_an_api"): v for k, v in doc["data"].items()}
    dump.write_text(json.dumps(doc))
    summary = run_ut(dump, tmp_path / "out", device="cpu")
    rows = {r[0]: r for r in read_csv(summary.result_path)[1:]}
    assert len(rows) == 6
    assert rows["Functional.linear.0"][1:3] == ["pass", "pass"]
    assert rows["Functional.not_an_api.0"][1] == "SKIP"
    assert rows["Functional.not_an_api.0"][3] == "not supported: Functional.not_an_api"
    gelu = rows["Functional.gelu.0"]
    assert gelu[1] == "SKIP" and "Functional.gelu.0.forward.input.0.pt: file not found" in gelu[3]
    softmax = rows["Torch.softmax.0"]
    assert softmax[1] == "SKIP" and "shape (3, 3) does not match the recorded (4, 32)" in softmax[3]
    assert (
        rows["Tensor.sum.0"][1] == "SKIP" and "Tensor.sum.0.forward.input.0.pt: unreadable" in rows["Tensor.sum.0"][3]
    )


def test_wrong_target_values_are_graded_error(tmp_path, monkeypatch):
    """A target whose kernel is wrong must come out as error, with the place and values in the message. The
    kernel is wrong in bf16 only, as a device kernel is: the honest kernel (float32 on the CPU) is not."""
    import api_registry
    import api_registry.table

    real = api_registry.lookup("Torch.tanh")

    def tanh(x, *args, **kwargs):
        return real.func(x, *args, **kwargs) * (1.05 if x.dtype == torch.bfloat16 else 1.0)

    broken = real.__class__(name=real.name, func=tanh, standard=real.standard, golden=real.func)
    table = dict(api_registry.registry())
    table["Torch.tanh"] = broken
    monkeypatch.setattr(api_registry.table, "registry", lambda: table)
    summary = run_ut(GPT2, tmp_path, device="cpu", workers=1)
    rows = {r[0]: r for r in read_csv(summary.result_path)[1:]}
    assert rows["Torch.tanh.0"][1] == "error"
    assert "forward.output.0: max abs error" in rows["Torch.tanh.0"][3]
    assert "worse than an honest bf16 kernel: error" in rows["Torch.tanh.0"][3]
    assert "worst at index" in rows["Torch.tanh.0"][3]
    assert rows["Functional.linear.0"][1] == "warning"


def test_rows_are_on_disk_as_each_api_completes(tmp_path):
    """An interrupted run keeps every finished row: each row is flushed before the next API runs."""
    from precheck.dump.records import load_dump
    from precheck.execution.check import check_case
    from precheck.run_files.csv_files import CsvReport

    dump = load_dump(MLP)
    report = CsvReport(tmp_path)
    report.add(check_case(dump.cases[0], dump.data_dir))
    on_disk = report.result_path.read_text(encoding="utf-8-sig").splitlines()
    assert on_disk[1].startswith("Functional.linear.0,pass,pass")
    report.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_target_runs_the_gpt2_dump(tmp_path):
    summary = run_ut(GPT2, tmp_path, device="cuda")
    assert summary.device == "cuda:0"
    assert summary.counts["error"] == 0 and summary.counts["pass"] + summary.counts["warning"] == 40


def test_a_run_that_keeps_no_results_counts_the_same(tmp_path):
    # The CLI keeps only counts, so a run's memory does not grow with the number of records.
    kept = run_ut(GPT2_STATS, tmp_path / "kept", device="cpu", workers=1)
    counted = run_ut(GPT2_STATS, tmp_path / "counted", device="cpu", workers=1, keep_results=False)
    assert counted.results == [] and len(kept.results) == counted.checked == 47
    assert counted.counts == kept.counts and counted.statuses == kept.statuses
    assert counted.describe().split(" in ")[0] == kept.describe().split(" in ")[0]
    assert read_csv(counted.result_path) == read_csv(kept.result_path)


def test_a_fault_of_precheck_on_one_record_is_its_skip_row(tmp_path, monkeypatch):
    from precheck.grader import stochastic

    def broken(*args, **kwargs):
        raise IndexError("index 3 is out of bounds")

    monkeypatch.setattr(stochastic, "grade", broken)  # the statistical checks meet what they did not foresee
    summary = run_ut(GPT2, tmp_path, device="cpu", workers=1)
    rows = {r[0]: r[1:] for r in read_csv(summary.result_path)[1:]}
    assert len(rows) == 47
    assert rows["Functional.dropout.0"] == [
        "SKIP",
        "SKIP",
        "precheck could not check this record: IndexError: index 3 is out of bounds",
    ]
    assert rows["Functional.embedding.0"][:2] == ["pass", "pass"]


def test_backend_auto_follows_the_cost_model_and_suspects_are_always_isolated(tmp_path, capsys):
    from precheck.dump.records import load_dump
    from precheck.execution.options import CheckOptions
    from precheck.scheduling.backends import Dask, InProcess, Processes, backend_for

    cases, where, options = load_dump(MLP).cases, MLP.parent, CheckOptions()
    assert not costs.use_pool(cases, 2, options)
    assert type(backend_for("auto", cases, where, options, 2)) is InProcess  # too small to pay for a pool
    assert type(backend_for("process", cases, where, options, 2)) is Processes
    assert type(backend_for("inprocess", cases, where, options, 2, isolate=True)) is Processes
    assert type(backend_for("auto", cases, where, options, 2, scheduler="tcp://x:1")) is Dask
    assert backend_for("process", cases, where, options, 2).processes(cases) == 2
    assert main(["run_ut", "-api_info", str(MLP), "-o", str(tmp_path), "--backend", "process", "--scheduler", "x"]) == 2
    assert "--scheduler goes with --backend dask, not process" in capsys.readouterr().err


def test_run_ut_takes_one_options_value_and_its_keywords_of_before(tmp_path):
    """run_ut had 13 parameters and 92 lines; a library caller now gives one RunOptions, and the keywords users
    pass today give the same run."""
    import inspect

    from precheck.execution.options import CheckOptions
    from precheck.run_options import RunOptions

    grading = CheckOptions(seed=3, max_abs=1e-3)
    one = run_ut(MLP, tmp_path / "one", RunOptions(check=grading, device="cpu", workers=1, keep_results=True))
    kw = run_ut(MLP, tmp_path / "kw", device="cpu", workers=1, options=grading)
    assert [(r.name, r.forward, r.backward, r.message) for r in one.results] == [
        (r.name, r.forward, r.backward, r.message) for r in kw.results
    ]
    assert run_ut(MLP, tmp_path / "mix", RunOptions(device="cpu"), workers=1, keep_results=False).results == []
    with pytest.raises(TypeError, match="unexpected keyword argument.*: worker"):
        run_ut(MLP, tmp_path / "bad", device="cpu", worker=1)
    lines, _ = inspect.getsourcelines(run_ut)
    assert len(inspect.signature(run_ut).parameters) <= 6 and len(lines) <= 80


def _cut_short(tmp_path: Path, output: bool) -> Path:
    """The MLP dump as msprobe leaves it when it stops mid-step: records up to a forward, that forward without its
    output (``output``: with it, a dump that merely ends there), nothing after."""
    folder = tmp_path / "step0" / "proc1"
    shutil.copytree(MLP.parent, folder)
    doc = json.loads((folder / "dump.json").read_text(encoding="utf-8"))
    keys = list(doc["data"])
    last = keys.index("Functional.gelu.0.forward")
    doc["data"] = {k: doc["data"][k] for k in keys[: last + 1]}
    if not output:
        doc["data"]["Functional.gelu.0.forward"].pop("output")
    (folder / "dump.json").write_text(json.dumps(doc), encoding="utf-8")
    return folder / "dump.json"


def test_a_dump_msprobe_cut_short_says_where_it_ends_and_why(tmp_path):
    """A process killed mid-call leaves a forward record with no output and nothing more of the step: it was graded
    as complete (msprobe's checkpoint recompute leaves such a forward too, backwards after it: test_sharded_corpus).
    The run says it ends early, where and why, and its run record (and so its report) says it is partial."""
    dump = _cut_short(tmp_path / "cut", output=False)
    with pytest.warns(UserWarning) as told:
        summary = run_ut(dump, tmp_path / "out", workers=1, backend="inprocess")
    [said] = [str(w.message) for w in told if "ends early" in str(w.message)]
    assert said == (
        f"{dump}: the dump ends early: its last forward record, Functional.gelu.0.forward, has no output, and no "
        "forward was recorded after it (msprobe 26.2 records no forward once a call raises, as activation "
        "checkpointing's recompute does, torch.utils.checkpoint; a process killed mid-call leaves the same): the "
        "forwards after it are missing"
    )
    assert summary.counts["pass"] == 3
    (sidecar,) = (tmp_path / "out").glob("*.run.json")
    assert json.loads(sidecar.read_text(encoding="utf-8"))["partial"].startswith("the dump ends early: its last")


def test_a_dump_whose_last_forward_has_its_output_is_not_said_to_end_early(tmp_path, recwarn):
    run_ut(_cut_short(tmp_path / "whole", output=True), tmp_path / "out", workers=1, backend="inprocess")
    run_ut(MLP, tmp_path / "out2", workers=1, backend="inprocess")  # msprobe's whole step: its last record a backward
    assert not [w for w in recwarn if "ends early" in str(w.message)]
    for sidecar in (*(tmp_path / "out").glob("*.run.json"), *(tmp_path / "out2").glob("*.run.json")):
        assert "partial" not in json.loads(sidecar.read_text(encoding="utf-8"))
