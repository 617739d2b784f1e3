"""Why a job is where it is: the facts behind ``phalanx explain JOB``, read from the engine.

:func:`explain_job` gathers, for one job, what the engine knows: its state,
its ClusterQueue and LocalQueue, its rank in its ClusterQueue and in the
cluster, its priority (with the preset's factors when the ordering policy
gives them), its pending reason, the quota numbers per flavor and resource
(nominal, usage, borrowed, what the cohort can lend, what is missing and
where), the gang shortage for a job whose quota fits but whose nodes don't,
the jobs ahead of it, the reservations that concern it and its estimated
start. For an admitted job: where it runs, with which flavors, and whether
it borrows.

It is a read-only query, run per request and not per cycle: one pass over
the engine's jobs, O(jobs), and nothing it returns refers back to engine
state. Amounts are integers in the engine's base units (GPUs and other
counts as they are, ``cpu`` in millicores, ``memory`` in bytes); times are
epoch seconds.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from phalanx.engine.cache.quota import FlavorResource, available, binding_limit, potential_available

if TYPE_CHECKING:
    from phalanx.engine.backfill.plans import Reservation
    from phalanx.engine.cache.cluster import ClusterQueueInfo
    from phalanx.engine.engine import Engine
    from phalanx.engine.explain.reasons import Reason
    from phalanx.engine.state import JobRecord

__all__ = [
    "AdmissionFacts",
    "Explanation",
    "GangShortage",
    "Position",
    "QueuedJob",
    "QuotaLine",
    "ReservationFacts",
    "explain_job",
]

AHEAD = 5
"""How many of the jobs ahead of a pending job an explanation names."""

PENDING = "pending"
"""Queued in its ClusterQueue."""
WAITING = "waiting"
"""Pending without a ClusterQueue to queue in (queue missing, stopped LocalQueue,
namespace mismatch, requeue backoff)."""
ADMITTED = "admitted"
"""Holds quota and nodes (admitted, running, or being evicted)."""


@dataclass(frozen=True, slots=True)
class Position:
    """1-based ``rank`` among ``of`` pending jobs, in the engine's order."""

    rank: int
    of: int

    def to_dict(self) -> dict[str, int]:
        return {"rank": self.rank, "of": self.of}


@dataclass(frozen=True, slots=True)
class QueuedJob:
    """A pending job ahead of the explained one."""

    id: int
    priority: float
    cluster_queue: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "priority": self.priority, "cluster_queue": self.cluster_queue}


@dataclass(frozen=True, slots=True)
class QuotaLine:
    """One flavor-resource of the job's ClusterQueue, against the job's whole request."""

    flavor: str
    resource: str
    requested: int
    """What the job asks for in total (every pod set's count x per-task request)."""
    nominal: int
    usage: int
    borrowed: int
    """Usage above the ClusterQueue's nominal quota."""
    borrowing_limit: int | None
    lending_limit: int | None
    free: int
    """Unused nominal quota of the ClusterQueue."""
    available: int
    """What the ClusterQueue can use now: its free quota plus what its cohort lends."""
    cohort: str | None
    cohort_available: int | None
    """What the parent cohort can still hand out to its members."""
    from_cohort: int
    """The part of ``available`` that would be borrowed from the cohort."""
    potential: int
    """The most the ClusterQueue could ever use, on an idle cluster."""
    reserved: int
    """Of ``usage``, what backfill reservations of other jobs hold."""
    short_by: int
    """``requested - available`` when positive, else 0."""
    short_in: str | None
    """``ClusterQueue/<name>`` or ``Cohort/<name>``: where the binding limit is."""
    limit: str | None
    """Which limit binds there: ``nominalQuota``, ``borrowingLimit`` or ``quota``."""

    @property
    def never_fits(self) -> bool:
        return self.requested > self.potential

    def to_dict(self) -> dict[str, Any]:
        return {
            "flavor": self.flavor,
            "resource": self.resource,
            "requested": self.requested,
            "nominal": self.nominal,
            "usage": self.usage,
            "borrowed": self.borrowed,
            "borrowing_limit": self.borrowing_limit,
            "lending_limit": self.lending_limit,
            "free": self.free,
            "available": self.available,
            "cohort": self.cohort,
            "cohort_available": self.cohort_available,
            "from_cohort": self.from_cohort,
            "potential": self.potential,
            "reserved": self.reserved,
            "short_by": self.short_by,
            "short_in": self.short_in,
            "limit": self.limit,
            "never_fits": self.never_fits,
        }


