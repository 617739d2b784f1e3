"""Decisions: everything the engine decides goes out as one of these."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from phalanx.engine.reasons import Reason, reason_from_dict

__all__ = [
    "Admit",
    "Decision",
    "Evict",
    "NodeAssignment",
    "Pending",
    "PodSetAssignment",
    "decision_from_dict",
]


@dataclass(frozen=True, slots=True)
class NodeAssignment:
    """``count`` tasks of a pod set on ``node``."""

    node: str
    count: int


@dataclass(frozen=True, slots=True)
class PodSetAssignment:
    name: str
    flavors: tuple[tuple[str, str], ...]
    """``(resource, flavor)`` for every requested resource."""
    nodes: tuple[NodeAssignment, ...]

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "flavors": dict(self.flavors),
            "nodes": [{"node": n.node, "count": n.count} for n in self.nodes],
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


@dataclass(frozen=True, slots=True)
class Evict:
    """Stop an admitted job and requeue it (for example its ClusterQueue is HoldAndDrain)."""

    job_id: int
    reason: str

    def to_dict(self) -> dict[str, object]:
        return {"type": "Evict", "job_id": self.job_id, "reason": self.reason}


Decision = Admit | Pending | Evict


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
                    nodes=tuple(NodeAssignment(n["node"], int(n["count"])) for n in p["nodes"]),
                )
                for p in data["pod_sets"]
            ),
        )
    if kind == "Pending":
        return Pending(int(data["job_id"]), reason_from_dict(data))
    if kind == "Evict":
        return Evict(int(data["job_id"]), str(data["reason"]))
    raise ValueError(f"unknown decision type {kind!r}")
