"""Tokens: revoking and expiry take effect at once (API and dashboard), listing shows
both, only the admin manages tokens, and the stored hash is compared in constant time."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from phalanx.errors import Conflict, Forbidden, Invalid, NotFound, Unauthorized
from tests.api.server import Cluster, running_cluster


def _status(cluster: Cluster, token: str, path: str = "/api/v1/whoami") -> int:
    r = httpx.get(cluster.url + path, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    return r.status_code


def _listed(cluster: Cluster, name: str) -> list[dict[str, Any]]:
    with cluster.admin as admin:
        return [t for t in admin.tokens() if t["name"] == name]


def test_a_revoked_token_stops_working_at_once(cluster: Cluster) -> None:
    with cluster.admin as admin:
        token = admin.create_token("erin", ["team-a"], name="erin-laptop")["token"]
    # Used once, so the server has it cached: the revocation must still win at once.
    assert _status(cluster, token) == 200
    with cluster.admin as admin:
        revoked = admin.revoke_token("erin-laptop")
    assert [(t["name"], t["revoked"]) for t in revoked] == [("erin-laptop", True)]
    assert "token" not in revoked[0]
    for path in ("/api/v1/whoami", "/api/v1/jobs", "/metrics"):
        assert _status(cluster, token, path) == 401, path
    with cluster.client(token) as erin, pytest.raises(Unauthorized):
        erin.jobs(limit=1).__next__()
    [row] = _listed(cluster, "erin-laptop")
    assert row["revoked"] is True and row["expired"] is False
    # Revoking again is fine; the others' tokens still work.
    with cluster.admin as admin:
        assert admin.revoke_token("erin-laptop")[0]["revoked"] is True
    assert _status(cluster, cluster.alice_token) == 200


def test_an_expired_token_gets_401(cluster: Cluster) -> None:
    with cluster.admin as admin:
        made = admin.create_token("fred", ["team-a"], name="fred-ci", expires=time.time() + 1.5)
    assert made["expires"] is not None and made["expired"] is False
    assert _status(cluster, made["token"]) == 200  # cached from here on
    time.sleep(1.7)
    # Within the server's short cache, but past the expiry: refused.
    assert _status(cluster, made["token"]) == 401
    assert _status(cluster, made["token"], "/api/v1/jobs") == 401
    [row] = _listed(cluster, "fred-ci")
    assert row["expired"] is True and row["revoked"] is False


@pytest.mark.parametrize(
    ("expires", "needle"),
    [(-5, "already past"), (200 * 365 * 86400, "at most 100 years")],
    ids=["past", "centuries-ahead"],
)
def test_an_expiry_must_be_ahead_and_sensible(
    cluster: Cluster, expires: float, needle: str
) -> None:
    with cluster.admin as admin, pytest.raises(Invalid) as caught:
        admin.create_token("gil", ["team-a"], expires=time.time() + expires)
    assert needle in caught.value.detail
    assert not _listed(cluster, "gil")


def test_listing_shows_revoked_expired_and_active(cluster: Cluster) -> None:
    with cluster.admin as admin:
        items = {t["name"]: t for t in admin.tokens()}
    assert items["alice"]["revoked"] is False and items["alice"]["expired"] is False
    assert all("token" not in t and "token_hash" not in t for t in items.values())


def test_a_token_is_named_after_its_user_by_default(cluster: Cluster) -> None:
    with cluster.admin as admin:
        made = admin.create_token("hana", ["team-b"])
        assert made["name"] == "hana"
        assert _status(cluster, made["token"]) == 200
        admin.revoke_token("hana")
    assert _status(cluster, made["token"]) == 401


def test_revoking_an_unknown_name_is_404(cluster: Cluster) -> None:
    with cluster.admin as admin, pytest.raises(NotFound) as caught:
        admin.revoke_token("nobody-has-this")
    assert "nobody-has-this" in caught.value.detail


@pytest.mark.parametrize("who", ["alice", "bob"])
@pytest.mark.parametrize("action", ["create", "list", "revoke"])
def test_only_the_admin_manages_tokens(cluster: Cluster, who: str, action: str) -> None:
    token = cluster.alice_token if who == "alice" else cluster.bob_token
    with cluster.client(token) as user, pytest.raises(Forbidden):
        if action == "create":
            user.create_token("mallory", ["team-a"], admin=True)
        elif action == "list":
            user.tokens()
        else:
            user.revoke_token("alice")
    # Nothing happened: no token for mallory, alice's still works.
    assert not _listed(cluster, "mallory")
    assert _status(cluster, cluster.alice_token) == 200


def test_a_revoked_token_ends_the_dashboard_session(cluster: Cluster) -> None:
    with cluster.admin as admin:
        token = admin.create_token("ivan", ["team-a"], name="ivan-browser")["token"]
    with httpx.Client(base_url=cluster.url, timeout=30) as h:
        r = h.post("/login", data={"token": token, "next": "/jobs"})
        assert (r.status_code, r.headers["location"]) == (303, "/jobs")
        assert h.get("/jobs").status_code == 200
        with cluster.admin as admin:
            admin.revoke_token("ivan-browser")
        r = h.get("/jobs")
        assert r.status_code == 303 and r.headers["location"].startswith("/login")
        assert h.get("/ui/jobs/1/log").status_code == 401
        # Signing in again with it is refused.
        assert h.post("/login", data={"token": token}).status_code == 401


def test_the_last_admin_token_cannot_be_revoked(tmp_path: Path) -> None:
    with running_cluster(tmp_path / "state") as cluster:
        with cluster.admin as admin, pytest.raises(Conflict) as caught:
            admin.revoke_token("admin")
        assert "admin token" in caught.value.detail
        assert _status(cluster, cluster.admin_token) == 200
        # With another admin token, the first one can go.
        with cluster.admin as admin:
            spare = admin.create_token("root", admin=True, name="spare-admin")["token"]
        with cluster.client(spare) as admin:
            admin.revoke_token("admin")
        assert _status(cluster, cluster.admin_token) == 401
        assert _status(cluster, spare) == 200


def test_the_stored_hash_decides_in_constant_time(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dataclasses
    import hmac

    from phalanx.auth import hash_token
    from phalanx.control import tokens as tokens_module

    plane = cluster.server.plane  # type: ignore[attr-defined]
    compared: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(tokens_module.hmac, "compare_digest", spy)
    token = cluster.bob_token
    plane.tokens.forget_cached()  # no cached answer: the lookup and the comparison run
    assert plane.authenticate(token).user == "bob"
    assert compared == [(hash_token(token).encode(), hash_token(token).encode())]
    # Should the lookup ever hand back a row of another hash, the comparison refuses it.
    find = plane.store.find_token

    def wrong_row(digest: str) -> Any:
        row = find(hash_token(cluster.alice_token))
        return dataclasses.replace(row, token_hash=row.token_hash) if row else None

    monkeypatch.setattr(plane.store, "find_token", wrong_row)
    plane.tokens.forget_cached()
    with pytest.raises(Unauthorized):
        plane.authenticate(token)
