"""Sharded steps (DTensor: tensor parallelism, FSDP2, FSDP2 over TP on a 2 x 2 mesh) recorded by msprobe 26.2 on
gloo ranks: each rank's local call graded, each DTensor call graded as a whole in the CSVs of its mesh's first rank
(``<call>.whole``), the _StridedShard msprobe leaves out rebuilt or its SKIP saying why, tests/data/sharded/."""

import json
import re
import shutil
from pathlib import Path

import pytest
import torch

from precheck.core.reasons import Reason
from precheck.core.status import PASS, WARNING
from precheck.dump.decode import decode_case
from precheck.dump.selection import ApiLists
from precheck.dump.steps import find_dumps
from precheck.execution.options import CheckOptions
from precheck.frames import reasons
from precheck.ranks import run_step
from precheck.results import skipped
from precheck.run_files.csv_files import read_csv_rows
from precheck.run_ut import run_ut

SHARDED = Path(__file__).parent / "data" / "sharded"
TP, BAD, FSDP2 = (
    SHARDED / "tp_tensor_msprobe",
    SHARDED / "tp_bad_matmul_tensor_msprobe",
    SHARDED / "fsdp2_clip_tensor_msprobe",
)
HSDP = SHARDED / "hsdp_norms_tensor_msprobe"  # 4 ranks, a 2 x 2 mesh; only the clipping's norms recorded
LINEARS = [f"Functional.linear.{i}" for i in range(7)]
CLIPPING = [
    "Torch._foreach_norm.0",
    "Torch.vector_norm.0",
    "Tensor.__add__.3",
    "Tensor.reciprocal.0",
    "Tensor.__mul__.2",
]
UNSAVED = ["Tensor.__add__.1", "Tensor.__add__.2"]  # a RowwiseParallel output (AsyncCollectiveTensor) added


def _rows(step: Path, out: Path, target: str = "device") -> dict[str, dict[str, tuple[str, str, str]]]:
    """Each rank's result rows: name -> (forward, backward, message)."""
    return _rows_of(step, out, ["rank0", "rank1"], target)


def _rows_of(step: Path, out: Path, ranks: list[str], target: str = "device") -> dict[str, dict[str, tuple]]:
    options = CheckOptions(target=target)
    run_step(find_dumps(step / "step0"), out, device="cpu", workers=1, backend="inprocess", options=options)
    rows = {}
    for rank in ranks:
        (result,) = (out / rank).glob("accuracy_checking_result_*.csv")
        _, found = read_csv_rows(result)
        rows[rank] = {
            r["API name"]: (r["Forward Test Success"], r["Backward Test Success"], r["Message"]) for r in found
        }
    return rows


@pytest.fixture(scope="module")
def tp(tmp_path_factory):
    return _rows(TP, tmp_path_factory.mktemp("tp"))


def test_every_sharded_linear_is_graded_on_each_rank_forward_and_backward(tp):
    for rank in ("rank0", "rank1"):
        for name in LINEARS:
            assert tp[rank][name][:2] == ("pass", "pass"), (rank, name, tp[rank][name])


def test_every_sharded_linear_is_graded_as_a_whole_in_rank0s_csv(tp):
    for name in LINEARS:
        forward, backward, message = tp["rank0"][f"{name}.whole"]
        assert (forward, backward) == ("pass", "pass"), (name, message)
        assert message.startswith("whole call over ranks [0, 1]: shards put together by their placements (")
        assert f"{name}.whole" not in tp["rank1"]
    # a column-parallel matmul's weight is split by rows, its output by columns; a row-parallel's output is Partial
    assert "input_args[1] Shard(0), output[0] Shard(2)" in tp["rank0"]["Functional.linear.0.whole"][2]
    assert "output[0] Partial(sum)" in tp["rank0"]["Functional.linear.3.whole"][2]


