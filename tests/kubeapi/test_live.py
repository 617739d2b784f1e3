"""The Kubernetes API of a real server, driven by the real ``kubectl`` and the official
``kubernetes`` Python client (skipped, saying so, where kubectl is not installed).

One server (``start_server`` with ``kube_port=0``: HTTPS, its own CA, the admin's
kubeconfig from :mod:`phalanx.kubeapi.kubeconfig`) serves the module. The kubectl on
PATH and the oldest and newest versioned ``kubectl.1.NN`` beside it each run Kueue's
quick start; the rest uses the one on PATH.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from phalanx.auth import ADMIN
from phalanx.kubeapi.kubeconfig import kubeconfig
from phalanx.server import RunningServer, start_server
from tests.kubeapi.support import kubectl_on_path, versioned_kubectls
from tests.shared import has_shared, shared_path

REPO = Path(__file__).resolve().parents[2]
QUICK_START = ("examples", "kueue-upstream", "getting-started")


def _kubectls() -> list[str]:
    found = kubectl_on_path()
    if found is None:
        return []
    versioned = versioned_kubectls()
    picked = [found]
    if versioned:
        # The oldest, the newest, and 1.32 (the Kubernetes release many clusters run).
        middle = [str(p) for p in versioned if p.name == "kubectl.1.32"]
        picked += [str(versioned[0]), *middle, str(versioned[-1])]
    return list(dict.fromkeys(picked))


KUBECTLS = _kubectls()
pytestmark = pytest.mark.skipif(
    not KUBECTLS, reason="kubectl is not installed (the Google Cloud SDK's, or any on PATH)"
)

CLUSTER = """\
apiVersion: v1
kind: Node
metadata: {name: node-a, labels: {kubernetes.io/hostname: node-a}}
status: {capacity: {cpu: "64", memory: 256Gi, nvidia.com/gpu: "8"}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: any}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: team-queue}
spec:
  cohortName: org
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: any
      resources:
      - {name: cpu, nominalQuota: 32}
      - {name: memory, nominalQuota: 128Gi}
      - {name: nvidia.com/gpu, nominalQuota: 8}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: main, namespace: team-a}
spec: {clusterQueue: team-queue}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: main, namespace: team-b}
spec: {clusterQueue: team-queue}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: main, namespace: default}
spec: {clusterQueue: team-queue}
"""


def job_manifest(name: str, namespace: str, command: str, completions: int = 1) -> str:
    return f"""\
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  namespace: {namespace}
  labels: {{kueue.x-k8s.io/queue-name: main}}
spec:
  completions: {completions}
  parallelism: {completions}
  completionMode: Indexed
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: work
        image: busybox
        command: [sh, -c, '{command}']
        resources: {{requests: {{cpu: "1", memory: 1Gi}}}}
