"""Decisions: everything the engine decides goes out as one of these."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from phalanx.engine.explain.reasons import Reason, reason_from_dict

__all__ = [
    "Admit",
    "Deactivate",
    "Decision",
    "Evict",
    "NodeAssignment",
    "NodesReplaced",
    "Pending",
    "PodSetAssignment",
    "decision_from_dict",
]


@dataclass(frozen=True, slots=True)
class NodeAssignment:
    """``count`` tasks of a pod set on ``node``; ``gpus`` are the GPU device indices
    its tasks see, task after task (each task's whole GPUs, or the one device of its
    share), empty when the tasks ask for no GPU."""

    node: str
    count: int
    gpus: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"node": self.node, "count": self.count}
        if self.gpus:
            out["gpus"] = list(self.gpus)
        return out


@dataclass(frozen=True, slots=True)
class PodSetAssignment:
    name: str
    flavors: tuple[tuple[str, str], ...]
    """``(resource, flavor)`` for every requested resource."""
    nodes: tuple[NodeAssignment, ...]
    count: int = -1
    """Tasks admitted: the pod set's ``count``, or fewer when partially admitted
    (``minCount``). ``-1`` when built without it: the sum of the node counts."""

    def __post_init__(self) -> None:
        if self.count < 0:
            object.__setattr__(self, "count", sum(n.count for n in self.nodes))

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "flavors": dict(self.flavors),
            "count": self.count,
            "nodes": [n.to_dict() for n in self.nodes],
        }


@dataclass(frozen=True, slots=True)
class Admit:
    """Quota reserved in ``cluster_queue`` and every task placed."""

    job_id: int
    cluster_queue: str
    pod_sets: tuple[PodSetAssignment, ...]
    borrowing: bool
    priority: float

    @property
    def nodes(self) -> list[str]:
        seen: dict[str, None] = {}
        for pod_set in self.pod_sets:
            for n in pod_set.nodes:
                seen[n.node] = None
        return list(seen)

    @property
    def flavor(self) -> str:
        """The flavor of the first pod set's first resource (for one-flavor jobs: the flavor)."""
        flavors = self.pod_sets[0].flavors if self.pod_sets else ()
        return flavors[0][1] if flavors else ""

    def to_dict(self) -> dict[str, object]:
        return {
            "type": "Admit",
            "job_id": self.job_id,
            "cluster_queue": self.cluster_queue,
            "borrowing": self.borrowing,
            "priority": self.priority,
            "pod_sets": [p.to_dict() for p in self.pod_sets],
        }


@dataclass(frozen=True, slots=True)
class Pending:
    """The job stays pending; emitted when its reason changes."""

    job_id: int
    reason: Reason

    def to_dict(self) -> dict[str, object]:
        return {"type": "Pending", "job_id": self.job_id, **self.reason.to_dict()}


EVICTION_REASONS = (
    "Preempted",
    "PodsReadyTimeout",
    "ClusterQueueStopped",
    "LocalQueueStopped",
    "Deactivated",
)
"""Kueue's ``Evicted`` condition reasons."""

PREEMPTION_REASONS = (
    "InClusterQueue",
    "InCohortReclamation",
    "InCohortFairSharing",
    "InCohortReclaimWhileBorrowing",
)
"""Kueue's ``Preempted`` condition reasons (``preemption_reason`` of a ``Preempted`` Evict)."""


