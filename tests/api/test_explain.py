"""``GET /api/v1/jobs/{id}/explain`` against a real server with the example cluster."""

from __future__ import annotations

import time

import httpx
import pytest

from phalanx.errors import NotFound
from tests.api.server import Cluster, job

GPU = "nvidia.com/gpu"


def gpu_job(command: list[str], gpus: int, nodes: int = 1, **fields: object) -> dict[str, object]:
    """``nodes`` tasks of ``gpus / nodes`` GPUs each, one per node."""
    body = job(command, requests={GPU: gpus // nodes, "cpu": "1"}, **fields)
    pod_set = body["podSets"][0]  # type: ignore[index]
    pod_set["count"] = nodes
    pod_set["tasksPerNode"] = 1
    return body


def wait_for(cluster: Cluster, job_id: int, state: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    with cluster.admin as c:
        while c.get(job_id)["state"] != state:
            assert time.monotonic() < deadline, f"job {job_id} never reached {state}"
            time.sleep(0.05)


def test_a_job_larger_than_its_queue_could_ever_get(cluster: Cluster) -> None:
    with cluster.alice as alice:
        job_id = alice.submit(gpu_job(["true"], gpus=32, nodes=4))
        answer = alice.explain(job_id)
    assert answer["id"] == job_id and answer["state"] == "PENDING"
    assert answer["scheduler"] == "pending"
    assert answer["cluster_queue"] == "team-a"
    assert answer["reason"]["code"] == "ExceedsMaxQuota"
    assert answer["position"]["queue"]["rank"] >= 1
    assert answer["priority"]["total"] is not None
    # team-a may use its 16 H100s plus a borrowingLimit of 8: never 32.
    h100 = next(
        q for q in answer["quota"] if q["flavor"] == "h100-infiniband" and q["resource"] == GPU
    )
    assert (h100["requested"], h100["nominal"], h100["potential"]) == (32, 16, 24)
    assert h100["never_fits"] is True
    assert answer["estimated_start"] is None
    text = answer["text"]
    assert text.startswith(f"Job {job_id} is pending: ")
    assert "in ClusterQueue team-a" in text
    assert "It needs 32 nvidia.com/gpu in flavor h100-infiniband" in text
    assert "the 24 ClusterQueue team-a could ever get" in text
    with cluster.alice as alice:
        alice.cancel(job_id)
        ended = alice.explain(job_id)
    assert ended["state"] == "CANCELLED" and ended["scheduler"] is None
    assert ended["text"].startswith(f"Job {job_id} ended CANCELLED")
    assert "It never started." in ended["text"]
    assert [e["kind"] for e in ended["history"]][-1] == "Cancelled"


def test_a_running_job_says_where_it_runs(cluster: Cluster) -> None:
    with cluster.alice as alice:
        job_id = alice.submit(gpu_job(["sleep", "30"], gpus=8))
        wait_for(cluster, job_id, "RUNNING")
        answer = alice.explain(job_id)
        alice.cancel(job_id)
    assert answer["scheduler"] == "admitted"
    admission = answer["admission"]
    assert admission["cluster_queue"] == "team-a"
    assert admission["flavors"] == {"main": {"cpu": "h100-infiniband", GPU: "h100-infiniband"}}
    assert admission["borrowing"] is False
    assert admission["nodes"] == answer["nodes"]
    assert answer["last_admission"]["cluster_queue"] == "team-a"
    [node] = answer["nodes"]
    assert answer["text"].startswith(f"Job {job_id} is running in ClusterQueue team-a on {node}")
    assert "within ClusterQueue team-a's nominal quota" in answer["text"]


def test_a_held_job_is_not_yet_eligible(cluster: Cluster) -> None:
    with cluster.alice as alice:
        job_id = alice.submit(job(["true"], hold=True))
        answer = alice.explain(job_id)
        alice.cancel(job_id)
    assert answer["state"] == "PENDING" and answer["scheduler"] == "held"
    assert answer["reason"]["code"] == "JobHeldUser"
    assert "not yet eligible" in answer["text"]


def test_another_tenant_gets_not_found(cluster: Cluster) -> None:
    with cluster.bob as bob:
        theirs = bob.submit(gpu_job(["true"], gpus=32, nodes=4))
    with cluster.alice as alice, pytest.raises(NotFound, match=f"job {theirs} not found"):
        alice.explain(theirs)
    headers = {"Authorization": f"Bearer {cluster.alice_token}"}
    with httpx.Client(base_url=cluster.url, headers=headers, timeout=30) as h:
        r = h.get(f"/api/v1/jobs/{theirs}/explain")
        assert r.status_code == 404 and r.json()["error"] == "NotFound"
        assert h.get("/api/v1/jobs/999999/explain").status_code == 404
    with httpx.Client(base_url=cluster.url, timeout=30) as h:
        assert h.get(f"/api/v1/jobs/{theirs}/explain").status_code == 401
    with cluster.admin as admin:
        assert admin.explain(theirs)["tenant"] == "team-b"
        admin.cancel(theirs)