"""


class Kube:
    """The server and kubeconfigs of the module."""

    def __init__(self, running: RunningServer, folder: Path) -> None:
        self.running = running
        self.folder = folder
        ca = Path(json.loads((running.state_dir / "client.json").read_text())["kube_ca"])
        self.ca = ca
        self.admin = self._write("admin", running.admin_token, "admin", "default")
        token, _ = running.plane.create_token(ADMIN, user="alice", tenants=["team-a"])
        self.alice_token = token
        self.alice = self._write("alice", token, "alice", "team-a")

    def _write(self, name: str, token: str, user: str, namespace: str) -> Path:
        path = self.folder / f"{name}.kubeconfig"
        doc = kubeconfig(self.running.kube_url, self.ca, token, user, namespace)
        path.write_text(yaml.safe_dump(doc))
        return path

    def run(
        self,
        *args: str,
        kubectl: str | None = None,
        config: Path | None = None,
        stdin: str | None = None,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "KUBECONFIG": str(config or self.admin), "HOME": str(self.folder)}
        return subprocess.run(
            [kubectl or KUBECTLS[0], *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            check=False,
        )

    def ok(self, *args: str, **kwargs: Any) -> str:
        done = self.run(*args, **kwargs)
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}{done.stdout}"
        return done.stdout


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    folder = tmp_path_factory.mktemp("kube")
    config = folder / "cluster.yaml"
    config.write_text(CLUSTER)
    # The jobs' images (busybox, and the quick start's agnhost: a shell is all they
    # need) run in the container runtime where it can; else on the host.
    runtime = "host"
    if os.geteuid() == 0 and all(shutil.which(t) for t in ("umoci", "mksquashfs", "busybox")):
        from phalanx.runtime.containers.images import ImageStore
        from tests.runtime.containers.images_support import busybox_rootfs, oci_layout

        layout = oci_layout(
            folder / "layout",
            busybox_rootfs(folder / "rootfs"),
            env=["PATH=/usr/sbin:/usr/bin:/sbin:/bin"],
        )
        store = ImageStore(folder / "state" / "images")
        for name in ("busybox", "registry.k8s.io/e2e-test-images/agnhost:2.53"):
            store.import_image(layout, name)
        runtime = "builtin"
    # single_user: alice has no Unix account here; her jobs run as the server's user.
    running = start_server(
        folder / "state",
        port=0,
        kube_port=0,
        configs=[config],
        single_user=True,
        container_runtime=runtime,
    )
    try:
        yield Kube(running, folder)
    finally:
        running.stop()


# ---------------------------------------------------------------------- kubectl


@pytest.mark.parametrize("kubectl", KUBECTLS, ids=lambda k: Path(k).name)
def test_quick_start_with_each_kubectl(kube: Kube, kubectl: str) -> None:
    """Kueue's quick start (upstream, unchanged where ../shared has it): apply the setup
    twice (created, then unchanged), create the Job, wait for its Workload to be
    admitted, see the queues' columns, describe and delete it."""
    if has_shared(*QUICK_START):
        setup = (shared_path(*QUICK_START) / "quick-start-setup.yaml").read_text()
        job = (shared_path(*QUICK_START) / "quick-start-job.yaml").read_text()
    else:
        setup = CLUSTER
        job = job_manifest("sample-job", "default", "sleep 30", 3).replace(
            "queue-name: main", "queue-name: user-queue"
        )
        setup += "\n---\n" + CLUSTER.split("---")[-1].replace("name: main", "name: user-queue")
    first = kube.ok("apply", "-f", "-", kubectl=kubectl, stdin=setup)
    assert re.search(r"clusterqueue.kueue.x-k8s.io/\S+ (created|unchanged)", first)
    again = kube.ok("apply", "-f", "-", kubectl=kubectl, stdin=setup)
    assert "configured" not in again and "unchanged" in again
    name = f"sample-{Path(kubectl).name.replace('.', '-')}"
    mine = re.sub(r"(?m)^  name: sample-job$", f"  name: {name}", job)
    assert kube.ok("create", "-f", "-", kubectl=kubectl, stdin=mine).strip() == (
        f"job.batch/{name} created"
    )
    workloads = kube.ok("get", "workloads", "-o", "name", kubectl=kubectl)
    (workload,) = [w for w in workloads.split() if f"-{name}-" in w]
    kube.ok("wait", "--for=condition=Admitted", workload, "--timeout=30s", kubectl=kubectl)
    table = kube.ok("get", "clusterqueues", kubectl=kubectl)
    assert table.split("\n")[0].split() == ["NAME", "COHORT", "PENDING", "WORKLOADS"]
    wide = kube.ok("get", "cq", "-o", "wide", kubectl=kubectl)
    assert "STRATEGY" in wide and "ADMITTED WORKLOADS" in wide
    lq = kube.ok("get", "localqueues", kubectl=kubectl)
    assert "CLUSTERQUEUE" in lq and "PENDING WORKLOADS" in lq
    described = kube.ok("describe", workload, kubectl=kubectl)
    assert "Admitted" in described and "Cluster Queue" in described
    assert kube.ok("get", "job", name, kubectl=kubectl).split("\n")[1].split()[1] == "Running"
    assert f'job.batch "{name}" deleted' in kube.ok("delete", "job", name, kubectl=kubectl)
    gone = kube.run("get", "job", name, kubectl=kubectl)
    assert gone.returncode == 1 and "NotFound" in gone.stderr
    # Its running tasks were stopped: the phalanx job is cancelled, and stays in history.
    (row,) = kube.running.plane.store.list_jobs(names=[name])
    deadline = time.monotonic() + 30
    while row.state != "CANCELLED" and time.monotonic() < deadline:
        time.sleep(0.1)
        (row,) = kube.running.plane.store.list_jobs(names=[name])
    assert row.state == "CANCELLED"


