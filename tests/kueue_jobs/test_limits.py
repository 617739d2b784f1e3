"""QOS and tenant limits apply to Kubernetes jobs too: refused when applied over a limit."""

from __future__ import annotations

import pytest

from phalanx.dialects.kueue.manifests import load_text
from phalanx.errors import Invalid
from phalanx.server import RunningServer
from tests.kueue_jobs.conftest import apply, kube_jobs

LIMITS = """
apiVersion: phalanx.io/v1
kind: PriorityClass
metadata: {name: small}
spec:
  value: 5
  limits:
    maxTRESPerJob: {cpu: 1}
---
apiVersion: phalanx.io/v1
kind: Tenant
metadata: {name: limited}
spec:
  limits: {maxSubmitJobs: 1}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {namespace: limited, name: user-queue}
spec: {clusterQueue: cluster-queue}
"""

JOB = """
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  namespace: {namespace}
  labels: {{kueue.x-k8s.io/queue-name: user-queue{label}}}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: busybox
        command: ["sleep", "30"]
        resources:
          requests: {{cpu: "{cpu}"}}
"""


def _job(name: str, namespace: str = "default", cpu: str = "1", pc: str | None = None) -> str:
    label = f", kueue.x-k8s.io/priority-class: {pc}" if pc else ""
    return JOB.format(name=name, namespace=namespace, cpu=cpu, label=label)


@pytest.fixture(scope="module", autouse=True)
def limits(server: RunningServer) -> None:
    apply(server, [m.obj for m in load_text(LIMITS)])


def test_a_job_over_its_classs_per_job_limit_is_refused(server: RunningServer) -> None:
    with pytest.raises(Invalid) as err:
        apply(server, kube_jobs(_job("big", cpu="2", pc="small")))
    assert "Job violates accounting/QOS policy" in str(err.value)
    assert "it requests 2 cpu, over PriorityClass small's maxTRESPerJob of 1" in str(err.value)


def test_a_tenants_submit_limit_refuses_the_next_job(server: RunningServer) -> None:
    assert apply(server, kube_jobs(_job("first", namespace="limited"))) == [
        ("Job", "limited/first", "created")
    ]
    with pytest.raises(Invalid, match="AssocGrpSubmitJobsLimit: tenant limited would have 2"):
        apply(server, kube_jobs(_job("second", namespace="limited")))
