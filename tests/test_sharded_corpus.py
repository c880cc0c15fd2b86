"""run_ut and compare on sharded training steps as teams run them (issue 44's corpus, tests/data/sharded/, recorded
by msprobe 26.2 through tests/data/sharded/make_sharded_steps.py): FSDP2 with a bf16 MixedPrecisionPolicy and its
fp32 twin (tensor and statistics tasks), the bf16 step with a bad sharded matmul and with a gradient reduce-scatter
that sums in bf16, ZeRO-1 with no_sync gradient accumulation, DDP on 4 ranks, FSDP1; 2-4 ranks on gloo. And issue 51's
FSDP2 over TP + SP (make_2d_steps.py) and FSDP2 with activation checkpointing and CPU offload
(make_ckpt_offload_steps.py, recorded by msprobe and by precheck record).

The issue's targets this file holds: run_ut on each step folder (every rank, CPU target) has no row where a side
raised and no error; each rank writes its own CSVs; compare lists FSDP2's narrows of its unfilled all-gather buffer
as not comparable instead of naming them, and names the bad matmul.
"""

from __future__ import annotations

import csv
import functools
import json
import shutil
import tempfile
from pathlib import Path

import pytest
from helpers import DATA

from precheck.commands.cli import main
from precheck.core.reasons import Reason
from precheck.core.status import ERROR, PASS, SKIP, WARNING
from precheck.dump.records import ends_early, load_dump
from precheck.dump.steps import find_dumps
from precheck.execution.options import CheckOptions
from precheck.ranks import RanksSummary, run_step
from precheck.results import Direction

SHARDED = DATA / "sharded"
CORPUS = sorted(p.name for p in SHARDED.glob("*_msprobe") if (p / "msprobe_config.json").is_file())
MINE = {  # step -> ranks: this corpus (other steps of the folder belong to other tests)
    "fsdp2_bf16_tensor_msprobe": 2, "fsdp2_fp32_tensor_msprobe": 2,
    "fsdp2_bf16_statistics_msprobe": 2, "fsdp2_fp32_statistics_msprobe": 2,
    "fsdp2_badmatmul_statistics_msprobe": 2, "fsdp2_badreduce_statistics_msprobe": 2,
    "zero1_nosync_statistics_msprobe": 2, "ddp4_statistics_msprobe": 4, "fsdp1_statistics_msprobe": 2,
}  # fmt: skip
RAISED = {Reason.TARGET_FAILED, Reason.DEVICE_FAILED, Reason.SKIP_GOLDEN_FAILED}


@functools.cache
def _graded(name: str) -> RanksSummary:
    """run_ut on one step folder, every rank (in-process, CPU, one call per signature): run once a step."""
    with tempfile.TemporaryDirectory() as out:
        return run_step(find_dumps(SHARDED / name / "step0"), out, device="cpu", backend="inprocess", workers=1,
                        filter_api=True)  # fmt: skip


def test_the_corpus_is_there() -> None:
    assert set(MINE) <= set(CORPUS)
    for name, ranks in MINE.items():
        config = json.loads((SHARDED / name / "msprobe_config.json").read_text())
        assert config["level"] == "L1" and name.endswith(f"_{config['task']}_msprobe")
        assert sorted(p.name for p in (SHARDED / name / "step0").iterdir()) == [f"rank{r}" for r in range(ranks)]


@pytest.mark.parametrize("name", sorted(MINE))
def test_no_row_where_a_side_raised_and_no_error(name: str) -> None:
    summary = _graded(name)
    assert list(summary.ranks) == [f"rank{r}" for r in range(MINE[name])]
    results = [r for run in summary.ranks.values() for r in run.results]
    assert len(results) >= 20
    raised = [
        (row.name, row.comparison.reason) for r in results for row in r.details if row.comparison.reason in RAISED
    ]
    assert not raised
    assert not [r.name for r in results if ERROR in (r.forward, r.backward)]


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_fsdp2s_dtensor_calls_graded_per_rank_and_as_a_whole(precision: str) -> None:
    """FSDP2's clipping tail and optimizer step take DTensors: in the tensor task no row is SKIP, each rank's
    local call is graded, and rank 0 holds each call as a whole (shards put together by their placements)."""
    summary = _graded(f"fsdp2_{precision}_tensor_msprobe")
    results = {rank: {r.name: r for r in run.results} for rank, run in summary.ranks.items()}
    assert not [(rank, n) for rank, rs in results.items() for n, r in rs.items() if SKIP in (r.forward, r.backward)]
    for call in ("Torch._foreach_norm.0", "Torch.vector_norm.0", "Tensor.reciprocal.0"):
        assert all(rs[call].forward in (PASS, WARNING) for rs in results.values()), call
        assert results["rank0"][f"{call}.whole"].forward in (PASS, WARNING), call
    assert sum(name.startswith("Tensor.add_.") and name.endswith(".whole") for name in results["rank0"]) >= 10


