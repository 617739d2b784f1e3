"""waitForPodsReady end to end: pods still in their init containers time out, are requeued
with backoff and, past backoffLimitCount, deactivated; pods that start are PodsReady."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from phalanx.api.kube import workload
from phalanx.server import RunningServer, start_server
from tests.kueue_jobs.conftest import NODES, QUEUES, apply, job_row, kube_jobs, wait_finished

CONFIGURATION = """
apiVersion: config.kueue.x-k8s.io/v1beta1
kind: Configuration
waitForPodsReady:
  enable: true
  timeout: 2s
  requeuingStrategy: {timestamp: Eviction, backoffLimitCount: 1, backoffBaseSeconds: 1}
"""

JOB = """
apiVersion: batch/v1
kind: Job
metadata:
  name: NAME
  namespace: default
  labels: {kueue.x-k8s.io/queue-name: user-queue}
spec:
  parallelism: 2
  template:
    spec:
      initContainers:
      - {name: warm-up, image: busybox, command: [sleep, "SECONDS"]}
      containers:
      - name: main
        image: busybox
        command: ["true"]
        resources: {requests: {cpu: "1"}}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    state = tmp_path_factory.mktemp("ready")
    config = state / "config"
    config.mkdir()
    for name, text in (("nodes", NODES), ("queues", QUEUES), ("kueue", CONFIGURATION)):
        (config / f"{name}.yaml").write_text(text)
    running = start_server(
        state / "phalanx", port=0, configs=[config], preset="kueue", container_runtime="host"
    )
    try:
        yield running
    finally:
        running.stop()


def test_pods_that_never_get_ready_are_deactivated(server: RunningServer) -> None:
    apply(server, kube_jobs(JOB.replace("NAME", "stuck").replace("SECONDS", "60")))
    row = wait_finished(server, job_row(server, "Job", "default", "stuck").id)
    assert (row.state, row.reason) == ("FAILED", "RequeuingLimitExceeded")
    events = server.plane.store.job_events(row.id)
    evictions = [e.reason for e in events if e.kind == "Evicting"]
    assert evictions == ["PodsReadyTimeout", "PodsReadyTimeout"]
    assert [e.kind for e in events].count("Started") == 0
    conds = {c["type"]: c for c in workload(row, events)["status"]["conditions"]}
    assert conds["Evicted"]["reason"] == "Deactivated"
    assert conds["PodsReady"]["status"] == "False"
    assert workload(row, events)["spec"]["active"] is False


def test_pods_that_start_in_time_are_ready(server: RunningServer, tmp_path: Path) -> None:
    apply(server, kube_jobs(JOB.replace("NAME", "quick").replace("SECONDS", "0.5")))
    row = wait_finished(server, job_row(server, "Job", "default", "quick").id)
    assert row.state == "COMPLETED", row.message
    events = server.plane.store.job_events(row.id)
    assert not [e for e in events if e.kind == "Evicting"]
    conds = {c["type"]: c for c in workload(row, events)["status"]["conditions"]}
    assert conds["PodsReady"]["reason"] == "Started"
    assert conds["Finished"]["reason"] == "Succeeded"
