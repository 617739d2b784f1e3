"""OpenAPI v3 documents: what kubectl explain and its fieldValidation check read."""

from __future__ import annotations

import json
import re

from phalanx.kubeapi.openapi import (
    document_path,
    openapi_v2_protobuf,
    openapi_v3_document,
    openapi_v3_index,
    resolve_ref,
    schema_of,
)
from phalanx.kubeapi.resources import RESOURCES, by_kind, group_versions


def test_index_points_at_every_document() -> None:
    index = openapi_v3_index()
    assert set(index["paths"]) == {document_path(gv) for gv in group_versions()}
    for path, entry in index["paths"].items():
        url = entry["serverRelativeURL"]
        assert re.fullmatch(rf"/openapi/v3/{re.escape(path)}\?hash=[0-9A-F]{{128}}", url)
        assert openapi_v3_document(url) is openapi_v3_document(path)
    assert openapi_v3_index() is index  # cached


def test_documents_are_json() -> None:
    for gv in group_versions():
        doc = openapi_v3_document(document_path(gv))
        assert doc is not None
        assert json.loads(json.dumps(doc)) == doc
    assert openapi_v3_document("apis/apps/v1") is None
    assert openapi_v2_protobuf() == b""


def _gvk(op: dict[str, object]) -> tuple[str, str, str]:
    gvk = op["x-kubernetes-group-version-kind"]
    assert isinstance(gvk, dict)
    return gvk["group"], gvk["version"], gvk["kind"]


def test_every_resource_has_its_paths_and_every_path_resolves() -> None:
    for r in RESOURCES:
        doc = openapi_v3_document(document_path(r.group_version))
        assert doc is not None
        prefix = "/api/v1" if not r.group else f"/apis/{r.group}/{r.version}"
        scope = f"{prefix}/namespaces/{{namespace}}" if r.namespaced else prefix
        assert f"{scope}/{r.plural}" in doc["paths"], r
        if "get" in r.verbs:
            assert f"{scope}/{r.plural}/{{name}}" in doc["paths"]
        for sub in r.subresources:
            assert f"{scope}/{r.plural}/{{name}}/{sub}" in doc["paths"]
    for gv in group_versions():
        doc = openapi_v3_document(document_path(gv))
        assert doc is not None
        for item in doc["paths"].values():
            for verb in ("get", "put", "post", "patch", "delete"):
                if verb in item:
                    group, version, kind = _gvk(item[verb])
                    api_version = f"{group}/{version}" if group else version
                    assert by_kind(api_version, kind) is not None


def test_patch_operations_offer_field_validation() -> None:
    """cli-runtime's queryParamVerifierV3: the PATCH operation tagged with the GVK lists
    fieldValidation as a query parameter."""
    for r in RESOURCES:
        if "patch" not in r.verbs:
            continue
        doc = openapi_v3_document(document_path(r.group_version))
        assert doc is not None
        patches = [
            item["patch"]
            for item in doc["paths"].values()
            if "patch" in item and _gvk(item["patch"]) == (r.group, r.version, r.kind)
        ]
        assert patches
        for op in patches:
            names = {(p["name"], p["in"]) for p in op["parameters"]}
            assert {("fieldValidation", "query"), ("fieldManager", "query")} <= names
            assert {("dryRun", "query"), ("force", "query")} <= names


def test_custom_resources_have_no_strategic_merge_patch() -> None:
    doc = openapi_v3_document("apis/kueue.x-k8s.io/v1beta2")
    assert doc is not None
    patch = doc["paths"]["/apis/kueue.x-k8s.io/v1beta2/clusterqueues/{name}"]["patch"]
    assert "application/strategic-merge-patch+json" not in patch["requestBody"]["content"]
    jobs = openapi_v3_document("apis/batch/v1")
    assert jobs is not None
    patch = jobs["paths"]["/apis/batch/v1/namespaces/{namespace}/jobs/{name}"]["patch"]
    assert "application/strategic-merge-patch+json" in patch["requestBody"]["content"]


def test_kinds_carry_their_gvk() -> None:
    found = schema_of("kueue.x-k8s.io/v1beta2", "ClusterQueue")
    assert found is not None
    schema, doc = found
    assert schema["x-kubernetes-group-version-kind"] == [
        {"group": "kueue.x-k8s.io", "kind": "ClusterQueue", "version": "v1beta2"}
    ]
    assert schema["description"]
    meta = resolve_ref(doc, schema["properties"]["metadata"])
    assert "labels" in meta["properties"]
    lists = doc["components"]["schemas"]["io.x-k8s.kueue.v1beta2.ClusterQueueList"]
    assert lists["x-kubernetes-group-version-kind"][0]["kind"] == "ClusterQueueList"


