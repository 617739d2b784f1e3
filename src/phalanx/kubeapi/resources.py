"""The resources phalanx's Kubernetes API server serves, and its discovery documents.

:data:`RESOURCES` lists every (group, version, resource) the server answers:
Kueue's kinds in ``kueue.x-k8s.io`` (v1beta2, preferred, and v1beta1; Cohort
and Topology also v1alpha1, which phalanx's manifests accept), the job kinds
phalanx runs (Job, JobSet, PyTorchJob, RayJob), the core kinds ``kubectl``
needs (Node, Namespace, Pod, Event), phalanx's own kinds (``phalanx.io/v1``
Tenant and PriorityClass), the review kinds ``kubectl auth whoami`` / ``auth
can-i`` create, and Kubernetes 1.35's alpha gang ``scheduling.k8s.io/v1alpha1``
Workload (served so it can be accepted or refused with a reason).

Short names are those of Kueue's CRDs (Kueue declares no categories) and of
the Kubernetes built-in resources.

Discovery is the plain ("legacy") kind: ``/api`` (APIVersions), ``/apis``
(APIGroupList) and ``/api/v1``, ``/apis/<group>/<version>`` (APIResourceList).
The aggregated form (``Accept: application/json;g=apidiscovery.k8s.io;v=v2;
as=APIGroupDiscoveryList``) is not offered: kubectl 1.27+ and client-go ask for
it first and fall back to the plain documents when the response's
``Content-Type`` is plain ``application/json``, so the server must answer those
requests with ``Content-Type: application/json`` and these bodies.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "KUEUE_GROUP",
    "RESOURCES",
    "SERVER_VERSION",
    "Resource",
    "api_group_list",
    "api_resource_list",
    "api_versions",
    "by_kind",
    "group_versions",
    "resolve",
    "version_info",
]

KUEUE_GROUP = "kueue.x-k8s.io"

_READ = ("get", "list", "watch")
_CRUD = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
_STATUS_VERBS = ("get", "patch", "update")
_SUBRESOURCE_VERBS = {"status": _STATUS_VERBS, "log": ("get",)}


@dataclass(frozen=True)
class Resource:
    """One served resource of one group-version."""

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
        """``v1`` for the core group, else ``group/version``."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def api_version(self) -> str:
        """The ``apiVersion`` its objects carry (the same as :attr:`group_version`)."""
        return self.group_version


def _kueue(
    version: str,
    kind: str,
    plural: str,
    short: tuple[str, ...],
    namespaced: bool,
    status: bool,
) -> Resource:
    return Resource(
        KUEUE_GROUP,
        version,
        kind,
        plural,
        kind.lower(),
        short,
        namespaced,
        _CRUD,
        (),
        ("status",) if status else (),
    )


# (kind, plural, short names, namespaced, has /status), as Kueue's CRDs declare them.
_KUEUE_KINDS: tuple[tuple[str, str, tuple[str, ...], bool, bool], ...] = (
    ("ResourceFlavor", "resourceflavors", ("flavor", "flavors", "rf"), False, False),
    ("ClusterQueue", "clusterqueues", ("cq",), False, True),
    ("LocalQueue", "localqueues", ("queue", "queues", "lq"), True, True),
    ("Cohort", "cohorts", ("co",), False, True),
    ("Topology", "topologies", ("topo",), False, False),
    ("WorkloadPriorityClass", "workloadpriorityclasses", ("wpc",), False, False),
    ("Workload", "workloads", ("kwl", "kueueworkload", "kueueworkloads"), True, True),
)

_KUEUE_RESOURCES = tuple(
    _kueue(version, kind, plural, short, namespaced, status)
    for version in ("v1beta2", "v1beta1")
    for kind, plural, short, namespaced, status in _KUEUE_KINDS
) + tuple(
    _kueue("v1alpha1", kind, plural, short, namespaced, status)
    for kind, plural, short, namespaced, status in _KUEUE_KINDS
    if kind in ("Cohort", "Topology")
)

