"""Free node capacity, indexed per flavor so placement never scans the whole cluster.

Each node is a :class:`NodeSlot` holding its capacity and what admitted jobs
use of it, down to each GPU device: a device serves one whole-GPU task, or
shares (``phalanx.io/gpu-milli``) that add up to at most 1000 thousandths. The
node's ``nvidia.com/gpu`` in use is the number of devices anything touches,
so whole-GPU requests only ever see untouched devices, and its
``phalanx.io/gpu-milli`` capacity is 1000 per device.

Each flavor keeps a :class:`FlavorNodes` index: its schedulable nodes bucketed
by the free amount of the flavor's *primary* resource (GPUs when the flavor
has any, else whole CPU cores). "N nodes with at least k free GPUs" is then a
walk over at most a few dozen buckets, not over 10,000 nodes, and allocating a
task moves one node between two buckets in O(1). For node scoring the index
also groups nodes into *classes* of identical free state (GPU model, each
device's free thousandths, every other resource's free amount): a score is a
function of the state, so it is computed once per class, not once per node.

Buckets are insertion-ordered dicts, so iteration order depends only on the
order of events: placement stays deterministic.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass, field

from phalanx.model import CPU, GPU, GPU_MILLI, AdminState, Node, NodeState, ResourceFlavor

__all__ = [
    "MILLI",
    "ClassKey",
    "Devices",
    "FlavorNodes",
    "NodeClass",
    "NodeSlot",
    "device_key",
    "node_capacity",
]

_CHANGES_KEPT = 65_536
"""Capacity changes a flavor index remembers for incremental readers."""

MILLI = 1000
"""Thousandths in one GPU device."""

Devices = tuple[tuple[int, int], ...]
"""``((device index, thousandths), ...)``: the GPU devices one allocation takes."""

ClassKey = tuple[str, tuple[int, ...], tuple[tuple[str, int], ...]]
"""A node's free state: GPU model, each device's free thousandths (ascending) and every
resource's free amount (by name; GPUs and thousandths included, which differ from the
devices' while the node is held for a reservation)."""

_DEVICE_KEYS = tuple(f"#{i}" for i in range(256))


def device_key(index: int) -> str:
    """The key, in an overlay of tentative allocations, of GPU device ``index``'s
    thousandths (overlays are per-resource maps; devices ride along under these keys)."""
    return _DEVICE_KEYS[index] if index < len(_DEVICE_KEYS) else f"#{index}"


def node_capacity(node: Node) -> dict[str, int]:
    """What a node offers: its declared capacity, with ``phalanx.io/gpu-milli`` at
    1000 per GPU (derived, whatever the node declares)."""
    capacity = {r: a for r, a in node.capacity.items() if r != GPU_MILLI}
    gpus = capacity.get(GPU, 0)
    if gpus > 0:
        capacity[GPU_MILLI] = gpus * MILLI
    return capacity


