"""Backfill: reservations for blocked jobs and start-time estimates.

Slurm's ``sched/backfill`` in the engine's terms. Every ``bf_interval`` the
engine runs a backfill *pass* over the jobs that could not start, in priority
order: for each, :func:`plan_nodes` finds the earliest time its whole gang fits:
it takes the running jobs in the order their time limits end them, frees their
capacity one end after another, until the gang's units are there or the window
(``bf_window``) is passed; :func:`plan_quota` does the same for quota. The job
then gets a :class:`Reservation`: the nodes of that plan are *held* for it, whole
(as Slurm does), and its quota is held in its ClusterQueue. Jobs later in the
pass plan around what the earlier ones hold.

A held node looks full to every other job, so nothing that starts now can
delay the reservation, except a job that ends before the reservation starts
(``now + time_limit <= start``): that is backfill, and only such jobs may use
held nodes. Nodes that are not held are free for anyone, since the reserved
job does not need them. What a held node frees while it is held (a job on it
ends) is absorbed into the hold.

Jobs without a time limit never end in the plan: nodes they run on are never
planned free, and they never backfill onto held nodes.

A pod set that placement keeps within one domain of its flavor's Topology (a
``required`` or ``preferred`` level, or phalanx's default for a gang over nodes)
is planned the same way (:func:`plan_in_domains`): in the domain where it fits
soonest, so that the reservation holds nodes it can actually start on. Topology
slices are planned as their whole pod set is, without their slices.

The :class:`Timeline` (when each running job ends, per flavor, sorted) is kept
up to date as jobs start and end, so a pass does not rebuild it.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from phalanx.engine.cache.capacity import FlavorNodes, NodeSlot
from phalanx.engine.cache.cluster import ClusterCache, ClusterQueueInfo
from phalanx.engine.cache.quota import FlavorResource, available, potential_available
from phalanx.engine.queueing.shapes import PodSetShape
from phalanx.model import GPU

if TYPE_CHECKING:
    from phalanx.engine.placement.topology import DomainIndex
    from phalanx.engine.state import Admission, JobRecord

__all__ = [
    "Holds",
    "QuotaEnds",
    "Reservation",
    "Timeline",
    "plan_in_domains",
    "plan_nodes",
    "plan_quota",
    "planned_end",
    "round_up",
]

Release = tuple[float, int, NodeSlot, dict[str, int]]
"""``(end, n, node, what it gives back)``: one job's share of one node."""


