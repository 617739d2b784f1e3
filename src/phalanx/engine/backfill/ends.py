"""When the running jobs end: what a backfill plan starts from.

Per node (the :class:`~phalanx.engine.backfill.plans.Timeline`) and per quota
tree (:class:`~phalanx.engine.backfill.plans.QuotaEnds`), built at the first
pass and kept up to date as jobs start and end; a change of nodes or quotas
drops them, to be built again.
"""

from __future__ import annotations

import bisect
import math
from typing import TYPE_CHECKING

from phalanx.engine.backfill.plans import (
    QuotaEnds,
    Timeline,
    planned_end,
)
from phalanx.engine.cache.quota import FlavorResource
from phalanx.engine.state import Admission, JobRecord

if TYPE_CHECKING:
    from phalanx.engine.engine import Engine


class RunningEnds:
    """The running jobs' planned ends, per node and per quota tree."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.running: dict[str, list[tuple[float, dict[FlavorResource, int], str]]] | None = None
        self.quota_ends: dict[str, QuotaEnds] = {}
        """Per quota tree, the sums of what its running jobs give back (until they change)."""
        """Admitted jobs' planned ends (see :meth:`_running_ends`); None: to rebuild."""
        self.timeline: Timeline | None = None
        """When the running jobs end, per node: built at the first pass, then kept up to
        date as jobs start and end (None: to rebuild)."""

    def timeline_now(self) -> Timeline:
        if self.timeline is None:
            admitted = (r for jobs in self._engine.admitted_by_cq.values() for r in jobs.values())
            self.timeline = Timeline(admitted)
        return self.timeline

    def quota_ends_of(self, root: str) -> QuotaEnds:
        found = self.quota_ends.get(root)
        if found is None:
            found = self.quota_ends[root] = QuotaEnds(self._running_ends().get(root, []))
        return found

    def changed(self) -> None:
        """Jobs' ends or the quota trees changed in a way not tracked one by one."""
        self.running = None
        self.quota_ends.clear()
        self.timeline = None

    def ended(self, rec: JobRecord, adm: Admission) -> None:
        """A job gave back its nodes and quota: take it out of the running ends, and
        hold for the reservations of its tree what it was to give back to them."""
        end = planned_end(rec.job.time_limit, adm)
        self._drop_end(rec, adm)
        if self._engine.reserved.by_job:
            info = self._engine.cache.cluster_queues.get(adm.cluster_queue)
            if info is not None:
                self._engine.reserved.rehold(info.root_key, end)

    def _drop_end(self, rec: JobRecord, adm: Admission) -> None:
        if self.timeline is not None:
            self.timeline.ended(rec)
        self.quota_ends.clear()
        ends = self.running
        if ends is None:
            return
        end = planned_end(rec.job.time_limit, adm)
        if end == math.inf:
            return
        info = self._engine.cache.cluster_queues.get(adm.cluster_queue)
        keys = ["cq:" + adm.cluster_queue]
        if info is not None:
            keys.append(info.root_key)
        for key in keys:
            entries = ends.get(key)
            if not entries:
                continue
            i = bisect.bisect_left(entries, end, key=lambda e: e[0])
            while i < len(entries) and entries[i][0] == end:
                if entries[i][1] is adm.usage:
                    del entries[i]
                    break
                i += 1
            else:
                # Not where expected (the tree changed): rebuilt when next needed.
                self.running = None
                return

    def _running_ends(self) -> dict[str, list[tuple[float, dict[FlavorResource, int], str]]]:
        """Admitted jobs with a time limit by quota tree (and by ``cq:<ClusterQueue>``),
        as ``(planned end, quota usage, ClusterQueue)``, soonest first; a job being
        evicted ends now. Kept up to date as jobs are admitted and released."""
        if self.running is not None:
            return self.running
        ends: dict[str, list[tuple[float, dict[FlavorResource, int], str]]] = {}
        for cq_name, jobs in self._engine.admitted_by_cq.items():
            info = self._engine.cache.cluster_queues.get(cq_name)
            tree = ends.setdefault(info.root_key if info is not None else "", [])
            own = ends.setdefault("cq:" + cq_name, [])
            for rec in jobs.values():
                adm = rec.admission
                assert adm is not None
                end = planned_end(rec.job.time_limit, adm)
                if end == math.inf:
                    continue
                tree.append((end, adm.usage, cq_name))
                own.append((end, adm.usage, cq_name))
        for tree_ends in ends.values():
            tree_ends.sort(key=lambda e: e[0])
        self.running = ends
        self.quota_ends.clear()
        return ends
