"""Which cases a run checks: msprobe's white and black lists (``-config``) and ``--filter_api``.

A listed name is a bare API name as msprobe writes them (``addmm``, ``__add__``) or a prefixed one
(``Torch.addmm``). ``--filter_api`` checks one call per signature (API, shapes, dtypes, requires_grad and every
non-tensor argument): a training step calls the same layer many times with the same shapes, and those calls
differ only in their data.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from precheck.dump.jsonstream import read_json
from precheck.errors import PrecheckError

if TYPE_CHECKING:
    from precheck.dump.records import Case  # torch: the command line reads a config before it loads torch

MAX_CONFIG = 16 << 20  # bytes: a config lists API names, a few kilobytes


class ConfigError(PrecheckError):
    """The -config file cannot be used (one line, exit code 2)."""


@dataclass(frozen=True)
class ApiLists:
    white: frozenset[str] = field(default_factory=frozenset)
    black: frozenset[str] = field(default_factory=frozenset)

    def excluded(self, case: Case) -> str | None:
        """msprobe's SKIP message when the lists leave this case out, else None."""
        bare = case.api.split(".", 1)[-1]
        names = {bare, case.api}
        if names & self.black or self.white and not names & self.white:
            return f"API {bare} in black list or not in white list. SKIP."
        return None


def load_api_lists(path: str | os.PathLike) -> ApiLists:
    """``white_list`` / ``black_list`` at the top of the file, or under ``run_ut`` / ``acc_check`` as in an
    msprobe config."""
    try:
        doc = read_json(Path(path), ConfigError, MAX_CONFIG, "msprobe config")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: expected a JSON object with white_list / black_list")
    section = next((doc[k] for k in ("run_ut", "acc_check") if isinstance(doc.get(k), dict)), doc)
    lists = {}
    for key in ("white_list", "black_list"):
        value = section.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{path}: {key} must be a list of API names")
        lists[key] = frozenset(value)
    return ApiLists(lists["white_list"], lists["black_list"])


class SignatureFilter:
    """``--filter_api``: keeps the first call of every signature, as cases stream by in dump order, and counts
    the calls it leaves out (it holds the signatures seen, never the cases)."""

    def __init__(self) -> None:
        self.seen: set[tuple] = set()
        self.left_out = 0

    def keep(self, case: Case) -> bool:
        key = case.signature() if not case.problem else ("problem", case.name)
        if key in self.seen:
            self.left_out += 1
            return False
        self.seen.add(key)
        return True
