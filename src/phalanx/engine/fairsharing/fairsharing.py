"""Kueue's fair sharing: the order of a round's heads across a cohort.

Kueue's DRS tournament: going down the cohort tree, at each level the child
whose head's admission leaves it the lowest dominant resource share goes first
(:mod:`phalanx.engine.fairsharing.shares` has the share arithmetic).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from phalanx.engine.cache.quota import FlavorResource, QuotaNode
from phalanx.engine.fairsharing.shares import (
    dominant_share,
    node_weight,
    share_and_ratio,
    weighted_share,
)
from phalanx.engine.placement.assigner import (
    Assignment,
)
from phalanx.engine.queueing.queues import ShapeQueue
from phalanx.engine.state import JobRecord

if TYPE_CHECKING:
    from phalanx.engine.engine import Engine


Entry = tuple[int, tuple[float, float, int], JobRecord, ShapeQueue, Assignment]
"""A head in a round: ``(borrowing height, sort key, job, its shape queue, assignment)``."""


class FairSharing:
    """The fair-sharing tournament over a round's heads."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def weight(self, node: QuotaNode) -> float:
        return node_weight(self._engine.cache, node)

    def _share(self, node: QuotaNode, extra: Mapping[FlavorResource, int] | None = None) -> float:
        return dominant_share(node, node_weight(self._engine.cache, node), extra)

    def weighted_share(self, kind: str, name: str) -> int:
        """Kueue's ``status.fairSharing.weightedShare`` of a ClusterQueue or Cohort: its
        dominant resource share rounded up (0 for a root or an unknown name)."""
        node: QuotaNode | None
        if kind == "ClusterQueue":
            info = self._engine.cache.cluster_queues.get(name)
            node = info.node if info is not None else None
        else:
            node = self._engine.cache.cohort_nodes.get(name)
        return weighted_share(self._share(node)) if node is not None else 0

    def order(self, entries: list[Entry]) -> Iterator[Entry]:
        """Kueue's fair-sharing tournament: each pick sees the usage of the admissions
        made before it in the cycle."""
        fitting = {e[2].id: e for e in entries if e[4].ok}
        by_queue = {e[3].cq.name: e for e in fitting.values()}
        while fitting:
            by_root: dict[int, QuotaNode] = {}
            for e in fitting.values():
                node = self._engine.cache.cluster_queues[e[3].cq.name].node
                top = node.top or node
                by_root.setdefault(id(top), top)
            winners = [w for top in by_root.values() if (w := self._nominee(top, by_queue))]
            winner = min(winners, key=lambda e: e[1])
            del fitting[winner[2].id]
            del by_queue[winner[3].cq.name]
            yield winner
        yield from (e for e in entries if not e[4].ok)

    def _nominee(self, node: QuotaNode, by_queue: dict[str, Entry]) -> Entry | None:
        if node.is_cluster_queue:
            return by_queue.get(node.name)
        best: tuple[tuple[bool, tuple[float, float], tuple[float, float, int]], Entry] | None
        best = None
        for child in node.children:
            entry = self._nominee(child, by_queue)
            if entry is None:
                continue
            usage = entry[4].usage
            borrows = any(
                child.borrowing_with(flavor_resource, amount)
                for flavor_resource, amount in usage.items()
            )
            share = share_and_ratio(child, node_weight(self._engine.cache, child), usage)
            key = (borrows, share, entry[1])
            if best is None or key < best[0]:
                best = (key, entry)
        return best[1] if best is not None else None