def test_a_clean_tp_step_skips_only_the_calls_with_an_argument_saved_without_data(tp):
    for rank, rows in tp.items():
        assert {n for n, r in rows.items() if r[0] != "pass"} == set(UNSAVED), rank
        for name in UNSAVED:
            forward, backward, message = rows[name]
            assert (forward, backward) == ("SKIP", "SKIP")  # msprobe's SKIP/SKIP: the call has a backward
            assert message.startswith("input_args[1]: AsyncCollectiveTensor saved by msprobe without data")


def test_a_skip_rows_code_says_its_inputs_cannot_be_rebuilt(tmp_path):
    run_step(find_dumps(TP / "step0"), tmp_path, device="cpu", workers=1, backend="inprocess")
    (details,) = (tmp_path / "rank0").glob("accuracy_checking_details_*.csv")
    codes = reasons.read(details)
    assert codes["Tensor.__add__.1.forward.output.0"].reason == Reason.SKIP_INPUTS


@pytest.mark.parametrize("target", ["device", "recorded"])
def test_a_clean_fsdp2_clipping_tail_is_graded_per_rank_and_whole_without_error(tmp_path, target):
    rows = _rows(FSDP2, tmp_path, target)
    for rank in ("rank0", "rank1"):
        assert {r[0] for r in rows[rank].values()} == {"pass"}, rank
        for name in CLIPPING:
            assert name in rows[rank]
    for name in CLIPPING:
        assert rows["rank0"][f"{name}.whole"][0] == "pass"
    # the total norm: each rank's kernel ran on the ranks' norms put together (its Partial input reduced first)
    assert "its Partial inputs reduced across the ranks first" in rows["rank1"]["Torch.vector_norm.0"][2]


def test_a_wrongly_computed_sharded_matmul_is_an_error_per_rank_and_as_a_whole(tmp_path):
    rows = _rows(BAD, tmp_path, "recorded")
    for name in LINEARS:
        assert rows["rank0"][f"{name}.whole"][0] == "error", name
        for rank in ("rank0", "rank1"):
            assert rows[rank][name][0] == "error", (rank, name)


def test_a_bad_recording_is_an_error_per_rank_by_its_recorded_outputs_and_as_a_whole(tmp_path):
    """A rank's row reruns the kernel on the device (sound here) and grades the recorded outputs too, which name the
    kernel that ran in training; the whole call is what the ranks recorded."""
    rows = _rows(BAD, tmp_path / "device")
    for name in LINEARS:
        forward, _, message = rows["rank0"][name]
        assert forward == "error" and "its recorded value is worse than an honest fp32 kernel" in message
        assert "this machine's replay on cpu is not (pass)" in message
        assert rows["rank0"][f"{name}.whole"][0] == "error"


def test_a_missing_rank_makes_the_whole_call_a_skip_that_says_so(tmp_path):
    step = tmp_path / "step"
    shutil.copytree(TP, step)
    shutil.rmtree(step / "step0" / "rank1")
    rows = _rows_of(step, tmp_path / "out", ["rank0"])
    forward, backward, message = rows["rank0"]["Functional.linear.0.whole"]
    assert (forward, backward) == ("SKIP", "SKIP")
    assert "rank 1 of its mesh has no dump in the step folder" in message
    assert rows["rank0"]["Functional.linear.0"][0] == "pass"  # its own shards are still graded


def test_a_shards_unreadable_file_makes_the_whole_call_a_skip_naming_it(tmp_path):
    step = tmp_path / "step"
    shutil.copytree(TP, step)
    (step / "step0" / "rank1" / "dump_tensor_data" / "Functional.linear.4.forward.input.1.pt").write_bytes(b"no")
    rows = _rows(step, tmp_path / "out")
    forward, _, message = rows["rank0"]["Functional.linear.4.whole"]
    assert forward == "SKIP" and "rank 1: Functional.linear.4.forward.input.1.pt" in message
    assert rows["rank0"]["Functional.linear.5.whole"][0] == "pass"


