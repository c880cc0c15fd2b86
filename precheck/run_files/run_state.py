"""The files beside a run's CSVs, and how they are created: unique names, the lock, the journal, the sidecar.

Two runs into one folder never share a file: names are claimed with ``O_EXCL`` by precheck.paths.claim_stamp (a
second run in the same second gets ``accuracy_checking_result_<ts>_2.csv``). A run holds an exclusive lock on its
journal while it writes, so a second ``-csv_path`` of the same CSV is refused with the pid that holds it. The
sidecar (``accuracy_checking_result_<ts>.run.json``) records what the run was (the dump's identity and every option
that changes a verdict), so a resume with another dump or other options is refused instead of mixing them. The journal
says which APIs were running when a run died: only those are suspects on resume.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, BinaryIO

from precheck.dump.jsonstream import read_json
from precheck.errors import PrecheckError
from precheck.schema import JOURNAL, RESULT, RESULT_NAME, SIDECAR

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; names stay unique, concurrent resumes are not detected
    fcntl = None  # type: ignore[assignment]

MAX_SIDECAR = 1 << 20  # bytes; a run record is a few hundred
# The fields a report reads from a sidecar, and what each must be.
_SIDECAR_FIELDS = {"dump": "text", "standard": "text", "max_abs": "a finite number", "cosine": "a finite number",
                   "versions": "an object of texts", "partial": "text"}  # fmt: skip


class RunFileError(PrecheckError):
    """A run's files cannot be created or continued (one line, exit code 2)."""


def versions() -> dict[str, str]:
    """What computed a run's rows, for its sidecar: a resume under another torch or precheck would mix two runs'
    kernels and verdicts, and the report shows the run's versions, not those of whoever writes it."""
    import platform

    import torch

    return {"precheck": installed_version("precheck"), "torch": torch.__version__,
            "python": platform.python_version()}  # fmt: skip


