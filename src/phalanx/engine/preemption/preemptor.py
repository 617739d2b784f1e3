"""Classical preemption: which admitted jobs to evict so that a pending job fits.

Kueue's ``preemption.go`` / ``classical``, with gang placement folded in: the
search frees quota *and* node capacity, and a preemptor fits only when the flavor
assigner finds both for it.

1. **Contested flavor-resources**: those where the failed pod set was short of
   quota and preemption may be considered (the request alone is within the
   ClusterQueue's nominal quota, or ``borrowWithinCohort`` is set, or the queue
   sits in a nested cohort and may reclaim there; Kueue's ``fitsResourceQuota``),
   and every requested resource of a flavor whose nodes were short.
2. **Candidates**: admitted jobs of the preemptor's cohort tree that use a
   contested flavor-resource, classified by the ClusterQueue's ``preemption``:

   * same ClusterQueue: ``withinClusterQueue`` (``LowerPriority``: lower priority
     value; ``LowerOrNewerEqualPriority``: lower, or equal and queued later);
     reason ``InClusterQueue``;
   * another ClusterQueue that borrows on a contested flavor-resource:
     ``reclaimWithinCohort`` (``LowerPriority`` / ``Any``). If the preemptor's
     request fits its own nominal quota the candidate is *reclaimed*
     (``InCohortReclamation``); else with ``borrowWithinCohort: LowerPriority``
     a lower-priority candidate (at most ``maxPriorityThreshold``) may be
     preempted while the preemptor borrows (``InCohortReclaimWhileBorrowing``);
     else it may be reclaimed only if the preemptor then does not borrow.

   A job whose ClusterQueue's preemption mode is ``OFF``, or that was admitted
   less than its ClusterQueue's minimum runtime ago, is never a candidate.
3. **Order** (``CandidatesOrdering``): jobs already being evicted first, other
   ClusterQueues before the preemptor's own, lower priority first, then (only
   among candidates equal so far, and only where one of them reported a
   checkpoint) the least work lost (GPUs x time since its last checkpoint, or
   since its admission without one), most recently admitted first, id. Where no
   candidate of such a group has a checkpoint, the order is Kueue's.
4. **Minimal set**: remove candidates in that order until the job fits, then
   walk the removed ones back in reverse (skipping the last) and keep each one
   whose return still leaves the job fitting. Kueue's two passes (borrowing
   allowed or not) are tried in Kueue's order. Where the tie group that made the
   job fit is ordered by lost work, the greedy choice within it is replaced by
   the subset of the group that fits and loses least in all (a bounded exact
   search, :data:`LEAST_LOST_TRIALS` fit trials; the greedy choice where the
   bound is reached first): two small victims may together lose more than one
   larger one.

The search removes candidates from the live quota tree and nodes and puts them
back before it returns: nothing it does is visible afterwards.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

from phalanx.engine.cache.cluster import ClusterCache, ClusterQueueInfo
from phalanx.engine.cache.quota import FlavorResource, QuotaNode
from phalanx.engine.fairsharing.shares import share_and_ratio
from phalanx.engine.placement.assigner import PLACEMENT, QUOTA, Assignment
from phalanx.engine.state import JobRecord

__all__ = [
    "IN_CLUSTER_QUEUE",
    "IN_COHORT_FAIR_SHARING",
    "IN_COHORT_RECLAIM_WHILE_BORROWING",
    "IN_COHORT_RECLAMATION",
    "Candidate",
    "Preemptor",
    "considers",
    "contested",
    "may_preempt",
    "weigh_lost_work",
]

IN_CLUSTER_QUEUE = "InClusterQueue"
IN_COHORT_RECLAMATION = "InCohortReclamation"
IN_COHORT_RECLAIM_WHILE_BORROWING = "InCohortReclaimWhileBorrowing"
IN_COHORT_FAIR_SHARING = "InCohortFairSharing"

LEAST_LOST_TRIALS = 256
"""At most this many fit trials per search for the victim set that loses least work."""

T = TypeVar("T")

_WITHOUT_BORROWING = "WithoutBorrowing"
"""A reclaim allowed only if the preemptor does not borrow afterwards."""


@dataclass(slots=True)
class Candidate:
    rec: JobRecord
    reason: str
    variant: str
    own_queue: bool
    queue: QuotaNode | None = None
    """The candidate's ClusterQueue node (another queue's: it must still borrow)."""
    lost: float = 0.0
    """GPU-seconds preempting it loses (since its last checkpoint or its admission)."""
    lost_key: float = 0.0
    """``lost`` where its tie group (see :meth:`group`) has a checkpoint, else 0."""
    by_lost: bool = False
    """Whether its tie group is ordered by lost work (a member reported a checkpoint)."""

    def group(self) -> tuple[bool, bool, int]:
        """The part of the order the policy fixes; lost work only breaks ties within it."""
        adm = self.rec.admission
        assert adm is not None
        return (not adm.evicting, self.own_queue, self.rec.facts.priority_value)

    def order(self) -> tuple[bool, bool, int, float, float, int]:
        adm = self.rec.admission
        assert adm is not None
        return (
            not adm.evicting,
            self.own_queue,
            self.rec.facts.priority_value,
            self.lost_key,
            -adm.admitted_at,
            self.rec.id,
        )


def weigh_lost_work(cands: list[Candidate], now: float) -> None:
    """Set each candidate's lost work, and use it to order a tie group (same
    :meth:`Candidate.group`) only where a member of the group reported a checkpoint:
    without checkpoints the order stays Kueue's (most recently admitted first)."""
    checkpointed: set[tuple[bool, bool, int]] = set()
    for c in cands:
        adm = c.rec.admission
        assert adm is not None
        c.lost = adm.lost_work(now)
        if adm.checkpoint_at is not None:
            checkpointed.add(c.group())
    for c in cands:
        c.by_lost = c.group() in checkpointed
        c.lost_key = c.lost if c.by_lost else 0.0


