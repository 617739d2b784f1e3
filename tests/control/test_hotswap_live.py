"""Hot swap on a live server: a failed node of a topology-placed gang is replaced by a
healthy node of its rack, or (FailFast) the gang is evicted and requeued.

Two racks of three 8-GPU nodes, a ResourceFlavor with a rack Topology. A 2-node
gang runs in one rack — a Kueue ``batch/v1`` Job with
``kueue.x-k8s.io/podset-required-topology``, and an ``sbatch -N2 --requeue`` job
placed by phalanx's own topology placement. One of its nodes is set down
(``scontrol update State=DOWN``): the job keeps its admission and restarts at once
on its healthy node plus the free node of the same rack; its record says which
node replaced which (a ``NodeReplaced`` event, the Workload's new admission,
``sacct -D`` with the failed run). When the rack has no free node the job is
requeued with reason ``NodeFailures`` and the reason names the failed node.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from phalanx.client import Client
from phalanx.server import RunningServer, start_server
from tests.control.test_expedite_live import _sbatch, _wait
from tests.control.test_gang_reservation_live import _cli

RACK = "example.com/rack"


def _node(name: str, rack: str) -> str:
    return f"""apiVersion: v1
kind: Node
metadata: {{name: {name}, labels: {{pool: gpu, {RACK}: {rack}}}}}
status: {{capacity: {{nvidia.com/gpu: 8, cpu: "64", memory: 512Gi}}}}
"""


CLUSTER = "---\n".join(
    [
        *(_node(f"r{r}n{n}", f"r{r}") for r in range(2) for n in range(3)),
        f"""apiVersion: kueue.x-k8s.io/v1beta2
kind: Topology
metadata: {{name: fabric}}
spec:
  levels:
  - nodeLabel: {RACK}
  - nodeLabel: kubernetes.io/hostname
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {{name: gpu}}
spec: {{nodeLabels: {{pool: gpu}}, topologyName: fabric}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: cq}}
spec:
  namespaceSelector: {{}}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu, cpu, memory]
    flavors:
    - name: gpu
      resources:
      - {{name: nvidia.com/gpu, nominalQuota: 48}}
      - {{name: cpu, nominalQuota: 384}}
      - {{name: memory, nominalQuota: 3072Gi}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{namespace: t, name: default}}
spec: {{clusterQueue: cq}}
---
apiVersion: phalanx.io/v1
kind: Tenant
metadata: {{name: t}}
""",
    ]
)

TAS_JOB = f"""apiVersion: batch/v1
kind: Job
metadata:
  name: trainer
  namespace: t
  labels: {{kueue.x-k8s.io/queue-name: default}}
spec:
  parallelism: 2
  completions: 2
  template:
    metadata:
      annotations: {{kueue.x-k8s.io/podset-required-topology: {RACK}}}
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: busybox
        command: ["sleep", "600"]
        resources:
          requests: {{nvidia.com/gpu: 8, cpu: "1", memory: 1Gi}}
