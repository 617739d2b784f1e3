"""The pending side: per-ClusterQueue heaps of jobs, split by shape, and parking.

Each ClusterQueue has a :class:`ClusterQueueQueue`; inside it one
:class:`ShapeQueue` (a heap ordered by priority, submit time, id) per job
shape, and a small heap of the shape queues' heads, so the queue's head is
found in O(log shapes).

A head that does not fit is *parked* until something that could change the
answer happens (Kueue's inadmissible workloads):

* BestEffortFIFO parks the head's whole shape queue: every job of that shape
  would get the same answer, and jobs of other shapes go ahead.
* StrictFIFO parks the whole ClusterQueue behind its head; a newly submitted
  job that sorts before the blocked head unblocks it.

The :class:`ParkIndex` records what wakes each parked item: quota released in
its cohort tree (by root name), node capacity released in a flavor, or any
configuration change. Waking is O(items woken); nothing is ever rescanned.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from phalanx.engine.cache.quota import FlavorResource
from phalanx.engine.explain.reasons import Reason
from phalanx.engine.queueing.shapes import JobShape

if TYPE_CHECKING:
    from phalanx.engine.state import JobRecord

__all__ = ["ClusterQueueQueue", "ParkIndex", "QueueManager", "ShapeQueue", "SortKey"]

SortKey = tuple[float, float, float, int]
"""``(LocalQueue score, -priority, submit_time, id)``: smaller sorts first. The score
is Admission Fair Sharing's (:mod:`phalanx.engine.admissionfairsharing.usage`), 0 in
ClusterQueues without it."""


Condition = tuple[str, str, FlavorResource, int]
"""``(kind, root key, flavor-resource, value)``.

