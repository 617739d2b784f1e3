"""The Kubernetes API's TLS: a CA and a serving certificate made at first start.

kubectl sends bearer tokens only over HTTPS and checks the server's certificate
against the kubeconfig's ``certificate-authority-data``. At first start phalanx
makes a CA (``STATE/kube/ca.crt``, its key beside it, mode 0600) and a serving
certificate signed by it for the names clients use: ``localhost``, the loopback
addresses, the machine's host name and addresses, and ``--host``. A later start
reuses both, and re-signs the serving certificate when a name is missing or it
is within 30 days of expiring. ``--tls-cert``/``--tls-key`` replace both (the
kubeconfig then carries that certificate as its CA).
"""

from __future__ import annotations

import datetime as dt
import fcntl
import ipaddress
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["KubeTls", "ensure_tls"]

_CA_DAYS = 3650
_SERVING_DAYS = 365
_RENEW_BEFORE = dt.timedelta(days=30)


@dataclass(frozen=True)
class KubeTls:
    """The files the Kubernetes API serves with, and the CA clients check it against."""

    cert: Path
    key: Path
    ca: Path


def ensure_tls(state_dir: Path, host: str) -> KubeTls:
    """The CA and serving certificate in ``state_dir/kube``, made or renewed as needed."""
    folder = state_dir / "kube"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    # Servers sharing a state directory (several on one PostgreSQL) make the CA once.
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _ensure(folder, host)


def _ensure(folder: Path, host: str) -> KubeTls:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    ca_cert_path, ca_key_path = folder / "ca.crt", folder / "ca.key"
    cert_path, key_path = folder / "server.crt", folder / "server.key"
    ca_cert: Any
    ca_key: Any
    if ca_cert_path.exists() and ca_key_path.exists():
        ca_cert = x509.load_pem_x509_certificate(ca_cert_path.read_bytes())
        ca_key = serialization.load_pem_private_key(ca_key_path.read_bytes(), password=None)
    else:
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_cert = _ca_certificate(ca_key)
        _write(ca_key_path, _key_pem(ca_key), 0o600)
        _write(ca_cert_path, ca_cert.public_bytes(serialization.Encoding.PEM), 0o644)
        for stale in (cert_path, key_path):
            stale.unlink(missing_ok=True)
    names, addresses = _subject_names(host)
    if not _serving_ok(cert_path, key_path, ca_cert, names, addresses):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _serving_certificate(key, ca_key, ca_cert, names, addresses)
        _write(key_path, _key_pem(key), 0o600)
        _write(cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return KubeTls(cert=cert_path, key=key_path, ca=ca_cert_path)


def _subject_names(host: str) -> tuple[list[str], list[str]]:
    names = {"localhost", "kubernetes", "kubernetes.default", "phalanx"}
    addresses = {"127.0.0.1", "::1"}
    hostname = socket.gethostname()
    for name in (hostname, socket.getfqdn()):
        if name:
            names.add(name)
    try:
        for info in socket.getaddrinfo(hostname, None):
            addresses.add(str(info[4][0]).split("%")[0])
    except OSError:
        pass
    if host and host not in ("0.0.0.0", "::"):
        try:
            addresses.add(str(ipaddress.ip_address(host)))
        except ValueError:
            names.add(host)
    return sorted(names), sorted(addresses)


def _serving_ok(
    cert_path: Path, key_path: Path, ca_cert: Any, names: list[str], addresses: list[str]
) -> bool:
    from cryptography import x509

    if not (cert_path.exists() and key_path.exists()):
        return False
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, x509.ExtensionNotFound):
        return False
    if cert.issuer != ca_cert.subject:
        return False
    if cert.not_valid_after_utc - _RENEW_BEFORE < dt.datetime.now(dt.UTC):
        return False
    have_names = set(san.get_values_for_type(x509.DNSName))
    have_addresses = {str(a) for a in san.get_values_for_type(x509.IPAddress)}
    return set(names) <= have_names and set(addresses) <= have_addresses


def _ca_certificate(key: Any) -> Any:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import NameOID

    subject = x509.Name(
        [
            x509.NameAttribute(
                NameOID.COMMON_NAME, f"phalanx-ca@{int(dt.datetime.now().timestamp())}"
            )
        ]
    )
    now = dt.datetime.now(dt.UTC)
    public = key.public_key()
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=_CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )


def _serving_certificate(
    key: Any, ca_key: Any, ca_cert: Any, names: list[str], addresses: list[str]
) -> Any:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.UTC)
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in names]
    sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in addresses]
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "phalanx-apiserver")]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=_SERVING_DAYS))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )


def _key_pem(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    pem: bytes = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return pem


def _write(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)
