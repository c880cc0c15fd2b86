"""Pack, unpack and check the recorded tensor folders and large dump.json files of tests/data.

Why: a recorded dump holds one small file per tensor (a .pt file is half torch's own overhead), so the tensor
dumps alone were 11,000 tracked files, and a working tree past 64 MiB cannot be shipped to a GPU machine. Each
``dump_tensor_data/`` folder is tracked as one archive beside it, ``dump_tensor_data.tar.xz``, and each dump.json
over 64 KiB as ``dump.json.xz`` (xz of its exact bytes: JSON shrinks 15-45 times); the folder or file itself is
git-ignored and unpacked from its archive once per checkout (tests/conftest.py, .ci/setup), so every path that
names a fixture (``tests/data/gpt2_bf16_tensor/step0/proc8493/dump.json``) and msprobe's layout (the tensor files
beside dump.json) stay as they were. MANIFEST.json says where each fixture came from (tests/data/README.md).

    python tests/data/fixtures.py unpack           # unpack every archive whose folder or file is missing or stale
    python tests/data/fixtures.py pack [PATH ...]  # pack all not yet packed (or these again), update the manifest
    python tests/data/fixtures.py check            # the manifest matches the archives; nothing is left unpacked

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
import re
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
JSON = "dump.json"
JSON_SUFFIX = ".xz"
# A dump.json over 64 KiB (about 2,000 lines) is packed: 49 of the 210 recorded, 8.4 MB of JSON in 0.5 MB of xz.
# They are whole-model and sweep recordings (opinfo, bert, the DDP and pipeline ranks) that are re-recorded whole,
# never edited or read in a diff; the 161 below it, the small steps the tests name, stay plain for review.
LARGE = 64 * 1024
IGNORE = ".gitignore"  # tests/data/.gitignore: the packed dump.json files, written by pack (a small one stays tracked)
PRESET = 9 | lzma.PRESET_EXTREME


def archive_of(target: Path) -> Path:
    """The archive a folder or dump.json is packed into: beside it, so the pair moves together."""
    return target.with_name(target.name + (JSON_SUFFIX if target.name == JSON else SUFFIX))


def target_of(archive: Path) -> Path:
    """The folder or dump.json an archive unpacks into."""
    return archive.with_name(archive.name[: -len(JSON_SUFFIX if archive.name == JSON + JSON_SUFFIX else SUFFIX)])


def archives(data: Path) -> list[Path]:
    return sorted(p for p in data.rglob("*.xz") if p.name in (FOLDER + SUFFIX, JSON + JSON_SUFFIX))


def folders(data: Path) -> list[Path]:
    return sorted(p for p in data.rglob(FOLDER) if p.is_dir() and not p.is_symlink())


def large_dumps(data: Path) -> list[Path]:
    """The dump.json files over LARGE: each is tracked as its archive."""
    return sorted(p for p in data.rglob(JSON) if p.is_file() and not p.is_symlink() and p.stat().st_size > LARGE)


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


def pack_bytes(target: Path) -> bytes:
    """tar + xz of the folder, deterministic (sorted names, mtime 0, owner 0, fixed modes), or xz of a dump.json's
    exact bytes: packing the same files again gives the same bytes, so a re-pack that changed nothing changes
    nothing in git."""
    if not target.is_dir():
        return _xz(target.read_bytes())
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, path in _members(target):
            info = tarfile.TarInfo(name)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if path.is_dir():
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
                continue
            info.mode, info.size = 0o644, path.stat().st_size
            with path.open("rb") as f:
                tar.addfile(info, f)
    return _xz(raw.getvalue())


def _xz(raw: bytes) -> bytes:
    return lzma.compress(raw, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=PRESET)


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
    """Unpack a tensor folder's archive into a folder."""
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


def _replace(archive: Path, target: Path) -> None:
    """Unpack into a temporary folder or file beside the target, then rename it into place: a test never reads a
    folder or dump.json half written, and a run killed mid-way leaves only a temporary one, cleared by the next
    unpack."""
    if archive.name == JSON + JSON_SUFFIX:
        _write_atomically(target, lzma.decompress(archive.read_bytes()))
        return
    folder = target
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
    """Unpack each archive whose folder or dump.json is missing, or was unpacked from an older archive; the
    folders and files unpacked.

    One that exists and was not unpacked here (recorded in place, or merged from a branch that tracked it) is left
    alone: only what this tool wrote is ever replaced."""
    todo = []
    with _locked(data):
        stamps = _read_json(data / STAMPS)
        for archive in archives(data):
            key, target = archive.relative_to(data).as_posix(), target_of(archive)
            for stale in target.parent.glob(f".{target.name}.*"):  # left by a killed run
                if stale.is_dir():
                    shutil.rmtree(stale, ignore_errors=True)
                else:
                    stale.unlink()
            digest = sha256(archive)
            present = target.is_dir() if archive.name.endswith(SUFFIX) else target.is_file()
            if not (present and stamps.get(key, digest) == digest):
                todo.append(archive)
            stamps[key] = digest
        # Creating 11,000 small files is the file system's time, not Python's: threads overlap it.
        with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(lambda a: _replace(a, target_of(a)), todo))
        if todo or stamps != _read_json(data / STAMPS):
            _write_json(data / STAMPS, stamps)
    return [target_of(a) for a in todo]


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
    """Every recorded dump: the folder above step*/ (``gpt2_bf16_tensor``, ``sharded/tp_tensor_msprobe``), found
    by its dump.json or, before unpacking, its dump.json.xz."""
    found = [*data.rglob(JSON), *data.rglob(JSON + JSON_SUFFIX)]
    return sorted({p.parent.parent.parent for p in found if p.parent.parent.name.startswith("step")})


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
    if archive.name == JSON + JSON_SUFFIX:
        return {"sha256": digest, "files": 1, "bytes": len(lzma.decompress(archive.read_bytes()))}
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


