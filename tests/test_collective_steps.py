"""Collectives of sharded-training steps graded across their ranks (issue 44): Megatron-style subgroups, a job
where only some ranks dumped, async collectives, FSDP2's all_gather_single/reduce_scatter_single, and a
statistics dump's collectives checked on their linear statistics. The steps are tests/data/sharded/*, recorded by
tests/data/sharded/make_collective_steps.py (msprobe 26.2, or precheck.record where said)."""

import shutil
from pathlib import Path

import pytest
import torch
from helpers import collective_rows, run_step_inprocess

from precheck.core.reasons import Reason
from precheck.frames import reasons
from precheck.ranks.collective_stats import statistics_rows

DATA = Path(__file__).parent / "data" / "sharded"


_run = run_step_inprocess
_collectives = collective_rows


def test_each_subgroup_collective_is_graded_among_its_own_group(tmp_path):
    """Ranks {0,1} and {2,3} all_reduce in their tensor-parallel group, {0,2} and {1,3} in their data-parallel
    one, under the same names: each rank's row is graded against its own record's group (ranks 2-3 were graded
    against {0,1}'s record: 8 errors and 2 SKIPs of 24 correct rows)."""
    rows = _collectives(_run(DATA / "megatron_subgroups_tensor" / "step0", tmp_path))
    assert len(rows) == 24
    assert {key: row["Forward Test Success"] for key, row in rows.items()} == dict.fromkeys(rows, "pass")


def test_a_wrong_output_in_one_subgroup_is_an_error_there_only(tmp_path):
    step = tmp_path / "step0"
    shutil.copytree(DATA / "megatron_subgroups_tensor" / "step0", step)
    data = step / "rank3" / "dump_tensor_data"  # the tensor-parallel all_reduce of {2,3}: rank 3's own partial sum
    shutil.copy(
        data / "Distributed.all_reduce.0.forward.input.0.pt", data / "Distributed.all_reduce.0.forward.output.0.pt"
    )
    rows = _collectives(_run(step, tmp_path / "out"))
    verdicts = {rank: rows[(rank, "Distributed.all_reduce.0")]["Forward Test Success"] for rank in
                ("rank0", "rank1", "rank2", "rank3")}  # fmt: skip
    assert verdicts == {"rank0": "pass", "rank1": "pass", "rank2": "pass", "rank3": "error"}


def test_a_group_its_members_recorded_apart_is_skip_bad_record(tmp_path):
    """Rank 1's record says the call ran in {1,3} while rank 0's says {0,1}: no golden, the reason says so."""
    import json

    step = tmp_path / "step0"
    shutil.copytree(DATA / "megatron_subgroups_tensor" / "step0", step)
    dump = step / "rank1" / "dump.json"
    doc = json.loads(dump.read_text())
    doc["data"]["Distributed.all_reduce.0.forward"]["input_kwargs"]["group"]["group_ranks"] = [1, 3]
    dump.write_text(json.dumps(doc))
    summary = _run(step, tmp_path / "out")
    rows = _collectives(summary)
    row = rows[("rank0", "Distributed.all_reduce.0")]
    assert (
        row["Forward Test Success"] == "SKIP"
        and "rank 1 recorded Distributed.all_reduce.0 in the group [1, 3]" in (row["Message"])
    )
    found = reasons.read(summary.ranks["rank0"].details_path)
    assert found["Distributed.all_reduce.0.forward.output.0"].reason == Reason.SKIP_BAD_RECORD


def test_ranks_that_did_not_dump_are_missing_never_a_golden_from_those_found(tmp_path):
    """msprobe's "rank": [0, 1] in a job of 4: the all_gather's list of 4 shows the world, so the all_reduce over
    it (graded error from 2 ranks before) and the all_gather (SKIP with a zip() ValueError before) are
    skip_missing_rank; the console counts no collective row as graded."""
    summary = _run(DATA / "partial_ranks_tensor" / "step0", tmp_path)
    rows = _collectives(summary)
    assert set(rows) == {(r, n) for r in ("rank0", "rank1") for n in ("Distributed.all_reduce.0",
                                                                      "Distributed.all_gather.0")}  # fmt: skip
    for (rank, name), row in rows.items():
        assert row["Forward Test Success"] == "SKIP"
        assert "rank 2 has no dump in" in row["Message"] and "2 of 4 ranks of its group missing" in row["Message"]
        found = reasons.read(summary.ranks[rank].details_path)
        assert found[f"{name}.forward.output.0"].reason == Reason.SKIP_MISSING_RANK
    assert summary.collectives == 0 and "0 collective rows graded" in summary.describe()