def test_a_forward_skip_of_a_call_that_recorded_a_backward_is_skip_both_ways():
    """msprobe writes SKIP/SKIP; a blank backward cell would say no backward was recorded."""
    fwd = {"input_args": [{"type": "some.Unknown"}], "output": []}
    for bwd, backward in (({"input": [], "output": []}, "SKIP"), (None, None)):
        result = skipped(decode_case("Torch.x.0", "Torch.x", 0, fwd, bwd), "why")
        assert (result.forward, result.backward) == ("SKIP", backward)


@pytest.mark.parametrize(
    ("placement", "said"),
    [
        ({"Shard": {"dim": 7}}, "shards that do not fit [Shard(7)] on ranks [0, 1]: IndexError"),
        ({"Strided": {"dim": 0}}, "input_args[1]: placements [{'Strided': {'dim': 0}}] are not one per mesh dimension"),
    ],
)
def test_a_placement_the_shards_do_not_fit_is_the_whole_calls_skip_not_the_steps_end(tmp_path, placement, said):
    step = tmp_path / "step"
    shutil.copytree(TP, step)
    for rank in ("rank0", "rank1"):
        path = step / "step0" / rank / "dump.json"
        doc = json.loads(path.read_text())
        doc["data"]["Functional.linear.4.forward"]["input_args"][1]["placements"] = [placement]
        path.write_text(json.dumps(doc))
    rows = _rows(step, tmp_path / "out")
    forward, _, message = rows["rank0"]["Functional.linear.4.whole"]
    assert forward == "SKIP" and said in message, message
    assert rows["rank0"]["Functional.linear.4"][0] == "pass"  # its own shards are still graded
    assert rows["rank0"]["Functional.linear.5.whole"][0] == "pass"


def test_a_replicated_output_that_differs_between_ranks_is_said_in_the_whole_calls_message(tmp_path):
    step = tmp_path / "step"
    shutil.copytree(FSDP2, step)
    path = step / "step0" / "rank1" / "dump_tensor_data" / "Tensor.reciprocal.0.forward.output.0.pt"
    torch.save(torch.load(path) + 0.5, path)
    rows = _rows(step, tmp_path / "out")
    message = rows["rank0"]["Tensor.reciprocal.0.whole"][2]
    assert "output[0] is replicated, yet rank 1's differs from rank 0's by up to 0.5: graded on rank 0's" in message
    assert "differs" not in rows["rank0"]["Tensor.__mul__.2.whole"][2]


def _statistics_only(step: Path) -> None:
    """The step as a statistics dump: the same records, no tensor files."""
    for rank in ("rank0", "rank1"):
        folder = step / "step0" / rank
        shutil.rmtree(folder / "dump_tensor_data")
        text = (folder / "dump.json").read_text()
        (folder / "dump.json").write_text(
            re.sub(r',\s*"data_name": "[^"]*"', "", text).replace('"tensor"', '"statistics"')
        )


def test_the_console_counts_the_whole_calls_graded_apart_from_those_skipped(tmp_path):
    step = tmp_path / "step"
    shutil.copytree(TP, step)
    summary = run_step(find_dumps(step / "step0"), tmp_path / "out", device="cpu", workers=1, backend="inprocess")
    line = "  sharded: 7 DTensor calls as a whole (<call>.whole rows of each mesh's first rank): 7 graded, 0 SKIP"
    assert line in summary.describe()
    assert len([r for r in summary.results if r.name.endswith(".whole")]) == 7


