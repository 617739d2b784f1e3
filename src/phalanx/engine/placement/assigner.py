"""Flavor assignment: for each pod set, a flavor per resource group, with quota and nodes.

Kueue's ``flavorassigner`` with gang placement folded in. For every pod set
and every resource group covering what it requests, the ClusterQueue's
flavors are tried in order:

1. the flavor's labels and taints must suit the pod set (else NoMatchingFlavor);
2. for each requested resource, ``val`` = what earlier pod sets took from this
   flavor-resource + this pod set's total; ``val > potentialAvailable`` can
   never fit (ExceedsMaxQuota), ``val > available`` does not fit now
   (InsufficientQuota), otherwise it fits with the borrowing height of the
   queue;
3. in the group that places the pod set (the one covering GPUs, else the
   first), the placement policy must find nodes for every task.

The search stops at the first flavor that fits without borrowing, or that fits
by borrowing when ``whenCanBorrow`` is ``MayStopSearch`` (the default);
otherwise the best flavor seen wins (lowest borrowing height, then order).
Preemption candidates are not searched here: a flavor that would need
preemption counts as not fitting, and ``whenCanPreempt`` has nothing to act on
until a preemption policy is configured.

Every attempt is recorded, so the pending reason is built from data.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from phalanx.engine.cache.capacity import FlavorNodes, NodeSlot
from phalanx.engine.cache.cluster import ClusterCache, ClusterQueueInfo, GroupInfo
from phalanx.engine.cache.quota import (
    FlavorResource,
    available,
    potential_available,
)
from phalanx.engine.placement import (
    NodeFilter,
    Overlay,
    PlacementPolicy,
    PlacementResult,
    add_to_overlay,
)
from phalanx.engine.placement.topology import DomainIndex, place_in_topology
from phalanx.engine.queueing.shapes import JobShape, PodSetShape
from phalanx.model import (
    GPU,
    HOSTNAME_LABEL,
    PODS,
    FungibilityPreference,
    ResourceFlavor,
    Toleration,
    WhenCanBorrow,
    WhenCanPreempt,
    affinity_matches,
    tolerates,
)

__all__ = [
    "Assignment",
    "FlavorAssigner",
    "FlavorAttempt",
    "Oracle",
    "PodSetResult",
    "flavor_matches",
    "node_filter",
]

Placed = tuple[tuple[tuple[NodeSlot, int], ...], tuple[int, ...] | None]
"""A pod set's nodes ``((node, units), ...)`` and its share devices (see PlacementResult)."""

Oracle = Callable[[FlavorResource, int], tuple[int, int] | None]
"""Simulates preemption for ``needed`` of one flavor-resource: ``(mode, borrowing
height)`` with mode :data:`NO_CANDIDATES`, :data:`PREEMPT` or :data:`RECLAIM`; None when
preemption is not considered there."""

NO_CANDIDATES = 1
PREEMPT = 2
RECLAIM = 3
FIT_MODE = 4

FIT = "fit"
NO_MATCH = "no_match"
MAX_QUOTA = "max_quota"
QUOTA = "quota"
PLACEMENT = "placement"
UNDECLARED = "undeclared"


@dataclass(slots=True)
class FlavorAttempt:
    """One flavor tried for one resource group of one pod set, and how it went.

    Never changed once made, but not frozen: one is made for every flavor of every
    head tried, and a frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__``, three times the cost."""

    flavor: str
    outcome: str
    resource: str = ""
    needed: int = 0
    available: int = 0
    max_units: int = 0
    borrow: int = 0


@dataclass(slots=True)
class PodSetResult:
    shape: PodSetShape
    flavors: dict[str, str] = field(default_factory=dict)
    nodes: tuple[tuple[NodeSlot, int], ...] = ()
    share_devices: tuple[int, ...] | None = None
    """Per node, the GPU device the placement scored for the first share (-1: none)."""
    attempts: list[FlavorAttempt] = field(default_factory=list)
    ok: bool = True
    memo: dict[str, object] = field(default_factory=dict)
    """What the engine derives from a failure (signature, wake conditions), kept once."""
    preempt_flavor: str | None = None
    """The flavor the search settled on in a preemption mode: preempt there."""


