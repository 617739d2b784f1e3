"""Kueue's Admission Fair Sharing in the engine.

ClusterQueues with ``admissionScope.admissionMode: UsageBasedAdmissionFairSharing``
order their pending jobs by their LocalQueue's decayed usage first
(:class:`~phalanx.engine.admissionfairsharing.usage.LocalQueueUsage`), then as
usual. This owner keeps the usage, samples it on the configured interval, and
re-keys the jobs whose LocalQueue's score changed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from phalanx.engine.admissionfairsharing.usage import LocalQueueUsage, base_units
from phalanx.engine.cache.quota import FlavorResource
from phalanx.engine.state import JobRecord

if TYPE_CHECKING:
    from phalanx.engine.engine import Engine


class AdmissionFairSharing:
    """LocalQueue usage, the scores it gives, and the jobs keyed by them."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        afs = engine.config.admission_fair_sharing
        self.usage = LocalQueueUsage(afs) if afs is not None else None
        """Admission Fair Sharing's LocalQueue usage (None: off)."""
        self.lq_scores: dict[str, float] = {}
        """LocalQueue scores computed since the last change of their usage."""
        self.stale: set[str] = set()
        """ClusterQueues whose jobs' keys hold LocalQueue scores that have changed."""

    def export(self) -> dict[str, Any]:
        """This part of an engine snapshot (:mod:`phalanx.engine.snapshot`)."""
        return {"afs": self.usage.export() if self.usage is not None else None}

    def load(self, data: Mapping[str, Any]) -> None:
        if self.usage is not None and data.get("afs"):
            self.usage.load(data["afs"])

    def applies_to(self, cluster_queue: str | None) -> bool:
        if self.usage is None or cluster_queue is None:
            return False
        queue = self._engine.priorities.tables_now().queues.get(cluster_queue)
        return queue is not None and queue.admission_fair_sharing

    def lq_score(self, rec: JobRecord) -> float:
        """The job's LocalQueue score in an Admission Fair Sharing ClusterQueue, else 0."""
        lq = rec.local_queue
        if self.usage is None or lq is None or not self.applies_to(rec.cluster_queue):
            return 0.0
        score = self.lq_scores.get(lq)
        if score is None:
            model = self._engine.cache.local_queues.get(lq)
            weight = model.fair_sharing.weight if model and model.fair_sharing else 1.0
            score = self.lq_scores[lq] = self.usage.score(lq, weight)
        return score

    def admitted(
        self, rec: JobRecord, cluster_queue: str, usage: Mapping[FlavorResource, int]
    ) -> None:
        """An admission's entry penalty on its LocalQueue; the queue re-sorts next cycle."""
        lq = rec.local_queue
        if self.usage is None or lq is None or not self.applies_to(cluster_queue):
            return
        self.usage.penalize(lq, base_units(usage))
        self.lq_scores.pop(lq, None)
        self.stale.add(cluster_queue)

    def sample(self, now: float) -> None:
        """Fold what each LocalQueue's admitted jobs hold into its usage, when due."""
        afs = self.usage
        if afs is None or not afs.due(now):
            return
        queues = [q for q in self._engine.priorities.tables_now().queues if self.applies_to(q)]
        current: dict[str, dict[str, float]] = {}
        for cq in queues:
            for rec in self._engine.admitted_by_cq.get(cq, {}).values():
                if rec.local_queue is None or rec.admission is None:
                    continue
                held = current.setdefault(rec.local_queue, {})
                for resource, amount in base_units(rec.admission.usage).items():
                    held[resource] = held.get(resource, 0.0) + amount
        afs.sample(now, current)
        self.lq_scores.clear()
        self.stale.update(queues)

    def rekey(self) -> None:
        """New LocalQueue scores into the keys of the stale ClusterQueues' jobs."""
        for name in sorted(self.stale):
            cq_queue = self._engine.queues.queues.get(name)
            if cq_queue is None:
                continue
            for shape_queue in cq_queue.shapes.values():
                for rec in shape_queue.members.values():
                    if rec.key[0] != -math.inf:  # an expedited job's key stays first
                        rec.key = (self.lq_score(rec), *rec.key[1:])
            cq_queue.rebuild()
            if cq_queue.parked and cq_queue.blocked_by is not None:
                self._engine.queues.wake([cq_queue])
            self._engine.queues.mark_candidate(cq_queue)
        self.stale.clear()