def test_a_statistics_dumps_dtensor_calls_have_no_whole_row_and_the_run_says_so_once(tmp_path):
    """A statistics dump's shards hold no values: its whole rows were 7 SKIPs ("shards need their values"); a
    whole of shards generated from their statistics would grade a call no device ran, so it has none, and the
    console says so in one line. Each rank's own rows are graded as before."""
    step = tmp_path / "step"
    shutil.copytree(TP, step)
    _statistics_only(step)
    summary = run_step(find_dumps(step / "step0"), tmp_path / "out", device="cpu", workers=1, backend="inprocess")
    text = summary.describe()
    assert not [r.name for r in summary.results if r.name.endswith(".whole")]
    assert "as a whole (<call>.whole rows" not in text
    line = "  sharded: 7 DTensor calls of a statistics dump, none put together as a whole (no <call>.whole rows)"
    assert text.count(line) == 1
    own = [r for r in summary.results if r.name == "Functional.linear.4"]
    assert len(own) == 2 and {r.forward for r in own} <= {PASS, WARNING}
    assert all("inputs generated from statistics" in r.message for r in own)


@pytest.mark.parametrize("mesh", ["x", [0, 0], [[0, 1], [2]], []])
def test_a_mesh_that_is_no_grid_of_ranks_leaves_the_shard_graded_and_the_whole_call_a_skip(tmp_path, mesh):
    step = tmp_path / "step"
    shutil.copytree(TP, step)
    for rank in ("rank0", "rank1"):
        path = step / "step0" / rank / "dump.json"
        doc = json.loads(path.read_text())
        doc["data"]["Functional.linear.4.forward"]["output"][0]["device_mesh"] = mesh
        path.write_text(json.dumps(doc))
    rows = _rows(step, tmp_path / "out")
    forward, _, message = rows["rank0"]["Functional.linear.4.whole"]
    assert forward == "SKIP" and "output[0]: a DTensor's device_mesh is not a" in message, message
    for rank in ("rank0", "rank1"):
        assert rows[rank]["Functional.linear.4"][:2] == ("pass", "pass")


def test_each_tensor_parallel_group_of_a_step_has_its_whole_calls_in_its_first_ranks_csv(tmp_path):
    """Data parallel x tensor parallel: ranks 0-1 and 2-3 are two meshes, each a whole call of its own."""
    step = tmp_path / "step"
    shutil.copytree(TP, step)
    for source, copy in (("rank0", "rank2"), ("rank1", "rank3")):
        shutil.copytree(step / "step0" / source, step / "step0" / copy)
        path = step / "step0" / copy / "dump.json"
        path.write_text(
            path.read_text().replace('"device_mesh": [\n      0,\n      1\n     ]', '"device_mesh": [2, 3]')
        )
    assert '"device_mesh": [2, 3]' in (step / "step0" / "rank3" / "dump.json").read_text()
    rows = _rows_of(step, tmp_path / "out", ["rank0", "rank1", "rank2", "rank3"])
    for name in LINEARS:
        assert rows["rank0"][f"{name}.whole"][:2] == ("pass", "pass")
        assert "whole call over ranks [0, 1]" in rows["rank0"][f"{name}.whole"][2]
        assert rows["rank2"][f"{name}.whole"][:2] == ("pass", "pass")
        assert "whole call over ranks [2, 3]" in rows["rank2"][f"{name}.whole"][2]
        assert f"{name}.whole" not in rows["rank1"] and f"{name}.whole" not in rows["rank3"]


def test_a_call_the_api_lists_leave_out_has_no_whole_row_and_its_rank_rows_say_listed_out(tmp_path):
    lists = ApiLists(black=frozenset({"vector_norm"}))
    run_step(find_dumps(FSDP2 / "step0"), tmp_path, device="cpu", workers=1, backend="inprocess", api_lists=lists)
    for rank in ("rank0", "rank1"):
        (result,) = (tmp_path / rank).glob("accuracy_checking_result_*.csv")
        rows = {r["API name"]: r for r in read_csv_rows(result)[1]}
        assert rows["Torch.vector_norm.0"]["Forward Test Success"] == "SKIP"
        assert "black list" in rows["Torch.vector_norm.0"]["Message"]
        assert "Torch.vector_norm.0.whole" not in rows
        assert (
            rows.get("Torch._foreach_norm.0.whole", {"Forward Test Success": "pass"})["Forward Test Success"] == "pass"
        )


