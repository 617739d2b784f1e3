# ruff: noqa
"""PROVISIONAL: replaced by the full registry (discovery) at merge."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RESOURCES", "Resource", "by_kind", "resolve"]


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    kind: str
    plural: str
    singular: str
    short_names: tuple[str, ...]
    namespaced: bool
    verbs: tuple[str, ...]
    categories: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def api_version(self) -> str:
        return self.group_version


_RW = ("create", "delete", "get", "list", "patch", "update", "watch")
_RO = ("get", "list", "watch")
K = "kueue.x-k8s.io"
RESOURCES: tuple[Resource, ...] = tuple(
    r
    for v in ("v1beta2", "v1beta1")
    for r in (
        Resource(K, v, "ResourceFlavor", "resourceflavors", "resourceflavor", ("rf",), False, _RW),
        Resource(
            K,
            v,
            "ClusterQueue",
            "clusterqueues",
            "clusterqueue",
            ("cq",),
            False,
            _RW,
            (),
            ("status",),
        ),
        Resource(
            K, v, "LocalQueue", "localqueues", "localqueue", ("lq",), True, _RW, (), ("status",)
        ),
        Resource(K, v, "Cohort", "cohorts", "cohort", (), False, _RW),
        Resource(K, v, "Topology", "topologies", "topology", (), False, _RW),
        Resource(
            K,
            v,
            "WorkloadPriorityClass",
            "workloadpriorityclasses",
            "workloadpriorityclass",
            ("wpc",),
            False,
            _RW,
        ),
        Resource(K, v, "Workload", "workloads", "workload", ("wl",), True, _RW, (), ("status",)),
    )
) + (
    Resource("batch", "v1", "Job", "jobs", "job", (), True, _RW, (), ("status",)),
    Resource("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets", "jobset", (), True, _RW),
    Resource("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs", "pytorchjob", (), True, _RW),
    Resource("ray.io", "v1", "RayJob", "rayjobs", "rayjob", (), True, _RW),
    Resource("", "v1", "Node", "nodes", "node", ("no",), False, _RW, (), ("status",)),
    Resource("", "v1", "Namespace", "namespaces", "namespace", ("ns",), False, _RW),
    Resource("", "v1", "Pod", "pods", "pod", ("po",), True, _RO, (), ("log",)),
    Resource("", "v1", "Event", "events", "event", ("ev",), True, _RO),
    Resource("phalanx.io", "v1", "Tenant", "tenants", "tenant", (), False, _RW),
    Resource(
        "phalanx.io", "v1", "PriorityClass", "priorityclasses", "priorityclass", (), False, _RW
    ),
    Resource(
        "authentication.k8s.io",
        "v1",
        "SelfSubjectReview",
        "selfsubjectreviews",
        "",
        (),
        False,
        ("create",),
    ),
    Resource(
        "authorization.k8s.io",
        "v1",
        "SelfSubjectAccessReview",
        "selfsubjectaccessreviews",
        "",
        (),
        False,
        ("create",),
    ),
    Resource("scheduling.k8s.io", "v1alpha1", "Workload", "workloads", "workload", (), True, _RW),
)


def resolve(group_version: str, plural: str) -> Resource | None:
    for r in RESOURCES:
        if r.group_version == group_version and r.plural == plural:
            return r
    return None


def by_kind(api_version: str, kind: str) -> Resource | None:
    for r in RESOURCES:
        if r.api_version == api_version and r.kind == kind:
            return r
    return None


def version_info() -> dict:
    return {"major": "1", "minor": "31", "gitVersion": "v1.31.0", "platform": "linux/amd64"}


def api_versions() -> dict:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}],
    }


def _groups() -> dict:
    out: dict = {}
    for r in RESOURCES:
        if r.group:
            out.setdefault(r.group, [])
            if r.version not in out[r.group]:
                out[r.group].append(r.version)
    return out


def api_group_list() -> dict:
    groups = []
    for g, versions in _groups().items():
        vs = [{"groupVersion": f"{g}/{v}", "version": v} for v in versions]
        groups.append({"name": g, "versions": vs, "preferredVersion": vs[0]})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_resource_list(group_version: str) -> dict | None:
    rs = [r for r in RESOURCES if r.group_version == group_version]
    if not rs:
        return None
    items = []
    for r in rs:
        items.append(
            {
                "name": r.plural,
                "singularName": r.singular,
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": list(r.verbs),
                "shortNames": list(r.short_names),
            }
        )
        for s in r.subresources:
            items.append(
                {
                    "name": f"{r.plural}/{s}",
                    "singularName": "",
                    "namespaced": r.namespaced,
                    "kind": r.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": items,
    }
