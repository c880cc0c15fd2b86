"""A statistics dump's collective whose output statistic is inf or nan where its inputs make it finite is an error
(issue 50 item 3): it was pass where only Min was finite (the other identities were skipped), and SKIP where every
statistic was nan. Each step here is synthesised: two ranks' statistics dumps holding only collective records."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from precheck.core.older_python import zip_strict
from precheck.dump.decode import Stats, TensorSpec
from precheck.dump.steps import find_dumps
from precheck.ranks import run_step
from precheck.ranks.collective_stats import non_finite_statistics
from precheck.run_files.csv_files import read_csv_rows

_GROUP = {"type": "torch.ProcessGroup", "group_ranks": [0, 1], "group_id": "0a1b2c3d"}


def _t(values: list[float], dtype: str = "torch.float32", shape: list[int] | None = None, **stats) -> dict:
    """A tensor as msprobe's statistics task writes it, its statistics those of ``values`` unless given."""
    s = torch.tensor(values, dtype=torch.float64)
    rec = {"type": "torch.Tensor", "dtype": dtype, "shape": shape or [len(values)], "Max": s.max().item(),
           "Min": s.min().item(), "Mean": s.mean().item(), "Norm": s.norm().item(), "requires_grad": False}  # fmt: skip
    rec.update(stats)
    return rec


def _records(x: list[list[float]]) -> list[dict[str, dict]]:
    """Each rank's records of a correct all_reduce, broadcast(src=0), all_gather and all_gather_into_tensor, and
    reduce_scatter_tensor of the inputs ``x`` (one list per rank)."""
    total = [a + b for a, b in zip_strict(*x)]
    half = len(total) // 2
    out = []
    for r in range(2):
        out.append({
            "Distributed.all_reduce.0.forward": {"input_args": [_t(x[r])], "input_kwargs": {"group": _GROUP},
                                                 "output": [_t(total), _GROUP]},
            "Distributed.broadcast.0.forward": {"input_args": [_t(x[r]), {"type": "int", "value": 0}],
                                                "input_kwargs": {"group": _GROUP},
                                                "output": [_t(x[0]), {"type": "int", "value": 0}, _GROUP]},
            "Distributed.all_gather.0.forward": {"input_args": [None, _t(x[r])], "input_kwargs": {"group": _GROUP},
                                                 "output": [[_t(x[0]), _t(x[1])], _t(x[r]), _GROUP]},
            "Distributed.all_gather_into_tensor.0.forward": {
                "input_args": [None, _t(x[r])], "input_kwargs": {"group": _GROUP},
                "output": [_t(x[0] + x[1]), _t(x[r]), _GROUP]},
            "Distributed.reduce_scatter_tensor.0.forward": {
                "input_args": [None, _t(x[r])], "input_kwargs": {"group": _GROUP},
                "output": [_t(total[r * half:(r + 1) * half]), _t(x[r]), _GROUP]},
        })  # fmt: skip
    return out