@dataclass(frozen=True, slots=True)
class GangShortage:
    """A pod set whose quota fits but whose tasks do not all fit on the flavor's nodes now."""

    pod_set: str
    flavor: str
    tasks_needed: int
    tasks_fit: int
    """The largest number of the pod set's tasks that fit on the nodes now."""
    per_task: dict[str, int]
    tasks_per_node: int | None
    exclusive: bool
    topology: str | None
    nodes: int
    """Nodes of the flavor."""
    schedulable: int
    """Of those, nodes up (not drained or down)."""
    idle: int
    """Schedulable nodes running nothing."""
    free: dict[str, int]
    """Free capacity on the schedulable nodes, for each resource a task requests."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "pod_set": self.pod_set,
            "flavor": self.flavor,
            "tasks_needed": self.tasks_needed,
            "tasks_fit": self.tasks_fit,
            "per_task": dict(self.per_task),
            "tasks_per_node": self.tasks_per_node,
            "exclusive": self.exclusive,
            "topology": self.topology,
            "nodes": self.nodes,
            "schedulable": self.schedulable,
            "idle": self.idle,
            "free": dict(self.free),
        }


@dataclass(frozen=True, slots=True)
class ReservationFacts:
    """A backfill reservation: nodes held for ``job_id`` until it starts at ``start``."""

    job_id: int
    priority: float | None
    cluster_queue: str
    start: float
    nodes: tuple[str, ...]
    ahead: bool
    """Its job sorts before the explained job."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "priority": self.priority,
            "cluster_queue": self.cluster_queue,
            "start": self.start,
            "nodes": list(self.nodes),
            "ahead": self.ahead,
        }


@dataclass(frozen=True, slots=True)
class AdmissionFacts:
    """Where an admitted job runs and on what terms."""

    cluster_queue: str
    flavors: dict[str, dict[str, str]]
    """Pod set -> resource -> flavor."""
    nodes: tuple[str, ...]
    borrowing: bool
    usage: tuple[tuple[str, str, int], ...]
    """``(flavor, resource, amount)`` charged to the ClusterQueue."""
    admitted_at: float
    priority: float
    evicting: bool
    evicted_for: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "cluster_queue": self.cluster_queue,
            "flavors": {k: dict(v) for k, v in self.flavors.items()},
            "nodes": list(self.nodes),
            "borrowing": self.borrowing,
            "usage": [{"flavor": f, "resource": r, "amount": a} for f, r, a in self.usage],
            "admitted_at": self.admitted_at,
            "priority": self.priority,
            "evicting": self.evicting,
            "evicted_for": self.evicted_for,
        }


