"""The Ray runtime against the local runtime: gang start latency and small-job throughput.

Starts a Ray cluster on this machine (``ray.cluster_utils.Cluster``: a CPU-only
head and ``--nodes`` nodes declaring 8 GPUs each, loopback only, dashboard
off), then a real ``phalanx up --runtime ray`` on it, then a ``phalanx up``
with the local runtime on virtual nodes of the same shape; against each:

- ``gang``: ``--gangs`` 2-node x 8-GPU jobs one after the other; admit-to-running
  latency (the Started event's time minus the Admitted event's: placement
  group, agents and supervisors for Ray, the supervisor for local);
- ``small``: ``--small`` 1-GPU jobs (``true``) submitted at once; jobs finished
  per second from the first submission to the last end.

``--rounds`` rounds, each Ray then local on the same cluster (a fresh server
each), so both see the same machine load; medians over the rounds. Prints one
JSON object, with the goals: the Ray runtime's small-job rate at least
``GOAL_THROUGHPUT_RATIO`` of the local runtime's (median of the rounds'
ratios), and its 2-node gang admit-to-running p50 at most ``GOAL_GANG_S``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from phalanx.control.spawn import spawn_server

LABEL = "phalanx.io/flavor"
GOAL_THROUGHPUT_RATIO = 0.5
GOAL_GANG_S = 0.15
QUEUES = f"""\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {{name: gpu}}
spec:
  nodeLabels: {{{LABEL}: gpu}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: main}}
spec:
  namespaceSelector: {{}}
  resourceGroups:
  - coveredResources: [cpu, nvidia.com/gpu]
    flavors:
    - name: gpu
      resources:
      - {{name: cpu, nominalQuota: 10000}}
      - {{name: nvidia.com/gpu, nominalQuota: 10000}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{name: default, namespace: bench}}
