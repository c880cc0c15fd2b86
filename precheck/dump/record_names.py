"""The names of msprobe's records, read in one place: ``Functional.linear.0.forward`` (an API call, L1) and
``Module.block.up.Linear.forward.0`` (a module, L0).

Two readings are kept on purpose. run_ut replays only what it can name strictly (:func:`replay_key`: an
identifier path, a counter, forward or backward, at most MAX_NAME characters), so a hostile key becomes a SKIP row
of its own; compare aligns every record it can split (:func:`split_key`, which also takes L0 keys and
``parameters_grad``). Torch-free and import-free: the dump, compare and report layers all read names here.
"""

from __future__ import annotations

import re

DIRECTIONS = ("forward", "backward", "parameters_grad")
MODULE_PREFIXES = ("Module.", "Cell.")  # PyTorch's and MindSpore's module records (no API to replay)
# The collectives run_ut grades across a step's ranks (precheck.ranks.collectives holds how), named here so
# the report, which runs nothing, shows the same calls as graded across ranks.
COLLECTIVES = frozenset({"all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "_all_gather_base",
                         "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base", "reduce", "gather",
                         "scatter", "all_to_all", "all_to_all_single", "all_gather_single",
                         "reduce_scatter_single"})  # fmt: skip
# The point-to-point calls graded across a step's ranks (precheck.ranks.p2p): each one's argument naming its peer.
POINT_TO_POINT = {"send": "dst", "isend": "dst", "recv": "src", "irecv": "src"}
BATCH_POINT_TO_POINT = "batch_isend_irecv"  # a list of P2POps, each an isend or an irecv with its peer
MAX_NAME = 256  # characters of a record key (msprobe's longest are under 100); longer keys are malformed
_REPLAY_KEY = re.compile(r"(?P<api>[A-Za-z_][\w]*(?:\.[\w]+)+)\.(?P<n>[0-9]+)\.(?P<kind>forward|backward)")
# A tensor's name in a compare CSV: its record (``<call>.forward``, ``<module>.forward.<N>``), its role, the rest.
_ITEM = re.compile(
    r"^(?P<record>.+?\.(?P<direction>forward|backward)(?:\.\d+)?)\.(?P<role>input|output|parameters_grad|parameters|"
    r"kwargs)(?:\.(?P<rest>.*))?$"
)
_DIRECTION_END, _COUNTER_END = re.compile(r"\.(forward|backward)(\.\d+)?$"), re.compile(r"\.\d+$")


def replay_key(key: str) -> tuple[str, str, str] | None:
    """(api, counter, forward/backward) of an API record run_ut can replay; None for a malformed key."""
    # fullmatch: `$` would also match before a trailing newline, and "X.0.forward\n" would replace X.0.
    m = _REPLAY_KEY.fullmatch(key) if len(key) <= MAX_NAME else None
    return (m["api"], m["n"], m["kind"]) if m else None


def split_key(key: str) -> tuple[str, str, str] | None:
    """(api, counter, direction) of an L1 key (``api.N.direction``) or an L0 one (``Module.path.Class.direction.N``)."""
    parts = key.split(".")
    if len(parts) >= 3 and parts[-1] in DIRECTIONS and parts[-2].isdigit():
        return ".".join(parts[:-2]), parts[-2], parts[-1]
    if len(parts) >= 3 and parts[-2] in DIRECTIONS and parts[-1].isdigit():
        return ".".join(parts[:-2]), parts[-1], parts[-2]
    return None


def is_collective(name: str) -> bool:
    """Whether the call ``name`` (``Distributed.all_reduce.0``) is a collective graded across ranks."""
    parts = name.split(".")
    return len(parts) == 3 and parts[0] == "Distributed" and parts[1] in COLLECTIVES


def is_point_to_point(name: str) -> bool:
    """Whether the call ``name`` (``Distributed.recv.0``, ``Distributed.batch_isend_irecv.0``) is a send or receive
    graded against its peer rank's."""
    parts = name.split(".")
    return len(parts) == 3 and parts[0] == "Distributed" and (parts[1] in POINT_TO_POINT or
                                                                 parts[1] == BATCH_POINT_TO_POINT)  # fmt: skip


def is_module(key: str) -> bool:
    """Whether ``key`` (a record, a call or an API) is a module's: compare compares it, run_ut does not replay it."""
    return key.startswith(MODULE_PREFIXES)


def call_of(key: str) -> str:
    """The call a record belongs to, without its direction: Functional.linear.0 (Module.a.Linear.0 for L0)."""
    for direction in (".forward", ".backward"):
        if direction in key:
            before, _, after = key.rpartition(direction)
            return before + after
    return key


def api_of(call: str) -> str:
    """The API of a call (``Functional.linear.0`` -> ``Functional.linear``): its name without the counter."""
    return call.rsplit(".", 1)[0]


def split_item(name: str) -> tuple[str, str, str, str, str, str | None]:
    """(record, call, API, direction, role, rest) of a tensor named in a compare CSV, so that the compare frame
    groups its rows as run_ut's frame does: ``Functional.linear.0.forward.input.1`` is record
    ``Functional.linear.0.forward``, call ``Functional.linear.0``, API ``Functional.linear``, forward, input, ``1``.
    An L0 record's call is its module without the counter (``Module.fc.Linear.forward.0`` -> ``Module.fc.Linear``);
    a name of no role is its own record, with no direction or role."""
    m = _ITEM.match(name)
    record, direction, role, rest = (m["record"], m["direction"], m["role"], m["rest"]) if m else (name, "", "", None)
    call = _DIRECTION_END.sub("", record)
    return record, call, _COUNTER_END.sub("", call), direction, role, rest
