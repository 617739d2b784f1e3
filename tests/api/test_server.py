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
    store: Any = None

    def authenticate(self, token: str) -> Principal:
        if token != "good":
            raise Unauthorized("invalid or expired token")
        return Principal(user="u", tenants=frozenset({"t"}))

    def job(self, principal: Principal, job_id: int) -> Any:
        raise RuntimeError("a bug in the control plane")

    def render_metrics(self) -> bytes:
        return b"kueue_pending_workloads 0\n"


@pytest.fixture
def served() -> Iterator[tuple[FakePlane, str]]:
    plane = FakePlane()
    server = ApiServer(create_app(plane), "127.0.0.1", 0).start()  # type: ignore[arg-type]
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
    assert (r.status_code, r.json()) == (200, {"status": "ok"})


def test_bugs_are_500_json_without_traceback(served: tuple[FakePlane, str]) -> None:
    _, url = served
    r = httpx.get(f"{url}/api/v1/jobs/1", headers={"Authorization": "Bearer good"})
    assert r.status_code == 500
    assert r.json() == {
        "error": "Internal",
        "detail": "internal error (RuntimeError); the server log has the details",
    }


def test_metrics(served: tuple[FakePlane, str]) -> None:
    _, url = served
    r = httpx.get(f"{url}/metrics")
    assert r.status_code == 200
    assert r.text == "kueue_pending_workloads 0\n"


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