def test_an_all_gather_list_longer_than_its_group_is_skip_saying_so(tmp_path):
    """An all_gather's list of 4 where its record names a group of 2: a SKIP saying so, not a zip() error."""
    import json

    step = tmp_path / "step0"
    shutil.copytree(DATA / "megatron_subgroups_tensor" / "step0", step)
    for rank in ("rank0", "rank1"):
        dump = step / rank / "dump.json"
        doc = json.loads(dump.read_text())
        record = doc["data"]["Distributed.all_gather.0.forward"]
        record["output"][0] = record["output"][0] * 2
        dump.write_text(json.dumps(doc))
    rows = _collectives(_run(step, tmp_path / "out"))
    row = rows[("rank0", "Distributed.all_gather.0")]
    assert row["Forward Test Success"] == "SKIP" and "list holds 4 tensors, its group 2 ranks" in row["Message"]
    assert rows[("rank2", "Distributed.all_gather.0")]["Forward Test Success"] == "pass"


def test_an_async_output_msprobe_read_before_completion_is_skip_not_error(tmp_path):
    """The program waited through the works' futures, so msprobe's wait() hook never ran and its records hold the
    tensors as they were when the calls returned: rank 0's all_reduce and broadcast, and rank 1's all_reduce, not
    yet done (graded error before). Unfinished and wrong cannot be told apart there: SKIP, saying why."""
    summary = _run(DATA / "async_msprobe_tensor" / "step0", tmp_path)
    rows = _collectives(summary)
    assert {key: row["Forward Test Success"] for key, row in rows.items()} == {
        ("rank0", "Distributed.all_reduce.0"): "SKIP",
        ("rank0", "Distributed.broadcast.0"): "SKIP",
        ("rank1", "Distributed.all_reduce.0"): "SKIP",
        ("rank1", "Distributed.broadcast.0"): "pass",  # the src's own tensor: done when the call returned
    }
    message = rows[("rank0", "Distributed.all_reduce.0")]["Message"]
    assert message.startswith("async_op=True and the recorded output is unfinished or wrong")
    assert "msprobe records an async collective's output at Work.wait()" in message
    found = reasons.read(summary.ranks["rank0"].details_path)
    assert found["Distributed.all_reduce.0.forward.output.0"].reason == Reason.SKIP_RECORDED_OUTPUT


def test_async_collectives_precheck_recorded_pass(tmp_path):
    rows = _collectives(_run(DATA / "async_precheck_tensor" / "step0", tmp_path))
    assert len(rows) == 4 and {row["Forward Test Success"] for row in rows.values()} == {"pass"}


def test_fsdp2s_gathers_and_reduce_scatters_are_graded_across_ranks(tmp_path):
    """FSDP2 with a bf16 MixedPrecisionPolicy, recorded by precheck record: its all_gather_single (parameters) and
    reduce_scatter_single (bf16 gradients, AVG) are graded against the float64 collective of both ranks' inputs
    (an FSDP2 dump had no Distributed record before); a gradient shard that is not the reduction is an error."""
    step = tmp_path / "step0"
    shutil.copytree(DATA / "fsdp2_bf16_tensor" / "step0", step)
    rows = _collectives(_run(step, tmp_path / "out"))
    names = {name for _, name in rows}
    assert names == {f"Distributed.all_gather_single.{i}" for i in range(4)} | {
        f"Distributed.reduce_scatter_single.{i}" for i in range(2)
    }
    assert {row["Forward Test Success"] for row in rows.values()} <= {"pass", "warning"}
    data = step / "rank1" / "dump_tensor_data"
    call = "Distributed.reduce_scatter_single.0.forward"
    wrong = torch.load(data / f"{call}.kwargs.input.pt")[:34] * 2  # a half of its own input, doubled
    torch.save(wrong, data / f"{call}.output.0.pt")
    rows = _collectives(_run(step, tmp_path / "again"))
    assert rows[("rank1", "Distributed.reduce_scatter_single.0")]["Forward Test Success"] == "error"
    assert rows[("rank0", "Distributed.reduce_scatter_single.0")]["Forward Test Success"] in ("pass", "warning")


