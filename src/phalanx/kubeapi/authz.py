"""Who may do what through the Kubernetes API: phalanx's tenancy as RBAC would say it.

The admin may do everything. A user acts in its tenants' namespaces: it creates,
changes and deletes the job kinds and Workloads there and reads everything
namespaced there (LocalQueues, Pods and their logs, Events); it reads the
cluster's configuration (ClusterQueues, flavors, Nodes, ...) but does not change
it, and lists only its own Namespaces. A request about another namespace, or a
namespaced list across all namespaces, is refused as RBAC refuses it (403), so
``kubectl get pods -n other-team`` says Forbidden rather than nothing.
"""

from __future__ import annotations

from phalanx.auth import Principal
from phalanx.kubeapi.resources import Resource

__all__ = ["READ_VERBS", "allowed"]

READ_VERBS = frozenset({"get", "list", "watch"})
_JOB_KINDS = frozenset({"Job", "JobSet", "PyTorchJob", "RayJob"})
_REVIEWS = frozenset({"SelfSubjectReview", "SelfSubjectAccessReview"})


def allowed(
    principal: Principal,
    verb: str,
    resource: Resource | None,
    namespace: str,
    subresource: str = "",
) -> tuple[bool, str]:
    """Whether ``principal`` may ``verb`` the resource in ``namespace`` ('': cluster
    scope, or every namespace for a namespaced resource), and why."""
    if principal.admin:
        return True, "the admin may do everything"
    if resource is None:
        return False, "no such resource"
    if resource.kind in _REVIEWS:
        return verb == "create", "every user may review its own access"
    if resource.kind == "Namespace":
        if verb in ("list", "watch"):
            return True, "users list their own namespaces"
        if verb == "get":
            ok = namespace in principal.tenants
            return ok, "a tenant's namespace" if ok else "not one of the user's tenants"
        return False, "namespaces are the admin's to change"
    if not resource.namespaced:
        if verb in READ_VERBS:
            return True, "the cluster's configuration is readable by every user"
        return False, "only the admin changes the cluster's configuration"
    if not namespace:
        return False, "a user acts in its tenants' namespaces, not across all of them"
    if namespace not in principal.tenants:
        return False, f"namespace {namespace} is not one of the user's tenants"
    if verb in READ_VERBS:
        return True, "a tenant's namespace"
    if resource.kind in _JOB_KINDS or (
        resource.kind == "Workload" and resource.group == "kueue.x-k8s.io"
    ):
        return subresource == "", "users run jobs in their tenants' namespaces"
    return False, f"{resource.plural} are the admin's to change"