@dataclass(slots=True)
class Assignment:
    ok: bool
    pod_sets: list[PodSetResult]
    usage: dict[FlavorResource, int]
    borrow: int
    generation: int

    @property
    def failed(self) -> PodSetResult | None:
        for result in self.pod_sets:
            if not result.ok:
                return result
        return None


def _preferred(a: tuple[int, int], b: tuple[int, int], borrow_first: bool) -> bool:
    """Whether flavor outcome ``a`` (mode, borrowing height) beats ``b`` (Kueue's
    ``isPreferred``): the better mode first, then less borrowing; with
    ``PreemptionOverBorrowing`` less borrowing first."""
    if borrow_first:
        return (a[1], -a[0]) < (b[1], -b[0])
    return (-a[0], a[1]) < (-b[0], b[1])


def _flavor_matches(pod_set: PodSetShape, flavor: ResourceFlavor) -> bool:
    labels = flavor.node_labels
    for key, value in pod_set.node_selector:
        if key in labels and labels[key] != value:
            return False
    if pod_set.node_affinity and not any(
        # As Kueue: only the expressions on labels the flavor sets count.
        all(e.matches(labels.get(e.key)) for e in term.match_expressions if e.key in labels)
        for term in pod_set.node_affinity
    ):
        return False
    if flavor.node_taints:
        tolerations = (*pod_set.tolerations, *flavor.tolerations)
        if not tolerates(tolerations, flavor.node_taints):
            return False
    return True


def _node_filter(
    pod_set: PodSetShape,
    flavor: ResourceFlavor,
    tainted: bool,
    other_flavors: tuple[ResourceFlavor, ...],
) -> NodeFilter | None:
    selector = pod_set.node_selector
    affinity = pod_set.node_affinity
    tolerations: tuple[Toleration, ...] = (*pod_set.tolerations, *flavor.tolerations)
    extra = tuple(f for f in other_flavors if f.node_labels)
    allowed, excluded = pod_set.node_names, pod_set.exclude_nodes
    if (
        not selector
        and not affinity
        and not tainted
        and not extra
        and allowed is None
        and not excluded
    ):
        return None

    def accept(slot: NodeSlot) -> bool:
        node = slot.node
        if allowed is not None and node.name not in allowed:
            return False
        if node.name in excluded:
            return False
        labels = node.labels
        for key, value in selector:
            if labels.get(key) != value:
                return False
        if affinity and not affinity_matches(affinity, node.name, labels):
            return False
        if node.taints and not tolerates(tolerations, node.taints):
            return False
        return all(f.selects(node) for f in extra)

    return accept


flavor_matches = _flavor_matches
"""Whether a flavor's node labels and taints suit a pod set (also used by backfill)."""
node_filter = _node_filter
"""The per-node filter of a pod set in a flavor, or None when every node passes."""


def _prefer_nodes(
    placed: PlacementResult,
    pod_set: PodSetShape,
    prefer: frozenset[NodeSlot],
    node_filter: Callable[[NodeSlot], bool] | None,
    overlay: Overlay,
) -> PlacementResult:
    """``placed`` with its units moved onto the ``prefer`` nodes it left out, as many as
    each takes (one per node for one unit per node), from its other nodes (the last
    first). Nodes are independent outside a Topology, so the result still fits."""
    assert placed.nodes is not None
    chosen = list(placed.nodes)
    used = {slot for slot, _ in chosen}
    unit = pod_set.unit_request()
    moved_any = False
    for slot in sorted(prefer, key=lambda s: s.name):
        if slot in used or not slot.schedulable:
            continue
        if node_filter is not None and not node_filter(slot):
            continue
        if pod_set.exclusive and (not slot.idle or slot in overlay):
            continue
        room = slot.fit_units(unit, overlay.get(slot), pod_set.share)
        if pod_set.one_unit_per_node:
            room = min(room, 1)
        moved = 0
        for i in range(len(chosen) - 1, -1, -1):
            if moved >= room:
                break
            other, units = chosen[i]
            if other in prefer or units == 0:
                continue
            take = min(units, room - moved)
            chosen[i] = (other, units - take)
            moved += take
        if moved:
            chosen.append((slot, moved))
            used.add(slot)
            moved_any = True
    if not moved_any:
        return placed
    nodes = tuple((slot, units) for slot, units in chosen if units)
    return PlacementResult(nodes, placed.max_units)


