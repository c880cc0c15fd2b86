"""Dask's TLS options: the certificates a ``tls://`` cluster and this process prove themselves with.

Torch-free, and distributed is imported only to build its Security: the command line checks the options early.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from precheck.errors import OptionError

__all__ = ["Tls", "security", "tls_for"]


@dataclass(frozen=True)
class Tls:
    """Dask's TLS files for a ``tls://`` scheduler (``--tls-ca-file``, ``--tls-cert``, ``--tls-key``): the
    authority that signed the cluster's certificates, and this process's certificate and key (``key`` None: in
    the certificate's file). Both ends then prove who they are: only a machine holding a certificate of that
    authority joins, and tasks, tensors and results cross the network encrypted."""

    ca_file: str
    cert: str
    key: str | None = None

    def __post_init__(self) -> None:
        for option, path in (("--tls-ca-file", self.ca_file), ("--tls-cert", self.cert), ("--tls-key", self.key)):
            if path is not None and not Path(path).is_file():
                raise OptionError(f"{option} {path}: no such file")


def tls_for(scheduler: str | None, ca_file: str | None, cert: str | None, key: str | None) -> Tls | None:
    """The TLS files the options give, checked against the scheduler's address; None when none is given (a
    ``tls://`` address then uses Dask's own configuration, ``distributed.comm.tls.*``)."""
    if ca_file is None and cert is None and key is None:
        return None
    if not scheduler:
        raise OptionError("--tls-ca-file, --tls-cert and --tls-key go with --scheduler tls://HOST:PORT")
    if ca_file is None or cert is None:
        raise OptionError("TLS needs both --tls-ca-file and --tls-cert (and --tls-key unless the cert holds it)")
    _tls_address(scheduler)
    return Tls(ca_file, cert, key)


def security(scheduler: str, tls: Tls | None) -> Any:
    """distributed's Security for ``tls``; None (Dask's configuration) without it."""
    if tls is None:
        return None
    _tls_address(scheduler)
    from distributed import Security

    return Security(tls_ca_file=tls.ca_file, tls_client_cert=tls.cert, tls_client_key=tls.key, require_encryption=True)


def _tls_address(scheduler: str) -> None:
    if not scheduler.startswith("tls://"):
        raise OptionError(f"the TLS options need a tls:// scheduler address, not {scheduler!r}")