def test_indexed_job_runs_logs_and_completes(kube: Kube) -> None:
    manifest = job_manifest("shards", "team-a", 'echo "shard $JOB_COMPLETION_INDEX"', 2)
    assert "job.batch/shards created" in kube.ok("apply", "-f", "-", stdin=manifest)
    kube.ok("wait", "--for=condition=complete", "job/shards", "-n", "team-a", "--timeout=60s")
    status = json.loads(kube.ok("get", "job", "shards", "-n", "team-a", "-o", "json"))
    assert status["status"]["succeeded"] == 2
    assert status["spec"]["selector"]["matchLabels"]
    workloads = json.loads(kube.ok("get", "workloads", "-n", "team-a", "-o", "json"))["items"]
    (wl,) = [w for w in workloads if w["metadata"]["ownerReferences"][0]["name"] == "shards"]
    finished = {c["type"]: c for c in wl["status"]["conditions"]}["Finished"]
    assert finished["status"] == "True" and finished["reason"] == "Succeeded"
    # A re-apply of the same file is unchanged; a changed spec is refused as immutable.
    assert "unchanged" in kube.ok("apply", "-f", "-", stdin=manifest)
    changed = kube.run(
        "apply", "-f", "-", stdin=manifest.replace("completions: 2", "completions: 3")
    )
    assert changed.returncode != 0 and "field is immutable" in changed.stderr
    kube.ok("delete", "job", "shards", "-n", "team-a")


def test_strict_and_warn_field_validation(kube: Kube) -> None:
    bad = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: typo-queue}
spec:
  cohortNmae: org
  resourceGroups: []
