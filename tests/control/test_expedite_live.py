"""``sbatch --requeue=expedite`` on a live server: a 2-node gang whose node goes down
restarts on its healthy node plus a replacement, ahead of 50 waiting jobs.

Four 8-GPU nodes and one ClusterQueue of 32 GPUs. The gang (2 x 8 GPUs, submitted
with ``sbatch --requeue=expedite``) and two 1-node fillers run; 50 one-node jobs
of a higher priority wait. One of the gang's nodes is marked down (``scontrol
update State=DOWN``, as the admin API does it): the gang is killed and requeued
expedited. Its healthy node is then free, but held for it: none of the 50 may
start there. A filler is cancelled: the gang, not one of the 50, gets that node
as its replacement and restarts within seconds on its healthy node plus it.

The same holds across a crash: the server is killed (SIGKILL) between the
requeue and the restart and started again on its store; the healthy node is
still held for the gang, which restarts there when the replacement comes free.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from phalanx.client import Client
from phalanx.control.recovery import expedited_requeue
from phalanx.server import RunningServer, start_server
from phalanx.store import JobEventRow
from tests.reliability.server import Server, start


def _node(name: str) -> str:
    return f"""apiVersion: v1
kind: Node
metadata: {{name: {name}}}
status: {{capacity: {{nvidia.com/gpu: 8, cpu: "64", memory: 512Gi}}}}
"""


CLUSTER = "---\n".join(
    [
        *(_node(f"n{i}") for i in range(4)),
        """apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: gpu}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu, cpu, memory]
    flavors:
    - name: gpu
      resources:
      - {name: nvidia.com/gpu, nominalQuota: 32}
      - {name: cpu, nominalQuota: 256}
      - {name: memory, nominalQuota: 2048Gi}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {namespace: t, name: default}
