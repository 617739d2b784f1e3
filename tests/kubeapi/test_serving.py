"""How ``phalanx up`` serves the Kubernetes API: its port (the default gives way when
taken, a port the user named does not), its TLS (its own CA, or ``--tls-cert``), and
``phalanx kubeconfig`` (clear when the API is off)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from phalanx.errors import Conflict
from phalanx.kubeapi.certs import ensure_tls
from phalanx.server import _kube_socket, start_server


def test_a_taken_default_port_gives_way_and_a_named_one_does_not() -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        sock, note = _kube_socket("127.0.0.1", port, given=False)
        assert sock.getsockname()[1] != port and note == f" ({port} was taken)"
        sock.close()
        with pytest.raises(Conflict, match="--kube-port"):
            _kube_socket("127.0.0.1", port, given=True)
    finally:
        taken.close()


def test_the_ca_is_made_once_and_the_certificate_names_the_host(tmp_path: Path) -> None:
    from cryptography import x509

    first = ensure_tls(tmp_path, "10.1.2.3")
    ca = first.ca.read_bytes()
    cert = x509.load_pem_x509_certificate(first.cert.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    addresses = {str(a) for a in san.get_values_for_type(x509.IPAddress)}
    assert {"127.0.0.1", "::1", "10.1.2.3"} <= addresses
    assert "localhost" in san.get_values_for_type(x509.DNSName)
    assert oct(first.key.stat().st_mode & 0o777) == "0o600"
    again = ensure_tls(tmp_path, "10.1.2.3")
    assert again.ca.read_bytes() == ca and again.cert.read_bytes() == first.cert.read_bytes()
    # Another --host: the CA stays, the serving certificate is signed again with the name.
    other = ensure_tls(tmp_path, "gpu-head")
    assert other.ca.read_bytes() == ca
    names = x509.load_pem_x509_certificate(other.cert.read_bytes()).extensions
    assert "gpu-head" in names.get_extension_for_class(
        x509.SubjectAlternativeName
    ).value.get_values_for_type(x509.DNSName)


def _kubeconfig(
    state: Path, *args: str, ca: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_")}
    if ca is not None:
        env["PHALANX_CA"] = str(ca)  # the REST API is HTTPS too: the CLI checks it
    return subprocess.run(
        [sys.executable, "-m", "phalanx.cli.main", "kubeconfig", "--state-dir", str(state), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


def test_kubeconfig_says_when_the_api_is_off(tmp_path: Path) -> None:
    with start_server(tmp_path / "state", port=0, runtime="noop"):
        done = _kubeconfig(tmp_path / "state")
    assert done.returncode == 1
    assert "no Kubernetes API is recorded" in done.stderr and "--no-kube-api" in done.stderr


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_with_tls_cert_the_kubeconfig_trusts_that_certificate(tmp_path: Path) -> None:
    made = ensure_tls(tmp_path / "mine", "127.0.0.1")  # any certificate and key will do
    state = tmp_path / "state"
    with start_server(
        state, port=0, kube_port=0, runtime="noop", tls_cert=made.cert, tls_key=made.key
    ) as running:
        assert json.loads((state / "client.json").read_text())["kube_ca"] == str(made.cert)
        done = _kubeconfig(state, "--user", "bob", "--tenant", "team-b", ca=made.ca)
        assert done.returncode == 0, done.stderr
        config = yaml.safe_load(done.stdout)
        assert config["clusters"][0]["cluster"]["server"] == running.kube_url
        assert config["contexts"][0]["context"]["namespace"] == "team-b"
        (tmp_path / "kc").write_text(done.stdout)
        env = {**os.environ, "KUBECONFIG": str(tmp_path / "kc"), "HOME": str(tmp_path)}
        whoami = subprocess.run(
            ["kubectl", "auth", "whoami"], env=env, capture_output=True, text=True, timeout=60
        )
        assert whoami.returncode == 0, whoami.stderr
        assert "bob" in whoami.stdout