RESOURCES: tuple[Resource, ...] = (
    # core/v1
    Resource("", "v1", "Namespace", "namespaces", "namespace", ("ns",), False,
             ("create", "delete", "get", "list", "patch", "update", "watch"),
             subresources=("status",)),
    Resource("", "v1", "Node", "nodes", "node", ("no",), False, _CRUD, subresources=("status",)),
    Resource("", "v1", "Pod", "pods", "pod", ("po",), True, _READ, ("all",), ("log",)),
    Resource("", "v1", "Event", "events", "event", ("ev",), True, _READ),
    # Kueue
    *_KUEUE_RESOURCES,
    # the job kinds phalanx runs
    Resource("batch", "v1", "Job", "jobs", "job", (), True, _CRUD, ("all",), ("status",)),
    Resource("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets", "jobset", (), True, _CRUD,
             (), ("status",)),
    Resource("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs", "pytorchjob", (), True, _CRUD,
             (), ("status",)),
    Resource("ray.io", "v1", "RayJob", "rayjobs", "rayjob", (), True, _CRUD, (), ("status",)),
    # phalanx's own kinds
    Resource("phalanx.io", "v1", "Tenant", "tenants", "tenant", (), False, _CRUD),
    Resource("phalanx.io", "v1", "PriorityClass", "priorityclasses", "priorityclass", (),
             False, _CRUD),
    # events.k8s.io: the same events, as newer clients read them
    Resource("events.k8s.io", "v1", "Event", "events", "event", ("ev",), True, _READ),
    # kubectl auth whoami / auth can-i
    Resource("authentication.k8s.io", "v1", "SelfSubjectReview", "selfsubjectreviews",
             "selfsubjectreview", (), False, ("create",)),
    Resource("authorization.k8s.io", "v1", "SelfSubjectAccessReview",
             "selfsubjectaccessreviews", "selfsubjectaccessreview", (), False, ("create",)),
    # Kubernetes 1.35's gang-scheduling Workload (alpha, off by default in a real cluster)
    Resource("scheduling.k8s.io", "v1alpha1", "Workload", "workloads", "workload", (), True,
             _CRUD),
)  # fmt: skip
"""Every served resource. The order of the groups is discovery's order, which is
kubectl's priority when a name (``workloads``) is in several groups: Kueue's
Workload comes before ``scheduling.k8s.io``'s."""

SERVER_VERSION = (1, 30)
"""The Kubernetes version phalanx reports. kubectl 1.27-1.33 are supported against
it; no single version is within kubectl's +/-1 minor skew of all seven (``kubectl
version`` prints a skew warning beyond it; nothing else checks), so the middle of
the range keeps the skew at most 3 either way. It also fixes behaviour a client may
key on: a 1.30 server reports Job STATUS in ``kubectl get jobs``."""


def group_versions() -> list[str]:
    """Every served group-version, ``v1`` first, then groups in discovery order
    with each group's preferred version first."""
    out: list[str] = []
    for gv in (r.group_version for r in RESOURCES):
        if gv not in out:
            out.append(gv)
    return out


def _groups() -> dict[str, list[str]]:
    """Group -> its versions, preferred first (discovery order)."""
    groups: dict[str, list[str]] = {}
    for r in RESOURCES:
        if r.group:
            versions = groups.setdefault(r.group, [])
            if r.version not in versions:
                versions.append(r.version)
    return groups


def api_versions(server_address: str = "") -> dict[str, object]:
    """``GET /api``: the core group's versions.

    ``server_address`` (``host:port`` the client reached) fills
    ``serverAddressByClientCIDRs`` as a real API server does; empty means the
    list is empty (clients use the address they already have).
    """
    cidrs = [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}] if server_address else []
    return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": cidrs}


def api_group_list() -> dict[str, object]:
    """``GET /apis``: every named group, its versions and its preferred version."""
    groups = []
    for group, versions in _groups().items():
        entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        groups.append({"name": group, "versions": entries, "preferredVersion": entries[0]})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(group: str) -> dict[str, object] | None:
    """``GET /apis/<group>``: one group (APIGroup), or None when it is not served."""
    versions = _groups().get(group)
    if versions is None:
        return None
    entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": entries,
        "preferredVersion": entries[0],
    }


def _resource_entry(r: Resource) -> dict[str, object]:
    entry: dict[str, object] = {
        "name": r.plural,
        "singularName": r.singular,
        "namespaced": r.namespaced,
        "kind": r.kind,
        "verbs": list(r.verbs),
    }
    if r.short_names:
        entry["shortNames"] = list(r.short_names)
    if r.categories:
        entry["categories"] = list(r.categories)
    return entry


def api_resource_list(group_version: str) -> dict[str, object] | None:
    """``GET /api/v1`` or ``/apis/<group>/<version>``: the group-version's resources and
    subresources (``clusterqueues/status``, ``pods/log``); None when it is not served."""
    served = [r for r in RESOURCES if r.group_version == group_version]
    if not served:
        return None
    resources: list[dict[str, object]] = []
    for r in served:
        resources.append(_resource_entry(r))
        for sub in r.subresources:
            resources.append(
                {
                    "name": f"{r.plural}/{sub}",
                    "singularName": "",
                    "namespaced": r.namespaced,
                    "kind": r.kind,
                    "verbs": list(_SUBRESOURCE_VERBS[sub]),
                }
            )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }


def version_info() -> dict[str, str]:
    """``GET /version``."""
    major, minor = SERVER_VERSION
    return {
        "major": str(major),
        "minor": str(minor),
        "gitVersion": f"v{major}.{minor}.0+phalanx",
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",
        "goVersion": "",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def resolve(group_version: str, plural: str) -> Resource | None:
    """The resource ``plural`` of ``group_version`` (``v1``, ``kueue.x-k8s.io/v1beta2``)."""
    for r in RESOURCES:
        if r.group_version == group_version and r.plural == plural:
            return r
    return None


def by_kind(api_version: str, kind: str) -> Resource | None:
    """The resource whose objects are ``kind`` in ``api_version``."""
    for r in RESOURCES:
        if r.api_version == api_version and r.kind == kind:
            return r
    return None