@pytest.mark.parametrize("name", ["zero1_nosync_statistics_msprobe", "fsdp1_statistics_msprobe"])
def test_collectives_of_a_statistics_dump_are_checked_not_skip(name: str) -> None:
    """ZeRO-1's broadcasts and FSDP1's all_gathers in a statistics dump: what their statistics hold is checked, so
    no row is SKIP (DDP's all-reduce runs in its C++ reducer: msprobe records none)."""
    summary = _graded(name)
    results = [r for run in summary.ranks.values() for r in run.results]
    assert any(r.name.startswith("Distributed.") for r in results)
    assert not [r.name for r in results if SKIP in (r.forward, r.backward)]


def test_each_rank_writes_its_own_csvs(capsys, tmp_path) -> None:
    step = SHARDED / "ddp4_statistics_msprobe" / "step0"
    assert main(["run_ut", "-api_info", str(step), "-o", str(tmp_path), "-d", "cpu", "-n", "1", "-q"]) == 0
    for rank in range(4):
        (result,) = (tmp_path / f"rank{rank}").glob("accuracy_checking_result_*.csv")
        rows = list(csv.DictReader(open(result, encoding="utf-8-sig")))
        assert rows and all(r["Forward Test Success"] == "pass" for r in rows)
    assert "4 dumps of" in capsys.readouterr().out


def _compare(tmp_path: Path, target: str, bench: str) -> dict[str, dict]:
    """compare of two steps of the corpus, rank by rank: each rank's summary."""
    out = tmp_path / f"{target}-{bench}"
    argv = ["compare", "-target", str(SHARDED / target), "-bench", str(SHARDED / bench), "-o", str(out)]
    assert main(argv) == 0
    summaries = {}
    for path in out.glob("compare_summary_*.json"):
        summaries[path.name.split("_")[2]] = json.loads(path.read_text())
    assert sorted(summaries) == ["rank0", "rank1"]
    return summaries


def _named(summary: dict) -> set[str]:
    first = summary["first_divergent"]
    return {f["name"] for f in summary["suspects"]} | ({first["name"]} if first else set())


@pytest.mark.parametrize("task", ["tensor", "statistics"])
def test_fsdp2s_unfilled_all_gather_buffer_is_not_comparable(capsys, tmp_path, task) -> None:
    """FSDP2 narrows its all-gather buffer before the collective fills it: NaN in one run and NaN or numbers past
    1e30 in the other are listed as not comparable, never named (the issue named Tensor.narrow.0, deviation inf)."""
    summaries = _compare(tmp_path, f"fsdp2_bf16_{task}_msprobe", f"fsdp2_fp32_{task}_msprobe")
    for summary in summaries.values():
        assert "Tensor.narrow.0.forward" in summary["not_comparable"]
        assert set(summary["not_comparable"]) <= {f"Tensor.narrow.{n}.forward" for n in range(5)}
        assert not _named(summary) & set(summary["not_comparable"])
    capsys.readouterr()


def test_clean_fsdp2_tensor_pair_names_nothing_on_rank0(capsys, tmp_path) -> None:
    """bf16 against fp32, tensor task: rank 0 agrees within bf16 rounding once the unfilled buffer is left out.
    (Rank 1's narrow.2 holds NaN in the bf16 run and a freed tensor's stale finite numbers in the fp32 run: no
    statistic tells those from data, rank 0's same narrow does: tests/test_compare_precision_verdict.py.)"""
    summary = _compare(tmp_path, "fsdp2_bf16_tensor_msprobe", "fsdp2_fp32_tensor_msprobe")["rank0"]
    assert summary["first_divergent"] is None and summary["suspects"] == []
    assert summary["rounding"]["dtype"] == "bfloat16"
    capsys.readouterr()


def test_an_fp32_square_of_bf16_values_is_not_named(capsys, tmp_path) -> None:
    """RMSNorm's ``x.float().pow(2)`` and its mean in the bf16 step against the fp32 twin (statistics): the square
    doubles the deviation its bf16-rounded input carries (and a little more), within what the statistics are held
    to (both were named suspect on this corpus before main's statistics holds were merged)."""
    for summary in _compare(tmp_path, "fsdp2_bf16_statistics_msprobe", "fsdp2_fp32_statistics_msprobe").values():
        assert not {name for name in _named(summary) if name.startswith(("Tensor.pow.", "Tensor.mean."))}
    capsys.readouterr()


