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

This module is the coordinator: :meth:`Engine.cycle` reads as its numbered steps.
The policies are parts with their own state that the steps call: job events
(:mod:`~phalanx.engine.lifecycle`), configuration objects
(:mod:`~phalanx.engine.objects`), priorities, Kueue's fair sharing and admission
fair sharing, preemption, waitForPodsReady, and backfill with its reservations
and the running jobs' ends.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, datetime

from phalanx.engine.admissionfairsharing.admissionfairsharing import AdmissionFairSharing
from phalanx.engine.backfill.backfill import Backfill
from phalanx.engine.backfill.ends import RunningEnds
from phalanx.engine.backfill.plans import (
    Reservation,
)
from phalanx.engine.backfill.reservations import Reservations
from phalanx.engine.cache.capacity import MILLI, Devices
from phalanx.engine.cache.cluster import ClusterCache, ClusterQueueInfo
from phalanx.engine.cache.quota import FlavorResource
from phalanx.engine.cache.runlimits import Limits
from phalanx.engine.config import EngineConfig, Policies
from phalanx.engine.cycle import CycleState, Entry, Probe
from phalanx.engine.decisions import (
    Admit,
    Decision,
    Evict,
    NodeAssignment,
    Pending,
    PodSetAssignment,
)
from phalanx.engine.events import (
    Adopt,
    Cancel,
    Checkpoint,
    Delete,
    Event,
    Expedite,
    Finish,
    PodsReady,
    ReplaceNodes,
    Requeue,
    Submit,
    TenantUsage,
    Upsert,
)
from phalanx.engine.expedite import ExpeditedJobs
from phalanx.engine.explain.reasons import Reason, ReasonCode
from phalanx.engine.explain.waiting import (
    reason_for_failure,
    signature,
    strict_fifo_reason,
    wake_conditions,
)
from phalanx.engine.fairsharing.fairsharing import FairSharing
from phalanx.engine.hotswap import HotSwap, SwapPlan
from phalanx.engine.lifecycle import JobLifecycle
from phalanx.engine.objects import Objects
from phalanx.engine.placement import WorkloadProfile, plan_devices, unit_amounts
from phalanx.engine.placement.assigner import (
    Assignment,
    FlavorAssigner,
    Oracle,
)
from phalanx.engine.podsready import WaitForPodsReady
from phalanx.engine.preemption.preemption import Preemption
from phalanx.engine.preemption.preemptor import (
    may_preempt,
)
from phalanx.engine.priority.ordering import TenantShare
from phalanx.engine.priority.priorities import Priorities
from phalanx.engine.queueing.queues import ClusterQueueQueue, Condition, QueueManager, ShapeQueue
from phalanx.engine.queueing.shapes import PodSetShape, ShapeInterner
from phalanx.engine.state import Admission, Allocation, JobRecord
from phalanx.model import (
    GPU_MILLI,
    Job,
    NodeState,
    StopPolicy,
)

__all__ = ["Engine"]


def _entry_order(entry: Entry) -> tuple[int, tuple[float, float, int]]:
    return entry[0], entry[1]


def _key(entry: Entry) -> tuple[float, float, int]:
    return entry[1]