@dataclass(frozen=True, slots=True, repr=False)
class Evict:
    """Stop an admitted job (Kueue's ``Evicted`` condition).

    Eviction is asynchronous: the job keeps its quota and nodes until the caller
    applies ``Requeue`` (back to pending) or ``Finish``. ``reason`` is one of
    :data:`EVICTION_REASONS`; a ``Preempted`` eviction names the ``preemptor`` job
    and the ``preemption_reason`` (one of :data:`PREEMPTION_REASONS`), and says what
    to do with the victim, from its ClusterQueue's settings: ``mode`` ``REQUEUE``
    (back to pending) or ``CANCEL`` (it ends PREEMPTED), and ``grace_period_s``
    between SIGTERM and SIGKILL (0: the job's own kill wait). Where the victim was
    chosen over equal candidates for losing less work since a checkpoint,
    ``lost_gpu_hours`` is what it loses and ``spared`` the equal candidates kept,
    as ``(job id, GPU-hours they would have lost)``.
    """

    job_id: int
    reason: str
    message: str = ""
    preemptor: int | None = None
    preemption_reason: str | None = None
    mode: str = "REQUEUE"
    grace_period_s: float = 0.0
    lost_gpu_hours: float | None = None
    spared: tuple[tuple[int, float], ...] = ()

    def __repr__(self) -> str:
        # The dataclass repr, with the lost-work fields only when set (recorded
        # decision digests stay comparable).
        fields = (
            f"job_id={self.job_id!r}, reason={self.reason!r}, message={self.message!r}, "
            f"preemptor={self.preemptor!r}, preemption_reason={self.preemption_reason!r}, "
            f"mode={self.mode!r}, grace_period_s={self.grace_period_s!r}"
        )
        if self.lost_gpu_hours is not None or self.spared:
            fields += f", lost_gpu_hours={self.lost_gpu_hours!r}, spared={self.spared!r}"
        return f"Evict({fields})"

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "type": "Evict",
            "job_id": self.job_id,
            "reason": self.reason,
            "message": self.message,
        }
        if self.preemptor is not None:
            out["preemptor"] = self.preemptor
        if self.preemption_reason is not None:
            out["preemption_reason"] = self.preemption_reason
        if self.mode != "REQUEUE":
            out["mode"] = self.mode
        if self.grace_period_s:
            out["grace_period_s"] = self.grace_period_s
        if self.lost_gpu_hours is not None:
            out["lost_gpu_hours"] = self.lost_gpu_hours
        if self.spared:
            out["spared"] = [list(s) for s in self.spared]
        return out


@dataclass(frozen=True, slots=True)
class Deactivate:
    """Kueue sets ``spec.active=false``: the job leaves the queue for good.

    For example ``RequeuingLimitExceeded`` once waitForPodsReady's
    ``backoffLimitCount`` is spent. The job holds nothing any more; the control
    plane ends it (state FAILED, the reason kept).
    """

    job_id: int
    reason: str
    message: str = ""

    def to_dict(self) -> dict[str, object]:
        return {
            "type": "Deactivate",
            "job_id": self.job_id,
            "reason": self.reason,
            "message": self.message,
        }


@dataclass(frozen=True, slots=True)
class NodesReplaced:
    """Failed nodes of an admitted job replaced by healthy ones in their topology domains
    (:mod:`phalanx.engine.hotswap`): the job keeps its admission; ``admit`` is its new
    placement, where it restarts."""

    job_id: int
    replaced: tuple[tuple[str, str], ...]
    """``(failed node, replacement)``."""
    admit: Admit

    def to_dict(self) -> dict[str, object]:
        return {
            "type": "NodesReplaced",
            "job_id": self.job_id,
            "replaced": [list(r) for r in self.replaced],
            "admit": self.admit.to_dict(),
        }


Decision = Admit | Pending | Evict | Deactivate | NodesReplaced


def decision_from_dict(data: dict[str, Any]) -> Decision:
    """Rebuild a decision from :meth:`to_dict` output."""
    kind = data["type"]
    if kind == "Admit":
        return Admit(
            job_id=int(data["job_id"]),
            cluster_queue=str(data["cluster_queue"]),
            borrowing=bool(data["borrowing"]),
            priority=float(data["priority"]),
            pod_sets=tuple(
                PodSetAssignment(
                    name=p["name"],
                    flavors=tuple(sorted(p["flavors"].items())),
                    nodes=tuple(
                        NodeAssignment(
                            n["node"], int(n["count"]), tuple(int(g) for g in n.get("gpus", ()))
                        )
                        for n in p["nodes"]
                    ),
                    count=int(p.get("count", -1)),
                )
                for p in data["pod_sets"]
            ),
        )
    if kind == "Pending":
        return Pending(int(data["job_id"]), reason_from_dict(data))
    if kind == "Evict":
        preemptor = data.get("preemptor")
        return Evict(
            int(data["job_id"]),
            str(data["reason"]),
            str(data.get("message", "")),
            int(preemptor) if preemptor is not None else None,
            data.get("preemption_reason"),
            str(data.get("mode", "REQUEUE")),
            float(data.get("grace_period_s", 0.0)),
            None if data.get("lost_gpu_hours") is None else float(data["lost_gpu_hours"]),
            tuple((int(j), float(h)) for j, h in data.get("spared", ())),
        )
    if kind == "Deactivate":
        return Deactivate(int(data["job_id"]), str(data["reason"]), str(data.get("message", "")))
    if kind == "NodesReplaced":
        admit = decision_from_dict(data["admit"])
        assert isinstance(admit, Admit)
        return NodesReplaced(
            int(data["job_id"]), tuple((str(a), str(b)) for a, b in data["replaced"]), admit
        )
    raise ValueError(f"unknown decision type {kind!r}")
