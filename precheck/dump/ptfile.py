"""Tensor files as torch tensors: precheck.dump.ptarchive checks a ``torch.save`` file without torch, this gives
what it accepted to torch, its dtype as torch's own."""

from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO

import torch

from precheck.dump import ptarchive
from precheck.dump.ptarchive import NotAnArchive, PtError

__all__ = ["NotAnArchive", "PtError", "StoredTensor", "inspect", "read"]


@dataclass(frozen=True)
class StoredTensor:
    """What the file declares, before anything of it is read, its dtype a torch.dtype."""

    dtype: torch.dtype
    archived: ptarchive.StoredTensor

    @property
    def shape(self) -> tuple[int, ...]:
        return self.archived.shape


def inspect(f: BinaryIO, *, max_bytes: int | None = None) -> StoredTensor:
    """The tensor the open ``torch.save`` file ``f`` declares (precheck.dump.ptarchive.inspect); PtError says
    why not."""
    stored = ptarchive.inspect(f, max_bytes=max_bytes)
    return StoredTensor(getattr(torch, stored.dtype), stored)


def read(f: BinaryIO, stored: StoredTensor) -> torch.Tensor:
    """The tensor :func:`inspect` accepted in ``f``, built from its storage's bytes alone: torch's loader never
    runs on the file, and nothing beyond the checked storage is read."""
    a = stored.archived
    raw = ptarchive.read_bytes(f, a)
    flat = torch.frombuffer(raw, dtype=stored.dtype) if raw else torch.empty(0, dtype=stored.dtype)
    return flat.as_strided(a.shape, a.stride, a.offset)
