"""compare on values neither run defined (issue 44, item 6): FSDP2 narrows its all-gather buffer before the
collective fills it, so msprobe records uninitialised memory: NaN statistics in one run, NaN or numbers past 1e30
whose Norm overflows in the other, and tensor files that differ from run to run. Such a record is listed as not
comparable and never named; a NaN where the other run holds finite numbers stays a divergence."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import torch

from precheck.commands.cli import main
from precheck.core.older_python import zip_strict

NAN4 = [math.nan] * 4
GARBAGE = [4.1e35, -1.2e5, 2.3e33, math.inf]  # fp32 uninitialised memory: finite numbers, an overflowing Norm
FINITE = [1.0, -0.5, 0.125, 2.0]
BF16_GARBAGE = [3.1e38, -4.0e37, math.inf, math.inf]  # bf16 uninitialised memory: its Mean and Norm overflowed


def _tensor(name: str, dtype: str, shape: list[int], stats: list[float], values: torch.Tensor | None) -> dict:
    item = {"type": "torch.Tensor", "dtype": f"torch.{dtype}", "shape": shape, "requires_grad": False}
    item |= dict(zip_strict(("Max", "Min", "Mean", "Norm"), stats))
    if values is not None:
        item["data_name"] = f"{name}.pt"
    return item


def write_dump(folder: Path, task: str, dtype: str, narrows: list[tuple[list[float], list[float]]]) -> Path:
    """A dump of narrows of a buffer (input statistics, output statistics), then a silu both runs agree on."""
    data_dir = folder / "dump_tensor_data"
    data_dir.mkdir(parents=True)
    torch_dtype = getattr(torch, dtype)
    generator = torch.Generator().manual_seed(len(dtype))  # each run's garbage its own
    data: dict[str, dict] = {}

    def tensor(name: str, shape: list[int], stats: list[float], values: torch.Tensor) -> dict:
        if task == "tensor":
            torch.save(values.to(torch_dtype), data_dir / f"{name}.pt")
        return _tensor(name, dtype, shape, stats, values if task == "tensor" else None)

    for n, (stats_in, stats_out) in enumerate(narrows):
        key = f"Tensor.narrow.{n}.forward"
        junk = torch.randn(8, generator=generator) * 1e30
        junk[0] = math.nan
        data[key] = {
            "input_args": [
                tensor(f"{key}.input.0", [8], stats_in, junk),
                {"type": "int", "value": 0},
                {"type": "int", "value": 0},
                {"type": "int", "value": 4},
            ],  # fmt: skip
            "input_kwargs": {},
            "output": [tensor(f"{key}.output.0", [4], stats_out, junk[:4])],
        }
    x = torch.tensor([0.5, -1.0, 2.0, 0.25])
    y = torch.nn.functional.silu(x).to(torch_dtype).float()
    stats = lambda t: [t.max().item(), t.min().item(), t.mean().item(), t.norm().item()]  # noqa: E731
    data["Functional.silu.0.forward"] = {
        "input_args": [tensor("Functional.silu.0.forward.input.0", [4], stats(x), x)],
        "input_kwargs": {},
        "output": [tensor("Functional.silu.0.forward.output.0", [4], stats(y), y)],
    }
    dump = {"task": task, "level": "L1", "framework": "pytorch", "dump_data_dir": str(data_dir), "data": data}
    (folder / "dump.json").write_text(json.dumps(dump))
    return folder / "dump.json"


def compare(capsys, tmp_path: Path, task: str, bench_narrows: list, target_narrows: list | None = None):
    """(summary, records CSV rows, console) of the bf16 dump against the fp32 one."""
    target_narrows = target_narrows or [(NAN4, NAN4), (NAN4, NAN4)]
    target = write_dump(tmp_path / "bf16", task, "bfloat16", target_narrows)
    bench = write_dump(tmp_path / "fp32", task, "float32", bench_narrows)
    out = tmp_path / "out"
    assert main(["compare", "-target", str(target), "-bench", str(bench), "-o", str(out)]) == 0
    console = capsys.readouterr().out
    summary = json.loads(next(out.glob("compare_summary_*.json")).read_text())
    records = list(csv.DictReader(open(next(out.glob("compare_records_*.csv")), encoding="utf-8")))
    return summary, records, console


@pytest.mark.parametrize("task", ["tensor", "statistics"])
def test_values_neither_run_defined_are_listed_not_named(capsys, tmp_path, task):
    """FSDP2's narrow of its unfilled all-gather buffer, NaN in the bf16 run and NaN (first) or overflowing
    garbage (second) in the fp32 run (failed before: named Tensor.narrow.0, deviation inf, in the tensor task,
    and Tensor.narrow.1 in the statistics task)."""
    summary, records, console = compare(capsys, tmp_path, task, [(NAN4, NAN4), (GARBAGE, GARBAGE)])
    assert summary["first_divergent"] is None
    assert summary["suspects"] == []
    assert summary["not_comparable"] == ["Tensor.narrow.0.forward", "Tensor.narrow.1.forward"]
    assert summary["records"]["undefined"] == 2 and summary["records"]["agree"] == 1
    verdicts = {r["Record"]: r["Verdict"] for r in records}
    assert verdicts == {"Tensor.narrow.0.forward": "undefined", "Tensor.narrow.1.forward": "undefined",
                        "Functional.silu.0.forward": "agree"}  # fmt: skip
    assert "not comparable: 2 records whose tensors neither run defined" in console
    assert "Tensor.narrow.0.forward, Tensor.narrow.1.forward" in console


@pytest.mark.parametrize("task", ["tensor", "statistics"])
def test_a_nan_where_the_other_run_is_finite_stays_a_divergence(capsys, tmp_path, task):
    summary, records, console = compare(capsys, tmp_path, task, [(NAN4, NAN4), (FINITE, FINITE)])
    assert summary["first_divergent"]["name"] == "Tensor.narrow.1.forward"
    assert summary["not_comparable"] == ["Tensor.narrow.0.forward"]
    assert "first divergent: Tensor.narrow.1.forward" in console


@pytest.mark.parametrize("task", ["tensor", "statistics"])
def test_garbage_whose_sums_overflow_in_both_runs_is_not_comparable(capsys, tmp_path, task):
    """No NaN on either side, but finite Max and Min whose Mean or Norm overflowed in both runs (the corpus's
    FSDP2 rank 1 narrow.0); an overflow proper (Max inf on one side) stays named."""
    summary, _, _ = compare(capsys, tmp_path, task, [(GARBAGE, GARBAGE), (GARBAGE, GARBAGE)],
                            [(BF16_GARBAGE, BF16_GARBAGE), ([math.inf, -1.0, math.inf, math.inf], FINITE)])  # fmt: skip
    assert summary["not_comparable"] == ["Tensor.narrow.0.forward"]
    assert summary["first_divergent"]["name"] == "Tensor.narrow.1.forward"