def may_preempt(info: ClusterQueueInfo) -> bool:
    """Whether the ClusterQueue's policy allows any preemption at all."""
    return info.preempts


def considers(info: ClusterQueueInfo, fr: FlavorResource, needed: int) -> bool:
    """Whether preemption is worth simulating for ``needed`` of ``fr`` (Kueue's
    ``fitsResourceQuota``: the request alone within nominal quota, or
    ``borrowWithinCohort`` set, or reclaiming possible in a nested cohort)."""
    p = info.model.preemption
    node = info.node
    if needed <= node.nominal.get(fr, 0):
        return True
    if p.borrow_within_cohort is not None and p.borrow_within_cohort.policy != "Never":
        return True
    return (
        p.reclaim_within_cohort != "Never"
        and node.parent is not None
        and node.parent.parent is not None
    )


def contested(info: ClusterQueueInfo, assignment: Assignment) -> dict[FlavorResource, int]:
    """The flavor-resources where preemption may make the failed pod set fit, each with
    the amount the job needs there (only the flavor the search chose to preempt in,
    when it chose one)."""
    failed = assignment.failed
    if failed is None:
        return {}
    out: dict[FlavorResource, int] = {}
    shape = failed.shape
    only = failed.preempt_flavor
    for attempt in failed.attempts:
        if only is not None and attempt.flavor != only:
            continue
        if attempt.outcome == QUOTA:
            fr = (attempt.flavor, attempt.resource)
            if considers(info, fr, attempt.needed):
                out[fr] = attempt.needed
        elif attempt.outcome == PLACEMENT:
            for resource, amount in shape.requests:
                if amount > 0:
                    fr = (attempt.flavor, resource)
                    out[fr] = assignment.usage.get(fr, 0) + shape.total(resource)
    return out


def _hierarchical_advantage(
    preemptor: QuotaNode, candidate: QuotaNode, frs: dict[FlavorResource, int]
) -> bool:
    """Whether the request fits the quota of the preemptor's queue or of one of its
    cohorts below the lowest cohort it shares with the candidate's queue (Kueue's
    hierarchical reclaim: the preemptor takes back quota of its own subtree)."""
    shared = {id(n) for n in candidate.ancestors()}
    node: QuotaNode | None = preemptor
    while node is not None and id(node) not in shared:
        quota = node.nominal if node.is_cluster_queue else node.subtree
        if all(node.usage.get(fr, 0) + need <= quota.get(fr, 0) for fr, need in frs.items()):
            return True
        node = node.parent
    return False


