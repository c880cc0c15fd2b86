"""Pack, unpack and check the recorded tensor folders of tests/data.

Why: a recorded dump holds one small file per tensor (a .pt file is half torch's own overhead), so the tensor
dumps alone were 11,000 tracked files, and a working tree past 64 MiB cannot be shipped to a GPU machine. Each
``dump_tensor_data/`` folder is tracked as one archive beside it, ``dump_tensor_data.tar.xz``; the folder itself
is git-ignored and unpacked from its archive once per checkout (tests/conftest.py, .ci/setup), so every path
that names a fixture (``tests/data/gpt2_bf16_tensor/step0/proc8493/dump.json``) and msprobe's layout (the tensor
files beside dump.json) stay as they were. MANIFEST.json says where each fixture came from (tests/data/README.md).

    python tests/data/fixtures.py unpack             # unpack every archive whose folder is missing or stale
    python tests/data/fixtures.py pack [FOLDER ...]  # pack every folder not yet packed (or these), update the manifest
    python tests/data/fixtures.py check              # the manifest matches the archives; nothing is left unpacked

Standard library only, Python 3.9: .ci/setup runs it with the system's python before any venv exists.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import fnmatch
import hashlib
import io
import json
import lzma
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

DATA = Path(__file__).resolve().parent
MANIFEST = "MANIFEST.json"
STAMPS = ".unpacked.json"  # archive -> sha256 of the archive each folder was unpacked from (git-ignored)
LOCK = ".fixtures.lock"  # held while unpacking: pytest-xdist's workers start at once (git-ignored)
FOLDER = "dump_tensor_data"
SUFFIX = ".tar.xz"
PRESET = 9 | lzma.PRESET_EXTREME


def archive_of(folder: Path) -> Path:
    """The archive a folder is packed into: beside it, so the pair moves together."""
    return folder.with_name(folder.name + SUFFIX)


def folder_of(archive: Path) -> Path:
    return archive.with_name(archive.name[: -len(SUFFIX)])


def archives(data: Path) -> list[Path]:
    return sorted(data.rglob(FOLDER + SUFFIX))


def folders(data: Path) -> list[Path]:
    return sorted(p for p in data.rglob(FOLDER) if p.is_dir() and not p.is_symlink())


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _members(folder: Path) -> list[tuple[str, Path]]:
    """The folder's files and subfolders, by relative POSIX name, sorted: the archive's order must not depend on
    the file system's. A link or anything but a file or folder is refused: unpacking could not restore it safely."""
    found = []
    for path in folder.rglob("*"):
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            raise ValueError(f"{path}: not a plain file or folder; refusing to pack it")
        found.append((path.relative_to(folder).as_posix(), path))
    return sorted(found)


def pack_bytes(folder: Path) -> bytes:
    """tar + xz of the folder, deterministic (sorted names, mtime 0, owner 0, fixed modes): packing the same files
    again gives the same bytes, so a re-pack that changed nothing changes nothing in git."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, path in _members(folder):
            info = tarfile.TarInfo(name)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if path.is_dir():
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
                continue
            info.mode, info.size = 0o644, path.stat().st_size
            with path.open("rb") as f:
                tar.addfile(info, f)
    return lzma.compress(raw.getvalue(), format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=PRESET)


def _write_atomically(path: Path, data: bytes) -> None:
    """Write beside the target, then rename: a reader never sees half a file."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would keep other users of a shared checkout out
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _checked(tar: tarfile.TarFile) -> list[tarfile.TarInfo]:
    """The members, each a plain file or folder under the target: an absolute name, a ``..``, a link or a device
    in an archive is refused rather than written (tarfile's "data" filter checks the same where it exists)."""
    members = tar.getmembers()
    for m in members:
        parts = PurePosixPath(m.name).parts
        if not (m.isfile() or m.isdir()) or m.name.startswith(("/", "\\")) or ".." in parts or ":" in m.name:
            raise ValueError(f"unsafe member {m.name!r} in {tar.name}; refusing to unpack it")
    return members


def extract(archive: Path, into: Path) -> None:
    with tarfile.open(archive, mode="r:xz") as tar:
        members = _checked(tar)
        if hasattr(tarfile, "data_filter"):  # Python 3.9.17+, 3.11.4+
            tar.extractall(into, members=members, filter="data")
        else:
            tar.extractall(into, members=members)