@dataclass(frozen=True, slots=True)
class Reservation:
    """Nodes (and quota) held for ``job_id`` from now until it starts, planned at ``start``.

    ``needs`` is the quota the job takes when it starts; ``quota`` the part of it held
    now: what the running jobs of its quota tree do not give back by ``start``."""

    job_id: int
    cluster_queue: str
    start: float
    nodes: tuple[str, ...]
    quota: tuple[tuple[FlavorResource, int], ...] = ()
    needs: tuple[tuple[FlavorResource, int], ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {
            "job_id": self.job_id,
            "cluster_queue": self.cluster_queue,
            "start": self.start,
            "nodes": list(self.nodes),
        }


def planned_end(time_limit: float | None, adm: Admission) -> float:
    """When an admitted job ends in the plan: its admission time plus its time limit
    (inf without one; -inf, i.e. now, while it is being evicted)."""
    if adm.evicting:
        return -math.inf
    if time_limit is not None:
        return adm.admitted_at + time_limit
    return math.inf


def round_up(t: float, resolution: float) -> float:
    """``t`` rounded up to a multiple of ``resolution`` (Slurm's bf_resolution)."""
    return math.ceil(t / resolution - 1e-9) * resolution


@dataclass(slots=True)
class Holds:
    """Whole nodes held for reservations: each held node's free capacity is used up by
    the hold, so the capacity index shows it full."""

    owner: dict[NodeSlot, int] = field(default_factory=dict)
    amounts: dict[NodeSlot, dict[str, int]] = field(default_factory=dict)
    roomy: dict[int, dict[NodeSlot, None]] = field(default_factory=dict)
    """Per reservation, its held nodes that had free capacity to hold: the only ones a
    backfilled job can use."""
    most_gpus: dict[int, int] = field(default_factory=dict)
    """Per reservation, the most free GPUs one of its held nodes has (absent: none)."""

    def hold(self, slot: NodeSlot, job_id: int) -> bool:
        """Hold ``slot`` for ``job_id``; True when that took free capacity (the capacity
        index must see the node again)."""
        capacity, used = slot.capacity, slot.used
        free = {r: c - used.get(r, 0) for r, c in capacity.items() if c > used.get(r, 0)}
        if free:
            slot.allocate(free)
            self.roomy.setdefault(job_id, {})[slot] = None
            gpus = free.get(GPU, 0)
            if gpus > self.most_gpus.get(job_id, 0):
                self.most_gpus[job_id] = gpus
        self.owner[slot] = job_id
        self.amounts[slot] = free
        return bool(free)

    def unhold(self, slot: NodeSlot) -> bool:
        """Give ``slot`` back; True when that freed capacity (as :meth:`hold`)."""
        job_id = self.owner.pop(slot, None)
        amounts = self.amounts.pop(slot, None)
        if not amounts:
            return False
        slot.release(amounts)
        roomy = self.roomy.get(job_id)  # type: ignore[arg-type]
        if roomy is not None:
            roomy.pop(slot, None)
            if not roomy:
                del self.roomy[job_id]  # type: ignore[arg-type]
                self.most_gpus.pop(job_id, None)  # type: ignore[arg-type]
            elif amounts.get(GPU, 0) >= self.most_gpus.get(job_id, 0):  # type: ignore[arg-type]
                # It may have been the roomiest: the most of the others.
                most = max(self.amounts[other].get(GPU, 0) for other in roomy)
                if most > 0:
                    self.most_gpus[job_id] = most  # type: ignore[index]
                else:
                    self.most_gpus.pop(job_id, None)  # type: ignore[arg-type]
        return True

    def absorb(self, slot: NodeSlot) -> None:
        """Take what ``slot`` freed into its hold."""
        job_id = self.owner.get(slot)
        if job_id is not None:
            self.unhold(slot)
            self.hold(slot, job_id)


class Timeline:
    """When each node will be free, from the running jobs' time limits: the plan a
    backfill pass works from.

    A node offers a pod set what fits in its free capacity now, then more as each
    job on it ends (a job without a time limit never does; a job being evicted
    ends now). The ends are kept sorted per flavor and per node, and updated as jobs
    start and end; ends are the jobs' own (admission time plus limit), so a job past
    its limit ends "before now" and counts as ending now.
    """

    def __init__(self, admitted: Iterable[JobRecord]) -> None:
        self.free_at: dict[NodeSlot, float] = {}
        """When the last job on each busy node ends."""
        self.gpus_free_at: dict[NodeSlot, float] = {}
        """When the last job using GPUs on each node ends."""
        self._count = 0
        self._ends: dict[str, list[Release]] = {}
        self._on_slot: dict[NodeSlot, list[Release]] = {}
        self._by_job: dict[int, list[Release]] = {}
        self._orders: dict[tuple[str, int], NodeOrder] = {}
        self._full: dict[str, _FullOrder] = {}
        """Per flavor: its nodes sorted by ``gpus_free_at`` (then their order in the
        flavor), kept up to date as jobs start and end, so an order of whole nodes is a
        copy rather than a sort (see :meth:`by_free_gpus`)."""
        self._most_gpus: dict[str, int] = {}
        self.skip: dict[str, int] = {}
        """How many of the soonest ends of a flavor are on nodes closed for the rest of
        the pass (see :func:`plan_nodes`); cleared by :meth:`new_pass`."""
        for rec in admitted:
            self._add(rec, sort=False)
        for ends in self._ends.values():
            ends.sort()

    def new_pass(self) -> None:
        """Nodes closed so far may open again; nodes are sorted again when needed."""
        self.skip.clear()
        self._orders.clear()

    def started(self, rec: JobRecord) -> None:
        """A job now holds nodes: they are free no earlier than its end."""
        self._add(rec, sort=True)

    def ended(self, rec: JobRecord) -> None:
        """A job gave its nodes back."""
        for entry in self._by_job.pop(rec.id, ()):
            end, n, slot, _ = entry
            on_slot = self._on_slot[slot]
            on_slot.remove(entry)
            self._node_changed(slot, on_slot)
            if end == math.inf:
                self._reordered(slot)
            else:
                for index in slot.flavors:
                    self._moved(index.name)
                    flavor_ends = self._ends.get(index.name)
                    if flavor_ends is None:
                        continue
                    i = bisect.bisect_left(flavor_ends, (end, n))
                    if i < len(flavor_ends) and flavor_ends[i][1] == n:
                        del flavor_ends[i]

    def _moved(self, flavor: str) -> None:
        """The flavor's ends changed: what was derived from them for the pass is not."""
        self.skip.pop(flavor, None)
        self._drop_orders(flavor)

    def _reordered(self, slot: NodeSlot) -> None:
        """A job without an end started or ended on ``slot``: the flavors' ends are the
        same, but when the node's GPUs are free is not, and an order's times are read as
        exact (:func:`_plan_first_units`)."""
        for index in slot.flavors:
            self._drop_orders(index.name)

    def _drop_orders(self, flavor: str) -> None:
        if self._orders:
            for key in [k for k in self._orders if k[0] == flavor]:
                del self._orders[key]

    def _node_changed(self, slot: NodeSlot, on_slot: list[Release]) -> None:
        if not on_slot:
            del self._on_slot[slot]
            self.free_at.pop(slot, None)
            self._gpus_free(slot, None)
            return
        self.free_at[slot] = max(e[0] for e in on_slot)
        gpu_ends = [e[0] for e in on_slot if e[3].get(GPU, 0) > 0]
        self._gpus_free(slot, max(gpu_ends) if gpu_ends else None)

    def _gpus_free(self, slot: NodeSlot, at: float | None) -> None:
        """Set (None: drop) when the last GPU job on ``slot`` ends, and move the node in
        the sorted orders of its flavors."""
        old = self.gpus_free_at.get(slot, -math.inf)
        if at is None:
            self.gpus_free_at.pop(slot, None)
            at = -math.inf
        else:
            self.gpus_free_at[slot] = at
        if old == at or not self._full:
            return
        for index in slot.flavors:
            full = self._full.get(index.name)
            if full is not None:
                full.move(slot, old, at)

    def _add(self, rec: JobRecord, sort: bool) -> None:
        adm = rec.admission
        if adm is None:
            return
        end = planned_end(rec.job.time_limit, adm)
        mine: list[Release] = []
        for slot, amounts, exclusive, _ in adm.allocations:
            given = dict(slot.capacity) if exclusive else amounts
            entry = (end, self._count, slot, given)
            self._count += 1
            mine.append(entry)
            self._on_slot.setdefault(slot, []).append(entry)
            if end > self.free_at.get(slot, -math.inf):
                self.free_at[slot] = end
            if given.get(GPU, 0) > 0 and end > self.gpus_free_at.get(slot, -math.inf):
                self._gpus_free(slot, end)
            if end == math.inf:
                self._reordered(slot)
            else:
                for index in slot.flavors:
                    self._moved(index.name)
                    ends = self._ends.setdefault(index.name, [])
                    if sort:
                        bisect.insort(ends, entry)
                    else:
                        ends.append(entry)
        self._by_job[rec.id] = mine

    def releases(self, flavor: str) -> list[Release]:
        """The ends of the jobs on the flavor's nodes, soonest first."""
        return self._ends.get(flavor, [])

    def on(self, slot: NodeSlot) -> list[Release]:
        """The ends of the jobs on ``slot``, in no order."""
        return self._on_slot.get(slot, [])

    def most_gpus(self, index: FlavorNodes) -> int:
        """The most GPUs a node of the flavor has."""
        most = self._most_gpus.get(index.name)
        if most is None:
            most = max((slot.capacity.get(GPU, 0) for slot in index.members), default=0)
            self._most_gpus[index.name] = most
        return most

    def by_free_gpus(self, index: FlavorNodes, gpus: int) -> NodeOrder:
        """The flavor's nodes in the order they first have ``gpus`` free GPUs, for this
        pass (see :class:`NodeOrder`)."""
        key = (index.name, gpus)
        order = self._orders.get(key)
        if order is None:
            if gpus >= self.most_gpus(index):
                # Every GPU of a node: when its last GPU job ends. The flavor's nodes are
                # kept in that order; the order is a copy of it as it is now, produced
                # as far as a plan reads.
                full = self._full.get(index.name)
                if full is None or full.membership != index.membership:
                    full = self._full[index.name] = _FullOrder(index, self.gpus_free_at)
                order = NodeOrder(_whole_nodes(full.entries.copy(), gpus))
            else:
                order = NodeOrder(self._free_gpus(index, gpus))
            self._orders[key] = order
        return order

    def _free_gpus(self, index: FlavorNodes, gpus: int) -> Iterator[tuple[float, NodeSlot]]:
        # Nodes with the GPUs free now first, then as the ends give GPUs back. A node
        # held when this runs is reached late or never: it is closed for the pass.
        seen: set[NodeSlot] = set()
        for slot in list(index.candidates_descending(gpus)):
            seen.add(slot)
            yield -math.inf, slot
        free: dict[NodeSlot, int] = {}
        for at, _, slot, given in self.releases(index.name):
            if slot in seen:
                continue
            back = given.get(GPU, 0)
            if not back:
                continue
            now_free = free.get(slot)
            if now_free is None:
                now_free = slot.capacity.get(GPU, 0) - slot.used.get(GPU, 0)
            now_free += back
            if now_free >= gpus:
                seen.add(slot)
                yield at, slot
            else:
                free[slot] = now_free

    def first_fit(
        self,
        slot: NodeSlot,
        unit: tuple[tuple[str, int], ...],
        after: float,
        gpus_free: bool = False,
    ) -> float:
        """The earliest time from ``after`` on that one ``unit`` fits on ``slot`` as its
        jobs end (inf: never). ``gpus_free``: the unit's GPUs are known to be free on
        the node at ``after`` (its place in a :class:`NodeOrder`)."""
        capacity, used = slot.capacity, slot.used
        if after >= self.free_at.get(slot, -math.inf):
            # Every job on the node has ended by then: the whole node is free.
            for r, a in unit:
                if capacity.get(r, 0) < a:
                    return math.inf
            return after
        if gpus_free:
            # What else the unit asks for is free already: it fits at ``after``.
            for r, a in unit:
                if r != GPU and capacity.get(r, 0) - used.get(r, 0) < a:
                    break
            else:
                return after
        free = [capacity.get(r, 0) - used.get(r, 0) for r, _ in unit]
        later: list[Release] = []
        for entry in self._on_slot.get(slot, ()):
            if entry[0] <= after:
                given = entry[3]
                for k, (r, _) in enumerate(unit):
                    free[k] += given.get(r, 0)
            else:
                later.append(entry)
        if _fits(free, unit):
            return after
        later.sort(key=_end)
        for entry in later:
            at = entry[0]
            if at == math.inf:
                break
            given = entry[3]
            for k, (r, _) in enumerate(unit):
                free[k] += given.get(r, 0)
            if _fits(free, unit):
                # Every job ending at the same time is in by then as well.
                return at
        return math.inf


class _FullOrder:
    """A flavor's nodes as ``(gpus_free_at, position in the flavor, node)``, sorted: the
    order ``sorted(..., key=when)`` of the flavor's nodes gives, kept by moving one node
    at a time."""

    __slots__ = ("entries", "membership", "position")

    def __init__(self, index: FlavorNodes, at: Mapping[NodeSlot, float]) -> None:
        self.membership = index.membership
        self.position = {slot: i for i, slot in enumerate(index.members)}
        self.entries = sorted(
            (at.get(slot, -math.inf), i, slot) for slot, i in self.position.items()
        )

    def move(self, slot: NodeSlot, old: float, new: float) -> None:
        i = self.position.get(slot)
        if i is None:
            return
        entries = self.entries
        k = bisect.bisect_left(entries, (old, i))
        del entries[k]
        bisect.insort(entries, (new, i, slot))


def _whole_nodes(
    entries: list[tuple[float, int, NodeSlot]], gpus: int
) -> Iterator[tuple[float, NodeSlot]]:
    for at, _, slot in entries:
        if slot.capacity.get(GPU, 0) >= gpus:
            yield at, slot


def _end(entry: Release) -> float:
    return entry[0]


def _fits(free: list[int], unit: tuple[tuple[str, int], ...]) -> bool:
    # A plain loop: this is the planner's innermost check, a generator costs more.
    for k, (_, amount) in enumerate(unit):  # noqa: SIM110
        if free[k] < amount:
            return False
    return True


class NodeOrder:
    """Nodes with the time each first has a unit's GPUs free, soonest first: produced
    as far as a plan needs, and kept for the rest of the pass while the jobs on the
    flavor's nodes stay as they are (a job starting or ending there, with an end or
    without, drops it: plans read its times as exact); a node closed for the pass is
    dropped when met."""

    def __init__(self, source: Iterator[tuple[float, NodeSlot]] | None) -> None:
        self.items: list[tuple[float, NodeSlot]] = []
        self._source: Iterator[tuple[float, NodeSlot]] | None = source

    def get(self, i: int) -> tuple[float, NodeSlot] | None:
        items = self.items
        while i >= len(items):
            if self._source is None:
                return None
            nxt = next(self._source, None)
            if nxt is None:
                self._source = None
                return None
            items.append(nxt)
        return items[i]


def plan_nodes(
    pod_set: PodSetShape,
    flavor: str,
    cache: ClusterCache,
    timeline: Timeline,
    now: float,
    closed: Callable[[NodeSlot], bool],
    taken: set[NodeSlot],
    accept: Callable[[NodeSlot], bool] | None,
    before: float = math.inf,
) -> tuple[float, list[NodeSlot]] | None:
    """The earliest time ``pod_set`` has all its units on nodes of ``flavor`` (not
    ``closed`` by a reservation, not ``taken`` by the job's other pod sets), and those
    nodes; None if not before ``before``. A node once ``closed`` must stay closed until
    the timeline's :meth:`~Timeline.new_pass`: the soonest ends on closed nodes are
    skipped from then on without being looked at.

    What fits in the nodes' free capacity counts now; what each job end gives back
    counts from then. Only nodes with room for a unit now and the ends walked in order
    are looked at, not the whole flavor."""
    need = pod_set.units
    index = cache.flavor_nodes[flavor]
    if before <= now:
        return None
    unit = tuple((r, a) for r, a in pod_set.unit_request().items() if a > 0)
    most = 1 if pod_set.one_unit_per_node else 1 << 30
    exclusive = pod_set.exclusive
    gpus = pod_set.unit_request().get(GPU, 0)
    if (
        gpus > 0
        and not exclusive
        and (need == 1 or most == 1 or 2 * gpus > timeline.most_gpus(index))
    ):
        order = timeline.by_free_gpus(index, gpus)
        return _plan_first_units(need, unit, order, timeline, now, closed, taken, accept, before)

    def units(slot: NodeSlot, extra: Mapping[str, int] | None) -> int:
        best = most
        capacity, used = slot.capacity, slot.used
        for resource, amount in unit:
            free = capacity.get(resource, 0) - used.get(resource, 0)
            if extra:
                free += extra.get(resource, 0)
            n = free // amount if free > 0 else 0
            if n < best:
                best = n
                if n == 0:
                    return 0
        return best

    def whole(slot: NodeSlot) -> int:
        best = most
        for resource, amount in unit:
            best = min(best, slot.capacity.get(resource, 0) // amount)
        return best

    ok: dict[NodeSlot, bool] = {}

    def usable(slot: NodeSlot) -> bool:
        verdict = ok.get(slot)
        if verdict is None:
            verdict = ok[slot] = (
                not closed(slot)
                and slot not in taken
                and slot.schedulable
                and (accept is None or accept(slot))
            )
        return verdict

    # Nodes with room for a unit now: the buckets of at least one unit's worth of the
    # flavor's bucketed resource (all nodes if the pod set does not ask for it), the
    # roomiest first so a gang is complete soonest.
    amount = pod_set.request(index.primary)
    free_now: Iterable[NodeSlot] = (
        index.candidates_descending(amount // index.scale) if amount > 0 else index.members
    )
    chosen: dict[NodeSlot, int] = {}
    got = 0
    for slot in free_now:
        if not usable(slot):
            continue
        n = (whole(slot) if slot.idle else 0) if exclusive else units(slot, None)
        if n:
            chosen[slot] = n
            got += n
            if got >= need:
                return now, list(chosen)
    # Then the nodes as their jobs end, soonest first: what each end gives back joins
    # what was free (an exclusive pod set needs the node's last job gone).
    freed: dict[NodeSlot, dict[str, int]] = {}
    free_at = timeline.free_at
    releases = timeline.releases(flavor)
    first = timeline.skip.get(flavor, 0)
    while first < len(releases) and closed(releases[first][2]):
        first += 1
    timeline.skip[flavor] = first
    for at, _, slot, given in itertools.islice(releases, first, None):
        if at >= before:
            return None
        if not usable(slot):
            continue
        if exclusive:
            if at < free_at.get(slot, at):
                continue
            n = whole(slot)
        else:
            extra = freed.get(slot)
            if extra is None:
                extra = freed[slot] = {}
            for r, a in given.items():
                extra[r] = extra.get(r, 0) + a
            n = units(slot, extra)
        more = n - chosen.get(slot, 0)
        if more <= 0:
            continue
        chosen[slot] = n
        got += more
        if got >= need:
            return max(now, at), list(chosen)
    return None


def plan_in_domains(
    pod_set: PodSetShape,
    flavor: str,
    cache: ClusterCache,
    timeline: Timeline,
    now: float,
    closed: Callable[[NodeSlot], bool],
    taken: set[NodeSlot],
    accept: Callable[[NodeSlot], bool] | None,
    before: float,
    domains: DomainIndex,
    level: int,
    required: bool,
) -> tuple[float, list[NodeSlot]] | None:
    """:func:`plan_nodes` held to the Topology as placement will hold the pod set: all
    its nodes within one domain of ``level``, the domain where it fits soonest. Not
    ``required`` (``preferred``, phalanx's default), it may climb a level at a time
    and at last go anywhere, as placement does; ``required`` and nowhere: None."""
    paths = domains.paths
    if level < 0:
        return None
    # The plan anywhere starts no later than any plan in one domain: when its nodes
    # happen to share a domain, it is the plan.
    anywhere = plan_nodes(pod_set, flavor, cache, timeline, now, closed, taken, accept, before)
    if anywhere is None:
        return None
    if len({paths.get(slot, ())[: level + 1] for slot in anywhere[1]}) == 1 and all(
        slot in paths for slot in anywhere[1]
    ):
        return anywhere
    for k in range(level, -1, -1):
        groups: dict[tuple[str, ...], int] = {}
        for slot in paths:
            if slot.schedulable and not closed(slot) and slot not in taken:
                key = paths[slot][: k + 1]
                groups[key] = groups.get(key, 0) + 1
        best: tuple[float, list[NodeSlot]] | None = None
        most = 1 if pod_set.one_unit_per_node else 1 << 30
        for domain, count in sorted(groups.items()):
            if count * most < pod_set.units:
                continue  # too few nodes there, however free

            def within(slot: NodeSlot, domain: tuple[str, ...] = domain, k: int = k) -> bool:
                path = paths.get(slot)
                return (
                    path is not None
                    and path[: k + 1] == domain
                    and (accept is None or accept(slot))
                )

            cutoff = min(before, best[0]) if best is not None else before
            found = plan_nodes(pod_set, flavor, cache, timeline, now, closed, taken, within, cutoff)
            if found is not None and (best is None or found[0] < best[0]):
                best = found
                if found[0] <= now:
                    break
        if best is not None or required:
            return best
    return anywhere


def _plan_first_units(
    need: int,
    unit: tuple[tuple[str, int], ...],
    order: NodeOrder,
    timeline: Timeline,
    now: float,
    closed: Callable[[NodeSlot], bool],
    taken: set[NodeSlot],
    accept: Callable[[NodeSlot], bool] | None,
    before: float,
) -> tuple[float, list[NodeSlot]] | None:
    """:func:`plan_nodes` where only the first unit of each node counts (one unit
    wanted, or at most one per node): the ``need`` nodes whose first unit fits
    soonest. Nodes come in the order they first have the unit's GPUs free; each is
    taken at the exact time its unit fits (later when other resources are still busy
    then), merged through a heap: a 64-node gang looks at about 64 nodes. A gang that
    starts later than now gets the nodes that fit last by then (:func:`_latest_by`)."""
    later: list[tuple[float, int, NodeSlot]] = []
    chosen: list[NodeSlot] = []

    def usable(slot: NodeSlot) -> bool:
        return (
            not closed(slot)
            and slot not in taken
            and slot.schedulable
            and (accept is None or accept(slot))
        )

    items = order.items
    i = 0
    while (item := items[i] if i < len(items) else order.get(i)) is not None:
        low, slot = item
        if closed(slot):
            # Closed for the rest of the pass: out of the order for good.
            del items[i]
            continue
        i += 1
        while later and later[0][0] <= low:
            at, _, pick = heapq.heappop(later)
            chosen.append(pick)
            if len(chosen) >= need:
                return _latest_by(max(now, at), need, unit, order, timeline, now, chosen, usable)
        if low >= before:
            break
        if not usable(slot):
            continue
        at = timeline.first_fit(slot, unit, low, gpus_free=True)
        if at == math.inf:
            continue
        if at <= low:
            chosen.append(slot)
            if len(chosen) >= need:
                return _latest_by(max(now, at), need, unit, order, timeline, now, chosen, usable)
        else:
            heapq.heappush(later, (at, i, slot))
    while later:
        at, _, pick = heapq.heappop(later)
        if at >= before:
            return None
        chosen.append(pick)
        if len(chosen) >= need:
            return _latest_by(max(now, at), need, unit, order, timeline, now, chosen, usable)
    return None


def _latest_by(
    start: float,
    need: int,
    unit: tuple[tuple[str, int], ...],
    order: NodeOrder,
    timeline: Timeline,
    now: float,
    soonest: list[NodeSlot],
    usable: Callable[[NodeSlot], bool],
) -> tuple[float, list[NodeSlot]]:
    """Of the nodes whose first unit fits by ``start``, the ``need`` that fit last.

    A reservation keeps everything but short jobs off its nodes until it starts, so
    the nodes it holds should be the ones busy longest anyway: those free sooner are
    left to any job, and the gang still starts at ``start``. Now (nothing held) or one
    node (the soonest is the only choice): ``soonest`` as it is. The order's nodes
    come by a lower bound on when they fit, so the walk stops past ``start``."""
    if start <= now or need <= 1:
        return start, soonest
    fits: list[tuple[float, int, NodeSlot]] = []
    i = 0
    items = order.items
    while (item := items[i] if i < len(items) else order.get(i)) is not None:
        low, slot = item
        i += 1
        if low > start:
            break
        if not usable(slot):
            continue
        at = timeline.first_fit(slot, unit, low, gpus_free=True)
        if at <= start:
            fits.append((-at, i, slot))
    if len(fits) < need:  # nodes closed since (only fewer): keep the plan's own
        return start, soonest
    return start, [slot for _, _, slot in heapq.nsmallest(need, fits)]


class QuotaEnds:
    """When the running jobs of a quota tree give back each flavor-resource: the
    amounts summed in the order the jobs end, as far as a plan has asked (each
    pass's plans of one tree share the sums)."""

    def __init__(self, ends: Sequence[tuple[float, Mapping[FlavorResource, int], str]]) -> None:
        self.ends = ends
        self._sums: dict[FlavorResource, tuple[list[float], list[int], list[int]]] = {}

    def reached(self, fr: FlavorResource, amount: int) -> float | None:
        """The earliest end by which ``amount`` of ``fr`` is given back; None: never."""
        times, totals = self._walk(fr, amount, math.inf)
        if not totals or totals[-1] < amount:
            return None
        return times[bisect.bisect_left(totals, amount)]

    def returned(self, fr: FlavorResource, by: float, enough: int) -> int:
        """How much of ``fr`` is given back by time ``by`` (counted up to ``enough``)."""
        times, totals = self._walk(fr, enough, by)
        k = bisect.bisect_right(times, by)
        return totals[k - 1] if k else 0

    def _walk(self, fr: FlavorResource, amount: int, by: float) -> tuple[list[float], list[int]]:
        """The running sums of ``fr``, extended until they reach ``amount`` or the ends
        pass ``by``."""
        sums = self._sums.get(fr)
        if sums is None:
            sums = self._sums[fr] = ([], [], [0])
        times, totals, walked = sums
        total = totals[-1] if totals else 0
        ends, i = self.ends, walked[0]
        while i < len(ends) and total < amount and ends[i][0] <= by:
            end, usage, _ = ends[i]
            i += 1
            back = usage.get(fr, 0)
            if back:
                total += back
                times.append(end)
                totals.append(total)
        walked[0] = i
        return times, totals


def plan_quota(
    needs: Mapping[FlavorResource, int],
    info: ClusterQueueInfo,
    ends: QuotaEnds,
    now: float,
) -> float | None:
    """The earliest time the quota ``needs`` is available in ``info``: now, or when
    enough of the usage of the jobs in its tree is given back as they end; None when
    it never is."""
    start = now
    for fr, n in needs.items():
        short = n - available(info.node, fr)
        if short <= 0:
            continue
        if n > potential_available(info.node, fr):
            return None
        at = ends.reached(fr, short)
        if at is None:
            return None
        start = max(start, at)
    return start
