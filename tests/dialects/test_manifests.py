"""Tests for the Kueue manifest loader: kinds, round trips, errors and the example cluster."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml

from phalanx.dialects.kueue import (
    KINDS,
    Manifest,
    load_documents,
    load_path,
    load_text,
    resolve_kind,
    to_manifest,
)
from phalanx.dialects.kueue.configuration import KueueConfiguration
from phalanx.dialects.kueue.jobs import KubeJob
from phalanx.engine import Admit, Engine, Submit, Upsert
from phalanx.engine.events import ObjectKind
from phalanx.errors import Invalid
from phalanx.model import (
    AdminState,
    ClusterQueue,
    Cohort,
    Job,
    LocalQueue,
    Node,
    PodSet,
    PriorityClass,
    ResourceFlavor,
    Tenant,
)
from tests.shared import needs_shared, shared_files, shared_path

REPO = Path(__file__).parents[2]
UPSTREAM = shared_path("examples", "kueue-upstream")
GPU = "nvidia.com/gpu"

ALL_KINDS = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: h100}
spec:
  nodeLabels: {phalanx.io/flavor: h100}
  nodeTaints: [{key: gpu, value: "true", effect: NoSchedule}]
  tolerations: [{key: gpu, operator: Exists}]
  topologyName: default
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Topology
metadata: {name: default}
spec:
  levels: [{nodeLabel: rack}, {nodeLabel: kubernetes.io/hostname}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: research}
spec:
  parentName: org
  fairSharing: {weight: 2}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata:
  name: team-a
  annotations: {phalanx.io/preset: slurm}
spec:
  cohortName: research
  queueingStrategy: StrictFIFO
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: h100
      resources:
      - {name: cpu, nominalQuota: "96", borrowingLimit: 500m}
      - {name: memory, nominalQuota: 1000Gi, lendingLimit: 100Gi}
      - {name: nvidia.com/gpu, nominalQuota: 8}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: default, namespace: team-a}
spec: {clusterQueue: team-a}
---
apiVersion: phalanx.io/v1
kind: Tenant
metadata: {name: team-a}
spec: {parent: org, allocation: 2.5, users: [alice, bob]}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: high}
value: 1000
description: urgent
---
apiVersion: v1
kind: Node
metadata:
  name: gpu-0
  labels: {phalanx.io/flavor: h100, kubernetes.io/hostname: gpu-0}
  annotations: {phalanx.io/reason: bad fan}
spec:
  unschedulable: true
  taints: [{key: gpu, value: "true", effect: NoSchedule}]
status:
  capacity: {nvidia.com/gpu: "8", cpu: "96", memory: 1000Gi}
"""


def errors_of(call: Any, *args: Any) -> list[str]:
    with pytest.raises(Invalid) as info:
        call(*args)
    return info.value.detail.splitlines()


# --------------------------------------------------------------------------- kinds


def test_kinds_match_engine_object_kinds() -> None:
    assert set(KINDS) == set(get_args(ObjectKind))
    assert len(KINDS) == len(set(KINDS))
    assert KINDS.index("ResourceFlavor") < KINDS.index("ClusterQueue") < KINDS.index("LocalQueue")


@pytest.mark.parametrize(
    ("alias", "kind"),
    [
        ("cq", "ClusterQueue"),
        ("ClusterQueues", "ClusterQueue"),
        ("lq", "LocalQueue"),
        ("localqueues", "LocalQueue"),
        ("rf", "ResourceFlavor"),
        ("flavors", "ResourceFlavor"),
        ("cohorts", "Cohort"),
        ("nodes", "Node"),
        ("tenant", "Tenant"),
        ("workloadpriorityclasses", "PriorityClass"),
        ("priorityclass", "PriorityClass"),
        ("topologies", "Topology"),
        ("Topology", "Topology"),
    ],
)
def test_resolve_kind(alias: str, kind: str) -> None:
    assert resolve_kind(alias) == kind


