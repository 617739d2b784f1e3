"""The engine's record of one job: where it waits or what it holds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from phalanx.engine.cache.quota import FlavorResource
from phalanx.engine.explain.reasons import Reason
from phalanx.engine.priority.ordering import JobFacts
from phalanx.engine.queueing.shapes import JobShape
from phalanx.model import GPU, GPU_MILLI, Job

if TYPE_CHECKING:
    from phalanx.engine.cache.capacity import Devices, NodeSlot
    from phalanx.engine.cache.quota import QuotaNode
    from phalanx.engine.decisions import Admit
    from phalanx.engine.queueing.queues import ShapeQueue, SortKey

__all__ = ["Admission", "Allocation", "JobRecord"]

Allocation = tuple["NodeSlot", dict[str, int], bool, "Devices"]
"""``(node, amounts taken, exclusive, GPU devices taken)``."""


@dataclass(eq=False, slots=True)
class Admission:
    """What an admitted job holds: quota in its ClusterQueue and capacity on nodes."""

    cluster_queue: str
    quota_node: QuotaNode
    usage: dict[FlavorResource, int]
    allocations: list[Allocation]
    decision: Admit
    evicting: bool = False
    admitted_at: float = 0.0
    """The cycle time of the admission (victims admitted most recently go first)."""
    checkpoint_at: float | None = None
    """When this attempt last reported a checkpoint (:class:`~phalanx.engine.events.Checkpoint`);
    None: never. Work since then is what preempting it loses."""

    def lost_work(self, now: float) -> float:
        """GPU-seconds preempting it now loses: GPUs x time since its last checkpoint
        (or since its admission, without one)."""
        gpus = 0.0
        for (_, resource), amount in self.usage.items():
            if resource == GPU:
                gpus += amount
            elif resource == GPU_MILLI:
                gpus += amount / 1000
        since = self.admitted_at if self.checkpoint_at is None else self.checkpoint_at
        return gpus * max(0.0, now - max(since, self.admitted_at))


@dataclass(eq=False, slots=True)
class JobRecord:
    job: Job
    shape: JobShape
    facts: JobFacts
    cluster_queue: str | None = None
    local_queue: str | None = None
    priority: float = 0.0
    key: SortKey = (0.0, 0.0, 0.0, 0)
    queue: ShapeQueue | None = None
    admission: Admission | None = None
    reason: Reason | None = None
    reason_sig: tuple[tuple[object, ...], Reason] | None = None
    """The last failure's signature and the reason built from it, reused while unchanged."""
    waiting: Reason | None = None
    """Why the job has no ClusterQueue queue to wait in (queue missing, LocalQueue stopped)."""
    flags: set[str] = field(default_factory=set)
    order_time: float = 0.0
    """Kueue's queue-order timestamp: the submit time, or the eviction time after a
    waitForPodsReady requeue with ``requeuingStrategy.timestamp: Eviction``."""
    evicted_for: str | None = None
    """Why the job is being evicted (an :class:`Evict` reason) until it is requeued."""
    evicted_at: float = 0.0
    requeue_count: int = 0
    """waitForPodsReady requeues so far (Kueue's ``requeueState.count``)."""
    requeue_at: float | None = None
    """No admission before this time (Kueue's ``requeueState.requeueAt``)."""
    deactivate: bool = False
    """The requeuing limit is spent: deactivate on the next Requeue."""

    @property
    def id(self) -> int:
        return self.facts.id
