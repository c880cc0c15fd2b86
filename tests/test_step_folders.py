"""A step folder from someone else's machine (issue 46): its rank folders are read by their exact names, and no
folder of it (a rank, a ``proc*`` or a step folder, or the dump.json in one) that is a link out of it is read.

``rank01`` or ``rank1\\n`` beside ``rank1`` were both rank 1: one overwrote the other, and the wrong outputs of
the one not read passed. A ``rank1`` linked to another dump on the machine was read, graded and printed as the
step's. Each is refused in one line that names the folders.
"""

import os
import shutil
from pathlib import Path

import pytest

from precheck.commands.cli import main
from precheck.dump.steps import StepError, find_dumps, rank_number

STEP = Path(__file__).parent / "data" / "record" / "ddp_gloo" / "step0"


def _run_ut(capsys, path: Path, out: Path) -> tuple[int, str, str]:
    argv = ["run_ut", "-api_info", str(path), "-o", str(out), "-d", "cpu", "-q", "--workers", "1",
            "--backend", "inprocess"]  # fmt: skip
    code = main(argv)
    printed = capsys.readouterr()
    return code, printed.out, printed.err


def _wrong_all_reduce(rank: Path) -> None:
    """The rank's all_reduce recorded its input as its output: an error wherever it is read."""
    call = rank / "dump_tensor_data" / "Distributed.all_reduce.0.forward"
    shutil.copy(f"{call}.input.0.pt", f"{call}.output.0.pt")


def test_a_rank_folders_name_is_rank_and_an_ascii_decimal_without_a_leading_zero():
    assert [rank_number(n) for n in ("rank0", "rank1", "rank10", "rank123456")] == [0, 1, 10, 123456]
    for name in ("rank01", "rank00", "rank1\n", "rank\u0661", "rank\uff11", " rank1", "rank+1", "rank", "proc12"):
        assert rank_number(name) is None, name


@pytest.mark.parametrize(
    ("other", "shown"),
    [("rank01", "rank01"), ("rank1\n", "rank1\\x0a"), ("rank\u0661", "rank\u0661"), ("rank\uff11", "rank\uff11")],
)
def test_two_folders_that_name_one_rank_are_refused_in_one_line_naming_both(tmp_path, capsys, other, shown):
    """rank01 beside rank1: its own wrong all_reduce output was never read (rank1's was), and both passed."""
    step = tmp_path / "step0"
    shutil.copytree(STEP, step)
    shutil.copytree(step / "rank1", step / other)
    _wrong_all_reduce(step / other)
    code, out, err = _run_ut(capsys, step, tmp_path / "out")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert f"two folders name rank 1, rank1 and {shown}" in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_folder_that_is_no_exact_rank_name_is_refused_not_left_out(tmp_path):
    """rank01 alone (no rank1): not read as rank 1, and not silently left out either (its dump is the step's)."""
    step = tmp_path / "step0"
    shutil.copytree(STEP / "rank0", step / "rank0")
    shutil.copytree(STEP / "rank1", step / "rank01")
    with pytest.raises(StepError, match=r"step0: rank01 is no rank folder \(a dump folder is named rank<N>"):
        find_dumps(step)


def _elsewhere(tmp_path: Path) -> Path:
    """Another dump on the machine: a rank whose all_reduce output is wrong."""
    other = tmp_path / "elsewhere" / "step0"
    shutil.copytree(STEP, other)
    _wrong_all_reduce(other / "rank1")
    return other


@pytest.mark.parametrize("folder", ["rank1", "proc123"])
def test_a_rank_or_proc_folder_linked_out_of_the_step_is_refused(tmp_path, capsys, folder):
    other = _elsewhere(tmp_path)
    step = tmp_path / "upload" / "step0"
    step.mkdir(parents=True)
    if folder == "rank1":
        shutil.copytree(STEP / "rank0", step / "rank0")
    os.symlink(other / "rank1", step / folder)
    code, out, err = _run_ut(capsys, step, tmp_path / "out")
    assert code == 2 and out == ""
    assert f"{step / folder}: refused, a link out of {step}" in err and err.count("\n") == 1


def test_a_step_folder_or_a_dump_json_linked_out_is_refused(tmp_path, capsys):
    other = _elsewhere(tmp_path)
    top = tmp_path / "upload"
    top.mkdir()
    os.symlink(other, top / "step0")
    code, _, err = _run_ut(capsys, top, tmp_path / "out")
    assert code == 2 and f"{top / 'step0'}: refused, a link out of {top}" in err
    step = tmp_path / "again" / "step0"
    shutil.copytree(STEP, step)
    (step / "rank1" / "dump.json").unlink()
    os.symlink(other / "rank1" / "dump.json", step / "rank1" / "dump.json")
    code, _, err = _run_ut(capsys, step, tmp_path / "out2")
    assert code == 2 and f"{step / 'rank1' / 'dump.json'}: refused, a link out of {step / 'rank1'}" in err


def test_a_link_between_a_steps_own_folders_is_read(tmp_path):
    """Only links out are refused: a rank folder linked to a folder of the step itself reads nothing outside."""
    step = tmp_path / "step0"
    shutil.copytree(STEP, step)
    shutil.move(step / "rank1", step / "saved")
    os.symlink("saved", step / "rank1")
    assert [d.name for d in find_dumps(step).ranks] == ["rank0", "rank1"]


def test_names_from_a_dump_are_escaped_wherever_the_console_prints_them(tmp_path, capsys):
    """A dump's folder named with a newline and a terminal escape: the note, the summary's folders and the
    result paths printed them raw (a line break, a colour) on the console."""
    top = tmp_path / "dump\n\x1b[31m"
    shutil.copytree(STEP, top / "step0")
    code, out, err = _run_ut(capsys, top, tmp_path / "out\x1b[8m")
    assert code == 0
    assert "\x1b" not in out + err
    assert "dump\\x0a\\x1b[31m: running its one step, step0 (2 dumps)" in err and err.count("\n") == 1
    assert "dump\\x0a\\x1b[31m/step0 (rank0, rank1)" in out and "out\\x1b[8m/rank0/accuracy_checking_" in out
    assert main(["report", str(tmp_path / "out\x1b[8m")]) == 0
    assert "out\\x1b[8m/report_" in capsys.readouterr().out


@pytest.mark.parametrize("top", [False, True])
def test_compare_reads_a_steps_rank_folders_the_same_way(tmp_path, capsys, top):
    """compare's own walk took rank1\\n as rank 1 (its CSVs' _rank1 suffix overwrote rank1's) and followed a rank
    folder linked out of the step; as two step folders or two dumps' top folders, both are refused."""
    target, bench = tmp_path / "t" / "step0", tmp_path / "b" / "step0"
    shutil.copytree(STEP, target)
    shutil.copytree(STEP, bench)
    shutil.copytree(STEP / "rank1", target / "rank1\n")
    shutil.copytree(STEP / "rank1", bench / "rank1\n")
    given = (target.parent, bench.parent) if top else (target, bench)
    code = main(["compare", "-target", str(given[0]), "-bench", str(given[1]), "-o", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "two folders name rank 1, rank1 and rank1\\x0a" in err and err.count("\n") == 1
    shutil.rmtree(target / "rank1\n")
    shutil.rmtree(bench / "rank1\n")
    shutil.rmtree(target / "rank1")
    os.symlink(_elsewhere(tmp_path) / "rank1", target / "rank1")
    code = main(["compare", "-target", str(given[0]), "-bench", str(given[1]), "-o", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and f"{target / 'rank1'}: refused, a link out of {target}" in err
