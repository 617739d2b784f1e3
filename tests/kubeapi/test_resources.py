"""Discovery documents: well-formed, consistent with RESOURCES and with Kueue's CRDs."""

from __future__ import annotations

import json

import pytest

from phalanx.kubeapi.resources import (
    RESOURCES,
    api_group,
    api_group_list,
    api_resource_list,
    api_versions,
    by_kind,
    group_versions,
    resolve,
    version_info,
)


def test_api_versions_lists_the_core_group() -> None:
    assert api_versions() == {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [],
    }
    cidrs = api_versions("10.0.0.1:6443")["serverAddressByClientCIDRs"]
    assert cidrs == [{"clientCIDR": "0.0.0.0/0", "serverAddress": "10.0.0.1:6443"}]


def test_group_list_prefers_v1beta2_for_kueue() -> None:
    groups = {g["name"]: g for g in api_group_list()["groups"]}  # type: ignore[index]
    kueue = groups["kueue.x-k8s.io"]
    assert kueue["preferredVersion"] == {
        "groupVersion": "kueue.x-k8s.io/v1beta2",
        "version": "v1beta2",
    }
    assert [v["version"] for v in kueue["versions"]] == ["v1beta2", "v1beta1", "v1alpha1"]
    assert "" not in groups
    # Kueue's Workload wins kubectl's lookup of "workloads" over the alpha scheduling API.
    names = list(groups)
    assert names.index("kueue.x-k8s.io") < names.index("scheduling.k8s.io")
    assert api_group("kueue.x-k8s.io")["preferredVersion"] == kueue["preferredVersion"]  # type: ignore[index]
    assert api_group("apps") is None


def test_every_group_version_has_a_resource_list() -> None:
    for gv in group_versions():
        doc = api_resource_list(gv)
        assert doc is not None and doc["groupVersion"] == gv
        json.dumps(doc)
        for entry in doc["resources"]:  # type: ignore[attr-defined]
            assert set(entry) >= {"name", "singularName", "namespaced", "kind", "verbs"}
            assert entry["verbs"]
    assert api_resource_list("apps/v1") is None


def test_subresources_are_listed() -> None:
    core = {e["name"]: e for e in api_resource_list("v1")["resources"]}  # type: ignore[index]
    assert core["pods/log"] == {
        "name": "pods/log",
        "singularName": "",
        "namespaced": True,
        "kind": "Pod",
        "verbs": ["get"],
    }
    assert core["pods"]["verbs"] == ["get", "list", "watch"]
    assert core["pods"]["shortNames"] == ["po"]
    assert core["nodes"]["shortNames"] == ["no"] and not core["nodes"]["namespaced"]
    assert core["nodes/status"]["verbs"] == ["get", "patch", "update"]
    kueue = {e["name"]: e for e in api_resource_list("kueue.x-k8s.io/v1beta2")["resources"]}  # type: ignore[index]
    assert kueue["clusterqueues/status"]["kind"] == "ClusterQueue"
    assert "resourceflavors/status" not in kueue


@pytest.mark.parametrize(
    ("plural", "short", "namespaced"),
    [
        ("clusterqueues", ["cq"], False),
        ("localqueues", ["queue", "queues", "lq"], True),
        ("resourceflavors", ["flavor", "flavors", "rf"], False),
        ("cohorts", ["co"], False),
        ("topologies", ["topo"], False),
        ("workloadpriorityclasses", ["wpc"], False),
        ("workloads", ["kwl", "kueueworkload", "kueueworkloads"], True),
    ],
)
def test_kueue_names_are_the_crds(plural: str, short: list[str], namespaced: bool) -> None:
    for version in ("v1beta2", "v1beta1"):
        r = resolve(f"kueue.x-k8s.io/{version}", plural)
        assert r is not None
        assert list(r.short_names) == short
        assert r.namespaced is namespaced
        assert r.categories == ()


def test_lookups() -> None:
    cq = resolve("kueue.x-k8s.io/v1beta2", "clusterqueues")
    assert cq is not None and cq.kind == "ClusterQueue" and cq.group_version == cq.api_version
    assert by_kind("kueue.x-k8s.io/v1beta1", "Workload") == resolve(
        "kueue.x-k8s.io/v1beta1", "workloads"
    )
    assert by_kind("v1", "Node") == resolve("v1", "nodes")
    assert by_kind("v1", "Node").group_version == "v1"  # type: ignore[union-attr]
    assert by_kind("scheduling.k8s.io/v1alpha1", "Workload") is not None
    assert by_kind("kueue.x-k8s.io/v1alpha1", "ClusterQueue") is None
    assert resolve("v1", "deployments") is None


def test_resources_are_unique() -> None:
    keys = [(r.group_version, r.plural) for r in RESOURCES]
    assert len(keys) == len(set(keys))
    kinds = [(r.api_version, r.kind) for r in RESOURCES]
    assert len(kinds) == len(set(kinds))


def test_review_kinds_are_create_only() -> None:
    for api_version, kind in (
        ("authentication.k8s.io/v1", "SelfSubjectReview"),
        ("authorization.k8s.io/v1", "SelfSubjectAccessReview"),
    ):
        r = by_kind(api_version, kind)
        assert r is not None and r.verbs == ("create",) and not r.namespaced


def test_version_info() -> None:
    info = version_info()
    assert info["gitVersion"].startswith(f"v{info['major']}.{info['minor']}.")
    assert set(info) >= {"major", "minor", "gitVersion", "platform", "goVersion"}
