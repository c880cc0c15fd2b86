"""The torch versions precheck supports, and the one line a torch outside them gets. Torch-free: the version is
read from the installed package's metadata, so a command can refuse before it imports torch (and ``precheck
record`` before its program starts).

The floor is the oldest torch the CI's compatibility pass runs (.ci/compat); the newest is the one the main suite
runs (.ci/setup). What a torch between them lacks is found by feature, never by version (precheck.compat): the
version decides only what precheck vouches for.
"""

from __future__ import annotations

import re
import sys
from importlib import metadata

from precheck.errors import PrecheckError

__all__ = ["FLOOR", "NEWEST", "TorchUnsupported", "check_torch", "installed_torch", "supported_range"]

FLOOR = (2, 1)
NEWEST = (2, 13)


class TorchUnsupported(PrecheckError, RuntimeError):
    """The installed torch is older than precheck's floor, or lacks what the command needs."""


def supported_range() -> str:
    return f"{FLOOR[0]}.{FLOOR[1]} to {NEWEST[0]}.{NEWEST[1]}"


def installed_torch() -> str | None:
    """The installed torch's version (``2.1.2+cu121``), None when there is none (or it has no metadata)."""
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def _release(version: str) -> tuple[int, int] | None:
    m = re.match(r"(\d+)\.(\d+)", version)
    return (int(m.group(1)), int(m.group(2))) if m else None


def check_torch(command: str, version: str | None = None, warn_newer: bool = True) -> None:
    """Refuse ``command`` on a torch below the floor (TorchUnsupported: one line naming the version and the
    supported range); above the newest tested, say so in one line on stderr and go on. A torch whose version
    cannot be read (none installed, a source build without metadata) is left to the command's own import."""
    version = installed_torch() if version is None else version
    release = _release(version or "")
    if release is None:
        return
    if release < FLOOR:
        raise TorchUnsupported(
            f"torch {version} is older than precheck supports (torch {supported_range()}): {command} needs "
            f"torch>={FLOOR[0]}.{FLOOR[1]}"
        )
    if release > NEWEST and warn_newer:
        print(
            f"precheck: warning: torch {version} is newer than precheck has been tested on (torch "
            f"{supported_range()}); {command} goes on",
            file=sys.stderr,
        )