"""


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[RunningServer]:
    config = tmp_path / "cluster.yaml"
    config.write_text(CLUSTER)
    running = start_server(tmp_path / "state", port=0, configs=[config], container_runtime="host")
    try:
        yield running
    finally:
        running.stop()


def _filler(node: str) -> dict[str, Any]:
    return {
        "name": f"filler-{node}",
        "tenant": "t",
        "podSets": [
            {
                "name": "main",
                "count": 1,
                "requests": {"nvidia.com/gpu": 8, "cpu": "1", "memory": "1Gi"},
                "nodeNames": [node],
            }
        ],
        "run": {"command": ["sleep", "600"], "workingDir": "/tmp"},
    }


def _rack(node: str) -> str:
    return node[:2]


def _swapped(client: Client, job_id: int, nodes: list[str]) -> tuple[str, str, dict[str, Any]]:
    """Set one of the job's nodes down; the job restarts on the other plus a node of
    its rack: (failed, replacement, the job)."""
    lost, healthy = nodes
    spare = next(name for name in (f"{_rack(lost)}n{i}" for i in range(3)) if name not in nodes)
    before = time.monotonic()
    client.update_nodes([lost], "down", "lost in the test")
    deadline = time.monotonic() + 15
    while True:
        view = client.get(job_id)
        if view["state"] == "RUNNING" and lost not in view["nodes"]:
            break
        assert time.monotonic() < deadline, view
        time.sleep(0.05)
    print(f"hot swap: running again {time.monotonic() - before:.2f} s after the node went down")
    assert sorted(view["nodes"]) == sorted([healthy, spare])
    return lost, spare, view


def test_a_kueue_tas_job_gets_a_replacement_node_in_its_rack(server: RunningServer) -> None:
    with Client(server.url, server.admin_token) as client:
        client.apply(TAS_JOB)
        [row] = [j for j in client.jobs() if j["name"] == "trainer"]
        job_id = int(row["id"])
        nodes = _wait(client, job_id, {"RUNNING"})["nodes"]
        assert len(nodes) == 2 and _rack(nodes[0]) == _rack(nodes[1])
        lost, spare, view = _swapped(client, job_id, nodes)
        assert view["attempt"] == 2
        events = client.events(job_id)
        [swap] = [e for e in events if e["kind"] == "NodeReplaced"]
        assert swap["data"]["replaced"] == {lost: spare}
        assert swap["data"]["domains"] == [f"{RACK}={_rack(lost)}"]
        assert swap["message"] == f"{lost} replaced by {spare} in {RACK}={_rack(lost)}"
        assert not [e for e in events if e["kind"] == "Requeued"]
        admitted = [e for e in events if e["kind"] == "Admitted"]
        assert admitted[-1]["data"]["replaced"] == {lost: spare}
        # The Workload shows the new placement and is still admitted.
        workload = next(
            w
            for w in client.get_objects("workloads")
            if w["metadata"]["name"].startswith("job-trainer")
        )
        conditions = {c["type"]: c["status"] for c in workload["status"]["conditions"]}
        assert conditions["Admitted"] == "True"
        assert lost not in str(workload["status"]["admission"])
        assert spare in str(workload["status"]["admission"])
        client.cancel(job_id)


def test_an_sbatch_gang_in_a_topology_is_swapped_and_sacct_shows_the_failed_run(
    server: RunningServer,
) -> None:
    with Client(server.url, server.admin_token) as client:
        job_id = _sbatch(
            server.url,
            server.admin_token,
            "--requeue", "-A", "t", "-p", "cq", "-N", "2", "--ntasks-per-node", "1",
            "--gpus-per-node", "8", "--wrap", "sleep 600",
        )  # fmt: skip
        nodes = _wait(client, job_id, {"RUNNING"})["nodes"]
        assert _rack(nodes[0]) == _rack(nodes[1])
        _swapped(client, job_id, nodes)
        runs = _cli(server, "sacct", "-D", "-j", str(job_id), "-X", "-n", "-P", "-o", "JobID,State")
        assert runs.split() == [f"{job_id}|NODE_FAIL", f"{job_id}|RUNNING"], runs
        client.cancel(job_id)


def test_no_free_node_in_the_rack_fails_fast_with_the_reason(server: RunningServer) -> None:
    with Client(server.url, server.admin_token) as client:
        client.apply(TAS_JOB)
        [row] = [j for j in client.jobs() if j["name"] == "trainer"]
        job_id = int(row["id"])
        nodes = _wait(client, job_id, {"RUNNING"})["nodes"]
        rack = _rack(nodes[0])
        # The third node of its rack is busy; the other rack is free (not its domain).
        spare = next(f"{rack}n{i}" for i in range(3) if f"{rack}n{i}" not in nodes)
        filler = client.submit(_filler(spare))
        _wait(client, filler, {"RUNNING"})
        client.update_nodes([nodes[0]], "down", "lost in the test")
        view = _wait(client, job_id, {"PENDING", "RUNNING", "ADMITTED"}, timeout=15)
        deadline = time.monotonic() + 15
        while not [e for e in client.events(job_id) if e["kind"] == "Requeued"]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        [requeued] = [e for e in client.events(job_id) if e["kind"] == "Requeued"]
        assert requeued["reason"] == "NodeFailures"
        assert nodes[0] in requeued["message"] and f"{RACK}={rack}" in requeued["message"]
        assert not [e for e in client.events(job_id) if e["kind"] == "NodeReplaced"]
        # Requeued, it is admitted again wherever two nodes of one rack are free.
        view = _wait(client, job_id, {"RUNNING"}, timeout=15)
        assert _rack(view["nodes"][0]) == _rack(view["nodes"][1]) != rack
        client.cancel(job_id)
        client.cancel(filler)
