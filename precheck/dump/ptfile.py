"""Tensor files as torch tensors: precheck.dump.ptarchive checks a ``torch.save`` file without torch, this gives
what it accepted to torch, its dtype as torch's own."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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


def inspect(path: Path, *, max_bytes: int | None = None) -> StoredTensor:
    """The tensor a ``torch.save`` file declares (precheck.dump.ptarchive.inspect); PtError says why not."""
    stored = ptarchive.inspect(path, max_bytes=max_bytes)
    return StoredTensor(getattr(torch, stored.dtype), stored)


def read(path: Path, stored: StoredTensor) -> torch.Tensor:
    """The tensor :func:`inspect` accepted, built from its storage's bytes alone: torch's loader never runs on
    the file, and nothing beyond the checked storage is read."""
    a = stored.archived
    raw = ptarchive.read_bytes(path, a)
    flat = torch.frombuffer(raw, dtype=stored.dtype) if raw else torch.empty(0, dtype=stored.dtype)
    return flat.as_strided(a.shape, a.stride, a.offset)
