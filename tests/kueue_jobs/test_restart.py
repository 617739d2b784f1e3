"""A Kubernetes job keeps running across a control-plane restart, PodsReady included."""

from __future__ import annotations

import time
from pathlib import Path

from phalanx.server import start_server
from tests.kueue_jobs.conftest import NODES, QUEUES, apply, job_row, kube_jobs, wait_finished
from tests.kueue_jobs.test_pods_ready import CONFIGURATION

JOB = """
apiVersion: batch/v1
kind: Job
metadata: {name: survivor, namespace: default}
spec:
  parallelism: 2
  completionMode: Indexed
  completions: 2
  template:
    spec:
      containers:
      - name: main
        image: busybox
        command: ["/bin/sh", "-c", "sleep 4; echo $(JOB_COMPLETION_INDEX) >> OUT"]
        resources: {requests: {cpu: "1"}}
"""


def test_running_pods_survive_a_restart_without_a_pods_ready_timeout(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.mkdir()
    for name, text in (("nodes", NODES), ("queues", QUEUES), ("kueue", CONFIGURATION)):
        (config / f"{name}.yaml").write_text(text)
    state = tmp_path / "state"
    out = tmp_path / "out"
    with start_server(
        state, port=0, configs=[config], preset="kueue", container_runtime="host"
    ) as server:
        apply(server, kube_jobs(JOB.replace("OUT", str(out))))
        job_id = job_row(server, "Job", "default", "survivor").id
        deadline = time.monotonic() + 30
        while server.plane.store.get_job(job_id).state != "RUNNING":  # type: ignore[union-attr]
            assert time.monotonic() < deadline
            time.sleep(0.05)
    # Down for longer than the 2 s PodsReady timeout; the pods keep running.
    time.sleep(2.5)
    with start_server(state, port=0, preset="kueue", container_runtime="host") as server:
        row = wait_finished(server, job_id)
        assert row.state == "COMPLETED", row.message
        kinds = [e.kind for e in server.plane.store.job_events(job_id)]
        assert "Evicting" not in kinds and kinds.count("Admitted") == 1
    assert sorted(out.read_text().split()) == ["0", "1"]