def test_resolve_kind_unknown_lists_known() -> None:
    with pytest.raises(Invalid) as info:
        resolve_kind("jobz")
    assert "jobz" in info.value.detail
    for kind in KINDS:
        assert kind in info.value.detail


# --------------------------------------------------------------------------- loading


def test_every_kind_loads() -> None:
    manifests = load_text(ALL_KINDS, "all.yaml")
    assert [m.kind for m in manifests] == [
        "ResourceFlavor",
        "Topology",
        "Cohort",
        "ClusterQueue",
        "LocalQueue",
        "Tenant",
        "PriorityClass",
        "Node",
    ]
    starts = [i for i, ln in enumerate(ALL_KINDS.splitlines(), 1) if ln.startswith("apiVersion")]
    assert [m.line for m in manifests] == starts
    assert all(m.source == "all.yaml" for m in manifests)
    by_kind = {m.kind: m for m in manifests}
    lq = by_kind["LocalQueue"]
    assert lq.name == "team-a/default"
    assert lq.obj == LocalQueue(name="default", namespace="team-a", cluster_queue="team-a")
    cq = by_kind["ClusterQueue"].obj
    assert isinstance(cq, ClusterQueue)
    assert cq.cohort_name == "research"
    assert cq.annotations == {"phalanx.io/preset": "slurm"}
    quotas = cq.resource_groups[0].flavors[0].resources
    assert [(q.nominal_quota, q.borrowing_limit) for q in quotas] == [
        (96000, 500),
        (1000 * 2**30, None),
        (8, None),
    ]
    node = by_kind["Node"].obj
    assert isinstance(node, Node)
    assert node.state is AdminState.DRAIN
    assert node.reason == "bad fan"
    assert node.capacity == {GPU: 8, "cpu": 96000, "memory": 1000 * 2**30}
    assert by_kind["PriorityClass"].obj == PriorityClass(
        name="high", value=1000, description="urgent"
    )
    assert by_kind["Tenant"].obj == Tenant(
        name="team-a", parent="org", allocation=2.5, users=["alice", "bob"]
    )


def roundtrip(manifests: list[Manifest]) -> list[Manifest]:
    docs = [to_manifest(m.kind, m.obj) for m in manifests]
    # through YAML text and through already-parsed JSON documents
    again = load_text(yaml.safe_dump_all(docs), "again.yaml")
    parsed = load_documents(json.loads(json.dumps(docs)), "api")
    assert [(m.kind, m.name, m.obj) for m in parsed] == [(m.kind, m.name, m.obj) for m in again]
    return again


def test_every_kind_round_trips() -> None:
    manifests = load_text(ALL_KINDS, "all.yaml")
    again = roundtrip(manifests)
    assert [(m.kind, m.name, m.obj) for m in again] == [(m.kind, m.name, m.obj) for m in manifests]


def test_node_manifest_shape_and_down_state() -> None:
    node = Node(
        name="n0",
        labels={"a": "b"},
        capacity={GPU: 4, "cpu": "1500m", "memory": "64Gi"},
        state=AdminState.DOWN,
        reason="maintenance",
    )
    doc = to_manifest("node", node)
    assert doc["apiVersion"] == "v1"
    assert doc["kind"] == "Node"
    assert doc["metadata"]["labels"] == {"a": "b"}
    assert doc["spec"] == {"unschedulable": True}
    assert doc["status"] == {"capacity": {GPU: "4", "cpu": "1500m", "memory": "64Gi"}}
    (back,) = load_documents([doc], "api")
    assert back.obj == node
    assert back.line == 0