"""
    strict = kube.run("apply", "-f", "-", stdin=bad)
    assert strict.returncode == 1
    assert 'strict decoding error: unknown field "spec.cohortNmae"' in strict.stderr
    assert kube.run("get", "cq", "typo-queue").returncode == 1
    warned = kube.run("apply", "--validate=warn", "-f", "-", stdin=bad)
    assert warned.returncode == 0, warned.stderr
    assert 'Warning: unknown field "spec.cohortNmae"' in warned.stderr
    invalid = kube.run(
        "apply",
        "-f",
        "-",
        stdin=bad.replace("cohortNmae", "cohortName").replace(
            "resourceGroups: []",
            "resourceGroups: [{coveredResources: [cpu], flavors: [{name: any, "
            "resources: [{name: cpu, nominalQuota: lots}]}]}]",
        ),
    )
    assert invalid.returncode == 1
    assert "is invalid" in invalid.stderr and "nominalQuota" in invalid.stderr
    kube.ok("delete", "cq", "typo-queue")


def test_server_side_apply_conflicts_and_force(kube: Kube, tmp_path: Path) -> None:
    cq = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: ssa-queue}
spec:
  cohortName: COHORT
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: any, resources: [{name: cpu, nominalQuota: 4}]}]
"""
    assert "serverside-applied" in kube.ok(
        "apply", "--server-side", "-f", "-", stdin=cq.replace("COHORT", "org")
    )
    other = kube.run(
        "apply",
        "--server-side",
        "--field-manager=gitops",
        "-f",
        "-",
        stdin=cq.replace("COHORT", "elsewhere"),
    )
    assert other.returncode == 1
    assert 'Apply failed with 1 conflict: conflict with "kubectl"' in other.stderr
    assert ".spec.cohortName" in other.stderr
    kube.ok(
        "apply",
        "--server-side",
        "--field-manager=gitops",
        "--force-conflicts",
        "-f",
        "-",
        stdin=cq.replace("COHORT", "elsewhere"),
    )
    live = json.loads(kube.ok("get", "cq", "ssa-queue", "-o", "json", "--show-managed-fields"))
    assert live["spec"]["cohortName"] == "elsewhere"
    managers = {m["manager"]: m for m in live["metadata"]["managedFields"]}
    assert "f:cohortName" in managers["gitops"]["fieldsV1"]["f:spec"]
    assert "f:cohortName" not in managers["kubectl"]["fieldsV1"].get("f:spec", {})
    # Patches: merge and JSON patch on a CRD; a strategic one is 415, as a real server says.
    kube.ok("patch", "cq", "ssa-queue", "--type=merge", "-p", '{"spec":{"stopPolicy":"Hold"}}')
    kube.ok(
        "patch",
        "cq",
        "ssa-queue",
        "--type=json",
        "-p",
        '[{"op":"replace","path":"/spec/stopPolicy","value":"None"}]',
    )
    strategic = kube.run("patch", "cq", "ssa-queue", "--type=strategic", "-p", "{}")
    assert strategic.returncode == 1
    assert "accepted media types include: application/json-patch+json" in strategic.stderr
    kube.ok("label", "cq", "ssa-queue", "team=platform")
    assert "team=platform" in kube.ok("get", "cq", "ssa-queue", "--show-labels")
    kube.ok("delete", "cq", "ssa-queue")


def test_a_user_sees_only_its_namespaces(kube: Kube) -> None:
    alice = kube.alice
    whoami = kube.ok("auth", "whoami", config=alice)
    assert re.search(r"Username\s+alice", whoami)
    assert kube.ok("auth", "can-i", "create", "jobs", config=alice).strip() == "yes"
    refused = kube.run("auth", "can-i", "create", "jobs", "-n", "team-b", config=alice)
    assert refused.returncode == 1 and refused.stdout.startswith("no")
    other = kube.run("get", "jobs", "-n", "team-b", config=alice)
    assert other.returncode == 1
    assert (
        'User "alice" cannot list resource "jobs" in API group "batch" in the namespace '
        '"team-b"' in other.stderr
    )
    assert kube.run("get", "workloads", "-A", config=alice).returncode == 1
    assert "team-a" in kube.ok("get", "namespaces", config=alice)
    assert "team-b" not in kube.ok("get", "namespaces", config=alice)
    # Alice may run jobs in team-a, and read the queues, but not change them.
    job = job_manifest("alice-job", "team-a", "true")
    assert "created" in kube.ok("apply", "-f", "-", stdin=job, config=alice)
    elsewhere = kube.run("apply", "-f", "-", stdin=job.replace("team-a", "team-b"), config=alice)
    assert elsewhere.returncode == 1 and "Forbidden" in elsewhere.stderr
    assert "team-queue" in kube.ok("get", "cq", config=alice)
    assert kube.run("delete", "cq", "team-queue", config=alice).returncode == 1
    kube.ok("wait", "--for=condition=complete", "job/alice-job", "--timeout=60s", config=alice)
    # The job is the same everywhere: the REST API sees it as alice's.
    rows = kube.running.plane.store.list_jobs(names=["alice-job"])
    assert [(r.user, r.tenant) for r in rows] == [("alice", "team-a")]


