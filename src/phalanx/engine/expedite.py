"""Expedited requeue (Slurm 25.11's ``--requeue=expedite``).

A job requeued with ``Requeue(expedite=True, nodes=...)`` (its node failed) is:

* **first**: its sort key is overridden to ``(-inf, -inf, order_time, id)``
  (:func:`expedited_key`), so it heads its ClusterQueue's heap, and in a round
  the expedited entries are decided before every other (across queues, before
  non-borrowing order and fair sharing); among themselves by requeue order time
  then id, so the engine stays deterministic;
* **holding its healthy nodes**: the nodes the event names (the job's previous
  nodes that are still up) are held for it with the reservations' node holds
  (:class:`~phalanx.engine.backfill.plans.Holds`, shared with
  :class:`~phalanx.engine.backfill.reservations.Reservations`), so nothing else
  is placed there, and what other jobs there free goes to the hold too;
* **placed there first**: when it is nominated its held nodes are opened for
  its own attempt only, and the assigner moves its units onto them
  (:meth:`~phalanx.engine.placement.assigner.FlavorAssigner.assign` with
  ``prefer``); replacements come from the rest of the cluster. In a flavor with
  a Topology, the domain holding them wins among those of the level the request
  picks, and the descent takes them first
  (:func:`~phalanx.engine.placement.topology.place_in_topology`).

A hold ends when the job is admitted, cancelled or finishes, or
:data:`EXPEDITE_HOLD_S` seconds after the first cycle that saw it (its ``until``
is set then; :meth:`Engine.next_wakeup` reports it). From then on the job keeps
its place first in the order but the nodes are free for anyone.

An engine rebuilt after the requeue (a restarted control plane) gets the same
state back with the :class:`~phalanx.engine.events.Expedite` event, applied to
the job once it is pending again: its hold is bounded from the requeue's time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from phalanx.engine.cache.capacity import NodeSlot
from phalanx.engine.state import JobRecord

if TYPE_CHECKING:
    from phalanx.engine.engine import Engine

__all__ = ["EXPEDITE_HOLD_S", "ExpediteHold", "ExpeditedJobs", "expedited_key"]

EXPEDITE_HOLD_S = 300.0
"""How long an expedited job's healthy nodes stay held for it, at most."""


def expedited_key(rec: JobRecord) -> tuple[float, float, float, int]:
    """The sort key of an expedited job: before every other key."""
    return (-math.inf, -math.inf, rec.order_time, rec.facts.id)


def _owner(job_id: int) -> int:
    """The holds' owner of an expedited job's nodes: not its id, which a backfill
    reservation of the same job would share (a reservation's held nodes may be lent
    to jobs that end before its start; these are lent to no one)."""
    return -1 - job_id


@dataclass(slots=True)
class ExpediteHold:
    nodes: tuple[str, ...]
    """The nodes held for it (its previous healthy nodes), in the event's order."""
    until: float | None = None
    """When the hold lapses (set by the first cycle after the requeue)."""
    held: bool = False
    """Whether its nodes are held now (False while opened for its own attempt)."""


