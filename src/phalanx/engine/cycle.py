"""One scheduling cycle's working state, passed to each part the cycle calls.

The engine's own fields hold what lasts between cycles; what a cycle learns on its
way (the decisions so far, whether it ends with a backfill pass, where held nodes
had no room, which reservations were opened for their own job's retry) lives here
and is gone when the cycle returns, as in the Kubernetes scheduler framework's
``CycleState``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from phalanx.engine.backfill.plans import Reservation
    from phalanx.engine.decisions import Decision
    from phalanx.engine.placement.assigner import Assignment
    from phalanx.engine.queueing.queues import ShapeQueue
    from phalanx.engine.state import JobRecord

__all__ = ["CycleState", "Entry", "Probe"]

Entry = tuple[int, tuple[float, float, int], "JobRecord", "ShapeQueue", "Assignment"]
"""A head in a round: ``(borrowing height, sort key, job, its shape queue, assignment)``."""

Probe = Callable[[str, int], None]
"""Observes a cycle (see :meth:`phalanx.engine.engine.Engine.cycle`)."""


@dataclass(slots=True)
class CycleState:
    now: float
    decisions: list[Decision]
    """What the cycle has decided so far, in order (the cycle's result)."""
    probe: Probe | None = None
    backfill_pass: bool = False
    """The cycle ends with a backfill pass: blocked heads leave planning to it."""
    blocked: bool = False
    """waitForPodsReady's blockAdmission stopped the rounds."""
    claimed: set[int] = field(default_factory=set)
    """Jobs already chosen as preemption targets in this cycle."""
    no_room: dict[tuple[object, str], float] = field(default_factory=dict)
    """Per (shape, ClusterQueue): the shortest end that found no room on held nodes
    (within a cycle held nodes only fill up)."""
    retried: dict[int, Reservation] = field(default_factory=dict)
    """Reservations opened for their own job's attempt in this cycle."""
