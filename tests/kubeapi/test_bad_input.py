"""Bad input to the Kubernetes API is a ``Status`` with a 4xx code, never a 500: each
kind's create and every PATCH type, with bodies of the wrong shape, and lists and
watches with malformed selectors, limits, continue tokens and resource versions."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from phalanx.server import RunningServer, start_server
from tests.kubeapi.support import FLAVOR_AND_QUEUE, kube_http

PATHS = [
    "/apis/kueue.x-k8s.io/v1beta2/clusterqueues",
    "/apis/kueue.x-k8s.io/v1beta1/clusterqueues",
    "/apis/kueue.x-k8s.io/v1beta2/namespaces/default/localqueues",
    "/apis/kueue.x-k8s.io/v1beta2/namespaces/default/workloads",
    "/apis/batch/v1/namespaces/default/jobs",
    "/apis/ray.io/v1/namespaces/default/rayjobs",
    "/api/v1/nodes",
    "/api/v1/namespaces",
    "/api/v1/namespaces/default/pods",
    "/api/v1/namespaces/default/events",
    "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
]
BODIES: list[Any] = [
    None, [], "x", 1, {}, {"metadata": []}, {"metadata": {"name": 5}},
    {"metadata": {"name": "a"}, "spec": []},
    {"metadata": {"name": "a"}, "spec": {"resourceGroups": "x"}},
    {"metadata": {"name": "a/b"}}, {"apiVersion": 3, "kind": [], "metadata": {"name": "a"}},
    {"metadata": {"name": "x" * 300}}, {"metadata": {"name": "a", "labels": "x"}},
    {"metadata": {"name": "a", "annotations": {"a": 1}}},
    {"metadata": {"name": "a", "managedFields": "x"}},
    {"metadata": {"name": "a"}, "spec": {"template": 5}},
    {"metadata": {"name": "a"}, "spec": {"template": {"spec": {"containers": [{}]}}}},
    {"spec": {"resourceAttributes": "x"}}, {"metadata": {"name": "n"}, "status": {"capacity": "x"}},
]  # fmt: skip
PATCH_TYPES = [
    "application/merge-patch+json",
    "application/json-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
    "text/plain",
]
QUERIES = [
    "labelSelector=a%20in%20(", "labelSelector=!!", "fieldSelector=foo=bar", "limit=x",
    "continue=zz", "watch=true&resourceVersion=abc", "fieldSelector=metadata.name",
    "watch=1&timeoutSeconds=1&labelSelector=a%3D%3D%3Db",
]  # fmt: skip
CLUSTER = FLAVOR_AND_QUEUE


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    folder = tmp_path_factory.mktemp("bad")
    (folder / "cluster.yaml").write_text(CLUSTER)
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


@pytest.fixture(scope="module")
def http(server: RunningServer) -> Iterator[httpx.Client]:
    with kube_http(server) as client:
        yield client


def _status(response: httpx.Response) -> None:
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        body = response.json()
        assert body["kind"] == "Status" and body["code"] == response.status_code, body


@pytest.mark.parametrize("path", PATHS)
def test_bad_bodies_are_4xx_statuses(http: httpx.Client, path: str) -> None:
    for body in BODIES:
        _status(http.post(path, content=json.dumps(body)))
        item = path + ("/cq" if path.endswith("clusterqueues") else "/x")
        _status(http.put(item, content=json.dumps(body)))
        for kind in PATCH_TYPES:
            _status(
                http.patch(
                    item,
                    content=json.dumps(body),
                    headers={"Content-Type": kind},
                    params={"fieldManager": "fuzz"},
                )
            )


@pytest.mark.parametrize("query", QUERIES)
def test_bad_queries_are_4xx_statuses(http: httpx.Client, query: str) -> None:
    for path in PATHS[:5]:
        response = http.get(f"{path}?{query}")
        assert response.status_code < 500, response.text
        if "watch" in query and response.status_code == 200:
            for line in response.text.splitlines():
                event = json.loads(line)
                if event["type"] == "ERROR":
                    assert event["object"]["code"] < 500


def test_the_config_survives_the_fuzzing(http: httpx.Client, server: RunningServer) -> None:
    names = [o["metadata"]["name"] for o in http.get(PATHS[0]).json()["items"]]
    assert "cq" in names
    assert server.plane.store.get_object("ClusterQueue", "cq") is not None
