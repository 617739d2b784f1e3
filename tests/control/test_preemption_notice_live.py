"""Preemption notice and checkpoints on a live server (``phalanx up``).

One 8-GPU node, one ClusterQueue that preempts lower priorities with a 6 s grace
period. ``a`` (4 GPUs, ``sbatch --signal=B:USR1@3``) starts first, then ``b`` (4 GPUs,
no checkpoint); then ``a`` reports a checkpoint with ``phalanx checkpoint``. A
high-priority 4-GPU job preempts one of them: without checkpoints that would be ``b``
(admitted most recently); ``a`` goes, since it loses less work since its checkpoint. It
gets USR1 3 s before the end of its grace period, before SIGTERM, and ``explain``
shows its checkpoint time and why it was chosen.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from phalanx.client import Client
from phalanx.control.spawn import ServerProcess, spawn_server

CLUSTER = """apiVersion: v1
kind: Node
metadata: {name: n1}
status: {capacity: {nvidia.com/gpu: 8, cpu: "64", memory: 512Gi}}
---
apiVersion: kueue.x-k8s.io/v1beta2
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
metadata:
  name: cq
  annotations: {slurm.phalanx.io/grace-time: "6"}
spec:
  namespaceSelector: {}
  preemption: {withinClusterQueue: LowerPriority}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu, cpu, memory]
    flavors:
    - name: gpu
      resources:
      - {name: nvidia.com/gpu, nominalQuota: 8}
      - {name: cpu, nominalQuota: 64}
      - {name: memory, nominalQuota: 512Gi}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {namespace: t, name: default}
spec: {clusterQueue: cq}
---
apiVersion: phalanx.io/v1
kind: Tenant
metadata: {name: t}
"""

PHALANX = Path(sys.executable).parent / "phalanx"

NOTICED = f"""#!/bin/sh
trap 'echo "usr1 $(date +%s.%N)" >> marks' USR1
trap 'echo "term $(date +%s.%N)" >> marks; exit 0' TERM
echo started
while :; do
  if [ -e go ] && [ ! -e checkpointed ]; then
    {PHALANX} checkpoint && date +%s.%N > checkpointed
  fi
  sleep 0.1
done
"""

PLAIN = "#!/bin/sh\necho started\nwhile :; do sleep 0.1; done\n"


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    config = tmp_path / "cluster.yaml"
    config.write_text(CLUSTER)
    running = spawn_server(
        tmp_path / "state", ["--port", "0", "--config", str(config), "--preset", "kueue"]
    )
    try:
        yield running
    finally:
        running.stop()


def _sbatch(server: ServerProcess, workdir: Path, script: str, *args: str) -> int:
    path = workdir / "job.sh"
    path.write_text(script)
    env = {**os.environ, "PHALANX_URL": server.url, "PHALANX_TOKEN": server.token}
    done = subprocess.run(
        [sys.executable, "-m", "phalanx.cli.main", "sbatch", "--parsable", "-A", "t", "-p",
         "cq", "--gpus=4", "-n", "1", "-D", str(workdir), "-o", str(workdir / "out"),
         *args, str(path)],
        env=env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return int(done.stdout.strip().split(";")[0])


def _until(what: Any, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = what()
        if value:
            return value
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _marks(path: Path) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in path.read_text().splitlines():
        name, _, at = line.partition(" ")
        out.setdefault(name, float(at))
    return out


def test_the_checkpointed_job_is_preempted_and_gets_its_notice_first(
    server: ServerProcess, tmp_path: Path
) -> None:
    dir_a, dir_b = tmp_path / "a", tmp_path / "b"
    dir_a.mkdir()
    dir_b.mkdir()
    with Client(server.url, server.token, state_dir=server.state_dir) as client:
        a = _sbatch(server, dir_a, NOTICED, "--signal=B:USR1@3")
        _until(lambda: client.get(a)["state"] == "RUNNING")
        b = _sbatch(server, dir_b, PLAIN)
        _until(lambda: client.get(b)["state"] == "RUNNING")
        time.sleep(1.5)
        (dir_a / "go").touch()
        checkpointed = float(
            _until(lambda: (dir_a / "checkpointed").exists())
            and (dir_a / "checkpointed").read_text()
        )
        explained = _until(lambda: client.explain(a).get("last_checkpoint"))
        assert abs(_epoch(explained["time"]) - checkpointed) < 1.5, explained

        high = client.submit(
            {
                "name": "high",
                "tenant": "t",
                "priorityClass": "high",
                "podSets": [
                    {"name": "main", "count": 1,
                     "requests": {"nvidia.com/gpu": 4, "cpu": "1", "memory": "1Gi"}}
                ],
                "run": {"command": ["sleep", "1"], "workingDir": "/tmp"},
            }
        )  # fmt: skip
        _until(lambda: client.get(a)["state"] in ("PREEMPTED", "PENDING", "REQUEUED"), 40)
        _until(lambda: client.get(high)["state"] in ("RUNNING", "COMPLETED"), 40)
        assert client.get(b)["state"] == "RUNNING"

        evicting = next(e for e in client.events(a) if e["kind"] == "Evicting")
        evicted_at = _epoch(evicting["time"])
        marks = _marks(dir_a / "marks")
        # USR1 3 s before the end of the 6 s grace period, then SIGTERM at its end.
        assert marks["usr1"] < marks["term"], marks
        assert 1.5 <= marks["usr1"] - evicted_at < 5.5, (marks, evicted_at)
        assert 4.5 <= marks["term"] - evicted_at < 9.0, (marks, evicted_at)

        answer = client.explain(a)
        [preemption] = answer["preemptions"]
        assert preemption["by"] == high
        assert [s[0] for s in preemption["spared"]] == [b], preemption
        assert f"rather than job {b}" in answer["text"], answer["text"]
        assert "It last reported a checkpoint at" in answer["text"], answer["text"]
        assert abs(_epoch(answer["last_checkpoint"]["time"]) - checkpointed) < 1.5
        client.cancel(b)
