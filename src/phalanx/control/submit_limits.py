"""Submit-time QOS and tenant limits: refuse what can never run, or is over a submit limit.

Slurm (with ``AccountingStorageEnforce=limits``) rejects a job whose size or
time breaks its QOS or account limits outright, and a job that would take a
user or an account over ``MaxSubmitJobs``; it says "Job violates
accounting/QOS policy (job submit limit, user's size and/or time limits)".
phalanx does the same, and says which limit:

* :func:`job_limit_problem`: a job whose request is over its PriorityClass's
  ``maxTRESPerJob``, ``maxTRESPerUser`` or ``grpTRES``, or its tenant's (or an
  ancestor's) ``grpTRES``, or whose time limit is over ``maxWall``;
* :func:`wall_default`: a job without a time limit gets its PriorityClass's
  ``maxWall``, as Slurm gives it the QOS's MaxWall;
* :class:`SubmitCounts`: ``maxSubmitJobsPerUser`` and a tenant's
  ``maxSubmitJobs``, counted over the store's pending and running jobs (one
  per array task) plus what the same batch of submissions adds.

Run-time limits (what is running now) are the engine's: see
:mod:`phalanx.engine.cache.runlimits`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from phalanx.control.registry import Registry
from phalanx.errors import Invalid
from phalanx.model import Job, JobSubmission, PriorityClass, Tenant, format_quantity
from phalanx.timefmt import format_duration

if TYPE_CHECKING:
    from phalanx.store import Store

__all__ = [
    "POLICY",
    "Counter",
    "SubmitCounts",
    "job_limit_problem",
    "store_counter",
    "tenant_chain",
    "wall_default",
]

POLICY = "Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)"
"""Slurm's words (ESLURM_ACCOUNTING_POLICY) for a job refused by a limit."""


class Counter(Protocol):
    """Counts the unfinished jobs (pending, admitted, running, completing) of the store."""

    def __call__(
        self,
        *,
        users: Sequence[str] | None,
        tenants: Sequence[str] | None,
        priority_class: str | None,
    ) -> int: ...


def tenant_chain(tenant: str, registry: Registry) -> list[str]:
    """``tenant`` and its ancestors, nearest first."""
    chain = [tenant]
    model = registry.get("Tenant", tenant)
    while isinstance(model, Tenant) and model.parent and model.parent not in chain:
        chain.append(model.parent)
        model = registry.get("Tenant", model.parent)
    return chain


def _subtree(tenant: str, registry: Registry) -> list[str]:
    """``tenant`` and every tenant below it."""
    tenants = registry.all("Tenant")
    return sorted(
        {tenant}
        | {name for name in tenants if name != tenant and tenant in tenant_chain(name, registry)}
    )


def _requests(job: Job) -> dict[str, int]:
    total: dict[str, int] = {}
    for pod_set in job.pod_sets:
        for resource, amount in pod_set.requests.items():
            if amount:
                total[resource] = total.get(resource, 0) + pod_set.count * amount
    return total


def _over(need: Mapping[str, int], limits: Mapping[str, int] | None, what: str) -> str | None:
    for resource, limit in sorted((limits or {}).items()):
        asked = need.get(resource, 0)
        if asked > limit:
            return (
                f"{POLICY}: it requests {format_quantity(asked, resource)} {resource}, over "
                f"{what} of {format_quantity(limit, resource)}"
            )
    return None


def job_limit_problem(job: Job, registry: Registry) -> str | None:
    """Why ``job`` can never run under its PriorityClass's or its tenants' limits, as
    ``field: message``; None when it can."""
    need = _requests(job)
    pc = registry.get("PriorityClass", job.priority_class) if job.priority_class else None
    limits = pc.limits if isinstance(pc, PriorityClass) else None
    if limits is not None:
        name = job.priority_class
        for attr, wire in (
            ("max_tres_per_job", "maxTRESPerJob"),
            ("max_tres_per_user", "maxTRESPerUser"),
            ("grp_tres", "grpTRES"),
        ):
            problem = _over(need, getattr(limits, attr), f"PriorityClass {name}'s {wire}")
            if problem:
                return f"podSets: {problem}"
        if (
            limits.max_wall is not None
            and job.time_limit is not None
            and job.time_limit > limits.max_wall
        ):
            return (
                f"run.timeLimit: {POLICY}: time limit {format_duration(job.time_limit)} is over "
                f"PriorityClass {name}'s maxWall of {format_duration(limits.max_wall)}"
            )
    for tenant in tenant_chain(job.tenant, registry):
        model = registry.get("Tenant", tenant)
        if isinstance(model, Tenant) and model.limits is not None:
            problem = _over(need, model.limits.grp_tres, f"tenant {tenant}'s grpTRES")
            if problem:
                return f"podSets: {problem}"
    return None


