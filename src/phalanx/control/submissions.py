"""Turning what a caller submitted into engine jobs: defaults, permissions, references.

A submission without a tenant goes to the caller's only tenant; without a
user, to the caller; without a queue, to its tenant's LocalQueue ``default``
(or its only LocalQueue). Unknown queues, ClusterQueues and priority classes
are refused at submit time, naming the job and the field, rather than left
pending forever; so is a job that its PriorityClass's or tenant's limits would
never let run (:mod:`phalanx.control.submit_limits`), and a job array with an index at or
above the server's ``MaxArraySize`` (its slurm.conf's, else Slurm's default 1001).
Only the admin submits as a user
that the Tenant's ``users`` does not list, or with a ``priority`` value or a
negative ``nice``.
"""

from __future__ import annotations

from collections.abc import Sequence

from phalanx.auth import Principal
from phalanx.control.registry import Registry
from phalanx.control.submit_limits import job_limit_problem
from phalanx.dialects.slurm.arrays import MAX_ARRAY_SIZE, index_limit_problem
from phalanx.errors import Forbidden, Invalid
from phalanx.model import Job, JobSubmission

__all__ = [
    "DEFAULT_PARTITION",
    "DEFAULT_TIME",
    "MAX_TIME",
    "default_partition",
    "resolve_submissions",
]

DEFAULT_PARTITION = "slurm.phalanx.io/default-partition"
"""ClusterQueue annotation: sbatch jobs without ``--partition`` go here."""
DEFAULT_TIME = "slurm.phalanx.io/default-time"
"""ClusterQueue annotation: the partition's DefaultTime in seconds (batch jobs without --time)."""
MAX_TIME = "slurm.phalanx.io/max-time"
DEF_MEM_PER_CPU = "slurm.phalanx.io/def-mem-per-cpu"
"""ClusterQueue annotation: DefMemPerCPU in MB (batch jobs that ask for no memory)."""
"""ClusterQueue annotation: the partition's MaxTime in seconds."""

_MAX_PROBLEMS = 20


def resolve_submissions(
    principal: Principal,
    submissions: Sequence[JobSubmission],
    registry: Registry,
    *,
    max_array_size: int = MAX_ARRAY_SIZE,
) -> list[Job]:
    """Engine jobs (id 0, submit time 0) for ``submissions``, or one error naming every problem.

    ``max_array_size`` is the server's ``MaxArraySize``: array indices must be below it."""
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
        problem = _privilege_problem(principal, tenant, user, sub, registry)
        if problem:
            forbidden.append(f"{where}{problem}")
            continue
        array_problem = _array_problem(sub, max_array_size)
        if array_problem:
            problems.append(f"{where}{array_problem}")
            continue
        queue, cluster_queue = sub.queue, sub.cluster_queue
        if cluster_queue is None and queue is None and sub.slurm is not None:
            # sbatch without --partition: the default partition, as in Slurm.
            cluster_queue = default_partition(registry)
            if cluster_queue is None:
                problems.append(
                    f"{where}partition: no default partition: name one with --partition, or "
                    f'mark a ClusterQueue with the annotation {DEFAULT_PARTITION}: "true"'
                )
                continue
        het_problem = _het_partition_problem(sub, cluster_queue, registry)
        if het_problem:
            problems.append(f"{where}{het_problem}")
            continue
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
        limit_problem = _time_limit_problem(sub, cluster_queue, registry)
        if limit_problem:
            problems.append(f"{where}{limit_problem}")
            continue
        if (
            sub.priority_class is not None
            and registry.get("PriorityClass", sub.priority_class) is None
        ):
            problems.append(f"{where}priorityClass: no PriorityClass named {sub.priority_class!r}")
            continue
        job = Job(
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
            time_limit=sub.run.time_limit,
            nice=sub.nice,
        )
        policy_problem = job_limit_problem(job, registry)
        if policy_problem:
            problems.append(f"{where}{policy_problem}")
            continue
        jobs.append(job)
    if forbidden:
        raise Forbidden(_join(forbidden))
    if problems:
        raise Invalid(_join(problems))
    return jobs


