"""The Dask cluster's TLS options, one grammar for ``run_ut --scheduler`` and ``record --check --scheduler``."""

from __future__ import annotations

import argparse

from precheck.scheduling.tls import Tls, tls_for


def add_tls_options(parser: argparse.ArgumentParser) -> None:
    """--tls-ca-file, --tls-cert, --tls-key: what a ``tls://`` scheduler's cluster and this process prove
    themselves with, so that no machine without a certificate of the cluster's authority joins it."""
    group = parser.add_argument_group("Dask TLS (a tls:// --scheduler; default: Dask's distributed.comm.tls config)")
    group.add_argument("--tls-ca-file", metavar="PEM", help="the authority that signed the cluster's certificates")
    group.add_argument("--tls-cert", metavar="PEM", help="this client's certificate (signed by that authority)")
    group.add_argument("--tls-key", metavar="PEM", help="its private key, unless the certificate's file holds it")


def tls_of(args: argparse.Namespace) -> Tls | None:
    """The TLS files the command line gives, checked; None without them."""
    return tls_for(args.scheduler, args.tls_ca_file, args.tls_cert, args.tls_key)
