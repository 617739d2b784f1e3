"""Job priorities and when they are computed again.

The ordering (:mod:`phalanx.engine.priority.ordering`) turns a job's facts and a context
(tenant shares, priority tables, the time) into its sort key. This owner keeps
that context: tenants' usage shares, the tree- and queue-level tables, and
whether time or an input change makes the pending jobs' keys stale.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from phalanx.engine.expedite import expedited_key
from phalanx.engine.priority.ordering import PriorityContext, PriorityTables, TenantShare
from phalanx.engine.priority.tables import build_tables
from phalanx.engine.state import JobRecord
from phalanx.model.priorityannotations import PRESET_ANNOTATION

if TYPE_CHECKING:
    from phalanx.engine.engine import Engine


class Priorities:
    """Tenant shares, priority tables and the recomputation of pending jobs' keys."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.shares: dict[str, TenantShare] = {}
        self.computed_at: float | None = None
        self.dirty = False
        self.tables: PriorityTables | None = None
        """Tree- and queue-level priority inputs; None: rebuilt at the next use."""

    def export(self) -> dict[str, Any]:
        """This part of an engine snapshot (:mod:`phalanx.engine.snapshot`)."""
        return {
            "shares": {t: [s.usage, s.allocation, s.billing] for t, s in self.shares.items()},
            "priority_time": self.computed_at,
            "priority_dirty": self.dirty,
        }

    def load(self, data: Mapping[str, Any]) -> None:
        self.shares = {t: TenantShare(*share) for t, share in data["shares"].items()}
        self.tables = None
        self.computed_at = data["priority_time"]
        self.dirty = data["priority_dirty"]

    def tables_now(self) -> PriorityTables:
        tables = self.tables
        if tables is None:
            slurm = self._engine.config.slurm_priority
            tables = self.tables = build_tables(
                self._engine.cache,
                self.shares,
                default_preset=self._engine.config.preset,
                window_s=self._engine.config.usage.half_life_s
                or self._engine.config.priority_calc_period_s,
                fair_tree_algorithm=slurm.fair_tree,
                dampening=slurm.fairshare_dampening,
                raw_partition_factor=bool({"NO_NORMAL_PART", "NO_NORMAL_ALL"} & set(slurm.flags)),
            )
        return tables

    def presets(self) -> frozenset[str]:
        """The presets in use, without rebuilding the tables for it."""
        if self.tables is not None:
            return self.tables.presets
        default = self._engine.config.preset
        return frozenset(
            {default}
            | {
                info.model.annotations.get(PRESET_ANNOTATION, default)
                for info in self._engine.cache.cluster_queues.values()
            }
        )

    def inputs_changed(self) -> None:
        """A tenant or ClusterQueue changed: rebuild the tables, recompute every priority."""
        self.tables = None
        self.dirty = True

    def context(self, now: float) -> PriorityContext:
        when = self.computed_at if self.computed_at is not None else now
        return PriorityContext(
            now=when,
            cluster_gpus=self._engine.cache.cluster_gpus,
            max_priority_value=self._engine.cache.max_priority_value,
            shares=self.shares,
            tables=self.tables_now(),
        )

    def set_priority(self, rec: JobRecord, ctx: PriorityContext) -> None:
        rec.priority = self._engine.policies.ordering.priority(rec.facts, ctx)
        if self._engine.expedite.jobs and rec.facts.id in self._engine.expedite.jobs:
            rec.key = expedited_key(rec)
            return
        rec.key = (self._engine.afs.lq_score(rec), -rec.priority, rec.order_time, rec.facts.id)

    def reprioritize(self, recs: Iterable[JobRecord]) -> None:
        ctx = self.context(0.0)
        for rec in list(recs):
            shape_queue = rec.queue
            # Ask before the key changes: peek() drops heap entries whose key is stale, so
            # afterwards the old head looks like a follower and its shape is never re-offered.
            was_head = shape_queue is not None and shape_queue.peek() is rec
            old = rec.key
            self.set_priority(rec, ctx)
            if shape_queue is None or rec.key == old:
                continue
            shape_queue.push(rec)
            cq_queue = shape_queue.cq
            if was_head or shape_queue.peek() is rec:
                cq_queue.offer(shape_queue)
            if cq_queue.parked and cq_queue.blocked_by is not None:
                self._engine.queues.wake([cq_queue])

    def refresh(self, now: float) -> None:
        self._engine.afs.sample(now)
        ordering = self._engine.policies.ordering
        due = ordering.time_dependent_for(self.tables_now().presets) and (
            self.computed_at is None
            or now - self.computed_at >= self._engine.config.priority_calc_period_s
        )
        if not (due or self.dirty):
            if self._engine.afs.stale:
                self._engine.afs.rekey()
            return
        if due or self.computed_at is None:
            self.computed_at = now
        self.tables = None
        ctx = self.context(now)
        for tenant_jobs in self._engine.pending_by_tenant.values():
            for rec in tenant_jobs.values():
                self.set_priority(rec, ctx)
        self._engine.queues.rebuild()
        self._engine.queues.wake(
            [
                cq_queue
                for cq_queue in self._engine.queues.queues.values()
                if cq_queue.parked and cq_queue.blocked_by
            ]
        )
        for cq_queue in self._engine.queues.queues.values():
            self._engine.queues.mark_candidate(cq_queue)
        self.dirty = False
        self._engine.afs.stale.clear()