def _edited(tmp_path: Path, source: str, rank: str, call: str, edit) -> Path:
    """A copy of the step ``source`` with ``edit`` applied to rank's record of ``call``."""
    import json

    step = tmp_path / "step0"
    shutil.copytree(DATA / source / "step0", step)
    dump = step / rank / "dump.json"
    doc = json.loads(dump.read_text())
    edit(doc["data"][f"{call}.forward"])
    dump.write_text(json.dumps(doc))
    return step


def test_a_statistics_dumps_collectives_are_checked_on_their_linear_statistics(tmp_path):
    """msprobe's statistics dump of the Megatron step: every collective was SKIP ("a collective needs its
    values"); an all_reduce(SUM)'s output Mean is the sum of its group's input Means, MAX's Max the largest Max,
    a broadcast's statistics its src's, an all_gather's tensors their ranks': checked, and the Message says so."""
    summary = _run(DATA / "megatron_subgroups_statistics" / "step0", tmp_path)
    rows = _collectives(summary)
    assert len(rows) == 24 and {row["Forward Test Success"] for row in rows.values()} == {"pass"}
    assert "Mean = sum of the inputs' Means" in rows[("rank2", "Distributed.all_reduce.0")]["Message"]
    assert "Max = largest of the inputs' Maxes" in rows[("rank0", "Distributed.all_reduce.3")]["Message"]
    assert "Mean = src rank 2's input's" in rows[("rank3", "Distributed.broadcast.0")]["Message"]
    assert summary.collectives == 24


def test_a_broken_statistic_of_a_collective_is_an_error(tmp_path):
    """Rank 3's all_reduce output Mean 0.5 off the sum of its group's input Means: proven wrong by the
    statistics alone, on rank 3 only (its peer's output is its own record)."""

    def shift(record):
        record["output"][0]["Mean"] += 0.5

    step = _edited(tmp_path, "megatron_subgroups_statistics", "rank3", "Distributed.all_reduce.0", shift)
    rows = _collectives(_run(step, tmp_path / "out"))
    verdicts = {r: rows[(r, "Distributed.all_reduce.0")]["Forward Test Success"] for r in ("rank2", "rank3")}
    assert verdicts == {"rank2": "pass", "rank3": "error"}
    assert "broken: Mean = sum of the inputs' Means" in rows[("rank3", "Distributed.all_reduce.0")]["Message"]


def test_a_broadcast_whose_statistics_are_not_its_srcs_is_an_error(tmp_path):
    def other(record):
        record["output"][0]["Max"] = record["output"][0]["Max"] + 1.0

    step = _edited(tmp_path, "megatron_subgroups_statistics", "rank1", "Distributed.broadcast.0", other)
    rows = _collectives(_run(step, tmp_path / "out"))
    assert rows[("rank1", "Distributed.broadcast.0")]["Forward Test Success"] == "error"
    assert rows[("rank0", "Distributed.broadcast.0")]["Forward Test Success"] == "pass"


def test_fsdp2s_bf16_reduce_scatter_is_checked_on_its_statistics(tmp_path):
    """FSDP2's statistics dump (precheck record): its bf16 gradient reduce-scatter's outputs' Means over the
    group are the mean of its inputs' Means within bf16's rounding; rank 1's output Mean moved by 0.05 breaks it
    (on both ranks' rows: the identity is the group's)."""
    rows = _collectives(_run(DATA / "fsdp2_bf16_statistics" / "step0", tmp_path / "clean"))
    assert len(rows) == 12 and {row["Forward Test Success"] for row in rows.values()} == {"pass"}

    def shift(record):
        record["output"][0]["Mean"] += 0.05

    step = _edited(tmp_path, "fsdp2_bf16_statistics", "rank1", "Distributed.reduce_scatter_single.0", shift)
    rows = _collectives(_run(step, tmp_path / "out"))
    row = rows[("rank1", "Distributed.reduce_scatter_single.0")]
    assert row["Forward Test Success"] == "error" and "the group's outputs' mean Mean" in row["Message"]


