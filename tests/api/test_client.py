"""The client without a phalanx server: configuration, errors, connection failures."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import phalanx
from phalanx import errors
from phalanx.client import DEFAULT_URL, Client, resolve_config


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("PHALANX_URL", "PHALANX_TOKEN", "PHALANX_STATE_DIR", "XDG_STATE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def write_client_json(state: Path, **data: str) -> None:
    state.mkdir(parents=True, exist_ok=True)
    (state / "client.json").write_text(json.dumps(data))


def test_lazy_export() -> None:
    assert phalanx.Client is Client
    with pytest.raises(AttributeError):
        _ = phalanx.Nope  # type: ignore[attr-defined]


def test_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    config = resolve_config()
    assert config.url == DEFAULT_URL
    assert config.token is None
    assert config.state_dir == tmp_path / "home" / ".local" / "state" / "phalanx"


def test_roots_default_state_dir_is_a_system_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert resolve_config().state_dir == Path("/var/lib/phalanx")
    monkeypatch.setenv("PHALANX_STATE_DIR", "/srv/phalanx")
    assert resolve_config().state_dir == Path("/srv/phalanx")


def test_state_dir_client_json(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    state = tmp_path / "state"
    write_client_json(state, url="http://10.0.0.1:7000/", token="phx_saved")
    monkeypatch.setenv("PHALANX_STATE_DIR", str(state))
    config = resolve_config()
    assert (config.url, config.token, config.state_dir) == (
        "http://10.0.0.1:7000",
        "phx_saved",
        state,
    )


def test_environment_beats_client_json(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    state = tmp_path / "state"
    write_client_json(state, url="http://saved:1", token="phx_saved")
    monkeypatch.setenv("PHALANX_URL", "http://env:2")
    monkeypatch.setenv("PHALANX_TOKEN", "phx_env")
    config = resolve_config(state_dir=state)
    assert (config.url, config.token) == ("http://env:2", "phx_env")


def test_arguments_beat_everything(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PHALANX_URL", "http://env:2")
    monkeypatch.setenv("PHALANX_TOKEN", "phx_env")
    config = resolve_config("http://arg:3", "phx_arg", tmp_path)
    assert (config.url, config.token) == ("http://arg:3", "phx_arg")
    assert "phx_arg" not in repr(config)


def test_partial_environment_falls_back_per_field(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    write_client_json(tmp_path, url="http://saved:1", token="phx_saved")
    monkeypatch.setenv("PHALANX_URL", "http://env:2")
    config = resolve_config(state_dir=tmp_path)
    assert (config.url, config.token) == ("http://env:2", "phx_saved")


def test_broken_client_json_is_ignored(tmp_path: Path) -> None:
    (tmp_path / "client.json").write_text("{nope")
    assert resolve_config(state_dir=tmp_path).url == DEFAULT_URL


def test_bad_url() -> None:
    with pytest.raises(errors.Invalid, match="not an http"):
        Client("ftp://x")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_no_server_is_unavailable_with_a_hint() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with Client(url, "t") as client, pytest.raises(errors.Unavailable) as info:
        client.whoami()
    assert info.value.detail == f"no phalanx server at {url}: start one with `phalanx up`"


class _Handler(BaseHTTPRequestHandler):
    answers: dict[str, tuple[int, bytes]] = {}

    def do_GET(self) -> None:
        status, body = self.answers.get(self.path.split("?")[0], (200, b"{}"))
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.server.seen.append(dict(self.headers))  # type: ignore[attr-defined]

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def fake() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.seen = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def url_of(server: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


@pytest.mark.parametrize(
    ("status", "error", "cls"),
    [
        (422, "Invalid", errors.Invalid),
        (404, "NotFound", errors.NotFound),
        (409, "Conflict", errors.Conflict),
        (401, "Unauthorized", errors.Unauthorized),
        (403, "Forbidden", errors.Forbidden),
        (503, "Unavailable", errors.Unavailable),
        (400, "BadRequest", errors.PhalanxError),
    ],
)
def test_server_errors_become_phalanx_errors(
    fake: ThreadingHTTPServer, status: int, error: str, cls: type[errors.PhalanxError]
) -> None:
    body = json.dumps({"error": error, "detail": f"the {error} detail"}).encode()
    _Handler.answers = {"/api/v1/jobs/5": (status, body)}
    with Client(url_of(fake), "phx_t") as client, pytest.raises(cls) as info:
        client.get(5)
    assert type(info.value) is cls
    assert info.value.detail == f"the {error} detail"
    assert info.value.error == error


def test_non_json_errors_still_raise(fake: ThreadingHTTPServer) -> None:
    _Handler.answers = {"/api/v1/jobs/5": (502, b"<html>bad gateway</html>")}
    with Client(url_of(fake), "phx_t") as client, pytest.raises(errors.PhalanxError) as info:
        client.get(5)
    assert "502" in info.value.detail


def test_sends_the_bearer_token_and_reuses_the_connection(fake: ThreadingHTTPServer) -> None:
    _Handler.answers = {"/api/v1/whoami": (200, b'{"user": "u", "tenants": [], "admin": false}')}
    with Client(url_of(fake), "phx_secret") as client:
        assert client.whoami()["user"] == "u"
        assert client.whoami()["user"] == "u"
    assert all(h["Authorization"] == "Bearer phx_secret" for h in fake.seen)  # type: ignore[attr-defined]


def test_several_servers_the_unreachable_ones_are_passed_over(
    fake: ThreadingHTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PHALANX_URL may list servers that share a PostgreSQL: one that refuses the
    connection (nothing was sent to it) is passed over for the next, and stays passed."""
    _Handler.answers = {"/api/v1/whoami": (200, b'{"user": "u", "tenants": [], "admin": false}')}
    down = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("PHALANX_URL", f"{down}, {url_of(fake)}/")
    with Client(token="phx_t") as client:
        assert client.urls == [down, url_of(fake)]
        assert client.whoami()["user"] == "u"
        assert client.url == url_of(fake)
        assert client.whoami()["user"] == "u"
    other = f"http://127.0.0.1:{free_port()}"
    with Client(f"{down},{other}", "t") as client, pytest.raises(errors.Unavailable) as info:
        client.whoami()
    assert info.value.detail == f"no phalanx server at {other}: start one with `phalanx up`"
    with pytest.raises(errors.Invalid):
        Client(f"{url_of(fake)},ftp://x", "t")


def test_submissions_may_be_models() -> None:
    from phalanx.client import _as_dict
    from phalanx.model import JobSubmission

    model = JobSubmission.model_validate({"podSets": [{}], "run": {"command": ["x"]}})
    assert _as_dict(model)["run"]["command"] == ["x"]
    with pytest.raises(TypeError):
        _as_dict(42)
