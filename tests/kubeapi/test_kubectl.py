"""The real kubectl reads the discovery and OpenAPI documents (skipped without kubectl).

A throwaway HTTP server in a thread answers discovery, ``/version``,
``/openapi/v2`` (empty) and ``/openapi/v3`` from :mod:`phalanx.kubeapi`, plain
``application/json`` for every Accept (no aggregated discovery), and Tables of
fixed objects; each kubectl found (``kubectl`` and the ``kubectl.1.NN`` beside
it, oldest and newest) must list the resources, explain a Kueue field and print
a table.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from phalanx.kubeapi import openapi, resources, tables
from tests.kubeapi.support import kubectl_on_path, versioned_kubectls

NOW = 1_800_000_000.0


def _kubectls() -> list[str]:
    versioned = versioned_kubectls()
    if versioned:
        return [str(versioned[0]), str(versioned[-1])]
    found = kubectl_on_path()
    return [found] if found else []


KUBECTLS = _kubectls()
pytestmark = pytest.mark.skipif(not KUBECTLS, reason="kubectl is not installed")

_QUEUES = [
    {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "cq-a", "creationTimestamp": "2027-01-15T08:00:00Z"},
        "spec": {"cohortName": "all", "queueingStrategy": "StrictFIFO"},
        "status": {"pendingWorkloads": 3, "admittedWorkloads": 2},
    }
]


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        body: Any = None
        if path == "/openapi/v2":
            self._send(200, openapi.openapi_v2_protobuf(), openapi.OPENAPI_V2_CONTENT_TYPE)
            return
        if path == "/api":
            body = resources.api_versions()
        elif path == "/apis":
            body = resources.api_group_list()
        elif path == "/version":
            body = resources.version_info()
        elif path == "/openapi/v3":
            body = openapi.openapi_v3_index()
        elif path.startswith("/openapi/v3/"):
            body = openapi.openapi_v3_document(path)
        elif path == "/api/v1":
            body = resources.api_resource_list("v1")
        elif path == "/apis/kueue.x-k8s.io/v1beta2/clusterqueues":
            r = resources.resolve("kueue.x-k8s.io/v1beta2", "clusterqueues")
            assert r is not None
            assert "as=Table" in (self.headers.get("Accept") or "")
            body = tables.table(r, _QUEUES, NOW, resource_version="1")
        elif path.startswith("/apis/"):
            parts = path.split("/")[2:]
            if len(parts) == 2:
                body = resources.api_resource_list("/".join(parts))
        if body is None:
            self._send(404, b'{"kind":"Status","apiVersion":"v1","status":"Failure","code":404}')
        else:
            self._send(200, json.dumps(body).encode())


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def _kubectl(binary: str, server: str, home: Path, *args: str) -> str:
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home)}
    done = subprocess.run(
        [binary, "--server", server, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("binary", KUBECTLS)
def test_kubectl_reads_the_documents(binary: str, server: str, tmp_path: Path) -> None:
    listed = _kubectl(binary, server, tmp_path, "api-resources")
    assert re.search(r"clusterqueues\s+cq\s+kueue.x-k8s.io/v1beta2\s+false\s+ClusterQueue", listed)
    assert re.search(r"pods\s+po\s+v1\s+true\s+Pod", listed)
    explained = _kubectl(binary, server, tmp_path, "explain", "cq.spec.resourceGroups")
    assert "KIND:" in explained and "ClusterQueue" in explained
    assert "coveredResources" in explained and "flavors" in explained
    got = _kubectl(binary, server, tmp_path, "get", "cq", "-o", "wide")
    assert got.split("\n")[0].split() == [
        "NAME", "COHORT", "STRATEGY", "PENDING", "WORKLOADS", "ADMITTED", "WORKLOADS",
    ]  # fmt: skip
    assert got.split("\n")[1].split() == ["cq-a", "all", "StrictFIFO", "3", "2"]