@dataclass(eq=False, slots=True)
class NodeSlot:
    """One node's capacity and allocations."""

    node: Node
    capacity: dict[str, int]
    used: dict[str, int] = field(default_factory=dict)
    flavors: list[FlavorNodes] = field(default_factory=list)
    jobs: dict[int, None] = field(default_factory=dict)
    exclusive_jobs: int = 0
    gpu_used: list[int] = field(default_factory=list)
    """Per GPU device, the thousandths in use (1000: whole, or shares that fill it)."""
    rank: int = 0
    """Order among equally good nodes, lowest first: the order the nodes were first seen."""
    gpu_model: str = ""
    resources: tuple[str, ...] = ()
    """The capacity's resources, sorted (for :meth:`class_key`)."""
    schedulable: bool = field(default=False, init=False)
    """Whether the node is UP (set with the node, which is frozen, in :meth:`reset`):
    read for every node a plan walks."""

    def __post_init__(self) -> None:
        self.reset(self.node, self.capacity)

    def reset(self, node: Node, capacity: dict[str, int]) -> None:
        """Take a new version of the node (labels, capacity), keeping what jobs use."""
        self.node, self.capacity = node, capacity
        self.schedulable = node.state is AdminState.UP
        self.gpu_model = node.gpu_model
        self.resources = tuple(sorted(capacity))
        self.resize_devices()

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def idle(self) -> bool:
        return not self.jobs

    def free(self, resource: str) -> int:
        return self.capacity.get(resource, 0) - self.used.get(resource, 0)

    def state(self) -> NodeState:
        if self.node.state is AdminState.DOWN:
            return NodeState.DOWN
        if self.node.state is AdminState.DRAIN:
            return NodeState.DRAINING if self.jobs else NodeState.DRAIN
        return self.usage_state()

    def usage_state(self) -> NodeState:
        """IDLE, MIXED or ALLOCATED from the jobs on the node alone (the admin state
        aside): the first half of ``scontrol show node``'s ``MIXED+DRAIN``."""
        if not self.jobs:
            return NodeState.IDLE
        if self.exclusive_jobs or all(self.free(r) <= 0 for r in self.capacity):
            return NodeState.ALLOCATED
        return NodeState.MIXED

    def resize_devices(self) -> None:
        """Match the device list to the GPU capacity; devices in use are kept even when
        the node now declares fewer."""
        want = self.capacity.get(GPU, 0)
        devices = self.gpu_used
        if len(devices) < want:
            devices.extend([0] * (want - len(devices)))
        while len(devices) > want and devices[-1] == 0:
            devices.pop()

    def fit_units(
        self,
        unit: dict[str, int],
        extra: dict[str, int] | None = None,
        share: tuple[int, int] | None = None,
    ) -> int:
        """How many units of ``unit`` fit in the free capacity (minus ``extra``).

        ``share`` is ``(thousandths per task, tasks per unit)`` for units of GPU shares:
        each task's share must fit on one device.
        """
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
        if share is not None:
            n = self.share_tasks(share[0], extra) // share[1]
            if best < 0 or n < best:
                best = n
        return best if best >= 0 else 1 << 30

    def device_free(self, extra: dict[str, int] | None = None) -> list[int]:
        """Each device's free thousandths, minus what ``extra`` tentatively takes (its
        device keys, and its whole GPUs from the lowest untouched devices)."""
        free = [MILLI - u for u in self.gpu_used]
        if extra:
            for i in range(len(free)):
                taken = extra.get(device_key(i))
                if taken:
                    free[i] -= taken
            whole = extra.get(GPU, 0)
            for i in range(len(free)):
                if whole <= 0:
                    break
                if free[i] == MILLI:
                    free[i] = 0
                    whole -= 1
        return free

    def share_tasks(self, milli: int, extra: dict[str, int] | None = None) -> int:
        """How many tasks of ``milli`` thousandths each fit, one device apiece."""
        if extra:
            return sum(f // milli for f in self.device_free(extra) if f > 0)
        return sum((MILLI - u) // milli for u in self.gpu_used)

    def whole_devices(self, count: int, free: list[int] | None = None) -> list[int]:
        """The ``count`` lowest-numbered untouched devices (fewer if there are not)."""
        out: list[int] = []
        if free is None:
            free = [MILLI - u for u in self.gpu_used]
        for i, f in enumerate(free):
            if len(out) == count:
                break
            if f == MILLI:
                out.append(i)
        return out

    @staticmethod
    def share_device(free: list[int], milli: int, want_free: int | None = None) -> int:
        """The device for one share of ``milli``: the lowest-numbered one with exactly
        ``want_free`` thousandths free when given and there is one, else the tightest
        that holds it (lowest number first); -1 when none does."""
        best = -1
        for i, f in enumerate(free):
            if f < milli:
                continue
            if want_free is not None and f == want_free:
                return i
            if best < 0 or f < free[best]:
                best = i
        return best

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

    def _use_devices(self, devices: Devices, sign: int) -> None:
        """Add (``sign`` 1) or remove (-1) device thousandths; ``nvidia.com/gpu`` in use
        follows the devices touched and ``phalanx.io/gpu-milli`` their sum."""
        gpu_used = self.gpu_used
        touched = milli = 0
        for index, amount in devices:
            while index >= len(gpu_used):
                gpu_used.append(0)
            before = gpu_used[index]
            after = before + sign * amount
            gpu_used[index] = after
            if before == 0 and after > 0:
                touched += 1
            elif before > 0 and after == 0:
                touched -= 1
            milli += amount
        used = self.used
        for resource, delta in ((GPU, touched), (GPU_MILLI, sign * milli)):
            if delta:
                left = used.get(resource, 0) + delta
                if left:
                    used[resource] = left
                else:
                    used.pop(resource, None)

    def take(
        self, job_id: int, amounts: dict[str, int], exclusive: bool, devices: Devices = ()
    ) -> None:
        """Give ``amounts`` (the whole node when ``exclusive``) to job ``job_id``; with
        ``devices``, GPUs are taken as those devices' thousandths."""
        if devices:
            used = self.used
            for resource, amount in amounts.items():
                if resource != GPU and resource != GPU_MILLI:
                    used[resource] = used.get(resource, 0) + amount
            self._use_devices(devices, 1)
        else:
            self.allocate(amounts)
        self.jobs[job_id] = None
        if exclusive:
            self.exclusive_jobs += 1

    def give_back(
        self, job_id: int, amounts: dict[str, int], exclusive: bool, devices: Devices = ()
    ) -> None:
        """Return what :meth:`take` gave job ``job_id``."""
        if devices:
            self.release({r: a for r, a in amounts.items() if r != GPU and r != GPU_MILLI})
            self._use_devices(devices, -1)
        else:
            self.release(amounts)
        self.jobs.pop(job_id, None)
        if exclusive:
            self.exclusive_jobs -= 1

    def class_key(self) -> ClassKey:
        """This node's free state (see :data:`ClassKey`)."""
        capacity, used = self.capacity, self.used
        return (
            self.gpu_model,
            tuple(sorted([MILLI - u for u in self.gpu_used])),
            tuple([(r, capacity[r] - used.get(r, 0)) for r in self.resources]),
        )


@dataclass(eq=False, slots=True)
class NodeClass:
    """The nodes of one free state, with the lowest-ranked first on demand."""

    key: ClassKey
    members: dict[NodeSlot, None] = field(default_factory=dict)
    scores: dict[object, object] = field(default_factory=dict)
    """What scorers computed for this state, by whatever key they choose."""
    _heap: list[tuple[int, int, NodeSlot]] = field(default_factory=list)
    _pushed: int = 0

    def add(self, slot: NodeSlot) -> None:
        self.members[slot] = None
        self._pushed += 1
        heapq.heappush(self._heap, (slot.rank, self._pushed, slot))
        self.compact()

    def first(self) -> NodeSlot | None:
        """The member with the lowest rank."""
        heap, members = self._heap, self.members
        while heap:
            slot = heap[0][2]
            if slot in members:
                return slot
            heapq.heappop(heap)
        return None

    def ordered(self) -> list[NodeSlot]:
        """Every member, lowest rank first."""
        return sorted(self.members, key=lambda s: s.rank)

    def compact(self) -> None:
        """Drop the stale entries of members that left, once they outnumber the rest."""
        if len(self._heap) > 4 * len(self.members) + 16:
            self._heap = [(s.rank, i, s) for i, s in enumerate(self.members)]
            self._pushed = len(self._heap)
            heapq.heapify(self._heap)


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
        self._classes: dict[ClassKey, NodeClass] | None = None
        self._class_of: dict[NodeSlot, ClassKey] = {}
        self._unclassified: dict[NodeSlot, None] = {}
        """Nodes whose free state changed since :meth:`classes` last looked."""

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
            elif self._classes is not None:
                self._unclassified[slot] = None
        self.version += 1

    def classes(self) -> dict[ClassKey, NodeClass]:
        """The schedulable nodes grouped by free state; built at the first call, then
        brought up to date with the nodes that changed since the last."""
        if self._classes is None:
            self._classes = {}
            self._unclassified = dict.fromkeys(self._where)
        if self._unclassified:
            for slot in self._unclassified:
                self._classify(slot)
            self._unclassified = {}
        return self._classes

    def _classify(self, slot: NodeSlot) -> None:
        classes = self._classes
        assert classes is not None
        key = slot.class_key()
        old = self._class_of.get(slot)
        if old == key:
            return
        if old is not None:
            self._declassify(slot)
        group = classes.get(key)
        if group is None:
            group = classes[key] = NodeClass(key)
        group.add(slot)
        self._class_of[slot] = key

    def _declassify(self, slot: NodeSlot) -> None:
        key = self._class_of.pop(slot, None)
        if key is None or self._classes is None:
            return
        group = self._classes[key]
        del group.members[slot]
        if not group.members:
            del self._classes[key]
        else:
            group.compact()

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
        if self._classes is not None:
            self._unclassified[slot] = None

    def _drop(self, slot: NodeSlot) -> None:
        if self._classes is not None:
            self._declassify(slot)
            self._unclassified.pop(slot, None)
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
        if self._classes is not None:
            self._classes, self._class_of, self._unclassified = {}, {}, {}
        for slot in self.members:
            if slot.schedulable:
                self._insert(slot)