@dataclass(frozen=True, slots=True)
class Explanation:
    """What the engine knows about one job (see the module docstring for units).

    ``to_dict()`` keys, all always present: ``job_id``, ``state`` (``pending``,
    ``waiting`` or ``admitted``), ``cluster_queue``, ``local_queue``, ``cohort``,
    ``priority`` (``{"total", "factors"}``; ``factors`` is null when the preset
    gives none), ``position`` (``{"queue", "cluster"}``, each ``{"rank", "of"}``
    or null), ``reason`` (``{"code", "message", "details"}`` or null), ``quota``
    (list), ``gang`` (or null), ``ahead`` (list), ``blocked_by`` (or null),
    ``reservation_ahead`` (or null), ``reservation`` (or null),
    ``estimated_start`` (or null), ``no_estimate`` (why there is none, or null),
    ``admission`` (or null).
    """

    job_id: int
    state: str
    cluster_queue: str | None
    local_queue: str | None
    cohort: str | None
    priority: float
    priority_factors: dict[str, float] | None
    queue_position: Position | None
    cluster_position: Position | None
    reason_code: str | None
    reason_message: str | None
    reason_details: dict[str, Any] = field(default_factory=dict)
    quota: tuple[QuotaLine, ...] = ()
    gang: GangShortage | None = None
    ahead: tuple[QueuedJob, ...] = ()
    blocked_by: QueuedJob | None = None
    reservation_ahead: ReservationFacts | None = None
    reservation: ReservationFacts | None = None
    estimated_start: float | None = None
    no_estimate: str | None = None
    admission: AdmissionFacts | None = None

    @property
    def shortages(self) -> tuple[QuotaLine, ...]:
        return tuple(line for line in self.quota if line.short_by > 0)

    def to_dict(self) -> dict[str, Any]:
        reason = None
        if self.reason_code is not None:
            reason = {
                "code": self.reason_code,
                "message": self.reason_message,
                "details": dict(self.reason_details),
            }
        return {
            "job_id": self.job_id,
            "state": self.state,
            "cluster_queue": self.cluster_queue,
            "local_queue": self.local_queue,
            "cohort": self.cohort,
            "priority": {
                "total": self.priority,
                "factors": dict(self.priority_factors) if self.priority_factors else None,
            },
            "position": {
                "queue": self.queue_position.to_dict() if self.queue_position else None,
                "cluster": self.cluster_position.to_dict() if self.cluster_position else None,
            },
            "reason": reason,
            "quota": [line.to_dict() for line in self.quota],
            "gang": self.gang.to_dict() if self.gang else None,
            "ahead": [j.to_dict() for j in self.ahead],
            "blocked_by": self.blocked_by.to_dict() if self.blocked_by else None,
            "reservation_ahead": self.reservation_ahead.to_dict()
            if self.reservation_ahead
            else None,
            "reservation": self.reservation.to_dict() if self.reservation else None,
            "estimated_start": self.estimated_start,
            "no_estimate": self.no_estimate,
            "admission": self.admission.to_dict() if self.admission else None,
        }


# --------------------------------------------------------------------------- gathering


def explain_job(engine: Engine, job_id: int) -> Explanation | None:
    """The engine's facts about ``job_id``; None when the engine does not know it
    (finished, cancelled, or still held back before the engine)."""
    rec = engine.jobs.get(job_id)
    if rec is None:
        return None
    factors = _factors(engine, job_id)
    if rec.admission is not None:
        return _admitted(engine, rec, factors)
    reason = engine.explain(job_id)
    code, message, details = _reason_parts(reason)
    sq = rec.queue
    info = engine.cache.cluster_queues.get(rec.cluster_queue) if rec.cluster_queue else None
    state = PENDING if sq is not None else WAITING
    queue_pos, cluster_pos, ahead = _positions(engine, rec)
    quota: tuple[QuotaLine, ...] = ()
    gang = None
    if info is not None and sq is not None:
        quota = _quota_lines(engine, rec, info, details)
        gang = _gang(engine, rec, details)
    blocked_by = None
    blocker = details.get("blockedBy")
    if isinstance(blocker, int):
        other = engine.jobs.get(blocker)
        if other is not None:
            blocked_by = QueuedJob(blocker, other.priority, other.cluster_queue)
    own = engine.reservation(job_id)
    return Explanation(
        job_id=job_id,
        state=state,
        cluster_queue=rec.cluster_queue,
        local_queue=rec.local_queue,
        cohort=_cohort(info),
        priority=rec.priority,
        priority_factors=factors,
        queue_position=queue_pos,
        cluster_position=cluster_pos,
        reason_code=code,
        reason_message=message,
        reason_details=details,
        quota=quota,
        gang=gang,
        ahead=ahead,
        blocked_by=blocked_by,
        reservation_ahead=_reservation_ahead(engine, rec, info) if sq is not None else None,
        reservation=_reservation_facts(engine, own, rec) if own is not None else None,
        estimated_start=engine.estimated_start(job_id),
        no_estimate=engine.no_estimate_why(job_id),
    )


def _factors(engine: Engine, job_id: int) -> dict[str, float] | None:
    """The preset's breakdown of a pending job's priority (None for an admitted job)."""
    factors = engine.priority_factors(job_id)
    return dict(factors) if factors else None