def installed_version(name: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def lock(journal: Path, csv: Path) -> BinaryIO:
    """The journal, open for appending and exclusively locked by this process (it says so with a ``run`` line);
    raise RunFileError naming the pid of the run that holds it. The lock goes when the file is closed, or when
    the process dies however it dies."""
    while True:
        f = open(journal, "a+b")
        if fcntl is None:
            return f
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(f)
            f.close()
            raise RunFileError(f"{csv}: in use by {holder} (a run is writing it; wait for it or stop it)") from None
        try:
            same = os.stat(journal).st_ino == os.fstat(f.fileno()).st_ino
        except FileNotFoundError:
            same = False
        if same:
            f.write(f"run\t{os.getpid()}\n".encode())
            f.flush()
            return f
        f.close()  # the run that held it finished and removed it meanwhile: lock the file that is there now


def _holder(f: BinaryIO) -> str:
    f.seek(0)
    pids = [line.split(b"\t", 1)[1].strip() for line in f.read().splitlines() if line.startswith(b"run\t")]
    return f"pid {pids[-1].decode('ascii', 'replace')}" if pids else "another process"


def journal_start(f: BinaryIO, name: str) -> None:
    """Record that ``name`` starts, before it runs (names are JSON strings: a name holds any character)."""
    f.write(f"start\t{json.dumps(name)}\n".encode())
    f.flush()


def journal_interrupted(f: BinaryIO) -> None:
    """An orderly stop (Ctrl-C, SIGTERM): the APIs running then did not kill the run."""
    f.write(b"interrupted\n")
    f.flush()


def suspects(journal: Path) -> set[str]:
    """The APIs that were running when a run of this journal died (started in that run and not stopped in an
    orderly way; those with a row since are the caller's to drop): each may have killed it, so a resume checks
    them in a worker process."""
    found: set[str] = set()
    running: set[str] = set()
    try:
        lines = journal.read_bytes().decode("utf-8", "replace").splitlines()
    except FileNotFoundError:
        return found
    for line in lines:
        kind, _, value = line.partition("\t")
        if kind == "run":
            found |= running
            running = set()
        elif kind == "start":
            try:
                running.add(json.loads(value))
            except ValueError:
                pass  # a line torn by the kill
        elif kind == "interrupted":
            running = set()
    return found | running


def dump_identity(path: Path) -> dict[str, object]:
    """What tells one dump.json from another without reading it all: its path, size and the SHA-256 of its first
    and last 64 KiB (two steps of one model differ in the statistics of their first records)."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        digest.update(f.read(1 << 16))
        if size > 1 << 16:
            f.seek(max(1 << 16, size - (1 << 16)))
            digest.update(f.read(1 << 16))
    return {"dump": str(path.resolve()), "dump_size": size, "dump_sha256_head_tail": digest.hexdigest()}


def read_sidecar(path: Path) -> dict[str, Any]:
    """The run record in a sidecar, which came with the CSVs and may come from anyone: FileNotFoundError when
    there is none, else RunFileError naming the file and the first thing that makes it no record precheck wrote
    (not a regular file, over MAX_SIDECAR bytes, not UTF-8, not JSON, nested too deeply, not an object, a field
    the report reads of the wrong type or not finite). Opened without blocking: a FIFO never hangs a report."""
    record = read_json(path, RunFileError, MAX_SIDECAR, "run record")
    if not isinstance(record, dict):
        raise RunFileError(f"{path}: not a run record (a JSON {type(record).__name__}, not an object)")
    for key, wanted in _SIDECAR_FIELDS.items():
        if key in record and not _is(record[key], wanted):
            raise RunFileError(f"{path}: {key} is not {wanted}")
    return record


def _is(value: object, kind: str) -> bool:
    if kind == "text":
        return isinstance(value, str)
    if kind == "a finite number":
        return isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) <= sys.float_info.max
    return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())


def write_sidecar(path: Path, identity: dict[str, object]) -> None:
    replace_atomically(path, json.dumps(identity, indent=1, sort_keys=True).encode())


def mark_partial(path: Path, why: str) -> None:
    """Say in the run record ``path`` that its CSVs lack APIs and why (a check that failed, a process killed
    mid-step): its report says so, and no reader takes the rows for the whole run."""
    try:
        record = read_sidecar(path)
    except (FileNotFoundError, RunFileError):
        record = {}
    write_sidecar(path, {**record, "partial": why})


def check_sidecar(path: Path, identity: dict[str, object], csv: Path) -> None:
    """Refuse to continue ``csv`` with another dump or other options: the first difference, in one line."""
    try:
        recorded = read_sidecar(path)
    except FileNotFoundError:
        raise RunFileError(
            f"{csv}: no {path.name} beside it, so nothing says which dump and options wrote it; start a new run"
        ) from None
    except RunFileError as e:
        raise RunFileError(f"{e}; start a new run") from None
    for key in sorted(set(recorded) | set(identity)):
        then, now = recorded.get(key), identity.get(key)
        if then != now:
            raise RunFileError(
                f"{csv}: written by another run ({key}: {then!r} then, {now!r} now); resume with the same dump "
                f"and options, or start a new run"
            )


def replace_atomically(path: Path, data: bytes) -> None:
    """``path`` holds ``data`` or what it held before, never a part: a synced temporary file renamed over it
    (removed if the write fails)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:  # a full disk, Ctrl-C: no part of a file is left behind either
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError) and e.filename is None:  # a failed write names no file: say which
            raise OSError(e.errno, e.strerror, str(path)) from None
        raise
    sync_dir(path.parent)


def sync_dir(folder: Path) -> None:
    """Make renames in ``folder`` durable (a power cut after os.replace can otherwise undo it)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _held(journal: Path) -> bool:
    """Whether a live run holds ``journal``'s lock (lock; a run that died holds none, however it died).
    A journal that cannot be opened counts as held: nothing can be said of its run."""
    if fcntl is None:
        return False
    try:
        fd = os.open(journal, os.O_RDONLY | os.O_NONBLOCK)  # never waits on a FIFO
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def unfinished(out_dir: str | os.PathLike, identity: dict[str, object]) -> Path | None:
    """The result CSV of the latest run in ``out_dir`` of this dump and these options (``identity``) that stopped
    before it finished (killed, crashed, stopped by Ctrl-C: its journal is left, and no live run holds it), which
    a resume continues; None when there is none."""
    folder = Path(out_dir)
    for result in sorted(folder.glob(RESULT.format("*")), reverse=True):
        m = RESULT_NAME.match(result.name)
        journal = folder / JOURNAL.format(m.group(1)) if m else None
        if journal is None or not journal.exists() or _held(journal):
            continue
        try:
            check_sidecar(folder / SIDECAR.format(m.group(1)), identity, result)
        except RunFileError:
            continue
        return result
    return None
