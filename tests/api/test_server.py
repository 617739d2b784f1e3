"""The app on its own uvicorn server with a stand-in control plane: health, bugs as 500 JSON."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from phalanx.api.app import create_app
from phalanx.api.server import ApiServer, serve
from phalanx.auth import Principal
from phalanx.errors import Unauthorized


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


def test_serve_runs_in_the_foreground_until_stopped() -> None:
    started = threading.Event()
    holder: list[ApiServer] = []
    thread = threading.Thread(
        target=serve,
        args=(create_app(FakePlane()), "127.0.0.1", 0),  # type: ignore[arg-type]
        kwargs={"on_started": started.set, "server": holder},
        daemon=True,
    )
    thread.start()
    assert started.wait(10)
    assert httpx.get(f"{holder[0].url}/healthz").status_code == 503
    holder[0].stop()
    thread.join(10)
    assert not thread.is_alive()
