"""Submits answered on the event loop (:mod:`phalanx.api.fastsubmit`) answer as the app does.

The same bodies go through both ways: ``Content-Type: application/json`` takes the
event loop's way (once the token is known), ``application/json; charset=utf-8`` the
app's, which the first is not allowed to differ from.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.api.server import Cluster, job

FAST = {"Content-Type": "application/json"}
APP = {"Content-Type": "application/json; charset=utf-8"}


def post(cluster: Cluster, token: str, path: str, body: Any, headers: dict[str, str]) -> Any:
    with httpx.Client(
        base_url=cluster.url, headers={"Authorization": f"Bearer {token}"}, timeout=30
    ) as h:
        return h.post(path, content=json.dumps(body).encode(), headers=headers)


def test_a_submit_answers_alike_either_way(cluster: Cluster) -> None:
    # The first request with a new token goes the app's way and makes it known.
    token = cluster.admin.create_token("carol", ["team-a"], name="carol")["token"]
    first = post(cluster, token, "/api/v1/jobs", job(["true"]), FAST)
    answers = [post(cluster, token, "/api/v1/jobs", job(["true"]), h) for h in (FAST, APP)]
    for r in (first, *answers):
        assert r.status_code == 201, r.text
        assert r.headers["content-type"] == "application/json"
        assert r.content == f'{{"id":{r.json()["id"]},"ids":[{r.json()["id"]}]}}'.encode()
    assert first.json()["id"] < answers[0].json()["id"] < answers[1].json()["id"]
    with cluster.admin as c:
        assert c.get(answers[0].json()["id"])["user"] == "carol"


def test_a_batch_answers_alike_either_way(cluster: Cluster) -> None:
    body = {"jobs": [job(["true"]), job(["true"]), job(["true"])]}
    for headers in (FAST, APP):
        r = post(cluster, cluster.alice_token, "/api/v1/jobs/batch", body, headers)
        assert r.status_code == 201, r.text
        ids = r.json()["ids"]
        assert len(ids) == 3 and ids == sorted(ids)
        assert r.content == json.dumps({"ids": ids}, separators=(",", ":")).encode()


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/v1/jobs", job(["true"], queue="nope")),  # refused by the control plane
        ("/api/v1/jobs", job(["true"], tenant="team-b")),  # not alice's tenant
        ("/api/v1/jobs", {"podSets": [{"count": 0}], "run": {"command": ["true"]}}),  # invalid
        ("/api/v1/jobs", [1, 2]),  # not a submission at all
        ("/api/v1/jobs/batch", {"jobs": []}),
        ("/api/v1/jobs/batch", {"jobs": [job(["true"]), job(["true"], queue="nope")]}),
    ],
)
def test_refusals_are_the_apps(cluster: Cluster, path: str, body: Any) -> None:
    post(cluster, cluster.alice_token, "/api/v1/jobs", job(["true"]), APP)  # token known
    fast = post(cluster, cluster.alice_token, path, body, FAST)
    app = post(cluster, cluster.alice_token, path, body, APP)
    assert 400 <= fast.status_code < 500, fast.text
    assert (fast.status_code, fast.content) == (app.status_code, app.content)
    assert fast.headers["content-type"] == app.headers["content-type"]


def test_an_unknown_token_is_refused_as_before(cluster: Cluster) -> None:
    for headers in (FAST, APP):
        r = post(cluster, "not-a-token", "/api/v1/jobs", job(["true"]), headers)
        assert r.status_code == 401, r.text
        assert r.json()["error"] == "Unauthorized"
