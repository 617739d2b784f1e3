"""The Kueue dialect against real servers: seed diagnostics, immutable fields, queue
conditions, and ``phalanx export`` round trips between two live instances."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from phalanx.cli.main import main
from phalanx.client import Client
from phalanx.errors import Invalid
from phalanx.server import RunningServer, start_server
from tests.api.server import CLUSTER
from tests.shared import needs_shared, shared_path

SEED = shared_path("examples", "seed")

EXTRA = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: Topology
metadata: {name: dc}
spec:
  levels: [{nodeLabel: example.com/rack}, {nodeLabel: kubernetes.io/hostname}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: spot}
spec:
  nodeLabels: {example.com/rack: r1}
  nodeTaints: [{key: spot, value: "true", effect: NoSchedule}]
  tolerations: [{key: spot, operator: Exists, effect: NoSchedule}]
  topologyName: dc
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: org}
spec:
  fairSharing: {weight: 500m}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: spot-queue}
spec:
  cohort: org
  namespaceSelector: {matchLabels: {tier: batch}}
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: spot
      resources:
      - {name: cpu, nominalQuota: 16, borrowingLimit: 4}
      - {name: memory, nominalQuota: 64Gi, lendingLimit: 32Gi}
  flavorFungibility: {whenCanBorrow: Borrow}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: urgent}
value: 10000
description: page someone
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RunningServer]:
    running = start_server(tmp_path / "a", port=0, configs=[CLUSTER], container_runtime="host")
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[RunningServer]:
    running = start_server(tmp_path / "b", port=0, container_runtime="host")
    try:
        yield running
    finally:
        running.stop()


def cli(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    server: RunningServer,
    *args: str,
) -> tuple[int, str, str]:
    monkeypatch.setenv("PHALANX_URL", server.url)
    monkeypatch.setenv("PHALANX_TOKEN", server.admin_token)
    monkeypatch.setenv("NO_COLOR", "1")
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def client(server: RunningServer) -> Client:
    return Client(server.url, server.admin_token, state_dir=server.state_dir)


# --------------------------------------------------------------------------- export


def test_export_apply_export_is_byte_identical(
    server: RunningServer,
    fresh: RunningServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with client(server) as admin:
        admin.apply(EXTRA, source="extra.yaml")
    code, first, err = cli(capsys, monkeypatch, server, "export")
    assert code == 0, err
    docs = list(yaml.safe_load_all(first))
    kinds = [d["kind"] for d in docs]
    order = ["ResourceFlavor", "Topology", "Cohort", "ClusterQueue", "LocalQueue", "Tenant"]
    order += ["WorkloadPriorityClass", "Node"]
    assert kinds == sorted(kinds, key=order.index)
    assert {"Topology", "Cohort", "ClusterQueue", "LocalQueue", "Node"} <= set(kinds)
    assert all(d["apiVersion"] == "kueue.x-k8s.io/v1beta2" for d in docs if d["kind"] in order[:5])
    for d in docs:
        if d["kind"] == "Node":
            assert set(d["status"]) == {"capacity"}
        else:
            assert "status" not in d
    spot = next(d for d in docs if d["metadata"]["name"] == "spot-queue")
    assert spot["spec"]["cohortName"] == "org"
    assert spot["spec"]["flavorFungibility"]["whenCanBorrow"] == "MayStopSearch"
    assert next(d for d in docs if d["kind"] == "Cohort")["spec"]["fairSharing"] == {
        "weight": "500m"
    }

    path = tmp_path / "export.yaml"
    path.write_text(first)
    code, out, err = cli(capsys, monkeypatch, fresh, "apply", "-f", str(path))
    assert code == 0, err
    assert "clusterqueue/spot-queue created" in out
    code, second, err = cli(capsys, monkeypatch, fresh, "export")
    assert code == 0, err
    assert second == first

    code, only, err = cli(capsys, monkeypatch, fresh, "export", "--kind", "cq", "-o", "json")
    assert code == 0, err
    assert '"kind": "List"' in only and '"kind": "Node"' not in only


# --------------------------------------------------------------------------- immutability


def test_local_queue_cluster_queue_is_immutable(server: RunningServer) -> None:
    lq = (
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\n"
        "metadata: {name: moving, namespace: team-a}\nspec: {clusterQueue: %s}\n"
    )
    flavor = (
        "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: new}\n"
    )
    with client(server) as admin:
        assert admin.apply(lq % "team-a")[0]["outcome"] == "created"
        with pytest.raises(Invalid) as caught:
            admin.apply(lq % "team-b" + flavor)
        assert caught.value.detail == (
            "LocalQueue/team-a/moving: spec.clusterQueue: "
            'field is immutable (was "team-a", now "team-b")'
        )
        names = {o["metadata"]["name"] for o in admin.get_objects("flavors")}
        assert "new" not in names  # the whole apply was refused
        assert admin.get_object("lq", "team-a/moving")["spec"]["clusterQueue"] == "team-a"


def test_topology_levels_and_flavor_topology_are_immutable(server: RunningServer) -> None:
    topo = (
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Topology\nmetadata: {name: t}\n"
        "spec: {levels: [%s]}\n"
    )
    with client(server) as admin:
        admin.apply(topo % "{nodeLabel: rack}, {nodeLabel: kubernetes.io/hostname}")
        # Both before and after end with the hostname level: allowed.
        admin.apply(topo % "{nodeLabel: block}, {nodeLabel: kubernetes.io/hostname}")
        with pytest.raises(Invalid) as caught:
            admin.apply(topo % "{nodeLabel: block}")
        assert "Topology/t: spec.levels: field is immutable unless" in caught.value.detail
        flavor = (
            "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: tas}\n"
            "spec: {nodeLabels: {rack: r1}, topologyName: %s}\n"
        )
        admin.apply(flavor % "t")
        with pytest.raises(Invalid) as caught:
            admin.apply(flavor % "other")
        assert "ResourceFlavor/tas: spec.topologyName: field is immutable once set" in (
            caught.value.detail
        )


# --------------------------------------------------------------------------- conditions


def active(obj: dict[str, Any]) -> dict[str, Any]:
    (condition,) = [c for c in obj["status"]["conditions"] if c["type"] == "Active"]
    return dict(condition)


def test_missing_references_make_queues_inactive(server: RunningServer) -> None:
    docs = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: orphan, namespace: team-a}
spec: {clusterQueue: nowhere}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: broken}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - {name: typo-flavor, resources: [{name: cpu, nominalQuota: 4}]}
    - {name: other-typo, resources: [{name: cpu, nominalQuota: 4}]}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: to-broken, namespace: team-a}
spec: {clusterQueue: broken}
"""
    with client(server) as admin:
        outcomes = [r["outcome"] for r in admin.apply(docs)]
        assert outcomes == ["created"] * 3
        assert active(admin.get_object("lq", "team-a/orphan")) == {
            "type": "Active",
            "status": "False",
            "reason": "ClusterQueueDoesNotExist",
            "message": "Can't submit new workloads to clusterQueue",
        }
        assert active(admin.get_object("cq", "broken")) == {
            "type": "Active",
            "status": "False",
            "reason": "FlavorNotFound",
            "message": "Can't admit new workloads: references missing ResourceFlavor(s): "
            "typo-flavor,other-typo.",
        }
        assert active(admin.get_object("lq", "team-a/to-broken"))["reason"] == (
            "ClusterQueueIsInactive"
        )
        healthy = active(admin.get_object("cq", "team-a"))
        assert (healthy["status"], healthy["reason"]) == ("True", "Ready")
        assert active(admin.get_object("lq", "team-a/default"))["status"] == "True"