def test_cordoned_node_drains_and_its_reason_round_trips() -> None:
    """``spec.unschedulable: true`` (``kubectl cordon``) drains, with the reason
    ``unschedulable`` unless an annotation gives one; who set the reason and when are
    annotations too, and read back unchanged."""
    (m,) = load_text(
        "apiVersion: v1\nkind: Node\nmetadata: {name: n0}\nspec: {unschedulable: true}\n"
        "status: {capacity: {nvidia.com/gpu: '8'}}\n",
        "cordon.yaml",
    )
    assert (m.obj.state, m.obj.reason) == (AdminState.DRAIN, "unschedulable")
    assert (m.obj.reason_user, m.obj.reason_time) == ("", None)
    stamped = m.obj.model_copy(update={"reason_user": "root", "reason_time": 1796551200.0})
    doc = to_manifest("node", stamped)
    assert doc["metadata"]["annotations"] == {
        "phalanx.io/state": "drain",
        "phalanx.io/reason": "unschedulable",
        "phalanx.io/reason-user": "root",
        "phalanx.io/reason-time": "2026-12-06T10:00:00Z",
    }
    (back,) = load_documents([doc], "api")
    assert back.obj == stamped
    doc["metadata"]["annotations"]["phalanx.io/reason-time"] = "yesterday"
    assert errors_of(load_documents, [doc], "api") == [
        'api: Node/n0 (document 1): metadata.annotations["phalanx.io/reason-time"]: expected '
        'a time such as 2026-12-06T10:00:00Z, got the string "yesterday"'
    ]


def test_node_allocatable_fallback_and_ignored_fields() -> None:
    (m,) = load_text(
        """\
apiVersion: v1
kind: Node
metadata: {name: n0, uid: abc, resourceVersion: "1"}
spec:
  podCIDR: 10.0.0.0/24
  taints: [{key: k, effect: NoExecute, timeAdded: "2024-01-01T00:00:00Z"}]
status:
  allocatable: {nvidia.com/gpu: 2}
  conditions: []
"""
    )
    assert isinstance(m.obj, Node)
    assert m.obj.capacity == {GPU: 2}
    assert m.obj.state is AdminState.UP
    assert m.obj.taints[0].effect == "NoExecute"


def test_priority_class_and_tenant_round_trip_from_models() -> None:
    objects: list[tuple[str, Any]] = [
        ("pc", PriorityClass(name="low", value=-5)),
        ("tenant", Tenant(name="t")),
        ("rf", ResourceFlavor(name="empty")),
        ("cohort", Cohort(name="root")),
    ]
    for kind, obj in objects:
        (back,) = load_documents([to_manifest(kind, obj)], "api")
        assert back.obj == obj


def test_v1beta1_cluster_queue_cohort_is_normalized() -> None:
    text = """\
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: q}
spec:
  cohort: research
  flavorFungibility: {whenCanBorrow: Borrow, whenCanPreempt: Preempt}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{name: f, resources: [{name: nvidia.com/gpu, nominalQuota: 8, borrowingLimit: 2}]}]
---
apiVersion: kueue.x-k8s.io/v1alpha1
kind: Cohort
metadata: {name: research}
spec: {parent: org}
"""
    cq, cohort = load_text(text)
    assert isinstance(cq.obj, ClusterQueue)
    assert cq.obj.cohort_name == "research"
    assert cq.obj.flavor_fungibility.when_can_borrow.value == "MayStopSearch"
    assert cq.obj.flavor_fungibility.when_can_preempt.value == "MayStopSearch"
    assert isinstance(cohort.obj, Cohort)
    assert cohort.obj.parent_name == "org"
    assert to_manifest("cq", cq.obj)["spec"]["cohortName"] == "research"


def test_v1beta2_cohort_field_is_unknown() -> None:
    (line,) = errors_of(
        load_text,
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: q}\n"
        "spec:\n  cohort: research\n",
        "q.yaml",
    )
    assert line.startswith("q.yaml:5: ClusterQueue/q (document 1): spec.cohort: unknown field")
    assert "cohortName" in line