def test_errors_are_status_objects(kube: Kube) -> None:
    import httpx

    base = kube.running.kube_url
    headers = {"Authorization": f"Bearer {kube.running.admin_token}"}
    with httpx.Client(
        verify=ssl.create_default_context(cafile=str(kube.ca)), headers=headers, timeout=10
    ) as http:
        missing = http.get(f"{base}/apis/kueue.x-k8s.io/v1beta2/clusterqueues/nope")
        assert missing.status_code == 404
        assert missing.json()["reason"] == "NotFound"
        assert missing.json()["message"] == 'clusterqueues.kueue.x-k8s.io "nope" not found'
        cq = http.get(f"{base}/apis/kueue.x-k8s.io/v1beta2/clusterqueues/team-queue").json()
        again = http.post(f"{base}/apis/kueue.x-k8s.io/v1beta2/clusterqueues", json=cq)
        assert again.status_code == 409 and again.json()["reason"] == "AlreadyExists"
        stale = dict(cq, metadata={**cq["metadata"], "resourceVersion": "1"})
        put = http.put(f"{base}/apis/kueue.x-k8s.io/v1beta2/clusterqueues/team-queue", json=stale)
        assert put.status_code == 409 and put.json()["reason"] == "Conflict"
        assert "the object has been modified" in put.json()["message"]
        proto = http.post(
            f"{base}/apis/batch/v1/namespaces/default/jobs",
            content=b"k8s\x00",
            headers={"Content-Type": "application/vnd.kubernetes.protobuf"},
        )
        assert proto.status_code == 415
        bad_json = http.post(f"{base}/apis/batch/v1/namespaces/default/jobs", content=b"{")
        assert bad_json.status_code == 400 and bad_json.json()["kind"] == "Status"
        gang = http.post(
            f"{base}/apis/scheduling.k8s.io/v1alpha1/namespaces/default/workloads",
            json={
                "apiVersion": "scheduling.k8s.io/v1alpha1",
                "kind": "Workload",
                "metadata": {"name": "gang"},
                "spec": {"podGroups": [{"name": "w"}]},
            },
        )
        assert gang.status_code == 422
        assert gang.json()["details"]["causes"][0]["field"] == "spec.podGroups"
    anonymous = httpx.get(
        f"{base}/api/v1/namespaces", verify=ssl.create_default_context(cafile=str(kube.ca))
    )
    assert anonymous.status_code == 401 and anonymous.json()["reason"] == "Unauthorized"


def test_an_sbatch_job_is_a_workload_in_its_tenants_namespace(kube: Kube) -> None:
    env = {**os.environ, "PHALANX_URL": kube.running.url, "PHALANX_TOKEN": kube.running.admin_token}
    done = subprocess.run(
        [sys.executable, "-m", "phalanx.cli.main", "sbatch", "-A", "team-a", "-p", "team-queue",
         "--wrap", "true"],
        env=env, capture_output=True, text=True, timeout=60, check=True, cwd="/tmp",
    )  # fmt: skip
    job_id = int(done.stdout.split()[-1])
    wl = json.loads(kube.ok("get", "workload", f"job-{job_id}", "-o", "json", config=kube.alice))
    assert wl["metadata"]["namespace"] == "team-a"
    assert wl["metadata"]["labels"]["phalanx.io/job-id"] == str(job_id)