def _reason_parts(reason: Reason | None) -> tuple[str | None, str | None, dict[str, Any]]:
    if reason is None:
        return None, None, {}
    # Reasons from any policy (quota, limits, ...) render the same way: code, message, details.
    code = reason.code
    return str(getattr(code, "value", code)), reason.message, dict(reason.details)


def _cohort(info: ClusterQueueInfo | None) -> str | None:
    if info is None or info.node.parent is None:
        return None
    return info.node.parent.name


def _positions(
    engine: Engine, rec: JobRecord
) -> tuple[Position | None, Position | None, tuple[QueuedJob, ...]]:
    """Ranks in the ClusterQueue and the cluster among queued jobs, and the first jobs
    ahead in the ClusterQueue: one pass over the engine's jobs."""
    sq = rec.queue
    if sq is None:
        return None, None, ()
    cqq = sq.cq
    key = rec.key
    in_cluster = before_cluster = in_queue = 0
    ahead: list[JobRecord] = []
    for other in engine.jobs.values():
        other_sq = other.queue
        if other_sq is None or other.admission is not None:
            continue
        in_cluster += 1
        first = other.key < key
        if first:
            before_cluster += 1
        if other_sq.cq is cqq:
            in_queue += 1
            if first:
                ahead.append(other)
    top = heapq.nsmallest(AHEAD, ahead, key=lambda r: r.key)
    return (
        Position(len(ahead) + 1, in_queue),
        Position(before_cluster + 1, in_cluster),
        tuple(QueuedJob(r.id, r.priority, r.cluster_queue) for r in top),
    )


def _requested(rec: JobRecord) -> dict[str, int]:
    totals: dict[str, int] = {}
    for pod_set in rec.shape.pod_sets:
        for resource, amount in pod_set.requests:
            if amount:
                totals[resource] = totals.get(resource, 0) + pod_set.count * amount
    return totals


def _held_quota(
    engine: Engine, rec: JobRecord, cluster_queue: str
) -> tuple[dict[FlavorResource, int], dict[FlavorResource, int]]:
    """Quota of ``cluster_queue`` held by backfill reservations: the job's own, the others'."""
    own: dict[FlavorResource, int] = {}
    others: dict[FlavorResource, int] = {}
    for res in engine.reservations():
        if res.cluster_queue != cluster_queue:
            continue
        target = own if res.job_id == rec.id else others
        for fr, amount in res.quota:
            target[fr] = target.get(fr, 0) + amount
    return own, others


def _quota_lines(
    engine: Engine, rec: JobRecord, info: ClusterQueueInfo, details: dict[str, Any]
) -> tuple[QuotaLine, ...]:
    node = info.node
    parent = node.parent
    own, others = _held_quota(engine, rec, info.name)
    lines: list[QuotaLine] = []
    for resource, requested in _requested(rec).items():
        group = info.group_for.get(resource)
        if group is None:
            continue
        for flavor in group.flavors:
            fr = (flavor, resource)
            # Quota held for the job's own reservation is the job's: count it as available.
            mine = own.get(fr, 0)
            nominal = node.nominal.get(fr, 0)
            usage = node.usage.get(fr, 0) - mine
            free = max(0, nominal - usage)
            potential = potential_available(node, fr)
            can_use = min(potential, max(0, available(node, fr)) + mine)
            short = max(0, requested - can_use)
            short_in = limit = None
            if short:
                where, limit = binding_limit(node, fr)
                short_in = f"{where.kind}/{where.name}"
            lines.append(
                QuotaLine(
                    flavor=flavor,
                    resource=resource,
                    requested=requested,
                    nominal=nominal,
                    usage=usage,
                    borrowed=max(0, usage - nominal),
                    borrowing_limit=node.borrowing_limit.get(fr),
                    lending_limit=node.lending_limit.get(fr),
                    free=free,
                    available=can_use,
                    cohort=parent.name if parent is not None else None,
                    cohort_available=max(0, available(parent, fr)) + mine if parent else None,
                    from_cohort=max(0, can_use - free) if parent is not None else 0,
                    potential=potential,
                    reserved=others.get(fr, 0),
                    short_by=short,
                    short_in=short_in,
                    limit=limit,
                )
            )
    # The flavor and resource the reason names come first.
    named = details.get("flavor"), details.get("resource")
    lines.sort(key=lambda line: (line.flavor != named[0], line.resource != named[1]))
    return tuple(lines)