class Preemptor(Generic[T]):
    """Finds preemption targets for one pending job in one ClusterQueue.

    ``fits(allow_borrowing)`` says whether the job fits the state as it is during
    the search (with the candidates removed so far) and returns what it got
    (an assignment, a borrowing height), or None. ``exempt(job)`` says whether an
    admitted job may not be preempted at all (its ClusterQueue's preemption mode
    is ``OFF``, or it has not run its minimum runtime yet).
    """

    def __init__(
        self,
        cache: ClusterCache,
        admitted: dict[str, dict[int, JobRecord]],
        fits: Callable[[bool], T | None],
        remove: Callable[[JobRecord], None],
        restore: Callable[[JobRecord], None],
        exempt: Callable[[JobRecord], bool] | None = None,
        now: float | None = None,
    ) -> None:
        self.now = now
        """The cycle time, for the lost work that breaks ties; None: no tie-break."""
        self.last_candidates: list[Candidate] = []
        """The candidates of the last search, in order (for the explanation)."""
        self.cache = cache
        self.admitted = admitted
        self._fits = fits
        self.remove = remove
        self.restore = restore
        self.exempt = exempt

    def candidates(
        self,
        rec: JobRecord,
        info: ClusterQueueInfo,
        frs: dict[FlavorResource, int],
        excluded: set[int],
    ) -> list[Candidate]:
        p = info.model.preemption
        top = info.node.top or info.node
        prio = rec.facts.priority_value
        node = info.node
        # Kueue's "hierarchical advantage": the request fits the queue's own nominal quota.
        within_nominal = all(
            node.usage.get(fr, 0) + need <= node.nominal.get(fr, 0) for fr, need in frs.items()
        )
        bwc = p.borrow_within_cohort
        out: list[Candidate] = []
        for name, jobs in self.admitted.items():
            other = self.cache.cluster_queues.get(name)
            if other is None or (other.node.top or other.node) is not top:
                continue
            own = other is info
            if not own and p.reclaim_within_cohort == "Never":
                continue
            if own and p.within_cluster_queue == "Never":
                continue
            borrowing = own or any(
                other.node.usage.get(fr, 0) > other.node.nominal.get(fr, 0) for fr in frs
            )
            if not borrowing:
                continue
            advantage = within_nominal or (
                not own and _hierarchical_advantage(node, other.node, frs)
            )
            for cand in jobs.values():
                adm = cand.admission
                if adm is None or cand.id in excluded:
                    continue
                if not any(fr in adm.usage for fr in frs):
                    continue
                if self.exempt is not None and self.exempt(cand):
                    continue
                cprio = cand.facts.priority_value
                if own:
                    policy = p.within_cluster_queue
                    ok = cprio < prio or (
                        policy == "LowerOrNewerEqualPriority"
                        and cprio == prio
                        and cand.order_time > rec.order_time
                    )
                    if ok:
                        out.append(Candidate(cand, IN_CLUSTER_QUEUE, IN_CLUSTER_QUEUE, True))
                    continue
                if p.reclaim_within_cohort == "LowerPriority" and cprio >= prio:
                    continue
                if advantage:
                    out.append(Candidate(cand, IN_COHORT_RECLAMATION, IN_COHORT_RECLAMATION, False))
                elif (
                    bwc is not None
                    and bwc.policy == "LowerPriority"
                    and cprio < prio
                    and (bwc.max_priority_threshold is None or cprio <= bwc.max_priority_threshold)
                ):
                    out.append(
                        Candidate(
                            cand,
                            IN_COHORT_RECLAIM_WHILE_BORROWING,
                            IN_COHORT_RECLAIM_WHILE_BORROWING,
                            False,
                        )
                    )
                else:
                    out.append(Candidate(cand, IN_COHORT_RECLAMATION, _WITHOUT_BORROWING, False))
        for c in out:
            if not c.own_queue:
                adm = c.rec.admission
                assert adm is not None
                c.queue = adm.quota_node
        if self.now is not None:
            weigh_lost_work(out, self.now)
        out.sort(key=Candidate.order)
        self.last_candidates = out
        return out

    def targets(
        self,
        rec: JobRecord,
        info: ClusterQueueInfo,
        frs: dict[FlavorResource, int],
        excluded: set[int],
    ) -> tuple[list[Candidate], T] | None:
        """The victims and what the job gets once they are gone, or None."""
        cands = self.candidates(rec, info, frs, excluded)
        if not cands:
            return None
        p = info.model.preemption
        node = info.node
        bwc_forbidden = p.borrow_within_cohort is None or p.borrow_within_cohort.policy == "Never"
        under_nominal = all(
            node.usage.get(fr, 0) < node.nominal.get(fr, 0) for fr in frs if fr in node.nominal
        )
        no_other = all(c.own_queue for c in cands)
        passes: tuple[bool, ...]
        if no_other or (bwc_forbidden and not under_nominal):
            passes = (True,)
        elif bwc_forbidden:
            passes = (False, True)
        else:
            passes = (True, False)
        for allow_borrowing in passes:
            usable = [c for c in cands if not allow_borrowing or c.variant != _WITHOUT_BORROWING]
            found = self._minimal(usable, allow_borrowing, frs)
            if found is not None:
                return found
        return None

    def fair_targets(
        self,
        rec: JobRecord,
        info: ClusterQueueInfo,
        frs: dict[FlavorResource, int],
        excluded: set[int],
        strategies: tuple[str, ...],
        weight: Callable[[QuotaNode], float],
    ) -> tuple[list[Candidate], T] | None:
        """Fair-sharing preemption (see :mod:`phalanx.engine.fairsharing.shares`)."""
        cands = self.candidates(rec, info, frs, excluded)
        if not cands:
            return None
        node = info.node
        within_nominal = all(
            node.usage.get(fr, 0) + need <= node.nominal.get(fr, 0) for fr, need in frs.items()
        )
        removed: list[Candidate] = []
        fit: T | None = None
        incoming = _Incoming(node, frs)

        def take(cand: Candidate, reason: str) -> T | None:
            # The job's own usage is only simulated for the shares, never for a fit.
            incoming.lift()
            try:
                self.remove(cand.rec)
                removed.append(replace(cand, reason=reason))
                return self._fits(True)
            finally:
                incoming.charge()

        try:
            incoming.charge()
            try:
                fit = self._fair_search(node, cands, within_nominal, strategies, weight, take)
            finally:
                incoming.lift()
            if fit is None:
                return None
            return self._fill_back(removed, True)
        finally:
            for cand in reversed(removed):
                self.restore(cand.rec)

    def _fair_search(
        self,
        node: QuotaNode,
        cands: list[Candidate],
        within_nominal: bool,
        strategies: tuple[str, ...],
        weight: Callable[[QuotaNode], float],
        take: Callable[[Candidate, str], T | None],
    ) -> T | None:
        """Kueue's ``fairPreemptions``, with the incoming job's usage charged to ``node``:
        victims are taken with ``take`` until it returns a fit."""
        fit: T | None = None
        if node.parent is None:
            for cand in cands:
                fit = take(cand, IN_CLUSTER_QUEUE)
                if fit is not None:
                    break
            return fit
        ordering = _TargetOrdering(self.cache, node, cands, weight)
        retry: list[Candidate] = []
        first = strategies[0] if strategies else "LessThanOrEqualToFinalShare"
        while fit is None and (q := ordering.next()) is not None:
            queue = ordering.queues[id(q)]
            if q is node or within_nominal:
                reason = IN_CLUSTER_QUEUE if q is node else IN_COHORT_RECLAMATION
                fit = take(queue.pop(0), reason)
                continue
            pre_side, target_side = _almost_lca(node, q)
            pre_new = _drs(pre_side, weight)
            target_old = _drs(target_side, weight)
            while queue:
                cand = queue.pop(0)
                if first == "LessThanOrEqualToFinalShare":
                    ok = pre_new <= _drs_without(target_side, q, cand, weight)
                else:
                    ok = pre_new < target_old
                if ok:
                    fit = take(cand, IN_COHORT_FAIR_SHARING)
                    # The shares changed: the next target may be another queue.
                    break
                retry.append(cand)
        if fit is None and len(strategies) > 1 and retry:
            ordering = _TargetOrdering(self.cache, node, retry, weight)
            while fit is None and (q := ordering.next()) is not None:
                pre_side, target_side = _almost_lca(node, q)
                if _drs(pre_side, weight) < _drs(target_side, weight):
                    fit = take(ordering.queues[id(q)].pop(0), IN_COHORT_FAIR_SHARING)
                # Kueue applies rule S2-b at most once per ClusterQueue.
                ordering.drop(q)
        return fit

    def _minimal(
        self,
        cands: Iterable[Candidate],
        allow_borrowing: bool,
        frs: dict[FlavorResource, int],
    ) -> tuple[list[Candidate], T] | None:
        removed: list[Candidate] = []
        fit: T | None = None
        try:
            for cand in cands:
                if _within_nominal(cand, frs):
                    # Earlier removals brought its queue back within nominal quota.
                    continue
                self.remove(cand.rec)
                removed.append(cand)
                fit = self._fits(allow_borrowing)
                if fit is not None:
                    break
            if fit is None:
                return None
            if removed[-1].by_lost:
                self._least_lost(cands, removed, allow_borrowing, frs)
            return self._fill_back(removed, allow_borrowing)
        finally:
            for cand in reversed(removed):
                self.restore(cand.rec)

    def _least_lost(
        self,
        cands: Iterable[Candidate],
        removed: list[Candidate],
        allow_borrowing: bool,
        frs: dict[FlavorResource, int],
    ) -> None:
        """Within the tie group that made the job fit, replace the greedy choice (the
        least lost work first, until it fits) by the subset of the group that fits
        with the least lost work in all, if one is found within :data:`LEAST_LOST_TRIALS`
        fit trials. The earlier groups' victims stay removed; ``removed`` is updated
        in place, and holds what is removed when it returns.

        Depth-first over the group in its order (including a member before skipping
        it), so the first subsets tried are the greedy one's neighbours; a branch stops
        where it fits (more victims only lose more) or already loses as much as the
        best found. Deterministic: the order and the bound fix which subsets are tried.
        """
        group = removed[-1].group()
        chosen = [c for c in removed if c.group() == group]
        if len(chosen) < 2:
            # The first member alone fits: it loses least of all.
            return
        members = [c for c in cands if c.group() == group]
        prefix = removed[: len(removed) - len(chosen)]
        best = sum(c.lost for c in chosen)
        best_set: list[Candidate] | None = None
        trials = LEAST_LOST_TRIALS
        for cand in reversed(chosen):
            self.restore(cand.rec)
        del removed[len(prefix) :]

        def search(start: int, lost: float) -> None:
            nonlocal best, best_set, trials
            for i in range(start, len(members)):
                if trials <= 0:
                    return
                cand = members[i]
                if lost + cand.lost >= best:
                    # The members are in lost-work order: the rest lose as much or more.
                    return
                if _within_nominal(cand, frs):
                    continue
                self.remove(cand.rec)
                removed.append(cand)
                trials -= 1
                try:
                    if self._fits(allow_borrowing) is not None:
                        best, best_set = lost + cand.lost, list(removed[len(prefix) :])
                    else:
                        search(i + 1, lost + cand.lost)
                finally:
                    removed.pop()
                    self.restore(cand.rec)

        search(0, 0.0)
        for cand in best_set if best_set is not None else chosen:
            self.remove(cand.rec)
            removed.append(cand)

    def _fill_back(
        self, removed: list[Candidate], allow_borrowing: bool
    ) -> tuple[list[Candidate], T]:
        """Spare every victim whose return still leaves the job fitting (Kueue's fill-back).

        The last victim removed is the one that made the job fit and stays a target;
        the others are tried in reverse. Spared ones leave ``removed``.
        """
        targets = [removed[-1]]
        for cand in reversed(removed[:-1]):
            self.restore(cand.rec)
            if self._fits(allow_borrowing) is None:
                self.remove(cand.rec)
                targets.append(cand)
            else:
                removed.remove(cand)
        final = self._fits(allow_borrowing)
        assert final is not None
        targets.sort(key=Candidate.order)
        return targets, final


