"""How one run_ut run goes, as one value: torch-free, so the command line builds it without loading torch. It
holds what the layers below it take (the grading's CheckOptions, the dump's selection, the scheduler's TLS
files), so it lives with run_ut, above them."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from precheck.execution.options import CheckOptions

if TYPE_CHECKING:
    from precheck.dump.selection import ApiLists
    from precheck.scheduling.tls import Tls

__all__ = ["RunOptions"]


@dataclass(frozen=True)
class RunOptions:
    """How one run_ut run goes, as one value (:func:`precheck.run_ut.run_ut`): what is graded and how
    (``check``), the device, where the cases run (``backend``, ``workers``, a Dask ``scheduler`` and its ``tls``
    files), which calls (msprobe's ``api_lists``, ``filter_api``: one call per signature), the run it continues
    (``csv_path``), the dump's ``framework`` where its own field is not to be used, whether the summary keeps
    every result (``keep_results``) and draws a progress bar. :meth:`of` takes run_ut's keywords of before."""

    check: CheckOptions = CheckOptions()
    device: str = "auto"
    workers: int | None = None
    progress: bool = False
    csv_path: str | os.PathLike | None = None
    api_lists: ApiLists | None = None
    filter_api: bool = False
    backend: str = "auto"
    scheduler: str | None = None
    tls: Tls | None = None
    keep_results: bool = True
    framework: str | None = None

    @classmethod
    def of(cls, options: RunOptions | CheckOptions | None = None, **keywords: Any) -> RunOptions:
        """The run's options from ``options`` (a RunOptions, or the CheckOptions of its grading) and any of its
        fields by name, as run_ut took them one by one (``device="cpu", workers=1``); TypeError names a keyword
        that is none of them."""
        unknown = sorted(set(keywords) - {f.name for f in fields(cls)})
        if unknown:
            raise TypeError(f"run_ut() got unexpected keyword argument(s): {', '.join(unknown)}")
        if isinstance(options, RunOptions):
            return replace(options, **keywords)
        return cls(check=options or CheckOptions(), **keywords)
