"""Backfill: plan blocked jobs, and start others where they delay no plan.

Slurm's ``sched/backfill``: every ``interval_s`` a pass plans the blocked jobs in
:meth:`Backfill.plan_order` and reserves for the top ones of each ClusterQueue
(:class:`~phalanx.engine.backfill.reservations.Reservations`); between passes a
blocked head is reserved for at once, and a job starts on held nodes only if it
ends before the reservation needs them.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from phalanx.engine.backfill.plans import (
    QuotaEnds,
    Reservation,
    plan_in_domains,
    plan_nodes,
    plan_quota,
    round_up,
)
from phalanx.engine.cache.capacity import NodeSlot
from phalanx.engine.cache.cluster import ClusterQueueInfo
from phalanx.engine.cache.quota import FlavorResource, QuotaNode
from phalanx.engine.decisions import (
    Admit,
)
from phalanx.engine.placement.assigner import (
    Assignment,
    flavor_matches,
    node_filter,
)
from phalanx.engine.queueing.queues import ShapeQueue
from phalanx.engine.queueing.shapes import JobShape
from phalanx.engine.state import JobRecord
from phalanx.model import (
    GPU,
    PODS,
    Job,
)

if TYPE_CHECKING:
    from phalanx.engine.cycle import CycleState
    from phalanx.engine.engine import Engine


def _hours(seconds: float) -> str:
    hours = seconds / 3600
    if hours >= 1:
        return f"{hours:g} h"
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"


class Backfill:
    """Backfill passes, plans, estimates and the jobs they test."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.last_pass: float | None = None
        """When the last backfill pass ran (plans are made only in passes)."""
        self.waiting: dict[int, JobRecord] = {}
        """The jobs the next backfill pass tests (with the reservations' jobs): heads that
        failed since the last pass and the jobs that pass tested."""
        self.estimates: dict[int, float] = {}
        """Planned start times of pending jobs, from the last backfill pass."""
        self._planned: set[int] = set()
        """The jobs the last backfill pass tested, and those reserved for since."""
        self._borrows: dict[
            int, tuple[QuotaNode, int, dict[FlavorResource, int], JobShape, bool]
        ] = {}
        """Per job, whether it must borrow, and the state that answer holds for
        (:meth:`_must_borrow`); kept for the pending jobs a backfill pass tests."""
        self.unplanned_why: dict[str, str] = {}
        """This cycle: why jobs of a quota tree (by root key) have no planned start."""
        self._covering: dict[
            ClusterQueueInfo,
            tuple[object, dict[FlavorResource, int], dict[str, tuple[FlavorResource, ...]]],
        ] = {}
        """Per ClusterQueue (while its groups and nominal quota stand): the flavor-resources
        of its quota that cover each resource (:meth:`_borrows_now`)."""

    def export(self) -> dict[str, Any]:
        """This part of an engine snapshot (:mod:`phalanx.engine.snapshot`)."""
        return {
            "estimates": [[j, t] for j, t in self.estimates.items()],
            "backfill_pass": [self.last_pass, list(self.waiting)],
        }

    def load(self, data: Mapping[str, Any]) -> None:
        jobs = self._engine.jobs
        self.estimates = {int(j): float(t) for j, t in data.get("estimates", [])}
        self.last_pass, waiting = data.get("backfill_pass", [None, []])
        self.waiting = {int(j): jobs[int(j)] for j in waiting if int(j) in jobs}

    def pass_due(self, now: float) -> bool:
        """Every ``interval_s`` a cycle ends with a backfill pass."""
        bf = self._engine.config.backfill
        assert bf is not None
        if self.last_pass is not None and now - self.last_pass < bf.interval_s:
            return False
        self.last_pass = now
        return True

    def restore_retried(self, state: CycleState) -> None:
        """Jobs tried again between passes that are still pending keep their reservation."""
        for job_id, res in state.retried.items():
            rec = self._engine.jobs.get(job_id)
            if rec is None or rec.admission is not None or job_id in self._engine.reserved.by_job:
                continue
            self._engine.reserved.hold(res)
        state.retried.clear()

    def on_blocked_head(
        self,
        rec: JobRecord,
        shape_queue: ShapeQueue,
        info: ClusterQueueInfo,
        assignment: Assignment,
        state: CycleState,
    ) -> bool:
        """A head that does not fit: start it on nodes held for reservations it cannot
        delay, or leave it to the next backfill pass. True when it was admitted.

        In a cycle that ends with a pass, the jobs of its ClusterQueue behind it wait for
        the pass too (Slurm's main scheduler stops at a partition's first blocked job):
        started now, they could take the nodes it is about to reserve."""
        admitted = self._onto_held_nodes(rec, info, state)
        if admitted is not None:
            state.decisions.append(admitted)
            return True
        self.waiting[rec.id] = rec
        if state.backfill_pass:
            self._engine.queues.set_aside(shape_queue.cq)
        elif rec.id not in state.retried and self._may_reserve(rec, info, state):
            self._reserve_at_once(rec, info)
        return False

    def _may_reserve(self, rec: JobRecord, info: ClusterQueueInfo, state: CycleState) -> bool:
        """Whether ``rec`` is among the top ``reservations_per_queue`` blocked jobs of its
        ClusterQueue: the queue holds fewer reservations, or one for a lower job, which
        gives it up (its job waits for the next pass; a reservation set aside for a retry
        this cycle counts as held)."""
        bf = self._engine.config.backfill
        assert bf is not None
        if not bf.reservations_per_queue:
            return True
        name = info.name
        mine = list(self._engine.reserved.in_queue(name))
        if state.retried:
            mine.extend(r for r in state.retried.values() if r.cluster_queue == name)
        if len(mine) < bf.reservations_per_queue:
            return True
        lowest = max(mine, key=lambda r: self._engine.jobs[r.job_id].key[1:])
        if self._engine.jobs[lowest.job_id].key[1:] <= rec.key[1:]:
            return False
        if lowest.job_id in self._engine.reserved.by_job:
            self._engine.reserved.drop(lowest.job_id, wake=False)
        else:
            del state.retried[lowest.job_id]
        self.estimates.pop(lowest.job_id, None)
        self.waiting[lowest.job_id] = self._engine.jobs[lowest.job_id]
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
        info = self._engine.cache.cluster_queues.get(rec.cluster_queue or "")
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
        res = self._engine.reserved.by_job.get(rec.id)
        own = dict(res.quota) if res is not None else {}
        covers = self._covering.get(info)
        if covers is None or covers[0] is not info.groups or covers[1] is not node.nominal:
            covers = self._covering[info] = (info.groups, node.nominal, {})
        by_resource = covers[2]
        for resource, amount in rec.shape.totals:
            covering = by_resource.get(resource)
            if covering is None:
                covering = by_resource[resource] = tuple(
                    (f, resource) for f in info.flavors if (f, resource) in node.nominal
                )
            if not covering:
                continue
            if node.is_cluster_queue:
                nominal, usage = node.nominal, node.usage
                for fr in covering:
                    if nominal.get(fr, 0) >= usage.get(fr, 0) + amount - own.get(fr, 0):
                        break
                else:
                    return True
            elif all(
                node.borrowing_with(flavor_resource, amount - own.get(flavor_resource, 0))
                for flavor_resource in covering
            ):
                return True
        return False

    def _reserve_at_once(self, rec: JobRecord, info: ClusterQueueInfo) -> None:
        """A head blocked between passes gets its reservation now, planned around the
        ones that stand: nothing the cycle admits after it (or until the next pass) can
        take its nodes or quota unless it ends before the reservation starts."""
        self._engine.ends.timeline_now().new_pass()  # what the last pass closed may be open now
        self._planned.add(rec.id)
        planned = self._plan(rec, info, self._engine.ends.quota_ends_of(info.root_key))
        if planned is None:
            self.estimates.pop(rec.id, None)
            return
        start, slots, needs, _ = planned
        self.estimates[rec.id] = start
        self._engine.reserved.reserve(rec, info, start, slots, needs)

    def run_pass(self, state: CycleState) -> None:
        """Slurm's backfill pass: every reservation is planned again, with the jobs that
        could not start since the last pass, and up to a fair share of ``max_job_test``
        jobs behind each of them in its shape queue, in priority order (priority, then
        time, then id), up to ``max_job_test`` jobs. Each job starts now if it fits
        (on free nodes, or on held nodes it cannot delay), or is planned with the nodes
        of every job before it held; the first ``reservations_per_queue`` of each
        ClusterQueue keep what they hold, the others keep their estimated start."""
        out = state.decisions
        bf = self._engine.config.backfill
        assert bf is not None
        jobs = self._engine.jobs
        pool: dict[int, JobRecord] = {j: jobs[j] for j in self._engine.reserved.by_job}
        for rec in self.waiting.values():
            pool.setdefault(rec.id, rec)
        self.waiting.clear()
        share = max(1, bf.max_job_test // max(1, len(self._engine.queues.queues)))
        seen: set[int] = set()
        live = [r for r in pool.values() if r.queue is not None and r.admission is None]
        # Jobs behind the top heads only: behind a lower job they rank lower still, and
        # as many heads as the tests can reach with the jobs behind them.
        heads = bf.max_job_test // (share + 1) + 1
        top = heapq.nsmallest(bf.max_job_test, live, key=lambda r: r.key[1:])
        pool = {r.id: r for r in live}
        for rec in top:
            shape_queue = rec.queue
            assert shape_queue is not None
            if id(shape_queue) in seen or shape_queue.peek() is not rec:
                continue
            seen.add(id(shape_queue))
            if len(seen) > heads:
                break
            if len(shape_queue.members) <= share + 1:
                for other in shape_queue.members.values():
                    pool.setdefault(other.id, other)
                continue
            for other in shape_queue.smallest(share + 1):
                pool.setdefault(other.id, other)
        self._engine.reserved.drop_all(wake=False)
        state.no_room.clear()
        self._engine.ends.timeline_now().new_pass()
        self._planned = planned_ids = set()
        kept = self._borrows
        self._borrows = {j: kept[j] for j in pool if j in kept}
        order = sorted(pool.values(), key=self.plan_order)
        budget = bf.max_job_test
        held: dict[str, int] = {}
        marked: list[NodeSlot] = []  # nodes of the pass's plans beyond the reservations
        owner = self._engine.reserved.holds.owner
        cache = self._engine.cache
        starts: list[tuple[float, int]] = []  # the pass's reservations, soonest first
        for i, rec in enumerate(order):
            if budget <= 0:
                # Not tested: the top of them again in the next pass.
                for rest in order[i : i + bf.max_job_test]:
                    self.waiting[rest.id] = rest
                break
            info = cache.cluster_queues.get(rec.cluster_queue or "")
            if info is None or rec.queue is None or rec.shape.partial is not None:
                continue
            if self._engine.limits.active and self._engine.lifecycle.limit_held(rec, out):
                continue
            budget -= 1
            planned_ids.add(rec.id)
            self._engine.stats["backfill_tests"] += 1
            limit = rec.job.time_limit
            if limit is not None and starts and self._engine.now + limit <= starts[-1][0]:
                # Every reservation so far is of a higher job: only one that starts after
                # this job ends can take it.
                i = bisect.bisect_left(starts, (self._engine.now + limit, -1))
                after = [self._engine.reserved.by_job[j] for _, j in starts[i:]]
                admitted = self._onto_held_nodes(rec, info, state, after)
                if admitted is not None:
                    out.append(admitted)
                    continue
            self.waiting[rec.id] = rec
            planned = self._plan(rec, info, self._engine.ends.quota_ends_of(info.root_key))
            if planned is None:
                self.estimates.pop(rec.id, None)
                continue
            start, slots, needs, now = planned
            if now and not self._engine.pods_ready.blocks_admission():
                trial = self._engine.assigner.assign_fresh(rec.shape, info)
                if trial.ok:
                    del self.waiting[rec.id]
                    out.append(self._engine.admit(rec, info, trial))
                    continue
            self.estimates[rec.id] = start
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
            self._engine.reserved.reserve(rec, info, start, slots, needs)
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
        bf = self._engine.config.backfill
        assert bf is not None
        timeline, cache, now = (
            self._engine.ends.timeline_now(),
            self._engine.cache,
            self._engine.now,
        )
        closed = self._engine.reserved.holds.owner.__contains__
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
                accept = cache.node_filters.get(pod_set, flavor, index.tainted > 0, (), node_filter)
                cutoff = best[0] if best is not None else math.inf
                held_to = self._engine.assigner.topology_level(pod_set, flavor)
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

    def _onto_held_nodes(
        self,
        rec: JobRecord,
        info: ClusterQueueInfo,
        state: CycleState,
        among: Iterable[Reservation] | None = None,
    ) -> Admit | None:
        """Backfill: admit ``rec`` on held nodes of reservations that start after it ends,
        or that are held for lower jobs (planned again in the next pass); only ``among``
        these, if given."""
        if not self._engine.reserved.by_job:
            return None
        limit = rec.job.time_limit
        end = self._engine.now + limit if limit is not None else math.inf
        memo = (rec.shape, info.name)
        if end >= state.no_room.get(memo, math.inf):
            return None
        holds, jobs = self._engine.reserved.holds, self._engine.jobs
        # Only held nodes that had free capacity to hold can take anything (most are busy
        # until their reservation starts); for a job whose every pod set asks for GPUs,
        # only those with a unit's worth of free GPUs.
        gpus = [p.request(GPU) for p in rec.shape.pod_sets]
        unit = min(gpus) if all(gpus) else 0
        most_gpus = holds.most_gpus
        opened: list[tuple[NodeSlot, int]] = []
        lifted: list[Reservation] = []
        roomy_by_owner = holds.roomy
        by_job = self._engine.reserved.by_job
        # Where ``rec`` stands (plan_order), asked only when a reservation needs it.
        order: tuple[bool, tuple[float, float, int]] | None = None

        def opens(r: Reservation) -> bool:
            """Whether ``r``'s job does not come before ``rec`` (so its nodes and quota
            may be lent to it)."""
            nonlocal order
            if end <= r.start:
                return True
            # Its job comes first (plan_order) unless one of the two must borrow
            # and the other need not: ask only where that would change the answer.
            if order is None:
                order = self.plan_order(rec)
            borrows, rank = order
            holder = jobs[r.job_id]
            if holder.key[1:] <= rank:
                return not borrows and self._must_borrow(holder)
            return not borrows or self._must_borrow(holder)

        if unit > 0 and among is None:
            # A GPU job can only use opened nodes: is there one at all? Only the
            # reservations with a node of a unit's worth of free GPUs can open one.
            for job_id, most in most_gpus.items():
                if most >= unit:
                    r = by_job.get(job_id)
                    if r is not None and opens(r):
                        break
            else:
                return None
        reservations = by_job.values() if among is None else among
        for r in reservations:
            roomy = roomy_by_owner.get(r.job_id)
            if roomy is not None and most_gpus.get(r.job_id, 0) < unit:
                roomy = None
            if roomy is None and not r.quota:
                continue  # nothing of it could be opened
            if not opens(r):
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
            self._engine.reserved.hold_quota(r, -1)
        for slot, _ in opened:
            if holds.unhold(slot):
                self._engine.cache.reindex(slot)
        self._engine.assigner.generation += 1
        trial = self._engine.assigner.assign_fresh(rec.shape, info)
        decision = None
        if trial.ok and not self._engine.pods_ready.blocks_admission():
            decision = self._engine.admit(rec, info, trial)
        elif not trial.ok:
            state.no_room[memo] = min(end, state.no_room.get(memo, math.inf))
        for slot, owner in opened:
            if holds.hold(slot, owner):
                self._engine.cache.reindex(slot)
        for r in lifted:
            self._engine.reserved.hold_quota(r, 1)
        self._engine.assigner.generation += 1
        return decision

    def replan(self) -> None:
        """Give up every reservation and estimate and try every queue again: the next
        cycle plans from scratch (a full backfill pass, Slurm's ``bf_interval``)."""
        self._engine.reserved.drop_all()
        self.estimates.clear()
        self.last_pass = None
        self._engine.queues.wake_all()

    def estimated_start(self, job_id: int) -> float | None:
        """When a pending job is expected to start, from the backfill plan (None: unknown)."""
        return self.estimates.get(job_id)

    def no_estimate_why(self, job_id: int) -> str | None:
        """Why a pending job has no planned start, in words (None: it has one, or it is
        not pending)."""
        rec = self._engine.jobs.get(job_id)
        if rec is None or rec.admission is not None or job_id in self.estimates:
            return None
        bf = self._engine.config.backfill
        if rec.queue is None:
            return "it is not queued (held, or waiting for a dependency or its begin time)"
        if bf is not None and job_id not in self._planned:
            every = f"every {_hours(bf.interval_s)}" if bf.interval_s else "in every cycle"
            return (
                f"the backfill pass, which plans the top jobs of each ClusterQueue {every}, "
                "has not planned it"
            )
        info = self._engine.cache.cluster_queues.get(rec.cluster_queue or "")
        key = info.root_key if info is not None else ""
        why = self.unplanned_why.get(key)
        if why is None:
            why = self.unplanned_why[key] = self._why_unplanned(-1, info)
        return why

    def _why_unplanned(self, job_id: int, info: ClusterQueueInfo | None) -> str:
        """Why the plan has no start for a job of ``info`` (``job_id``: its own
        reservation, if any, does not count)."""
        bf = self._engine.config.backfill
        if bf is None:
            return (
                f"the {self._engine.config.preset} preset plans no start times "
                "(phalanx up --backfill plans them)"
            )
        if info is not None and self._unlimited_in(info.root_key):
            return (
                "the jobs holding what it needs include some without a time limit, "
                "which never end in the plan"
            )
        if any(r.job_id != job_id for r in self._engine.reserved.by_job.values()):
            return (
                "the nodes it could use are held for higher-priority jobs' reservations, "
                "and the plan does not look past their starts"
            )
        return f"it cannot start within the planning window ({_hours(bf.window_s)})"

    def _unlimited_in(self, root: str) -> bool:
        """Whether an admitted job of the quota tree ``root`` has no time limit."""
        for cq_name, jobs in self._engine.admitted_by_cq.items():
            info = self._engine.cache.cluster_queues.get(cq_name)
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
        info = self._engine.cache.cluster_queues.get(cluster_queue)
        if info is None:
            return None, f"ClusterQueue {cluster_queue} is not known"
        rec = self._engine.lifecycle.record(job)
        if self._engine.assigner.assign_fresh(rec.shape, info).ok:
            return now, None
        if self._engine.config.backfill is None:
            return None, self._why_unplanned(job.id, info)
        saved = self._engine.now
        self._engine.now = now
        try:
            self._engine.ends.timeline_now().new_pass()
            planned = self._plan(rec, info, self._engine.ends.quota_ends_of(info.root_key))
        finally:
            self._engine.now = saved
        if planned is None:
            return None, self._why_unplanned(job.id, info)
        return planned[0], None
