"""Backfill: reservations for blocked jobs and start-time estimates.

Slurm's ``sched/backfill`` in the engine's terms. When a job whose quota fits
cannot be placed because nodes are busy, :func:`plan_start` finds the earliest
time its whole gang fits: it takes the running jobs in the order their time
limits end them (rounded up to ``bf_resolution``), frees their nodes one end
time after another on the engine's own capacity index, and asks the flavor
assigner for a placement after each step, until one exists or the window
(``bf_window``) is passed. The job then gets a :class:`Reservation`: the nodes
of that placement are *held* for it, whole (as Slurm does), and its quota is
held in its ClusterQueue.

A held node looks full to every other job, so nothing that starts now can
delay the reservation, except a job that ends before the reservation starts
(``now + time_limit <= start``): that is backfill, and only such jobs may use
held nodes. Nodes that are not held are free for anyone, since the reserved
job does not need them. What a held node frees while it is held (a job on it
ends) is absorbed into the hold.

Jobs without a time limit never end in the plan: nodes they run on are never
planned free, and they never backfill onto held nodes.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from phalanx.engine.cache import ClusterCache, ClusterQueueInfo
from phalanx.engine.capacity import NodeSlot
from phalanx.engine.quota import FlavorResource, available, potential_available
from phalanx.engine.shapes import PodSetShape

if TYPE_CHECKING:
    from phalanx.engine.state import JobRecord

__all__ = ["Holds", "Reservation", "Timeline", "plan_nodes", "plan_quota", "round_up"]


@dataclass(frozen=True, slots=True)
class Reservation:
    """Nodes (and quota) held for ``job_id`` from now until it starts, planned at ``start``."""

    job_id: int
    cluster_queue: str
    start: float
    nodes: tuple[str, ...]
    quota: tuple[tuple[FlavorResource, int], ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {
            "job_id": self.job_id,
            "cluster_queue": self.cluster_queue,
            "start": self.start,
            "nodes": list(self.nodes),
        }


def round_up(t: float, resolution: float) -> float:
    """``t`` rounded up to a multiple of ``resolution`` (Slurm's bf_resolution)."""
    return math.ceil(t / resolution - 1e-9) * resolution


@dataclass(slots=True)
class Holds:
    """Whole nodes held for reservations: each held node's free capacity is used up by
    the hold, so the capacity index shows it full."""

    owner: dict[NodeSlot, int] = field(default_factory=dict)
    amounts: dict[NodeSlot, dict[str, int]] = field(default_factory=dict)

    def hold(self, slot: NodeSlot, job_id: int) -> None:
        free = {r: slot.free(r) for r in slot.capacity if slot.free(r) > 0}
        slot.allocate(free)
        self.owner[slot] = job_id
        self.amounts[slot] = free

    def unhold(self, slot: NodeSlot) -> int | None:
        job_id = self.owner.pop(slot, None)
        amounts = self.amounts.pop(slot, None)
        if amounts:
            slot.release(amounts)
        return job_id

    def absorb(self, slot: NodeSlot) -> None:
        """Take what ``slot`` freed into its hold."""
        job_id = self.unhold(slot)
        if job_id is not None:
            self.hold(slot, job_id)


class Timeline:
    """When each node will be free, from the running jobs' time limits, and what a
    pod set can get over time: the plan a backfill pass works from.

    A node offers a pod set what fits in its free capacity now, then more as each
    job on it ends (a job without a time limit never does). The ends are kept sorted
    per flavor, built once per pass and rebuilt only where a job starts during it.
    """

    def __init__(
        self,
        cache: ClusterCache,
        admitted: Iterable[JobRecord],
        now: float,
        holds: Holds | None = None,
    ) -> None:
        self.cache = cache
        self.holds = holds
        self.now = now
        self.free_at: dict[NodeSlot, float] = {}
        """When the last job on each busy node ends."""
        self._count = 0
        self._ends: dict[str, list[tuple[float, int, NodeSlot, dict[str, int]]]] = {}
        self._unsorted: set[str] = set()
        for rec in admitted:
            self.started(rec)

    def started(self, rec: JobRecord) -> None:
        """A job now holds nodes: they are free no earlier than its end."""
        adm = rec.admission
        if adm is None:
            return
        if adm.evicting:
            end = self.now
        elif rec.job.time_limit is not None:
            end = max(self.now, adm.admitted_at + rec.job.time_limit)
        else:
            end = math.inf
        for slot, amounts, exclusive in adm.allocations:
            if end > self.free_at.get(slot, -math.inf):
                self.free_at[slot] = end
            if end < math.inf and slot.schedulable:
                given = dict(slot.capacity) if exclusive else amounts
                entry = (end, self._count, slot, given)
                self._count += 1
                for index in slot.flavors:
                    ends = self._ends.setdefault(index.name, [])
                    if index.name in self._unsorted or not ends:
                        ends.append(entry)
                        self._unsorted.add(index.name)
                    else:
                        bisect.insort(ends, entry)

    def releases(self, flavor: str) -> list[tuple[float, int, NodeSlot, dict[str, int]]]:
        """``(end, n, node, what it gives back)`` of the jobs on the flavor's nodes,
        soonest first."""
        ends = self._ends.get(flavor, [])
        if flavor in self._unsorted:
            ends.sort()
            self._unsorted.discard(flavor)
        return ends


def plan_nodes(
    pod_set: PodSetShape,
    flavor: str,
    timeline: Timeline,
    closed: Callable[[NodeSlot], bool],
    taken: set[NodeSlot],
    accept: Callable[[NodeSlot], bool] | None,
    before: float = math.inf,
) -> tuple[float, list[NodeSlot]] | None:
    """The earliest time ``pod_set`` has all its units on nodes of ``flavor`` (not
    ``closed`` by a reservation that comes first, not ``taken`` by the job's other pod
    sets), and those nodes; None if not before ``before``. A node held for a
    reservation that does not come first counts with its capacity as it would be
    without the hold.

    What fits in the nodes' free capacity counts now; what each job end gives back
    counts from then. Only nodes with free capacity and the ends walked in order are
    looked at, not the whole flavor."""
    need = pod_set.units
    now = timeline.now
    index = timeline.cache.flavor_nodes[flavor]
    unit = [(r, a) for r, a in pod_set.unit_request().items() if a > 0]
    most = 1 if pod_set.one_unit_per_node else 1 << 30
    held = timeline.holds.amounts if timeline.holds is not None else {}
    exclusive = pod_set.exclusive

    def units(slot: NodeSlot, extra: Mapping[str, int] | None) -> int:
        best = most
        capacity, used, hold = slot.capacity, slot.used, held.get(slot)
        for resource, amount in unit:
            free = capacity.get(resource, 0) - used.get(resource, 0)
            if hold:
                free += hold.get(resource, 0)
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

    # Nodes with free capacity now: the buckets above 0 hold them, unless the pod set
    # does not ask for the flavor's bucketed resource (then any node may).
    amount = pod_set.request(index.primary)
    free_now = index.candidates_ascending(1) if amount > 0 and not exclusive else index.members
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
    for at, _, slot, given in timeline.releases(flavor):
        if at >= before:
            return None
        if not usable(slot):
            continue
        if exclusive:
            if at < free_at.get(slot, now):
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


def plan_quota(
    needs: Mapping[FlavorResource, int],
    info: ClusterQueueInfo,
    ends: Sequence[tuple[float, Mapping[FlavorResource, int], str]],
    now: float,
) -> float | None:
    """The earliest time the quota ``needs`` is available in ``info``: now, or when
    enough of the usage of the jobs in its tree (``(end, usage)``, soonest first) is
    given back; None when it never is."""
    short = {fr: n - available(info.node, fr) for fr, n in needs.items()}
    short = {fr: n for fr, n in short.items() if n > 0}
    if not short:
        return now
    if any(n > potential_available(info.node, fr) for fr, n in needs.items()):
        return None
    for end, usage, _ in ends:
        for fr in list(short):
            left = short[fr] - usage.get(fr, 0)
            if left > 0:
                short[fr] = left
            else:
                del short[fr]
        if not short:
            return end
    return None
