"""Connecting to a Ray cluster: loopback-safe, with a clear error instead of a hang.

``ray.init(address="127.0.0.1:PORT")`` rewrites the loopback address to the
machine's own and then retries the cluster there forever when the cluster
listens on loopback only. For a loopback address :func:`connect` sets
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` first, which keeps Ray on 127.0.0.1,
and it checks that the address answers (a TCP connect with a timeout) before
handing it to Ray.
"""

from __future__ import annotations

import ipaddress
import os
import socket

from phalanx.errors import Invalid

__all__ = ["NAMESPACE", "connect", "is_loopback"]

NAMESPACE = "phalanx"
CONNECT_TIMEOUT_S = 5.0


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def connect(address: str, *, quiet: bool = False) -> None:
    """``ray.init`` on the cluster at ``address`` (``HOST:PORT`` of its GCS), in phalanx's
    namespace; :class:`~phalanx.errors.Invalid` when nothing answers there."""
    host, sep, port = address.rpartition(":")
    if not sep or not (port.isascii() and port.isdigit()) or not host:
        raise Invalid(f"--ray-address: expected HOST:PORT of the Ray head, got {address!r}")
    try:
        with socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        raise Invalid(
            f"--ray-address: no Ray cluster answers at {address} ({exc.strerror or exc}); "
            "start one with `ray start --head`"
        ) from None
    if is_loopback(host):
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    import logging

    import ray

    if ray.is_initialized():
        return
    ray.init(
        address=address,
        namespace=NAMESPACE,
        logging_level=logging.ERROR,
        log_to_driver=not quiet,
        configure_logging=not quiet,
    )
