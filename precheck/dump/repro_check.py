"""Which records ``precheck repro`` can write a standalone script for: a forward record that decodes, of an API
the registry knows in a torch namespace, that draws no random numbers. Below the report and ``precheck.repro``, so
the report offers a repro command only where repro accepts it without importing repro (and torch).
"""

from __future__ import annotations

import os
from typing import Any

from api_registry import lookup
from precheck.dump.records import Dump, DumpError, load_dump
from precheck.errors import PrecheckError

# The namespaces a repro script can call a recorded API in, by the record name's prefix.
MODULES = {"Functional": "torch.nn.functional", "Torch": "torch", "Tensor": "torch.Tensor"}


class ReproError(PrecheckError):
    """The API cannot be reproduced (one line, exit code 2)."""


def reproducible(api_info: str | os.PathLike, api_names: list[str]) -> set[str]:
    """Those of ``api_names`` that ``precheck repro`` accepts, by its own checks: the report offers a repro
    command only where it works (not for a random call, an unsupported API or a record it cannot decode).
    Nothing where the dump cannot be read, since repro would refuse every one."""
    try:
        dump = load_dump(api_info)
    except (DumpError, OSError):
        return set()
    places = {name: i for i, name in enumerate(dump.cases.names)}
    accepted = set()
    for name in api_names:
        try:
            checked(dump, name, places.get(name))
        except ReproError:
            continue
        accepted.add(name)
    return accepted


def checked(dump: Dump, api_name: str, place: int | None) -> tuple[Any, Any]:
    """The record ``api_name`` (at ``place`` among the dump's forward records) and its registry entry, or
    ReproError saying why no repro can be written for it."""
    if place is None:
        raise ReproError(f"{api_name}: no such forward record in {dump.path}")
    case = dump.cases[place]  # only this record is decoded
    if case.problem:
        raise ReproError(f"{api_name}: {case.problem}")
    entry = lookup(case.api)
    prefix, _, rest = case.api.partition(".")
    if entry is None or prefix not in MODULES:
        raise ReproError(f"{api_name}: not supported: {case.api}")
    random = entry.random_reason(case.args, case.kwargs)
    if random:
        raise ReproError(
            f"{api_name}: {random}; a repro compares a device run with a float64 run number by number, "
            f"which two random draws never match (run_ut checks it by the law of its draws)"
        )
    return case, entry
