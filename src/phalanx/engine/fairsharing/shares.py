"""Kueue's fair sharing: dominant resource shares, the admission tournament, and
fair-sharing preemption.

**DRS** of a ClusterQueue or Cohort with a parent (``fair_sharing.go``): for
each resource name ``r``, ``borrowed_r`` is the sum over its flavors of
``max(0, usage + extra - subtree quota)`` and ``lendable_r`` the sum over its
flavors of the parent's ``potentialAvailable``; the ratio is
``max_r borrowed_r * 1000 / lendable_r`` and the share is that ratio over the
node's ``fairSharing.weight`` (0 when not borrowing, infinite when the weight is 0
and it borrows). A root has share 0. ``weightedShare`` is the share rounded up.

**Tournament** (``fair_sharing_iterator.go``): at every cohort, the children's
nominees compete, each with the share of the child subtree *after* admitting
its nominee: a subtree that does not borrow for it first, then the lower
share, then higher priority, then the earlier queue-order time.

**Preemption** (``preemption/fairsharing``, ``fairPreemptions``): candidates
are jobs of the preemptor's own ClusterQueue (``withinClusterQueue``) and of
ClusterQueues that borrow (``reclaimWithinCohort``); the preemptor's request is
charged to its queue while shares are compared. ``TargetClusterQueueOrdering``
walks down from the root cohort, at every cohort entering the child with the
highest share that still borrows and has candidates (a cohort on the
preemptor's path stays while not borrowing, the preemptor's queue while it has
candidates; a cohort wins a tie with a queue, equal queues go by their next
candidate), until it reaches a ClusterQueue. The preemptor's own queue gives up
its next candidate unconditionally; another queue's is reclaimed
(``InCohortReclamation``) if the preemptor stays within its nominal quota, and
otherwise preempted (``InCohortFairSharing``) only if the strategy holds on the
*almost-LCA* shares, those of the two children of the lowest common cohort of
the two queues (each may be the queue itself): ``LessThanOrEqualToFinalShare``
(the preemptor's side <= the target's side after removing the candidate), then,
over the rejected and at most once per queue, ``LessThanInitialShare`` (< the
target's side before). After each victim the walk starts again from the root.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from phalanx.engine.cache.cluster import ClusterCache
from phalanx.engine.cache.quota import FlavorResource, QuotaNode, potential_available

__all__ = ["dominant_share", "node_weight", "share_and_ratio", "weighted_share"]

MAX_SHARE = 2**63 - 1
"""What ``weightedShare`` reports for an infinite share (Kueue: MaxInt64)."""


def node_weight(cache: ClusterCache, node: QuotaNode) -> float:
    """The ``fairSharing.weight`` of a ClusterQueue or Cohort (default 1)."""
    if node.is_cluster_queue:
        info = cache.cluster_queues.get(node.name)
        fs = info.model.fair_sharing if info is not None else None
    else:
        cohort = cache.cohorts.get(node.name)
        fs = cohort.fair_sharing if cohort is not None else None
    return fs.weight if fs is not None else 1.0


def dominant_share(
    node: QuotaNode,
    weight: float,
    extra: Mapping[FlavorResource, int] | None = None,
) -> float:
    """The DRS of ``node`` with ``extra`` usage added (negative amounts remove)."""
    return share_and_ratio(node, weight, extra)[0]


def share_and_ratio(
    node: QuotaNode,
    weight: float,
    extra: Mapping[FlavorResource, int] | None = None,
) -> tuple[float, float]:
    """The DRS and the unweighted borrowing ratio behind it; two infinite shares (weight
    0) compare by their ratios, as Kueue's ``CompareDRS`` does."""
    parent = node.parent
    if parent is None:
        return 0.0, 0.0
    borrowed: dict[str, int] = {}
    lendable: dict[str, int] = {}
    frs = set(node.subtree) | set(node.usage) | set(extra or {})
    for fr in frs:
        resource = fr[1]
        used = node.usage.get(fr, 0) + (extra.get(fr, 0) if extra else 0)
        borrowed[resource] = borrowed.get(resource, 0) + max(0, used - node.subtree.get(fr, 0))
        lendable[resource] = lendable.get(resource, 0) + potential_available(parent, fr)
    ratio = 0.0
    for resource, amount in borrowed.items():
        if amount <= 0:
            continue
        pool = lendable.get(resource, 0)
        ratio = max(ratio, math.inf if pool <= 0 else amount * 1000 / pool)
    if ratio == 0:
        return 0.0, 0.0
    if weight == 0:
        return math.inf, ratio
    return ratio / weight, ratio


def weighted_share(share: float) -> int:
    """Kueue's ``status.fairSharing.weightedShare``: the share rounded up."""
    if math.isinf(share):
        return MAX_SHARE
    return math.ceil(share)
