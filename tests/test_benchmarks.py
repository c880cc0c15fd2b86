"""Every benchmark explains itself (--help) and, with no arguments, works on data inside the repository."""

from __future__ import annotations

import importlib.util
import runpy
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# the scripts; the other modules there (detection_models.py ...) are their libraries
BENCHMARKS = sorted(p for p in (ROOT / "benchmarks").glob("*.py") if 'if __name__ == "__main__":' in p.read_text())


@pytest.fixture(autouse=True)
def _benchmarks_importable(monkeypatch):
    """A script imports its sibling modules, as it does when run from its folder."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))


def _module(path: Path):
    name = f"benchmark_{path.stem}"
    if name not in sys.modules:  # registered first: a dataclass looks its module up while it is made
        spec = importlib.util.spec_from_file_location(name, path)
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.stem)
def test_help_says_what_it_measures(path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [str(path), "--help"])
    with pytest.raises(SystemExit) as e:
        runpy.run_path(str(path), run_name="__main__")
    out = capsys.readouterr().out
    assert e.value.code == 0 and out.startswith(f"usage: {path.name}")
    assert _module(path).__doc__.split("\n", 1)[0] in out  # the docstring is the description


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.stem)
def test_default_paths_lie_inside_tests_data(path):
    # They defaulted to ../shared/dumps, outside the repository: a fresh clone crashed with no arguments.
    defaults = [action.default for action in _module(path).build_parser()._actions]
    paths = [p for v in defaults for p in (v if isinstance(v, list) else [v]) if isinstance(p, Path)]
    paths = [p for p in paths if p.name != "msprobe_cpu.py"]  # the incumbent's runner, used with --msprobe-venv
    assert all(p.exists() and p.is_relative_to(ROOT / "tests" / "data") for p in paths), paths


def test_the_heavy_floor_makes_every_call_it_can_on_a_bundled_dump(capsys):
    bench = _module(ROOT / "benchmarks" / "bench_heavy.py")
    dump = next((ROOT / "tests" / "data" / "mlp_fp32_tensor").glob("step0/*/dump.json"))
    assert bench.floor(dump) == 6  # linear, layer_norm, gelu, softmax, linear, sum: forward and backward
    assert bench.floor(dump, honest=True) == 6  # the honest kernel's run of each call too


def test_the_device_check_records_replays_and_grades_on_the_cpu_where_no_gpu_is(capsys, tmp_path):
    """benchmarks/device_check.py is the GPU path's proof on a machine with one; on the CPU the same checks run, so
    the script is known to work before a GPU is lent: both autocast steps recorded and replayed, the collectives
    graded as a step folder, every run with APIs graded."""
    bench = _module(ROOT / "benchmarks" / "device_check.py")
    assert bench.main(["--device", "cpu", "--out", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("torch ") and lines[0].endswith("device cpu")
    rows = [line.split(" | ") for line in lines[3:]]
    assert [(r[0].lstrip("| "), r[1]) for r in rows] == [
        ("autocast bf16 on cpu", "cpu"), ("autocast fp16 on cpu", "cpu"), ("collectives on cpu", "cpu")
    ]  # fmt: skip
    assert all(int(r[2]) > 0 and int(r[6]) == 0 for r in rows[:2])  # every API graded, none SKIP
    assert rows[2][2:7] == ["3", "3", "0", "0", "0"]  # all_reduce, broadcast, all_gather graded across the ranks


def test_the_frontier_bench_counts_each_rank_alone_and_in_its_step_folder_without_msprobe(capsys):
    """bench_frontier.py without --msprobe-venv: precheck's two forms per rank, msprobe's columns empty. A rank of
    the MoE step alone cannot grade its all_to_alls (SKIP); its step folder grades them across the ranks."""
    bench = _module(ROOT / "benchmarks" / "bench_frontier.py")
    assert bench.main([str(ROOT / "tests" / "data" / "sharded" / "moe_zero_a2a_tensor" / "step0")]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines if line.startswith("| moe_zero")]
    assert [r[1:4] + [r[5], r[7]] for r in rows] == [
        ["rank0", "3", "0 / 0 / 3", "3 / 0 / 0", "-"], ["rank1", "3", "0 / 0 / 3", "3 / 0 / 0", "-"]
    ]  # fmt: skip
    assert "3 x distributed op <api>: needs a process group" in "\n".join(lines)


def test_the_frontier_bench_reads_msprobes_result_csv_by_api_row(tmp_path):
    """msprobe's result CSV (BOM, blank backward cells, its own SKIP messages) counted as precheck's: an API row is
    flagged if either verdict is, else SKIP if either is; SKIP reasons with API names masked count together."""
    bench = _module(ROOT / "benchmarks" / "bench_frontier.py")
    csv = tmp_path / "accuracy_checking_result_1.csv"
    csv.write_text(
        "\ufeffAPI name,Forward Test Success,Backward Test Success,Message\n"
        "Functional.linear.0,pass,pass\nTensor.max.0,pass,SKIP,Multiple backward is not supported.\n"
        + "".join(
            f"Distributed.all_to_all.{i},SKIP,SKIP,API Distributed.all_to_all.{i} not support for acc_check. SKIP.\n"
            for i in (0, 1)
        )
        + "Torch.argsort.0,error, \n",
        encoding="utf-8",
    )
    t = bench.tally(csv)
    assert (t.apis, t.cell(), t.flagged) == (5, "1 / 1 / 3", ["Torch.argsort.0"])
    assert t.reasons.most_common(1) == [("API <api> not support for acc_check. SKIP.", 2)]
