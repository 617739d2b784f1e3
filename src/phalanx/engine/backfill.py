"""Backfill: reservations for blocked jobs and start-time estimates.

A :class:`Reservation` is the plan for one blocked job: the earliest time its
whole gang fits, computed from the running jobs' time limits, and the nodes it
will start on then. The engine keeps those nodes for it; lower jobs start now
only where they cannot delay it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Reservation"]


@dataclass(frozen=True, slots=True)
class Reservation:
    """Nodes held for ``job_id`` from now until it starts, planned at ``start``."""

    job_id: int
    cluster_queue: str
    start: float
    nodes: tuple[str, ...]

    def to_dict(self) -> dict[str, object]:
        return {
            "job_id": self.job_id,
            "cluster_queue": self.cluster_queue,
            "start": self.start,
            "nodes": list(self.nodes),
        }
