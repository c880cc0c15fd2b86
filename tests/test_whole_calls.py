"""DTensor calls of tensor-parallel steps graded per rank and as a whole: a vocab-parallel embedding (DTensor's
``_MaskPartial``), ``loss_parallel`` cross-entropy, the whole call's sizing and its replicated inputs. The steps
are recorded by msprobe 26.2 on 2 gloo ranks (tests/data/sharded/make_whole_steps.py)."""

import json
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

from precheck.dump.steps import find_dumps
from precheck.execution.options import CheckOptions
from precheck.ranks import run_step, shard_cases
from precheck.run_files.csv_files import read_csv_rows

SHARDED = Path(__file__).parent / "data" / "sharded"
VOCAB = SHARDED / "tp_vocab_tensor_msprobe"  # embedding, output head (linear), loss_parallel cross_entropy
DROPOUT = SHARDED / "tp_dropout_tensor_msprobe"  # the same with a dropout seeded per rank before the head
EMBEDDING = "Functional.embedding.0"


def _rows(step: Path, out: Path, target: str = "device", **options) -> dict[str, dict[str, tuple[str, str, str]]]:
    """Each rank's result rows: name -> (forward, backward, message)."""
    checks = CheckOptions(target=target, **options)
    run_step(find_dumps(step / "step0"), out, device="cpu", workers=1, backend="inprocess", options=checks)
    rows = {}
    for rank in ("rank0", "rank1"):
        (result,) = (out / rank).glob("accuracy_checking_result_*.csv")
        rows[rank] = {
            r["API name"]: (r["Forward Test Success"], r["Backward Test Success"], r["Message"])
            for r in read_csv_rows(result)[1]
        }
    return rows


def _copy(step: Path, tmp_path: Path) -> Path:
    copied = tmp_path / "step"
    shutil.copytree(step, copied)
    return copied


@pytest.fixture(scope="module", params=["device", "recorded"])
def vocab(request, tmp_path_factory):
    return _rows(VOCAB, tmp_path_factory.mktemp(f"vocab_{request.param}"), request.param)


def test_a_vocab_parallel_embeddings_ranks_replay_its_kernel_on_ids_masked_to_their_rows(vocab):
    for rank in ("rank0", "rank1"):
        forward, backward, message = vocab[rank][EMBEDDING]
        assert forward == "pass" and backward in ("pass", " "), (rank, message)
        assert "its ids masked to this rank's rows of the embedding first" in message


def test_a_vocab_parallel_embedding_is_put_together_with_dtensors_mask(vocab):
    forward, backward, message = vocab["rank0"][f"{EMBEDDING}.whole"]
    assert (forward, backward) == ("pass", "pass"), message
    assert "output[0] Partial(sum)" in message and "outside its shard zeroed before the sum" in message


def test_a_corrupted_embedding_shard_is_an_error_of_that_rank_and_of_the_whole(tmp_path):
    step = _copy(VOCAB, tmp_path)
    ids = torch.load(step / "step0" / "rank1" / "dump_tensor_data" / f"{EMBEDDING}.forward.input.0.pt")
    row = int((ids.flatten() >= 4).nonzero()[0])  # an id of rank 1's rows: its output row enters the sum
    path = step / "step0" / "rank1" / "dump_tensor_data" / f"{EMBEDDING}.forward.output.0.pt"
    output = torch.load(path)
    output.view(-1, output.shape[-1])[row, 0] += 1.0
    torch.save(output, path)
    rows = _rows(step, tmp_path / "out", "recorded")
    assert rows["rank0"][f"{EMBEDDING}.whole"][0] == "error"
    assert rows["rank1"][EMBEDDING][0] == "error"
    assert rows["rank0"][EMBEDDING][0] == "pass"


def test_one_ranks_dump_alone_skips_a_vocab_parallel_embedding_saying_why(tmp_path):
    from precheck.run_ut import run_ut

    run_ut(VOCAB / "step0" / "rank1" / "dump.json", tmp_path, device="cpu", workers=1, backend="inprocess")
    (result,) = tmp_path.glob("accuracy_checking_result_*.csv")
    rows = {r["API name"]: r for r in read_csv_rows(result)[1]}
    assert rows[EMBEDDING]["Forward Test Success"] == "SKIP"
    assert "run_ut the step folder of every rank" in rows[EMBEDDING]["Message"]


CROSS_ENTROPY = "Functional.cross_entropy.0"


def test_a_loss_parallel_cross_entropys_whole_backward_is_the_gradient_of_the_logits_put_together(vocab):
    forward, backward, message = vocab["rank0"][f"{CROSS_ENTROPY}.whole"]
    assert (forward, backward) == ("pass", "pass"), message
    assert "loss_parallel: its recorded gradient is the logits'" in message


