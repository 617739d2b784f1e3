"""What reservations hold: whole nodes, and quota.

A reservation holds its planned nodes
(:class:`~phalanx.engine.backfill.plans.Holds`) and the quota its job needs
beyond what the running jobs of its quota tree give back by its start. The
backfill pass makes them (or the cycle, at once, for a head blocked between
passes); they are dropped when their job is tried again, planned again, or gone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from phalanx.engine.backfill.plans import (
    Holds,
    Reservation,
)
from phalanx.engine.cache.capacity import NodeSlot
from phalanx.engine.cache.cluster import ClusterQueueInfo
from phalanx.engine.cache.quota import FlavorResource
from phalanx.engine.state import JobRecord

if TYPE_CHECKING:
    from phalanx.engine.engine import Engine


class Reservations:
    """The reservations held now, by job, with their nodes and quota."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.by_job: dict[int, Reservation] = {}
        self._by_cq: dict[str, dict[int, Reservation]] = {}
        """``by_job`` by ClusterQueue (kept with it by :meth:`_put` and :meth:`_take`)."""
        self.holds = Holds()
        """Whole nodes held for reservations (see engine/backfill.py)."""

    def export(self) -> dict[str, Any]:
        """This part of an engine snapshot (:mod:`phalanx.engine.snapshot`)."""
        return {
            "reservations": [
                [
                    r.job_id,
                    r.cluster_queue,
                    r.start,
                    list(r.nodes),
                    [[*flavor_resource, v] for flavor_resource, v in r.quota],
                    [[*flavor_resource, v] for flavor_resource, v in r.needs],
                ]
                for r in self.by_job.values()
            ]
        }

    def load(self, data: Mapping[str, Any]) -> None:
        """After the jobs: nodes are held and quota charged again (the capacity
        buckets are restored as exported, holds included)."""
        nodes = self._engine.cache.nodes
        for job_id, cq_name, start, names, quota, *needs in data.get("reservations", []):
            res = Reservation(
                job_id,
                cq_name,
                start,
                tuple(names),
                tuple(((f, r), v) for f, r, v in quota),
                tuple(((f, r), v) for f, r, v in (needs[0] if needs else ())),
            )
            for name in res.nodes:
                self.holds.hold(nodes[name], job_id)
            self.hold_quota(res, 1)
            self._put(res)

    def _put(self, res: Reservation) -> None:
        old = self.by_job.get(res.job_id)
        if old is not None and old.cluster_queue != res.cluster_queue:
            self._by_cq[old.cluster_queue].pop(res.job_id)
        self.by_job[res.job_id] = res
        self._by_cq.setdefault(res.cluster_queue, {})[res.job_id] = res

    def _take(self, job_id: int) -> Reservation:
        res = self.by_job.pop(job_id)
        mine = self._by_cq[res.cluster_queue]
        del mine[job_id]
        if not mine:
            del self._by_cq[res.cluster_queue]
        return res

    def in_queue(self, cluster_queue: str) -> Iterable[Reservation]:
        """The reservations held for jobs of ``cluster_queue``."""
        mine = self._by_cq.get(cluster_queue)
        return mine.values() if mine is not None else ()

    def hold(self, res: Reservation) -> None:
        holds, nodes = self.holds, self._engine.cache.nodes
        names = []
        for name in res.nodes:
            slot = nodes.get(name)
            if slot is not None and slot not in holds.owner:
                if holds.hold(slot, res.job_id):
                    self._engine.cache.reindex(slot)
                names.append(name)
        kept = replace(res, nodes=tuple(names))
        self.hold_quota(kept, 1)
        self._put(kept)
        self._engine.assigner.generation += 1

    def hold_quota(self, r: Reservation, sign: int) -> None:
        info = self._engine.cache.cluster_queues.get(r.cluster_queue)
        if info is not None:
            for flavor_resource, amount in r.quota:
                if sign > 0:
                    info.node.add_usage(flavor_resource, amount)
                else:
                    info.node.remove_usage(flavor_resource, amount)

    def wake_holders(self, root: str, slots: Iterable[NodeSlot]) -> None:
        """A release in a reserved job's quota tree or on its held nodes: try it again.
        Its own holds hide what was freed from the conditions it parked on."""
        owners = {self.holds.owner.get(slot) for slot in slots}
        items: list[Any] = []
        for r in self.by_job.values():
            holder = self._engine.jobs[r.job_id]
            shape_queue = holder.queue
            if shape_queue is None:
                continue
            info = self._engine.cache.cluster_queues.get(r.cluster_queue)
            # Before its start only a release on its own nodes can change its plan much;
            # from then on, any release in its quota tree may let it start.
            due = self._engine.now >= r.start
            if r.job_id in owners or (due and info is not None and root and info.root_key == root):
                items.append(shape_queue.cq if shape_queue.cq.strict else shape_queue)
        if items:
            self._engine.queues.wake(items)

    def reserve(
        self,
        rec: JobRecord,
        info: ClusterQueueInfo,
        start: float,
        slots: list[NodeSlot],
        needs: dict[FlavorResource, int],
    ) -> None:
        """Hold the planned nodes, and the quota the job needs beyond what the running
        jobs of its quota tree give back by ``start`` (so jobs that outlive the
        reservation cannot take it); :meth:`_rehold` keeps that true as jobs end."""
        holds = self.holds
        names: list[str] = []
        for slot in slots:
            if slot not in holds.owner:
                if holds.hold(slot, rec.id):
                    self._engine.cache.reindex(slot)
                names.append(slot.name)
        wanted = tuple(sorted(needs.items()))
        quota = self._to_hold(info, start, wanted)
        for flavor_resource, amount in quota:
            info.node.add_usage(flavor_resource, amount)
        self._put(Reservation(rec.id, info.name, start, tuple(names), quota, wanted))
        self._engine.assigner.generation += 1

    def _to_hold(
        self,
        info: ClusterQueueInfo,
        start: float,
        needs: tuple[tuple[FlavorResource, int], ...],
    ) -> tuple[tuple[FlavorResource, int], ...]:
        """The part of ``needs`` the running jobs of ``info``'s quota tree do not give
        back by ``start``: held from now, the rest comes free as they end. The tree's
        ends count as the plan counts them (:func:`plan_quota`)."""
        tree = self._engine.ends.quota_ends_of(info.root_key)
        held = []
        for flavor_resource, amount in needs:
            short = amount - tree.returned(flavor_resource, start, amount)
            if short > 0:
                held.append((flavor_resource, short))
        return tuple(held)

    def rehold(self, root: str, end: float) -> None:
        """A job of the quota tree ``root`` planned to end at ``end`` ended: what it was
        to give back by a reservation's start is free now, so the reservation holds it
        from now on (and whatever the end gave back beyond that stays free). A job
        planned to end after a reservation's start changes nothing it holds."""
        clusters = self._engine.cache.cluster_queues
        for r in list(self.by_job.values()):
            if r.start < end or not r.needs:
                continue
            info = clusters.get(r.cluster_queue)
            if info is None or info.root_key != root:
                continue
            quota = self._to_hold(info, r.start, r.needs)
            if quota == r.quota:
                continue
            self.hold_quota(r, -1)
            r = replace(r, quota=quota)
            self._put(r)
            self.hold_quota(r, 1)
            self._engine.assigner.generation += 1

    def drop(self, job_id: int, wake: bool = True) -> None:
        """Give back what a reservation holds and (``wake``) wake what waits for it."""
        res = self._take(job_id)
        holds, nodes, owner = self.holds, self._engine.cache.nodes, self.holds.owner
        keys: list[str] = []
        reindex = self._engine.cache.reindex
        for name in res.nodes:
            slot = nodes.get(name)
            if slot is not None and owner.get(slot) == job_id:
                if holds.unhold(slot):
                    reindex(slot)
                if wake:
                    keys.extend("flavor:" + index.name for index in slot.flavors)
        info = self._engine.cache.cluster_queues.get(res.cluster_queue)
        root = ""
        usage: dict[FlavorResource, int] = {}
        levels: dict[FlavorResource, int] = {}
        if info is not None and res.quota:
            for flavor_resource, amount in res.quota:
                info.node.remove_usage(flavor_resource, amount)
            if wake:
                root, usage = info.root_key, dict(res.quota)
                top = info.node.top or info.node
                levels = {
                    flavor_resource: top.subtree.get(flavor_resource, 0)
                    - top.usage.get(flavor_resource, 0)
                    for flavor_resource in usage
                }
        self._engine.assigner.generation += 1
        if wake:
            self._engine.queues.release(root, usage, levels, list(dict.fromkeys(keys)))

    def drop_all(self, wake: bool = True) -> None:
        """Before the nodes or quotas change (or a pass): every reservation is planned
        again. With ``wake``, their jobs are tried again too: parked, they would not be
        heads, and lower jobs of their ClusterQueues would start on what they were held
        before anything is planned for them again."""
        holders: list[Any] = []
        for job_id in list(self.by_job):
            if wake:
                shape_queue = self._engine.jobs[job_id].queue
                if shape_queue is not None:
                    holders.append(shape_queue.cq if shape_queue.cq.strict else shape_queue)
            self.drop(job_id, wake)
        if holders:
            self._engine.queues.wake(holders)

    def in_order(self) -> list[Reservation]:
        """The reservations held now, in their jobs' order (:meth:`plan_order`)."""
        return sorted(
            self.by_job.values(),
            key=lambda r: self._engine.backfill.plan_order(self._engine.jobs[r.job_id]),
        )

    def get(self, job_id: int) -> Reservation | None:
        return self.by_job.get(job_id)
