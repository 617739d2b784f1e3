"""What a cycle does with a head that does not fit as it is.

In this order: preempt for it (the targets come from
:class:`~phalanx.engine.preemption.preemptor.Preemptor`), admit part of it
(``minCount``), leave it to backfill, or park it; under Kueue's rules a lender's
head that cannot reclaim its quota holds it for the rest of the cycle. Also the
preemption settings of victims (mode, grace period, minimum runtime).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from phalanx.engine.cache.cluster import ClusterQueueInfo
from phalanx.engine.cache.quota import FlavorResource, QuotaNode, available
from phalanx.engine.config import PreemptionConfig
from phalanx.engine.decisions import (
    Decision,
    Evict,
)
from phalanx.engine.explain.reasons import Reason, ReasonCode
from phalanx.engine.placement.assigner import (
    NO_CANDIDATES,
    PREEMPT,
    RECLAIM,
    Assignment,
    Oracle,
)
from phalanx.engine.preemption.preemptor import (
    Candidate,
    Preemptor,
    considers,
    contested,
    may_preempt,
)
from phalanx.engine.queueing.queues import ShapeQueue
from phalanx.engine.queueing.shapes import JobShape
from phalanx.engine.state import JobRecord
from phalanx.model import (
    ClusterQueue,
)

if TYPE_CHECKING:
    from phalanx.engine.cycle import CycleState
    from phalanx.engine.engine import Engine


_PREEMPTION_WORDS = {
    "InClusterQueue": "prioritization in the ClusterQueue",
    "InCohortReclamation": "reclamation within the cohort",
    "InCohortFairSharing": "Fair Sharing within the cohort",
    "InCohortReclaimWhileBorrowing": "reclamation within the cohort while borrowing",
}


def _hours(gpu_seconds: float) -> float:
    return round(gpu_seconds / 3600, 2)


def _spared(
    considered: list[Candidate], targets: list[Candidate]
) -> dict[int, tuple[tuple[int, float], ...]]:
    """For each victim chosen by lost work (its tie group has a checkpoint), the equal
    candidates left running, with the GPU-hours they would have lost."""
    chosen = {c.rec.id for c in targets}
    out: dict[int, tuple[tuple[int, float], ...]] = {}
    for victim in targets:
        adm = victim.rec.admission
        if adm is None or adm.evicting:
            continue
        group = victim.group()
        peers = [c for c in considered if c.group() == group]
        if not any(
            c.rec.admission is not None and c.rec.admission.checkpoint_at is not None for c in peers
        ):
            continue
        out[victim.rec.id] = tuple(
            (c.rec.id, _hours(c.lost)) for c in peers if c.rec.id not in chosen
        )
    return out


def _words_lost(cand: Candidate, spared: tuple[tuple[int, float], ...] | None) -> str:
    if spared is None:
        return ""
    adm = cand.rec.admission
    assert adm is not None
    since = "its checkpoint" if adm.checkpoint_at is not None else "its start"
    text = f"; lost {_hours(cand.lost)} GPU-h since {since}"
    if spared:
        others = ", ".join(f"job {j} ({h} GPU-h)" for j, h in spared)
        text += f" rather than {others}"
    return text


def _path(info: ClusterQueueInfo) -> str:
    """``/root-cohort/.../cluster-queue``, as Kueue writes preemptor and preemptee paths."""
    names = [info.name, *(n.name for n in info.node.ancestors())]
    return "/" + "/".join(reversed(names))


class Preemption:
    """Preemption, partial admission and Kueue's quota holds for blocked heads."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.reserved: list[tuple[ClusterQueueInfo, FlavorResource, int, JobRecord]] = []
        """Quota held for this round for a lender's head that cannot reclaim it."""
        self.parked_while_reserved: list[tuple[Any, JobRecord]] = []
        self.held: dict[str, list[tuple[ClusterQueueInfo, FlavorResource, int]]] = {}
        """The same, held while a blocked StrictFIFO head stays blocked: Kueue
        re-nominates that head every cycle, so its reservation never lapses."""
        self._victim_cache: dict[str, tuple[ClusterQueue, PreemptionConfig]] = {}
        """Per ClusterQueue: its model and the preemption settings of its jobs."""
        self.protection_ends: set[float] = set()
        """When the minimum runtimes that kept jobs from being preempted end."""
        self._spared: dict[int, tuple[tuple[int, float], ...]] = {}
        """Of the last victim search: the victims chosen for losing less work since a
        checkpoint than equal candidates, and those candidates (see :func:`_spared`)."""

    def export(self) -> dict[str, Any]:
        """This part of an engine snapshot (:mod:`phalanx.engine.snapshot`)."""
        return {
            "held": [
                [name, info.name, f, r, amount]
                for name, holds in self.held.items()
                for info, (f, r), amount in holds
            ],
            "protection_ends": sorted(self.protection_ends),
        }

    def load(self, data: Mapping[str, Any]) -> None:
        """After the jobs: the held quota is charged again to its ClusterQueue."""
        self.protection_ends = {float(t) for t in data.get("protection_ends", [])}
        clusters = self._engine.cache.cluster_queues
        for name, cq_name, f, r, amount in data.get("held", []):
            info = clusters[cq_name]
            info.node.add_usage((f, r), amount)
            self.held.setdefault(name, []).append((info, (f, r), amount))

    def not_fitting(
        self,
        rec: JobRecord,
        shape_queue: ShapeQueue,
        info: ClusterQueueInfo,
        assignment: Assignment,
        state: CycleState,
    ) -> None:
        """A head that does not fit as it is: preempt for it, admit it partially
        (minCount), or park it."""
        claimed, out = state.claimed, state.decisions
        if info.preempts:
            targets = self._targets(rec, rec.shape, info, assignment, claimed)
            if targets:
                self._issue_preemption(rec, shape_queue, info, targets, claimed, out)
                return
        if rec.shape.partial is None:
            partial, victims, smallest = None, None, None
        else:
            partial, victims, smallest = self._partial(rec, info, claimed)
        if partial is not None and not self._engine.pods_ready.blocks_admission():
            out.append(self._engine.admit(rec, info, partial))
        elif victims:
            self._issue_preemption(rec, shape_queue, info, victims, claimed, out)
        elif (
            self._engine.config.backfill is not None
            and rec.shape.partial is None
            and self._engine.backfill.on_blocked_head(rec, shape_queue, info, assignment, state)
        ):
            pass
        else:
            if info.preempts or self._engine.config.heads_per_cycle is not None:
                # Kueue's "Preempt without targets": hold the quota a lender's head
                # cannot reclaim, for the rest of this cycle.
                self._reserve(rec, info, contested(info, assignment))
            # Park on what the smallest admissible count needs: quota or nodes freed
            # for that wake it.
            self._engine.park(rec, shape_queue, info, smallest or assignment, out)

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
        flavor_resources = contested(info, assignment)
        if not flavor_resources:
            return None
        assigner = self._engine.assigner

        def fits(allow_borrowing: bool) -> Assignment | None:
            trial = assigner.assign_fresh(shape, info)
            if trial.ok and (allow_borrowing or trial.borrow == 0):
                return trial
            return None

        preemptor = Preemptor(
            self._engine.cache,
            self._engine.admitted_by_cq,
            fits,
            self._lift,
            self._put_back,
            self._exempt,
            self._engine.now,
        )
        fair = self._engine.config.fair_sharing
        if fair is not None:
            found = preemptor.fair_targets(
                rec,
                info,
                flavor_resources,
                claimed,
                fair.preemption_strategies,
                self._engine.fair_sharing.weight,
            )
        else:
            found = preemptor.targets(rec, info, flavor_resources, claimed)
        assigner.generation += 1
        if found is None:
            self._spared = {}
            return None
        self._spared = _spared(preemptor.last_candidates, found[0])
        return found[0]

    def _victim_settings(self, cluster_queue: str) -> PreemptionConfig:
        """The preemption settings of the jobs a ClusterQueue admitted (its annotations
        over the engine's), cached until the ClusterQueue changes."""
        info = self._engine.cache.cluster_queues.get(cluster_queue)
        if info is None:
            return self._engine.config.preemption
        cached = self._victim_cache.get(cluster_queue)
        if cached is None or cached[0] is not info.model:
            cached = (info.model, self._engine.config.preemption.for_queue(info.model.annotations))
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
        if self._engine.now < ends:
            # Whoever waits for it is parked: look again once it may be preempted.
            self.protection_ends.add(ends)
            return True
        return False

    def end_protections(self, now: float) -> None:
        """Minimum runtimes ended: the jobs parked while they protected a victim retry."""
        self.protection_ends = {t for t in self.protection_ends if t > now}
        self._engine.queues.wake_all()

    def _issue_preemption(
        self,
        rec: JobRecord,
        shape_queue: ShapeQueue,
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
            self._engine.ends.changed()
            cand.rec.evicted_for = "Preempted"
            cand.rec.evicted_at = self._engine.now
            victim_info = self._engine.cache.cluster_queues.get(adm.cluster_queue)
            victim_path = _path(victim_info) if victim_info is not None else adm.cluster_queue
            settings = self._victim_settings(adm.cluster_queue)
            spared = self._spared.get(cand.rec.id)
            lost = _words_lost(cand, spared)
            out.append(
                Evict(
                    cand.rec.id,
                    "Preempted",
                    f"Preempted to accommodate a workload (job {rec.id}) due to "
                    f"{_PREEMPTION_WORDS[cand.reason]}; preemptor path: {path}; "
                    f"preemptee path: {victim_path}{lost}",
                    preemptor=rec.id,
                    preemption_reason=cand.reason,
                    mode=settings.mode,
                    grace_period_s=settings.grace_period_s,
                    lost_gpu_hours=None if spared is None else _hours(cand.lost),
                    spared=() if spared is None else spared,
                )
            )
        details: dict[str, Any] = {
            "clusterQueue": info.name,
            "victims": [c.rec.id for c in targets],
        }
        chosen = [c for c in targets if c.rec.id in self._spared]
        if chosen:
            details["lostWork"] = {
                str(c.rec.id): {
                    "gpuHours": _hours(c.lost),
                    "rather": {str(j): h for j, h in self._spared[c.rec.id]},
                }
                for c in chosen
            }
        self._spared = {}
        reason = Reason(
            ReasonCode.PENDING_PREEMPTION,
            f"Pending the preemption of {len(targets)} workload(s)",
            details,
        )
        cq_queue = shape_queue.cq
        cq_queue.blocked_by = rec
        cq_queue.sticky = True
        cq_queue.pinned = rec
        self._engine.queues.parked.park(
            cq_queue, reason, tuple(f"evict:{c.rec.id}" for c in targets)
        )
        self._engine.emit_reason(rec, reason, out)

    def oracle(self, rec: JobRecord, info: ClusterQueueInfo) -> Oracle:
        """Kueue's preemption oracle for the flavor search: for one flavor-resource,
        whether preempting (quota only) could make room, and in which mode."""
        node = info.node

        def oracle(flavor_resource: FlavorResource, needed: int) -> tuple[int, int] | None:
            if not considers(info, flavor_resource, needed):
                return None

            def fits(allow_borrowing: bool) -> int | None:
                if needed > available(node, flavor_resource):
                    return None
                if not allow_borrowing and node.usage.get(
                    flavor_resource, 0
                ) + needed > node.nominal.get(flavor_resource, 0):
                    return None
                return node.borrowing_height(flavor_resource, needed)

            preemptor = Preemptor(
                self._engine.cache,
                self._engine.admitted_by_cq,
                fits,
                self._lift_quota,
                self._put_back_quota,
                self._exempt,
                self._engine.now,
            )
            found = preemptor.targets(rec, info, {flavor_resource: needed}, set())
            if found is None:
                return NO_CANDIDATES, 0
            targets, borrow = found
            return (RECLAIM if all(not c.own_queue for c in targets) else PREEMPT), borrow

        return oracle

    def _charged_node(self, rec: JobRecord) -> QuotaNode | None:
        """The quota node an admitted job is charged to, if its ClusterQueue still holds it."""
        adm = rec.admission
        assert adm is not None
        info = self._engine.cache.cluster_queues.get(adm.cluster_queue)
        return adm.quota_node if info is not None and info.node is adm.quota_node else None

    def _lift_quota(self, rec: JobRecord) -> None:
        node = self._charged_node(rec)
        if node is not None:
            assert rec.admission is not None
            for flavor_resource, amount in rec.admission.usage.items():
                node.remove_usage(flavor_resource, amount)

    def _put_back_quota(self, rec: JobRecord) -> None:
        node = self._charged_node(rec)
        if node is not None:
            assert rec.admission is not None
            for flavor_resource, amount in rec.admission.usage.items():
                node.add_usage(flavor_resource, amount)

    def _lift(self, rec: JobRecord) -> None:
        """Take an admitted job's quota and node capacity away, for a trial."""
        self._lift_quota(rec)
        adm = rec.admission
        assert adm is not None
        held = self._engine.reserved.holds.owner
        for slot, amounts, exclusive, devices in adm.allocations:
            # A held node stays closed: what a job there frees belongs to the reservation.
            if slot not in held:
                slot.give_back(rec.id, amounts, exclusive, devices)
                self._engine.cache.reindex(slot)

    def _put_back(self, rec: JobRecord) -> None:
        self._put_back_quota(rec)
        adm = rec.admission
        assert adm is not None
        held = self._engine.reserved.holds.owner
        for slot, amounts, exclusive, devices in adm.allocations:
            if slot not in held:
                slot.take(rec.id, amounts, exclusive, devices)
                self._engine.cache.reindex(slot)

    def _reserve(
        self, rec: JobRecord, info: ClusterQueueInfo, flavor_resources: dict[FlavorResource, int]
    ) -> None:
        """Hold quota for a lender's head whose preemption found no targets (Kueue's
        ``reserveCapacityForUnreclaimablePreempt``): later entries of this round cannot
        borrow it."""
        if info.model.preemption.reclaim_within_cohort == "Any" or info.node.parent is None:
            return
        node = info.node
        for flavor_resource, need in flavor_resources.items():
            if need <= available(node, flavor_resource):
                continue
            usage, nominal = (
                node.usage.get(flavor_resource, 0),
                node.nominal.get(flavor_resource, 0),
            )
            if usage + need <= nominal:
                amount = min(need, nominal - usage)
            else:
                limit = node.borrowing_limit.get(flavor_resource)
                amount = need if limit is None else min(need, nominal + limit - usage)
            if amount > 0:
                node.add_usage(flavor_resource, amount)
                self.reserved.append((info, flavor_resource, amount, rec))
        self._engine.assigner.generation += 1

    def release_holds(self) -> None:
        """Give back the reservations of StrictFIFO heads that are no longer blocked."""
        for name in list(self.held):
            cq_queue = self._engine.queues.queues.get(name)
            if cq_queue is not None and cq_queue.parked and cq_queue.blocked_by is not None:
                continue
            for info, flavor_resource, amount in self.held.pop(name):
                info.node.remove_usage(flavor_resource, amount)
                top = info.node.top or info.node
                level = top.subtree.get(flavor_resource, 0) - top.usage.get(flavor_resource, 0)
                self._engine.queues.release(
                    info.root_key, {flavor_resource: amount}, {flavor_resource: level}, []
                )
            self._engine.assigner.generation += 1

    def unreserve(self) -> None:
        """End the round's reservations; wake what parked while they held quota (Kueue
        skips those entries and retries them in the next cycle)."""
        if not self.reserved:
            return
        reservers = {id(rec) for *_, rec in self.reserved}
        for entry in self.reserved:
            info, flavor_resource, amount, rec = entry
            shape_queue = rec.queue
            if (
                self._engine.config.heads_per_cycle is not None
                and shape_queue is not None
                and shape_queue.cq.strict
                and shape_queue.cq.blocked_by is rec
                and shape_queue.cq.parked
            ):
                self.held.setdefault(shape_queue.cq.name, []).append(
                    (info, flavor_resource, amount)
                )
            else:
                info.node.remove_usage(flavor_resource, amount)
        woken = [item for item, rec in self.parked_while_reserved if id(rec) not in reservers]
        self.reserved = []
        self.parked_while_reserved = []
        self._engine.queues.wake(woken)
        self._engine.assigner.generation += 1

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
            shape = self._engine.shapes.reduced(rec.shape, target, mid * step)
            trial = self._engine.assigner.assign_fresh(shape, info)
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
