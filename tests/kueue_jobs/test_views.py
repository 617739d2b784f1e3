"""Workloads and Kubernetes job objects through the API and ``phalanx get``, after a preemption."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from phalanx.client import Client
from phalanx.errors import PhalanxError
from phalanx.model import JobState
from phalanx.server import RunningServer, start_server
from tests.kueue_jobs.conftest import NODES

SETUP = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default-flavor}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: cq}
spec:
  preemption: {withinClusterQueue: LowerPriority}
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: default-flavor
      resources:
      - {name: cpu, nominalQuota: 4}
      - {name: memory, nominalQuota: 8Gi}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {namespace: default, name: user-queue}
spec: {clusterQueue: cq}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: low}
value: 10
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: high}
value: 1000
"""


def _job(name: str, priority: str, seconds: int) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {
                "kueue.x-k8s.io/queue-name": "user-queue",
                "kueue.x-k8s.io/priority-class": priority,
            },
        },
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox",
                            "command": ["sleep", str(seconds)],
                            "resources": {"requests": {"cpu": "2", "memory": "1Gi"}},
                        }
                    ],
                }
            },
        },
    }


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    state = tmp_path_factory.mktemp("views")
    (state / "nodes.yaml").write_text(NODES)
    running = start_server(
        state / "phalanx", port=0, configs=[state / "nodes.yaml"], container_runtime="host"
    )
    try:
        yield running
    finally:
        running.stop()


def _wait(client: Client, job_id: int, check: Any, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        job = client.get(job_id)
        if check(job):
            return job
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id}: {job['state']} {job.get('reason')}")
        time.sleep(0.1)


def _conditions(workload: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in workload["status"]["conditions"]}


def test_preempted_workload_conditions_and_job_status(server: RunningServer) -> None:
    with Client(server.url, server.admin_token, state_dir=server.state_dir) as client:
        client.apply(SETUP, "setup.yaml")
        results = client.apply([_job("low", "low", 300)], "low.yaml")
        assert results == [{"kind": "Job", "name": "default/low", "outcome": "created"}]
        [low_id] = [j["id"] for j in client.jobs() if j["name"] == "low"]
        _wait(client, low_id, lambda j: j["state"] == JobState.RUNNING.value)
        workload = client.get_object("workloads", "default/" + _workload_name(client, low_id))
        conds = _conditions(workload)
        assert conds["QuotaReserved"]["status"] == "True"
        assert conds["QuotaReserved"]["message"] == "Quota reserved in ClusterQueue cq"
        assert conds["PodsReady"]["reason"] == "Started"
        [assignment] = workload["status"]["admission"]["podSetAssignments"]
        assert assignment == {
            "name": "main",
            "flavors": {"cpu": "default-flavor", "memory": "default-flavor"},
            "resourceUsage": {"cpu": "4", "memory": "2Gi"},
            "count": 2,
        }
        job = client.get_object("jobs.batch", "low")
        assert job["status"]["active"] == 2 and job["spec"]["suspend"] is False

        client.apply([_job("high", "high", 1)], "high.yaml")
        [high_id] = [j["id"] for j in client.jobs() if j["name"] == "high"]
        _wait(client, high_id, lambda j: j["state"] == JobState.COMPLETED.value)
        low = client.get(low_id)
        assert low["state"] in (JobState.PENDING.value, JobState.ADMITTED.value, "RUNNING")
        low_wl = client.get_object("workloads", _workload_name(client, low_id))
        conds = _conditions(low_wl)
        assert low_wl["status"]["requeueState"] == {"count": 1}
        assert conds["Requeued"]["reason"] == "Preempted"
        # Admitted again once the high-priority job finished: Kueue turns Evicted and
        # Preempted False with reason QuotaReserved and "Previously: ..." messages.
        for kind in ("Evicted", "Preempted"):
            cond = conds[kind]
            if cond["status"] == "True":
                assert (
                    cond["reason"] == {"Evicted": "Preempted", "Preempted": "InClusterQueue"}[kind]
                )
            else:
                assert cond["reason"] == "QuotaReserved"
                assert cond["message"].startswith("Previously: Preempted to accommodate")
                assert "prioritization in the ClusterQueue" in cond["message"]
        high_wl = client.get_object("wl", _workload_name(client, high_id))
        assert _conditions(high_wl)["Finished"]["reason"] == "Succeeded"
        done = client.get_object("jobs.batch", "default/high")
        assert [c["type"] for c in done["status"]["conditions"]] == ["Complete"]
        assert done["status"]["succeeded"] == 2
        deleted = client.delete_object("jobs.batch", "low")
        assert deleted == {"kind": "Job", "name": "default/low", "outcome": "deleted"}
        _wait(client, low_id, lambda j: j["state"] == JobState.CANCELLED.value)


def _workload_name(client: Client, job_id: int) -> str:
    for item in client.get_objects("workloads"):
        if item["metadata"]["labels"]["phalanx.io/job-id"] == str(job_id):
            return str(item["metadata"]["name"])
    raise AssertionError(f"no workload for job {job_id}")


def _phalanx(server: RunningServer, *args: str) -> str:
    env = {**os.environ, "PHALANX_URL": server.url, "PHALANX_TOKEN": server.admin_token}
    result = subprocess.run(
        [sys.executable, "-m", "phalanx.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_cli_get_workloads_and_jobs(server: RunningServer, tmp_path: Path) -> None:
    text = _phalanx(server, "get", "workloads")
    header = text.splitlines()[0].split()
    assert header == ["NAME", "QUEUE", "RESERVED", "IN", "ADMITTED", "FINISHED", "AGE"]
    assert any(line.startswith("job-high-") for line in text.splitlines())
    docs = list(yaml.safe_load_all(_phalanx(server, "get", "kwl", "-o", "yaml")))
    assert {d["kind"] for d in docs} == {"Workload"}
    assert docs[0]["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    table = _phalanx(server, "get", "jobs.batch").splitlines()
    assert table[0].split() == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
    high = next(line.split() for line in table if line.startswith("high "))
    assert high[1:3] == ["Complete", "2/2"]
    job = json.loads(_phalanx(server, "get", "jobs.batch", "high", "-o", "json"))
    assert job["kind"] == "Job" and job["status"]["succeeded"] == 2


def test_a_user_sees_only_the_workloads_of_its_tenants(server: RunningServer) -> None:
    with Client(server.url, server.admin_token, state_dir=server.state_dir) as admin:
        assert admin.get_objects("workloads")
        token = admin.create_token("carol", ["elsewhere"], name="carol")["token"]
    with Client(server.url, token, state_dir=server.state_dir) as carol:
        assert carol.get_objects("workloads") == []
        assert carol.get_objects("jobs.batch") == []
        with pytest.raises(PhalanxError, match="not found"):
            carol.get_object("jobs.batch", "default/high")