class ExpeditedJobs:
    """The expedited jobs waiting to restart, and the nodes held for them."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.jobs: dict[int, ExpediteHold] = {}

    # ------------------------------------------------------------------ snapshot

    def export(self) -> dict[str, Any]:
        """This part of an engine snapshot (:mod:`phalanx.engine.snapshot`)."""
        if not self.jobs:
            return {}
        return {"expedite": [[j, list(h.nodes), h.until, h.held] for j, h in self.jobs.items()]}

    def load_jobs(self, data: Mapping[str, Any]) -> None:
        """Before the jobs: which are expedited (their sort keys depend on it)."""
        for job_id, nodes, until, held in data.get("expedite", []):
            self.jobs[int(job_id)] = ExpediteHold(tuple(nodes), until, False)
            if held:
                self.jobs[int(job_id)].held = True

    def load(self) -> None:
        """After the jobs and reservations: hold the nodes again (the capacity buckets
        are restored as exported, holds included)."""
        for job_id, hold in self.jobs.items():
            if hold.held:
                hold.held = False
                self._hold(job_id, hold)

    # ------------------------------------------------------------------ events

    def is_expedited(self, rec: JobRecord) -> bool:
        return rec.facts.id in self.jobs

    def requeue(self, job_id: int, nodes: tuple[str, ...]) -> None:
        """An admitted job requeued with ``expedite``: no backoff, first in order, and
        ``nodes`` (its previous healthy nodes) held for it."""
        engine = self._engine
        rec = engine.jobs.get(job_id)
        if rec is None or rec.admission is None:
            return
        self.forget(job_id)
        self.jobs[job_id] = hold = ExpediteHold(tuple(dict.fromkeys(nodes)))
        rec.requeue_at = None
        engine.lifecycle.requeue(job_id)
        if engine.jobs.get(job_id) is not rec or rec.admission is not None:
            # Deactivated (its requeuing limit was spent).
            del self.jobs[job_id]
            return
        self._hold(job_id, hold)

    def restore(self, job_id: int, nodes: tuple[str, ...], since: float) -> None:
        """A pending job expedited by a requeue at ``since`` that this engine did not see:
        first in the order, ``nodes`` held for it until ``since`` plus the bound."""
        engine = self._engine
        rec = engine.jobs.get(job_id)
        if rec is None or rec.admission is not None:
            return
        self.forget(job_id)
        self.jobs[job_id] = hold = ExpediteHold(
            tuple(dict.fromkeys(nodes)), until=since + EXPEDITE_HOLD_S
        )
        engine.priorities.reprioritize([rec])
        if engine.lifecycle.backoff.pop(job_id, None) is not None:
            # No backoff for an expedited requeue.
            rec.requeue_at = None
            rec.waiting = None
            engine.lifecycle.enqueue(rec)
        if hold.nodes:
            self._hold(job_id, hold)

    def forget(self, job_id: int) -> None:
        """It was admitted, cancelled or finished: its nodes are free again."""
        hold = self.jobs.pop(job_id, None)
        if hold is not None and hold.held:
            self._unhold(job_id, hold)

    def lapse(self, now: float) -> None:
        """Holds seen for the first time get their bound; those past it end."""
        for job_id, hold in list(self.jobs.items()):
            if hold.until is None:
                hold.until = now + EXPEDITE_HOLD_S
            elif hold.until <= now and hold.held:
                self._unhold(job_id, hold)
                hold.nodes = ()

    def next_times(self) -> list[float]:
        return [h.until for h in self.jobs.values() if h.until is not None and h.nodes]

    # ------------------------------------------------------------------ nodes

    def preferred(self, job_id: int) -> frozenset[NodeSlot]:
        hold = self.jobs.get(job_id)
        if hold is None:
            return frozenset()
        nodes = self._engine.cache.nodes
        return frozenset(nodes[n] for n in hold.nodes if n in nodes)

    def open(self, job_id: int) -> None:
        """Its held nodes are free for its own attempt."""
        hold = self.jobs.get(job_id)
        if hold is not None and hold.held:
            self._unhold(job_id, hold, wake=False)

    def close(self, job_id: int) -> None:
        """Its attempt failed (or is over): held again, before anyone else is tried."""
        hold = self.jobs.get(job_id)
        if hold is not None and not hold.held and hold.nodes:
            self._hold(job_id, hold)

    def unhold_all(self) -> None:
        """Before a node changes: its hold would not survive the node's reset."""
        for job_id, hold in self.jobs.items():
            if hold.held:
                self._unhold(job_id, hold, wake=False)
                hold.held = True  # to be held again by :meth:`rehold_all`

    def rehold_all(self) -> None:
        for job_id, hold in self.jobs.items():
            if hold.held:
                hold.held = False
                self._hold(job_id, hold)

    def wake(self) -> None:
        """Something was released: the expedited jobs try again (a release on their
        held nodes goes to the hold and wakes nobody else)."""
        items: list[Any] = []
        for job_id in self.jobs:
            rec = self._engine.jobs.get(job_id)
            if rec is not None and rec.queue is not None:
                items.append(rec.queue.cq if rec.queue.cq.strict else rec.queue)
        if items:
            self._engine.queues.wake(items)

    def _hold(self, job_id: int, hold: ExpediteHold) -> None:
        engine = self._engine
        holds, nodes = engine.reserved.holds, engine.cache.nodes
        for name in hold.nodes:
            slot = nodes.get(name)
            if slot is not None and slot not in holds.owner and holds.hold(slot, _owner(job_id)):
                engine.cache.reindex(slot)
        hold.held = True
        engine.assigner.generation += 1

    def _unhold(self, job_id: int, hold: ExpediteHold, wake: bool = True) -> None:
        engine = self._engine
        holds, nodes = engine.reserved.holds, engine.cache.nodes
        keys: list[str] = []
        for name in hold.nodes:
            slot = nodes.get(name)
            if slot is not None and holds.owner.get(slot) == _owner(job_id):
                if holds.unhold(slot):
                    engine.cache.reindex(slot)
                keys.extend("flavor:" + index.name for index in slot.flavors)
        hold.held = False
        engine.assigner.generation += 1
        if wake and keys:
            engine.queues.release("", {}, {}, list(dict.fromkeys(keys)))
