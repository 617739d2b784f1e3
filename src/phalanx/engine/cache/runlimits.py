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

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from phalanx.engine.explain.reasons import Reason, ReasonCode
from phalanx.engine.queueing.shapes import JobShape
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
        self._held_at: dict[int, tuple[Key, tuple[object, ...], int]] = {}
        """A held job's key, bucket and hold generation (stale heap entries differ)."""
        self._buckets: dict[Key, dict[tuple[object, ...], list[tuple[Any, ...]]]] = {}
        """Per key and bucket, a heap of the held jobs in queue order."""
        self._gen = 0
        self._tentative: dict[Key, Usage] = {}
        """During :meth:`recheck`: what the jobs let go so far would take."""
        self._full: set[Key] = set()

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

    def started(self, admitted: Iterable[JobRecord], tenants: Mapping[str, Tenant]) -> None:
        """The first limits were just set: charge the jobs already running."""
        for rec in admitted:
            if rec.admission is not None:
                counts = {p.name: p.count for p in rec.admission.decision.pod_sets}
                self.charge(rec, tenants, counts)

    def stopped(self) -> None:
        """The last limits are gone: nothing is charged until some are set again."""
        self._usage.clear()
        self._charges.clear()

    # ------------------------------------------------------------------ usage

    def usage(self, key: Key) -> Usage:
        """The running usage charged to ``key`` (empty when nothing is)."""
        return self._usage.get(key) or Usage()

    def _used(self, key: Key) -> Usage | None:
        """Running usage of ``key``, plus what :meth:`recheck` has let go so far."""
        usage = self._usage.get(key)
        extra = self._tentative.get(key) if self._tentative else None
        if extra is None:
            return usage
        tres = dict(usage.tres) if usage is not None else {}
        for resource, amount in extra.tres.items():
            tres[resource] = tres.get(resource, 0) + amount
        return Usage((usage.jobs if usage is not None else 0) + extra.jobs, tres)

    def _keys(self, job: Job, tenants: Mapping[str, Tenant]) -> tuple[Key, ...]:
        pc = _class_of(job)
        return (
            ("user", pc, job.user),
            ("class", pc, ""),
            *(("tenant", t, "") for t in tenant_chain(job.tenant, tenants)),
        )

    def charge(
        self, rec: JobRecord, tenants: Mapping[str, Tenant], counts: Mapping[str, int]
    ) -> None:
        """Charge an admitted job (``counts``: its pod sets' admitted task counts).
        Nothing is charged while no limits are set (see :meth:`started`)."""
        if rec.id in self._charges or not (self.classes or self.tenants):
            return
        keys = self._keys(rec.job, tenants)
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
        user = self._used(user_key)
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
            for resource, limit, used in _over(limits.grp_tres, self._used(class_key), need):
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
        usage = self._used(key)
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

    def hold(self, rec: JobRecord, key: Key, reason: Reason | None = None) -> None:
        """Index a pending job under the key whose limit holds it, in the bucket of what
        would free it (``reason``, by default ``rec.waiting``, says which limit)."""
        self.forget(rec)
        slot = _slot(reason or rec.waiting)
        self._gen += 1
        self._held.setdefault(key, {})[rec.id] = rec
        self._held_at[rec.id] = (key, slot, self._gen)
        heap = self._buckets.setdefault(key, {}).setdefault(slot, [])
        heapq.heappush(heap, (rec.key, rec.id, self._gen, rec))

    def held_key(self, job_id: int) -> Key | None:
        at = self._held_at.get(job_id)
        return at[0] if at is not None else None

    def forget(self, rec: JobRecord) -> None:
        """``rec`` is no longer held (it left, or is being looked at again)."""
        at = self._held_at.pop(rec.id, None)
        if at is None:
            return
        key = at[0]
        members = self._held[key]
        del members[rec.id]
        if not members:
            del self._held[key]
            self._buckets.pop(key, None)

    def recheck(
        self, keys: Iterable[Key], tenants: Mapping[str, Tenant]
    ) -> tuple[list[JobRecord], list[tuple[JobRecord, Key, Reason]]]:
        """Check again the jobs held under ``keys``, whose usage or limits changed: those
        free to queue (in queue order), and those still held with their key and reason.

        After a release only the jobs that the room now free under a key could take
        are looked at, best first: each bucket (a job count, or an amount of one
        resource) is entered while there is room for it, and every job let go counts
        against the room of the ones after it. A key whose limits changed
        (:meth:`keys_of_class`, :meth:`keys_of_tenants`) has every job checked.
        """
        free: list[JobRecord] = []
        held: list[tuple[JobRecord, Key, Reason]] = []
        try:
            for key in dict.fromkeys(keys):
                if key in self._full:
                    members = sorted(self._held.get(key, {}).values(), key=lambda r: r.key)
                    for member in members:
                        self.forget(member)
                        self._decide(member, tenants, free, held)
                else:
                    while (rec := self._next_fitting(key)) is not None:
                        self.forget(rec)
                        self._decide(rec, tenants, free, held)
        finally:
            self._tentative.clear()
            self._full.clear()
        free.sort(key=lambda r: r.key)
        return free, held

    def _decide(
        self,
        rec: JobRecord,
        tenants: Mapping[str, Tenant],
        free: list[JobRecord],
        held: list[tuple[JobRecord, Key, Reason]],
    ) -> None:
        found = self.check(rec, tenants)
        if found is not None:
            held.append((rec, *found))
            return
        free.append(rec)
        # What it would take counts against the jobs looked at after it.
        need = job_tres(rec.shape)
        for key in self._keys(rec.job, tenants):
            usage = self._tentative.setdefault(key, Usage())
            usage.jobs += 1
            for resource, amount in need.items():
                usage.tres[resource] = usage.tres.get(resource, 0) + amount

    def _next_fitting(self, key: Key) -> JobRecord | None:
        """The best held job under ``key`` in a bucket that the room left could free."""
        buckets = self._buckets.get(key)
        if not buckets:
            return None
        best: tuple[object, ...] | None = None
        for slot, heap in list(buckets.items()):
            if slot[0] == "static" or not self._room(key, slot):
                continue
            while heap:
                entry = heap[0]
                at = self._held_at.get(entry[1])
                if at is not None and at[0] == key and at[1] == slot and at[2] == entry[2]:
                    break
                heapq.heappop(heap)
            if not heap:
                del buckets[slot]
                continue
            if best is None or heap[0][:2] < best[:2]:
                best = heap[0]
        if best is None:
            return None
        rec: JobRecord = best[3]  # type: ignore[assignment]
        return rec

    def _room(self, key: Key, slot: tuple[object, ...]) -> bool:
        """Whether the limit of ``key`` that ``slot`` names has room for a job of it."""
        used = self._used(key)
        if slot[0] == "jobs":
            cap = self._job_cap(key)
            return cap is None or (used.jobs if used else 0) < cap
        resource, need = str(slot[1]), int(slot[2])  # type: ignore[call-overload]
        limit = self._tres_cap(key, resource)
        return limit is None or (used.tres.get(resource, 0) if used else 0) + need <= limit

    def _job_cap(self, key: Key) -> int | None:
        if key[0] == "user":
            limits = self.classes.get(key[1])
            return limits.max_jobs_per_user if limits is not None else None
        if key[0] == "tenant":
            tenant = self.tenants.get(key[1])
            return tenant.max_jobs if tenant is not None else None
        return None

    def _tres_cap(self, key: Key, resource: str) -> int | None:
        caps: Mapping[str, int] | None = None
        if key[0] == "user":
            limits = self.classes.get(key[1])
            caps = limits.max_tres_per_user if limits is not None else None
        elif key[0] == "class":
            limits = self.classes.get(key[1])
            caps = limits.grp_tres if limits is not None else None
        else:
            tenant = self.tenants.get(key[1])
            caps = tenant.grp_tres if tenant is not None else None
        return caps.get(resource) if caps else None

    def keys_of_class(self, name: str) -> list[Key]:
        """The held keys a change of class ``name``'s limits concerns (each is checked in
        full by the next :meth:`recheck`)."""
        keys = [k for k in self._held if k[0] in ("user", "class") and k[1] == name]
        self._full.update(keys)
        return keys

    def keys_of_tenants(self) -> list[Key]:
        """The held keys a change of any tenant's limits (or of the tenant tree) concerns
        (each is checked in full by the next :meth:`recheck`)."""
        keys = [k for k in self._held if k[0] == "tenant"]
        self._full.update(keys)
        return keys

    def held(self) -> list[tuple[int, Key]]:
        """Every held job with its key (for snapshots)."""
        return sorted((job_id, at[0]) for job_id, at in self._held_at.items())


def _slot(reason: Reason | None) -> tuple[object, ...]:
    """What would let a held job go: a running job fewer (``("jobs",)``), ``need`` of a
    resource (``("tres", resource, need)``), or only a change of the limits."""
    details = reason.details if reason is not None else {}
    limit = details.get("limit")
    if limit in ("maxJobsPerUser", "maxJobs"):
        return ("jobs",)
    if limit in ("maxTRESPerUser", "grpTRES"):
        return ("tres", details["resource"], details["requested"])
    return ("static",)


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
