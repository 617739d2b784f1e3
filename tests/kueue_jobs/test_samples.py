"""Kueue's documentation samples and the seed job, applied to a live server after their setup."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from phalanx.dialects.kueue import load_text
from phalanx.runtime.local import LocalRuntime
from phalanx.server import RunningServer
from tests.kueue_jobs.conftest import (
    SEED,
    UPSTREAM,
    apply,
    job_row,
    kube_jobs,
    needs_seed,
    needs_upstream,
    wait_finished,
)

PYTORCH_RENDEZVOUS = """
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: rendezvous
  namespace: default
  labels: {kueue.x-k8s.io/queue-name: user-queue}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          containers:
          - name: pytorch
            image: pytorch/pytorch
            command: ["PYTHON", "SCRIPT", "OUT"]
            ports: [{name: pytorchjob-port, containerPort: PORT}]
            resources: {requests: {cpu: "1"}}
    Worker:
      replicas: 3
      template:
        spec:
          containers:
          - name: pytorch
            image: pytorch/pytorch
            command: ["PYTHON", "SCRIPT", "OUT"]
            resources: {requests: {cpu: "1"}}
"""

RENDEZVOUS_SCRIPT = """
import os, socket, sys, time
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
if rank == 0:
    server = socket.create_server(("127.0.0.1", port))
    seen = []
    for _ in range(world - 1):
        conn, _ = server.accept()
        seen.append(conn.recv(64).decode())
        conn.close()
    with open(sys.argv[1], "w") as fh:
        fh.write(" ".join(sorted(seen)))
else:
    for _ in range(300):
        try:
            with socket.create_connection((addr, port), timeout=1) as conn:
                conn.sendall(f"{rank}@{socket.gethostname()}".encode())
                break
        except OSError:
            time.sleep(0.05)
    else:
        sys.exit(f"rank {rank}: cannot reach {addr}:{port}")
