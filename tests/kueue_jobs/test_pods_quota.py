"""A ClusterQueue covering Kueue's ``pods`` resource, on a live server: 5 pods of quota
admit one 3-pod Job and keep the next waiting, naming pods."""

from __future__ import annotations

import time
from pathlib import Path

import yaml

from phalanx.auth import ADMIN
from phalanx.client import Client
from phalanx.server import start_server
from tests.kueue_jobs.conftest import apply, job_row, kube_jobs

CLUSTER = """
apiVersion: v1
kind: Node
metadata: {name: c1}
status: {capacity: {cpu: "64", memory: 512Gi}}
---
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
  - coveredResources: [cpu, memory, pods]
    flavors:
    - name: default-flavor
      resources:
      - {name: cpu, nominalQuota: 64}
      - {name: memory, nominalQuota: 512Gi}
      - {name: pods, nominalQuota: 5}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {namespace: default, name: user-queue}
spec: {clusterQueue: cluster-queue}
"""


def _job(name: str, pods: int) -> dict[str, object]:
    container = {"name": "c", "image": "busybox", "command": ["sleep", "30"]}
    container["resources"] = {"requests": {"cpu": "1"}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {"kueue.x-k8s.io/queue-name": "user-queue"},
        },
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
        },
    }


def test_a_five_pod_quota_admits_three_pods_and_keeps_three_waiting(tmp_path: Path) -> None:
    config = tmp_path / "cluster.yaml"
    config.write_text(CLUSTER)
    server = start_server(
        tmp_path / "state", port=0, configs=[config], preset="kueue", container_runtime="host"
    )
    try:
        apply(server, kube_jobs(yaml.safe_dump(_job("a", 3))))
        apply(server, kube_jobs(yaml.safe_dump(_job("b", 3))))
        deadline = time.monotonic() + 20
        while True:
            a = job_row(server, "Job", "default", "a")
            b = job_row(server, "Job", "default", "b")
            if a.state == "RUNNING" and b.reason == "InsufficientQuota":
                break
            assert time.monotonic() < deadline, (a.state, b.state, b.reason, b.message)
            time.sleep(0.1)
        assert b.state == "PENDING" and "pods" in b.message
        # Kueue v0.19's structured reason beside phalanx's sentence.
        with Client(server.url, server.admin_token) as client:
            [workload] = [
                w
                for w in client.get_objects("workloads")
                if w["metadata"]["name"].startswith("job-b-")
            ]
        conditions = {c["type"]: c for c in workload["status"]["conditions"]}
        reserved = conditions["QuotaReserved"]
        assert (reserved["status"], reserved["reason"]) == ("False", "WaitingForQuota")
        assert reserved["message"] == b.message
        for row in (a, b):
            server.plane.cancel(ADMIN, row.id)
    finally:
        server.stop()
