"""Pods and Events of the Kubernetes API against a real server running a real Indexed
Job (``examples/kueue/indexed-job``): the storages, the log subresource, and the real
``kubectl`` (skipped without it) for ``get pods``, ``logs job/X`` and ``describe``."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from phalanx.model import JobState
from phalanx.server import RunningServer, start_server

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kueue" / "indexed-job"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    state = tmp_path_factory.mktemp("kube-pods")
    running = start_server(
        state, port=0, kube_port=0, runtime="local", configs=[EXAMPLE], container_runtime="host"
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            rows = running.plane.store.list_jobs()
            if rows and all(JobState(r.state).finished for r in rows):
                break
            time.sleep(0.1)
        yield running
    finally:
        running.stop()


def _get(server: RunningServer, path: str, **params: Any) -> httpx.Response:
    return httpx.get(
        server.kube_url + path,
        params=params,
        headers={"Authorization": f"Bearer {server.admin_token}"},
        verify=False,
        timeout=10,
    )


def test_pods_of_an_indexed_job(server: RunningServer) -> None:
    pods = _get(server, "/api/v1/namespaces/default/pods").json()["items"]
    names = sorted(p["metadata"]["name"] for p in pods)
    assert names == ["shards-0", "shards-1", "shards-2", "shards-3"]
    job = _get(server, "/apis/batch/v1/namespaces/default/jobs/shards").json()
    selector = job["spec"]["selector"]["matchLabels"]
    for pod in pods:
        labels = pod["metadata"]["labels"]
        assert all(labels.get(k) == v for k, v in selector.items())
        assert labels["job-name"] == "shards"
        assert labels["batch.kubernetes.io/job-completion-index"] == pod["metadata"]["name"][-1]
        assert pod["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
        assert pod["status"]["phase"] == "Succeeded"
        assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
        assert pod["spec"]["nodeName"]
    one = _get(server, "/api/v1/namespaces/default/pods/shards-2").json()
    assert one["metadata"]["uid"] == next(
        p["metadata"]["uid"] for p in pods if p["metadata"]["name"] == "shards-2"
    )
    assert _get(server, "/api/v1/namespaces/default/pods/shards-9").status_code == 404
    picked = _get(
        server, "/api/v1/pods", fieldSelector="status.phase=Succeeded,metadata.name=shards-1"
    ).json()["items"]
    assert [p["metadata"]["name"] for p in picked] == ["shards-1"]
    assert _get(server, "/api/v1/pods", fieldSelector="status.phase=Running").json()["items"] == []


def test_pod_logs(server: RunningServer) -> None:
    log = _get(server, "/api/v1/namespaces/default/pods/shards-3/log")
    assert log.status_code == 200
    assert log.text == "processing shard 3\n"
    stamped = _get(server, "/api/v1/namespaces/default/pods/shards-3/log", timestamps="true")
    assert stamped.text.endswith("Z processing shard 3\n")
    assert _get(server, "/api/v1/namespaces/default/pods/shards-3/log", limitBytes="5").text == (
        "proce"
    )
    assert _get(server, "/api/v1/namespaces/default/pods/shards-3/log", tailLines="0").text == ""
    bad = _get(server, "/api/v1/namespaces/default/pods/shards-3/log", container="nope")
    assert bad.status_code == 400
    assert bad.json()["message"] == "container nope is not valid for pod shards-3"
    # A finished job's follow ends at once.
    followed = _get(server, "/api/v1/namespaces/default/pods/shards-0/log", follow="true")
    assert followed.text == "processing shard 0\n"


def test_events(server: RunningServer) -> None:
    wl = _get(server, "/apis/kueue.x-k8s.io/v1beta2/namespaces/default/workloads").json()
    workload = wl["items"][0]["metadata"]
    selector = (
        f"involvedObject.name={workload['name']},involvedObject.namespace=default,"
        f"involvedObject.kind=Workload,involvedObject.uid={workload['uid']}"
    )
    events = _get(server, "/api/v1/namespaces/default/events", fieldSelector=selector).json()
    reasons = [e["reason"] for e in events["items"]]
    assert "QuotaReserved" in reasons and "Admitted" in reasons and "Finished" in reasons
    reserved = next(e for e in events["items"] if e["reason"] == "QuotaReserved")
    assert reserved["message"].startswith("Quota reserved in ClusterQueue ")
    assert reserved["source"]["component"] == "kueue-admission"
    assert reserved["metadata"]["name"].startswith(workload["name"] + ".")
    job_events = _get(
        server,
        "/api/v1/namespaces/default/events",
        fieldSelector="involvedObject.kind=Job,involvedObject.name=shards",
    ).json()["items"]
    assert {"SuccessfulCreate", "Completed"} <= {e["reason"] for e in job_events}
    everything = _get(server, "/api/v1/events").json()["items"]
    names = [e["metadata"]["name"] for e in everything]
    assert len(names) == len(set(names)) >= len(events["items"]) + len(job_events)
    one = _get(server, f"/api/v1/namespaces/default/events/{names[0]}").json()
    assert one["metadata"]["name"] == names[0]
    v1 = _get(server, "/apis/events.k8s.io/v1/events").json()["items"]
    assert len(v1) == len(everything) and v1[0]["regarding"]["kind"]
    assert _get(server, "/api/v1/events", fieldSelector="bogus=1").status_code == 400


def _kubectl(server: RunningServer, tmp: Path, *args: str) -> str:
    config = tmp / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: p\n"
        f"clusters: [{{name: p, cluster: {{server: '{server.kube_url}', "
        "insecure-skip-tls-verify: true}}]\n"
        f"users: [{{name: p, user: {{token: '{server.admin_token}'}}}}]\n"
        "contexts: [{name: p, context: {cluster: p, user: p, namespace: default}}]\n"
    )
    kubectl = shutil.which("kubectl")
    assert kubectl is not None
    done = subprocess.run(
        [kubectl, "--kubeconfig", str(config), *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={"HOME": str(tmp), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl(server: RunningServer, tmp_path: Path) -> None:
    listed = _kubectl(server, tmp_path, "get", "pods")
    assert listed.split("\n")[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert "shards-3   0/1     Completed" in listed
    assert _kubectl(server, tmp_path, "logs", "job/shards") == "processing shard 0\n"
    every = _kubectl(server, tmp_path, "logs", "-l", "job-name=shards")
    assert sorted(every.splitlines()) == [f"processing shard {i}" for i in range(4)]
    name = _kubectl(server, tmp_path, "get", "workloads", "-o", "name").split()[0]
    described = _kubectl(server, tmp_path, "describe", name)
    events = described[described.index("Events:") :]
    assert "QuotaReserved" in events and "kueue-admission" in events
    job = _kubectl(server, tmp_path, "describe", "job/shards")
    assert "Created pod: shards-0" in job
