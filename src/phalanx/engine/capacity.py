"""Free node capacity, indexed per flavor so placement never scans the whole cluster.

Each node is a :class:`NodeSlot` holding its capacity and what admitted jobs
use of it. Each flavor keeps a :class:`FlavorNodes` index: its schedulable
nodes bucketed by the free amount of the flavor's *primary* resource (GPUs
when the flavor has any, else whole CPU cores). "N nodes with at least k free
GPUs" is then a walk over at most a few dozen buckets, not over 10,000 nodes,
and allocating a task moves one node between two buckets in O(1).

Buckets are insertion-ordered dicts, so iteration order depends only on the
order of events: placement stays deterministic.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from phalanx.model import CPU, GPU, AdminState, Node, NodeState, ResourceFlavor

__all__ = ["FlavorNodes", "NodeSlot"]

_CHANGES_KEPT = 65_536
"""Capacity changes a flavor index remembers for incremental readers."""


@dataclass(eq=False, slots=True)
class NodeSlot:
    """One node's capacity and allocations."""

    node: Node
    capacity: dict[str, int]
    used: dict[str, int] = field(default_factory=dict)
    flavors: list[FlavorNodes] = field(default_factory=list)
    jobs: dict[int, None] = field(default_factory=dict)
    exclusive_jobs: int = 0

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def schedulable(self) -> bool:
        return self.node.state is AdminState.UP

    @property
    def idle(self) -> bool:
        return not self.jobs

    def free(self, resource: str) -> int:
        return self.capacity.get(resource, 0) - self.used.get(resource, 0)

    def state(self) -> NodeState:
        if self.node.state is AdminState.DOWN:
            return NodeState.DOWN
        if self.node.state is AdminState.DRAIN:
            return NodeState.DRAIN
        if not self.jobs:
            return NodeState.IDLE
        if self.exclusive_jobs or all(self.free(r) <= 0 for r in self.capacity):
            return NodeState.ALLOCATED
        return NodeState.MIXED

    def fit_units(self, unit: dict[str, int], extra: dict[str, int] | None = None) -> int:
        """How many units of ``unit`` fit in the free capacity (minus ``extra``)."""
        best = -1
        capacity, used = self.capacity, self.used
        for resource, amount in unit.items():
            free = capacity.get(resource, 0) - used.get(resource, 0)
            if extra:
                free -= extra.get(resource, 0)
            n = free // amount if free > 0 else 0
            if n == 0:
                return 0
            if best < 0 or n < best:
                best = n
        return best if best >= 0 else 1 << 30

    def allocate(self, amounts: dict[str, int]) -> None:
        used = self.used
        for resource, amount in amounts.items():
            used[resource] = used.get(resource, 0) + amount

    def release(self, amounts: dict[str, int]) -> None:
        used = self.used
        for resource, amount in amounts.items():
            left = used.get(resource, 0) - amount
            if left:
                used[resource] = left
            else:
                used.pop(resource, None)

    def take(self, job_id: int, amounts: dict[str, int], exclusive: bool) -> None:
        """Give ``amounts`` (the whole node when ``exclusive``) to job ``job_id``."""
        self.allocate(amounts)
        self.jobs[job_id] = None
        if exclusive:
            self.exclusive_jobs += 1

    def give_back(self, job_id: int, amounts: dict[str, int], exclusive: bool) -> None:
        """Return what :meth:`take` gave job ``job_id``."""
        self.release(amounts)
        self.jobs.pop(job_id, None)
        if exclusive:
            self.exclusive_jobs -= 1


