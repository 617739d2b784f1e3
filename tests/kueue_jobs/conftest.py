"""A live phalanx server with two CPU-only virtual nodes and Kueue's quick-start queues."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from phalanx.auth import Principal
from phalanx.dialects.kueue.jobs import JOB_KINDS, KubeJob, convert_job
from phalanx.model import JobState
from phalanx.server import RunningServer, start_server
from phalanx.store import JobRow
from tests.shared import needs_shared, shared_path

UPSTREAM = shared_path("examples", "kueue-upstream")
SEED = shared_path("examples", "seed")
needs_upstream = needs_shared("examples", "kueue-upstream")
needs_seed = needs_shared("examples", "seed")

NODES = """
apiVersion: v1
kind: Node
metadata: {name: cpu-0, labels: {kubernetes.io/hostname: cpu-0}}
status: {capacity: {cpu: "16", memory: 64Gi}}
---
apiVersion: v1
kind: Node
metadata: {name: cpu-1, labels: {kubernetes.io/hostname: cpu-1}}
status: {capacity: {cpu: "16", memory: 64Gi}}
"""

QUEUES = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default-flavor}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: cluster-queue}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: default-flavor
      resources:
      - {name: cpu, nominalQuota: 32}
      - {name: memory, nominalQuota: 128Gi}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {namespace: default, name: user-queue}
spec: {clusterQueue: cluster-queue}
"""

ADMIN = Principal(user="admin", tenants=frozenset(), admin=True)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    state = tmp_path_factory.mktemp("state")
    config = state / "config"
    config.mkdir()
    (config / "nodes.yaml").write_text(NODES)
    (config / "queues.yaml").write_text(QUEUES)
    running = start_server(state / "phalanx", port=0, configs=[config], container_runtime="host")
    try:
        yield running
    finally:
        running.stop()


def kube_jobs(text: str) -> list[KubeJob]:
    """The job documents of a YAML text, converted as the server converts them."""
    jobs = []
    for doc in yaml.safe_load_all(text):
        if doc is None:
            continue
        kind = JOB_KINDS[(doc["apiVersion"], doc["kind"])]
        jobs.append(convert_job(kind, doc))
    return jobs


def apply(server: RunningServer, objects: list[Any]) -> list[tuple[str, str, str]]:
    return server.plane.apply(ADMIN, objects)


def job_row(server: RunningServer, kind: str, namespace: str, name: str) -> JobRow:
    for row in server.plane.store.list_jobs(names=[name], tenants=[namespace]):
        kube = (row.submission.get("run") or {}).get("kube") or {}
        if kube.get("kind") == kind:
            return row
    raise AssertionError(f"no job for {kind} {namespace}/{name}")


def wait_finished(server: RunningServer, job_id: int, timeout: float = 60.0) -> JobRow:
    deadline = time.monotonic() + timeout
    while True:
        row = server.plane.store.get_job(job_id)
        assert row is not None
        if JobState(row.state).finished:
            return row
        if time.monotonic() > deadline:
            raise AssertionError(
                f"job {job_id} did not finish: {row.state} {row.reason} {row.message}"
            )
        time.sleep(0.1)
