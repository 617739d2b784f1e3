"""The app on its own uvicorn server with a stand-in control plane: health, bugs as 500 JSON."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from phalanx.api.app import create_app
from phalanx.api.server import ApiServer, listen
from phalanx.auth import Principal
from phalanx.errors import Conflict, Unauthorized


class FakePlane:
    """Just enough control plane: one token, a job lookup that has a bug."""

    ready = False
    leading = True
    leader_url: str | None = None
    store: Any = None

    def authenticate(self, token: str) -> Principal:
        if token != "good":
            raise Unauthorized("invalid or expired token")
        return Principal(user="u", tenants=frozenset({"t"}))

    def cached_principal(self, token: str) -> Principal | None:
        return None  # no cache: every submit goes the app's way

    def job(self, principal: Principal, job_id: int) -> Any:
        raise RuntimeError("a bug in the control plane")

    def render_metrics(self) -> bytes:
        return b"kueue_pending_workloads 0\n"


@pytest.fixture
def served() -> Iterator[tuple[FakePlane, str]]:
    yield from _serve()


@pytest.fixture
def served_public_metrics() -> Iterator[tuple[FakePlane, str]]:
    yield from _serve(public_metrics=True)


def _serve(**options: Any) -> Iterator[tuple[FakePlane, str]]:
    plane = FakePlane()
    app = create_app(plane, **options)  # type: ignore[arg-type]
    server = ApiServer(app, "127.0.0.1", 0).start()
    try:
        assert server.started and server.port > 0
        yield plane, server.url
    finally:
        server.stop()


def test_healthz_follows_readiness(served: tuple[FakePlane, str]) -> None:
    plane, url = served
    assert httpx.get(f"{url}/healthz").status_code == 503
    plane.ready = True
    r = httpx.get(f"{url}/healthz")
    assert (r.status_code, r.json()) == (200, {"status": "ok", "role": "leader"})


def test_request_bodies_are_bounded(served: tuple[FakePlane, str]) -> None:
    """A body over the limit is refused 413 before anything parses it, whether its size
    is declared (Content-Length) or only counted (chunked)."""
    from phalanx.api.forward import MAX_BODY_BYTES

    _, url = served
    headers = {"Authorization": "Bearer good", "Content-Type": "application/json"}
    big = b"[" + b" " * MAX_BODY_BYTES + b"]"
    r = httpx.post(f"{url}/api/v1/jobs", content=big, headers=headers)
    assert r.status_code == 413
    assert r.json()["error"] == "TooLarge"
    assert "64 MiB" in r.json()["detail"]

    def chunks() -> Iterator[bytes]:
        for _ in range(65):
            yield b" " * (1 << 20)

    r = httpx.post(f"{url}/api/v1/jobs", content=chunks(), headers=headers)
    assert r.status_code == 413
    # Under the limit the request goes through to the route (which validates it).
    r = httpx.post(f"{url}/api/v1/jobs", content=b"{}", headers=headers)
    assert r.status_code == 422


def test_bugs_are_500_json_without_traceback(served: tuple[FakePlane, str]) -> None:
    _, url = served
    r = httpx.get(f"{url}/api/v1/jobs/1", headers={"Authorization": "Bearer good"})
    assert r.status_code == 500
    assert r.json() == {
        "error": "Internal",
        "detail": "internal error (RuntimeError); the server log has the details",
    }


def test_metrics_need_a_token_by_default(served: tuple[FakePlane, str]) -> None:
    _, url = served
    assert httpx.get(f"{url}/metrics").status_code == 401
    bad = httpx.get(f"{url}/metrics", headers={"Authorization": "Bearer bad"})
    assert bad.status_code == 401
    r = httpx.get(f"{url}/metrics", headers={"Authorization": "Bearer good"})
    assert r.status_code == 200
    assert r.text == "kueue_pending_workloads 0\n"


def test_public_metrics_need_no_token(served_public_metrics: tuple[FakePlane, str]) -> None:
    _, url = served_public_metrics
    r = httpx.get(f"{url}/metrics")
    assert r.status_code == 200
    assert r.text == "kueue_pending_workloads 0\n"
    # Only the metrics: the API still needs a token.
    assert httpx.get(f"{url}/api/v1/jobs/1").status_code == 401


def test_run_serves_in_the_foreground_until_stopped() -> None:
    server = ApiServer(create_app(FakePlane()), "127.0.0.1", 0)  # type: ignore[arg-type]
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(500):
        if server.started:
            break
        threading.Event().wait(0.01)
    assert httpx.get(f"{server.url}/healthz").status_code == 503
    server.stop()
    thread.join(10)
    assert not thread.is_alive()


def test_a_port_in_use_is_one_clear_error() -> None:
    taken = listen("127.0.0.1", 0)
    try:
        with pytest.raises(Conflict, match=r"cannot listen on 127\.0\.0\.1:\d+: .*--port"):
            listen("127.0.0.1", taken.getsockname()[1])
    finally:
        taken.close()
