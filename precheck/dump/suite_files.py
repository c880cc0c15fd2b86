"""A generated suite's copy of a dump, read as the dump it is.

``precheck generate --copy-data`` copies a dump.json byte for byte into ``SUITE/data/`` and the tensor files its
tests read under names precheck chose (``000000.pt``: a name from a dump never becomes a file of the suite), with
``files.json`` beside the dump mapping each name the dump gives to its copy. The cases of such a dump name their
files through that map, for the suite and for every reader of a dump (run_ut, compare): ``precheck run_ut
-api_info SUITE/data`` replays what the suite checks, where it found none of the dump's names and SKIPped every
API. A name the suite refused to copy keeps the dump's (run_ut then says the file is not there).

The map only renames within the dump's own ``dump_tensor_data/``: each copy is a bare name of precheck's pattern,
and every file is still opened through precheck.dump.safe_files' checks, so a ``files.json`` that anyone wrote
reaches no file outside the folder. One that is not a suite's (another shape, another name) is ignored.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from precheck.dump.decode import Case, TensorSpec
from precheck.dump.safe_files import Refused, open_regular
from precheck.walk import map_placed

FILES_NAME = "files.json"  # beside a suite's dump.json: the copy of each data_name the tests read, or why not
_COPY = re.compile(r"[0-9]{6}(\.[a-z0-9]{1,8})?", re.ASCII)  # the names generate gives its copies
_MOST = 256 << 20  # bytes of a files.json read; a larger one is no suite's


def copied_names(dump_json: Path) -> dict[str, str] | None:
    """The dump's name of each copied file -> its copy, from the ``files.json`` beside ``dump_json``; None where
    there is none, or it is not a suite's."""
    try:
        with open_regular(dump_json.parent / FILES_NAME) as f:
            listing = json.loads(f.read(_MOST + 1)[:_MOST])
    except (OSError, Refused, ValueError, RecursionError):
        return None
    copied = listing.get("copied") if isinstance(listing, dict) else None
    if not isinstance(copied, dict) or not isinstance(listing.get("refused"), dict):
        return None
    if not all(isinstance(k, str) and isinstance(v, str) and _COPY.fullmatch(v) for k, v in copied.items()):
        return None
    return copied


def through_copies(copied: dict[str, str]) -> Callable[[Case], Case]:
    """A case whose tensor files are named by their copies: every argument, output and gradient spec."""

    def copy_of(leaf: Any, place: str) -> Any:
        if isinstance(leaf, TensorSpec) and leaf.data_name in copied:
            return replace(leaf, data_name=copied[leaf.data_name])
        return leaf

    def renamed(case: Case) -> Case:
        def trees(tree: Any) -> Any:
            return tree if tree is None else map_placed(tree, copy_of)

        call = case.recorded_call
        return replace(
            case,
            args=trees(case.args),
            kwargs=trees(case.kwargs),
            outputs=trees(case.outputs),
            grad_outputs=trees(case.grad_outputs),
            grad_inputs=trees(case.grad_inputs),
            recorded_call=None if call is None else (trees(call[0]), trees(call[1])),
        )

    return renamed