def _gang(engine: Engine, rec: JobRecord, details: dict[str, Any]) -> GangShortage | None:
    fits = details.get("maxTasks")
    flavor = details.get("flavor")
    if not isinstance(fits, int) or not isinstance(flavor, str):
        return None
    name = details.get("podSet")
    shape = next((p for p in rec.shape.pod_sets if p.name == name), None)
    if shape is None:
        return None
    per_task = {r: a for r, a in shape.requests if a}
    index = engine.cache.flavor_nodes.get(flavor)
    model = engine.cache.flavors.get(flavor)
    nodes = schedulable = idle = 0
    free = dict.fromkeys(per_task, 0)
    if index is not None:
        for slot in index.members:
            nodes += 1
            if not slot.schedulable:
                continue
            schedulable += 1
            idle += slot.idle
            for resource in free:
                free[resource] += max(0, slot.free(resource))
    return GangShortage(
        pod_set=shape.name,
        flavor=flavor,
        tasks_needed=shape.count,
        tasks_fit=fits,
        per_task=per_task,
        tasks_per_node=shape.tasks_per_node,
        exclusive=shape.exclusive,
        topology=model.topology_name if model is not None else None,
        nodes=nodes,
        schedulable=schedulable,
        idle=idle,
        free=free,
    )


def _reservation_facts(engine: Engine, res: Reservation, rec: JobRecord) -> ReservationFacts:
    holder = engine.jobs.get(res.job_id)
    return ReservationFacts(
        job_id=res.job_id,
        priority=holder.priority if holder is not None else None,
        cluster_queue=res.cluster_queue,
        start=res.start,
        nodes=tuple(res.nodes),
        ahead=holder is not None
        and holder is not rec
        and engine.plan_order(holder) < engine.plan_order(rec),
    )


def _reservation_ahead(
    engine: Engine, rec: JobRecord, info: ClusterQueueInfo | None
) -> ReservationFacts | None:
    """The first reservation, in its job's order, that holds nodes of the job's flavors
    or belongs to its ClusterQueue, and whose job comes before it (``Engine.plan_order``)."""
    flavors = set(info.flavors) if info is not None else set()
    nodes = engine.cache.nodes
    mine = engine.plan_order(rec)
    for res in engine.reservations():
        holder = engine.jobs.get(res.job_id)
        if holder is None or holder is rec or not engine.plan_order(holder) < mine:
            continue
        same_queue = res.cluster_queue == rec.cluster_queue
        if same_queue or any(
            index.name in flavors
            for name in res.nodes
            if (slot := nodes.get(name)) is not None
            for index in slot.flavors
        ):
            return _reservation_facts(engine, res, rec)
    return None


def _admitted(engine: Engine, rec: JobRecord, factors: dict[str, float] | None) -> Explanation:
    adm = rec.admission
    assert adm is not None
    decision = adm.decision
    info = engine.cache.cluster_queues.get(adm.cluster_queue)
    facts = AdmissionFacts(
        cluster_queue=adm.cluster_queue,
        flavors={p.name: dict(p.flavors) for p in decision.pod_sets},
        nodes=tuple(decision.nodes),
        borrowing=decision.borrowing,
        usage=tuple((f, r, a) for (f, r), a in sorted(adm.usage.items())),
        admitted_at=adm.admitted_at,
        priority=decision.priority,
        evicting=adm.evicting,
        evicted_for=rec.evicted_for,
    )
    return Explanation(
        job_id=rec.id,
        state=ADMITTED,
        cluster_queue=adm.cluster_queue,
        local_queue=rec.local_queue,
        cohort=_cohort(info),
        priority=rec.priority,
        priority_factors=factors,
        queue_position=None,
        cluster_position=None,
        reason_code=None,
        reason_message=None,
        admission=facts,
    )