def ignore_text(data: Path) -> str:
    """tests/data/.gitignore: each dump.json tracked as its archive, by name. A pattern (``**/dump.json``) would
    hide a new fixture's small dump.json from ``git add`` too; by name, a recording shows in ``git status`` like
    any file, and only what pack packed is ignored."""
    names = [target_of(a).relative_to(data).as_posix() for a in archives(data) if a.name == JSON + JSON_SUFFIX]
    return IGNORE_HEADER + "".join("/" + re.sub(r"([*?\[\\])", r"\\\1", name) + "\n" for name in names)


IGNORE_HEADER = """\
# Written by tests/data/fixtures.py pack: each dump.json over 64 KiB is tracked as the dump.json.xz beside it and
# unpacked from it (tests/data/README.md). Do not edit; pack rewrites it, check compares it.
"""


def pack(data: Path = DATA, targets: list[Path] | None = None, use_git: bool = True) -> list[Path]:
    """Pack each folder and large dump.json not yet packed (or each target, again), update the manifest and
    tests/data/.gitignore; the archives written.

    In a git checkout the packed folders and files leave the index and their archives, the manifest and the ignore
    file enter it, so after merging a branch that tracked a new dump_tensor_data/ folder or a large dump.json,
    ``pack`` and a commit are all it takes."""
    data = data.resolve()
    todo = (
        targets
        if targets is not None
        else [t for t in [*folders(data), *large_dumps(data)] if not archive_of(t).exists()]
    )
    with _locked(data):
        written = _pack_targets(data, sorted(todo), use_git)
        ignore = ignore_text(data)
        if _read_text(data / IGNORE) != ignore:
            _write_atomically(data / IGNORE, ignore.encode())
    update_manifest(data)
    if use_git:
        _git(data, "add", "--", MANIFEST, IGNORE, *(str(archive_of(t.resolve())) for t in todo))
    return written


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return ""


def _pack_targets(data: Path, todo: list[Path], use_git: bool) -> list[Path]:
    written = []
    stamps = _read_json(data / STAMPS)
    for target in todo:
        target = target.resolve()
        if not (target.name == FOLDER and target.is_dir() or target.name == JSON and target.is_file()):
            raise ValueError(f"{target}: not a {FOLDER}/ folder or a {JSON} file")
        archive = archive_of(target)
        blob = pack_bytes(target)
        if not archive.exists() or archive.read_bytes() != blob:
            _write_atomically(archive, blob)
            written.append(archive)
        stamps[archive.relative_to(data).as_posix()] = hashlib.sha256(blob).hexdigest()  # the target is current
        if use_git and _tracked(data, [target]):
            _git(data, "rm", "-r", "-q", "--cached", "--", str(target))
    _write_json(data / STAMPS, stamps)
    return written


def check(data: Path = DATA) -> list[str]:
    """What is wrong between the tree and the manifest, one line each: an archive missing from the manifest or
    differing from it, a fixture without a family, a folder or large dump.json not packed, files git still tracks
    beside an archive, a dump.json that differs from its archive, an ignore file that does not list the packed."""
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
    return problems + _unpacked_problems(data, list(found.values()))


def _unpacked_problems(data: Path, found: list[Path]) -> list[str]:
    """What check says of the folders and dump.json files beside (or without) their archives."""
    problems = [
        f"{t.relative_to(data).as_posix()}: not packed (run: python tests/data/fixtures.py pack)"
        for t in [*folders(data), *large_dumps(data)]
        if not archive_of(t).exists()
    ]
    tracked = _tracked(data, [target_of(a) for a in found])
    for archive in found:
        target = target_of(archive).resolve()
        name = target.relative_to(data.resolve()).as_posix()
        if any(t == target or target in t.parents for t in tracked):
            problems.append(f"{name}: tracked by git beside its archive (check it, then: fixtures.py pack PATH)")
        if archive.name == JSON + JSON_SUFFIX and target.is_file():
            if target.read_bytes() != lzma.decompress(archive.read_bytes()):
                problems.append(f"{name}: differs from its archive (re-pack: fixtures.py pack PATH, or delete it)")
    if _read_text(data / IGNORE) != ignore_text(data):
        problems.append(f"{IGNORE}: does not list each packed {JSON} (run: python tests/data/fixtures.py pack)")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fixtures.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("unpack", help="unpack every archive whose folder or dump.json is missing or stale")
    packing = sub.add_parser("pack", help="pack every tensor folder and large dump.json not yet packed")
    packing.add_argument("paths", nargs="*", type=Path, help="re-pack these folders or dump.json files")
    packing.add_argument("--no-git", action="store_true", help="leave git's index alone")
    sub.add_parser("check", help="the manifest matches the archives; exit 1 with the differences otherwise")
    args = parser.parse_args(argv)
    start = time.monotonic()
    if args.command == "unpack":
        done = unpack()
        print(f"fixtures: unpacked {len(done)} of {len(archives(DATA))} archives ({time.monotonic() - start:.1f} s)")
    elif args.command == "pack":
        try:
            written = pack(targets=args.paths or None, use_git=not args.no_git)
        except ValueError as e:
            print(f"fixtures: {e}", file=sys.stderr)
            return 2
        print(f"fixtures: {len(written)} archives written, {MANIFEST} updated ({time.monotonic() - start:.1f} s)")
    else:
        problems = check()
        print("\n".join(problems) or f"fixtures: {len(archives(DATA))} archives match {MANIFEST}")
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