class FlavorAssigner:
    """Assigns flavors and nodes to a job in one ClusterQueue, against the cache."""

    def __init__(
        self,
        cache: ClusterCache,
        placement: PlacementPolicy,
        ignore_undeclared: bool,
        topology_single_nodes: bool = False,
    ) -> None:
        self.cache = cache
        self.topology_single_nodes = topology_single_nodes
        """Place pod sets one node holds through the Topology too (Slurm's topology/tree)."""
        self.placement = placement
        self.ignore_undeclared = ignore_undeclared
        self.generation = 0
        """Bumped on every allocation: an assignment from an older generation is re-checked."""
        self.simulating = False
        """Set while preemption removes victims for a trial: capacity grows, so failures
        must not be remembered or reused."""
        self._oracle: Oracle | None = None
        self._failed: dict[tuple[PodSetShape, str, tuple[str, ...]], PlacementResult] = {}
        self._shared: dict[tuple[object, ...], Assignment] = {}
        self._requested: dict[tuple[PodSetShape, GroupInfo], list[tuple[str, int]]] = {}
        self._plans: dict[
            tuple[PodSetShape, tuple[GroupInfo, ...]],
            tuple[tuple[GroupInfo, ...], GroupInfo | None, str | None],
        ] = {}
        self._domains: dict[str, DomainIndex] = {}
        """Per flavor with a Topology, its nodes' domains (rebuilt when they change)."""
        self.prefer: frozenset[NodeSlot] = frozenset()
        """Nodes the job being assigned holds (an expedited requeue): its units are
        moved onto them first, and nothing is remembered of the attempt."""

    def new_cycle(self) -> None:
        # Within a cycle capacity only shrinks, so a placement that failed stays failed.
        self._failed.clear()
        self._shared.clear()

    def assign_fresh(self, shape: JobShape, cq: ClusterQueueInfo) -> Assignment:
        """Like :meth:`assign`, against the current state, remembering nothing."""
        self.simulating = True
        try:
            return self._assign(shape, cq)
        finally:
            self.simulating = False

    def assign(
        self,
        shape: JobShape,
        cq: ClusterQueueInfo,
        oracle: Oracle | None = None,
        prefer: frozenset[NodeSlot] = frozenset(),
    ) -> Assignment:
        """Flavors and nodes for ``shape`` in ``cq``, or the record of why there are none.

        With an ``oracle`` (the queue may preempt), flavors short of quota get a
        preemption mode and ``whenCanPreempt`` / ``preference`` take effect. With
        ``prefer`` (the nodes an expedited job holds, opened for it), placement moves
        the job's units onto those nodes first (:func:`_prefer_nodes`)."""
        if prefer:
            self.prefer, self.simulating = prefer, True
            try:
                self._oracle = oracle
                return self._assign(shape, cq)
            finally:
                self.prefer, self.simulating, self._oracle = frozenset(), False, None
        node = cq.node
        if oracle is not None:
            self._oracle = oracle
            try:
                return self._assign(shape, cq)
            finally:
                self._oracle = None
        if not node.simple:
            return self._assign(shape, cq)
        # Without limits every queue of a tree sees the same quota, and within a cycle
        # quota and capacity only shrink: a failure in one queue is, for the rest of the
        # cycle, the failure in any queue of that tree with the same flavors.
        key = (node.top, shape, cq.groups, cq.model.flavor_fungibility)
        shared = self._shared.get(key)
        if shared is not None:
            return shared
        result = self._assign(shape, cq)
        if not result.ok:
            self._shared[key] = result
        return result

    def _assign(self, shape: JobShape, cq: ClusterQueueInfo) -> Assignment:
        usage: dict[FlavorResource, int] = {}
        overlay: Overlay = {}
        results: list[PodSetResult] = []
        borrow = 0
        last = len(shape.pod_sets) - 1
        for i, pod_set in enumerate(shape.pod_sets):
            result, pod_set_borrow = self._assign_pod_set(pod_set, cq, usage, overlay, i == last)
            results.append(result)
            if not result.ok:
                return Assignment(False, results, usage, borrow, self.generation)
            borrow = max(borrow, pod_set_borrow)
        return Assignment(True, results, usage, borrow, self.generation)

    def _plan(
        self, pod_set: PodSetShape, cq: ClusterQueueInfo
    ) -> tuple[tuple[GroupInfo, ...], GroupInfo | None, str | None]:
        """The groups a pod set needs, the placing one last, or the undeclared resource."""
        key = (pod_set, cq.groups)
        plan = self._plans.get(key)
        if plan is not None:
            return plan
        groups: list[GroupInfo] = []
        undeclared: str | None = None
        for resource, amount in pod_set.requests:
            if amount <= 0:
                continue
            group = cq.group_for.get(resource)
            if group is None:
                if not self.ignore_undeclared:
                    undeclared = resource
                    break
                continue
            if group not in groups:
                groups.append(group)
        pods = cq.group_for.get(PODS)
        if undeclared is None and pods is not None and pods not in groups:
            groups.append(pods)  # every pod counts one where a group covers pods (Kueue)
        placing = next((g for g in groups if GPU in g.covered), groups[0] if groups else None)
        if placing is None and cq.groups:
            # Nothing requested (or nothing with quota): no quota is charged, but the
            # tasks still need nodes; the first group's flavors say which.
            placing = cq.groups[0]
            groups.append(placing)
        # Non-placing groups first: their flavors' labels constrain the placing one's nodes.
        ordered = tuple(g for g in groups if g is not placing) + ((placing,) if placing else ())
        plan = (ordered, placing, undeclared)
        self._plans[key] = plan
        return plan

    def _assign_pod_set(
        self,
        pod_set: PodSetShape,
        cq: ClusterQueueInfo,
        usage: dict[FlavorResource, int],
        overlay: Overlay,
        last: bool,
    ) -> tuple[PodSetResult, int]:
        result = PodSetResult(pod_set)
        ordered, placing, undeclared = self._plan(pod_set, cq)
        if undeclared is not None:
            result.attempts.append(FlavorAttempt("", UNDECLARED, undeclared))
            result.ok = False
            return result, 0
        if placing is None:
            # Nothing requested that has quota: still needs a node to run on.
            result.attempts.append(FlavorAttempt("", UNDECLARED, "", 0))
            result.ok = False
            return result, 0
        chosen_flavors: list[ResourceFlavor] = []
        borrow = 0
        for group in ordered:
            picked = self._pick_flavor(
                pod_set, cq, group, group is placing, usage, overlay, chosen_flavors, result
            )
            if picked is None:
                result.ok = False
                return result, 0
            flavor_name, placement, group_borrow = picked
            borrow = max(borrow, group_borrow)
            chosen_flavors.append(self.cache.flavors[flavor_name])
            for resource in group.covered:
                total = pod_set.total(resource)
                if total:
                    fr = (flavor_name, resource)
                    usage[fr] = usage.get(fr, 0) + total
                    result.flavors[resource] = flavor_name
            if placement is not None:
                result.nodes, result.share_devices = placement
                if not last:
                    # Later pod sets of the job must see what this one takes.
                    prefer = result.share_devices or ()
                    for i, (slot, units) in enumerate(result.nodes):
                        add_to_overlay(
                            overlay, pod_set, slot, units, prefer[i] if i < len(prefer) else -1
                        )
        return result, borrow

    def _pick_flavor(
        self,
        pod_set: PodSetShape,
        cq: ClusterQueueInfo,
        group: GroupInfo,
        places: bool,
        usage: dict[FlavorResource, int],
        overlay: Overlay,
        chosen: list[ResourceFlavor],
        result: PodSetResult,
    ) -> tuple[str, Placed | None, int] | None:
        node = cq.node
        try_next_on_borrow = (
            cq.model.flavor_fungibility.when_can_borrow is WhenCanBorrow.TRY_NEXT_FLAVOR
        )
        best: tuple[int, str, Placed | None] | None = None
        requested = self._requested.get((pod_set, group))
        if requested is None:
            # GPUs first: the scarcest resource fails fastest and is the one worth naming.
            requested = sorted(
                ((r, pod_set.total(r)) for r in group.covered if pod_set.total(r) > 0),
                key=lambda item: item[0] != GPU,
            )
            self._requested[(pod_set, group)] = requested
        top = node.top if node.simple else None
        oracle = self._oracle
        stop_on_preempt = borrow_first = False
        if oracle is not None:
            fungibility = cq.model.flavor_fungibility
            stop_on_preempt = fungibility.when_can_preempt is WhenCanPreempt.MAY_STOP_SEARCH
            borrow_first = fungibility.preference is FungibilityPreference.PREEMPTION_OVER_BORROWING
        preempting: tuple[int, int, str] | None = None
        """``(mode, borrowing height, flavor)`` of the best flavor that needs preemption."""
        for flavor_name in group.flavors:
            flavor = self.cache.flavors[flavor_name]
            if not _flavor_matches(pod_set, flavor):
                result.attempts.append(FlavorAttempt(flavor_name, NO_MATCH))
                continue
            attempt: FlavorAttempt | None = None
            short: FlavorAttempt | None = None
            mode, mode_borrow = FIT_MODE, 0
            for resource, total in requested:
                fr = (flavor_name, resource)
                val = usage.get(fr, 0) + total
                if top is not None:
                    free = top.subtree.get(fr, 0) - top.usage.get(fr, 0)
                else:
                    free = available(node, fr)
                if val > free:
                    most = top.subtree.get(fr, 0) if top else potential_available(node, fr)
                    if val > most:
                        attempt = FlavorAttempt(flavor_name, MAX_QUOTA, resource, val, most)
                        break
                    quota_attempt = FlavorAttempt(flavor_name, QUOTA, resource, val, max(0, free))
                    simulated = oracle(fr, val) if oracle is not None else None
                    if simulated is None or simulated[0] == NO_CANDIDATES:
                        attempt = quota_attempt
                        break
                    short = short or quota_attempt
                    mode = min(mode, simulated[0])
                    mode_borrow = max(mode_borrow, simulated[1])
            if attempt is not None:
                result.attempts.append(attempt)
                continue
            if short is not None:
                # Fits once lower-priority work is preempted.
                result.attempts.append(short)
                if stop_on_preempt:
                    result.preempt_flavor = flavor_name
                    return None
                if preempting is None or _preferred(
                    (mode, mode_borrow), preempting[:2], borrow_first
                ):
                    preempting = (mode, mode_borrow, flavor_name)
                continue
            placement: Placed | None = None
            if places:
                placed = self._place(pod_set, flavor, chosen, overlay)
                if placed.nodes is None:
                    result.attempts.append(
                        FlavorAttempt(flavor_name, PLACEMENT, max_units=placed.max_units)
                    )
                    continue
                placement = (placed.nodes, placed.share_devices)
            borrow = 0
            for resource, total in requested:
                fr = (flavor_name, resource)
                borrow = max(borrow, node.borrowing_height(fr, usage.get(fr, 0) + total))
            result.attempts.append(FlavorAttempt(flavor_name, FIT, borrow=borrow))
            if preempting is None and (borrow == 0 or not try_next_on_borrow):
                return flavor_name, placement, borrow
            if best is None or borrow < best[0]:
                best = (borrow, flavor_name, placement)
            if borrow == 0 or not try_next_on_borrow:
                break
        if preempting is not None and (
            best is None or _preferred(preempting[:2], (FIT_MODE, best[0]), borrow_first)
        ):
            result.preempt_flavor = preempting[2]
            return None
        if best is not None:
            return best[1], best[2], best[0]
        return None

    def _place(
        self,
        pod_set: PodSetShape,
        flavor: ResourceFlavor,
        chosen: list[ResourceFlavor],
        overlay: Overlay,
    ) -> PlacementResult:
        index = self.cache.flavor_nodes[flavor.name]
        memo_key = (pod_set, flavor.name, tuple(f.name for f in chosen))
        memo = not overlay and not self.simulating
        if memo:
            failed = self._failed.get(memo_key)
            if failed is not None:
                return failed
        node_filter = self.cache.node_filters.get(
            pod_set, flavor, index.tainted > 0, tuple(chosen), _node_filter
        )
        domains = self.domain_index(flavor, index)
        if domains is not None and (
            pod_set.topology is not None
            or self.topology_single_nodes
            or domains.spans_nodes(pod_set, index.primary)
        ):
            # A request, or a gang over several nodes: within the topology (the held
            # nodes' domain first). A pod set that one node holds goes to the tightest
            # node, wherever it is.
            placed = place_in_topology(
                pod_set, index, domains, node_filter, overlay, memo_key, self.prefer
            )
        elif (
            domains is None
            and pod_set.topology is not None
            and (pod_set.topology[0] == "required" or pod_set.slice is not None)
        ):
            # A required topology (or slice) needs a flavor with one.
            placed = PlacementResult(None, 0)
        else:
            placed = self.placement.place(pod_set, index, node_filter, overlay)
            if self.prefer and placed.nodes is not None:
                placed = _prefer_nodes(placed, pod_set, self.prefer, node_filter, overlay)
        if not placed.ok and memo:
            self._failed[memo_key] = placed
        return placed

    def topology_level(
        self, pod_set: PodSetShape, flavor: ResourceFlavor
    ) -> tuple[DomainIndex, int, bool] | None:
        """Where :meth:`_place` keeps ``pod_set`` in ``flavor``'s Topology: the domain
        index, the level whose one domain should hold the whole pod set, and whether
        that is required; None when placement is not held to one domain (no Topology,
        ``unconstrained``, or a pod set one node holds). Backfill plans with it."""
        index = self.cache.flavor_nodes.get(flavor.name)
        if index is None:
            return None
        domains = self.domain_index(flavor, index)
        if domains is None:
            return None
        mode, label = pod_set.topology or ("", "")
        depth = len(domains.levels)
        lowest = depth - 2 if domains.levels[-1] == HOSTNAME_LABEL and depth > 1 else depth - 1
        if mode in ("required", "preferred"):
            level = domains.level_of(label)
            return (domains, level if level is not None else -1, mode == "required")
        if mode in ("unconstrained", "switches"):
            return None
        if self.topology_single_nodes or domains.spans_nodes(pod_set, index.primary):
            return (domains, lowest, False)
        return None

    def domain_index(self, flavor: ResourceFlavor, index: FlavorNodes) -> DomainIndex | None:
        """The domain index of ``flavor`` (None without a Topology), rebuilt when its
        nodes or Topology changed."""
        topology = self.cache.topologies.get(flavor.topology_name or "")
        if topology is None:
            return None
        found = self._domains.get(flavor.name)
        levels = tuple(level.node_label for level in topology.levels)
        if found is None or found.key != (id(index), index.membership, levels):
            found = self._domains[flavor.name] = DomainIndex.build(index, topology)
        return found

    def still_fits(self, assignment: Assignment, cq: ClusterQueueInfo) -> bool:
        """Whether an assignment made earlier in this cycle still holds after other admissions."""
        if assignment.generation == self.generation:
            return True
        node = cq.node
        for fr, amount in assignment.usage.items():
            if amount > available(node, fr):
                return False
        overlay: Overlay = {}
        for result in assignment.pod_sets:
            shape = result.shape
            unit = shape.unit_request()
            prefer = result.share_devices or ()
            for i, (slot, units) in enumerate(result.nodes):
                if not slot.schedulable:
                    return False
                if shape.exclusive:
                    if not slot.idle or slot in overlay:
                        return False
                    overlay[slot] = dict(slot.capacity)
                    continue
                if slot.fit_units(unit, overlay.get(slot), shape.share) < units:
                    return False
                add_to_overlay(overlay, shape, slot, units, prefer[i] if i < len(prefer) else -1)
        return True