``("level", root, fr, n)``: wake once the tree's availability of ``fr`` reaches ``n``
(for queues without limits, whose availability is the root's);
``("total", root, fr, n)``: wake once the running total of ``fr`` released in the tree
reaches ``n`` (for queues with limits, whose availability can grow by no more than that).
"""


class _Parkable:
    parked: bool
    park_reason: Reason | None
    park_keys: tuple[str, ...]
    park_conditions: tuple[Condition, ...]
    park_gen: int
    token: int


@dataclass(eq=False)
class ShapeQueue(_Parkable):
    cq: ClusterQueueQueue
    shape: JobShape
    token: int
    heap: list[tuple[SortKey, int, JobRecord]] = field(default_factory=list)
    """``(key, push counter, job)``: the key tuple is the job's own, so a current entry
    is recognised by identity (a job re-keyed since has another tuple)."""
    members: dict[int, JobRecord] = field(default_factory=dict)
    parked: bool = False
    park_reason: Reason | None = None
    park_keys: tuple[str, ...] = ()
    park_conditions: tuple[Condition, ...] = ()
    park_gen: int = 0
    pushes: int = 0

    def peek(self) -> JobRecord | None:
        heap, members = self.heap, self.members
        while heap:
            key, _, rec = heap[0]
            if members.get(key[3]) is rec and (rec.key is key or rec.key == key):
                return rec
            heapq.heappop(heap)
        return None

    def smallest(self, k: int) -> list[JobRecord]:
        """The first ``k`` jobs, in order, without disturbing the heap: a walk down from
        its root that skips stale entries."""
        heap, members = self.heap, self.members
        out: list[JobRecord] = []
        if not heap:
            return out
        frontier = [(heap[0], 0)]
        while frontier and len(out) < k:
            entry, i = heapq.heappop(frontier)
            key, _, rec = entry
            if members.get(key[3]) is rec and (rec.key is key or rec.key == key):
                out.append(rec)
            for child in (2 * i + 1, 2 * i + 2):
                if child < len(heap):
                    heapq.heappush(frontier, (heap[child], child))
        return out

    def push(self, rec: JobRecord) -> None:
        # A job may have stale entries with its own key (pushed again after a requeue):
        # the push counter keeps tuples from ever comparing the records themselves.
        self.members[rec.id] = rec
        self.pushes += 1
        heapq.heappush(self.heap, (rec.key, self.pushes, rec))

    def rebuild(self) -> None:
        self.heap = [(rec.key, 0, rec) for rec in self.members.values()]
        heapq.heapify(self.heap)


@dataclass(eq=False)
class ClusterQueueQueue(_Parkable):
    name: str
    strict: bool
    token: int
    shapes: dict[JobShape, ShapeQueue] = field(default_factory=dict)
    heads: list[tuple[SortKey, int, ShapeQueue]] = field(default_factory=list)
    """``(head's key, shape queue token, shape queue)``."""
    pending: int = 0
    stopped: Reason | None = None
    parked: bool = False
    park_reason: Reason | None = None
    park_keys: tuple[str, ...] = ()
    park_conditions: tuple[Condition, ...] = ()
    park_gen: int = 0
    blocked_by: JobRecord | None = None
    sticky: bool = False
    """``blocked_by`` is a preemptor waiting for its victims: a job that sorts before
    it does not unblock the queue."""
    pinned: JobRecord | None = None
    """Kueue's sticky preemptor: once it has issued preemptions it is the queue's head
    until it is admitted, fails to fit without preempting, or leaves."""

    def offer(self, sq: ShapeQueue) -> None:
        """Make ``sq``'s current head visible in the heap of heads."""
        rec = sq.peek()
        if rec is not None and not sq.parked:
            heapq.heappush(self.heads, (rec.key, sq.token, sq))

    def head(self) -> tuple[JobRecord, ShapeQueue] | None:
        pinned = self.pinned
        if pinned is not None:
            sq = pinned.queue
            if sq is not None and sq.cq is self and sq.members.get(pinned.id) is pinned:
                if not sq.parked:
                    return pinned, sq
            else:
                self.pinned = None
        heads = self.heads
        while heads:
            key, _, sq = heads[0]
            if not sq.parked:
                rec = sq.peek()
                if rec is not None and (rec.key is key or rec.key == key):
                    return rec, sq
            heapq.heappop(heads)
        return None

    def rebuild(self) -> None:
        self.heads = []
        for sq in self.shapes.values():
            sq.rebuild()
            self.offer(sq)


_Entry = tuple[int, int, int, _Parkable]
"""A threshold heap's entry: ``(value, item token, park generation, item)``."""
_COMPACT_AT = 64
"""A threshold heap this long or shorter is never compacted."""


class ParkIndex:
    """Parked items by what wakes them.

    Two kinds of wake-up:

    * keys (``flavor:<name>``): node capacity released in that flavor wakes
      every item parked under the key;
    * quota conditions (see :data:`Condition`): on every release in a tree the
      index knows the tree's availability and the running total ever released
      there, and pops the items whose level or total has been reached from a
      min-heap per (kind, tree, flavor-resource): O(items woken).

    Items with neither wait for a configuration change (:meth:`take_all`).
    """

    def __init__(self) -> None:
        self._by_key: dict[str, dict[int, _Parkable]] = {}
        self._all: dict[int, _Parkable] = {}
        self.released: dict[tuple[str, FlavorResource], int] = {}
        self._thresholds: dict[tuple[str, str, FlavorResource], list[_Entry]] = {}
        self._limits: dict[tuple[str, str, FlavorResource], int] = {}
        """Per threshold heap, the length at which its stale entries are dropped."""

    def __len__(self) -> int:
        return len(self._all)

    def park(
        self,
        item: _Parkable,
        reason: Reason,
        keys: tuple[str, ...],
        conditions: tuple[Condition, ...] = (),
    ) -> None:
        item.parked, item.park_reason, item.park_keys = True, reason, keys
        item.park_conditions = conditions
        gen = item.park_gen = item.park_gen + 1
        token = item.token
        self._all[token] = item
        if keys:
            by_key = self._by_key
            for key in keys:
                bucket = by_key.get(key)
                if bucket is None:
                    by_key[key] = {token: item}
                else:
                    bucket[token] = item
        thresholds = self._thresholds
        for kind, root, fr, value in conditions:
            where = (kind, root, fr)
            heap = thresholds.get(where)
            if heap is None:
                heap = thresholds[where] = []
            heapq.heappush(heap, (value, token, gen, item))
            if len(heap) > self._limits.get(where, _COMPACT_AT):
                self._compact(where, heap)

    def _compact(self, where: tuple[str, str, FlavorResource], heap: list[_Entry]) -> None:
        """Drop the entries of items unparked or parked again since (a woken item leaves
        its entries behind): the heap stays as long as what it can wake, give or take
        twice. The live entries keep their order, so wake-ups are unchanged."""
        heap[:] = [e for e in heap if e[3].parked and e[3].park_gen == e[2]]
        heapq.heapify(heap)
        self._limits[where] = max(_COMPACT_AT, 2 * len(heap))

    def total(self, root: str, fr: FlavorResource) -> int:
        return self.released.get((root, fr), 0)

    def unpark(self, item: _Parkable) -> None:
        if not item.parked:
            return
        item.parked = False
        self._all.pop(item.token, None)
        for key in item.park_keys:
            bucket = self._by_key.get(key)
            if bucket is not None:
                bucket.pop(item.token, None)
                if not bucket:
                    del self._by_key[key]
        item.park_keys = ()
        item.park_conditions = ()

    def release(self, root: str, fr: FlavorResource, amount: int, level: int) -> list[_Parkable]:
        """``amount`` of ``fr`` released in ``root``, whose availability is now ``level``.

        Unparks and returns the items that may now fit.
        """
        key = (root, fr)
        total = self.released[key] = self.released.get(key, 0) + amount
        woken: list[_Parkable] = []
        for kind, reached in (("total", total), ("level", level)):
            heap = self._thresholds.get((kind, root, fr))
            if not heap:
                continue
            while heap and heap[0][0] <= reached:
                _, _, gen, item = heapq.heappop(heap)
                if item.parked and item.park_gen == gen:
                    self.unpark(item)
                    woken.append(item)
            if not heap:
                del self._thresholds[(kind, root, fr)]
                self._limits.pop((kind, root, fr), None)
        return woken

    def take(self, keys: list[str]) -> list[_Parkable]:
        """Unpark and return everything parked under any of ``keys``."""
        woken: dict[int, _Parkable] = {}
        for key in keys:
            bucket = self._by_key.get(key)
            if bucket:
                woken.update(bucket)
        items = list(woken.values())
        for item in items:
            self.unpark(item)
        return items

    def take_all(self) -> list[_Parkable]:
        items = list(self._all.values())
        for item in items:
            self.unpark(item)
        self._thresholds.clear()
        self._limits.clear()
        return items

    def items(self) -> list[_Parkable]:
        return list(self._all.values())


class QueueManager:
    """All pending jobs that have a ClusterQueue, and which queues may have a head."""

    def __init__(self) -> None:
        self.queues: dict[str, ClusterQueueQueue] = {}
        self.parked = ParkIndex()
        self._candidates: dict[str, ClusterQueueQueue] = {}
        self._aside: dict[str, ClusterQueueQueue] = {}
        self._tokens = 0

    def _token(self) -> int:
        self._tokens += 1
        return self._tokens

    def queue(self, name: str, strict: bool) -> ClusterQueueQueue:
        cqq = self.queues.get(name)
        if cqq is None:
            cqq = self.queues[name] = ClusterQueueQueue(name, strict, self._token())
        elif cqq.strict != strict:
            cqq.strict = strict
            self.wake([cqq, *cqq.shapes.values()])
        return cqq

    def push(self, rec: JobRecord, cqq: ClusterQueueQueue) -> JobRecord | None:
        """Queue ``rec``; returns its shape queue's head before it came."""
        sq = cqq.shapes.get(rec.shape)
        if sq is None:
            sq = cqq.shapes[rec.shape] = ShapeQueue(cqq, rec.shape, self._token())
        before = sq.peek()
        sq.push(rec)
        rec.queue = sq
        cqq.pending += 1
        if before is None or rec.key < before.key:
            cqq.offer(sq)
        if (
            cqq.parked
            and cqq.blocked_by is not None
            and not cqq.sticky
            and rec.key < cqq.blocked_by.key
        ):
            self.wake([cqq])
        self._candidates[cqq.name] = cqq
        return before

    def remove(self, rec: JobRecord) -> None:
        sq = rec.queue
        if sq is None:
            return
        was_head = sq.peek() is rec
        del sq.members[rec.id]
        rec.queue = None
        cqq = sq.cq
        cqq.pending -= 1
        if was_head:
            cqq.offer(sq)
        if cqq.blocked_by is rec:
            self.wake([cqq])
        if not sq.members:
            if sq.parked:
                self.parked.unpark(sq)
            del cqq.shapes[sq.shape]

    def wake(self, items: list[_Parkable]) -> None:
        for item in items:
            self.parked.unpark(item)
            if isinstance(item, ShapeQueue):
                item.cq.offer(item)
                self._candidates[item.cq.name] = item.cq
            elif isinstance(item, ClusterQueueQueue):
                item.blocked_by = None
                item.sticky = False
                self._candidates[item.name] = item

    def wake_keys(self, keys: list[str]) -> None:
        self.wake(self.parked.take(keys))

    def release(
        self,
        root: str,
        usage: dict[FlavorResource, int],
        levels: dict[FlavorResource, int],
        keys: list[str],
    ) -> None:
        """Quota freed in tree ``root`` (``levels``: its availability now), node capacity
        freed under ``keys``: wake who may fit."""
        woken = self.parked.take(keys) if keys else []
        for fr, amount in usage.items():
            woken.extend(self.parked.release(root, fr, amount, levels[fr]))
        self.wake(woken)

    def wake_all(self) -> None:
        self.wake(self.parked.take_all())
        self._candidates.update(self.queues)

    def mark_candidate(self, cqq: ClusterQueueQueue) -> None:
        self._candidates[cqq.name] = cqq

    def set_aside(self, cqq: ClusterQueueQueue) -> None:
        """Offer no more heads of ``cqq`` until :meth:`restore_aside` (the rest of a cycle)."""
        self._aside[cqq.name] = cqq
        self._candidates.pop(cqq.name, None)

    def restore_aside(self) -> None:
        self._candidates.update(self._aside)
        self._aside.clear()

    def has_candidates(self) -> bool:
        """Whether some ClusterQueue may have a head for the next cycle."""
        return any(
            not (cqq.parked or cqq.stopped) and cqq.head() is not None
            for cqq in self._candidates.values()
        )

    def heads(self) -> list[tuple[JobRecord, ShapeQueue, ClusterQueueQueue]]:
        """One head per ClusterQueue that is neither stopped nor blocked."""
        out: list[tuple[JobRecord, ShapeQueue, ClusterQueueQueue]] = []
        drop: list[str] = []
        aside = self._aside
        for name, cqq in self._candidates.items():
            found = None if (cqq.parked or cqq.stopped or name in aside) else cqq.head()
            if found is None:
                drop.append(name)
            else:
                out.append((found[0], found[1], cqq))
        for name in drop:
            del self._candidates[name]
        return out

    def rebuild(self) -> None:
        for cqq in self.queues.values():
            cqq.rebuild()