# --------------------------------------------------------------------------- seed files


@needs_shared("examples", "seed")
def test_seed_files_verbatim_give_precise_diagnostics(
    server: RunningServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    queues, job = SEED / "kueue-queues.yaml", SEED / "kueue-job.yaml"
    code, out, err = cli(capsys, monkeypatch, server, "apply", "-f", str(queues))
    assert code == 1 and out == ""
    assert "Traceback" not in err
    assert err.splitlines() == [
        f"phalanx: error: {queues}:{n}: `//` is not a YAML comment: use # for YAML comments"
        for n in range(1, 6)
    ]
    code, out, err = cli(capsys, monkeypatch, server, "apply", "-f", str(job))
    assert code == 1 and out == ""
    lines = err.splitlines()
    assert lines[:3] == [
        f"phalanx: error: {job}:{n}: `//` is not a YAML comment: use # for YAML comments"
        for n in range(1, 4)
    ]
    assert len(lines) == 4, err
    assert lines[3].startswith(
        f"phalanx: error: {job}:14: Job/llama3-70b-k8s-training (document 1): spec.suspend: "
    )
    assert '"true // Handled atomically by Kueue admission controller"' in lines[3]
    assert "boolean" in lines[3] and "use # for YAML comments" in lines[3]
    with client(server) as admin:
        names = {o["metadata"]["name"] for o in admin.get_objects("cq")}
    assert "enterprise-gpu-cluster-queue" not in names


def hash_comments(text: str) -> str:
    text = re.sub(r"^(\s*)//", r"\1#", text, flags=re.MULTILINE)
    return text.replace(" // ", " # ")


@needs_shared("examples", "seed")
def test_seed_files_with_hash_comments_apply(
    server: RunningServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("kueue-queues.yaml", "kueue-job.yaml"):
        (tmp_path / name).write_text(hash_comments((SEED / name).read_text()))
    code, out, err = cli(
        capsys, monkeypatch, server, "apply", "-f", str(tmp_path / "kueue-queues.yaml")
    )
    assert code == 0, err
    assert out.splitlines() == [
        "clusterqueue/enterprise-gpu-cluster-queue created",
        "localqueue/nlp-research/nlp-local-queue created",
    ]
    with client(server) as admin:
        cq = admin.get_object("cq", "enterprise-gpu-cluster-queue")
        assert cq["spec"]["cohortName"] == "engineering-cohort"
        assert active(cq)["reason"] == "Ready"  # the example cluster has h100-infiniband
    code, out, err = cli(
        capsys, monkeypatch, server, "apply", "-f", str(tmp_path / "kueue-job.yaml")
    )
    assert code == 0, err
    assert out.strip().endswith("created")
    assert "llama3-70b-k8s-training" in out
    # The seed's ClusterQueue does not cover rdma/infiniband, which the job requests: as in
    # Kueue, the job is accepted and waits, and the reason names the resource.
    with client(server) as admin:
        deadline = time.monotonic() + 10
        while True:
            (job,) = [j for j in admin.jobs() if j["name"] == "llama3-70b-k8s-training"]
            if job["reason"] or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    assert job["state"] == "PENDING", job
    assert "rdma/infiniband" in job["message"], job
