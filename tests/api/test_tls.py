"""HTTPS with ``--tls-cert``/``--tls-key``: a self-signed certificate made by ``openssl``.

The server answers over HTTPS only, writes an https URL for the CLI, the client
verifies the certificate against ``PHALANX_CA`` (and fails without it), plain
HTTP to the port gets no data, and bad flags are one clear error.
"""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from phalanx.client import Client
from phalanx.errors import Invalid, Unavailable
from tests.api.server import CLUSTER, job


@dataclass
class Pki:
    cert: Path
    key: Path
    other_key: Path
    encrypted_key: Path


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    d = tmp_path_factory.mktemp("pki")
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1")
    _openssl(
        "req", "-x509", *ec, "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
        "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
        "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem"),
    )  # fmt: skip
    _openssl(
        "genpkey", "-algorithm", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-out", str(d / "other.pem"),
    )  # fmt: skip
    _openssl(
        "pkey", "-in", str(d / "key.pem"), "-aes256", "-passout", "pass:secret",
        "-out", str(d / "encrypted.pem"),
    )  # fmt: skip
    return Pki(d / "cert.pem", d / "key.pem", d / "other.pem", d / "encrypted.pem")


@pytest.fixture(scope="module")
def server(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from phalanx.server import start_server

    state = tmp_path_factory.mktemp("tls-state")
    running = start_server(state, port=0, configs=[CLUSTER], tls_cert=pki.cert, tls_key=pki.key)
    try:
        yield running
    finally:
        running.stop()


def test_the_server_is_https_and_says_so_to_the_cli(server: Any) -> None:
    assert server.url.startswith("https://127.0.0.1:")
    saved = json.loads((server.state_dir / "client.json").read_text())
    assert saved["url"] == server.url


def test_a_client_with_phalanx_ca_works(
    server: Any, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHALANX_CA", str(pki.cert))
    with Client(server.url, server.admin_token, state_dir=server.state_dir) as c:
        assert c.healthz()
        assert c.whoami()["admin"] is True
        job_id = c.submit({**job(["true"]), "tenant": "team-a"})
        assert c.wait(job_id, timeout=30)["state"] == "COMPLETED"
        assert any(j["id"] == job_id for j in c.jobs())
    # The CLI's way: URL and token from client.json, the CA from the environment.
    monkeypatch.delenv("PHALANX_URL", raising=False)
    monkeypatch.delenv("PHALANX_TOKEN", raising=False)
    with Client(state_dir=server.state_dir) as c:
        assert c.url == server.url and c.whoami()["user"] == "admin"


def test_a_client_without_the_ca_refuses_the_certificate(
    server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PHALANX_CA", raising=False)
    with (
        Client(server.url, server.admin_token, state_dir=server.state_dir) as c,
        pytest.raises(Unavailable) as caught,
    ):
        c.whoami()
    assert "cannot be verified" in caught.value.detail
    assert "PHALANX_CA" in caught.value.detail
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{server.url}/healthz", verify=True)


def test_a_wrong_ca_is_refused_and_a_missing_one_is_a_clear_error(
    server: Any, pki: Pki, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    other = tmp_path / "other-ca.pem"
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-nodes", "-days", "1", "-subj", "/CN=someone else",
        "-keyout", str(tmp_path / "k.pem"), "-out", str(other),
    )  # fmt: skip
    monkeypatch.setenv("PHALANX_CA", str(other))
    with Client(server.url, server.admin_token) as c, pytest.raises(Unavailable):
        c.whoami()
    monkeypatch.setenv("PHALANX_CA", str(tmp_path / "missing.pem"))
    with Client(server.url, server.admin_token) as c, pytest.raises(Invalid) as caught:
        c.whoami()
    assert "PHALANX_CA" in caught.value.detail and "missing.pem" in caught.value.detail


def test_plain_http_to_the_tls_port_gets_no_data(server: Any) -> None:
    port = int(server.url.rsplit(":", 1)[1])
    request = (
        f"GET /api/v1/jobs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Authorization: Bearer {server.admin_token}\r\nConnection: close\r\n\r\n"
    ).encode()
    received = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    assert not received.startswith(b"HTTP/1.1 200")
    assert b'"items"' not in received
    try:
        r = httpx.get(
            f"http://127.0.0.1:{port}/api/v1/jobs",
            headers={"Authorization": f"Bearer {server.admin_token}"},
            timeout=10,
        )
    except httpx.HTTPError:
        return  # the server hung up: no data
    assert r.status_code != 200 and "items" not in r.text


def test_the_dashboard_cookie_is_secure_over_https(server: Any, pki: Pki) -> None:
    context = ssl.create_default_context(cafile=str(pki.cert))
    with httpx.Client(base_url=server.url, verify=context, timeout=30) as h:
        r = h.post("/login", data={"token": server.admin_token, "next": "/"})
    assert r.status_code == 303
    cookie = r.headers["set-cookie"]
    assert "phalanx_session=" in cookie and "Secure" in cookie and "HttpOnly" in cookie


@pytest.mark.parametrize(
    ("which", "needle"),
    [
        ("cert only", "--tls-key: HTTPS needs both"),
        ("key only", "--tls-cert: HTTPS needs both"),
        ("missing cert", "--tls-cert: cannot read"),
        ("missing key", "--tls-key: cannot read"),
        ("key of another", "is not the private key of"),
        ("encrypted key", "unencrypted private key"),
        ("not a certificate", "not a PEM certificate"),
    ],
)
def test_bad_tls_flags_are_one_clear_error(
    pki: Pki, tmp_path: Path, which: str, needle: str
) -> None:
    from phalanx.server import start_server

    missing = tmp_path / "missing.pem"
    cert, key = {
        "cert only": (pki.cert, None),
        "key only": (None, pki.key),
        "missing cert": (missing, pki.key),
        "missing key": (pki.cert, missing),
        "key of another": (pki.cert, pki.other_key),
        "encrypted key": (pki.cert, pki.encrypted_key),
        "not a certificate": (pki.key, pki.key),
    }[which]
    state = tmp_path / "state"
    with pytest.raises(Invalid) as caught:
        start_server(state, port=0, tls_cert=cert, tls_key=key)
    assert needle in caught.value.detail
    assert "Traceback" not in caught.value.detail
    assert not state.exists()  # refused before anything was started


def test_up_reports_bad_tls_flags_in_one_line(
    pki: Pki, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from phalanx.cli.main import main

    code = main(
        ["up", "--state-dir", str(tmp_path / "s"), "--port", "0", "--tls-cert", str(pki.cert)]
    )
    err = capsys.readouterr().err
    assert code == 1
    assert err.splitlines() == [
        "phalanx: error: --tls-key: HTTPS needs both --tls-cert FILE and --tls-key FILE"
    ]