def test_the_bad_sharded_matmul_is_named(capsys, tmp_path) -> None:
    """F.linear rounding to a 4-bit significand inside the FSDP2 bf16 step: against the clean bf16 step, the
    first record that parts the runs is the first matmul, on every rank, and only matmuls are suspect."""
    for summary in _compare(tmp_path, "fsdp2_badmatmul_statistics_msprobe", "fsdp2_bf16_statistics_msprobe").values():
        assert summary["first_divergent"]["name"] == "Functional.linear.0.forward"
        assert summary["first_divergent"]["verdict"] == "suspect"
    capsys.readouterr()


def _clean(summary: RanksSummary, ranks: int) -> list:
    """A clean step as issue 51 holds it: no row where a side raised, no error (whole-call, collective and
    point-to-point rows among them), a SKIP only where a tensor was saved without data (an AsyncCollectiveTensor:
    null statistics). Its results."""
    assert list(summary.ranks) == [f"rank{r}" for r in range(ranks)]
    results = [r for run in summary.ranks.values() for r in run.results]
    assert not [
        (row.name, row.comparison.reason) for r in results for row in r.details if row.comparison.reason in RAISED
    ]
    assert not [r.name for r in results if ERROR in (r.forward, r.backward)]
    skipped = [r for r in results if SKIP in (r.forward, r.backward)]
    assert not [r.name for r in skipped if "saved by msprobe without data" not in r.message]
    return results


def test_fsdp2_over_tp_and_sp_on_a_2x2_mesh_has_no_error_and_skips_only_what_has_no_data() -> None:
    """The 2-D step torchtitan users run (make_2d_steps.py, statistics task): clean (_clean), never a SKIP for a
    placement msprobe left out (_StridedShard), nor for a call DTensor ran on more than its rank's shard (those are
    graded on shards generated from each rank's statistics: the next test)."""
    results = _clean(_graded("fsdp2_tp_sp_statistics_msprobe"), 4)
    assert any(SKIP in (r.forward, r.backward) for r in results)  # the AsyncCollectiveTensors
    assert sum(r.forward == PASS for r in results) >= 120  # 124 with filter_api (one call per signature)


CKPT = "fsdp2_ckpt_offload_statistics"  # make_ckpt_offload_steps.py: FSDP2 + activation checkpointing + CPU offload
SYNTHESIZED = "inputs synthesized per shard from each rank's recorded statistics (seed 0)"


@pytest.mark.parametrize(
    ("name", "call", "said"),
    [
        ("fsdp2_bf16_statistics_msprobe", "Torch.vector_norm.0", "its Partial inputs reduced across the ranks first"),
        ("fsdp2_fp32_statistics_msprobe", "Torch.vector_norm.0", "its Partial inputs reduced across the ranks first"),
        ("fsdp2_tp_sp_statistics_msprobe", "Torch.vector_norm.0", "its Partial inputs reduced across the ranks first"),
        (f"{CKPT}_precheck", "Torch.vector_norm.0", "its Partial inputs reduced across the ranks first"),
        ("fsdp2_tp_sp_statistics_msprobe", "Functional.embedding.0", "its ids masked to this rank's rows"),
        ("loss_parallel_statistics_msprobe", "Functional.cross_entropy.0", "graded on the logits put together"),
    ],
)
def test_a_statistics_dumps_rank_rows_of_calls_run_on_more_than_the_shard_are_graded_on_synthesized_shards(
    name: str, call: str, said: str
) -> None:
    """clip_grad_norm_'s total norm (a Partial input DTensor reduced first), a vocab-parallel embedding (its ids
    masked) and a loss_parallel cross-entropy (its logits put together) were each rank's SKIP in a statistics dump
    ("shards need their values"): each is now graded on every rank as any statistics row, on inputs generated per
    shard from that rank's own statistics, and its Message says so."""
    summary = _graded(name)
    rows = [r for run in summary.ranks.values() for r in run.results if r.name == call]
    assert len(rows) == len(summary.ranks) >= 2
    for row in rows:
        assert row.forward == PASS and row.backward in (PASS, None), (row.name, row.message)
        assert said in row.message and SYNTHESIZED in row.message and row.generated_inputs
    messages = [r.message for run in summary.ranks.values() for r in run.results if SKIP in (r.forward, r.backward)]
    assert not [m for m in messages if "shards need their values" in m]


def test_a_statistics_dumps_loss_parallel_gradient_is_graded_whole_with_target_recorded(tmp_path) -> None:
    """With --target recorded a statistics row grades its recorded statistics: the loss_parallel cross-entropy's
    recorded gradient is each rank's shard of the logits' classes, and its row grades the whole logits' gradient,
    the shards' statistics put together (the largest Max, the smallest Min, the Mean weighted, the Norms' root sum
    of squares), never a shard's statistics against the whole's golden."""
    options = CheckOptions(target="recorded")
    summary = run_step(find_dumps(SHARDED / "loss_parallel_statistics_msprobe" / "step0"), tmp_path, device="cpu",
                       backend="inprocess", workers=1, filter_api=True, options=options)  # fmt: skip
    for run in summary.ranks.values():
        (row,) = [r for r in run.results if r.name == "Functional.cross_entropy.0"]
        assert row.backward in (PASS, WARNING) and SYNTHESIZED in row.message, row.message
        (grad,) = [d for d in row.details if d.direction == Direction.BACKWARD]
        assert tuple(grad.comparison.shape) == (4, 8) and grad.comparison.standard == "statistics"


