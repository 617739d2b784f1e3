"""Crashes and load against a real ``phalanx up``: nothing lost, nothing run twice."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.reliability.server import Server, start

CLUSTER = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: gpu}
spec:
  nodeLabels: {phalanx.io/flavor: gpu}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: main}
spec:
  resourceGroups:
  - coveredResources: [cpu, nvidia.com/gpu]
    flavors:
    - name: gpu
      resources:
      - {name: cpu, nominalQuota: 200}
      - {name: nvidia.com/gpu, nominalQuota: 20}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: held}
spec:
  stopPolicy: Hold
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: default, namespace: team-a}
spec: {clusterQueue: main}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: held, namespace: team-a}
spec: {clusterQueue: held}
"""


def nodes_yaml(count: int) -> str:
    return "".join(
        f"""---
apiVersion: v1
kind: Node
metadata:
  name: node-{i}
  labels: {{phalanx.io/flavor: gpu}}
status:
  capacity: {{nvidia.com/gpu: "4", cpu: "40", memory: 200Gi}}
"""
        for i in range(count)
    )


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(CLUSTER + nodes_yaml(5))
    return path


def submission(command: list[str], work: Path, queue: str = "default") -> dict[str, Any]:
    return {
        "tenant": "team-a",
        "queue": queue,
        "podSets": [{"count": 1, "requests": {"nvidia.com/gpu": 1, "cpu": 1}}],
        "run": {
            "command": command,
            "workingDir": str(work),
            "output": str(work / "out-%j.log"),
            "killWait": 1,
        },
    }


def jobs(server: Server) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    with server.client() as c:
        cont: str | None = None
        while True:
            params: dict[str, Any] = {"limit": 5000}
            if cont:
                params["continue"] = cont
            page = c.get("/api/v1/jobs", params=params).json()
            out.extend(page["items"])
            cont = page.get("continue")
            if not cont:
                return out


def wait_states(server: Server, ids: list[int], states: set[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    wanted = set(ids)
    while time.monotonic() < deadline:
        current = {j["id"]: j["state"] for j in jobs(server) if j["id"] in wanted}
        if len(current) == len(wanted) and all(s in states for s in current.values()):
            return
        time.sleep(0.2)
    stuck = {i: s for i, s in current.items() if s not in states}
    raise AssertionError(f"{len(stuck)} jobs not in {states}: {dict(list(stuck.items())[:10])}")


def test_kill_9_with_200_pending_and_20_running_loses_nothing(tmp_path: Path, config: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    state = tmp_path / "state"
    server = start(state, config)
    try:
        with server.client() as c:
            sleepers = c.post(
                "/api/v1/jobs/batch",
                json={"jobs": [submission(["sh", "-c", "echo run; sleep 4"], work)] * 20},
            ).json()["ids"]
            wait_states(server, sleepers, {"RUNNING"}, timeout=60)
            waiting = c.post(
                "/api/v1/jobs/batch",
                json={"jobs": [submission(["sh", "-c", "echo run"], work)] * 200},
            ).json()["ids"]
        states = {j["id"]: j["state"] for j in jobs(server)}
        assert all(states[i] == "RUNNING" for i in sleepers)
        assert all(states[i] == "PENDING" for i in waiting)
        server.kill()
        # The supervisors outlive the server: the sleepers are still running.
        server = start(state, config)
        wait_states(server, sleepers + waiting, {"COMPLETED"}, timeout=180)
        everything = jobs(server)
        assert sorted(j["id"] for j in everything) == sorted(sleepers + waiting)
        with server.client() as c:
            for job_id in sleepers + waiting:
                kinds = [e["kind"] for e in c.get(f"/api/v1/jobs/{job_id}/events").json()["items"]]
                assert kinds.count("Started") == 1, (job_id, kinds)
                assert (work / f"out-{job_id}.log").read_text() == "run\n", (
                    f"job {job_id} ran twice"
                )
    finally:
        server.stop()


def test_sixteen_concurrent_submitters_10000_jobs(tmp_path: Path, config: Path) -> None:
    server = start(tmp_path / "state", config)
    work = tmp_path / "work"
    work.mkdir()
    body = submission(["true"], work, queue="held")
    ids: list[int] = []
    errors: list[str] = []
    lock = threading.Lock()

    def submitter() -> None:
        mine: list[int] = []
        with server.client() as c:
            for _ in range(625):
                r = c.post("/api/v1/jobs", json=body)
                if r.status_code != 201:
                    errors.append(f"{r.status_code} {r.text[:200]}")
                    return
                mine.append(r.json()["id"])
        with lock:
            ids.extend(mine)

    try:
        threads = [threading.Thread(target=submitter) for _ in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors[:3]
        assert len(ids) == 10_000 and len(set(ids)) == 10_000
        listed = jobs(server)
        assert sorted(j["id"] for j in listed) == sorted(ids)
        assert {j["state"] for j in listed} == {"PENDING"}
        with server.client() as c:
            metrics = c.get("/metrics").text
            held = 'kueue_pending_workloads{cluster_queue="held",status="inadmissible"} 10000.0'
            assert held in metrics
            assert c.get("/api/v1/whoami").status_code == 200
    finally:
        server.stop()
