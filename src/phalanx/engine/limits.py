"""Slurm's QOS and association limits: running usage per user, class and tenant, and
the pending jobs those limits hold back.

A PriorityClass is Slurm's QOS and a Tenant its account association. Every
admitted job is charged to its *keys*: ``("user", class, user)``,
``("class", class, "")`` and ``("tenant", t, "")`` for its tenant and each
ancestor. Before the engine nominates a job it asks :meth:`Limits.check`
whether starting it would go over a limit (Slurm's
``acct_policy_job_runnable``). A job that would is *held*: taken out of its
ClusterQueue's queue, so it neither blocks the jobs behind it nor gets a
backfill reservation, and indexed under the key whose limit holds it. When a
job charged to that key ends, or a limit changes, only the jobs held under the
keys concerned are checked again; nothing rescans every pending job.

Limits are checked against a job's full request (every task of every pod
set); a job is charged what it was admitted with.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from phalanx.engine.reasons import Reason, ReasonCode
from phalanx.engine.shapes import JobShape
from phalanx.model import (
    CPU,
    MEMORY,
    Job,
    PriorityClassLimits,
    Tenant,
    TenantLimits,
    format_quantity,
)
from phalanx.timefmt import format_duration

if TYPE_CHECKING:
    from phalanx.engine.state import JobRecord

__all__ = ["Key", "Limits", "Usage", "job_tres", "tenant_chain"]

Key = tuple[str, str, str]
"""``("user", class, user)``, ``("class", class, "")`` or ``("tenant", tenant, "")``."""


@dataclass(slots=True)
class Usage:
    """What the running jobs charged to one key hold."""

    jobs: int = 0
    tres: dict[str, int] = field(default_factory=dict)


def job_tres(shape: JobShape, counts: Mapping[str, int] | None = None) -> dict[str, int]:
    """A job's total request per resource; ``counts`` overrides pod set task counts."""
    tres: dict[str, int] = {}
    for pod_set in shape.pod_sets:
        n = counts.get(pod_set.name, pod_set.count) if counts else pod_set.count
        for resource, amount in pod_set.requests:
            if amount:
                tres[resource] = tres.get(resource, 0) + n * amount
    return tres


def tenant_chain(tenant: str, tenants: Mapping[str, Tenant]) -> list[str]:
    """``tenant`` and its ancestors, nearest first (a cycle in the tree ends the chain)."""
    chain = [tenant]
    seen = {tenant}
    model = tenants.get(tenant)
    while model is not None and model.parent and model.parent not in seen:
        chain.append(model.parent)
        seen.add(model.parent)
        model = tenants.get(model.parent)
    return chain


_PER_USER = {
    CPU: ReasonCode.QOS_MAX_CPU_PER_USER,
    MEMORY: ReasonCode.QOS_MAX_MEMORY_PER_USER,
}
_PER_JOB = {CPU: ReasonCode.QOS_MAX_CPU_PER_JOB, MEMORY: ReasonCode.QOS_MAX_MEMORY_PER_JOB}
_QOS_GRP = {CPU: ReasonCode.QOS_GRP_CPU, MEMORY: ReasonCode.QOS_GRP_MEMORY}
_ASSOC_GRP = {CPU: ReasonCode.ASSOC_GRP_CPU, MEMORY: ReasonCode.ASSOC_GRP_MEMORY}
"""Slurm names a limit reason after its TRES: cpu and memory have their own names,
GPUs and every other resource are GRES."""


_COUNT_CODES = frozenset({ReasonCode.QOS_MAX_JOBS_PER_USER, ReasonCode.ASSOC_GRP_JOBS})
"""Limits on a number of running jobs: the same answer for every job under the key."""


def _amount(resource: str, amount: int) -> str:
    return f"{format_quantity(amount, resource)} {resource}"


def _class_of(job: Job) -> str:
    return job.priority_class or ""