def wall_default(job: Job, sub: JobSubmission, registry: Registry) -> tuple[Job, JobSubmission]:
    """A job without a time limit gets its PriorityClass's ``maxWall`` (Slurm does)."""
    if sub.run.time_limit is not None or not job.priority_class:
        return job, sub
    pc = registry.get("PriorityClass", job.priority_class)
    wall = pc.limits.max_wall if isinstance(pc, PriorityClass) and pc.limits else None
    if wall is None:
        return job, sub
    run = sub.run.model_copy(update={"time_limit": wall})
    return job.model_copy(update={"time_limit": wall}), sub.model_copy(update={"run": run})


def store_counter(store: Store) -> Counter:
    """A :class:`Counter` over ``store``'s unfinished jobs."""
    from phalanx.store import UNFINISHED_STATES

    def count(
        *,
        users: Sequence[str] | None,
        tenants: Sequence[str] | None,
        priority_class: str | None,
    ) -> int:
        per_state = store.count_jobs(
            states=UNFINISHED_STATES,
            users=users,
            tenants=tenants,
            priority_classes=[priority_class] if priority_class is not None else None,
        )
        return sum(per_state.values())

    return count


class SubmitCounts:
    """Submit limits over one batch of submissions: the store's counts, fetched once per
    key, plus the jobs the batch has accepted so far."""

    def __init__(self, count: Counter) -> None:
        self._count = count
        self._seen: dict[tuple[str, str], int] = {}

    def _current(
        self,
        key: tuple[str, str],
        users: Sequence[str] | None,
        tenants: Sequence[str] | None,
        priority_class: str | None,
    ) -> int:
        if key not in self._seen:
            self._seen[key] = self._count(
                users=users, tenants=tenants, priority_class=priority_class
            )
        return self._seen[key]

    def check(self, jobs: Sequence[Job], subs: Sequence[JobSubmission], registry: Registry) -> None:
        """Refuse the submission (all of it) if it takes a user or a tenant over a submit
        limit; otherwise count its jobs."""
        adds: dict[tuple[str, str], int] = {}
        problems: list[str] = []
        for job, sub in zip(jobs, subs, strict=True):
            tasks = len(sub.array.indices) if sub.array is not None else 1
            pc = registry.get("PriorityClass", job.priority_class) if job.priority_class else None
            limit = (
                pc.limits.max_submit_jobs_per_user
                if isinstance(pc, PriorityClass) and pc.limits is not None
                else None
            )
            if limit is not None:
                key = ("user", f"{job.priority_class}/{job.user}")
                have = self._current(key, [job.user], None, job.priority_class)
                total = have + adds.get(key, 0) + tasks
                if total > limit:
                    problems.append(
                        f"{POLICY}: QOSMaxSubmitJobPerUserLimit: user {job.user} would have "
                        f"{total} pending or running jobs in PriorityClass {job.priority_class}, "
                        f"limit {limit} ({have + adds.get(key, 0)} now)"
                    )
                    continue
                adds[key] = adds.get(key, 0) + tasks
            for tenant in tenant_chain(job.tenant, registry):
                model = registry.get("Tenant", tenant)
                if not isinstance(model, Tenant) or model.limits is None:
                    continue
                cap = model.limits.max_submit_jobs
                if cap is None:
                    continue
                key = ("tenant", tenant)
                have = self._current(key, None, _subtree(tenant, registry), None)
                total = have + adds.get(key, 0) + tasks
                if total > cap:
                    problems.append(
                        f"{POLICY}: AssocGrpSubmitJobsLimit: tenant {tenant} would have "
                        f"{total} pending or running jobs, limit {cap} "
                        f"({have + adds.get(key, 0)} now)"
                    )
                    break
                adds[key] = adds.get(key, 0) + tasks
        if problems:
            raise Invalid("; ".join(dict.fromkeys(problems)))
        for key, n in adds.items():
            self._seen[key] += n
