"""Kubernetes jobs applied to a live server run their pods' containers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from phalanx.errors import Conflict
from phalanx.runtime.local import NSS_WRAPPER
from phalanx.server import RunningServer
from tests.kueue_jobs.conftest import apply, job_row, kube_jobs, wait_finished

INDEXED = """
apiVersion: batch/v1
kind: Job
metadata:
  name: indexed
  namespace: default
  labels: {kueue.x-k8s.io/queue-name: user-queue}
spec:
  parallelism: 2
  completions: 4
  completionMode: Indexed
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: probe
        image: python:3.12
        command: ["{python}", "-c"]
        args:
        - |
          import os, socket, sys
          name = socket.gethostname()
          try:
              addr = socket.gethostbyname(os.environ["HOSTNAME"])
          except OSError:
              addr = "unresolved"
          path = os.path.join(sys.argv[1], os.environ["JOB_COMPLETION_INDEX"])
          open(path, "w").write(f"{name} {os.environ['HOSTNAME']} {addr} $(GREETING)")
        - "{out}"
        env:
        - {name: GREETING, value: hello}
        resources:
          requests: {cpu: "1", memory: 100Mi}
"""


def test_indexed_job_pods_see_their_index_and_hostname(
    server: RunningServer, tmp_path: Path
) -> None:
    text = INDEXED.replace("{python}", sys.executable).replace("{out}", str(tmp_path))
    assert apply(server, kube_jobs(text)) == [("Job", "default/indexed", "created")]
    row = wait_finished(server, job_row(server, "Job", "default", "indexed").id)
    assert row.state == "COMPLETED", (row.state, row.message)
    seen = {p.name: p.read_text().split() for p in tmp_path.iterdir()}
    assert sorted(seen) == ["0", "1", "2", "3"]
    for index, (hostname, env_name, addr, greeting) in seen.items():
        assert env_name == f"indexed-{index}"
        assert greeting == "hello"
        if NSS_WRAPPER is not None:  # pod names resolve only through nss_wrapper
            assert (hostname, addr) == (env_name, "127.0.0.1")
    # Applying the same Job again changes nothing.
    assert apply(server, kube_jobs(text)) == [("Job", "default/indexed", "unchanged")]


FLAKY = """
apiVersion: batch/v1
kind: Job
metadata:
  name: NAME
  namespace: default
spec:
  backoffLimit: LIMIT
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: sidecar
        image: busybox
        command: ["/bin/sh", "-c", "echo $(POD) >> OUT/containers"]
        env:
        - name: POD
          valueFrom: {fieldRef: {fieldPath: metadata.name}}
      - name: main
        image: busybox
        workingDir: OUT
        command: ["/bin/sh", "-c"]
        args: ["if [ -e tried ]; then exit 0; fi; touch tried; exit 3"]
"""


def test_a_failed_pod_is_retried_within_backoff_limit(
    server: RunningServer, tmp_path: Path
) -> None:
    text = FLAKY.replace("NAME", "flaky").replace("LIMIT", "1").replace("OUT", str(tmp_path))
    # No queue label: the namespace's only LocalQueue takes it.
    apply(server, kube_jobs(text))
    row = wait_finished(server, job_row(server, "Job", "default", "flaky").id)
    assert row.state == "COMPLETED", row.message
    # Both containers of the pod ran, twice (the pod failed once).
    assert (tmp_path / "containers").read_text().split() == ["flaky-0", "flaky-0"]
    images = [
        e.message for e in server.plane.store.job_events(row.id) if e.kind == "ImageNotPulled"
    ]
    assert images == ["image busybox not pulled: running the command on the host"]


def test_failures_over_backoff_limit_fail_the_job(server: RunningServer, tmp_path: Path) -> None:
    text = FLAKY.replace("NAME", "doomed").replace("LIMIT", "0").replace("OUT", str(tmp_path))
    apply(server, kube_jobs(text))
    row = wait_finished(server, job_row(server, "Job", "default", "doomed").id)
    assert (row.state, row.exit_code) == ("FAILED", 3)
    assert row.message == (
        "pod doomed-0 failed (exit code 3); the job has failed 1 pod(s), "
        "more than its backoffLimit of 0"
    )


def test_a_changed_spec_under_an_existing_name_is_refused(
    server: RunningServer, tmp_path: Path
) -> None:
    text = FLAKY.replace("NAME", "fixed").replace("LIMIT", "1").replace("OUT", str(tmp_path))
    assert apply(server, kube_jobs(text)) == [("Job", "default/fixed", "created")]
    with pytest.raises(Conflict, match=r"exists \(job \d+\) with a different spec"):
        apply(server, kube_jobs(text.replace("backoffLimit: 1", "backoffLimit: 2")))