def test_a_shard_with_null_statistics_leaves_the_synthesized_rank_rows_a_skip_naming_it(tmp_path) -> None:
    """A shard msprobe saved without data (null statistics) generates nothing: each rank's row of the norm is SKIP
    naming the rank and the place, as any statistics row with such an input is, never a pass on made-up values."""
    step = tmp_path / "step"
    shutil.copytree(SHARDED / "fsdp2_bf16_statistics_msprobe", step)
    path = step / "step0" / "rank1" / "dump.json"
    doc = json.loads(path.read_text())
    doc["data"]["Torch.vector_norm.0.forward"]["input_args"][0].update(Max=None, Min=None, Mean=None, Norm=None)
    path.write_text(json.dumps(doc))
    summary = run_step(find_dumps(step / "step0"), tmp_path / "out", device="cpu", backend="inprocess", workers=1,
                       filter_api=True)  # fmt: skip
    for run in summary.ranks.values():
        (row,) = [r for r in run.results if r.name == "Torch.vector_norm.0"]
        said = "rank 1: Torch.vector_norm.0: input_args[0] saved by msprobe without data (null statistics, no file)"
        assert row.forward == SKIP and said in row.message, row.message


@pytest.mark.parametrize("recorder", ["msprobe", "precheck"])
def test_fsdp2_with_checkpointing_and_cpu_offload_is_clean(recorder: str) -> None:
    """Issue 51's users' step, recorded by msprobe and by precheck record: clean on both ranks; precheck's twin
    grades its 8 FSDP2 collectives a rank (all_gather_single, reduce_scatter_single: msprobe 26.2 wraps neither)
    and the clipping msprobe lost (its vector_norm on synthesized shards); no row is SKIP."""
    summary = _graded(f"{CKPT}_{recorder}")
    results = _clean(summary, 2)
    assert not [r.name for r in results if SKIP in (r.forward, r.backward)]
    for run in summary.ranks.values():
        collectives = [r for r in run.results if r.name.startswith("Distributed.")]
        assert [r.forward for r in collectives] == ([PASS] * 8 if recorder == "precheck" else [])
    assert len(results) == 2 * (55 if recorder == "precheck" else 39)  # one call per signature (filter_api)


def _names(recorder: str, rank: int) -> list[str]:
    return list(
        json.loads((SHARDED / f"{CKPT}_{recorder}" / "step0" / f"rank{rank}" / "dump.json").read_text())["data"]
    )


@pytest.mark.parametrize("rank", [0, 1])
def test_msprobes_checkpointed_step_ends_early_and_precheck_records_it_whole_by_msprobes_names(rank: int) -> None:
    """msprobe 26.2 records no forward after torch's checkpoint stops the first recompute by raising through a
    linear: that record has no output, the backwards go on, 54 forwards are lost (the first layer's recompute, the
    clipping, the optimizer's step). run_ut says the dump ends early, where and why (it said nothing: the dump's
    last record is a backward). precheck record names every record msprobe wrote, in its order, leaves no record of
    the call that raised, and records the rest of the step and the collectives msprobe does not wrap."""
    dump = SHARDED / f"{CKPT}_msprobe" / "step0" / f"rank{rank}" / "dump.json"
    said = ends_early(load_dump(dump))
    assert said is not None and said.startswith(
        "the dump ends early: its last forward record, Functional.linear.21.forward, has no output, and no forward "
        "was recorded after it, only 59 backward records (msprobe 26.2 records no forward once a call raises"
    )
    assert ends_early(load_dump(SHARDED / f"{CKPT}_precheck" / "step0" / f"rank{rank}" / "dump.json")) is None
    theirs, ours = _names("msprobe", rank), _names("precheck", rank)
    cut = theirs.index("Functional.linear.21.forward")
    mine = [
        n for n in ours if not n.startswith(("Distributed.all_gather_single.", "Distributed.reduce_scatter_single."))
    ]
    assert len(ours) - len(mine) == 8
    assert mine[:cut] == theirs[:cut]
    lost = [n for n in mine[cut:] if n.endswith(".forward")]
    assert [n for n in mine[cut:] if n.endswith(".backward")] == theirs[cut + 1 :]
    assert len(lost) == 54 and lost[-1] == "Tensor.add_.20.forward" and "Torch._foreach_norm.0.forward" in lost