spec: {{clusterQueue: main}}
"""


def nodes_yaml(count: int) -> str:
    return "".join(
        f"---\napiVersion: v1\nkind: Node\nmetadata:\n  name: gpu{i}\n"
        f"  labels: {{{LABEL}: gpu}}\nstatus:\n  capacity: {{nvidia.com/gpu: '8', cpu: '64'}}\n"
        for i in range(1, count + 1)
    )


def job(work: Path, command: str, count: int, gpus: int) -> dict[str, Any]:
    return {
        "tenant": "bench",
        "queue": "default",
        "podSets": [{"count": count, "requests": {"nvidia.com/gpu": gpus, "cpu": 1}}],
        "run": {
            "command": ["sh", "-c", command],
            "workingDir": str(work),
            "output": str(work / "out-%j.log"),
        },
    }


def measure(url: str, token: str, work: Path, gangs: int, small: int) -> dict[str, Any]:
    http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60)

    def events(job_id: int) -> dict[str, float]:
        items = http.get(f"/api/v1/jobs/{job_id}/events").json()["items"]
        return {e["kind"]: datetime.fromisoformat(e["time"]).timestamp() for e in items}

    def wait_done(ids: list[int], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        pending = set(ids)
        while pending and time.monotonic() < deadline:
            items = http.get("/api/v1/jobs", params={"limit": 5000}).json()["items"]
            pending -= {j["id"] for j in items if j["end_time"]}
            time.sleep(0.1)
        if pending:
            raise SystemExit(f"{len(pending)} jobs did not finish in {timeout} s")

    latencies = []
    for _ in range(gangs):
        job_id = http.post("/api/v1/jobs", json=job(work, "true", 2, 8)).json()["id"]
        wait_done([job_id], 300)
        times = events(job_id)
        latencies.append(times["Started"] - times["Admitted"])
    start = time.perf_counter()
    ids = [
        http.post("/api/v1/jobs", json=job(work, "true", 1, 1)).json()["id"] for _ in range(small)
    ]
    wait_done(ids, 900)
    took = time.perf_counter() - start
    states = [http.get(f"/api/v1/jobs/{i}").json()["state"] for i in ids]
    return {
        "gang_admit_to_running_s": {
            "p50": round(statistics.median(latencies), 3),
            "min": round(min(latencies), 3),
            "max": round(max(latencies), 3),
        },
        "small_jobs": small,
        "small_jobs_completed": states.count("COMPLETED"),
        "small_jobs_per_s": round(small / took, 2),
    }


def summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the rounds, per runtime, and the goals."""
    out: dict[str, Any] = {}
    for runtime in ("ray", "local"):
        mine = [r[runtime] for r in rounds]
        out[runtime] = {
            "gang_admit_to_running_p50_s": round(
                statistics.median(m["gang_admit_to_running_s"]["p50"] for m in mine), 3
            ),
            "small_jobs_per_s": round(statistics.median(m["small_jobs_per_s"] for m in mine), 2),
            "small_jobs_completed": min(m["small_jobs_completed"] for m in mine),
        }
    throughput = statistics.median(
        r["ray"]["small_jobs_per_s"] / r["local"]["small_jobs_per_s"] for r in rounds
    )
    latency = statistics.median(
        r["ray"]["gang_admit_to_running_s"]["p50"]
        / max(r["local"]["gang_admit_to_running_s"]["p50"], 1e-6)
        for r in rounds
    )
    gang = out["ray"]["gang_admit_to_running_p50_s"]
    out["ratio_gang_latency_ray_over_local"] = round(latency, 1)
    out["ratio_throughput_ray_over_local"] = round(throughput, 3)
    out["goals"] = {
        "throughput_ratio_at_least": GOAL_THROUGHPUT_RATIO,
        "throughput_met": throughput >= GOAL_THROUGHPUT_RATIO,
        "gang_admit_to_running_p50_s_at_most": GOAL_GANG_S,
        "gang_met": gang <= GOAL_GANG_S,
    }
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--nodes", type=int, default=3, help="Ray nodes with 8 GPUs each")
    parser.add_argument("--gangs", type=int, default=10, help="2-node gangs, one at a time")
    parser.add_argument("--small", type=int, default=100, help="1-GPU jobs at once")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of Ray then local")
    args = parser.parse_args(argv)
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    from ray.cluster_utils import Cluster

    tmp = Path(tempfile.mkdtemp(prefix="phalanx-bench-ray-"))
    (tmp / "queues.yaml").write_text(QUEUES)
    (tmp / "nodes.yaml").write_text(nodes_yaml(args.nodes))
    head = {
        "num_cpus": 1,
        "include_dashboard": False,
        "node_ip_address": "127.0.0.1",
        "labels": {"phalanx.io/node": "head"},
    }
    started = time.perf_counter()
    cluster = Cluster(initialize_head=True, head_node_args=head)
    for i in range(1, args.nodes + 1):
        cluster.add_node(
            num_cpus=64,
            num_gpus=8,
            node_ip_address="127.0.0.1",
            labels={"phalanx.io/node": f"gpu{i}", LABEL: "gpu"},
        )
    cluster.wait_for_nodes()
    ray_up = time.perf_counter() - started
    rounds: list[dict[str, Any]] = []
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    try:
        for round_ in range(args.rounds):
            results: dict[str, Any] = {}
            for runtime in ("ray", "local"):
                work = tmp / f"{runtime}-{round_}"
                work.mkdir()
                cmd = ["--port", "0", "--config", str(tmp / "queues.yaml")]
                if runtime == "ray":
                    cmd += ["--runtime", "ray", "--ray-address", cluster.address]
                    cmd += ["--ray-workdir", str(tmp / "ray-work")]
                else:
                    cmd += ["--config", str(tmp / "nodes.yaml")]
                server = spawn_server(work / "state", cmd, env=env)
                try:
                    results[runtime] = measure(
                        server.url, server.token, work, args.gangs, args.small
                    )
                finally:
                    server.stop()
            rounds.append(results)
    finally:
        logging.getLogger("ray").setLevel(logging.ERROR)
        cluster.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    print(
        json.dumps(
            {
                "date": datetime.now().astimezone().isoformat(timespec="seconds"),
                "python": platform.python_version(),
                "platform": platform.platform(),
                "cpus": os.cpu_count(),
                "ray_nodes": args.nodes,
                "ray_cluster_start_s": round(ray_up, 2),
                "gangs": args.gangs,
                "rounds": rounds,
                **summary(rounds),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