class Limits:
    """Running usage per limit key, the limits in force, and the jobs they hold."""

    def __init__(self) -> None:
        self.classes: dict[str, PriorityClassLimits] = {}
        self.tenants: dict[str, TenantLimits] = {}
        self._usage: dict[Key, Usage] = {}
        self._charges: dict[int, tuple[tuple[Key, ...], dict[str, int]]] = {}
        self._held: dict[Key, dict[int, JobRecord]] = {}
        self._held_at: dict[int, Key] = {}

    @property
    def active(self) -> bool:
        """Whether any PriorityClass or Tenant has limits (otherwise nothing is checked)."""
        return bool(self.classes or self.tenants)

    # ------------------------------------------------------------------ configuration

    def set_class(self, name: str, limits: PriorityClassLimits | None) -> bool:
        """Set (None: remove) a class's limits; whether they changed."""
        old = self.classes.pop(name, None)
        if limits is not None:
            self.classes[name] = limits
        return old != limits

    def set_tenant(self, name: str, limits: TenantLimits | None) -> bool:
        """Set (None: remove) a tenant's limits; whether they changed."""
        old = self.tenants.pop(name, None)
        if limits is not None:
            self.tenants[name] = limits
        return old != limits

    # ------------------------------------------------------------------ usage

    def usage(self, key: Key) -> Usage:
        """The running usage charged to ``key`` (empty when nothing is)."""
        return self._usage.get(key) or Usage()

    def charge(
        self, rec: JobRecord, tenants: Mapping[str, Tenant], counts: Mapping[str, int]
    ) -> None:
        """Charge an admitted job (``counts``: its pod sets' admitted task counts)."""
        if rec.id in self._charges:
            return
        job = rec.job
        pc = _class_of(job)
        keys: tuple[Key, ...] = (
            ("user", pc, job.user),
            ("class", pc, ""),
            *(("tenant", t, "") for t in tenant_chain(job.tenant, tenants)),
        )
        tres = job_tres(rec.shape, counts)
        for key in keys:
            usage = self._usage.setdefault(key, Usage())
            usage.jobs += 1
            for resource, amount in tres.items():
                usage.tres[resource] = usage.tres.get(resource, 0) + amount
        self._charges[rec.id] = (keys, tres)

    def release(self, job_id: int) -> tuple[Key, ...]:
        """Take back what an ending job was charged; the keys it was charged to."""
        charge = self._charges.pop(job_id, None)
        if charge is None:
            return ()
        keys, tres = charge
        for key in keys:
            usage = self._usage[key]
            usage.jobs -= 1
            for resource, amount in tres.items():
                usage.tres[resource] -= amount
            if usage.jobs == 0:
                del self._usage[key]
        return keys

    # ------------------------------------------------------------------ checking

    def check(self, rec: JobRecord, tenants: Mapping[str, Tenant]) -> tuple[Key, Reason] | None:
        """The first limit starting ``rec`` now would break, as ``(key, reason)``;
        QOS limits first, then the tenant's and its ancestors' (Slurm's order)."""
        job = rec.job
        need = job_tres(rec.shape)
        if job.priority_class is not None:
            limits = self.classes.get(job.priority_class)
            if limits is not None:
                found = self._check_class(rec, job.priority_class, limits, need)
                if found is not None:
                    return found
        if self.tenants:
            for tenant in tenant_chain(job.tenant, tenants):
                tenant_limits = self.tenants.get(tenant)
                if tenant_limits is not None:
                    found = self._check_tenant(tenant, tenant_limits, need)
                    if found is not None:
                        return found
        return None

    def _check_class(
        self, rec: JobRecord, pc: str, limits: PriorityClassLimits, need: dict[str, int]
    ) -> tuple[Key, Reason] | None:
        job = rec.job
        class_key: Key = ("class", pc, "")
        for resource, limit in sorted((limits.max_tres_per_job or {}).items()):
            if need.get(resource, 0) > limit:
                code = _PER_JOB.get(resource, ReasonCode.QOS_MAX_GRES_PER_JOB)
                message = (
                    f"{code}: job {job.id} requests {_amount(resource, need[resource])}, "
                    f"PriorityClass {pc} allows {format_quantity(limit, resource)} per job"
                )
                return class_key, Reason(
                    code,
                    message,
                    {
                        "priorityClass": pc,
                        "limit": "maxTRESPerJob",
                        "resource": resource,
                        "requested": need[resource],
                        "max": limit,
                    },
                )
        wall = limits.max_wall
        if wall is not None and job.time_limit is not None and job.time_limit > wall:
            code = ReasonCode.QOS_MAX_WALL
            message = (
                f"{code}: job {job.id}'s time limit {format_duration(job.time_limit)} is over "
                f"PriorityClass {pc}'s maxWall {format_duration(wall)}"
            )
            return class_key, Reason(
                code,
                message,
                {"priorityClass": pc, "limit": "maxWall", "timeLimit": job.time_limit, "max": wall},
            )
        user_key: Key = ("user", pc, job.user)
        user = self._usage.get(user_key)
        if limits.max_jobs_per_user is not None:
            running = user.jobs if user is not None else 0
            if running + 1 > limits.max_jobs_per_user:
                code = ReasonCode.QOS_MAX_JOBS_PER_USER
                message = (
                    f"{code}: user {job.user} would run {running + 1} jobs in PriorityClass "
                    f"{pc}, limit {limits.max_jobs_per_user} ({running} running)"
                )
                return user_key, Reason(
                    code,
                    message,
                    {
                        "priorityClass": pc,
                        "user": job.user,
                        "limit": "maxJobsPerUser",
                        "running": running,
                        "max": limits.max_jobs_per_user,
                    },
                )
        if limits.max_tres_per_user:
            for resource, limit, used in _over(limits.max_tres_per_user, user, need):
                code = _PER_USER.get(resource, ReasonCode.QOS_MAX_GRES_PER_USER)
                message = _over_message(
                    code, f"user {job.user}", f" in PriorityClass {pc}", resource, used, need, limit
                )
                return user_key, Reason(
                    code,
                    message,
                    {
                        "priorityClass": pc,
                        "user": job.user,
                        "limit": "maxTRESPerUser",
                        "resource": resource,
                        "requested": need[resource],
                        "inUse": used,
                        "max": limit,
                    },
                )
        if limits.grp_tres:
            for resource, limit, used in _over(limits.grp_tres, self._usage.get(class_key), need):
                code = _QOS_GRP.get(resource, ReasonCode.QOS_GRP_GRES)
                message = _over_message(
                    code, f"PriorityClass {pc}", "", resource, used, need, limit
                )
                return class_key, Reason(
                    code,
                    message,
                    {
                        "priorityClass": pc,
                        "limit": "grpTRES",
                        "resource": resource,
                        "requested": need[resource],
                        "inUse": used,
                        "max": limit,
                    },
                )
        return None

    def _check_tenant(
        self, tenant: str, limits: TenantLimits, need: dict[str, int]
    ) -> tuple[Key, Reason] | None:
        key: Key = ("tenant", tenant, "")
        usage = self._usage.get(key)
        if limits.max_jobs is not None:
            running = usage.jobs if usage is not None else 0
            if running + 1 > limits.max_jobs:
                code = ReasonCode.ASSOC_GRP_JOBS
                message = (
                    f"{code}: tenant {tenant} would run {running + 1} jobs, limit "
                    f"{limits.max_jobs} ({running} running)"
                )
                return key, Reason(
                    code,
                    message,
                    {
                        "tenant": tenant,
                        "limit": "maxJobs",
                        "running": running,
                        "max": limits.max_jobs,
                    },
                )
        if limits.grp_tres:
            for resource, limit, used in _over(limits.grp_tres, usage, need):
                code = _ASSOC_GRP.get(resource, ReasonCode.ASSOC_GRP_GRES)
                message = _over_message(code, f"tenant {tenant}", "", resource, used, need, limit)
                return key, Reason(
                    code,
                    message,
                    {
                        "tenant": tenant,
                        "limit": "grpTRES",
                        "resource": resource,
                        "requested": need[resource],
                        "inUse": used,
                        "max": limit,
                    },
                )
        return None

    # ------------------------------------------------------------------ held jobs

    def hold(self, rec: JobRecord, key: Key) -> None:
        """Index a pending job under the key whose limit holds it."""
        self.forget(rec)
        self._held.setdefault(key, {})[rec.id] = rec
        self._held_at[rec.id] = key

    def held_key(self, job_id: int) -> Key | None:
        return self._held_at.get(job_id)

    def forget(self, rec: JobRecord) -> None:
        """``rec`` is no longer held (it left, or is being looked at again)."""
        key = self._held_at.pop(rec.id, None)
        if key is None:
            return
        bucket = self._held[key]
        del bucket[rec.id]
        if not bucket:
            del self._held[key]

    def take(self, keys: Iterable[Key]) -> list[tuple[JobRecord, Key]]:
        """Un-hold and return the jobs held under any of ``keys`` with their key, in queue
        order."""
        taken: list[tuple[JobRecord, Key]] = []
        for key in keys:
            bucket = self._held.pop(key, None)
            if bucket:
                for job_id in bucket:
                    del self._held_at[job_id]
                taken.extend((rec, key) for rec in bucket.values())
        taken.sort(key=lambda item: item[0].key)
        return taken

    def recheck(
        self, keys: Iterable[Key], tenants: Mapping[str, Tenant]
    ) -> tuple[list[JobRecord], list[tuple[JobRecord, Key, Reason]]]:
        """Take the jobs held under ``keys`` and check them again: those free to queue,
        and those still held with their key and reason.

        A job count limit holds every job under its key alike: once the first job
        (in queue order) is held by one again, the others under that key keep their
        reason unchecked, so a release costs one check, not one per held job.
        """
        free: list[JobRecord] = []
        held: list[tuple[JobRecord, Key, Reason]] = []
        stuck: set[Key] = set()
        for rec, old in self.take(keys):
            if old in stuck and rec.waiting is not None:
                held.append((rec, old, rec.waiting))
                continue
            found = self.check(rec, tenants)
            if found is None:
                free.append(rec)
                continue
            key, reason = found
            if key == old and reason.code in _COUNT_CODES:
                stuck.add(key)
            held.append((rec, key, reason))
        return free, held

    def keys_of_class(self, name: str) -> list[Key]:
        """The held keys a change of class ``name``'s limits concerns."""
        return [k for k in self._held if k[0] in ("user", "class") and k[1] == name]

    def keys_of_tenants(self) -> list[Key]:
        """The held keys a change of any tenant's limits (or of the tenant tree) concerns."""
        return [k for k in self._held if k[0] == "tenant"]

    def held(self) -> list[tuple[int, Key]]:
        """Every held job with its key (for snapshots)."""
        return sorted(self._held_at.items())


def _over_message(
    code: ReasonCode,
    who: str,
    where: str,
    resource: str,
    used: int,
    need: Mapping[str, int],
    limit: int,
) -> str:
    total = used + need[resource]
    return (
        f"{code}: {who} would use {_amount(resource, total)}{where}, limit "
        f"{format_quantity(limit, resource)} ({format_quantity(used, resource)} in use)"
    )


def _over(
    limits: Mapping[str, int], usage: Usage | None, need: Mapping[str, int]
) -> Iterable[tuple[str, int, int]]:
    """``(resource, limit, in use)`` for each resource ``need`` would take over its limit."""
    for resource, limit in sorted(limits.items()):
        asked = need.get(resource, 0)
        if not asked:
            continue
        used = usage.tres.get(resource, 0) if usage is not None else 0
        if used + asked > limit:
            yield resource, limit, used
