"""The admission engine: a deterministic state machine, ``apply(event)`` and ``cycle(now)``.

Everything the engine knows arrives through :meth:`Engine.apply`; everything
it decides leaves :meth:`Engine.cycle` as a list of decisions. It reads no
clock, does no I/O and keeps no globals, so the live control plane and the
simulator drive the same code, and the same events in the same order give the
same decisions.

A cycle runs rounds in the manner of Kueue's scheduler: take the head of
every ClusterQueue that is neither stopped nor blocked, assign flavors and
nodes to each against the current state, order the entries (non-borrowing
first, then priority, then submit time, then id) and process them in that
order, re-checking an entry when an earlier one of the round took capacity.
Admitted heads are replaced by the next job of their queue in the next round;
a head that does not fit parks its shape (BestEffortFIFO) or its queue
(StrictFIFO). Rounds repeat until no queue has a head, so one cycle admits
everything that fits, not one job per queue.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from phalanx.engine.afs import LocalQueueUsage, base_units
from phalanx.engine.assigner import (
    NO_CANDIDATES,
    PREEMPT,
    RECLAIM,
    Assignment,
    FlavorAssigner,
    Oracle,
    flavor_matches,
    node_filter,
)
from phalanx.engine.backfill import (
    Holds,
    QuotaEnds,
    Reservation,
    Timeline,
    plan_in_domains,
    plan_nodes,
    plan_quota,
    planned_end,
    round_up,
)
from phalanx.engine.cache import ClusterCache, ClusterQueueInfo
from phalanx.engine.capacity import MILLI, Devices, NodeSlot
from phalanx.engine.config import EngineConfig, Policies, PreemptionConfig
from phalanx.engine.decisions import (
    Admit,
    Deactivate,
    Decision,
    Evict,
    NodeAssignment,
    Pending,
    PodSetAssignment,
)
from phalanx.engine.events import (
    Adopt,
    Cancel,
    Delete,
    Event,
    Finish,
    PodsReady,
    Requeue,
    Submit,
    TenantUsage,
    Upsert,
)
from phalanx.engine.explain import (
    reason_for_failure,
    signature,
    strict_fifo_reason,
    waiting_reason,
    wake_conditions,
)
from phalanx.engine.fairsharing import (
    dominant_share,
    node_weight,
    share_and_ratio,
    weighted_share,
)
from phalanx.engine.limits import Key, Limits
from phalanx.engine.namespaces import selector_matches
from phalanx.engine.ordering import PriorityContext, PriorityTables, TenantShare, job_facts
from phalanx.engine.placement import WorkloadProfile, plan_devices, unit_amounts
from phalanx.engine.preemption import Candidate, Preemptor, considers, contested, may_preempt
from phalanx.engine.priority.tables import build_tables
from phalanx.engine.queues import ClusterQueueQueue, QueueManager, ShapeQueue
from phalanx.engine.quota import FlavorResource, QuotaNode, available
from phalanx.engine.reasons import Reason, ReasonCode
from phalanx.engine.shapes import JobShape, PodSetShape, ShapeInterner
from phalanx.engine.state import Admission, Allocation, JobRecord
from phalanx.model import (
    GPU,
    GPU_MILLI,
    PODS,
    ClusterQueue,
    Cohort,
    Job,
    LocalQueue,
    Node,
    NodeState,
    PriorityClass,
    QueueingStrategy,
    ResourceFlavor,
    StopPolicy,
    Tenant,
    Topology,
)
from phalanx.model.priorityannotations import PRESET_ANNOTATION

__all__ = ["Engine"]


Entry = tuple[int, tuple[float, float, int], JobRecord, ShapeQueue, Assignment]
"""A head in a round: ``(borrowing height, sort key, job, its shape queue, assignment)``."""


Probe = Callable[[str, int], None]


def _entry_order(entry: Entry) -> tuple[int, tuple[float, float, int]]:
    return entry[0], entry[1]


def _local_queue_key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


_PREEMPTION_WORDS = {
    "InClusterQueue": "prioritization in the ClusterQueue",
    "InCohortReclamation": "reclamation within the cohort",
    "InCohortFairSharing": "Fair Sharing within the cohort",
    "InCohortReclaimWhileBorrowing": "reclamation within the cohort while borrowing",
}


def _path(info: ClusterQueueInfo) -> str:
    """``/root-cohort/.../cluster-queue``, as Kueue writes preemptor and preemptee paths."""
    names = [info.name, *(n.name for n in info.node.ancestors())]
    return "/" + "/".join(reversed(names))


def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _seconds(s: float) -> str:
    return f"{s:g}s"


def _no_longer_fits(cluster_queue: str) -> Reason:
    return Reason(
        ReasonCode.PENDING,
        "Workload no longer fits after processing another workload",
        {"clusterQueue": cluster_queue},
    )


def _pods_ready_block() -> Reason:
    return Reason(
        ReasonCode.WAITING_FOR_PODS_READY,
        "Waiting for all admitted workloads to be in PodsReady condition",
    )


def _recorded_devices(shape: PodSetShape, placed: NodeAssignment) -> Devices:
    """The GPU devices an admission recorded for ``placed`` (none recorded, or an
    exclusive pod set, which holds every device: empty, to be planned again)."""
    if not placed.gpus or shape.exclusive:
        return ()
    share = shape.request(GPU_MILLI)
    milli = share if share else MILLI
    return tuple((index, milli) for index in placed.gpus)


class Engine:
    """Quotas, cohorts, gang placement and ordering; pure and incremental."""

    def __init__(self, config: EngineConfig | None = None) -> None:
        self.config = config or EngineConfig()
        self.workload = WorkloadProfile()
        """The task shapes submitted so far (fragmentation-aware placement reads it)."""
        self.policies = Policies.for_config(self.config, self.workload)
        self.cache = ClusterCache()
        self.queues = QueueManager()
        self.assigner = FlavorAssigner(
            self.cache,
            self.policies.placement,
            self.config.ignore_undeclared_resources,
            topology_single_nodes=self.config.topology_policy == "slurm-tree",
        )
        self._shapes = ShapeInterner(with_time_limits=self.config.backfill is not None)
        self._objects: dict[tuple[str, str], Any] = {}
        self.jobs: dict[int, JobRecord] = {}
        self._waiting: dict[int, JobRecord] = {}
        self._pending_by_tenant: dict[str, dict[int, JobRecord]] = {}
        self._admitted_by_cq: dict[str, dict[int, JobRecord]] = {}
        self._shares: dict[str, TenantShare] = {}
        self._prio_time: float | None = None
        self._prio_dirty = False
        self._tables: PriorityTables | None = None
        """Tree- and queue-level priority inputs; None: rebuilt at the next use."""
        afs = self.config.admission_fair_sharing
        self._afs = LocalQueueUsage(afs) if afs is not None else None
        """Admission Fair Sharing's LocalQueue usage (None: off)."""
        self._lq_scores: dict[str, float] = {}
        """LocalQueue scores computed since the last change of their usage."""
        self._afs_stale: set[str] = set()
        """ClusterQueues whose jobs' keys hold LocalQueue scores that have changed."""
        self._outbox: list[Decision] = []
        self._drain: dict[str, None] = {}
        self._now = 0.0
        self._unready: dict[int, float] = {}
        """Admitted jobs not yet PodsReady, with their waitForPodsReady deadline."""
        self._backoff: dict[int, JobRecord] = {}
        """Requeued jobs waiting for their requeueAt."""
        self._reserved: list[tuple[ClusterQueueInfo, FlavorResource, int, JobRecord]] = []
        """Quota held for this round for a lender's head that cannot reclaim it."""
        self._parked_while_reserved: list[tuple[Any, JobRecord]] = []
        self._held: dict[str, list[tuple[ClusterQueueInfo, FlavorResource, int]]] = {}
        """The same, held while a blocked StrictFIFO head stays blocked: Kueue
        re-nominates that head every cycle, so its reservation never lapses."""
        self._reservations: dict[int, Reservation] = {}
        self._holds = Holds()
        """Whole nodes held for reservations (see engine/backfill.py)."""
        self._bf_last: float | None = None
        """When the last backfill pass ran (plans are made only in passes)."""
        self._pass_cycle = False
        """This cycle ends with a backfill pass."""
        self._bf_waiting: dict[int, JobRecord] = {}
        """The jobs the next backfill pass tests (with the reservations' jobs): heads that
        failed since the last pass and the jobs that pass tested."""
        self._retried: dict[int, Reservation] = {}
        """Reservations opened for their own job's attempt in this cycle."""
        self._ends: dict[str, list[tuple[float, dict[FlavorResource, int], str]]] | None = None
        self._quota_ends: dict[str, QuotaEnds] = {}
        """Per quota tree, the sums of what its running jobs give back (until they change)."""
        """Admitted jobs' planned ends (see :meth:`_running_ends`); None: to rebuild."""
        self._timeline: Timeline | None = None
        """When the running jobs end, per node: built at the first pass, then kept up to
        date as jobs start and end (None: to rebuild)."""
        self._no_room: dict[tuple[object, str], float] = {}
        """This cycle: the shortest end for which a shape found no room on held nodes in
        a ClusterQueue (within a cycle held nodes only fill up)."""
        self._victim_cache: dict[str, tuple[ClusterQueue, PreemptionConfig]] = {}
        """Per ClusterQueue: its model and the preemption settings of its jobs."""
        self._protection_ends: set[float] = set()
        """When the minimum runtimes that kept jobs from being preempted end."""
        self._estimates: dict[int, float] = {}
        """Planned start times of pending jobs, from the last backfill pass."""
        self._planned: set[int] = set()
        """The jobs the last backfill pass tested, and those reserved for since."""
        self._borrows: dict[
            int, tuple[QuotaNode, int, dict[FlavorResource, int], JobShape, bool]
        ] = {}
        """Per job, whether it must borrow, and the state that answer holds for
        (:meth:`_must_borrow`); kept for the pending jobs a backfill pass tests."""
        self._unplanned_why: dict[str, str] = {}
        """This cycle: why jobs of a quota tree (by root key) have no planned start."""
        self._relax_at: list[tuple[float, int]] = []
        """A heap of ``(when, job)``: when a job's ``switches`` wait ends."""
        self.limits = Limits()
        """QOS and tenant limits, running usage, and the jobs they hold."""
        self.stats = {"rounds": 0, "heads": 0, "backfill_tests": 0}

    # ------------------------------------------------------------------ events

    def apply(self, event: Event) -> None:
        """Take one event into the engine's state."""
        if isinstance(event, Submit):
            self._submit(event.job)
        elif isinstance(event, Finish):
            self._finish(event.job_id)
        elif isinstance(event, Cancel):
            rec = self.jobs.get(event.job_id)
            if rec is not None and rec.admission is None:
                self._forget_pending(rec)
                del self.jobs[rec.id]
        elif isinstance(event, Requeue):
            self._requeue(event.job_id)
        elif isinstance(event, PodsReady):
            self._unready.pop(event.job_id, None)
        elif isinstance(event, TenantUsage):
            old = self._shares.get(event.tenant)
            allocation = event.allocation
            if allocation is None and old is not None:
                allocation = old.allocation
            self._shares[event.tenant] = TenantShare(event.usage, allocation, event.billing)
            if "slurm" in self._presets():
                # Fair-share ranks every tenant against the others: all jobs, next cycle.
                self._tables = None
                self._prio_dirty = True
            else:
                self._reprioritize(self._pending_by_tenant.get(event.tenant, {}).values())
        elif isinstance(event, Upsert):
            self._upsert(event.obj)
        elif isinstance(event, Adopt):
            self._adopt(event.job, event.admission, event.admitted_at)
        elif isinstance(event, Delete):
            self._delete(event.kind, event.name)
        else:  # pragma: no cover - exhaustive over Event
            raise TypeError(f"not an engine event: {event!r}")

    def apply_all(self, events: Iterable[Event]) -> None:
        for event in events:
            self.apply(event)

    def _upsert(self, obj: Any) -> None:
        cache, queues = self.cache, self.queues
        if isinstance(obj, (Node, ResourceFlavor, Cohort, ClusterQueue)):
            self._ends_changed()
            if self._reservations:
                self._drop_reservations()
        if isinstance(obj, Node):
            self._objects[("Node", obj.name)] = obj
            cache.upsert_node(obj)
            self._prio_dirty = True
            queues.wake_all()
        elif isinstance(obj, ResourceFlavor):
            self._objects[("ResourceFlavor", obj.name)] = obj
            cache.upsert_flavor(obj)
            self._quota_changed()
        elif isinstance(obj, Topology):
            self._objects[("Topology", obj.name)] = obj
            cache.topologies[obj.name] = obj
        elif isinstance(obj, Cohort):
            self._objects[("Cohort", obj.name)] = obj
            cache.cohorts[obj.name] = obj
            self._quota_changed()
        elif isinstance(obj, ClusterQueue):
            self._objects[("ClusterQueue", obj.name)] = obj
            cache.upsert_cluster_queue(obj)
            self._priority_inputs_changed()
            queues.queue(obj.name, obj.queueing_strategy is QueueingStrategy.STRICT_FIFO)
            if obj.stop_policy is StopPolicy.HOLD_AND_DRAIN:
                self._drain[obj.name] = None
            self._quota_changed()
            cqq = queues.queues.get(obj.name)
            if cqq is not None and (
                obj.namespace_selector is not None
                or not self.config.missing_namespace_selector_matches_all
            ):
                self._recheck_namespaces(
                    [rec for sq in cqq.shapes.values() for rec in sq.members.values()]
                )
            self._resolve_waiting()
        elif isinstance(obj, LocalQueue):
            key = _local_queue_key(obj.namespace, obj.name)
            self._objects[("LocalQueue", key)] = obj
            cache.local_queues[key] = obj
            self._lq_scores.pop(key, None)
            self._local_queue_changed(key)
        elif isinstance(obj, Tenant):
            self._objects[("Tenant", obj.name)] = obj
            cache.tenants[obj.name] = obj
            # Allocations are normalized over the tenant tree: every tenant's L may change.
            self._priority_inputs_changed()
            self._recheck_namespaces(self._pending_by_tenant.get(obj.name, {}).values())
            self._resolve_waiting()
            was = self.limits.active
            if self.limits.set_tenant(obj.name, obj.limits) or self.limits.tenants:
                self._limits_switched(was)
                self._limits_changed(self.limits.keys_of_tenants())
        elif isinstance(obj, PriorityClass):
            self._objects[("PriorityClass", obj.name)] = obj
            cache.priority_classes[obj.name] = obj
            self._prio_dirty = True
            was = self.limits.active
            if self.limits.set_class(obj.name, obj.limits):
                self._limits_switched(was)
                self._limits_changed(self.limits.keys_of_class(obj.name))
        else:
            raise TypeError(f"cannot upsert {type(obj).__name__}")

    def _delete(self, kind: str, name: str) -> None:
        cache = self.cache
        if kind in ("Node", "ResourceFlavor", "Cohort", "ClusterQueue"):
            self._ends_changed()
            if self._reservations:
                self._drop_reservations()
        self._objects.pop((kind, name), None)
        if kind == "Node":
            cache.delete_node(name)
            self._prio_dirty = True
        elif kind == "ResourceFlavor":
            cache.delete_flavor(name)
            self._quota_changed()
        elif kind == "Topology":
            cache.topologies.pop(name, None)
        elif kind == "Cohort":
            cache.cohorts.pop(name, None)
            self._quota_changed()
        elif kind == "ClusterQueue":
            cache.delete_cluster_queue(name)
            self._priority_inputs_changed()
            cqq = self.queues.queues.get(name)
            if cqq is not None:
                for sq in list(cqq.shapes.values()):
                    for rec in list(sq.members.values()):
                        self.queues.remove(rec)
                        self._wait(rec, self._resolve(rec)[2])
            self._quota_changed()
        elif kind == "LocalQueue":
            cache.local_queues.pop(name, None)
            self._local_queue_changed(name)
        elif kind == "Tenant":
            cache.tenants.pop(name, None)
            self._priority_inputs_changed()
            was = self.limits.active
            if self.limits.set_tenant(name, None) or self.limits.tenants:
                self._limits_switched(was)
                self._limits_changed(self.limits.keys_of_tenants())
        elif kind == "PriorityClass":
            cache.priority_classes.pop(name, None)
            self._prio_dirty = True
            was = self.limits.active
            if self.limits.set_class(name, None):
                self._limits_switched(was)
                self._limits_changed(self.limits.keys_of_class(name))
        else:
            raise ValueError(f"unknown kind {kind!r}")

    def _quota_changed(self) -> None:
        self.cache.rebuild_quota()
        for name, cqq in self.queues.queues.items():
            info = self.cache.cluster_queues.get(name)
            stopped = self.cache.stop_reason(info) if info is not None else None
            if stopped is not None and stopped != cqq.stopped:
                # Jobs of a stopped or inactive queue are never heads: say why here.
                members = [rec for sq in cqq.shapes.values() for rec in sq.members.values()]
                for rec in sorted(members, key=lambda r: r.key):
                    self._emit_reason(rec, stopped, self._outbox)
            cqq.stopped = stopped
        self.queues.wake_all()

    # ------------------------------------------------------------------ jobs

    def _resolve(self, rec: JobRecord) -> tuple[str | None, str | None, Reason | None]:
        job = rec.job
        cache = self.cache
        lq_key: str | None = None
        if job.cluster_queue:
            cq_name = job.cluster_queue
        else:
            assert job.queue is not None
            lq_key = _local_queue_key(job.tenant, job.queue)
            lq = cache.local_queues.get(lq_key)
            if lq is None:
                return (
                    None,
                    lq_key,
                    waiting_reason(
                        ReasonCode.LOCAL_QUEUE_NOT_FOUND,
                        f"LocalQueue {job.queue} doesn't exist in namespace {job.tenant}",
                        localQueue=lq_key,
                    ),
                )
            if lq.stop_policy is not StopPolicy.NONE:
                return (
                    None,
                    lq_key,
                    waiting_reason(
                        ReasonCode.STOPPED,
                        f"LocalQueue {lq_key} is stopped (stopPolicy {lq.stop_policy})",
                        localQueue=lq_key,
                    ),
                )
            cq_name = lq.cluster_queue
        info = cache.cluster_queues.get(cq_name)
        if info is None:
            return (
                None,
                lq_key,
                waiting_reason(
                    ReasonCode.CLUSTER_QUEUE_NOT_FOUND,
                    f"ClusterQueue {cq_name} doesn't exist",
                    clusterQueue=cq_name,
                ),
            )
        selector = info.model.namespace_selector
        if lq_key is not None and (
            selector is not None or not self.config.missing_namespace_selector_matches_all
        ):
            tenant = cache.tenants.get(job.tenant)
            labels = dict(tenant.labels) if tenant is not None else {}
            labels["kubernetes.io/metadata.name"] = job.tenant
            if selector is None or not selector_matches(selector, labels):
                return (
                    None,
                    lq_key,
                    waiting_reason(
                        ReasonCode.NAMESPACE_MISMATCH,
                        "Workload namespace doesn't match ClusterQueue selector",
                        clusterQueue=cq_name,
                        namespace=job.tenant,
                    ),
                )
        return cq_name, lq_key, None

    def _recheck_namespaces(self, recs: Iterable[JobRecord]) -> None:
        """Jobs queued in a ClusterQueue whose namespaceSelector may no longer match."""
        for rec in list(recs):
            if rec.queue is None or rec.local_queue is None:
                continue
            problem = self._resolve(rec)[2]
            if problem is not None:
                self.queues.remove(rec)
                self._wait(rec, problem)

    def _record(self, job: Job) -> JobRecord:
        """A new record of ``job``: its shape, and its priority value (its own, else its
        PriorityClass's)."""
        value = job.priority
        if value is None:
            pc = self.cache.priority_classes.get(job.priority_class or "")
            value = pc.value if pc is not None else 0
        return JobRecord(job=job, shape=self._shapes.job(job), facts=job_facts(job, value))

    def _submit(self, job: Job) -> None:
        if job.id in self.jobs:
            raise ValueError(f"job {job.id} was already submitted")
        rec = self._record(job)
        rec.order_time = job.submit_time
        self.jobs[job.id] = rec
        self.workload.observe(rec.shape.pod_sets)
        self._pending_by_tenant.setdefault(job.tenant, {})[job.id] = rec
        self._set_priority(rec, self._context(job.submit_time))
        waits = [
            p.topology.wait_s
            for p in job.pod_sets
            if p.topology is not None and p.topology.wait_s is not None
        ]
        if waits:
            heapq.heappush(self._relax_at, (job.submit_time + min(waits), job.id))
        self._enqueue(rec)

    def _relax(self, now: float) -> None:
        """Jobs whose ``switches`` wait is over are placed without it (Slurm's
        ``--switches=N@max-time``)."""
        while self._relax_at and self._relax_at[0][0] <= now:
            _, job_id = heapq.heappop(self._relax_at)
            rec = self.jobs.get(job_id)
            if rec is None or rec.admission is not None:
                continue
            relaxed = self._shapes.relaxed(rec.shape)
            if relaxed is rec.shape:
                continue
            if job_id in self._reservations:
                self._drop_reservation(job_id)
            self._estimates.pop(job_id, None)
            if rec.queue is None:
                rec.shape = relaxed  # waiting outside the queues: queued with it later
                continue
            self.queues.remove(rec)
            rec.shape = relaxed
            self._enqueue(rec)

    def _adopt(self, job: Job, decision: Admit, admitted_at: float | None = None) -> None:
        self._submit(job)
        rec = self.jobs[job.id]
        self._forget_pending(rec)
        rec.reason = None
        rec.cluster_queue = decision.cluster_queue
        info = self.cache.cluster_queues.get(decision.cluster_queue)
        shapes = {p.name: p for p in rec.shape.pod_sets}
        usage: dict[FlavorResource, int] = {}
        allocations: list[Allocation] = []
        for assigned in decision.pod_sets:
            shape = shapes[assigned.name]
            for resource, flavor in assigned.flavors:
                fr = (flavor, resource)
                usage[fr] = usage.get(fr, 0) + assigned.count * shape.per_task(resource)
            for placed in assigned.nodes:
                slot = self.cache.nodes.get(placed.node)
                if slot is None:
                    continue
                units = placed.count // shape.unit_size
                amounts = unit_amounts(shape, slot)
                if not shape.exclusive:
                    amounts = {r: a * units for r, a in amounts.items()}
                devices = _recorded_devices(shape, placed) or plan_devices(slot, shape, units)[0]
                slot.take(rec.id, amounts, shape.exclusive, devices)
                self.cache.reindex(slot)
                allocations.append((slot, amounts, shape.exclusive, devices))
        if info is not None:
            for fr, amount in usage.items():
                info.node.add_usage(fr, amount)
            node = info.node
        else:
            node = QuotaNode(decision.cluster_queue, True)
        self.assigner.generation += 1
        since = job.submit_time if admitted_at is None else admitted_at
        self._ends_changed()
        rec.admission = Admission(
            decision.cluster_queue, node, usage, allocations, decision, admitted_at=since
        )
        self._admitted_by_cq.setdefault(decision.cluster_queue, {})[rec.id] = rec
        self.limits.charge(rec, self.cache.tenants, {p.name: p.count for p in decision.pod_sets})

    def _enqueue(self, rec: JobRecord) -> None:
        cq_name, lq_key, problem = self._resolve(rec)
        rec.local_queue = lq_key
        if problem is not None:
            self._wait(rec, problem)
            return
        assert cq_name is not None
        rec.cluster_queue = cq_name
        if rec.facts.cluster_queue != cq_name or rec.facts.local_queue != lq_key:
            # The ClusterQueue picks the ordering (phalanx.io/preset) and some factors.
            rec.facts = replace(rec.facts, cluster_queue=cq_name, local_queue=lq_key)
            self._set_priority(rec, self._context(rec.job.submit_time))
        elif self._afs is not None:
            rec.key = (self._lq_score(rec), *rec.key[1:])
        rec.waiting = None
        self._waiting.pop(rec.id, None)
        info = self.cache.cluster_queues[cq_name]
        cqq = self.queues.queue(
            cq_name, info.model.queueing_strategy is QueueingStrategy.STRICT_FIFO
        )
        cqq.stopped = self.cache.stop_reason(info)
        self.queues.push(rec, cqq)
        if cqq.stopped is not None:
            self._emit_reason(rec, cqq.stopped, self._outbox)

    def _wait(self, rec: JobRecord, reason: Reason | None) -> None:
        if reason is None:
            self._enqueue(rec)
            return
        rec.cluster_queue = None
        rec.waiting = reason
        self._waiting[rec.id] = rec
        self._emit_reason(rec, reason, self._outbox)

    def _resolve_waiting(self) -> None:
        for rec in list(self._waiting.values()):
            problem = self._resolve(rec)[2]
            if problem is None:
                self._enqueue(rec)
            elif problem != rec.waiting:
                # Still waiting, for another reason (the LocalQueue now exists, its CQ doesn't).
                self._wait(rec, problem)

    def _local_queue_changed(self, key: str) -> None:
        lq = self.cache.local_queues.get(key)
        if lq is not None and lq.stop_policy is StopPolicy.HOLD_AND_DRAIN:
            self._drain["lq:" + key] = None
        for cqq in self.queues.queues.values():
            for sq in list(cqq.shapes.values()):
                for rec in list(sq.members.values()):
                    if rec.local_queue == key:
                        self.queues.remove(rec)
                        self._wait(rec, self._resolve(rec)[2])
        self._resolve_waiting()

    def _forget_pending(self, rec: JobRecord) -> None:
        if rec.id in self._reservations:
            self._drop_reservation(rec.id)
        self._estimates.pop(rec.id, None)
        self._bf_waiting.pop(rec.id, None)
        self.queues.remove(rec)
        self._waiting.pop(rec.id, None)
        self._backoff.pop(rec.id, None)
        self.limits.forget(rec)
        tenant_jobs = self._pending_by_tenant.get(rec.job.tenant)
        if tenant_jobs is not None:
            tenant_jobs.pop(rec.id, None)

    def _finish(self, job_id: int) -> None:
        rec = self.jobs.pop(job_id, None)
        if rec is None:
            return
        if rec.admission is None:
            self._forget_pending(rec)
        else:
            self._release(rec)

    def _requeue(self, job_id: int) -> None:
        rec = self.jobs.get(job_id)
        if rec is None or rec.admission is None:
            return
        self._release(rec)
        rec.reason = None
        evicted_for, rec.evicted_for = rec.evicted_for, None
        if rec.deactivate:
            del self.jobs[rec.id]
            self._outbox.append(
                Deactivate(
                    rec.id,
                    "RequeuingLimitExceeded",
                    "The workload is deactivated due to exceeding the maximum number of "
                    "re-queuing retries",
                )
            )
            return
        ready = self.config.wait_for_pods_ready
        if (
            evicted_for == "PodsReadyTimeout"
            and ready is not None
            and ready.requeuing_timestamp == "Eviction"
        ):
            rec.order_time = rec.evicted_at
        self._pending_by_tenant.setdefault(rec.job.tenant, {})[rec.id] = rec
        self._set_priority(rec, self._context(rec.job.submit_time))
        if rec.requeue_at is not None and rec.requeue_at > self._now:
            self._hold_for_backoff(rec)
            return
        self._enqueue(rec)

    def _hold_for_backoff(self, rec: JobRecord) -> None:
        assert rec.requeue_at is not None
        until = rec.requeue_at
        reason = waiting_reason(
            ReasonCode.REQUEUE_BACKOFF,
            f"requeued after a PodsReady timeout ({rec.requeue_count} so far): "
            f"not admissible before {_rfc3339(until)}",
            requeueAt=until,
            requeueCount=rec.requeue_count,
        )
        rec.waiting = reason
        self._backoff[rec.id] = rec
        self._emit_reason(rec, reason, self._outbox)

    def _end_backoffs(self, now: float) -> None:
        for rec in list(self._backoff.values()):
            if rec.requeue_at is not None and rec.requeue_at <= now:
                del self._backoff[rec.id]
                rec.requeue_at = None
                rec.waiting = None
                self._enqueue(rec)

    # ------------------------------------------------------------------ limits

    def _limit_held(self, rec: JobRecord, out: list[Decision]) -> bool:
        """Hold a queued job that would go over a QOS or tenant limit now: out of its
        queue (it blocks no one and gets no reservation) until its limit's key frees."""
        found = self.limits.check(rec, self.cache.tenants)
        if found is None:
            return False
        key, reason = found
        self.queues.remove(rec)
        self._estimates.pop(rec.id, None)
        self._hold_for_limit(rec, key, reason, out)
        return True

    def _hold_for_limit(
        self, rec: JobRecord, key: Key, reason: Reason, out: list[Decision]
    ) -> None:
        rec.waiting = reason
        self.limits.hold(rec, key)
        self._emit_reason(rec, reason, out)

    def _limits_switched(self, was: bool) -> None:
        """Running jobs are charged to limits only while some are set."""
        if self.limits.active and not was:
            admitted = (r for jobs in self._admitted_by_cq.values() for r in jobs.values())
            self.limits.started(admitted, self.cache.tenants)
        elif was and not self.limits.active:
            self.limits.stopped()

    def _recheck_held(self, keys: Iterable[Key]) -> None:
        """The jobs held under ``keys`` (whose usage or limits changed): queue those no
        limit holds now."""
        free, held = self.limits.recheck(keys, self.cache.tenants)
        for rec in free:
            rec.waiting = None
            self._enqueue(rec)
        for rec, key, reason in held:
            self._hold_for_limit(rec, key, reason, self._outbox)

    def _limits_changed(self, keys: list[Key]) -> None:
        """A limit changed: held jobs it concerns are checked again, and parked queues
        are woken so that queued jobs now over a lowered limit are held at nomination.
        Running jobs are never stopped."""
        self._recheck_held(keys)
        self.queues.wake_all()

    def _release(self, rec: JobRecord) -> None:
        admission = rec.admission
        assert admission is not None
        rec.admission = None
        self._ended(rec, admission)
        self._unready.pop(rec.id, None)
        self._admitted_by_cq.get(admission.cluster_queue, {}).pop(rec.id, None)
        charged = self.limits.release(rec.id)
        if charged:
            self._recheck_held(charged)
        info = self.cache.cluster_queues.get(admission.cluster_queue)
        keys: list[str] = []
        root = ""
        levels: dict[FlavorResource, int] = {}
        if info is not None and info.node is admission.quota_node:
            node = info.node
            for fr, amount in admission.usage.items():
                node.remove_usage(fr, amount)
            root = info.root_key
            top = node.top or node
            levels = {fr: top.subtree.get(fr, 0) - top.usage.get(fr, 0) for fr in admission.usage}
        nodes = self.cache.nodes
        reserved = self._holds
        for slot, amounts, exclusive, devices in admission.allocations:
            slot.give_back(rec.id, amounts, exclusive, devices)
            if slot in reserved.owner:
                # Absorbed by the hold: nothing is free there for anyone but its holder.
                reserved.absorb(slot)
                if nodes.get(slot.name) is slot:
                    self.cache.reindex(slot)
                continue
            if nodes.get(slot.name) is slot:
                self.cache.reindex(slot)
                keys.extend("flavor:" + index.name for index in slot.flavors)
        if admission.evicting:
            keys.append(f"evict:{rec.id}")
        self.queues.release(
            root, admission.usage if root else {}, levels, list(dict.fromkeys(keys))
        )
        if self._reservations:
            self._wake_holders(root, (a[0] for a in admission.allocations))
        if self._held and root:
            # A held reservation hides what this release freed from the blocked head's
            # wake condition: any release in its tree re-nominates it.
            for name, holds in self._held.items():
                cqq = self.queues.queues.get(name)
                if cqq is not None and cqq.parked and holds[0][0].root_key == root:
                    self.queues.wake([cqq])

    # ------------------------------------------------------------------ priority

    def _priority_tables(self) -> PriorityTables:
        tables = self._tables
        if tables is None:
            slurm = self.config.slurm_priority
            tables = self._tables = build_tables(
                self.cache,
                self._shares,
                default_preset=self.config.preset,
                window_s=self.config.usage.half_life_s or self.config.priority_calc_period_s,
                fair_tree_algorithm=slurm.fair_tree,
                dampening=slurm.fairshare_dampening,
                raw_partition_factor=bool({"NO_NORMAL_PART", "NO_NORMAL_ALL"} & set(slurm.flags)),
            )
        return tables

    def _presets(self) -> frozenset[str]:
        """The presets in use, without rebuilding the tables for it."""
        if self._tables is not None:
            return self._tables.presets
        default = self.config.preset
        return frozenset(
            {default}
            | {
                info.model.annotations.get(PRESET_ANNOTATION, default)
                for info in self.cache.cluster_queues.values()
            }
        )

    def _priority_inputs_changed(self) -> None:
        """A tenant or ClusterQueue changed: rebuild the tables, recompute every priority."""
        self._tables = None
        self._prio_dirty = True

    def _context(self, now: float) -> PriorityContext:
        when = self._prio_time if self._prio_time is not None else now
        return PriorityContext(
            now=when,
            cluster_gpus=self.cache.cluster_gpus,
            max_priority_value=self.cache.max_priority_value,
            shares=self._shares,
            tables=self._priority_tables(),
        )

    def _set_priority(self, rec: JobRecord, ctx: PriorityContext) -> None:
        rec.priority = self.policies.ordering.priority(rec.facts, ctx)
        rec.key = (self._lq_score(rec), -rec.priority, rec.order_time, rec.facts.id)

    # ------------------------------------------------------------ admission fair sharing

    def _uses_afs(self, cluster_queue: str | None) -> bool:
        if self._afs is None or cluster_queue is None:
            return False
        queue = self._priority_tables().queues.get(cluster_queue)
        return queue is not None and queue.admission_fair_sharing

    def _lq_score(self, rec: JobRecord) -> float:
        """The job's LocalQueue score in an Admission Fair Sharing ClusterQueue, else 0."""
        lq = rec.local_queue
        if self._afs is None or lq is None or not self._uses_afs(rec.cluster_queue):
            return 0.0
        score = self._lq_scores.get(lq)
        if score is None:
            model = self.cache.local_queues.get(lq)
            weight = model.fair_sharing.weight if model and model.fair_sharing else 1.0
            score = self._lq_scores[lq] = self._afs.score(lq, weight)
        return score

    def _afs_admitted(
        self, rec: JobRecord, cluster_queue: str, usage: Mapping[FlavorResource, int]
    ) -> None:
        """An admission's entry penalty on its LocalQueue; the queue re-sorts next cycle."""
        lq = rec.local_queue
        if self._afs is None or lq is None or not self._uses_afs(cluster_queue):
            return
        self._afs.penalize(lq, base_units(usage))
        self._lq_scores.pop(lq, None)
        self._afs_stale.add(cluster_queue)

    def _afs_sample(self, now: float) -> None:
        """Fold what each LocalQueue's admitted jobs hold into its usage, when due."""
        afs = self._afs
        if afs is None or not afs.due(now):
            return
        queues = [q for q in self._priority_tables().queues if self._uses_afs(q)]
        current: dict[str, dict[str, float]] = {}
        for cq in queues:
            for rec in self._admitted_by_cq.get(cq, {}).values():
                if rec.local_queue is None or rec.admission is None:
                    continue
                held = current.setdefault(rec.local_queue, {})
                for resource, amount in base_units(rec.admission.usage).items():
                    held[resource] = held.get(resource, 0.0) + amount
        afs.sample(now, current)
        self._lq_scores.clear()
        self._afs_stale.update(queues)

    def _afs_rekey(self) -> None:
        """New LocalQueue scores into the keys of the stale ClusterQueues' jobs."""
        for name in sorted(self._afs_stale):
            cqq = self.queues.queues.get(name)
            if cqq is None:
                continue
            for sq in cqq.shapes.values():
                for rec in sq.members.values():
                    rec.key = (self._lq_score(rec), *rec.key[1:])
            cqq.rebuild()
            if cqq.parked and cqq.blocked_by is not None:
                self.queues.wake([cqq])
            self.queues.mark_candidate(cqq)
        self._afs_stale.clear()

    def _reprioritize(self, recs: Iterable[JobRecord]) -> None:
        ctx = self._context(0.0)
        for rec in list(recs):
            sq = rec.queue
            # Ask before the key changes: peek() drops heap entries whose key is stale, so
            # afterwards the old head looks like a follower and its shape is never re-offered.
            was_head = sq is not None and sq.peek() is rec
            old = rec.key
            self._set_priority(rec, ctx)
            if sq is None or rec.key == old:
                continue
            sq.push(rec)
            cqq = sq.cq
            if was_head or sq.peek() is rec:
                cqq.offer(sq)
            if cqq.parked and cqq.blocked_by is not None:
                self.queues.wake([cqq])

    def _refresh_priorities(self, now: float) -> None:
        self._afs_sample(now)
        ordering = self.policies.ordering
        due = ordering.time_dependent_for(self._priority_tables().presets) and (
            self._prio_time is None or now - self._prio_time >= self.config.priority_calc_period_s
        )
        if not (due or self._prio_dirty):
            if self._afs_stale:
                self._afs_rekey()
            return
        if due or self._prio_time is None:
            self._prio_time = now
        self._tables = None
        ctx = self._context(now)
        for tenant_jobs in self._pending_by_tenant.values():
            for rec in tenant_jobs.values():
                self._set_priority(rec, ctx)
        self.queues.rebuild()
        self.queues.wake(
            [cqq for cqq in self.queues.queues.values() if cqq.parked and cqq.blocked_by]
        )
        for cqq in self.queues.queues.values():
            self.queues.mark_candidate(cqq)
        self._prio_dirty = False
        self._afs_stale.clear()

    # ------------------------------------------------------------------ cycle

    def cycle(self, now: float, probe: Probe | None = None) -> list[Decision]:
        """Admit what fits now (everything, or one head per ClusterQueue with
        ``heads_per_cycle=1``); issue preemptions and evictions; say why the rest waits.

        ``probe``, if given, is called with ``("round", -1)`` when a round starts and
        ``("nominated", job_id)`` / ``("decided", job_id)`` after each head is assigned
        and after it is admitted or parked, so a caller can time single decisions, and
        with ``("backfill", -1)`` / ``("backfill_done", -1)`` around a backfill pass.
        It observes only: decisions never depend on it.
        """
        out: list[Decision] = self._outbox
        self._outbox = []
        self._now = now
        self._refresh_priorities(now)
        self._evict_drained(out)
        if self.config.wait_for_pods_ready is not None:
            self._pods_ready_timeouts(now, out)
        if self._backoff:
            self._end_backoffs(now)
        if self._relax_at and self._relax_at[0][0] <= now:
            self._relax(now)
        if self._protection_ends and min(self._protection_ends) <= now:
            self._end_protections(now)
        out.extend(self._outbox)
        self._outbox = []
        if self._held:
            self._release_holds()
        assigner = self.assigner
        assigner.new_cycle()
        queues = self.queues
        cache = self.cache
        limit = self.config.heads_per_cycle
        skip_refit = limit is not None
        # Rounds without preemption or partial admission park a failed head directly.
        plain = limit is None
        claimed: set[int] = set()
        rounds = 0
        blocked = False
        backfill = self.config.backfill is not None
        backfill_pass = self._pass_cycle = False
        self._unplanned_why.clear()
        if backfill:
            self._no_room.clear()
            backfill_pass = self._pass_cycle = self._backfill_due(now)
        while not blocked and (limit is None or rounds < limit):
            heads = queues.heads()
            if not heads:
                break
            rounds += 1
            self.stats["rounds"] += 1
            self.stats["heads"] += len(heads)
            if probe is not None:
                probe("round", -1)
            entries: list[Entry] = []
            for rec, sq, cqq in heads:
                info = cache.cluster_queues[cqq.name]
                if rec.id in self._reservations:
                    # Tried again: its nodes and quota are its own to assign. Between
                    # backfill passes it gets the same reservation back if it fails.
                    self._retried[rec.id] = self._reservations[rec.id]
                    self._drop_reservation(rec.id, wake=False)
                if self.limits.active and self._limit_held(rec, out):
                    continue
                oracle = self._oracle(rec, info) if info.preempts else None
                a = assigner.assign(rec.shape, info, oracle)
                # Across ClusterQueues: priority then time (a LocalQueue score orders one queue).
                entries.append((a.borrow if a.ok else 0, rec.key[1:], rec, sq, a))
                if probe is not None:
                    probe("nominated", rec.id)
            entries.sort(key=_entry_order)
            ordered: Iterable[Entry] = entries
            if self.config.fair_sharing is not None:
                ordered = self._fair_order(entries)
            for _, _, rec, sq, assignment in ordered:
                if self.limits.active and self._limit_held(rec, out):
                    # Over a limit after this round's earlier admissions.
                    continue
                info = cache.cluster_queues[sq.cq.name]
                if assignment.ok and not assigner.still_fits(assignment, info):
                    if skip_refit:
                        # Kueue: skipped, and back at the head of its queue next cycle.
                        self._emit_reason(rec, _no_longer_fits(info.name), out)
                        continue
                    oracle = self._oracle(rec, info) if may_preempt(info) else None
                    assignment = assigner.assign(rec.shape, info, oracle)
                if assignment.ok and self._admission_blocked():
                    self._emit_reason(rec, _pods_ready_block(), out)
                    blocked = True
                    continue
                if assignment.ok:
                    out.append(self._admit(rec, info, assignment))
                elif plain and not info.preempts and rec.shape.partial is None:
                    if not (backfill and self._backfill(rec, sq, info, assignment, out)):
                        self._park(rec, sq, info, assignment, out)
                else:
                    self._not_fitting(rec, sq, info, assignment, claimed, out)
                if self._retried and rec.admission is None and rec.id in self._retried:
                    # Its own nodes were opened for its attempt: held again at once, so
                    # no job after it in the round takes them.
                    self._hold(self._retried.pop(rec.id))
                if probe is not None:
                    probe("decided", rec.id)
            # A reservation holds for the rest of the round (Kueue: of its one-round cycle).
            self._unreserve()
        if self._retried:
            self._restore_retried()
        if backfill_pass:
            self.queues.restore_aside()
            self._pass_cycle = False
            if probe is not None:
                probe("backfill", -1)
            self._backfill_pass(out)
            if probe is not None:
                probe("backfill_done", -1)
        return out

    # ------------------------------------------------------------------ backfill

    def _backfill_due(self, now: float) -> bool:
        """Every ``interval_s`` a cycle ends with a backfill pass."""
        bf = self.config.backfill
        assert bf is not None
        if self._bf_last is not None and now - self._bf_last < bf.interval_s:
            return False
        self._bf_last = now
        return True

    def _restore_retried(self) -> None:
        """Jobs tried again between passes that are still pending keep their reservation."""
        for job_id, res in self._retried.items():
            rec = self.jobs.get(job_id)
            if rec is None or rec.admission is not None or job_id in self._reservations:
                continue
            self._hold(res)
        self._retried.clear()

    def _hold(self, res: Reservation) -> None:
        holds, nodes = self._holds, self.cache.nodes
        names = []
        for name in res.nodes:
            slot = nodes.get(name)
            if slot is not None and slot not in holds.owner:
                if holds.hold(slot, res.job_id):
                    self.cache.reindex(slot)
                names.append(name)
        kept = replace(res, nodes=tuple(names))
        self._hold_quota(kept, 1)
        self._reservations[res.job_id] = kept
        self.assigner.generation += 1

    def _backfill(
        self,
        rec: JobRecord,
        sq: ShapeQueue,
        info: ClusterQueueInfo,
        assignment: Assignment,
        out: list[Decision],
    ) -> bool:
        """A head that does not fit: start it on nodes held for reservations it cannot
        delay, or leave it to the next backfill pass. True when it was admitted.

        In a cycle that ends with a pass, the jobs of its ClusterQueue behind it wait for
        the pass too (Slurm's main scheduler stops at a partition's first blocked job):
        started now, they could take the nodes it is about to reserve."""
        admitted = self._onto_held_nodes(rec, info)
        if admitted is not None:
            out.append(admitted)
            return True
        self._bf_waiting[rec.id] = rec
        if self._pass_cycle:
            self.queues.set_aside(sq.cq)
        elif rec.id not in self._retried and self._may_reserve(rec, info):
            self._reserve_at_once(rec, info)
        return False

    def _may_reserve(self, rec: JobRecord, info: ClusterQueueInfo) -> bool:
        """Whether ``rec`` is among the top ``reservations_per_queue`` blocked jobs of its
        ClusterQueue: the queue holds fewer reservations, or one for a lower job, which
        gives it up (its job waits for the next pass; a reservation set aside for a retry
        this cycle counts as held)."""
        bf = self.config.backfill
        assert bf is not None
        if not bf.reservations_per_queue:
            return True
        mine = [
            r
            for held in (self._reservations, self._retried)
            for r in held.values()
            if r.cluster_queue == info.name
        ]
        if len(mine) < bf.reservations_per_queue:
            return True
        lowest = max(mine, key=lambda r: self.jobs[r.job_id].key[1:])
        if self.jobs[lowest.job_id].key[1:] <= rec.key[1:]:
            return False
        if lowest.job_id in self._reservations:
            self._drop_reservation(lowest.job_id, wake=False)
        else:
            del self._retried[lowest.job_id]
        self._estimates.pop(lowest.job_id, None)
        self._bf_waiting[lowest.job_id] = self.jobs[lowest.job_id]
        return True

    def plan_order(self, rec: JobRecord) -> tuple[bool, tuple[float, float, int]]:
        """Where ``rec`` stands among the jobs planned, reserved for and backfilled: as a
        cycle orders its entries (Kueue's), a job its ClusterQueue's nominal quota covers
        before one that must borrow, then priority, time and id. So a lender's quota is
        its own first: a borrower's reservation never keeps it out."""
        return self._must_borrow(rec), rec.key[1:]

    def _must_borrow(self, rec: JobRecord) -> bool:
        """Whether ``rec`` would borrow on every flavor of its ClusterQueue that covers one
        of its resources, with the queue's usage now (less what its own reservation
        holds there). Kept per job until the queue's usage, quota or the job changes."""
        info = self.cache.cluster_queues.get(rec.cluster_queue or "")
        if info is None or info.node.parent is None:
            return False
        node = info.node
        kept = self._borrows.get(rec.id)
        if (
            kept is not None
            and kept[0] is node
            and kept[1] == node.version
            and kept[2] is node.nominal
            and kept[3] is rec.shape
        ):
            return kept[4]
        borrows = self._borrows_now(rec, info)
        self._borrows[rec.id] = (node, node.version, node.nominal, rec.shape, borrows)
        return borrows

    def _borrows_now(self, rec: JobRecord, info: ClusterQueueInfo) -> bool:
        node = info.node
        res = self._reservations.get(rec.id)
        own = dict(res.quota) if res is not None else {}
        flavors = info.flavors
        for resource, amount in rec.shape.totals:
            covering = [(f, resource) for f in flavors if (f, resource) in node.nominal]
            if covering and all(
                node.borrowing_with(fr, amount - own.get(fr, 0)) for fr in covering
            ):
                return True
        return False

    def _reserve_at_once(self, rec: JobRecord, info: ClusterQueueInfo) -> None:
        """A head blocked between passes gets its reservation now, planned around the
        ones that stand: nothing the cycle admits after it (or until the next pass) can
        take its nodes or quota unless it ends before the reservation starts."""
        self._timeline_now().new_pass()  # what the last pass closed may be open now
        self._planned.add(rec.id)
        planned = self._plan(rec, info, self._quota_ends_of(info.root_key))
        if planned is None:
            self._estimates.pop(rec.id, None)
            return
        start, slots, needs, _ = planned
        self._estimates[rec.id] = start
        self._reserve_for(rec, info, start, slots, needs)

    def _backfill_pass(self, out: list[Decision]) -> None:
        """Slurm's backfill pass: every reservation is planned again, with the jobs that
        could not start since the last pass, and up to a fair share of ``max_job_test``
        jobs behind each of them in its shape queue, in priority order (priority, then
        time, then id), up to ``max_job_test`` jobs. Each job starts now if it fits
        (on free nodes, or on held nodes it cannot delay), or is planned with the nodes
        of every job before it held; the first ``reservations_per_queue`` of each
        ClusterQueue keep what they hold, the others keep their estimated start."""
        bf = self.config.backfill
        assert bf is not None
        jobs = self.jobs
        pool: dict[int, JobRecord] = {j: jobs[j] for j in self._reservations}
        for rec in self._bf_waiting.values():
            pool.setdefault(rec.id, rec)
        self._bf_waiting.clear()
        share = max(1, bf.max_job_test // max(1, len(self.queues.queues)))
        seen: set[int] = set()
        live = [r for r in pool.values() if r.queue is not None and r.admission is None]
        # Jobs behind the top heads only: behind a lower job they rank lower still, and
        # as many heads as the tests can reach with the jobs behind them.
        heads = bf.max_job_test // (share + 1) + 1
        top = heapq.nsmallest(bf.max_job_test, live, key=lambda r: r.key[1:])
        pool = {r.id: r for r in live}
        for rec in top:
            sq = rec.queue
            assert sq is not None
            if id(sq) in seen or sq.peek() is not rec:
                continue
            seen.add(id(sq))
            if len(seen) > heads:
                break
            if len(sq.members) <= share + 1:
                for other in sq.members.values():
                    pool.setdefault(other.id, other)
                continue
            for other in sq.smallest(share + 1):
                pool.setdefault(other.id, other)
        self._drop_reservations(wake=False)
        self._no_room.clear()
        self._timeline_now().new_pass()
        self._planned = planned_ids = set()
        kept = self._borrows
        self._borrows = {j: kept[j] for j in pool if j in kept}
        order = sorted(pool.values(), key=self.plan_order)
        budget = bf.max_job_test
        held: dict[str, int] = {}
        marked: list[NodeSlot] = []  # nodes of the pass's plans beyond the reservations
        owner = self._holds.owner
        cache = self.cache
        starts: list[tuple[float, int]] = []  # the pass's reservations, soonest first
        for i, rec in enumerate(order):
            if budget <= 0:
                # Not tested: the top of them again in the next pass.
                for rest in order[i : i + bf.max_job_test]:
                    self._bf_waiting[rest.id] = rest
                break
            info = cache.cluster_queues.get(rec.cluster_queue or "")
            if info is None or rec.queue is None or rec.shape.partial is not None:
                continue
            if self.limits.active and self._limit_held(rec, out):
                continue
            budget -= 1
            planned_ids.add(rec.id)
            self.stats["backfill_tests"] += 1
            limit = rec.job.time_limit
            if limit is not None and starts and self._now + limit <= starts[-1][0]:
                # Every reservation so far is of a higher job: only one that starts after
                # this job ends can take it.
                i = bisect.bisect_left(starts, (self._now + limit, -1))
                after = [self._reservations[j] for _, j in starts[i:]]
                admitted = self._onto_held_nodes(rec, info, after)
                if admitted is not None:
                    out.append(admitted)
                    continue
            self._bf_waiting[rec.id] = rec
            planned = self._plan(rec, info, self._quota_ends_of(info.root_key))
            if planned is None:
                self._estimates.pop(rec.id, None)
                continue
            start, slots, needs, now = planned
            if now and not self._admission_blocked():
                trial = self.assigner.assign_fresh(rec.shape, info)
                if trial.ok:
                    del self._bf_waiting[rec.id]
                    out.append(self._admit(rec, info, trial))
                    continue
            self._estimates[rec.id] = start
            count = held.get(info.name, 0)
            held[info.name] = count + 1
            if bf.reservations_per_queue and count >= bf.reservations_per_queue:
                # Beyond the queue's reservations: an estimate, its nodes closed to the
                # plans of the rest of the pass (not held: nothing else is kept off them).
                for slot in slots:
                    if slot not in owner:
                        owner[slot] = rec.id
                        marked.append(slot)
                continue
            self._reserve_for(rec, info, start, slots, needs)
            bisect.insort(starts, (start, rec.id))
        for slot in marked:
            del owner[slot]

    def _plan(
        self,
        rec: JobRecord,
        info: ClusterQueueInfo,
        quota_ends: QuotaEnds,
    ) -> tuple[float, list[NodeSlot], dict[FlavorResource, int], bool] | None:
        """When ``rec`` can start in ``info`` (rounded up to ``bf_resolution``, within
        ``bf_window``), on which whole nodes, with which quota, and whether that is now;
        None when not in the window (or never). Nodes held for the reservations made so
        far in the pass (all of higher jobs) are closed."""
        bf = self.config.backfill
        assert bf is not None
        timeline, cache, now = self._timeline_now(), self.cache, self._now
        closed = self._holds.owner.__contains__
        start = now
        taken: set[NodeSlot] = set()
        needs: dict[FlavorResource, int] = {}
        for pod_set in rec.shape.pod_sets:
            primary = (
                GPU if pod_set.request(GPU) else next((r for r, a in pod_set.requests if a), None)
            )
            group = info.group_for.get(primary) if primary is not None else None
            if group is None:
                return None
            best: tuple[float, list[NodeSlot], str] | None = None
            for name in group.flavors:
                flavor = cache.flavors.get(name)
                index = cache.flavor_nodes.get(name)
                if flavor is None or index is None or not flavor_matches(pod_set, flavor):
                    continue
                accept = node_filter(pod_set, flavor, index.tainted > 0, ())
                cutoff = best[0] if best is not None else math.inf
                held_to = self.assigner.topology_level(pod_set, flavor)
                if held_to is not None:
                    found = plan_in_domains(
                        pod_set,
                        name,
                        cache,
                        timeline,
                        now,
                        closed,
                        taken,
                        accept,
                        cutoff,
                        *held_to,
                    )
                else:
                    found = plan_nodes(
                        pod_set, name, cache, timeline, now, closed, taken, accept, cutoff
                    )
                if found is not None and (best is None or found[0] < best[0]):
                    best = (found[0], found[1], name)
                    if found[0] <= now:
                        break
            if best is None:
                return None
            at, slots, chosen = best
            start = max(start, at)
            taken.update(slots)
            for resource, amount in (*pod_set.requests, (PODS, 1)):
                if not amount:
                    continue
                g = info.group_for.get(resource)
                if g is None:
                    continue
                f = chosen if chosen in g.flavors else g.flavors[0]
                needs[(f, resource)] = needs.get((f, resource), 0) + amount * pod_set.count
        at_quota = plan_quota(needs, info, quota_ends, now)
        if at_quota is None:
            return None
        at = max(start, at_quota)
        start = round_up(at, bf.resolution_s)
        if start > now + bf.window_s:
            return None
        return start, sorted(taken, key=lambda slot: slot.name), needs, at <= now

    def _timeline_now(self) -> Timeline:
        if self._timeline is None:
            admitted = (r for jobs in self._admitted_by_cq.values() for r in jobs.values())
            self._timeline = Timeline(admitted)
        return self._timeline

    def _quota_ends_of(self, root: str) -> QuotaEnds:
        found = self._quota_ends.get(root)
        if found is None:
            found = self._quota_ends[root] = QuotaEnds(self._running_ends().get(root, []))
        return found

    def _ends_changed(self) -> None:
        """Jobs' ends or the quota trees changed in a way not tracked one by one."""
        self._ends = None
        self._quota_ends.clear()
        self._timeline = None

    def _ended(self, rec: JobRecord, adm: Admission) -> None:
        """A job gave back its nodes and quota: take it out of the running ends, and
        hold for the reservations of its tree what it was to give back to them."""
        end = planned_end(rec.job.time_limit, adm)
        self._drop_end(rec, adm)
        if self._reservations:
            info = self.cache.cluster_queues.get(adm.cluster_queue)
            if info is not None:
                self._rehold(info.root_key, end)

    def _drop_end(self, rec: JobRecord, adm: Admission) -> None:
        if self._timeline is not None:
            self._timeline.ended(rec)
        self._quota_ends.clear()
        ends = self._ends
        if ends is None:
            return
        end = planned_end(rec.job.time_limit, adm)
        if end == math.inf:
            return
        info = self.cache.cluster_queues.get(adm.cluster_queue)
        keys = ["cq:" + adm.cluster_queue]
        if info is not None:
            keys.append(info.root_key)
        for key in keys:
            entries = ends.get(key)
            if not entries:
                continue
            i = bisect.bisect_left(entries, end, key=lambda e: e[0])
            while i < len(entries) and entries[i][0] == end:
                if entries[i][1] is adm.usage:
                    del entries[i]
                    break
                i += 1
            else:
                # Not where expected (the tree changed): rebuilt when next needed.
                self._ends = None
                return

    def _running_ends(self) -> dict[str, list[tuple[float, dict[FlavorResource, int], str]]]:
        """Admitted jobs with a time limit by quota tree (and by ``cq:<ClusterQueue>``),
        as ``(planned end, quota usage, ClusterQueue)``, soonest first; a job being
        evicted ends now. Kept up to date as jobs are admitted and released."""
        if self._ends is not None:
            return self._ends
        ends: dict[str, list[tuple[float, dict[FlavorResource, int], str]]] = {}
        for cq_name, jobs in self._admitted_by_cq.items():
            info = self.cache.cluster_queues.get(cq_name)
            tree = ends.setdefault(info.root_key if info is not None else "", [])
            own = ends.setdefault("cq:" + cq_name, [])
            for rec in jobs.values():
                adm = rec.admission
                assert adm is not None
                end = planned_end(rec.job.time_limit, adm)
                if end == math.inf:
                    continue
                tree.append((end, adm.usage, cq_name))
                own.append((end, adm.usage, cq_name))
        for tree_ends in ends.values():
            tree_ends.sort(key=lambda e: e[0])
        self._ends = ends
        self._quota_ends.clear()
        return ends

    def _onto_held_nodes(
        self,
        rec: JobRecord,
        info: ClusterQueueInfo,
        among: Iterable[Reservation] | None = None,
    ) -> Admit | None:
        """Backfill: admit ``rec`` on held nodes of reservations that start after it ends,
        or that are held for lower jobs (planned again in the next pass); only ``among``
        these, if given."""
        if not self._reservations:
            return None
        limit = rec.job.time_limit
        end = self._now + limit if limit is not None else math.inf
        memo = (rec.shape, info.name)
        if end >= self._no_room.get(memo, math.inf):
            return None
        holds, jobs = self._holds, self.jobs
        borrows, rank = self.plan_order(rec)
        # Only held nodes that had free capacity to hold can take anything (most are busy
        # until their reservation starts); for a job whose every pod set asks for GPUs,
        # only those with a unit's worth of free GPUs.
        gpus = [p.request(GPU) for p in rec.shape.pod_sets]
        unit = min(gpus) if all(gpus) else 0
        opened: list[tuple[NodeSlot, int]] = []
        lifted: list[Reservation] = []
        roomy_by_owner = holds.roomy
        for r in self._reservations.values() if among is None else among:
            roomy = roomy_by_owner.get(r.job_id)
            if roomy is not None and holds.most_gpus.get(r.job_id, 0) < unit:
                roomy = None
            if roomy is None and not r.quota:
                continue  # nothing of it could be opened
            if end > r.start:
                # Its job comes first (plan_order) unless one of the two must borrow
                # and the other need not: ask only where that would change the answer.
                holder = jobs[r.job_id]
                if holder.key[1:] <= rank:
                    if borrows or not self._must_borrow(holder):
                        continue
                elif borrows and not self._must_borrow(holder):
                    continue
            if r.quota:
                lifted.append(r)
            if roomy is not None:
                opened.extend(
                    (slot, r.job_id)
                    for slot in roomy
                    if unit <= 0 or holds.amounts[slot].get(GPU, 0) >= unit
                )
        # A GPU job failed on everything but these nodes: without one, nothing to try.
        if not opened and (unit > 0 or not lifted):
            return None
        for r in lifted:
            self._hold_quota(r, -1)
        for slot, _ in opened:
            if holds.unhold(slot):
                self.cache.reindex(slot)
        self.assigner.generation += 1
        trial = self.assigner.assign_fresh(rec.shape, info)
        decision = None
        if trial.ok and not self._admission_blocked():
            decision = self._admit(rec, info, trial)
        elif not trial.ok:
            self._no_room[memo] = min(end, self._no_room.get(memo, math.inf))
        for slot, owner in opened:
            if holds.hold(slot, owner):
                self.cache.reindex(slot)
        for r in lifted:
            self._hold_quota(r, 1)
        self.assigner.generation += 1
        return decision

    def _hold_quota(self, r: Reservation, sign: int) -> None:
        info = self.cache.cluster_queues.get(r.cluster_queue)
        if info is not None:
            for fr, amount in r.quota:
                if sign > 0:
                    info.node.add_usage(fr, amount)
                else:
                    info.node.remove_usage(fr, amount)

    def _wake_holders(self, root: str, slots: Iterable[NodeSlot]) -> None:
        """A release in a reserved job's quota tree or on its held nodes: try it again.
        Its own holds hide what was freed from the conditions it parked on."""
        owners = {self._holds.owner.get(slot) for slot in slots}
        items: list[Any] = []
        for r in self._reservations.values():
            holder = self.jobs[r.job_id]
            sq = holder.queue
            if sq is None:
                continue
            info = self.cache.cluster_queues.get(r.cluster_queue)
            # Before its start only a release on its own nodes can change its plan much;
            # from then on, any release in its quota tree may let it start.
            due = self._now >= r.start
            if r.job_id in owners or (due and info is not None and root and info.root_key == root):
                items.append(sq.cq if sq.cq.strict else sq)
        if items:
            self.queues.wake(items)

    def _reserve_for(
        self,
        rec: JobRecord,
        info: ClusterQueueInfo,
        start: float,
        slots: list[NodeSlot],
        needs: dict[FlavorResource, int],
    ) -> None:
        """Hold the planned nodes, and the quota the job needs beyond what the running
        jobs of its quota tree give back by ``start`` (so jobs that outlive the
        reservation cannot take it); :meth:`_rehold` keeps that true as jobs end."""
        holds = self._holds
        names: list[str] = []
        for slot in slots:
            if slot not in holds.owner:
                if holds.hold(slot, rec.id):
                    self.cache.reindex(slot)
                names.append(slot.name)
        wanted = tuple(sorted(needs.items()))
        quota = self._to_hold(info, start, wanted)
        for fr, amount in quota:
            info.node.add_usage(fr, amount)
        self._reservations[rec.id] = Reservation(
            rec.id, info.name, start, tuple(names), quota, wanted
        )
        self.assigner.generation += 1

    def _to_hold(
        self,
        info: ClusterQueueInfo,
        start: float,
        needs: tuple[tuple[FlavorResource, int], ...],
    ) -> tuple[tuple[FlavorResource, int], ...]:
        """The part of ``needs`` the running jobs of ``info``'s quota tree do not give
        back by ``start``: held from now, the rest comes free as they end. The tree's
        ends count as the plan counts them (:func:`plan_quota`)."""
        tree = self._quota_ends_of(info.root_key)
        held = []
        for fr, amount in needs:
            short = amount - tree.returned(fr, start, amount)
            if short > 0:
                held.append((fr, short))
        return tuple(held)

    def _rehold(self, root: str, end: float) -> None:
        """A job of the quota tree ``root`` planned to end at ``end`` ended: what it was
        to give back by a reservation's start is free now, so the reservation holds it
        from now on (and whatever the end gave back beyond that stays free). A job
        planned to end after a reservation's start changes nothing it holds."""
        clusters = self.cache.cluster_queues
        for job_id, r in list(self._reservations.items()):
            if r.start < end or not r.needs:
                continue
            info = clusters.get(r.cluster_queue)
            if info is None or info.root_key != root:
                continue
            quota = self._to_hold(info, r.start, r.needs)
            if quota == r.quota:
                continue
            self._hold_quota(r, -1)
            r = self._reservations[job_id] = replace(r, quota=quota)
            self._hold_quota(r, 1)
            self.assigner.generation += 1

    def _drop_reservation(self, job_id: int, wake: bool = True) -> None:
        """Give back what a reservation holds and (``wake``) wake what waits for it."""
        res = self._reservations.pop(job_id)
        holds, nodes, owner = self._holds, self.cache.nodes, self._holds.owner
        keys: list[str] = []
        reindex = self.cache.reindex
        for name in res.nodes:
            slot = nodes.get(name)
            if slot is not None and owner.get(slot) == job_id:
                if holds.unhold(slot):
                    reindex(slot)
                if wake:
                    keys.extend("flavor:" + index.name for index in slot.flavors)
        info = self.cache.cluster_queues.get(res.cluster_queue)
        root = ""
        usage: dict[FlavorResource, int] = {}
        levels: dict[FlavorResource, int] = {}
        if info is not None and res.quota:
            for fr, amount in res.quota:
                info.node.remove_usage(fr, amount)
            if wake:
                root, usage = info.root_key, dict(res.quota)
                top = info.node.top or info.node
                levels = {fr: top.subtree.get(fr, 0) - top.usage.get(fr, 0) for fr in usage}
        self.assigner.generation += 1
        if wake:
            self.queues.release(root, usage, levels, list(dict.fromkeys(keys)))

    def replan(self) -> None:
        """Give up every reservation and estimate and try every queue again: the next
        cycle plans from scratch (a full backfill pass, Slurm's ``bf_interval``)."""
        self._drop_reservations()
        self._estimates.clear()
        self._bf_last = None
        self.queues.wake_all()

    def _drop_reservations(self, wake: bool = True) -> None:
        """Before the nodes or quotas change (or a pass): every reservation is planned
        again."""
        for job_id in list(self._reservations):
            self._drop_reservation(job_id, wake)

    def next_wakeup(self) -> float | None:
        """When the next cycle has something to do without any new event.

        The earliest waitForPodsReady deadline, requeue backoff end, end of a
        ``switches`` wait, or end of a minimum runtime that kept a job from being
        preempted; with
        ``heads_per_cycle`` set, the last cycle's time if heads are still waiting
        (run the next cycle at once). None when only an event can change anything.
        """
        times = list(self._unready.values())
        times.extend(r.requeue_at for r in self._backoff.values() if r.requeue_at is not None)
        times.extend(self._protection_ends)
        if self._relax_at:
            times.append(self._relax_at[0][0])
        if self.config.heads_per_cycle is not None and self.queues.has_candidates():
            times.append(self._now)
        return min(times) if times else None

    def _admission_blocked(self) -> bool:
        ready = self.config.wait_for_pods_ready
        return ready is not None and ready.block_admission and bool(self._unready)

    # ------------------------------------------------------------------ preemption

    def _not_fitting(
        self,
        rec: JobRecord,
        sq: ShapeQueue,
        info: ClusterQueueInfo,
        assignment: Assignment,
        claimed: set[int],
        out: list[Decision],
    ) -> None:
        """A head that does not fit as it is: preempt for it, admit it partially
        (minCount), or park it."""
        if info.preempts:
            targets = self._targets(rec, rec.shape, info, assignment, claimed)
            if targets:
                self._issue_preemption(rec, sq, info, targets, claimed, out)
                return
        if rec.shape.partial is None:
            partial, victims, smallest = None, None, None
        else:
            partial, victims, smallest = self._partial(rec, info, claimed)
        if partial is not None and not self._admission_blocked():
            out.append(self._admit(rec, info, partial))
        elif victims:
            self._issue_preemption(rec, sq, info, victims, claimed, out)
        elif (
            self.config.backfill is not None
            and rec.shape.partial is None
            and self._backfill(rec, sq, info, assignment, out)
        ):
            pass
        else:
            if info.preempts or self.config.heads_per_cycle is not None:
                # Kueue's "Preempt without targets": hold the quota a lender's head
                # cannot reclaim, for the rest of this cycle.
                self._reserve(rec, info, contested(info, assignment))
            # Park on what the smallest admissible count needs: quota or nodes freed
            # for that wake it.
            self._park(rec, sq, info, smallest or assignment, out)

    def _targets(
        self,
        rec: JobRecord,
        shape: JobShape,
        info: ClusterQueueInfo,
        assignment: Assignment,
        claimed: set[int],
    ) -> list[Candidate] | None:
        """The jobs to preempt so that ``shape`` fits for ``rec``, or None."""
        if not may_preempt(info):
            return None
        frs = contested(info, assignment)
        if not frs:
            return None
        assigner = self.assigner

        def fits(allow_borrowing: bool) -> Assignment | None:
            trial = assigner.assign_fresh(shape, info)
            if trial.ok and (allow_borrowing or trial.borrow == 0):
                return trial
            return None

        preemptor = Preemptor(
            self.cache, self._admitted_by_cq, fits, self._lift, self._put_back, self._exempt
        )
        fair = self.config.fair_sharing
        if fair is not None:
            found = preemptor.fair_targets(
                rec, info, frs, claimed, fair.preemption_strategies, self._weight
            )
        else:
            found = preemptor.targets(rec, info, frs, claimed)
        assigner.generation += 1
        return found[0] if found is not None else None

    def _victim_settings(self, cluster_queue: str) -> PreemptionConfig:
        """The preemption settings of the jobs a ClusterQueue admitted (its annotations
        over the engine's), cached until the ClusterQueue changes."""
        info = self.cache.cluster_queues.get(cluster_queue)
        if info is None:
            return self.config.preemption
        cached = self._victim_cache.get(cluster_queue)
        if cached is None or cached[0] is not info.model:
            cached = (info.model, self.config.preemption.for_queue(info.model.annotations))
            self._victim_cache[cluster_queue] = cached
        return cached[1]

    def _exempt(self, rec: JobRecord) -> bool:
        """Whether an admitted job may not be preempted now (mode OFF, or admitted less
        than its minimum runtime ago). A job already being evicted is never exempt: what
        it holds is coming back anyway."""
        adm = rec.admission
        assert adm is not None
        if adm.evicting:
            return False
        settings = self._victim_settings(adm.cluster_queue)
        if settings.mode == "OFF":
            return True
        ends = adm.admitted_at + settings.min_runtime_s
        if self._now < ends:
            # Whoever waits for it is parked: look again once it may be preempted.
            self._protection_ends.add(ends)
            return True
        return False

    def _end_protections(self, now: float) -> None:
        """Minimum runtimes ended: the jobs parked while they protected a victim retry."""
        self._protection_ends = {t for t in self._protection_ends if t > now}
        self.queues.wake_all()

    # ------------------------------------------------------------------ fair sharing

    def _weight(self, node: QuotaNode) -> float:
        return node_weight(self.cache, node)

    def _share(self, node: QuotaNode, extra: Mapping[FlavorResource, int] | None = None) -> float:
        return dominant_share(node, node_weight(self.cache, node), extra)

    def weighted_share(self, kind: str, name: str) -> int:
        """Kueue's ``status.fairSharing.weightedShare`` of a ClusterQueue or Cohort: its
        dominant resource share rounded up (0 for a root or an unknown name)."""
        node: QuotaNode | None
        if kind == "ClusterQueue":
            info = self.cache.cluster_queues.get(name)
            node = info.node if info is not None else None
        else:
            node = self.cache.cohort_nodes.get(name)
        return weighted_share(self._share(node)) if node is not None else 0

    def _fair_order(self, entries: list[Entry]) -> Iterator[Entry]:
        """Kueue's fair-sharing tournament: each pick sees the usage of the admissions
        made before it in the cycle."""
        fitting = {e[2].id: e for e in entries if e[4].ok}
        by_queue = {e[3].cq.name: e for e in fitting.values()}
        while fitting:
            by_root: dict[int, QuotaNode] = {}
            for e in fitting.values():
                node = self.cache.cluster_queues[e[3].cq.name].node
                top = node.top or node
                by_root.setdefault(id(top), top)
            winners = [w for top in by_root.values() if (w := self._nominee(top, by_queue))]
            winner = min(winners, key=lambda e: e[1])
            del fitting[winner[2].id]
            del by_queue[winner[3].cq.name]
            yield winner
        yield from (e for e in entries if not e[4].ok)

    def _nominee(self, node: QuotaNode, by_queue: dict[str, Entry]) -> Entry | None:
        if node.is_cluster_queue:
            return by_queue.get(node.name)
        best: tuple[tuple[bool, tuple[float, float], tuple[float, float, int]], Entry] | None
        best = None
        for child in node.children:
            entry = self._nominee(child, by_queue)
            if entry is None:
                continue
            usage = entry[4].usage
            borrows = any(child.borrowing_with(fr, amount) for fr, amount in usage.items())
            share = share_and_ratio(child, node_weight(self.cache, child), usage)
            key = (borrows, share, entry[1])
            if best is None or key < best[0]:
                best = (key, entry)
        return best[1] if best is not None else None

    def _issue_preemption(
        self,
        rec: JobRecord,
        sq: ShapeQueue,
        info: ClusterQueueInfo,
        targets: list[Candidate],
        claimed: set[int],
        out: list[Decision],
    ) -> None:
        path = _path(info)
        for cand in targets:
            claimed.add(cand.rec.id)
            adm = cand.rec.admission
            assert adm is not None
            if adm.evicting:
                continue
            adm.evicting = True
            self._ends_changed()
            cand.rec.evicted_for = "Preempted"
            cand.rec.evicted_at = self._now
            victim_info = self.cache.cluster_queues.get(adm.cluster_queue)
            victim_path = _path(victim_info) if victim_info is not None else adm.cluster_queue
            settings = self._victim_settings(adm.cluster_queue)
            out.append(
                Evict(
                    cand.rec.id,
                    "Preempted",
                    f"Preempted to accommodate a workload (job {rec.id}) due to "
                    f"{_PREEMPTION_WORDS[cand.reason]}; preemptor path: {path}; "
                    f"preemptee path: {victim_path}",
                    preemptor=rec.id,
                    preemption_reason=cand.reason,
                    mode=settings.mode,
                    grace_period_s=settings.grace_period_s,
                )
            )
        reason = Reason(
            ReasonCode.PENDING_PREEMPTION,
            f"Pending the preemption of {len(targets)} workload(s)",
            {"clusterQueue": info.name, "victims": [c.rec.id for c in targets]},
        )
        cqq = sq.cq
        cqq.blocked_by = rec
        cqq.sticky = True
        cqq.pinned = rec
        self.queues.parked.park(cqq, reason, tuple(f"evict:{c.rec.id}" for c in targets))
        self._emit_reason(rec, reason, out)

    def _oracle(self, rec: JobRecord, info: ClusterQueueInfo) -> Oracle:
        """Kueue's preemption oracle for the flavor search: for one flavor-resource,
        whether preempting (quota only) could make room, and in which mode."""
        node = info.node

        def oracle(fr: FlavorResource, needed: int) -> tuple[int, int] | None:
            if not considers(info, fr, needed):
                return None

            def fits(allow_borrowing: bool) -> int | None:
                if needed > available(node, fr):
                    return None
                if not allow_borrowing and node.usage.get(fr, 0) + needed > node.nominal.get(fr, 0):
                    return None
                return node.borrowing_height(fr, needed)

            preemptor = Preemptor(
                self.cache,
                self._admitted_by_cq,
                fits,
                self._lift_quota,
                self._put_back_quota,
                self._exempt,
            )
            found = preemptor.targets(rec, info, {fr: needed}, set())
            if found is None:
                return NO_CANDIDATES, 0
            targets, borrow = found
            return (RECLAIM if all(not c.own_queue for c in targets) else PREEMPT), borrow

        return oracle

    def _charged_node(self, rec: JobRecord) -> QuotaNode | None:
        """The quota node an admitted job is charged to, if its ClusterQueue still holds it."""
        adm = rec.admission
        assert adm is not None
        info = self.cache.cluster_queues.get(adm.cluster_queue)
        return adm.quota_node if info is not None and info.node is adm.quota_node else None

    def _lift_quota(self, rec: JobRecord) -> None:
        node = self._charged_node(rec)
        if node is not None:
            assert rec.admission is not None
            for fr, amount in rec.admission.usage.items():
                node.remove_usage(fr, amount)

    def _put_back_quota(self, rec: JobRecord) -> None:
        node = self._charged_node(rec)
        if node is not None:
            assert rec.admission is not None
            for fr, amount in rec.admission.usage.items():
                node.add_usage(fr, amount)

    def _lift(self, rec: JobRecord) -> None:
        """Take an admitted job's quota and node capacity away, for a trial."""
        self._lift_quota(rec)
        adm = rec.admission
        assert adm is not None
        held = self._holds.owner
        for slot, amounts, exclusive, devices in adm.allocations:
            # A held node stays closed: what a job there frees belongs to the reservation.
            if slot not in held:
                slot.give_back(rec.id, amounts, exclusive, devices)
                self.cache.reindex(slot)

    def _put_back(self, rec: JobRecord) -> None:
        self._put_back_quota(rec)
        adm = rec.admission
        assert adm is not None
        held = self._holds.owner
        for slot, amounts, exclusive, devices in adm.allocations:
            if slot not in held:
                slot.take(rec.id, amounts, exclusive, devices)
                self.cache.reindex(slot)

    def _reserve(
        self, rec: JobRecord, info: ClusterQueueInfo, frs: dict[FlavorResource, int]
    ) -> None:
        """Hold quota for a lender's head whose preemption found no targets (Kueue's
        ``reserveCapacityForUnreclaimablePreempt``): later entries of this round cannot
        borrow it."""
        if info.model.preemption.reclaim_within_cohort == "Any" or info.node.parent is None:
            return
        node = info.node
        for fr, need in frs.items():
            if need <= available(node, fr):
                continue
            usage, nominal = node.usage.get(fr, 0), node.nominal.get(fr, 0)
            if usage + need <= nominal:
                amount = min(need, nominal - usage)
            else:
                limit = node.borrowing_limit.get(fr)
                amount = need if limit is None else min(need, nominal + limit - usage)
            if amount > 0:
                node.add_usage(fr, amount)
                self._reserved.append((info, fr, amount, rec))
        self.assigner.generation += 1

    def _release_holds(self) -> None:
        """Give back the reservations of StrictFIFO heads that are no longer blocked."""
        for name in list(self._held):
            cqq = self.queues.queues.get(name)
            if cqq is not None and cqq.parked and cqq.blocked_by is not None:
                continue
            for info, fr, amount in self._held.pop(name):
                info.node.remove_usage(fr, amount)
                top = info.node.top or info.node
                level = top.subtree.get(fr, 0) - top.usage.get(fr, 0)
                self.queues.release(info.root_key, {fr: amount}, {fr: level}, [])
            self.assigner.generation += 1

    def _unreserve(self) -> None:
        """End the round's reservations; wake what parked while they held quota (Kueue
        skips those entries and retries them in the next cycle)."""
        if not self._reserved:
            return
        reservers = {id(rec) for *_, rec in self._reserved}
        for entry in self._reserved:
            info, fr, amount, rec = entry
            sq = rec.queue
            if (
                self.config.heads_per_cycle is not None
                and sq is not None
                and sq.cq.strict
                and sq.cq.blocked_by is rec
                and sq.cq.parked
            ):
                self._held.setdefault(sq.cq.name, []).append((info, fr, amount))
            else:
                info.node.remove_usage(fr, amount)
        woken = [item for item, rec in self._parked_while_reserved if id(rec) not in reservers]
        self._reserved = []
        self._parked_while_reserved = []
        self.queues.wake(woken)
        self.assigner.generation += 1

    # ------------------------------------------------------------------ partial admission

    def _partial(
        self, rec: JobRecord, info: ClusterQueueInfo, claimed: set[int]
    ) -> tuple[Assignment | None, list[Candidate] | None, Assignment | None]:
        """Kueue's partial admission, run when the full count neither fits nor can
        preempt: the largest count of the pod set with ``minCount`` that fits now or
        by preempting. Returns the assignment that fits, or the victims to preempt,
        or (neither) the failed assignment of the smallest count."""
        target = rec.shape.partial
        if target is None or target.min_count is None:
            return None, None, None
        step = target.unit_size
        lo = -(-target.min_count // step)
        hi = target.count // step - 1
        smallest: Assignment | None = None
        best: tuple[Assignment | None, list[Candidate] | None] = (None, None)
        first = True
        while lo <= hi:
            # The smallest count first: if even that cannot be admitted, stop there.
            mid = lo if first else (lo + hi + 1) // 2
            shape = self._shapes.reduced(rec.shape, target, mid * step)
            trial = self.assigner.assign_fresh(shape, info)
            victims = None if trial.ok else self._targets(rec, shape, info, trial, claimed)
            if trial.ok or victims:
                best = (trial if trial.ok else None, victims)
                lo = mid + 1
            elif first:
                smallest = trial
                break
            else:
                hi = mid - 1
            first = False
        return best[0], best[1], smallest

    # ------------------------------------------------------------------ waitForPodsReady

    def _pods_ready_timeouts(self, now: float, out: list[Decision]) -> None:
        ready = self.config.wait_for_pods_ready
        assert ready is not None
        for job_id, deadline in sorted(self._unready.items(), key=lambda item: item[1]):
            if deadline > now:
                continue
            del self._unready[job_id]
            rec = self.jobs.get(job_id)
            if rec is None or rec.admission is None or rec.admission.evicting:
                continue
            rec.admission.evicting = True
            self._ends_changed()
            rec.evicted_for = "PodsReadyTimeout"
            rec.evicted_at = now
            count = rec.requeue_count + 1
            if ready.backoff_limit_count is not None and count > ready.backoff_limit_count:
                rec.deactivate = True
            else:
                rec.requeue_count = count
                delay = min(ready.backoff_base_s * 2 ** (count - 1), ready.backoff_max_s)
                rec.requeue_at = now + delay
            out.append(
                Evict(
                    job_id,
                    "PodsReadyTimeout",
                    f"Exceeded the PodsReady timeout {_seconds(ready.timeout_s)}",
                )
            )

    def _admit(self, rec: JobRecord, info: ClusterQueueInfo, assignment: Assignment) -> Admit:
        node = info.node
        for fr, amount in assignment.usage.items():
            node.add_usage(fr, amount)
        allocations: list[Allocation] = []
        pod_sets = []
        for result in assignment.pod_sets:
            shape = result.shape
            placed = []
            prefer = result.share_devices or ()
            for i, (slot, units) in enumerate(result.nodes):
                amounts = unit_amounts(shape, slot)
                if not shape.exclusive:
                    amounts = {r: a * units for r, a in amounts.items()}
                devices, gpus = plan_devices(
                    slot, shape, units, prefer[i] if i < len(prefer) else -1
                )
                slot.take(rec.id, amounts, shape.exclusive, devices)
                self.cache.reindex(slot)
                allocations.append((slot, amounts, shape.exclusive, devices))
                placed.append(NodeAssignment(slot.name, units * shape.unit_size, gpus))
            pod_sets.append(
                PodSetAssignment(
                    shape.name,
                    tuple(sorted(result.flavors.items())),
                    tuple(placed),
                    count=shape.count,
                )
            )
        self.assigner.generation += 1
        decision = Admit(
            job_id=rec.id,
            cluster_queue=info.name,
            pod_sets=tuple(pod_sets),
            borrowing=assignment.borrow > 0,
            priority=rec.priority,
        )
        self._forget_pending(rec)
        rec.admission = Admission(
            info.name, node, dict(assignment.usage), allocations, decision, admitted_at=self._now
        )
        if self._ends is not None and rec.job.time_limit is not None:
            # Kept sorted rather than rebuilt: backfill admits many jobs in one pass.
            entry = (self._now + rec.job.time_limit, rec.admission.usage, info.name)
            self._quota_ends.clear()
            for key in (info.root_key, "cq:" + info.name):
                bisect.insort(self._ends.setdefault(key, []), entry, key=lambda e: e[0])
        if self._timeline is not None:
            self._timeline.started(rec)
        rec.reason = None
        ready = self.config.wait_for_pods_ready
        if ready is not None:
            self._unready[rec.id] = self._now + ready.timeout_s
        self._admitted_by_cq.setdefault(info.name, {})[rec.id] = rec
        self.limits.charge(rec, self.cache.tenants, {p.name: p.count for p in pod_sets})
        if self._afs is not None:
            self._afs_admitted(rec, info.name, assignment.usage)
        return decision

    def _park(
        self,
        rec: JobRecord,
        sq: ShapeQueue,
        info: ClusterQueueInfo,
        assignment: Assignment,
        out: list[Decision],
    ) -> None:
        failed = assignment.failed
        assert failed is not None
        memo = failed.memo
        if not memo:
            # A failure shared by several queues of a tree is analysed once.
            memo["sig"] = signature(failed)
            placed = [r for r in assignment.pod_sets if r is not failed]
            memo["wake"] = wake_conditions(failed, placed)
        sig: tuple[object, ...] = memo["sig"]  # type: ignore[assignment]
        wake: tuple[list[tuple[FlavorResource, int, int]], tuple[str, ...]]
        wake = memo["wake"]  # type: ignore[assignment]
        shortages, keys = wake
        if rec.reason_sig is not None and rec.reason_sig[0] == sig:
            reason = rec.reason_sig[1]
        else:
            reason = reason_for_failure(info.name, info.node, failed)
            rec.reason_sig = (sig, reason)
        parked = self.queues.parked
        root = info.root_key
        if info.node.simple:
            conditions = tuple(("level", root, fr, needed) for fr, needed, _ in shortages)
        else:
            conditions = tuple(
                ("total", root, fr, parked.total(root, fr) + short) for fr, _, short in shortages
            )
        cqq = sq.cq
        if cqq.pinned is rec:
            cqq.pinned = None
        if cqq.strict:
            cqq.blocked_by = rec
            parked.park(cqq, reason, keys, conditions)
        else:
            parked.park(sq, reason, keys, conditions)
        if self._reserved:
            self._parked_while_reserved.append((cqq if cqq.strict else sq, rec))
        # A new signature means new facts in the sentence: emit without wording it now.
        if rec.reason is not reason:
            rec.reason = reason
            out.append(Pending(rec.id, reason))

    def _emit_reason(self, rec: JobRecord, reason: Reason, out: list[Decision]) -> None:
        if rec.reason != reason:
            rec.reason = reason
            out.append(Pending(rec.id, reason))

    def _evict_drained(self, out: list[Decision]) -> None:
        if not self._drain:
            return
        for key in list(self._drain):
            if key.startswith("lq:"):
                lq = self.cache.local_queues.get(key[3:])
                active = lq is not None and lq.stop_policy is StopPolicy.HOLD_AND_DRAIN
                victims = [
                    r
                    for jobs in self._admitted_by_cq.values()
                    for r in jobs.values()
                    if r.local_queue == key[3:]
                ]
                reason = "LocalQueueStopped"
                message = f"LocalQueue {key[3:]} is stopped"
            else:
                info = self.cache.cluster_queues.get(key)
                active = info is not None and info.model.stop_policy is StopPolicy.HOLD_AND_DRAIN
                victims = list(self._admitted_by_cq.get(key, {}).values())
                reason = "ClusterQueueStopped"
                message = f"ClusterQueue {key} is stopped"
            del self._drain[key]
            if not active:
                continue
            for rec in victims:
                if rec.admission is not None and not rec.admission.evicting:
                    rec.admission.evicting = True
                    self._ends_changed()
                    rec.evicted_for = reason
                    rec.evicted_at = self._now
                    out.append(Evict(rec.id, reason, message))

    # ------------------------------------------------------------------ queries

    def priority_factors(self, job_id: int) -> dict[str, float] | None:
        """A pending job's priority broken into its preset's terms, as of the last
        recalculation: ``slurm``: the weighted ``site``, ``age``, ``assoc``,
        ``fairshare``, ``jobsize``, ``partition``, ``qos``, ``tres`` (and each weighted
        TRES factor as ``tres:<name>``) and the ``nice`` value; ``phalanx``: ``age``,
        ``share``, ``qos``, ``size`` (they add up to the priority); ``kueue``:
        ``priority`` and, under Admission Fair Sharing, ``lq_score``. None for a job
        that is not pending."""
        rec = self.jobs.get(job_id)
        if rec is None or rec.admission is not None:
            return None
        ctx = self._context(self._now)
        if rec.local_queue is not None and self._uses_afs(rec.cluster_queue):
            ctx = replace(ctx, lq_scores={rec.local_queue: self._lq_score(rec)})
        return self.policies.ordering.factors(rec.facts, ctx)

    def explain(self, job_id: int) -> Reason | None:
        """Why a pending job waits (None for an admitted or unknown job)."""
        rec = self.jobs.get(job_id)
        if rec is None or rec.admission is not None:
            return None
        if rec.waiting is not None:
            return rec.waiting
        sq = rec.queue
        assert sq is not None
        cqq: ClusterQueueQueue = sq.cq
        if cqq.stopped is not None:
            return cqq.stopped
        if cqq.parked and cqq.blocked_by is not None:
            if cqq.blocked_by is rec:
                return cqq.park_reason
            if cqq.sticky:
                return Reason(
                    ReasonCode.PRIORITY,
                    f"waiting behind job {cqq.blocked_by.id}, which is pending the preemption "
                    f"of the workloads it needs in ClusterQueue {cqq.name}",
                    {"clusterQueue": cqq.name, "blockedBy": cqq.blocked_by.id},
                )
            return strict_fifo_reason(cqq.name, cqq.blocked_by.id)
        if sq.parked and sq.park_reason is not None:
            return sq.park_reason
        if rec.reason is not None:
            return rec.reason
        return Reason(
            ReasonCode.PRIORITY,
            f"waiting for higher-priority jobs in ClusterQueue {cqq.name}",
            {"clusterQueue": cqq.name},
        )

    def estimated_start(self, job_id: int) -> float | None:
        """When a pending job is expected to start, from the backfill plan (None: unknown)."""
        return self._estimates.get(job_id)

    def no_estimate_why(self, job_id: int) -> str | None:
        """Why a pending job has no planned start, in words (None: it has one, or it is
        not pending)."""
        rec = self.jobs.get(job_id)
        if rec is None or rec.admission is not None or job_id in self._estimates:
            return None
        bf = self.config.backfill
        if rec.queue is None:
            return "it is not queued (held, or waiting for a dependency or its begin time)"
        if bf is not None and job_id not in self._planned:
            every = f"every {_hours(bf.interval_s)}" if bf.interval_s else "in every cycle"
            return (
                f"the backfill pass, which plans the top jobs of each ClusterQueue {every}, "
                "has not planned it"
            )
        info = self.cache.cluster_queues.get(rec.cluster_queue or "")
        key = info.root_key if info is not None else ""
        why = self._unplanned_why.get(key)
        if why is None:
            why = self._unplanned_why[key] = self._why_unplanned(-1, info)
        return why

    def _why_unplanned(self, job_id: int, info: ClusterQueueInfo | None) -> str:
        """Why the plan has no start for a job of ``info`` (``job_id``: its own
        reservation, if any, does not count)."""
        bf = self.config.backfill
        if bf is None:
            return (
                f"the {self.config.preset} preset plans no start times "
                "(phalanx up --backfill plans them)"
            )
        if info is not None and self._unlimited_in(info.root_key):
            return (
                "the jobs holding what it needs include some without a time limit, "
                "which never end in the plan"
            )
        if any(r.job_id != job_id for r in self._reservations.values()):
            return (
                "the nodes it could use are held for higher-priority jobs' reservations, "
                "and the plan does not look past their starts"
            )
        return f"it cannot start within the planning window ({_hours(bf.window_s)})"

    def _unlimited_in(self, root: str) -> bool:
        """Whether an admitted job of the quota tree ``root`` has no time limit."""
        for cq_name, jobs in self._admitted_by_cq.items():
            info = self.cache.cluster_queues.get(cq_name)
            if info is None or info.root_key != root:
                continue
            if any(r.job.time_limit is None for r in jobs.values()):
                return True
        return False

    def planned_start(
        self, job: Job, cluster_queue: str, now: float
    ) -> tuple[float | None, str | None]:
        """When ``job`` would start if it were submitted now (``sbatch --test-only``):
        ``now`` when it fits, else the backfill plan's start around the reservations
        that stand; ``(None, why)`` when it cannot be planned. Changes nothing."""
        info = self.cache.cluster_queues.get(cluster_queue)
        if info is None:
            return None, f"ClusterQueue {cluster_queue} is not known"
        rec = self._record(job)
        if self.assigner.assign_fresh(rec.shape, info).ok:
            return now, None
        if self.config.backfill is None:
            return None, self._why_unplanned(job.id, info)
        saved = self._now
        self._now = now
        try:
            self._timeline_now().new_pass()
            planned = self._plan(rec, info, self._quota_ends_of(info.root_key))
        finally:
            self._now = saved
        if planned is None:
            return None, self._why_unplanned(job.id, info)
        return planned[0], None

    def reservations(self) -> list[Reservation]:
        """The reservations held now, in their jobs' order (:meth:`plan_order`)."""
        return sorted(
            self._reservations.values(), key=lambda r: self.plan_order(self.jobs[r.job_id])
        )

    def reservation(self, job_id: int) -> Reservation | None:
        return self._reservations.get(job_id)

    def node_state(self, name: str) -> NodeState | None:
        slot = self.cache.nodes.get(name)
        return slot.state() if slot is not None else None

    def pending_count(self) -> int:
        return sum(len(jobs) for jobs in self._pending_by_tenant.values())

    def admitted_count(self) -> int:
        return sum(len(jobs) for jobs in self._admitted_by_cq.values())


def _hours(seconds: float) -> str:
    hours = seconds / 3600
    if hours >= 1:
        return f"{hours:g} h"
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"