def test_a_whole_call_above_max_memory_is_a_skip_that_says_how_much(tmp_path):
    options = CheckOptions(max_memory=4096)  # each rank's own linear fits; five times both ranks' shards do not
    run_step(find_dumps(TP / "step0"), tmp_path, device="cpu", workers=1, backend="inprocess", options=options)
    (result,) = (tmp_path / "rank0").glob("accuracy_checking_result_*.csv")
    rows = {r["API name"]: r for r in read_csv_rows(result)[1]}
    whole = rows["Functional.linear.0.whole"]
    assert whole["Forward Test Success"] == "SKIP"
    assert "putting its shards together needs about" in whole["Message"] and "above --max-memory" in whole["Message"]
    assert rows["Functional.linear.0"]["Forward Test Success"] == "pass"


@pytest.mark.parametrize("target", ["device", "recorded"])
def test_a_two_dimensional_meshs_norms_are_graded_per_rank_and_as_a_whole(tmp_path, target):
    rows = _rows_of(HSDP, tmp_path, ["rank0", "rank1", "rank2", "rank3"], target)
    for rank, found in rows.items():
        assert {r[0] for r in found.values()} == {"pass"}, (rank, found)
    calls = ["Torch._foreach_norm.0", "Torch.vector_norm.0", "Tensor.reciprocal.0"]
    assert all(rows["rank0"][f"{name}.whole"][0] == "pass" for name in calls)
    assert "whole call over ranks [0, 1, 2, 3]" in rows["rank0"]["Torch.vector_norm.0.whole"][2]
    assert "input_args[0] (Replicate(), Partial(sum))" in rows["rank0"]["Torch.vector_norm.0.whole"][2]
    assert not any(name.endswith(".whole") for rank in ("rank1", "rank2", "rank3") for name in rows[rank])


@pytest.mark.parametrize("target", ["device", "recorded"])
def test_one_ranks_dump_alone_skips_a_call_whose_partial_input_was_reduced_before_its_kernel(tmp_path, target):
    """Its kernel ran on the ranks' values put together, which no one rank recorded (with --target recorded it was
    a false error, with the device a rerun of a computation that never ran)."""
    summary = run_ut(FSDP2 / "step0" / "rank0" / "dump.json", tmp_path, device="cpu", workers=1,
                     backend="inprocess", options=CheckOptions(target=target))  # fmt: skip
    rows = {r.name: r for r in summary.results}
    norm = rows["Torch.vector_norm.0"]
    assert norm.forward == "SKIP" and "run_ut the step folder of every rank to grade it" in norm.message
    assert norm.details[0].comparison.reason == Reason.SKIP_MISSING_RANK
    assert {r.forward for name, r in rows.items() if name != "Torch.vector_norm.0"} == {"pass"}


NORMS_2D = SHARDED / "fsdp2_tp_sp_norms_tensor_msprobe"  # FSDP2 over TP + SP, 2 x 2 mesh: the clipping's norms
STRIDED = "_StridedShard(0, split_factor=2)"


def test_fsdp_over_tps_strided_shards_are_rebuilt_and_the_whole_norms_graded(tmp_path):
    """msprobe writes the weights TP and FSDP2 both shard on dim 0 as ``[Shard(0)]`` on the 2 x 2 mesh (it drops
    their _StridedShard): the whole clipping norm was SKIP; rebuilt, it is graded, its Message saying so."""
    rows = _rows_of(NORMS_2D, tmp_path, [f"rank{r}" for r in range(4)])
    assert {v[0] for rank in rows.values() for v in rank.values()} == {"pass"}
    calls = ("Torch._foreach_norm.0", "Torch.vector_norm.0", "Tensor.reciprocal.0")
    assert sorted(rows["rank0"]) == sorted(f"{c}{w}" for c in calls for w in ("", ".whole"))
    message = rows["rank0"]["Torch._foreach_norm.0.whole"][2]
    assert f"input_args[0][0] ({STRIDED}, Shard(0))" in message
    assert f"msprobe left out 1 of its 2 placements (it writes no _StridedShard): rebuilt as {STRIDED}" in message
    assert "(and 6 more of its tensors alike)" in message


