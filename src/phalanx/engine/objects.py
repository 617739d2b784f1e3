"""The configuration objects the engine holds, and what a change of one does.

Nodes, flavors, topologies, cohorts, ClusterQueues, LocalQueues, tenants and
priority classes arrive as ``Upsert``/``Delete`` events. Each change updates the
cluster cache and then the jobs it concerns: quota changes wake parked queues,
a LocalQueue or namespace change moves jobs between waiting and queued, a limit
change re-checks the jobs held by limits.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from phalanx.engine.cache.runlimits import Key
from phalanx.engine.explain.reasons import Reason, ReasonCode
from phalanx.engine.explain.waiting import (
    waiting_reason,
)
from phalanx.engine.queueing.namespaces import selector_matches
from phalanx.engine.state import JobRecord
from phalanx.model import (
    ClusterQueue,
    Cohort,
    LocalQueue,
    Node,
    PriorityClass,
    QueueingStrategy,
    ResourceFlavor,
    StopPolicy,
    Tenant,
    Topology,
)

if TYPE_CHECKING:
    from phalanx.engine.engine import Engine


def _local_queue_key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


class Objects:
    """The objects by kind and name, and the effects of upserting or deleting one."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.by_key: dict[tuple[str, str], Any] = {}

    def upsert(self, obj: Any) -> None:
        cache, queues = self._engine.cache, self._engine.queues
        if isinstance(obj, (Node, ResourceFlavor, Cohort, ClusterQueue)):
            self._engine.ends.changed()
            if self._engine.reserved.by_job:
                self._engine.reserved.drop_all()
                # Planned again at once, not at the next pass: meanwhile nothing would
                # keep lower-priority jobs off what the reserved jobs wait for.
                self._engine.backfill.last_pass = None
        if isinstance(obj, Node):
            self.by_key[("Node", obj.name)] = obj
            expedite = self._engine.expedite
            if expedite.jobs:
                # A node's reset would lose its hold: held again afterwards.
                expedite.unhold_all()
            cache.upsert_node(obj)
            if expedite.jobs:
                expedite.rehold_all()
            self._engine.priorities.dirty = True
            queues.wake_all()
        elif isinstance(obj, ResourceFlavor):
            self.by_key[("ResourceFlavor", obj.name)] = obj
            cache.upsert_flavor(obj)
            self._quota_changed()
        elif isinstance(obj, Topology):
            self.by_key[("Topology", obj.name)] = obj
            cache.topologies[obj.name] = obj
        elif isinstance(obj, Cohort):
            self.by_key[("Cohort", obj.name)] = obj
            cache.cohorts[obj.name] = obj
            self._quota_changed()
        elif isinstance(obj, ClusterQueue):
            self.by_key[("ClusterQueue", obj.name)] = obj
            cache.upsert_cluster_queue(obj)
            self._engine.priorities.inputs_changed()
            queues.queue(obj.name, obj.queueing_strategy is QueueingStrategy.STRICT_FIFO)
            if obj.stop_policy is StopPolicy.HOLD_AND_DRAIN:
                self._engine.draining[obj.name] = None
            self._quota_changed()
            cq_queue = queues.queues.get(obj.name)
            if cq_queue is not None and (
                obj.namespace_selector is not None
                or not self._engine.config.missing_namespace_selector_matches_all
            ):
                self._recheck_namespaces(
                    [
                        rec
                        for shape_queue in cq_queue.shapes.values()
                        for rec in shape_queue.members.values()
                    ]
                )
            self._resolve_waiting()
        elif isinstance(obj, LocalQueue):
            key = _local_queue_key(obj.namespace, obj.name)
            self.by_key[("LocalQueue", key)] = obj
            cache.local_queues[key] = obj
            self._engine.afs.lq_scores.pop(key, None)
            self._local_queue_changed(key)
        elif isinstance(obj, Tenant):
            self.by_key[("Tenant", obj.name)] = obj
            cache.tenants[obj.name] = obj
            # Allocations are normalized over the tenant tree: every tenant's L may change.
            self._engine.priorities.inputs_changed()
            self._recheck_namespaces(self._engine.pending_by_tenant.get(obj.name, {}).values())
            self._resolve_waiting()
            was = self._engine.limits.active
            if self._engine.limits.set_tenant(obj.name, obj.limits) or self._engine.limits.tenants:
                self._limits_switched(was)
                self._limits_changed(self._engine.limits.keys_of_tenants())
        elif isinstance(obj, PriorityClass):
            self.by_key[("PriorityClass", obj.name)] = obj
            cache.priority_classes[obj.name] = obj
            self._engine.priorities.dirty = True
            was = self._engine.limits.active
            if self._engine.limits.set_class(obj.name, obj.limits):
                self._limits_switched(was)
                self._limits_changed(self._engine.limits.keys_of_class(obj.name))
        else:
            raise TypeError(f"cannot upsert {type(obj).__name__}")

    def delete(self, kind: str, name: str) -> None:
        cache = self._engine.cache
        if kind in ("Node", "ResourceFlavor", "Cohort", "ClusterQueue"):
            self._engine.ends.changed()
            if self._engine.reserved.by_job:
                self._engine.reserved.drop_all()
                # Planned again at once, not at the next pass: meanwhile nothing would
                # keep lower-priority jobs off what the reserved jobs wait for.
                self._engine.backfill.last_pass = None
        self.by_key.pop((kind, name), None)
        if kind == "Node":
            expedite = self._engine.expedite
            if expedite.jobs:
                # Its hold goes with it (the others are held again).
                expedite.unhold_all()
            cache.delete_node(name)
            if expedite.jobs:
                expedite.rehold_all()
            self._engine.priorities.dirty = True
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
            self._engine.priorities.inputs_changed()
            cq_queue = self._engine.queues.queues.get(name)
            if cq_queue is not None:
                for shape_queue in list(cq_queue.shapes.values()):
                    for rec in list(shape_queue.members.values()):
                        self._engine.queues.remove(rec)
                        self._engine.lifecycle.wait(rec, self.resolve(rec)[2])
            self._quota_changed()
        elif kind == "LocalQueue":
            cache.local_queues.pop(name, None)
            self._local_queue_changed(name)
        elif kind == "Tenant":
            cache.tenants.pop(name, None)
            self._engine.priorities.inputs_changed()
            was = self._engine.limits.active
            if self._engine.limits.set_tenant(name, None) or self._engine.limits.tenants:
                self._limits_switched(was)
                self._limits_changed(self._engine.limits.keys_of_tenants())
        elif kind == "PriorityClass":
            cache.priority_classes.pop(name, None)
            self._engine.priorities.dirty = True
            was = self._engine.limits.active
            if self._engine.limits.set_class(name, None):
                self._limits_switched(was)
                self._limits_changed(self._engine.limits.keys_of_class(name))
        else:
            raise ValueError(f"unknown kind {kind!r}")

    def _quota_changed(self) -> None:
        self._engine.cache.rebuild_quota()
        for name, cq_queue in self._engine.queues.queues.items():
            info = self._engine.cache.cluster_queues.get(name)
            stopped = self._engine.cache.stop_reason(info) if info is not None else None
            if stopped is not None and stopped != cq_queue.stopped:
                # Jobs of a stopped or inactive queue are never heads: say why here.
                members = [
                    rec
                    for shape_queue in cq_queue.shapes.values()
                    for rec in shape_queue.members.values()
                ]
                for rec in sorted(members, key=lambda r: r.key):
                    self._engine.emit_reason(rec, stopped, self._engine.outbox)
            cq_queue.stopped = stopped
        self._engine.queues.wake_all()

    def resolve(self, rec: JobRecord) -> tuple[str | None, str | None, Reason | None]:
        job = rec.job
        cache = self._engine.cache
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
            selector is not None or not self._engine.config.missing_namespace_selector_matches_all
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
            problem = self.resolve(rec)[2]
            if problem is not None:
                self._engine.queues.remove(rec)
                self._engine.lifecycle.wait(rec, problem)

    def _local_queue_changed(self, key: str) -> None:
        lq = self._engine.cache.local_queues.get(key)
        if lq is not None and lq.stop_policy is StopPolicy.HOLD_AND_DRAIN:
            self._engine.draining["lq:" + key] = None
        for cq_queue in self._engine.queues.queues.values():
            for shape_queue in list(cq_queue.shapes.values()):
                for rec in list(shape_queue.members.values()):
                    if rec.local_queue == key:
                        self._engine.queues.remove(rec)
                        self._engine.lifecycle.wait(rec, self.resolve(rec)[2])
        self._resolve_waiting()

    def _resolve_waiting(self) -> None:
        for rec in list(self._engine.waiting.values()):
            problem = self.resolve(rec)[2]
            if problem is None:
                self._engine.lifecycle.enqueue(rec)
            elif problem != rec.waiting:
                # Still waiting, for another reason (the LocalQueue now exists, its CQ doesn't).
                self._engine.lifecycle.wait(rec, problem)

    def _limits_switched(self, was: bool) -> None:
        """Running jobs are charged to limits only while some are set."""
        if self._engine.limits.active and not was:
            admitted = (r for jobs in self._engine.admitted_by_cq.values() for r in jobs.values())
            self._engine.limits.started(admitted, self._engine.cache.tenants)
        elif was and not self._engine.limits.active:
            self._engine.limits.stopped()

    def _limits_changed(self, keys: list[Key]) -> None:
        """A limit changed: held jobs it concerns are checked again, and parked queues
        are woken so that queued jobs now over a lowered limit are held at nomination.
        Running jobs are never stopped."""
        self._engine.lifecycle.recheck_held(keys)
        self._engine.queues.wake_all()