def _step(tmp_path: Path, records: list[dict[str, dict]]) -> Path:
    step = tmp_path / "dump" / "step0"
    for r, data in enumerate(records):
        (step / f"rank{r}").mkdir(parents=True)
        doc = {"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None, "data": data}
        (step / f"rank{r}" / "dump.json").write_text(json.dumps(doc))
    return step


def _rows(tmp_path: Path, records: list[dict[str, dict]]) -> dict[tuple[str, str], dict[str, str]]:
    summary = run_step(find_dumps(_step(tmp_path, records)), tmp_path / "out", device="cpu", workers=1,
                       backend="inprocess")  # fmt: skip
    return {(rank, row["API name"]): row for rank, run in summary.ranks.items()
            for row in read_csv_rows(run.result_path)[1]}  # fmt: skip


X = [[1.0, -2.0, 3.0, 0.5], [0.25, 4.0, -1.0, 2.0]]


def test_the_clean_step_passes(tmp_path):
    rows = _rows(tmp_path, _records(X))
    assert len(rows) == 10 and {row["Forward Test Success"] for row in rows.values()} == {"pass"}


@pytest.mark.parametrize(("stat", "value"), [("Max", "inf"), ("Min", "-inf"), ("Mean", "inf"), ("Norm", "inf"),
                                             ("Max", "nan"), ("Mean", "nan"), ("Norm", "nan")])  # fmt: skip
def test_a_non_finite_output_statistic_of_an_all_reduce_is_an_error_on_its_rank(tmp_path, stat, value):
    """all_reduce of finite inputs whose rank 1 output records ``stat`` as inf or nan: passed before wherever
    another identity still held (Max = inf left Min's)."""
    records = _records(X)
    records[1]["Distributed.all_reduce.0.forward"]["output"][0][stat] = value
    rows = _rows(tmp_path, records)
    row = rows[("rank1", "Distributed.all_reduce.0")]
    assert row["Forward Test Success"] == "error"
    assert f"{stat} is {value}" in row["Message"] and "rank 1" in row["Message"]
    assert "Distributed.all_reduce.0" in row["Message"]
    assert rows[("rank0", "Distributed.all_reduce.0")]["Forward Test Success"] == "pass"


@pytest.mark.parametrize(
    ("call", "at"),
    [("Distributed.all_reduce.0", (0,)), ("Distributed.broadcast.0", (0,)), ("Distributed.all_gather.0", (0, 1)),
     ("Distributed.all_gather_into_tensor.0", (0,)), ("Distributed.reduce_scatter_tensor.0", (0,))],
)  # fmt: skip
def test_an_all_nan_output_of_every_collective_is_an_error_not_skip(tmp_path, call, at):
    """Every statistic nan (a NaN-filled output): SKIP before ("its statistics are not finite")."""
    records = _records(X)
    target = records[1][f"{call}.forward"]["output"]
    for i in at[:-1]:
        target = target[i]
    target[at[-1]].update(Max="nan", Min="nan", Mean="nan", Norm="nan")
    rows = _rows(tmp_path, records)
    row = rows[("rank1", call)]
    assert row["Forward Test Success"] == "error", row["Message"]
    assert "Max is nan" in row["Message"] and "Norm is nan" in row["Message"] and "rank 1" in row["Message"]
    assert rows[("rank0", call)]["Forward Test Success"] == "pass"


def test_non_finite_inputs_imply_nothing(tmp_path):
    """An input already holding inf: the output's inf follows from it, no error (and no pass: nothing checked)."""
    records = _records(X)
    records[0]["Distributed.all_reduce.0.forward"]["input_args"][0].update(Max="inf", Mean="inf", Norm="inf")
    for r in range(2):
        records[r]["Distributed.all_reduce.0.forward"]["output"][0].update(Max="inf", Mean="inf", Norm="inf")
    rows = _rows(tmp_path, records)
    verdicts = {rows[(r, "Distributed.all_reduce.0")]["Forward Test Success"] for r in ("rank0", "rank1")}
    assert verdicts <= {"pass", "SKIP"}


def test_an_fp16_sum_that_may_overflow_is_not_an_error():
    """Two fp16 inputs near 60000 summed may overflow to inf: their statistics do not make the output finite."""
    big = TensorSpec(torch.float16, (4,), Stats(60000.0, 1.0, 30000.0, 90000.0))
    out = TensorSpec(torch.float16, (4,), Stats(math.inf, 2.0, math.inf, math.inf))
    assert non_finite_statistics(out, [big, big], "rank 0: Distributed.all_reduce.0", how="sum") == []
    assert non_finite_statistics(out, [big], "rank 0: Distributed.broadcast.0") != []


def test_the_rule_names_each_statistic_the_record_and_the_rank():
    ins = TensorSpec(torch.float32, (4,), Stats(3.0, -1.0, 0.5, 4.0))
    out = TensorSpec(torch.float32, (4,), Stats(math.nan, -1.0, math.inf, 4.0))
    found = non_finite_statistics(out, [ins], "rank 1: Distributed.recv.0 output 0")
    assert len(found) == 2
    assert found[0].startswith("rank 1: Distributed.recv.0 output 0: Max is nan")
    assert found[1].startswith("rank 1: Distributed.recv.0 output 0: Mean is inf")
    empty = TensorSpec(torch.float32, (0,), Stats(None, None, None, None))
    assert non_finite_statistics(out, [empty, ins], "x") == non_finite_statistics(out, [ins], "x")
    unknown = TensorSpec(torch.float32, (4,), Stats(None, None, None, None))
    assert non_finite_statistics(out, [unknown], "x") == []