def test_kubernetes_list_and_json(tmp_path: Path) -> None:
    docs = [to_manifest(m.kind, m.obj) for m in load_text(ALL_KINDS)]
    (tmp_path / "list.json").write_text(
        json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}, indent="\t")
    )
    loaded = load_path(tmp_path / "list.json")
    assert [m.kind for m in loaded] == [
        m["kind"] if m["kind"] != "WorkloadPriorityClass" else "PriorityClass" for m in docs
    ]


def test_empty_documents_are_skipped() -> None:
    text = (
        "---\n# only a comment\n---\n"
        "apiVersion: phalanx.io/v1\nkind: Tenant\nmetadata: {name: t}\n---\n"
    )
    (m,) = load_text(text)
    assert m.line == 4


def test_directory_is_recursive_and_sorted(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "z.yml").write_text(
        "apiVersion: phalanx.io/v1\nkind: Tenant\nmetadata: {name: t2}\n"
    )
    (tmp_path / "a.yaml").write_text(
        "apiVersion: phalanx.io/v1\nkind: Tenant\nmetadata: {name: t1}\n"
        "---\napiVersion: phalanx.io/v1\nkind: Tenant\nmetadata: {name: t1b}\n"
    )
    (tmp_path / "c.json").write_text(
        json.dumps({"apiVersion": "phalanx.io/v1", "kind": "Tenant", "metadata": {"name": "t3"}})
    )
    (tmp_path / "notes.txt").write_text("not a manifest")
    loaded = load_path(tmp_path)
    assert [m.name for m in loaded] == ["t1", "t1b", "t2", "t3"]
    assert loaded[1].line == 5
    assert loaded[2].source == str(tmp_path / "b" / "z.yml")


def test_directory_errors_are_collected_from_every_file(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n")
    (tmp_path / "b.yaml").write_text("key: [unclosed\n")
    (tmp_path / "c.yaml").write_text(
        "apiVersion: phalanx.io/v1\nkind: Tenant\nmetadata: {name: ok}\n"
    )
    lines = errors_of(load_path, tmp_path)
    assert len(lines) == 2
    assert lines[0].startswith(
        f"{tmp_path / 'a.yaml'}:2: Pod/p (document 1): kind: unsupported kind"
    )
    assert lines[1].startswith(f"{tmp_path / 'b.yaml'}:2:1: YAML syntax error:")


def test_missing_path() -> None:
    (line,) = errors_of(load_path, Path("/nonexistent/x.yaml"))
    assert "no such file or directory" in line


# --------------------------------------------------------------------------- errors

BAD_QUANTITY = """\
apiVersion: phalanx.io/v1
kind: Tenant
metadata: {name: fine}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata:
  name: team-a
spec:
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: h100
      resources:
      - name: cpu
        nominalQuota: 8
      - name: memory
        nominalQuota: abc
"""


def test_bad_quantity_names_file_line_and_field_path() -> None:
    (line,) = errors_of(load_text, BAD_QUANTITY, "queues.yaml")
    assert line == (
        "queues.yaml:18: ClusterQueue/team-a (document 2): "
        "spec.resourceGroups[0].flavors[0].resources[1].nominalQuota: "
        'invalid quantity "abc" (expected a quantity such as 8, 500m, 16Gi or 1.5Ti)'
    )


def test_bad_node_capacity() -> None:
    (line,) = errors_of(
        load_text,
        "apiVersion: v1\nkind: Node\nmetadata: {name: n}\nstatus:\n  capacity:\n"
        "    nvidia.com/gpu: lots\n",
        "n.yaml",
    )
    assert line.startswith('n.yaml:6: Node/n (document 1): status.capacity["nvidia.com/gpu"]: ')
    assert '"lots"' in line


def test_model_rule_errors_point_into_spec() -> None:
    text = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: q}
spec:
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: f
      resources:
      - {name: cpu, nominalQuota: 1, borrowingLimit: 1}