spec: {clusterQueue: cq}
---
apiVersion: phalanx.io/v1
kind: Tenant
metadata: {name: t}
""",
    ]
)


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[RunningServer]:
    config = tmp_path / "cluster.yaml"
    config.write_text(CLUSTER)
    running = start_server(tmp_path / "state", port=0, configs=[config])
    try:
        yield running
    finally:
        running.stop()


def _job(name: str, priority: str | None = None) -> dict[str, Any]:
    job: dict[str, Any] = {
        "name": name,
        "tenant": "t",
        "podSets": [
            {
                "name": "main",
                "count": 1,
                "requests": {"nvidia.com/gpu": 8, "cpu": "1", "memory": "1Gi"},
            }
        ],
        "run": {"command": ["sleep", "600"], "workingDir": "/tmp"},
    }
    if priority:
        job["priorityClass"] = priority
    return job


def _wait(client: Client, job_id: int, states: set[str], timeout: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        job = client.get(job_id)
        if job["state"] in states:
            return job
        assert time.monotonic() < deadline, f"job {job_id} is {job['state']}, not {states}"
        time.sleep(0.05)


def _sbatch(url: str, token: str, *args: str) -> int:
    env = {**os.environ, "PHALANX_URL": url, "PHALANX_TOKEN": token}
    done = subprocess.run(
        [sys.executable, "-m", "phalanx.cli.main", "sbatch", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd="/tmp",
    )
    match = re.fullmatch(r"Submitted batch job (\d+)\n", done.stdout)
    assert match, done.stdout + done.stderr
    return int(match.group(1))


def test_an_expedited_gang_restarts_on_its_healthy_node_plus_a_replacement_first(
    server: RunningServer,
) -> None:
    with Client(server.url, server.admin_token) as client:
        gang = _sbatch(
            server.url,
            server.admin_token,
            "--requeue=expedite", "-A", "t", "-p", "cq", "-N", "2", "--ntasks-per-node", "1",
            "--gpus-per-node", "8", "--wrap", "sleep 600",
        )  # fmt: skip
        nodes = sorted(_wait(client, gang, {"RUNNING"})["nodes"])
        assert len(nodes) == 2
        fillers = [client.submit(_job(f"filler{i}")) for i in range(2)]
        for job_id in fillers:
            _wait(client, job_id, {"RUNNING"})
        waiting = client.submit_many([_job(f"w{i}", "high") for i in range(50)])
        lost, healthy = nodes
        client.update_nodes([lost], "down", "lost in the test")
        view = _wait(client, gang, {"PENDING"})
        assert view["state"] == "PENDING"
        # The healthy node is free but held for the gang: none of the 50 starts there.
        time.sleep(1.5)
        running = [j for j in waiting if client.get(j)["state"] != "PENDING"]
        assert running == [], running
        assert client.get(gang)["state"] == "PENDING"
        # A replacement comes free: the gang, not the 50 higher-priority jobs, gets it.
        replacement = client.get(fillers[0])["nodes"][0]
        freed = time.monotonic()
        client.cancel(fillers[0])
        view = _wait(client, gang, {"RUNNING"}, timeout=10)
        took = time.monotonic() - freed
        assert sorted(view["nodes"]) == sorted([healthy, replacement]), view["nodes"]
        print(f"expedited restart {took:.2f} s after the replacement came free")
        assert took < 5.0, took
        assert all(client.get(j)["state"] == "PENDING" for j in waiting)
        [requeued] = [e for e in client.events(gang) if e["kind"] == "Requeued"]
        assert requeued["reason"] == "NodeDown"
        assert requeued["data"]["expedite"] == {"held": [healthy]}
        for job_id in [gang, fillers[1], *waiting]:
            client.cancel(job_id)


def test_the_hold_survives_a_kill_9_of_the_server(tmp_path: Path) -> None:
    config = tmp_path / "cluster.yaml"
    config.write_text(CLUSTER)
    state = tmp_path / "state"
    server: Server = start(state, config)
    try:
        with Client(server.url, server.token) as client:
            gang = _sbatch(
                server.url,
                server.token,
                "--requeue=expedite", "-A", "t", "-p", "cq", "-N", "2",
                "--ntasks-per-node", "1", "--gpus-per-node", "8", "--wrap", "sleep 600",
            )  # fmt: skip
            nodes = sorted(_wait(client, gang, {"RUNNING"})["nodes"])
            fillers = [client.submit(_job(f"filler{i}")) for i in range(2)]
            for job_id in fillers:
                _wait(client, job_id, {"RUNNING"})
            waiting = client.submit_many([_job(f"w{i}", "high") for i in range(10)])
            lost, healthy = nodes
            client.update_nodes([lost], "down", "lost in the test")
            _wait(client, gang, {"PENDING"})
            [requeued] = [e for e in client.events(gang) if e["kind"] == "Requeued"]
            assert requeued["data"]["expedite"] == {"held": [healthy]}
        server.kill()
        # Started again on its store alone (the file would set the lost node up again).
        server = start(state)
        with Client(server.url, server.token) as client:
            # The healthy node is free and still held: none of the 10 starts there.
            time.sleep(1.5)
            assert [j for j in waiting if client.get(j)["state"] != "PENDING"] == []
            assert client.get(gang)["state"] == "PENDING"
            replacement = client.get(fillers[0])["nodes"][0]
            client.cancel(fillers[0])
            view = _wait(client, gang, {"RUNNING"}, timeout=10)
            assert sorted(view["nodes"]) == sorted([healthy, replacement]), view["nodes"]
            assert all(client.get(j)["state"] == "PENDING" for j in waiting)
            for job_id in [gang, fillers[1], *waiting]:
                client.cancel(job_id)
            for job_id in [gang, fillers[1]]:
                _wait(client, job_id, {"CANCELLED"})
    finally:
        server.stop()


def _event(kind: str, time: float, **data: Any) -> JobEventRow:
    return JobEventRow(id=int(time), job_id=1, time=time, kind=kind, data=data)


def test_which_requeue_a_restart_expedites_again() -> None:
    expedited = _event("Requeued", 5.0, attempt=1, expedite={"held": ["n1"]})
    plain = _event("Requeued", 9.0, attempt=2)
    admitted = _event("Admitted", 7.0, attempt=2)
    held = _event("Held", 6.0)
    assert expedited_requeue([_event("Admitted", 1.0), expedited]) == (("n1",), 5.0)
    assert expedited_requeue([expedited, _event("Released", 6.0)]) == (("n1",), 5.0)
    # Admitted since, requeued since without it, or held since (out of the engine).
    assert expedited_requeue([expedited, admitted]) is None
    assert expedited_requeue([expedited, admitted, plain]) is None
    assert expedited_requeue([expedited, held]) is None
    assert expedited_requeue([]) is None