class FlavorNodes:
    """The schedulable nodes of one flavor, bucketed by free primary resource."""

    def __init__(self, flavor: ResourceFlavor) -> None:
        self.flavor = flavor
        self.primary = CPU
        self.scale = 1000
        self.buckets: dict[int, dict[NodeSlot, None]] = {}
        self._keys: list[int] | None = None
        self._where: dict[NodeSlot, int] = {}
        self.members: dict[NodeSlot, None] = {}
        self.tainted = 0
        self.version = 0
        self.membership = 0
        """Counts the nodes added and removed (not their capacity changes)."""
        self._changes: list[NodeSlot] = []
        self._dropped = 0

    @property
    def name(self) -> str:
        return self.flavor.name

    def key(self, slot: NodeSlot) -> int:
        return max(0, slot.free(self.primary)) // self.scale

    def sorted_keys(self) -> list[int]:
        if self._keys is None:
            self._keys = sorted(self.buckets)
        return self._keys

    def add(self, slot: NodeSlot) -> None:
        self.members[slot] = None
        if slot.node.taints:
            self.tainted += 1
        if self.primary != GPU and slot.capacity.get(GPU, 0) > 0:
            self.primary, self.scale = GPU, 1
            self._reindex()
        elif slot.schedulable:
            self._insert(slot)
        self.version += 1
        self.membership += 1

    def remove(self, slot: NodeSlot) -> None:
        self.members.pop(slot, None)
        if slot.node.taints:
            self.tainted -= 1
        self._drop(slot)
        self.version += 1
        self.membership += 1

    @property
    def position(self) -> int:
        """How many capacity changes the index has seen (see :meth:`changed_since`)."""
        return self._dropped + len(self._changes)

    def changed_since(self, position: int) -> list[NodeSlot] | None:
        """The nodes whose capacity changed since ``position`` (None: too long ago)."""
        if position < self._dropped:
            return None
        return self._changes[position - self._dropped :]

    def update(self, slot: NodeSlot) -> None:
        """Re-bucket ``slot`` after its free capacity or schedulability changed."""
        changes = self._changes
        changes.append(slot)
        if len(changes) > _CHANGES_KEPT:
            half = len(changes) // 2
            del changes[:half]
            self._dropped += half
        where = self._where.get(slot)
        if not slot.schedulable:
            if where is not None:
                self._drop(slot)
        else:
            key = self.key(slot)
            if where != key:
                if where is not None:
                    self._drop(slot)
                self._insert(slot)
        self.version += 1

    # The candidate iterators must not outlive a mutation of the index:
    # placement only reads, allocation happens after it.
    def candidates_ascending(self, min_key: int) -> Iterator[NodeSlot]:
        for key in self.sorted_keys():
            if key >= min_key:
                yield from self.buckets[key]

    def candidates_descending(self, min_key: int) -> Iterator[NodeSlot]:
        for key in reversed(self.sorted_keys()):
            if key < min_key:
                return
            yield from self.buckets[key]

    def upper_bound_units(self, amount: int, one_per_node: bool) -> int:
        """Units of ``amount`` primary resource (base units) that could fit, counting the
        primary only.

        A node in bucket ``key`` has less than ``(key + 1) * scale`` free: with whole-core
        buckets, four 500m tasks fit a node of bucket 1 (1500m free, say) or 2.
        """
        total = 0
        scale = self.scale
        for key, bucket in self.buckets.items():
            if amount <= 0:
                total += len(bucket) * (1 if one_per_node else 1 << 20)
            else:
                most = ((key + 1) * scale - 1) // amount
                if most > 0:
                    total += len(bucket) * (1 if one_per_node else most)
        return total

    def _insert(self, slot: NodeSlot) -> None:
        key = self.key(slot)
        bucket = self.buckets.get(key)
        if bucket is None:
            bucket = self.buckets[key] = {}
            self._keys = None
        bucket[slot] = None
        self._where[slot] = key

    def _drop(self, slot: NodeSlot) -> None:
        key = self._where.pop(slot, None)
        if key is None:
            return
        bucket = self.buckets[key]
        del bucket[slot]
        if not bucket:
            del self.buckets[key]
            self._keys = None

    def _reindex(self) -> None:
        self.buckets, self._where, self._keys = {}, {}, None
        for slot in self.members:
            if slot.schedulable:
                self._insert(slot)