def test_the_rebuilt_layout_puts_the_ranks_shards_where_dtensor_holds_them():
    """Rank (dp d, tp t) of a weight TP shards on dim 0 and FSDP2 shards again holds rows t*L/2 + d*L/4 on: put
    together by the rebuilt layout, the shards make the weight itself (concatenated in rank order, they do not)."""
    from precheck.dump.sharding import decode_sharding
    from precheck.execution.shards import Layout, put_together

    weight = torch.arange(8 * 3, dtype=torch.float32).reshape(8, 3)
    shards = {2 * d + t: weight[4 * t + 2 * d : 4 * t + 2 * d + 2] for d in (0, 1) for t in (0, 1)}
    raw = {"shape": [2, 3], "device_mesh": [[0, 1], [2, 3]], "placements": [{"Shard": {"dim": 0}}]}
    sharding = decode_sharding(raw, "input_args[0]")
    assert [str(p) for p in sharding.placements] == [STRIDED, "Shard(0)"]
    assert torch.equal(put_together(sharding, shards, Layout(0)), weight)
    assert not torch.equal(torch.cat([shards[r] for r in range(4)]), weight)


@pytest.mark.parametrize(
    ("mesh", "kept", "said"),
    [
        ([[0, 1], [2, 3]], [{"Replicate": {}}], "and no _StridedShard fits"),
        ([[[0, 1], [2, 3]], [[4, 5], [6, 7]]], [{"Replicate": {}}, {"Shard": {"dim": 0}}],
         f"more than one layout fits: ({STRIDED}, Replicate(), Shard(0)) or (Replicate(), {STRIDED}, Shard(0)); "
         "precheck does not guess which"),
    ],
)  # fmt: skip
def test_a_left_out_placement_that_cannot_be_rebuilt_says_why(mesh, kept, said):
    """No layout fits (nothing after the gap shards again), or several do (HSDP over TP on a 3-D mesh: the strided
    shard on either data-parallel dimension): the layout stays unknown, and the whole call's SKIP says which."""
    from precheck.dump.sharding import decode_sharding

    sharding = decode_sharding({"shape": [2, 3], "device_mesh": mesh, "placements": kept}, "input_args[0]")
    assert sharding.placements is None
    assert f"on a mesh of {len(kept) + 1} dimensions: msprobe left out 1 of its {len(kept) + 1} placements" in (
        sharding.problem
    )
    assert said in sharding.problem, sharding.problem


def test_a_strided_shard_that_cannot_be_rebuilt_is_the_whole_calls_skip_and_its_shards_still_graded(tmp_path):
    step = tmp_path / "step"
    shutil.copytree(NORMS_2D, step)
    for rank in range(4):
        path = step / "step0" / f"rank{rank}" / "dump.json"
        doc = json.loads(path.read_text())
        doc["data"]["Torch._foreach_norm.0.forward"]["input_args"][0][0]["placements"] = [{"Replicate": {}}]
        path.write_text(json.dumps(doc))
    rows = _rows_of(step, tmp_path / "out", ["rank0"])
    forward, _, message = rows["rank0"]["Torch._foreach_norm.0.whole"]
    assert forward == "SKIP" and "input_args[0][0]: placements [{'Replicate': {}}] on a mesh of 2" in message
    assert "no _StridedShard fits" in message
    assert rows["rank0"]["Torch._foreach_norm.0"][0] == "pass"