DrsKey = tuple[float, float]
"""A DRS as Kueue's ``CompareDRS`` orders it: the share, then, between two infinite
shares (weight 0), the unweighted ratio."""


def _drs(node: QuotaNode, weight: Callable[[QuotaNode], float]) -> DrsKey:
    share, ratio = share_and_ratio(node, weight(node))
    return share, ratio if math.isinf(share) else 0.0


def _drs_without(
    side: QuotaNode, queue: QuotaNode, cand: Candidate, weight: Callable[[QuotaNode], float]
) -> DrsKey:
    """The DRS of ``side`` (``queue`` or a cohort above it) once ``cand`` is gone: its
    usage leaves ``queue`` and travels up through the lending limits, then comes back."""
    adm = cand.rec.admission
    assert adm is not None
    if adm.quota_node is not queue:
        return _drs(side, weight)
    for fr, amount in adm.usage.items():
        queue.remove_usage(fr, amount)
    try:
        return _drs(side, weight)
    finally:
        for fr, amount in adm.usage.items():
            queue.add_usage(fr, amount)


def _almost_lca(preemptor: QuotaNode, target: QuotaNode) -> tuple[QuotaNode, QuotaNode]:
    """The children of the lowest cohort shared by two ClusterQueues of one tree, on the
    preemptor's side and on the target's side (each may be the ClusterQueue itself)."""
    path = {id(a) for a in preemptor.ancestors()}
    target_side = target
    for ancestor in target.ancestors():
        if id(ancestor) in path:
            lca = ancestor
            break
        target_side = ancestor
    else:
        raise AssertionError("ClusterQueues of different cohort trees")
    preemptor_side = preemptor
    for ancestor in preemptor.ancestors():
        if ancestor is lca:
            break
        preemptor_side = ancestor
    return preemptor_side, target_side