def _privilege_problem(
    principal: Principal, tenant: str, user: str, sub: JobSubmission, registry: Registry
) -> str | None:
    """What only the admin may do that this submission does, if anything: submit as a
    user its Tenant does not list, set a priority value, or a negative nice value."""
    if principal.admin:
        return None
    model = registry.get("Tenant", tenant)
    listed = getattr(model, "users", None) or []
    if listed and user not in listed:
        return f"user: {user!r} is not one of tenant {tenant!r}'s users ({', '.join(listed)})"
    if sub.priority is not None:
        return "priority: only the admin sets a job's priority value (use a priorityClass)"
    if sub.nice < 0:
        return "nice: only the admin sets a negative nice value"
    return None


def default_partition(registry: Registry) -> str | None:
    """The ClusterQueue marked as the default partition, or the only ClusterQueue."""
    queues = registry.all("ClusterQueue")
    marked = [
        name
        for name, cq in sorted(queues.items())
        if cq.annotations.get(DEFAULT_PARTITION, "").lower() in ("true", "yes", "1")
    ]
    if marked:
        return marked[0]
    return next(iter(queues)) if len(queues) == 1 else None


def _het_partition_problem(
    sub: JobSubmission, cluster_queue: str | None, registry: Registry
) -> str | None:
    """A heterogeneous job runs in one partition in phalanx: a component without
    ``--partition`` is in the default partition (as in Slurm), which must then be the
    one the others name."""
    if sub.slurm is None or sub.slurm.components is None:
        return None
    default = default_partition(registry)
    named = [part.partition or default for part in sub.slurm.components]
    if None in named:
        return (
            f"partition: heterogeneous job component {named.index(None)} has no --partition "
            "and there is no default partition: give every component the same --partition"
        )
    if len(set(named)) > 1 or (cluster_queue is not None and named[0] != cluster_queue):
        where = ", ".join(
            f"component {i}: {p}" + ("" if sub.slurm.components[i].partition else " (default)")
            for i, p in enumerate(named)
        )
        return (
            "partition: heterogeneous job components in different partitions are not "
            f"supported by phalanx yet ({where}); give every component the same --partition"
        )
    return None


def _array_problem(sub: JobSubmission, max_array_size: int) -> str | None:
    """An array index at or above ``MaxArraySize`` is refused, as slurmctld does; the
    message names ``--array`` as written (or ``array.indices``) and the limit."""
    if sub.array is None or sub.array.indices[-1] < max_array_size:
        return None
    top = sub.array.indices[-1]
    text = sub.array.text if len(sub.array.text) <= 80 else f"{sub.array.text[:60]}..."
    where = f"--array={text}" if text else "array.indices"
    return (
        f"array: Invalid job array specification: {where}: "
        f"{index_limit_problem(top, max_array_size)}"
    )


def _time_limit_problem(
    sub: JobSubmission, cluster_queue: str | None, registry: Registry
) -> str | None:
    """A time limit over the partition's MaxTime is refused, as Slurm does."""
    if cluster_queue is None or sub.run.time_limit is None:
        return None
    cq = registry.get("ClusterQueue", cluster_queue)
    limit = cq.annotations.get(MAX_TIME) if cq is not None else None
    if limit and limit.isdigit() and sub.run.time_limit > int(limit):
        return (
            "run.timeLimit: Requested time limit is invalid (missing or exceeds some limit): "
            f"{sub.run.time_limit} s is over partition {cluster_queue}'s MaxTime of {limit} s"
        )
    return None


def _known_queues(registry: Registry, tenant: str) -> str:
    names = sorted(lq.name for lq in registry.local_queues_of(tenant))
    return f" (it has: {', '.join(names)})" if names else ""


def _join(problems: list[str]) -> str:
    shown = problems[:_MAX_PROBLEMS]
    more = len(problems) - len(shown)
    return "; ".join(shown) + (f"; and {more} more" if more else "")
