"""tests/data/fixtures.py: the tensor folders and large dump.json files tracked as archives, unpacked safely and
once, the manifest true."""

from __future__ import annotations

import importlib.util
import io
import json
import lzma
import multiprocessing
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
_spec = importlib.util.spec_from_file_location("precheck_test_fixtures", DATA / "fixtures.py")
fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fixtures)
FAMILIES = {"x": {"folders": ["runs/*"], "recorded_by": "synthetic", "recipe": "make it", "torch": None}}


def _dump(data: Path, name: str, files: dict[str, bytes]) -> Path:
    """A dump under data: NAME/step0/rank0/dump.json and its dump_tensor_data/ with these files."""
    rank = data / name / "step0" / "rank0"
    (rank / "dump_tensor_data").mkdir(parents=True)
    (rank / "dump.json").write_text("{}")
    for file, blob in files.items():
        (rank / "dump_tensor_data" / file).write_bytes(blob)
    return rank / "dump_tensor_data"


def _data(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    (data / fixtures.MANIFEST).write_text(json.dumps({"families": FAMILIES, "fixtures": {}}))
    return data


def test_the_repositorys_archives_match_the_manifest_and_no_folder_is_left_unpacked():
    assert fixtures.check() == []
    doc = json.loads((DATA / fixtures.MANIFEST).read_text())
    assert all(f["family"] in doc["families"] for f in doc["fixtures"].values())
    assert all(family["recipe"] is None or "/" in family["recipe"] for family in doc["families"].values())


def test_packing_is_deterministic_and_round_trips(tmp_path):
    data = _data(tmp_path)
    folder = _dump(data, "runs/a", {"b.pt": b"\x00" * 100, "a.npy": os.urandom(50)})
    first = fixtures.pack_bytes(folder)
    os.utime(folder / "a.npy", (1, 1))  # another mtime, another order of creation: the same bytes
    assert fixtures.pack_bytes(folder) == first
    with tarfile.open(fileobj=io.BytesIO(lzma.decompress(first))) as tar:
        assert tar.getnames() == ["a.npy", "b.pt"] and {(m.mtime, m.uid, m.uname) for m in tar} == {(0, 0, "")}
    out = tmp_path / "out"
    (tmp_path / "x.tar.xz").write_bytes(first)
    fixtures.extract(tmp_path / "x.tar.xz", out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == {p.name: p.read_bytes() for p in folder.iterdir()}


def _archive(path: Path, member: tarfile.TarInfo, blob: bytes = b"") -> Path:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        member.size = len(blob) if member.isfile() else 0
        tar.addfile(member, io.BytesIO(blob))
    path.write_bytes(lzma.compress(raw.getvalue()))
    return path


@pytest.mark.parametrize("filtered", [True, False], ids=["data_filter", "no_data_filter"])
@pytest.mark.parametrize("name, kind", [("/etc/x", "file"), ("../x", "file"), ("a/../../x", "file"), ("l", "link")])
def test_an_archive_that_would_write_outside_its_folder_or_a_link_is_refused(
    tmp_path, monkeypatch, name, kind, filtered
):
    if not filtered:  # Python before 3.9.17 and 3.11.4: the members are checked by fixtures.py alone
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    member = tarfile.TarInfo(name)
    if kind == "link":
        member.type, member.linkname = tarfile.SYMTYPE, "/etc/passwd"
    archive = _archive(tmp_path / "bad.tar.xz", member, b"x")
    with pytest.raises(ValueError, match="unsafe member"):
        fixtures.extract(archive, tmp_path / "out")
    assert not (tmp_path / "out").exists() and not (tmp_path / "x").exists()


def test_pack_packs_new_folders_once_and_the_manifest_says_where_they_came_from(tmp_path):
    data = _data(tmp_path)
    _dump(data, "runs/a", {"t.pt": b"1" * 10})
    _dump(data, "runs/b", {"t.pt": b"2" * 10, "u.pt": b"3"})
    assert [p.parent.parent.parent.name for p in fixtures.pack(data, use_git=False)] == ["a", "b"]
    assert fixtures.pack(data, use_git=False) == []  # idempotent: nothing new, nothing written
    doc = json.loads((data / fixtures.MANIFEST).read_text())
    entry = doc["fixtures"]["runs/b"]
    assert entry["family"] == "x" and entry["archives"]["step0/rank0/dump_tensor_data.tar.xz"]["files"] == 2
    assert fixtures.check(data) == []
    _dump(data, "runs/c", {"t.pt": b"4"})  # merged from another branch: check names it until it is packed
    assert fixtures.check(data) == [
        "runs/c: not in MANIFEST.json (run: python tests/data/fixtures.py pack)",
        "runs/c/step0/rank0/dump_tensor_data: not packed (run: python tests/data/fixtures.py pack)",
    ]
    assert len(fixtures.pack(data, use_git=False)) == 1 and fixtures.check(data) == []


def test_unpack_fills_a_missing_folder_replaces_a_stale_one_and_leaves_the_rest(tmp_path):
    data = _data(tmp_path)
    folder = _dump(data, "runs/a", {"t.pt": b"old"})
    fixtures.pack(data, use_git=False)
    assert fixtures.unpack(data) == []  # packed here: already current
    (folder / "t.pt").write_bytes(b"edited")  # an edit in place is the user's: left alone
    assert fixtures.unpack(data) == [] and (folder / "t.pt").read_bytes() == b"edited"
    archive = fixtures.archive_of(folder)
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "t.pt").write_bytes(b"new")
    archive.write_bytes(fixtures.pack_bytes(tmp_path / "new"))  # a pulled commit changed the archive
    assert fixtures.unpack(data) == [folder] and (folder / "t.pt").read_bytes() == b"new"
    shutil.rmtree(folder)
    assert fixtures.unpack(data) == [folder] and (folder / "t.pt").read_bytes() == b"new"
    assert sorted(p.name for p in folder.parent.iterdir()) == ["dump.json", "dump_tensor_data", archive.name]


def _large_json(rank: Path, calls: int = 900) -> bytes:
    """A dump.json over the threshold, written as msprobe writes one (indented, not sorted): the bytes, not the
    JSON, must come back."""
    doc = {"task": "statistics", "data": {f"Torch.add.{i}.forward": {"Max": i / 7, "Min": -i} for i in range(calls)}}
    blob = json.dumps(doc, indent=1).encode() + b"\n"
    assert len(blob) > fixtures.LARGE
    (rank / "dump.json").write_bytes(blob)
    return blob


def test_a_large_dump_json_is_packed_beside_itself_and_unpacks_byte_identical(tmp_path):
    data = _data(tmp_path)
    folder = _dump(data, "runs/a", {"t.pt": b"1"})
    blob = _large_json(folder.parent)
    _dump(data, "runs/small", {"t.pt": b"2"})  # a dump.json of 2 bytes: stays plain
    written = fixtures.pack(data, use_git=False)
    json_xz = folder.parent / "dump.json.xz"
    assert sorted(a.name for a in written) == ["dump.json.xz", "dump_tensor_data.tar.xz", "dump_tensor_data.tar.xz"]
    assert lzma.decompress(json_xz.read_bytes()) == blob and fixtures.pack_bytes(folder.parent / "dump.json") == (
        json_xz.read_bytes()
    )
    assert not (data / "runs/small/step0/rank0/dump.json.xz").exists()
    assert (data / ".gitignore").read_text().splitlines()[-1] == "/runs/a/step0/rank0/dump.json"
    entry = json.loads((data / fixtures.MANIFEST).read_text())["fixtures"]["runs/a"]["archives"]
    assert entry["step0/rank0/dump.json.xz"]["files"] == 1 and entry["step0/rank0/dump.json.xz"]["bytes"] == len(blob)
    (folder.parent / "dump.json").unlink()  # a fresh clone: the archive alone
    assert fixtures.unpack(data) == [folder.parent / "dump.json"]
    assert (folder.parent / "dump.json").read_bytes() == blob and fixtures.check(data) == []
    assert fixtures.pack(data, use_git=False) == [] and fixtures.unpack(data) == []  # idempotent


def test_a_stale_dump_json_archive_is_replaced_and_an_edit_in_place_is_reported(tmp_path):
    data = _data(tmp_path)
    rank = _dump(data, "runs/a", {"t.pt": b"1"}).parent
    _large_json(rank)
    fixtures.pack(data, use_git=False)
    edited = _large_json(rank, calls=1000)  # re-recorded in place: left alone, but the archive no longer says so
    assert fixtures.unpack(data) == [] and (rank / "dump.json").read_bytes() == edited
    assert fixtures.check(data) == [
        "runs/a/step0/rank0/dump.json: differs from its archive (re-pack: fixtures.py pack PATH, or delete it)"
    ]
    (tmp_path / "pulled").mkdir()
    pulled = _large_json(tmp_path / "pulled", calls=1100)
    (rank / "dump.json.xz").write_bytes(fixtures.pack_bytes(tmp_path / "pulled" / "dump.json"))  # a pulled commit
    assert fixtures.unpack(data) == [rank / "dump.json"] and (rank / "dump.json").read_bytes() == pulled
    assert not [p for p in rank.iterdir() if p.name.startswith(".")]  # nothing left of the atomic write
    fixtures.pack(data, [rank / "dump.json"], use_git=False)  # named: re-packed, the manifest follows
    assert fixtures.check(data) == []


def _git(cwd: Path, *args: str) -> str:
    ident = ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    return subprocess.run(["git", *ident, *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


def test_check_reports_a_large_dump_json_tracked_plain_and_pack_untracks_it(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("no git")
    data = _data(tmp_path)
    rank = _dump(data, "runs/a", {}).parent
    (rank / "dump_tensor_data").rmdir()
    _large_json(rank)
    _dump(data, "runs/small", {})
    (data / "runs/small/step0/rank0/dump_tensor_data").rmdir()
    _git(data, "init", "-q")
    _git(data, "add", ".")
    _git(data, "commit", "-q", "-m", "recorded")  # a branch that tracked a large dump.json as it is
    assert "runs/a/step0/rank0/dump.json: not packed (run: python tests/data/fixtures.py pack)" in fixtures.check(data)
    fixtures.pack(data)
    assert fixtures.check(data) == []
    assert _git(data, "ls-files", "runs").split() == [
        "runs/a/step0/rank0/dump.json.xz",
        "runs/small/step0/rank0/dump.json",  # small: tracked plain, readable in a diff
    ]
    assert _git(data, "status", "--porcelain", "--untracked-files=all", "runs").split() == [
        "D", "runs/a/step0/rank0/dump.json", "A", "runs/a/step0/rank0/dump.json.xz"
    ]  # fmt: skip
    _git(data, "add", "-f", "runs/a/step0/rank0/dump.json")  # forced back in: check says so
    assert fixtures.check(data) == [
        "runs/a/step0/rank0/dump.json: tracked by git beside its archive (check it, then: fixtures.py pack PATH)"
    ]
    (data / ".gitignore").write_text("")
    assert (
        fixtures.check(data)[-1]
        == ".gitignore: does not list each packed dump.json (run: python tests/data/fixtures.py pack)"
    )


def test_pack_names_a_path_it_cannot_pack_in_one_line(tmp_path, capsys):
    assert fixtures.main(["pack", "--no-git", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"fixtures: {tmp_path}: not a dump_tensor_data/ folder or a dump.json file\n"


def _unpack_in_child(data: str) -> int:
    return len(fixtures.unpack(Path(data)))


def test_unpackers_started_at_once_unpack_each_archive_once(tmp_path):
    data = _data(tmp_path)
    for name in "abcdef":
        _dump(data, f"runs/{name}", {f"{i}.pt": os.urandom(2000) for i in range(20)})
    fixtures.pack(data, use_git=False)
    expected = {p: p.read_bytes() for p in data.rglob("*.pt")}
    for folder in fixtures.folders(data):
        shutil.rmtree(folder)
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        counts = pool.map(_unpack_in_child, [str(data)] * 3)
    assert sorted(counts) == [0, 0, 6]
    assert {p: p.read_bytes() for p in data.rglob("*.pt")} == expected


def test_the_command_line_checks_and_unpacks(tmp_path):
    proc = subprocess.run([sys.executable, str(DATA / "fixtures.py"), "check"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.endswith(" archives match MANIFEST.json\n")
    proc = subprocess.run([sys.executable, str(DATA / "fixtures.py"), "unpack"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("fixtures: unpacked 0 of ")


def test_the_recipes_venv_has_the_running_torch_and_msprobe_26_2(tmp_path):
    script = DATA / "recipes" / "msprobe_venv.py"
    proc = subprocess.run(
        [sys.executable, str(script), "--dry-run", "--venv", str(tmp_path / "v"), "--pip", "transformers", "--"]
        + ["tests/data/recipes/make_dump.py", "mlp", "fp32", "tensor", "OUT"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    import torch

    lines = proc.stderr.splitlines()
    assert proc.returncode == 0 and f"-m venv {tmp_path / 'v'}" in lines[0]
    assert lines[-2].endswith(f"torch=={torch.__version__.split('+')[0]} 'mindstudio-probe==26.2.*' transformers")
    assert lines[-1] == f"+ {tmp_path / 'v' / 'bin' / 'python'} tests/data/recipes/make_dump.py mlp fp32 tensor OUT"


def test_no_file_names_a_path_of_one_machine():
    """The recipes named venvs and tools on one machine; a fresh clone could not re-record a fixture."""
    machine = ("/root/", "/work/", "/tmp/msvenv", "/opt/venv", "/tmp/j3msp", "/tmp/msprobe", "../shared/tools")
    files = subprocess.run(
        ["git", "ls-files", "*.py", "*.md", "*.sh", ".ci/*"], cwd=ROOT, capture_output=True, text=True
    )
    if files.returncode:
        pytest.skip("not a git checkout")
    named = [
        f"{name}: {m}"
        for name in files.stdout.split()
        if name != "tests/test_fixtures.py" and (ROOT / name).is_file()
        for m in machine
        if m in (ROOT / name).read_text(encoding="utf-8", errors="replace")
    ]
    assert named == []