class _Incoming:
    """The pending job's usage, charged to its ClusterQueue while shares are compared
    (Kueue's ``SimulateUsageAddition``) and lifted while fits are tried."""

    __slots__ = ("charged", "node", "usage")

    def __init__(self, node: QuotaNode, usage: Mapping[FlavorResource, int]) -> None:
        self.node = node
        self.usage = usage
        self.charged = False

    def charge(self) -> None:
        if not self.charged:
            for fr, amount in self.usage.items():
                self.node.add_usage(fr, amount)
            self.charged = True

    def lift(self) -> None:
        if self.charged:
            for fr, amount in self.usage.items():
                self.node.remove_usage(fr, amount)
            self.charged = False


class _TargetOrdering:
    """Kueue's ``TargetClusterQueueOrdering``: from the root cohort down, the child with
    the highest DRS that still borrows and still has candidates, until a ClusterQueue.

    A cohort on the preemptor's path is kept while not borrowing (imbalance may sit
    below it, or the preemptor's own queue has candidates); the preemptor's queue is
    kept until its candidates run out. Between equal ClusterQueues the one whose next
    candidate orders first wins; a cohort wins a tie with a ClusterQueue.
    """

    def __init__(
        self,
        cache: ClusterCache,
        preemptor: QuotaNode,
        cands: Iterable[Candidate],
        weight: Callable[[QuotaNode], float],
    ) -> None:
        self.preemptor = preemptor
        self.weight = weight
        self.root = preemptor.root()
        self.path = {id(a) for a in preemptor.ancestors()}
        self.queues: dict[int, list[Candidate]] = {}
        for cand in cands:
            adm = cand.rec.admission
            assert adm is not None
            other = cache.cluster_queues.get(adm.cluster_queue)
            if other is None:
                continue
            self.queues.setdefault(id(other.node), []).append(cand)
        self.pruned: set[int] = set()

    def drop(self, queue: QuotaNode) -> None:
        self.pruned.add(id(queue))

    def next(self) -> QuotaNode | None:
        """The next ClusterQueue to take a candidate from, or None when none is left."""
        while id(self.root) not in self.pruned:
            found = self._next(self.root)
            if found is not None:
                return found
        return None

    def _next(self, cohort: QuotaNode) -> QuotaNode | None:
        best_cq: QuotaNode | None = None
        best_cq_drs: DrsKey = (-1.0, 0.0)
        best_cohort: QuotaNode | None = None
        best_cohort_drs: DrsKey = (-1.0, 0.0)
        for child in cohort.children:
            if id(child) in self.pruned:
                continue
            drs = _drs(child, self.weight)
            if child.is_cluster_queue:
                queue = self.queues.get(id(child))
                if not queue or (drs[0] == 0 and child is not self.preemptor):
                    self.pruned.add(id(child))
                elif best_cq is None or drs > best_cq_drs:
                    best_cq, best_cq_drs = child, drs
                elif drs == best_cq_drs and queue[0].order() < self.queues[id(best_cq)][0].order():
                    best_cq = child
            elif drs[0] == 0 and id(child) not in self.path:
                self.pruned.add(id(child))
            elif drs >= best_cohort_drs:
                best_cohort, best_cohort_drs = child, drs
        if best_cohort is None and best_cq is None:
            self.pruned.add(id(cohort))
            return None
        if best_cohort is not None and best_cohort_drs >= best_cq_drs:
            return self._next(best_cohort)
        return best_cq


def _within_nominal(cand: Candidate, frs: dict[FlavorResource, int]) -> bool:
    """Whether the candidate's queue (when it has one) uses no more than its nominal
    quota of ``frs``: removing it would not help a job that needs what is borrowed."""
    q = cand.queue
    return q is not None and not any(q.usage.get(fr, 0) > q.nominal.get(fr, 0) for fr in frs)