"""


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_pytorchjob_ranks_rendezvous_over_tcp(server: RunningServer, tmp_path: Path) -> None:
    script = tmp_path / "rendezvous.py"
    script.write_text(RENDEZVOUS_SCRIPT)
    out = tmp_path / "seen"
    text = (
        PYTORCH_RENDEZVOUS.replace("PYTHON", sys.executable)
        .replace("SCRIPT", str(script))
        .replace("OUT", str(out))
        .replace("PORT", str(_free_port()))
    )
    apply(server, kube_jobs(text))
    row = wait_finished(server, job_row(server, "PyTorchJob", "default", "rendezvous").id)
    assert row.state == "COMPLETED", row.message
    ranks = out.read_text().split()
    assert [r.split("@")[0] for r in ranks] == ["1", "2", "3"]
    if "NSS_WRAPPER_HOSTS" in _task_env(server, row.id):
        assert [r.split("@")[1] for r in ranks] == [f"rendezvous-worker-{i}" for i in range(3)]


def _task_env(server: RunningServer, job_id: int) -> dict[str, str]:
    import json

    runtime = server.plane.runtime
    assert isinstance(runtime, LocalRuntime)
    launch = runtime.attempt_dir(job_id, 1) / "launch.json"
    return dict(json.loads(launch.read_text())["tasks"][0]["env"])


def _short(text: str) -> str:
    """The samples sleep for minutes: a second is enough to see them run."""
    text = re.sub(r'"sleep \d+"', '"sleep 1"', text)
    return re.sub(r"- 100s", "- 1s", text)


@pytest.mark.parametrize(
    ("setup", "sample", "kind"),
    [
        ("getting-started/quick-start-setup.yaml", "getting-started/quick-start-job.yaml", "Job"),
        ("getting-started/quick-start-setup.yaml", "jobs/sample-job.yaml", "Job"),
        ("getting-started/quick-start-setup.yaml", "jobs/sample-jobset.yaml", "JobSet"),
        ("admin/single-clusterqueue-setup.yaml", "jobs/sample-job.yaml", "Job"),
    ],
)
@needs_upstream
def test_upstream_sample_runs_to_completion(
    server: RunningServer, setup: str, sample: str, kind: str
) -> None:
    apply(server, load_text((UPSTREAM / setup).read_text(), setup))
    [job] = kube_jobs(_short((UPSTREAM / sample).read_text()))
    assert apply(server, [job]) == [(kind, f"default/{job.name}", "created")]
    row = wait_finished(server, job_row(server, kind, "default", job.name).id)
    assert row.state == "COMPLETED", (row.state, row.message)


@needs_upstream
def test_sample_without_command_fails_naming_the_field(server: RunningServer) -> None:
    setup = "getting-started/quick-start-setup.yaml"
    apply(server, load_text((UPSTREAM / setup).read_text(), setup))
    [job] = kube_jobs((UPSTREAM / "jobs/sample-job-partial-admission.yaml").read_text())
    apply(server, [job])
    row = wait_finished(server, job_row(server, "Job", "default", job.name).id)
    assert row.state == "FAILED"
    assert row.message.startswith("spec.template.spec.containers[0].command: required")
    assert "registry.k8s.io/e2e-test-images/agnhost:2.53" in row.message
    # Partially admitted: 9 of its 20 pods fit the ClusterQueue's 9 CPUs.
    assert row.assignment is not None and len(row.assignment["tasks"]) == 9


SEED_SETUP = """
apiVersion: v1
kind: Node
metadata: {name: h100-NUM, labels: {phalanx.io/flavor: h100-infiniband}}
status: {capacity: {nvidia.com/gpu: "8", rdma/infiniband: "1", cpu: "96", memory: 1000Gi}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: h100-infiniband}
spec: {nodeLabels: {phalanx.io/flavor: h100-infiniband}}
"""


@needs_seed
def test_seed_job_runs(server: RunningServer, tmp_path: Path) -> None:
    """The seed's // lines made # comments; its container has no command, so the test gives one.

    The seed job's resources include ``rdma/infiniband``, which the seed
    ClusterQueue does not cover: the corrected queues cover it.
    """
    nodes = "\n---\n".join(SEED_SETUP.split("---")[0].replace("NUM", str(i)) for i in range(2))
    queues = re.sub(r"^//.*$", "", (SEED / "kueue-queues.yaml").read_text(), flags=re.M)
    queues = queues.replace(
        'coveredResources: ["nvidia.com/gpu", "cpu", "memory"]',
        'coveredResources: ["nvidia.com/gpu", "cpu", "memory", "rdma/infiniband"]',
    ).replace(
        "              nominalQuota: 8192Gi",
        '              nominalQuota: 8192Gi\n            - name: "rdma/infiniband"\n'
        "              nominalQuota: 16",
    )
    flavor = SEED_SETUP.split("---")[1]
    apply(server, load_text(nodes + "\n---\n" + flavor + "\n---\n" + queues, "seed-setup"))
    text = re.sub(r"^//.*$", "", (SEED / "kueue-job.yaml").read_text(), flags=re.M)
    text = text.replace("// Handled", "# Handled")
    marker = tmp_path / "ran"
    text = text.replace(
        "        env:\n",
        f'        command: ["/bin/sh", "-c", "echo $NCCL_DEBUG $CUDA_VISIBLE_DEVICES >>{marker}"]\n'
        "        env:\n",
    )
    [job] = kube_jobs(text)
    apply(server, [job])
    row = wait_finished(server, job_row(server, "Job", "nlp-research", job.name).id)
    assert row.state == "COMPLETED", (row.state, row.reason, row.message)
    assert sorted(marker.read_text().splitlines()) == ["INFO 0,1,2,3,4,5,6,7"] * 2


@needs_upstream
def test_rayjob_head_runs_the_entrypoint_and_workers_wait(
    server: RunningServer, tmp_path: Path
) -> None:
    setup = "getting-started/quick-start-setup.yaml"
    apply(server, load_text((UPSTREAM / setup).read_text(), setup))
    text = (UPSTREAM / "jobs/ray-job-sample.yaml").read_text()
    marker = tmp_path / "entrypoint"
    text = text.replace(
        "entrypoint: python /home/ray/samples/sample_code.py",
        f"entrypoint: sleep 1; echo ran on $HOSTNAME > {marker}",
    )
    [job] = kube_jobs(text)
    apply(server, [job])
    row = wait_finished(server, job_row(server, "RayJob", "default", "rayjob-sample").id)
    assert row.state == "COMPLETED", row.message
    assert marker.read_text() == "ran on rayjob-sample-head\n"
    assert row.assignment is not None and len(row.assignment["tasks"]) == 2
