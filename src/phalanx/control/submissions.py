"""Turning what a caller submitted into engine jobs: defaults, permissions, references.

A submission without a tenant goes to the caller's only tenant; without a
user, to the caller; without a queue, to its tenant's LocalQueue ``default``
(or its only LocalQueue). Unknown queues, ClusterQueues and priority classes
are refused at submit time, naming the job and the field, rather than left
pending forever.
"""

from __future__ import annotations

from collections.abc import Sequence

from phalanx.auth import Principal
from phalanx.control.registry import Registry
from phalanx.errors import Forbidden, Invalid
from phalanx.model import Job, JobSubmission

__all__ = ["resolve_submissions"]

_MAX_PROBLEMS = 20


def resolve_submissions(
    principal: Principal, submissions: Sequence[JobSubmission], registry: Registry
) -> list[Job]:
    """Engine jobs (id 0, submit time 0) for ``submissions``, or one error naming every problem."""
    problems: list[str] = []
    forbidden: list[str] = []
    jobs: list[Job] = []
    prefix = "jobs[{}]." if len(submissions) > 1 else ""
    for index, sub in enumerate(submissions):
        where = prefix.format(index)
        tenant = sub.tenant or principal.default_tenant
        if tenant is None:
            known = ", ".join(sorted(principal.tenants)) or "none"
            problems.append(f"{where}tenant: required (this token acts for: {known})")
            continue
        if not principal.may_act_for(tenant):
            forbidden.append(
                f"{where}tenant: {principal.user} may not submit for tenant {tenant!r}"
            )
            continue
        user = sub.user or principal.user
        if user != principal.user and not principal.admin:
            forbidden.append(f"{where}user: only the admin submits on behalf of another user")
            continue
        queue, cluster_queue = sub.queue, sub.cluster_queue
        if cluster_queue is not None:
            if registry.get("ClusterQueue", cluster_queue) is None:
                problems.append(f"{where}clusterQueue: no ClusterQueue named {cluster_queue!r}")
                continue
        elif queue is not None:
            if registry.get("LocalQueue", f"{tenant}/{queue}") is None:
                problems.append(
                    f"{where}queue: tenant {tenant!r} has no LocalQueue named {queue!r}"
                    f"{_known_queues(registry, tenant)}"
                )
                continue
        else:
            own = registry.local_queues_of(tenant)
            names = [lq.name for lq in own]
            if "default" in names:
                queue = "default"
            elif len(names) == 1:
                queue = names[0]
            else:
                problems.append(
                    f"{where}queue: required: tenant {tenant!r} has "
                    + (f"LocalQueues {', '.join(sorted(names))}" if names else "no LocalQueue")
                    + " and none is named 'default'"
                )
                continue
        if (
            sub.priority_class is not None
            and registry.get("PriorityClass", sub.priority_class) is None
        ):
            problems.append(f"{where}priorityClass: no PriorityClass named {sub.priority_class!r}")
            continue
        jobs.append(
            Job(
                id=0,
                name=sub.name,
                tenant=tenant,
                user=user,
                queue=queue if cluster_queue is None else None,
                cluster_queue=cluster_queue,
                priority_class=sub.priority_class,
                priority=sub.priority,
                pod_sets=sub.pod_sets,
                labels=sub.labels,
            )
        )
    if forbidden:
        raise Forbidden(_join(forbidden))
    if problems:
        raise Invalid(_join(problems))
    return jobs


def _known_queues(registry: Registry, tenant: str) -> str:
    names = sorted(lq.name for lq in registry.local_queues_of(tenant))
    return f" (it has: {', '.join(names)})" if names else ""


def _join(problems: list[str]) -> str:
    shown = problems[:_MAX_PROBLEMS]
    more = len(problems) - len(shown)
    return "; ".join(shown) + (f"; and {more} more" if more else "")