@contextlib.contextmanager
def _locked(data: Path) -> Iterator[None]:
    """One unpacker at a time per checkout; the others wait, then find every folder fresh."""
    try:
        import fcntl
    except ImportError:  # Windows: no lock; precheck's tests run on Linux
        yield
        return
    with (data / LOCK).open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _write_json(path: Path, doc: dict[str, Any]) -> None:
    _write_atomically(path, (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode())


def _replace_folder(archive: Path, folder: Path) -> None:
    """Unpack into a temporary folder beside the target, then rename it into place: a test never reads a folder
    half written, and a run killed mid-way leaves only a temporary folder, cleared by the next unpack."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        extract(archive, tmp)
        tmp.chmod(0o755)
        if folder.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{folder.name}.old.", dir=folder.parent))
            os.replace(folder, old / folder.name)
            shutil.rmtree(old)
        os.replace(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def unpack(data: Path = DATA) -> list[Path]:
    """Unpack each archive whose folder is missing, or was unpacked from an older archive; the folders unpacked.

    A folder that exists and was not unpacked here (recorded in place, or merged from a branch that tracked it) is
    left alone: only what this tool wrote is ever replaced."""
    todo = []
    with _locked(data):
        stamps = _read_json(data / STAMPS)
        for archive in archives(data):
            key, folder = archive.relative_to(data).as_posix(), folder_of(archive)
            for stale in folder.parent.glob(f".{folder.name}.*"):  # left by a killed run
                shutil.rmtree(stale, ignore_errors=True)
            digest = sha256(archive)
            if not (folder.is_dir() and stamps.get(key, digest) == digest):
                todo.append(archive)
            stamps[key] = digest
        # Creating 11,000 small files is the file system's time, not Python's: threads overlap it.
        with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(lambda a: _replace_folder(a, folder_of(a)), todo))
        if todo or stamps != _read_json(data / STAMPS):
            _write_json(data / STAMPS, stamps)
    return [folder_of(a) for a in todo]


def _tracked(data: Path, paths: list[Path]) -> set[Path]:
    """The files git tracks under these paths; none outside a git checkout."""
    if not paths:
        return set()
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--", *map(str, paths)], cwd=data, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return set()
    return {(data / name).resolve() for name in out.decode().split("\0") if name}


def dump_roots(data: Path) -> list[Path]:
    """Every recorded dump: the folder above step*/ (``gpt2_bf16_tensor``, ``sharded/tp_tensor_msprobe``)."""
    roots = {p.parent.parent.parent for p in data.rglob("dump.json") if p.parent.parent.name.startswith("step")}
    return sorted(roots)


def _root_of(archive: Path, data: Path) -> Path:
    """The fixture an archive belongs to: its dump (above step*/), else its own folder."""
    step = archive.parent.parent
    return step.parent if step.name.startswith("step") and step != data else archive.parent


def _family(key: str, families: dict[str, Any]) -> str | None:
    """The first family (in the manifest's order) one of whose folder patterns matches the fixture."""
    for name, family in families.items():
        if any(fnmatch.fnmatchcase(key, pattern) for pattern in family.get("folders", [])):
            return name
    return None


def _archive_entry(archive: Path, old: dict[str, Any] | None) -> dict[str, Any]:
    """sha256, member files and unpacked bytes of an archive; the old entry where the archive is unchanged."""
    digest = sha256(archive)
    if old and old.get("sha256") == digest:
        return old
    with tarfile.open(archive, mode="r:xz") as tar:
        files = [m for m in tar.getmembers() if m.isfile()]
    return {"sha256": digest, "files": len(files), "bytes": sum(m.size for m in files)}


def update_manifest(data: Path = DATA) -> dict[str, Any]:
    """Every dump and packed folder under data, its family (kept where set, else matched by the family's folder
    patterns) and its archives' sha256: the manifest is rebuilt from the tree, so a fixture added or removed on
    another branch is listed or dropped by the next pack."""
    doc = _read_json(data / MANIFEST)
    families, old = doc.get("families", {}), doc.get("fixtures", {})
    by_root: dict[str, list[Path]] = {}
    for root in dump_roots(data):
        by_root[root.relative_to(data).as_posix()] = []
    for archive in archives(data):
        by_root.setdefault(_root_of(archive, data).relative_to(data).as_posix(), []).append(archive)
    fixtures = {}
    for key in sorted(by_root):
        entry = dict(old.get(key, {}))
        entry["family"] = entry.get("family") if entry.get("family") in families else _family(key, families)
        old_archives = entry.get("archives", {})
        root = data / key
        entry["archives"] = {
            a.relative_to(root).as_posix(): _archive_entry(a, old_archives.get(a.relative_to(root).as_posix()))
            for a in by_root[key]
        }
        fixtures[key] = entry
    doc["fixtures"] = fixtures
    _write_manifest(data, doc)
    return doc


def _write_manifest(data: Path, doc: dict[str, Any]) -> None:
    """The families in their own order (the first match wins), the fixtures sorted."""
    _write_atomically(data / MANIFEST, (json.dumps(doc, indent=1) + "\n").encode())


def _git(data: Path, *args: str) -> bool:
    try:
        return subprocess.run(["git", *args], cwd=data, capture_output=True).returncode == 0
    except OSError:
        return False


def pack(data: Path = DATA, targets: list[Path] | None = None, use_git: bool = True) -> list[Path]:
    """Pack each folder not yet packed (or each target, again), update the manifest; the archives written.

    In a git checkout the packed folders' files leave the index and their archives and the manifest enter it, so
    after merging a branch that tracked a new dump_tensor_data/ folder, ``pack`` and a commit are all it takes."""
    data = data.resolve()
    todo = targets if targets is not None else [f for f in folders(data) if not archive_of(f).exists()]
    with _locked(data):
        written = _pack_folders(data, sorted(todo), use_git)
    update_manifest(data)
    if use_git:
        _git(data, "add", "--", MANIFEST, *(str(archive_of(f.resolve())) for f in todo))
    return written


def _pack_folders(data: Path, todo: list[Path], use_git: bool) -> list[Path]:
    written = []
    stamps = _read_json(data / STAMPS)
    for folder in todo:
        folder = folder.resolve()
        if folder.name != FOLDER or not folder.is_dir():
            raise ValueError(f"{folder}: not a {FOLDER}/ folder")
        archive = archive_of(folder)
        blob = pack_bytes(folder)
        if not archive.exists() or archive.read_bytes() != blob:
            _write_atomically(archive, blob)
            written.append(archive)
        stamps[archive.relative_to(data).as_posix()] = hashlib.sha256(blob).hexdigest()  # the folder is current
        if use_git and _tracked(data, [folder]):
            _git(data, "rm", "-r", "-q", "--cached", "--", str(folder))
    _write_json(data / STAMPS, stamps)
    return written


def check(data: Path = DATA) -> list[str]:
    """What is wrong between the tree and the manifest, one line each: an archive missing from the manifest or
    differing from it, a fixture without a family, a folder not packed, files git still tracks in a packed folder."""
    doc = _read_json(data / MANIFEST)
    problems, fixtures = [], doc.get("fixtures", {})
    listed = {
        f"{root}/{name}": entry["sha256"]
        for root, fixture in fixtures.items()
        for name, entry in fixture["archives"].items()
    }
    found = {a.relative_to(data).as_posix(): a for a in archives(data)}
    for key in sorted(set(listed) | set(found)):
        if key not in found:
            problems.append(f"{key}: in {MANIFEST}, no such archive")
        elif key not in listed:
            problems.append(f"{key}: not in {MANIFEST} (run: python tests/data/fixtures.py pack)")
        elif sha256(found[key]) != listed[key]:
            problems.append(f"{key}: sha256 differs from {MANIFEST} (run: python tests/data/fixtures.py pack)")
    for root in dump_roots(data):
        key = root.relative_to(data).as_posix()
        if key not in fixtures:
            problems.append(f"{key}: not in {MANIFEST} (run: python tests/data/fixtures.py pack)")
        elif fixtures[key].get("family") not in doc.get("families", {}):
            problems.append(f"{key}: no family in {MANIFEST} (add a folder pattern to a family, then pack)")
    problems += [
        f"{f.relative_to(data).as_posix()}: not packed (run: python tests/data/fixtures.py pack)"
        for f in folders(data)
        if not archive_of(f).exists()
    ]
    tracked = _tracked(data, [folder_of(a) for a in found.values()])
    problems += [
        f"{key[: -len(SUFFIX)]}: files tracked by git beside its archive (check them, then: fixtures.py pack FOLDER)"
        for key, a in found.items()
        if any(folder_of(a).resolve() in t.parents for t in tracked)
    ]
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fixtures.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("unpack", help="unpack every archive whose folder is missing or stale")
    packing = sub.add_parser("pack", help="pack every dump_tensor_data/ folder not yet packed, update the manifest")
    packing.add_argument("folders", nargs="*", type=Path, help="re-pack these folders (default: the unpacked ones)")
    packing.add_argument("--no-git", action="store_true", help="leave git's index alone")
    sub.add_parser("check", help="the manifest matches the archives; exit 1 with the differences otherwise")
    args = parser.parse_args(argv)
    start = time.monotonic()
    if args.command == "unpack":
        done = unpack()
        print(f"fixtures: unpacked {len(done)} of {len(archives(DATA))} archives ({time.monotonic() - start:.1f} s)")
    elif args.command == "pack":
        written = pack(targets=args.folders or None, use_git=not args.no_git)
        print(f"fixtures: {len(written)} archives written, {MANIFEST} updated ({time.monotonic() - start:.1f} s)")
    else:
        problems = check()
        print("\n".join(problems) or f"fixtures: {len(archives(DATA))} archives match {MANIFEST}")
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
