"""Calls that switch off torch's own checks of their arguments: those must never run in the run's own process.

torch checks the lengths, offsets and indices a call is given and raises an error that becomes the call's row,
except where the caller asks it not to: ``segment_reduce(data, "sum", lengths=[1e9, 1e9], unsafe=True)`` reads
wherever its lengths point and segfaults the process. A record from someone else's machine can ask for that, so
such a call runs in a worker process (scheduling/inprocess.py), whose death is that call's error row. The rule
reads the switch, not the API's name, so every prefix (Torch, VF, Aten) and a later API with the same switch are
covered; telling safe lengths from unsafe ones would mean re-implementing torch's checks. (The other APIs with
unchecked indices, ``Aten._unsafe_*`` and the sparse constructors, are not run at all: catalogue.py.) Imports no
torch.
"""

from __future__ import annotations

from typing import Any

# Keyword -> the values that leave torch's checks on; any other value (True, a tensor, a number) may switch them off.
CHECKS_ON = {"unsafe": (False, None)}


def unchecked(kwargs: dict[str, Any]) -> str | None:
    """Why a call with these keyword arguments may crash its process instead of raising, or None."""
    for name, checked in CHECKS_ON.items():
        if name in kwargs and not any(kwargs[name] is value for value in checked):
            return f"{name}={kwargs[name]!r} switches off torch's checks of the call's arguments"
    return None