def test_watch_under_concurrent_writes_with_the_python_client(kube: Kube) -> None:
    from kubernetes import client, config, watch

    api = client.ApiClient(config.new_client_from_config(str(kube.admin)).configuration)
    custom = client.CustomObjectsApi(api)
    batch = client.BatchV1Api(api)
    listed = custom.list_namespaced_custom_object(
        "kueue.x-k8s.io", "v1beta2", "team-b", "workloads"
    )
    start = listed["metadata"]["resourceVersion"]
    events: list[tuple[str, str, int]] = []
    stop = threading.Event()

    def watching() -> None:
        w = watch.Watch()
        for ev in w.stream(
            custom.list_namespaced_custom_object,
            "kueue.x-k8s.io",
            "v1beta2",
            "team-b",
            "workloads",
            resource_version=start,
            timeout_seconds=20,
        ):
            owner = ev["object"]["metadata"]["ownerReferences"][0]["name"]
            events.append((ev["type"], owner, int(ev["object"]["metadata"]["resourceVersion"])))
            if stop.is_set() and len({o for _, o, _ in events}) >= 12:
                w.stop()

    watcher = threading.Thread(target=watching)
    watcher.start()
    time.sleep(0.3)

    def writer(i: int) -> None:
        for j in range(3):
            doc = yaml.safe_load(job_manifest(f"w-{i}-{j}", "team-b", "true"))
            batch.create_namespaced_job("team-b", doc)

    writers = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    watcher.join(30)
    owners = {o for _, o, _ in events}
    assert owners == {f"w-{i}-{j}" for i in range(4) for j in range(3)}
    for owner in owners:
        mine = [(t, rv) for t, o, rv in events if o == owner]
        assert mine[0][0] == "ADDED"
        assert [rv for _, rv in mine] == sorted({rv for _, rv in mine})  # in order, no repeats
    assert len(batch.list_namespaced_job("team-b").items) >= 12