"""
    (line,) = errors_of(load_text, text, "q.yaml")
    assert line.startswith(
        "q.yaml:10: ClusterQueue/q (document 1): "
        "spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit: only allowed when"
    )


def test_missing_name() -> None:
    (line,) = errors_of(
        load_text, "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Cohort\nmetadata: {}\n", "c.yaml"
    )
    assert line == "c.yaml:3: Cohort/<unnamed> (document 1): metadata.name: required"


def test_unknown_kind() -> None:
    (line,) = errors_of(
        load_text, "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Widget\nmetadata: {name: w}\n"
    )
    assert line.startswith("<stdin>:2: Widget/w (document 1): kind: unsupported kind")
    assert "ClusterQueue" in line


def test_kueue_kinds_phalanx_does_not_run_are_named() -> None:
    (line,) = errors_of(
        load_text,
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: AdmissionCheck\nmetadata: {name: prov}\n"
        "spec: {controllerName: kueue.x-k8s.io/provisioning-request}\n",
    )
    assert line.startswith("<stdin>:2: AdmissionCheck/prov (document 1): kind: not supported:")
    assert "AdmissionChecks" in line


def test_known_kind_wrong_api_version() -> None:
    (line,) = errors_of(load_text, "apiVersion: v1\nkind: ClusterQueue\nmetadata: {name: q}\n")
    assert "apiVersion: ClusterQueue needs apiVersion" in line
    assert "kueue.x-k8s.io/v1beta2" in line


def test_slash_slash_comment() -> None:
    text = "apiVersion: phalanx.io/v1\n// a tenant\nkind: Tenant\nmetadata: {name: t}\n"
    lines = errors_of(load_text, text, "t.yaml")
    assert lines == ["t.yaml:2: `//` is not a YAML comment: use # for YAML comments"]


def test_slash_slash_in_block_scalar_is_text() -> None:
    text = (
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: WorkloadPriorityClass\n"
        "metadata: {name: p}\nvalue: 1\ndescription: |\n  // not a comment\n"
    )
    (m,) = load_text(text)
    assert isinstance(m.obj, PriorityClass)
    assert m.obj.description == "// not a comment\n"


def test_yaml_syntax_error() -> None:
    (line,) = errors_of(load_text, "apiVersion: v1\nkind: Node\nmetadata:\n  name: [a\n", "s.yaml")
    assert line.startswith("s.yaml:5:1: YAML syntax error: ")


def test_not_a_mapping() -> None:
    first, second = errors_of(load_text, "- just\n- a list\n", "l.yaml")
    assert first.startswith("l.yaml:1: document 1: expected a mapping")
    assert second.startswith("l.yaml:2: document 1: expected a mapping")
    (line,) = errors_of(load_text, "hello\n", "s.yaml")
    assert line.startswith("s.yaml:1: document 1: expected a mapping")
    assert '"hello"' in line


def test_unquoted_boolean_label_gets_a_hint() -> None:
    (line,) = errors_of(
        load_text,
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: n\n  labels:\n    gpu: yes\n",
        "n.yaml",
    )
    assert line.startswith("n.yaml:6: Node/n (document 1): metadata.labels.gpu: expected a string")
    assert 'quote it: "true"' in line


def test_all_or_nothing_lists_every_problem() -> None:
    text = BAD_QUANTITY + "---\napiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\n"
    lines = errors_of(load_text, text, "x.yaml")
    assert len(lines) == 2
    assert "(document 3)" in lines[1]


def test_load_documents_errors_name_the_document() -> None:
    lines = errors_of(
        load_documents,
        [{"apiVersion": "phalanx.io/v1", "kind": "Tenant", "metadata": {"name": "ok"}}, 7],
        "request",
    )
    assert lines[0].startswith("request: document 2: expected a mapping")


def test_unsupported_admission_checks_named() -> None:
    text = (
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: q}\n"
        "spec:\n  admissionChecksStrategy: {admissionChecks: []}\n"
    )
    (line,) = errors_of(load_text, text, "q.yaml")
    assert line.startswith("q.yaml:5: ClusterQueue/q (document 1): spec.admissionChecksStrategy:")
    assert "AdmissionChecks" in line


# --------------------------------------------------------------------------- upstream examples

SUPPORTED_API = ("kueue.x-k8s.io/", "phalanx.io/", "v1")
# Kueue features phalanx refuses, with the field the refusal must name.
REFUSED = {"admin/minimal-cq.yaml": "spec.admissionChecksStrategy"}


def upstream_files() -> list[Path]:
    return shared_files("examples", "kueue-upstream", pattern="*.yaml")


def supported_only(path: Path) -> bool:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    return all(
        isinstance(d, dict)
        and (d.get("apiVersion", "").startswith(SUPPORTED_API[:2]) or d.get("apiVersion") == "v1")
        and d.get("kind") != "Job"
        for d in docs
    )


@needs_shared("examples", "kueue-upstream")
def test_upstream_examples_with_supported_kinds_load() -> None:
    checked = 0
    for path in upstream_files():
        rel = path.relative_to(UPSTREAM).as_posix()
        if not supported_only(path):
            continue
        checked += 1
        if rel in REFUSED:
            (line,) = errors_of(load_path, path)
            assert REFUSED[rel] in line
            continue
        manifests = load_path(path)
        assert manifests, rel
        assert all(m.source == str(path) for m in manifests)
        roundtrip(manifests)
    assert checked >= 8


@needs_shared("examples", "kueue-upstream")
def test_upstream_job_loads_as_a_job() -> None:
    path = UPSTREAM / "getting-started" / "quick-start-job.yaml"
    (m,) = load_path(path)
    assert m.kind == "Job"
    assert m.name.startswith("default/sample-job")


def test_admission_scope_round_trips() -> None:
    text = (
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: q}\n"
        "spec:\n  admissionScope: {admissionMode: UsageBasedAdmissionFairSharing}\n"
    )
    (m,) = load_text(text)
    doc = to_manifest("cq", m.obj)
    assert doc["spec"]["admissionScope"] == {"admissionMode": "UsageBasedAdmissionFairSharing"}
    assert "metadata" in doc and "annotations" not in doc["metadata"]


# --------------------------------------------------------------------------- example cluster


def example_engine() -> Engine:
    manifests = load_path(REPO / "examples" / "cluster")
    engine = Engine()
    for m in sorted(manifests, key=lambda m: KINDS.index(m.kind)):
        assert not isinstance(m.obj, KubeJob | KueueConfiguration)
        engine.apply(Upsert(m.obj))
    return engine


def test_example_cluster_loads_and_round_trips() -> None:
    manifests = load_path(REPO / "examples" / "cluster")
    kinds = [m.kind for m in manifests]
    assert kinds.count("Node") == 6
    assert {m.name for m in manifests if m.kind == "LocalQueue"} == {
        "team-a/default",
        "team-b/default",
    }
    roundtrip(manifests)


def test_example_cluster_admits_a_gang_and_small_jobs() -> None:
    engine = example_engine()
    gang = Job(
        id=1,
        tenant="team-a",
        queue="default",
        pod_sets=[
            PodSet(count=2, tasks_per_node=1, requests={GPU: 8, "cpu": "48", "memory": "500Gi"})
        ],
    )
    engine.apply(Submit(gang))
    decisions = engine.cycle(0.0)
    admitted = {d.job_id: d for d in decisions if isinstance(d, Admit)}
    assert 1 in admitted
    assert admitted[1].cluster_queue == "team-a"
    assert not admitted[1].borrowing

    next_id = 2
    for tenant in ("team-a", "team-b"):
        for gpus in (1, 2, 4):
            engine.apply(
                Submit(
                    Job(
                        id=next_id,
                        tenant=tenant,
                        queue="default",
                        pod_sets=[PodSet(requests={GPU: gpus, "cpu": "8"})],
                    )
                )
            )
            next_id += 1
    decisions = engine.cycle(1.0)
    assert sorted(d.job_id for d in decisions if isinstance(d, Admit)) == list(range(2, next_id))
