"""Every route of the real app needs credentials, except a short allow-list.

The test walks the routes the running server serves (``app.routes``), so a route
added later is checked without anyone remembering to list it: an API route must
answer 401 without a token and with a bad one; a dashboard page must send the
browser to ``/login`` (303), and its JSON fragment answer 401, without a session.
A route whose path has a parameter this file has no value for fails the test
until a value is added here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from fastapi import routing
from starlette.routing import compile_path

from tests.api.server import Cluster, job

OPEN = {
    ("GET", "/healthz"),
    # The OpenAPI description and its viewer: the API's shape, no data.
    ("GET", "/openapi.json"),
    ("GET", "/docs"),
    ("GET", "/docs/oauth2-redirect"),
    # The dashboard's sign-in form and the sign-in itself.
    ("GET", "/login"),
    ("POST", "/login"),
}
"""(method, path) that answer without credentials; HEAD goes with GET."""
OPEN_MOUNTS = {"/static"}
"""The dashboard's stylesheet and script."""
WEB_STATUS = {
    ("GET", "/ui/jobs/{job_id}/log"): 401,
    # Signing out needs the session's CSRF token: nothing to sign out of, nothing done.
    ("POST", "/logout"): 403,
}
"""Dashboard routes that answer with a status instead of redirecting to /login."""
API_PREFIXES = ("/api/", "/metrics")
"""Bearer-token routes; every other path is the dashboard's (session cookie)."""


@dataclass(frozen=True)
class Endpoint:
    method: str
    path: str
    """As declared, ``/api/v1/jobs/{job_id}``."""

    def __str__(self) -> str:
        return f"{self.method} {self.path}"


def endpoints(app: object) -> Iterator[Endpoint | str]:
    """Every (method, path) the app serves; a mount as its path."""
    routes = app.routes  # type: ignore[attr-defined]
    # Recent FastAPI keeps included routers as such; older versions copy their routes.
    contexts = (
        routing.iter_route_contexts(routes) if hasattr(routing, "iter_route_contexts") else routes
    )
    for route in contexts:
        methods = getattr(route, "methods", None)
        path = getattr(route, "path", None)
        if not methods:
            assert path, f"a route without methods or path: {route!r}"
            yield str(path)
            continue
        for method in sorted(methods):
            if method == "HEAD" and "GET" in methods:
                continue
            yield Endpoint(method, str(path))


@pytest.fixture(scope="module")
def values(cluster: Cluster) -> dict[str, str]:
    """A value for each path parameter: things that exist, so a route that forgot its
    check would answer with data."""
    with cluster.alice as alice:
        job_id = alice.submit(job(["true"]))
    return {
        "job_id": str(job_id),
        "plural": "clusterqueues",
        "name": "team-a",
        "namespace": "team-a",
        "file": "utilization.png",
    }


def concrete(path: str, values: dict[str, str]) -> str:
    out = path
    for param in compile_path(path)[2]:
        assert param in values, (
            f"{path}: no test value for the path parameter {{{param}}}; add one to "
            "tests/api/test_routes_auth.py so the route is checked"
        )
    for param, value in values.items():
        out = out.replace(f"{{{param}:path}}", value).replace(f"{{{param}}}", value)
    return out


def _api_refuses(h: httpx.Client, method: str, url: str, headers: dict[str, str]) -> str | None:
    r = h.request(method, url, headers=headers, json={} if method in ("POST", "PATCH") else None)
    if r.status_code != 401:
        return f"answered {r.status_code}: {r.text[:120]!r}"
    if r.json().get("error") != "Unauthorized":
        return f"401 without the Unauthorized error body: {r.text[:120]!r}"
    return None


def _web_refuses(
    h: httpx.Client, endpoint: Endpoint, url: str, cookies: dict[str, str]
) -> str | None:
    h.cookies.clear()
    for name, value in cookies.items():
        h.cookies.set(name, value)
    data = {"csrf": ""} if endpoint.method == "POST" else None
    r = h.request(endpoint.method, url, data=data)
    expected = WEB_STATUS.get((endpoint.method, endpoint.path), 303)
    if r.status_code != expected:
        return f"answered {r.status_code} (expected {expected}): {r.text[:120]!r}"
    if expected == 303 and not r.headers.get("location", "").startswith("/login"):
        return f"redirected to {r.headers.get('location')!r}, not to /login"
    return None


def test_every_route_but_the_allow_list_needs_credentials(
    cluster: Cluster, values: dict[str, str]
) -> None:
    app = cluster.server.app  # type: ignore[attr-defined]
    problems: list[str] = []
    checked = 0
    with httpx.Client(base_url=cluster.url, timeout=30, follow_redirects=False) as h:
        for endpoint in endpoints(app):
            if isinstance(endpoint, str):
                if endpoint not in OPEN_MOUNTS:
                    problems.append(f"mount {endpoint}: not in the allow-list; check it here")
                continue
            if (endpoint.method, endpoint.path) in OPEN:
                continue
            url = concrete(endpoint.path, values)
            checked += 1
            if endpoint.path.startswith(API_PREFIXES):
                for label, headers in (
                    ("no token", {}),
                    ("a bad token", {"Authorization": "Bearer phx_not-a-token"}),
                    ("another scheme", {"Authorization": f"Basic {cluster.admin_token}"}),
                ):
                    problem = _api_refuses(h, endpoint.method, url, headers)
                    if problem:
                        problems.append(f"{endpoint} with {label}: {problem}")
            else:
                # Everything else is the dashboard's, behind its session cookie.
                for label, cookies in (
                    ("no session", {}),
                    ("a forged session", {"phalanx_session": "phx_not-a-token"}),
                ):
                    problem = _web_refuses(h, endpoint, url, cookies)
                    if problem:
                        problems.append(f"{endpoint} with {label}: {problem}")
    assert not problems, "\n".join(problems)
    assert checked > 50  # the walk really saw the routers' routes


def test_the_allow_list_is_open_and_current(cluster: Cluster) -> None:
    served = {
        (e.method, e.path)
        for e in endpoints(cluster.server.app)
        if isinstance(e, Endpoint)  # type: ignore[attr-defined]
    }
    assert served >= OPEN, f"stale allow-list entries: {OPEN - served}"
    assert served >= set(WEB_STATUS), f"stale entries: {set(WEB_STATUS) - served}"
    with httpx.Client(base_url=cluster.url, timeout=30) as h:
        assert h.get("/healthz").status_code == 200
        assert "/api/v1/jobs" in h.get("/openapi.json").json()["paths"]
        assert h.get("/docs").status_code == 200
        assert h.get("/login").status_code == 200
        assert h.get("/static/app.css").status_code == 200
        # The docs describe the API; they hold no jobs, tokens or objects.
        spec = h.get("/openapi.json").text
        assert cluster.admin_token not in spec and "team-a" not in spec


def test_metrics_are_behind_a_token_by_default(cluster: Cluster) -> None:
    with httpx.Client(base_url=cluster.url, timeout=30) as h:
        assert h.get("/metrics").status_code == 401
        for token in (cluster.admin_token, cluster.alice_token):
            r = h.get("/metrics", headers={"Authorization": f"Bearer {token}"})
            assert r.status_code == 200 and "kueue_pending_workloads" in r.text
    with cluster.bob as bob:
        assert "kueue_pending_workloads" in bob.metrics()


def test_unknown_api_paths_need_a_token_too(cluster: Cluster) -> None:
    with httpx.Client(base_url=cluster.url, timeout=30) as h:
        for path in ("/api/v1/nope", "/api/v1/nope/x", "/api/v1/tokens/x"):
            assert h.get(path).status_code == 401, path