def test_kubectl_get_watch_prints_changes(kube: Kube) -> None:
    env = {**os.environ, "KUBECONFIG": str(kube.admin), "HOME": str(kube.folder)}
    proc = subprocess.Popen(
        [KUBECTLS[0], "get", "jobs", "-n", "default", "--watch", "--request-timeout=20s"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        time.sleep(1.0)
        kube.ok("apply", "-f", "-", stdin=job_manifest("watched", "default", "true"))
        deadline = time.time() + 30
        lines: list[str] = []
        assert proc.stdout is not None
        while time.time() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if line.startswith("watched") and "Complete" in line:
                break
        assert any(line.startswith("watched") for line in lines), lines
        assert sum(1 for line in lines if line.startswith("NAME")) == 1
    finally:
        proc.kill()
        proc.wait()
    kube.ok("delete", "job", "watched")


def test_watch_resumes_across_a_restart_and_expires_when_compacted(tmp_path: Path) -> None:
    import httpx

    config = tmp_path / "cluster.yaml"
    config.write_text(CLUSTER)
    running = start_server(
        tmp_path / "state", port=0, kube_port=0, configs=[config], container_runtime="host"
    )
    token = running.admin_token
    ca = json.loads((running.state_dir / "client.json").read_text())["kube_ca"]
    headers = {"Authorization": f"Bearer {token}"}
    path = "/apis/kueue.x-k8s.io/v1beta2/resourceflavors"
    try:
        with httpx.Client(
            verify=ssl.create_default_context(cafile=ca), headers=headers, timeout=10
        ) as http:
            rv = http.get(running.kube_url + path).json()["metadata"]["resourceVersion"]
    finally:
        running.stop()
    running = start_server(tmp_path / "state", port=0, kube_port=0, container_runtime="host")
    try:
        with httpx.Client(
            verify=ssl.create_default_context(cafile=ca), headers=headers, timeout=10
        ) as http:
            flavor = {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ResourceFlavor",
                "metadata": {"name": "later"},
            }
            assert http.post(running.kube_url + path, json=flavor).status_code == 201
            spare = {**flavor, "metadata": {"name": "spare"}}
            assert http.post(running.kube_url + path, json=spare).status_code == 201
            assert http.delete(running.kube_url + path + "/spare").status_code == 200
            seen: list[tuple[str, str]] = []
            with http.stream(
                "GET",
                running.kube_url + path,
                params={"watch": "true", "resourceVersion": rv, "timeoutSeconds": "3"},
            ) as stream:
                for line in stream.iter_lines():
                    event = json.loads(line)
                    seen.append((event["type"], event["object"]["metadata"]["name"]))
                    if len(seen) == 2:
                        break
            # "spare" came and went between the two revisions: only its deletion shows.
            assert seen == [("ADDED", "later"), ("DELETED", "spare")]
            with running.plane.store.begin() as tx:
                tx.compact(time.time() + 1)
            with http.stream(
                "GET", running.kube_url + path, params={"watch": "true", "resourceVersion": rv}
            ) as stream:
                first = json.loads(next(stream.iter_lines()))
            assert first["type"] == "ERROR" and first["object"]["code"] == 410
    finally:
        running.stop()


@pytest.mark.parametrize("kubectl", KUBECTLS, ids=lambda k: Path(k).name)
def test_imperative_create_job(kube: Kube, kubectl: str) -> None:
    """``kubectl create job --image`` sends JSON up to 1.31 and protobuf from 1.32
    (:mod:`phalanx.kubeapi.protobuf`): with each, the Job is created and runs."""
    version = kube.ok("version", "--client", "-o", "json", kubectl=kubectl)
    minor = int(re.sub(r"\D", "", json.loads(version)["clientVersion"]["minor"]))
    name = f"imperative-{minor}"
    # team-a has one LocalQueue (default gains a second in the quick start).
    kube.ok("create", "job", name, "-n", "team-a", "--image=busybox", "--", "true", kubectl=kubectl)
    kube.ok("wait", "-n", "team-a", "--for=condition=complete", f"job/{name}", "--timeout=60s")
    kube.ok("delete", "job", name, "-n", "team-a")


PROTOBUF_KUBECTLS = [
    str(p) for p in versioned_kubectls() if p.name in ("kubectl.1.32", "kubectl.1.33")
]


@pytest.mark.skipif(not PROTOBUF_KUBECTLS, reason="kubectl.1.32 and kubectl.1.33 are absent")
@pytest.mark.parametrize("kubectl", PROTOBUF_KUBECTLS, ids=lambda k: Path(k).name)
def test_protobuf_bodies_of_kubectl(kube: Kube, kubectl: str) -> None:
    """The commands for which kubectl 1.32+ sends protobuf bodies work, and it takes the
    JSON answers (its Accept header lists application/json after protobuf)."""
    minor = Path(kubectl).name.rsplit(".", 1)[1]
    whoami = kube.ok("auth", "whoami", "-o", "json", kubectl=kubectl)
    assert json.loads(whoami)["status"]["userInfo"]["username"] == "admin"
    assert kube.ok("auth", "can-i", "create", "jobs", kubectl=kubectl).strip() == "yes"
    denied = kube.run(
        "auth", "can-i", "create", "jobs", "-n", "team-b", kubectl=kubectl, config=kube.alice
    )
    assert denied.stdout.startswith("no"), denied.stderr
    namespace = f"team-x{minor}"
    assert f"namespace/{namespace} created" in kube.ok(
        "create", "namespace", namespace, kubectl=kubectl
    )
    kube.ok("get", "namespace", namespace, kubectl=kubectl)
    name = f"pi-{minor}"
    kube.ok("create", "job", name, "-n", "team-a", "--image=busybox", "--", "true", kubectl=kubectl)
    kube.ok(
        "wait",
        "-n",
        "team-a",
        "--for=condition=complete",
        f"job/{name}",
        "--timeout=60s",
        kubectl=kubectl,
    )
    kube.ok("delete", "job", name, "-n", "team-a", kubectl=kubectl)


def test_cordon_drains_and_uncordon_resumes_the_node(kube: Kube) -> None:
    def state() -> str:
        (node,) = [n for n in kube.running.plane.nodes() if n.name == "node-a"]
        return str(node.state.value).lower()

    done = kube.run("cordon", "node-a")
    assert done.returncode == 0 and "Warning" not in done.stderr, done.stderr
    assert state() == "drain"
    assert "Ready,SchedulingDisabled" in kube.ok("get", "nodes")
    kube.ok("uncordon", "node-a")
    assert state() == "up"
    assert "SchedulingDisabled" not in kube.ok("get", "nodes")