def test_fsdp1s_gradient_reduce_scatter_is_recorded_and_graded(tmp_path):
    """FSDP1 on CPU (precheck record): its parameters all_gather'd, its gradients reduce_scatter_single'd (no
    Distributed record of them in msprobe's dump), both graded across the ranks."""
    rows = _collectives(_run(DATA / "fsdp1_fp32_tensor" / "step0", tmp_path))
    assert {key: row["Forward Test Success"] for key, row in rows.items()} == {
        (rank, name): "pass"
        for rank in ("rank0", "rank1")
        for name in ("Distributed.all_gather.0", "Distributed.reduce_scatter_single.0")
    }


def test_precheck_records_the_megatron_step_as_msprobe_and_its_collectives_pass(tmp_path):
    """The same 4-rank Megatron step recorded by precheck record: each rank's records are msprobe's, by name
    and order, and its 24 collective rows pass on their statistics, each in its own subgroup."""
    import json

    for rank in range(4):
        names = [list(json.loads((DATA / step / "step0" / f"rank{rank}" / "dump.json").read_text())["data"])
                 for step in ("megatron_subgroups_statistics", "megatron_subgroups_precheck_statistics")]  # fmt: skip
        assert names[0] == names[1]
    rows = _collectives(_run(DATA / "megatron_subgroups_precheck_statistics" / "step0", tmp_path))
    assert len(rows) == 24 and {row["Forward Test Success"] for row in rows.values()} == {"pass"}


def test_a_record_showing_a_huge_world_widens_no_default_group(tmp_path):
    """A subgroup record naming rank 10**9 shows no world of 10**9 ranks for the calls on the default group (their
    members would be listed one by one); the partial-rank step's calls stay skip_missing_rank for ranks 2 and 3."""

    def huge(record):
        record["input_kwargs"] = {"group": {"type": "torch.ProcessGroup", "group_ranks": [0, 10**9]}}

    step = _edited(tmp_path, "partial_ranks_tensor", "rank1", "Distributed.all_reduce.0", huge)
    rows = _collectives(_run(step, tmp_path / "out"))
    row = rows[("rank0", "Distributed.all_gather.0")]
    assert row["Forward Test Success"] == "SKIP" and "2 of 4 ranks of its group missing" in row["Message"]


def _gathered(norms: tuple[float, float], out_norm: float, size: int = 1040) -> dict[int, dict]:
    """Two ranks' records of an all_gather_single of ``size`` floats each, statistics as FSDP2's first parameter
    all-gather of make_2d_steps.py recorded them (precheck record, statistics task)."""
    group = {"type": "torch.ProcessGroup", "group_ranks": [0, 2], "group_id": "5ca9ce4f"}

    def t(n: int, norm: float, mean: float) -> dict:
        return {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [n], "Max": 4.1014933586120605,
                "Min": -3.153724431991577, "Mean": mean, "Norm": norm, "requires_grad": False}  # fmt: skip

    means = (0.045958518981933594, 0.018826749175786972)
    out = t(2 * size, out_norm, 0.032392632216215134)
    return {r: {"input_args": [None, t(size, norms[i], means[i])], "input_kwargs": {"group": group},
                "output": [out, t(size, norms[i], means[i]), group]} for i, r in enumerate((0, 2))}  # fmt: skip


@pytest.mark.parametrize(("out_norm", "status"), [(33.54365539550781, "pass"), (33.5470, "error")])
def test_an_all_gathers_norm_is_held_to_its_inputs_in_rms_so_a_clean_fsdp2_gather_passes(out_norm, status):
    """FSDP2 over TP's parameter all-gather (2 x 1040 floats): its recorded Norm is 9e-8 of itself from the root
    of the inputs' squared Norms, which a tolerance sized for elements (8e-7) called broken on every rank of the
    clean step; compared in RMS it passes, and a Norm 1e-4 off is still an error."""
    rows = statistics_rows(
        "Distributed.all_gather_single.0", 0, [0, 2], _gathered((23.477699279785156, 23.957759857177734), out_norm)
    )
    (row,) = rows
    assert row.comparison.status == status, row.comparison.message
    assert "RMS = root of the sum of the inputs' squared Norms" in row.comparison.message