def test_clusterqueue_schema_is_converted_from_the_field_schema() -> None:
    found = schema_of("kueue.x-k8s.io/v1beta2", "ClusterQueue")
    assert found is not None
    spec = found[0]["properties"]["spec"]
    assert spec["properties"]["queueingStrategy"]["enum"] == ["StrictFIFO", "BestEffortFIFO"]
    assert spec["properties"]["queueingStrategy"]["default"] == "BestEffortFIFO"
    groups = spec["properties"]["resourceGroups"]
    assert groups["maxItems"] == 16 and groups["x-kubernetes-list-type"] == "atomic"
    group = groups["items"]
    assert group["required"] == ["coveredResources", "flavors"]
    flavors = group["properties"]["flavors"]
    assert flavors["x-kubernetes-list-type"] == "map"
    assert flavors["x-kubernetes-list-map-keys"] == ["name"]
    assert (flavors["minItems"], flavors["maxItems"]) == (1, 64)
    name = flavors["items"]["properties"]["name"]
    assert name["maxLength"] == 253 and name["pattern"].startswith("^[a-z0-9]")
    quota = flavors["items"]["properties"]["resources"]["items"]["properties"]["nominalQuota"]
    assert quota["x-kubernetes-int-or-string"] is True
    assert quota["anyOf"] == [{"type": "integer"}, {"type": "string"}]
    threshold = spec["properties"]["preemption"]["properties"]["borrowWithinCohort"]
    assert threshold["properties"]["maxPriorityThreshold"]["format"] == "int32"
    assert (
        "Not supported by phalanx" in spec["properties"]["admissionChecksStrategy"]["description"]
    )
    assert "cohortName" in spec["properties"]


def test_v1beta1_spellings() -> None:
    found = schema_of("kueue.x-k8s.io/v1beta1", "ClusterQueue")
    assert found is not None
    spec = found[0]["properties"]["spec"]["properties"]
    assert "cohort" in spec and "cohortName" not in spec
    assert "Borrow" in spec["flavorFungibility"]["properties"]["whenCanBorrow"]["enum"]
    cohort = schema_of("kueue.x-k8s.io/v1alpha1", "Cohort")
    assert cohort is not None and "parent" in cohort[0]["properties"]["spec"]["properties"]
    wl = schema_of("kueue.x-k8s.io/v1beta1", "Workload")
    assert wl is not None
    assert "priorityClassName" in wl[0]["properties"]["spec"]["properties"]
    wpc = schema_of("kueue.x-k8s.io/v1beta2", "WorkloadPriorityClass")
    assert wpc is not None and wpc[0]["required"] == ["value"]


def test_pod_lists_carry_patch_strategies() -> None:
    found = schema_of("batch/v1", "Job")
    assert found is not None
    pod = found[0]["properties"]["spec"]["properties"]["template"]["properties"]["spec"]
    containers = pod["properties"]["containers"]
    assert containers["x-kubernetes-patch-merge-key"] == "name"
    assert containers["x-kubernetes-patch-strategy"] == "merge"
    env = containers["items"]["properties"]["env"]
    assert env["x-kubernetes-patch-merge-key"] == "name"
    assert pod["properties"]["volumes"]["x-kubernetes-patch-merge-key"] == "name"
    assert pod["properties"]["affinity"]["x-kubernetes-preserve-unknown-fields"] is True


def test_scheduling_workload_shape() -> None:
    found = schema_of("scheduling.k8s.io/v1alpha1", "Workload")
    assert found is not None
    groups = found[0]["properties"]["spec"]["properties"]["podGroups"]
    policy = groups["items"]["properties"]["policy"]["properties"]
    assert policy["gang"]["required"] == ["minCount"]
    assert "basic" in policy


def test_log_subresource() -> None:
    doc = openapi_v3_document("api/v1")
    assert doc is not None
    log = doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}/log"]["get"]
    assert {p["name"] for p in log["parameters"]} >= {"container", "follow", "tailLines"}
    assert "post" not in doc["paths"]["/api/v1/namespaces/{namespace}/pods"]
