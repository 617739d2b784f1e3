"""A job's way through the engine between cycles.

Submitted or adopted, a job is recorded and queued in its ClusterQueue, or
waits (for its LocalQueue, a namespace match, or a ``switches`` wait). Limits
and requeue backoffs hold it back; a finished or requeued job gives back its
quota, nodes and limit usage, which wakes what waited for them.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from phalanx.engine.cache.capacity import MILLI, Devices
from phalanx.engine.cache.quota import FlavorResource, QuotaNode
from phalanx.engine.cache.runlimits import Key
from phalanx.engine.decisions import (
    Admit,
    Deactivate,
    Decision,
    NodeAssignment,
)
from phalanx.engine.explain.reasons import Reason, ReasonCode
from phalanx.engine.explain.waiting import (
    waiting_reason,
)
from phalanx.engine.placement import plan_devices, unit_amounts
from phalanx.engine.priority.ordering import job_facts
from phalanx.engine.queueing.shapes import PodSetShape
from phalanx.engine.state import Admission, Allocation, JobRecord
from phalanx.model import (
    GPU_MILLI,
    ClusterQueue,
    Job,
    QueueingStrategy,
)

if TYPE_CHECKING:
    from phalanx.engine.engine import Engine


def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _recorded_devices(shape: PodSetShape, placed: NodeAssignment) -> Devices:
    """The GPU devices an admission recorded for ``placed`` (none recorded, or an
    exclusive pod set, which holds every device: empty, to be planned again)."""
    if not placed.gpus or shape.exclusive:
        return ()
    share = shape.request(GPU_MILLI)
    milli = share if share else MILLI
    return tuple((index, milli) for index in placed.gpus)


class JobLifecycle:
    """Job events and the transitions between pending, waiting, held, admitted and gone."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.backoff: dict[int, JobRecord] = {}
        """Requeued jobs waiting for their requeueAt."""
        self.switch_waits: list[tuple[float, int]] = []
        """A heap of ``(when, job)``: when a job's ``switches`` wait ends."""

    def record(self, job: Job) -> JobRecord:
        """A new record of ``job``: its shape, and its priority value (its own, else its
        PriorityClass's)."""
        value = job.priority
        if value is None:
            pc = self._engine.cache.priority_classes.get(job.priority_class or "")
            value = pc.value if pc is not None else 0
        return JobRecord(job=job, shape=self._engine.shapes.job(job), facts=job_facts(job, value))

    def submit(self, job: Job) -> None:
        if job.id in self._engine.jobs:
            raise ValueError(f"job {job.id} was already submitted")
        rec = self.record(job)
        rec.order_time = job.submit_time
        self._engine.jobs[job.id] = rec
        self._engine.workload.observe(rec.shape.pod_sets)
        self._engine.pending_by_tenant.setdefault(job.tenant, {})[job.id] = rec
        self._engine.priorities.set_priority(rec, self._engine.priorities.context(job.submit_time))
        waits = [
            p.topology.wait_s
            for p in job.pod_sets
            if p.topology is not None and p.topology.wait_s is not None
        ]
        if waits:
            heapq.heappush(self.switch_waits, (job.submit_time + min(waits), job.id))
        self.enqueue(rec)

    def end_switch_waits(self, now: float) -> None:
        """Jobs whose ``switches`` wait is over are placed without it (Slurm's
        ``--switches=N@max-time``)."""
        while self.switch_waits and self.switch_waits[0][0] <= now:
            _, job_id = heapq.heappop(self.switch_waits)
            rec = self._engine.jobs.get(job_id)
            if rec is None or rec.admission is not None:
                continue
            relaxed = self._engine.shapes.relaxed(rec.shape)
            if relaxed is rec.shape:
                continue
            if job_id in self._engine.reserved.by_job:
                self._engine.reserved.drop(job_id)
            self._engine.backfill.estimates.pop(job_id, None)
            if rec.queue is None:
                rec.shape = relaxed  # waiting outside the queues: queued with it later
                continue
            self._engine.queues.remove(rec)
            rec.shape = relaxed
            self.enqueue(rec)

    def adopt(self, job: Job, decision: Admit, admitted_at: float | None = None) -> None:
        self.submit(job)
        rec = self._engine.jobs[job.id]
        self.forget_pending(rec)
        rec.reason = None
        rec.cluster_queue = decision.cluster_queue
        info = self._engine.cache.cluster_queues.get(decision.cluster_queue)
        shapes = {p.name: p for p in rec.shape.pod_sets}
        usage: dict[FlavorResource, int] = {}
        allocations: list[Allocation] = []
        for assigned in decision.pod_sets:
            shape = shapes[assigned.name]
            for resource, flavor in assigned.flavors:
                flavor_resource = (flavor, resource)
                usage[flavor_resource] = usage.get(
                    flavor_resource, 0
                ) + assigned.count * shape.per_task(resource)
            for placed in assigned.nodes:
                slot = self._engine.cache.nodes.get(placed.node)
                if slot is None:
                    continue
                units = placed.count // shape.unit_size
                amounts = unit_amounts(shape, slot)
                if not shape.exclusive:
                    amounts = {r: a * units for r, a in amounts.items()}
                devices = _recorded_devices(shape, placed) or plan_devices(slot, shape, units)[0]
                slot.take(rec.id, amounts, shape.exclusive, devices)
                self._engine.cache.reindex(slot)
                allocations.append((slot, amounts, shape.exclusive, devices))
        if info is not None:
            for flavor_resource, amount in usage.items():
                info.node.add_usage(flavor_resource, amount)
            node = info.node
        else:
            node = QuotaNode(decision.cluster_queue, True)
        self._engine.assigner.generation += 1
        since = job.submit_time if admitted_at is None else admitted_at
        self._engine.ends.changed()
        rec.admission = Admission(
            decision.cluster_queue, node, usage, allocations, decision, admitted_at=since
        )
        self._engine.admitted_by_cq.setdefault(decision.cluster_queue, {})[rec.id] = rec
        self._engine.limits.charge(
            rec, self._engine.cache.tenants, {p.name: p.count for p in decision.pod_sets}
        )

    def enqueue(self, rec: JobRecord) -> None:
        cq_name, lq_key, problem = self._engine.objects.resolve(rec)
        rec.local_queue = lq_key
        if problem is not None:
            self.wait(rec, problem)
            return
        assert cq_name is not None
        rec.cluster_queue = cq_name
        if rec.facts.cluster_queue != cq_name or rec.facts.local_queue != lq_key:
            # The ClusterQueue picks the ordering (phalanx.io/preset) and some factors.
            rec.facts = replace(rec.facts, cluster_queue=cq_name, local_queue=lq_key)
            self._engine.priorities.set_priority(
                rec, self._engine.priorities.context(rec.job.submit_time)
            )
        elif self._engine.afs.usage is not None and rec.key[0] != -math.inf:
            # (An expedited job's key stays first.)
            rec.key = (self._engine.afs.lq_score(rec), *rec.key[1:])
        rec.waiting = None
        self._engine.waiting.pop(rec.id, None)
        info = self._engine.cache.cluster_queues[cq_name]
        cq_queue = self._engine.queues.queue(
            cq_name, info.model.queueing_strategy is QueueingStrategy.STRICT_FIFO
        )
        cq_queue.stopped = self._engine.cache.stop_reason(info)
        before = self._engine.queues.push(rec, cq_queue)
        sq = rec.queue
        if (
            sq is not None
            and sq.parked
            and before is not None
            and rec.priority > before.priority
            and sq.peek() is rec
            and _may_preempt(info.model)
        ):
            # The parked head could not preempt; this one of a higher priority has not
            # been tried and may (Kueue tries every new workload).
            self._engine.queues.wake([sq])
        if cq_queue.stopped is not None:
            self._engine.emit_reason(rec, cq_queue.stopped, self._engine.outbox)

    def wait(self, rec: JobRecord, reason: Reason | None) -> None:
        if reason is None:
            self.enqueue(rec)
            return
        rec.cluster_queue = None
        rec.waiting = reason
        self._engine.waiting[rec.id] = rec
        self._engine.emit_reason(rec, reason, self._engine.outbox)

    def forget_pending(self, rec: JobRecord) -> None:
        if rec.id in self._engine.reserved.by_job:
            self._engine.reserved.drop(rec.id)
        self._engine.backfill.estimates.pop(rec.id, None)
        self._engine.backfill.waiting.pop(rec.id, None)
        self._engine.queues.remove(rec)
        self._engine.waiting.pop(rec.id, None)
        self.backoff.pop(rec.id, None)
        self._engine.limits.forget(rec)
        tenant_jobs = self._engine.pending_by_tenant.get(rec.job.tenant)
        if tenant_jobs is not None:
            tenant_jobs.pop(rec.id, None)

    def finish(self, job_id: int) -> None:
        rec = self._engine.jobs.pop(job_id, None)
        if rec is None:
            return
        if rec.admission is None:
            self.forget_pending(rec)
        else:
            self._release(rec)

    def requeue(self, job_id: int) -> None:
        rec = self._engine.jobs.get(job_id)
        if rec is None or rec.admission is None:
            return
        self._release(rec)
        rec.reason = None
        evicted_for, rec.evicted_for = rec.evicted_for, None
        if rec.deactivate:
            del self._engine.jobs[rec.id]
            self._engine.outbox.append(
                Deactivate(
                    rec.id,
                    "RequeuingLimitExceeded",
                    "The workload is deactivated due to exceeding the maximum number of "
                    "re-queuing retries",
                )
            )
            return
        ready = self._engine.config.wait_for_pods_ready
        if (
            evicted_for == "PodsReadyTimeout"
            and ready is not None
            and ready.requeuing_timestamp == "Eviction"
        ):
            rec.order_time = rec.evicted_at
        self._engine.pending_by_tenant.setdefault(rec.job.tenant, {})[rec.id] = rec
        self._engine.priorities.set_priority(
            rec, self._engine.priorities.context(rec.job.submit_time)
        )
        if rec.requeue_at is not None and rec.requeue_at > self._engine.now:
            self.hold_for_backoff(rec)
            return
        self.enqueue(rec)

    def hold_for_backoff(self, rec: JobRecord) -> None:
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
        self.backoff[rec.id] = rec
        self._engine.emit_reason(rec, reason, self._engine.outbox)

    def end_backoffs(self, now: float) -> None:
        for rec in list(self.backoff.values()):
            if rec.requeue_at is not None and rec.requeue_at <= now:
                del self.backoff[rec.id]
                rec.requeue_at = None
                rec.waiting = None
                self.enqueue(rec)

    def limit_held(self, rec: JobRecord, out: list[Decision]) -> bool:
        """Hold a queued job that would go over a QOS or tenant limit now: out of its
        queue (it blocks no one and gets no reservation) until its limit's key frees."""
        found = self._engine.limits.check(rec, self._engine.cache.tenants)
        if found is None:
            return False
        key, reason = found
        self._engine.queues.remove(rec)
        self._engine.backfill.estimates.pop(rec.id, None)
        self._hold_for_limit(rec, key, reason, out)
        return True

    def _hold_for_limit(
        self, rec: JobRecord, key: Key, reason: Reason, out: list[Decision]
    ) -> None:
        rec.waiting = reason
        self._engine.limits.hold(rec, key)
        self._engine.emit_reason(rec, reason, out)

    def recheck_held(self, keys: Iterable[Key]) -> None:
        """The jobs held under ``keys`` (whose usage or limits changed): queue those no
        limit holds now."""
        free, held = self._engine.limits.recheck(keys, self._engine.cache.tenants)
        for rec in free:
            rec.waiting = None
            self.enqueue(rec)
        for rec, key, reason in held:
            self._hold_for_limit(rec, key, reason, self._engine.outbox)

    def _release(self, rec: JobRecord) -> None:
        admission = rec.admission
        assert admission is not None
        rec.admission = None
        self._engine.ends.ended(rec, admission)
        self._engine.pods_ready.unready.pop(rec.id, None)
        self._engine.admitted_by_cq.get(admission.cluster_queue, {}).pop(rec.id, None)
        charged = self._engine.limits.release(rec.id)
        if charged:
            self.recheck_held(charged)
        info = self._engine.cache.cluster_queues.get(admission.cluster_queue)
        keys: list[str] = []
        root = ""
        levels: dict[FlavorResource, int] = {}
        if info is not None and info.node is admission.quota_node:
            node = info.node
            for flavor_resource, amount in admission.usage.items():
                node.remove_usage(flavor_resource, amount)
            root = info.root_key
            top = node.top or node
            levels = {
                flavor_resource: top.subtree.get(flavor_resource, 0)
                - top.usage.get(flavor_resource, 0)
                for flavor_resource in admission.usage
            }
        nodes = self._engine.cache.nodes
        reserved = self._engine.reserved.holds
        for slot, amounts, exclusive, devices in admission.allocations:
            slot.give_back(rec.id, amounts, exclusive, devices)
            if slot in reserved.owner:
                # Absorbed by the hold: nothing is free there for anyone but its holder.
                reserved.absorb(slot)
                if nodes.get(slot.name) is slot:
                    self._engine.cache.reindex(slot)
                continue
            if nodes.get(slot.name) is slot:
                self._engine.cache.reindex(slot)
                keys.extend("flavor:" + index.name for index in slot.flavors)
        if admission.evicting:
            keys.append(f"evict:{rec.id}")
        self._engine.queues.release(
            root, admission.usage if root else {}, levels, list(dict.fromkeys(keys))
        )
        if self._engine.reserved.by_job:
            self._engine.reserved.wake_holders(root, (a[0] for a in admission.allocations))
        if self._engine.expedite.jobs:
            self._engine.expedite.wake()
        if self._engine.preemption.held and root:
            # A held reservation hides what this release freed from the blocked head's
            # wake condition: any release in its tree re-nominates it.
            for name, holds in self._engine.preemption.held.items():
                cq_queue = self._engine.queues.queues.get(name)
                if cq_queue is not None and cq_queue.parked and holds[0][0].root_key == root:
                    self._engine.queues.wake([cq_queue])


def _may_preempt(cq: ClusterQueue) -> bool:
    """Whether a job of ``cq`` may preempt others at all (by its priority)."""
    policy = cq.preemption
    return policy.within_cluster_queue != "Never" or policy.reclaim_within_cohort != "Never"
