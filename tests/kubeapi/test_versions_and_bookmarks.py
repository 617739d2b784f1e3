"""Kueue's two served versions over one stored object (v1beta1's ``cohort`` is
v1beta2's ``cohortName``), and a watch's initial events ending in the bookmark that
says so (``sendInitialEvents``), with periodic bookmarks carrying the revision."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from phalanx.auth import ADMIN
from phalanx.kubeapi import watch
from phalanx.server import RunningServer, start_server
from tests.kubeapi.support import FLAVOR_AND_QUEUE, kube_http

V1BETA1 = "/apis/kueue.x-k8s.io/v1beta1/clusterqueues"
V1BETA2 = "/apis/kueue.x-k8s.io/v1beta2/clusterqueues"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    folder: Path = tmp_path_factory.mktemp("versions")
    (folder / "cluster.yaml").write_text(FLAVOR_AND_QUEUE)
    running = start_server(
        folder / "state",
        port=0,
        kube_port=0,
        runtime="noop",
        configs=[folder / "cluster.yaml"],
        container_runtime="host",
    )
    try:
        yield running
    finally:
        running.stop()


def test_one_object_in_both_versions(server: RunningServer) -> None:
    queue = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": "old-style"},
        "spec": {
            "cohort": "org",
            "flavorFungibility": {"whenCanBorrow": "Borrow"},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [{"name": "any", "resources": [{"name": "cpu", "nominalQuota": 2}]}],
                }
            ],
        },
    }
    with kube_http(server) as http:
        made = http.post(V1BETA1, json=queue)
        assert made.status_code == 201, made.text
        assert made.json()["apiVersion"] == "kueue.x-k8s.io/v1beta1"
        assert made.json()["spec"]["cohort"] == "org"
        new = http.get(f"{V1BETA2}/old-style").json()
        assert new["apiVersion"] == "kueue.x-k8s.io/v1beta2"
        assert new["spec"]["cohortName"] == "org" and "cohort" not in new["spec"]
        assert new["spec"]["flavorFungibility"]["whenCanBorrow"] == "MayStopSearch"
        old = http.get(f"{V1BETA1}/old-style").json()
        assert old["spec"]["cohort"] == "org"
        assert old["metadata"]["uid"] == new["metadata"]["uid"]
        assert http.delete(f"{V1BETA2}/old-style").status_code == 200


def test_initial_events_end_with_a_bookmark_and_bookmarks_carry_the_revision(
    server: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watch, "BOOKMARK_S", 0.2)
    events: list[dict[str, object]] = []
    with kube_http(server) as http:
        revision = http.get(V1BETA2).json()["metadata"]["resourceVersion"]
        params = {
            "watch": "true",
            "sendInitialEvents": "true",
            "resourceVersionMatch": "NotOlderThan",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": "5",
        }
        with http.stream("GET", V1BETA2, params=params) as stream:
            for line in stream.iter_lines():
                events.append(json.loads(line))
                if len(events) == 3:
                    break
    added, end, periodic = events
    assert added["type"] == "ADDED"
    assert added["object"]["metadata"]["name"] == "cq"  # type: ignore[index]
    assert end["type"] == "BOOKMARK"
    meta = end["object"]["metadata"]  # type: ignore[index]
    assert meta["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert int(meta["resourceVersion"]) >= int(revision)
    assert periodic["type"] == "BOOKMARK"
    assert int(periodic["object"]["metadata"]["resourceVersion"]) >= int(revision)  # type: ignore[index]


def test_a_user_may_not_read_another_users_list_pages(server: RunningServer) -> None:
    token, _ = server.plane.create_token(ADMIN, user="eve", tenants=["team-e"])
    with kube_http(server) as admin:
        for name in ("team-e", "team-f"):
            namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
            assert admin.post("/api/v1/namespaces", json=namespace).status_code == 201
        page = admin.get("/api/v1/namespaces", params={"limit": "1"}).json()
        cont = page["metadata"]["continue"]
        assert admin.get("/api/v1/namespaces", params={"limit": "1", "continue": cont}).is_success
    with kube_http(server, token) as eve:
        stolen = eve.get("/api/v1/namespaces", params={"limit": "1", "continue": cont})
    assert stolen.status_code == 410 and stolen.json()["reason"] == "Expired"