def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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
    """Quotas, cohorts, gang placement and ordering; pure and incremental.

    The engine holds the state every part shares (the cluster cache, the queues,
    the job table) and the parts that own the rest; :meth:`apply` hands each event
    to its owner and :meth:`cycle` runs the steps of a scheduling cycle, calling
    the policies in turn with the cycle's :class:`~phalanx.engine.cycle.CycleState`.
    """

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
        self.shapes = ShapeInterner(with_time_limits=self.config.backfill is not None)
        self.limits = Limits()
        """QOS and tenant limits, running usage, and the jobs they hold."""
        # The job table and its indexes.
        self.jobs: dict[int, JobRecord] = {}
        self.waiting: dict[int, JobRecord] = {}
        """Pending jobs that are in no queue yet (no LocalQueue, namespace, switches)."""
        self.pending_by_tenant: dict[str, dict[int, JobRecord]] = {}
        self.admitted_by_cq: dict[str, dict[int, JobRecord]] = {}
        self.outbox: list[Decision] = []
        """Decisions made while applying events, sent with the next cycle's."""
        self.draining: dict[str, None] = {}
        """Nodes drained with ``evict``: their jobs are evicted in the next cycle."""
        self.now = 0.0
        """The time of the last cycle (queries between cycles answer as of then)."""
        self.stats = {"rounds": 0, "heads": 0, "backfill_tests": 0}
        # The owners of everything else.
        self.objects = Objects(self)
        self.lifecycle = JobLifecycle(self)
        self.priorities = Priorities(self)
        self.afs = AdmissionFairSharing(self)
        self.fair_sharing = FairSharing(self)
        self.preemption = Preemption(self)
        self.pods_ready = WaitForPodsReady(self)
        self.ends = RunningEnds(self)
        self.reserved = Reservations(self)
        self.backfill = Backfill(self)
        self.expedite = ExpeditedJobs(self)
        self.hot_swap = HotSwap(self)

    # ------------------------------------------------------------------ events

    def apply(self, event: Event) -> None:
        """Take one event into the engine's state."""
        if isinstance(event, Submit):
            self.lifecycle.submit(event.job)
        elif isinstance(event, Finish):
            if self.expedite.jobs:
                self.expedite.forget(event.job_id)
            self.lifecycle.finish(event.job_id)
        elif isinstance(event, Cancel):
            rec = self.jobs.get(event.job_id)
            if rec is not None and rec.admission is None:
                if self.expedite.jobs:
                    self.expedite.forget(rec.id)
                self.lifecycle.forget_pending(rec)
                del self.jobs[rec.id]
        elif isinstance(event, Requeue):
            if event.expedite:
                self.expedite.requeue(event.job_id, event.nodes)
            else:
                self.lifecycle.requeue(event.job_id)
        elif isinstance(event, ReplaceNodes):
            self.hot_swap.replace(event.job_id, event.replaced)
        elif isinstance(event, Expedite):
            self.expedite.restore(event.job_id, event.nodes, event.since)
        elif isinstance(event, PodsReady):
            self.pods_ready.unready.pop(event.job_id, None)
        elif isinstance(event, Checkpoint):
            rec = self.jobs.get(event.job_id)
            adm = rec.admission if rec is not None else None
            if (
                adm is not None
                and event.at >= adm.admitted_at
                and (adm.checkpoint_at is None or event.at > adm.checkpoint_at)
            ):
                adm.checkpoint_at = event.at
        elif isinstance(event, TenantUsage):
            old = self.priorities.shares.get(event.tenant)
            allocation = event.allocation
            if allocation is None and old is not None:
                allocation = old.allocation
            self.priorities.shares[event.tenant] = TenantShare(
                event.usage, allocation, event.billing
            )
            if "slurm" in self.priorities.presets():
                # Fair-share ranks every tenant against the others: all jobs, next cycle.
                self.priorities.tables = None
                self.priorities.dirty = True
            elif old is None or (old.usage, old.allocation) != (event.usage, allocation):
                # The other presets read only U and L: a change of billing alone (jobs
                # without GPUs ending) leaves every key as it was, and a tenant with a
                # deep queue is not walked for nothing.
                self.priorities.reprioritize(self.pending_by_tenant.get(event.tenant, {}).values())
        elif isinstance(event, Upsert):
            self.objects.upsert(event.obj)
        elif isinstance(event, Adopt):
            self.lifecycle.adopt(event.job, event.admission, event.admitted_at)
        elif isinstance(event, Delete):
            self.objects.delete(event.kind, event.name)
        else:  # pragma: no cover - exhaustive over Event
            raise TypeError(f"not an engine event: {event!r}")

    def apply_all(self, events: Iterable[Event]) -> None:
        for event in events:
            self.apply(event)

    # ------------------------------------------------------------------ limits

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
        state = CycleState(now, self.outbox, probe)
        self.outbox = []
        self.now = now
        # 1. Priorities that depend on time, or on inputs changed since the last cycle.
        self.priorities.refresh(now)
        # 2. Deadlines: drained nodes, pods-ready timeouts, backoffs, waits, protections.
        self._deadlines(state)
        # 3. Start: Kueue's quota holds lapse, placement starts afresh, is a pass due?
        if self.preemption.held:
            self.preemption.release_holds()
        self.assigner.new_cycle()
        self.backfill.unplanned_why.clear()
        if self.config.backfill is not None:
            state.backfill_pass = self.backfill.pass_due(now)
        # 4. Rounds: nominate every ClusterQueue's head, order them, decide each.
        limit = self.config.heads_per_cycle
        rounds = 0
        while not state.blocked and (limit is None or rounds < limit):
            heads = self.queues.heads()
            if not heads:
                break
            rounds += 1
            self._round(heads, state)
        # 5. Reservations opened for a retry that failed stand again.
        if state.retried:
            self.backfill.restore_retried(state)
        # 6. Backfill: plan the blocked jobs, start what fits around the plans.
        if state.backfill_pass:
            self.queues.restore_aside()
            state.backfill_pass = False
            if probe is not None:
                probe("backfill", -1)
            self.backfill.run_pass(state)
            if probe is not None:
                probe("backfill_done", -1)
        return state.decisions

    def _deadlines(self, state: CycleState) -> None:
        """What falls due with time alone; decisions of events since the last cycle
        come first, then these."""
        out, now = state.decisions, state.now
        if self.expedite.jobs:
            self.expedite.lapse(now)
        self._evict_drained(out)
        if self.config.wait_for_pods_ready is not None:
            self.pods_ready.evict_timed_out(now, out)
        if self.lifecycle.backoff:
            self.lifecycle.end_backoffs(now)
        if self.lifecycle.switch_waits and self.lifecycle.switch_waits[0][0] <= now:
            self.lifecycle.end_switch_waits(now)
        if self.preemption.protection_ends and min(self.preemption.protection_ends) <= now:
            self.preemption.end_protections(now)
        out.extend(self.outbox)
        self.outbox = []

    def _round(
        self, heads: list[tuple[JobRecord, ShapeQueue, ClusterQueueQueue]], state: CycleState
    ) -> None:
        """One round: every head is assigned flavors and nodes against the same state,
        the heads are ordered (non-borrowing first, then priority and time; Kueue's fair
        sharing tournament, if on) and each is admitted, preempted for, reserved for or
        parked, in that order."""
        self.stats["rounds"] += 1
        self.stats["heads"] += len(heads)
        if state.probe is not None:
            state.probe("round", -1)
        entries = self._nominate(heads, state)
        entries.sort(key=_entry_order)
        ordered: Iterable[Entry] = entries
        first: list[Entry] = []
        if self.expedite.jobs:
            # Expedited requeues go before everything else, in their key's order.
            first = sorted((e for e in entries if e[2].id in self.expedite.jobs), key=_key)
            entries = [e for e in entries if e[2].id not in self.expedite.jobs]
            ordered = entries
        if self.config.fair_sharing is not None:
            ordered = self.fair_sharing.order(entries)
        if first:
            ordered = [*first, *ordered]
        for _, _, rec, shape_queue, assignment in ordered:
            self._decide(rec, shape_queue, assignment, state)
            if state.probe is not None:
                state.probe("decided", rec.id)
        # A reservation holds for the rest of the round (Kueue: of its one-round cycle).
        self.preemption.unreserve()

    def _nominate(
        self, heads: list[tuple[JobRecord, ShapeQueue, ClusterQueueQueue]], state: CycleState
    ) -> list[Entry]:
        entries: list[Entry] = []
        cache, assigner = self.cache, self.assigner
        for rec, shape_queue, cq_queue in heads:
            info = cache.cluster_queues[cq_queue.name]
            if rec.id in self.reserved.by_job:
                # Tried again: its nodes and quota are its own to assign. Between
                # backfill passes it gets the same reservation back if it fails.
                state.retried[rec.id] = self.reserved.by_job[rec.id]
                self.reserved.drop(rec.id, wake=False)
            if self.limits.active and self.lifecycle.limit_held(rec, state.decisions):
                continue
            oracle = self.preemption.oracle(rec, info) if info.preempts else None
            if self.expedite.jobs and rec.id in self.expedite.jobs:
                a = self._assign_expedited(rec, info, oracle)
            else:
                a = assigner.assign(rec.shape, info, oracle)
            # Across ClusterQueues: priority then time (a LocalQueue score orders one queue).
            entries.append((a.borrow if a.ok else 0, rec.key[1:], rec, shape_queue, a))
            if state.probe is not None:
                state.probe("nominated", rec.id)
        return entries

    def _assign_expedited(
        self, rec: JobRecord, info: ClusterQueueInfo, oracle: Oracle | None
    ) -> Assignment:
        """An expedited job's assignment: its held nodes opened for it and preferred."""
        self.expedite.open(rec.id)
        try:
            return self.assigner.assign(
                rec.shape, info, oracle, prefer=self.expedite.preferred(rec.id)
            )
        finally:
            self.expedite.close(rec.id)

    def _decide(
        self, rec: JobRecord, shape_queue: ShapeQueue, assignment: Assignment, state: CycleState
    ) -> None:
        if self.expedite.jobs and rec.id in self.expedite.jobs:
            # Its held nodes are its own for this decision; admitted, it holds them.
            self.expedite.open(rec.id)
            try:
                self._decide_one(rec, shape_queue, assignment, state)
            finally:
                if rec.admission is not None or rec.id not in self.jobs:
                    self.expedite.forget(rec.id)
                else:
                    self.expedite.close(rec.id)
            return
        self._decide_one(rec, shape_queue, assignment, state)

    def _decide_one(
        self, rec: JobRecord, shape_queue: ShapeQueue, assignment: Assignment, state: CycleState
    ) -> None:
        out = state.decisions
        if self.limits.active and self.lifecycle.limit_held(rec, out):
            # Over a limit after this round's earlier admissions.
            return
        info = self.cache.cluster_queues[shape_queue.cq.name]
        assigner = self.assigner
        if assignment.ok and not assigner.still_fits(assignment, info):
            if self.config.heads_per_cycle is not None:
                # Kueue: skipped, and back at the head of its queue next cycle.
                self.emit_reason(rec, _no_longer_fits(info.name), out)
                return
            oracle = self.preemption.oracle(rec, info) if may_preempt(info) else None
            if self.expedite.jobs and rec.id in self.expedite.jobs:
                assignment = assigner.assign(
                    rec.shape, info, oracle, prefer=self.expedite.preferred(rec.id)
                )
            else:
                assignment = assigner.assign(rec.shape, info, oracle)
        if assignment.ok and self.pods_ready.blocks_admission():
            self.emit_reason(rec, _pods_ready_block(), out)
            state.blocked = True
            return
        if assignment.ok:
            out.append(self.admit(rec, info, assignment))
        elif (
            self.config.heads_per_cycle is None and not info.preempts and rec.shape.partial is None
        ):
            # Without preemption or partial admission a head that does not fit parks.
            if not (
                self.config.backfill is not None
                and self.backfill.on_blocked_head(rec, shape_queue, info, assignment, state)
            ):
                self.park(rec, shape_queue, info, assignment, out)
        else:
            self.preemption.not_fitting(rec, shape_queue, info, assignment, state)
        if state.retried and rec.admission is None and rec.id in state.retried:
            # Its own nodes were opened for its attempt: held again at once, so
            # no job after it in the round takes them.
            self.reserved.hold(state.retried.pop(rec.id))

    def next_wakeup(self) -> float | None:
        """When the next cycle has something to do without any new event.

        The earliest waitForPodsReady deadline, requeue backoff end, end of a
        ``switches`` wait, or end of a minimum runtime that kept a job from being
        preempted; with
        ``heads_per_cycle`` set, the last cycle's time if heads are still waiting
        (run the next cycle at once). None when only an event can change anything.
        """
        times = list(self.pods_ready.unready.values())
        times.extend(
            r.requeue_at for r in self.lifecycle.backoff.values() if r.requeue_at is not None
        )
        times.extend(self.preemption.protection_ends)
        if self.expedite.jobs:
            times.extend(self.expedite.next_times())
        if self.lifecycle.switch_waits:
            times.append(self.lifecycle.switch_waits[0][0])
        if self.config.heads_per_cycle is not None and self.queues.has_candidates():
            times.append(self.now)
        return min(times) if times else None

    def admit(self, rec: JobRecord, info: ClusterQueueInfo, assignment: Assignment) -> Admit:
        node = info.node
        for flavor_resource, amount in assignment.usage.items():
            node.add_usage(flavor_resource, amount)
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
        self.lifecycle.forget_pending(rec)
        rec.admission = Admission(
            info.name, node, dict(assignment.usage), allocations, decision, admitted_at=self.now
        )
        if self.ends.running is not None and rec.job.time_limit is not None:
            # Kept sorted rather than rebuilt: backfill admits many jobs in one pass.
            entry = (self.now + rec.job.time_limit, rec.admission.usage, info.name)
            self.ends.quota_ends.clear()
            for key in (info.root_key, "cq:" + info.name):
                bisect.insort(self.ends.running.setdefault(key, []), entry, key=lambda e: e[0])
        if self.ends.timeline is not None:
            self.ends.timeline.started(rec)
        rec.reason = None
        ready = self.config.wait_for_pods_ready
        if ready is not None:
            self.pods_ready.unready[rec.id] = self.now + ready.timeout_s
        self.admitted_by_cq.setdefault(info.name, {})[rec.id] = rec
        self.limits.charge(rec, self.cache.tenants, {p.name: p.count for p in pod_sets})
        if self.afs.usage is not None:
            self.afs.admitted(rec, info.name, assignment.usage)
        return decision

    def park(
        self,
        rec: JobRecord,
        shape_queue: ShapeQueue,
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
            # Levels of the tree's root: the same for every queue of the tree it parks.
            kept: tuple[str, tuple[Condition, ...]] | None = memo.get("level")  # type: ignore[assignment]
            if kept is not None and kept[0] == root:
                conditions = kept[1]
            else:
                conditions = tuple([("level", root, fr, needed) for fr, needed, _ in shortages])
                memo["level"] = (root, conditions)
        else:
            conditions = tuple(
                [("total", root, fr, parked.total(root, fr) + short) for fr, _, short in shortages]
            )
        cq_queue = shape_queue.cq
        if cq_queue.pinned is rec:
            cq_queue.pinned = None
        if cq_queue.strict:
            cq_queue.blocked_by = rec
            parked.park(cq_queue, reason, keys, conditions)
        else:
            parked.park(shape_queue, reason, keys, conditions)
        if self.preemption.reserved:
            self.preemption.parked_while_reserved.append(
                (cq_queue if cq_queue.strict else shape_queue, rec)
            )
        # A new signature means new facts in the sentence: emit without wording it now.
        if rec.reason is not reason:
            rec.reason = reason
            out.append(Pending(rec.id, reason))

    def emit_reason(self, rec: JobRecord, reason: Reason, out: list[Decision]) -> None:
        if rec.reason != reason:
            rec.reason = reason
            out.append(Pending(rec.id, reason))

    def _evict_drained(self, out: list[Decision]) -> None:
        if not self.draining:
            return
        for key in list(self.draining):
            if key.startswith("lq:"):
                lq = self.cache.local_queues.get(key[3:])
                active = lq is not None and lq.stop_policy is StopPolicy.HOLD_AND_DRAIN
                victims = [
                    r
                    for jobs in self.admitted_by_cq.values()
                    for r in jobs.values()
                    if r.local_queue == key[3:]
                ]
                reason = "LocalQueueStopped"
                message = f"LocalQueue {key[3:]} is stopped"
            else:
                info = self.cache.cluster_queues.get(key)
                active = info is not None and info.model.stop_policy is StopPolicy.HOLD_AND_DRAIN
                victims = list(self.admitted_by_cq.get(key, {}).values())
                reason = "ClusterQueueStopped"
                message = f"ClusterQueue {key} is stopped"
            del self.draining[key]
            if not active:
                continue
            for rec in victims:
                if rec.admission is not None and not rec.admission.evicting:
                    rec.admission.evicting = True
                    self.ends.changed()
                    rec.evicted_for = reason
                    rec.evicted_at = self.now
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
        ctx = self.priorities.context(self.now)
        if rec.local_queue is not None and self.afs.applies_to(rec.cluster_queue):
            ctx = replace(ctx, lq_scores={rec.local_queue: self.afs.lq_score(rec)})
        return self.policies.ordering.factors(rec.facts, ctx)

    def explain(self, job_id: int) -> Reason | None:
        """Why a pending job waits (None for an admitted or unknown job)."""
        rec = self.jobs.get(job_id)
        if rec is None or rec.admission is not None:
            return None
        if rec.waiting is not None:
            return rec.waiting
        shape_queue = rec.queue
        assert shape_queue is not None
        cq_queue: ClusterQueueQueue = shape_queue.cq
        if cq_queue.stopped is not None:
            return cq_queue.stopped
        if cq_queue.parked and cq_queue.blocked_by is not None:
            if cq_queue.blocked_by is rec:
                return cq_queue.park_reason
            if cq_queue.sticky:
                return Reason(
                    ReasonCode.PRIORITY,
                    f"waiting behind job {cq_queue.blocked_by.id}, which is pending the preemption "
                    f"of the workloads it needs in ClusterQueue {cq_queue.name}",
                    {"clusterQueue": cq_queue.name, "blockedBy": cq_queue.blocked_by.id},
                )
            return strict_fifo_reason(cq_queue.name, cq_queue.blocked_by.id)
        if shape_queue.parked and shape_queue.park_reason is not None:
            return shape_queue.park_reason
        if rec.reason is not None:
            return rec.reason
        return Reason(
            ReasonCode.PRIORITY,
            f"waiting for higher-priority jobs in ClusterQueue {cq_queue.name}",
            {"clusterQueue": cq_queue.name},
        )

    def node_replacement(self, job_id: int, failed: tuple[str, ...]) -> SwapPlan | None:
        """How an admitted job's ``failed`` nodes would be replaced in their topology
        domains (:meth:`HotSwap.plan <phalanx.engine.hotswap.HotSwap.plan>`); None when
        the job is not topology-placed there."""
        return self.hot_swap.plan(job_id, failed)

    def node_state(self, name: str) -> NodeState | None:
        slot = self.cache.nodes.get(name)
        return slot.state() if slot is not None else None

    def pending_count(self) -> int:
        return sum(len(jobs) for jobs in self.pending_by_tenant.values())

    def admitted_count(self) -> int:
        return sum(len(jobs) for jobs in self.admitted_by_cq.values())

    # The backfill and fair-sharing queries callers ask the engine for.

    def plan_order(self, rec: JobRecord) -> tuple[bool, tuple[float, float, int]]:
        """:meth:`Backfill.plan_order`."""
        return self.backfill.plan_order(rec)

    def replan(self) -> None:
        """:meth:`Backfill.replan`."""
        self.backfill.replan()

    def estimated_start(self, job_id: int) -> float | None:
        """:meth:`Backfill.estimated_start`."""
        return self.backfill.estimated_start(job_id)

    def no_estimate_why(self, job_id: int) -> str | None:
        """:meth:`Backfill.no_estimate_why`."""
        return self.backfill.no_estimate_why(job_id)

    def planned_start(
        self, job: Job, cluster_queue: str, now: float
    ) -> tuple[float | None, str | None]:
        """:meth:`Backfill.planned_start` (``sbatch --test-only``)."""
        return self.backfill.planned_start(job, cluster_queue, now)

    def reservations(self) -> list[Reservation]:
        """:meth:`Reservations.in_order`."""
        return self.reserved.in_order()

    def reservation(self, job_id: int) -> Reservation | None:
        """:meth:`Reservations.get`."""
        return self.reserved.get(job_id)

    def weighted_share(self, kind: str, name: str) -> int:
        """:meth:`FairSharing.weighted_share`."""
        return self.fair_sharing.weighted_share(kind, name)