def test_a_loss_parallel_cross_entropys_ranks_are_graded_on_the_logits_put_together(vocab):
    for rank in ("rank0", "rank1"):
        forward, backward, message = vocab[rank][CROSS_ENTROPY]
        assert (forward, backward) == ("pass", "pass"), (rank, message)
        assert message.startswith("loss_parallel: DTensor computed it across the ranks' shards of the classes")


def test_a_corrupted_logits_gradient_shard_is_the_whole_cross_entropys_backward_error(tmp_path):
    step = _copy(VOCAB, tmp_path)
    path = step / "step0" / "rank1" / "dump_tensor_data" / f"{CROSS_ENTROPY}.backward.output.0.pt"
    gradient = torch.load(path)
    gradient[0, 0] += 0.05
    torch.save(gradient, path)
    rows = _rows(step, tmp_path / "out", "recorded")
    assert rows["rank0"][f"{CROSS_ENTROPY}.whole"][:2] == ("pass", "error")


def test_one_ranks_dump_alone_skips_a_loss_parallel_cross_entropy_saying_why(tmp_path):
    from precheck.run_ut import run_ut

    run_ut(VOCAB / "step0" / "rank0" / "dump.json", tmp_path, device="cpu", workers=1, backend="inprocess")
    (result,) = tmp_path.glob("accuracy_checking_result_*.csv")
    row = {r["API name"]: r for r in read_csv_rows(result)[1]}[CROSS_ENTROPY]
    assert row["Forward Test Success"] == "SKIP" and "a loss_parallel cross-entropy" in row["Message"]


def _forged_gradient(step: Path, n: int) -> None:
    """Each rank's recorded logits gradient claims n x n elements, held by a file of a few bytes (an expanded
    tensor: its storage one element)."""
    for rank in ("rank0", "rank1"):
        folder = step / "step0" / rank
        doc = json.loads((folder / "dump.json").read_text())
        gradient = doc["data"][f"{CROSS_ENTROPY}.backward"]["output"][0]
        gradient["shape"] = [n, n]
        torch.save(torch.zeros(1).expand(n, n), folder / "dump_tensor_data" / gradient["data_name"])
        (folder / "dump.json").write_text(json.dumps(doc))


def test_a_whole_call_is_sized_with_its_recorded_gradients_and_scratch_before_a_shard_is_read(tmp_path, monkeypatch):
    step = _copy(VOCAB, tmp_path)
    _forged_gradient(step, 1024)  # 4 MiB a rank as recorded, 16 MiB put together in float64
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    read = []
    real = shard_cases.load_tensor
    monkeypatch.setattr(
        shard_cases, "load_tensor", lambda spec, *a, **k: read.append(spec.data_name) or real(spec, *a, **k)
    )
    rows = _rows(step, tmp_path / "out", "recorded", max_memory=2 * 2**20)
    forward, backward, message = rows["rank0"][f"{CROSS_ENTROPY}.whole"]
    assert (forward, backward) == ("SKIP", "SKIP")
    assert "putting its shards together needs about" in message and "(scratch files included)" in message
    assert rows["rank1"][CROSS_ENTROPY][0] == "SKIP"  # its rank rows put the logits together too
    assert not [name for name in read if name.startswith(CROSS_ENTROPY)]  # no shard of it read, none saved
    assert rows["rank0"][f"{EMBEDDING}.whole"][0] == "pass" and list(scratch.iterdir()) == []


def test_a_replicated_input_that_differs_between_ranks_names_the_input_and_rank_not_the_kernel(tmp_path):
    rows = _rows(DROPOUT, tmp_path)  # a dropout seeded per rank before the output head
    forward, backward, message = rows["rank0"]["Functional.linear.0.whole"]
    assert (forward, backward) == ("SKIP", "SKIP")
    assert message.startswith("whole call: input_args[0] is a replicated input, yet rank 1's differs from rank 0's")
    assert "the ranks ran the call on different inputs" in message and "honest" not in message
    for rank in ("rank0", "rank1"):
        assert rows[rank]["Functional.linear.0"][:2] == ("pass", "pass")  # each kernel ran right on its input


def test_a_whole_call_of_an_argument_saved_without_data_in_a_tensor_dump_says_so(vocab):
    """The head's input is the embedding's output once DTensor reduced it (an AsyncCollectiveTensor): msprobe
    saved it with null statistics and no file, in a tensor dump."""
    forward, _, message = vocab["rank0"]["Functional.linear.0.whole"]
    assert forward == "SKIP"
    assert "input_args[0] saved by msprobe without data (null statistics, no file) in a tensor dump" in message
    assert "statistics dump" not in message
