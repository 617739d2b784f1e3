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

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from phalanx.engine.assigner import Assignment, FlavorAssigner
from phalanx.engine.cache import ClusterQueueInfo
from phalanx.engine.capacity import NodeSlot
from phalanx.engine.quota import FlavorResource
from phalanx.engine.shapes import JobShape

__all__ = ["Holds", "Reservation", "plan_start", "round_up"]


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


def plan_start(
    shape: JobShape,
    info: ClusterQueueInfo,
    ends: Sequence[tuple[float, int]],
    now: float,
    window_s: float,
    resolution_s: float,
    assigner: FlavorAssigner,
    lift: Callable[[int], None],
    put_back: Callable[[int], None],
) -> tuple[float, Assignment, list[int]] | None:
    """The earliest planned start of ``shape`` in ``info``, the assignment it gets then and
    the running jobs that will have ended by then.

    ``ends`` are the running jobs as ``(end time, job id)``, sorted by end time;
    ``lift(job_id)`` takes a running job's quota and nodes away for the trial (held
    nodes stay held) and ``put_back(job_id)`` undoes it. Nothing is changed when this
    returns: every lifted job is put back.
    """
    horizon = now + window_s
    # Group the end times by resolution; each group is one step of the plan.
    steps: list[tuple[float, list[int]]] = []
    for end, job_id in ends:
        t = max(now, round_up(end, resolution_s))
        if t > horizon:
            break
        if steps and steps[-1][0] == t:
            steps[-1][1].append(job_id)
        else:
            steps.append((t, [job_id]))
    if not steps:
        return None
    lifted = 0

    def advance(upto: int) -> None:
        nonlocal lifted
        while lifted < upto:
            for job_id in steps[lifted][1]:
                lift(job_id)
            lifted += 1
        while lifted > upto:
            lifted -= 1
            for job_id in reversed(steps[lifted][1]):
                put_back(job_id)
        assigner.generation += 1

    def fits(n: int) -> Assignment | None:
        advance(n)
        trial = assigner.assign_fresh(shape, info)
        return trial if trial.ok else None

    try:
        # Exponential search for a step where it fits, then bisect for the first one.
        lo, hi = 0, 1
        found: Assignment | None = None
        while True:
            hi = min(hi, len(steps))
            found = fits(hi)
            if found is not None or hi == len(steps):
                break
            lo, hi = hi, hi * 2
        if found is None:
            return None
        while hi - lo > 1:
            mid = (lo + hi) // 2
            trial = fits(mid)
            if trial is not None:
                hi, found = mid, trial
            else:
                lo = mid
        if lifted != hi:
            found = fits(hi)
            assert found is not None
        return steps[hi - 1][0], found, [j for _, group in steps[:hi] for j in group]
    finally:
        advance(0)
