"""Gang placement over the capacity buckets: the fewest nodes, the tightest fit.

:class:`BestFit` places a pod set on the fewest nodes with the tightest fit of
the flavor's primary resource (GPUs), which is what a gang spanning nodes
wants; the scored placements (:mod:`phalanx.engine.placement.chain`) hand it
the pod sets that no single node holds. It is also the ``tight`` policy on its
own (phalanx's placement before node scoring):

* one unit per node (``tasksPerNode`` or ``exclusive``): walk the buckets from
  the smallest free amount that holds a unit upwards and take the first nodes
  that fit, so large free nodes are kept for large jobs;
* otherwise: if the rest fits on one node, take the tightest such node; if
  not, take the node with the most room and repeat. For a single resource
  this finds a placement whenever one exists.

Before any node is touched, an upper bound computed from the bucket sizes
rejects gangs that cannot fit, in O(buckets).
"""

from __future__ import annotations

from phalanx.engine.cache.capacity import FlavorNodes, NodeSlot
from phalanx.engine.placement.base import NodeFilter, Overlay, PlacementResult
from phalanx.engine.queueing.shapes import PodSetShape

__all__ = ["BestFit"]


class BestFit:
    """Fewest nodes, tightest fit."""

    name = "tight"

    def place(
        self,
        pod_set: PodSetShape,
        nodes: FlavorNodes,
        node_filter: NodeFilter | None,
        overlay: Overlay,
    ) -> PlacementResult:
        unit = pod_set.unit_request()
        units = pod_set.units
        amount = unit.get(nodes.primary, 0) if unit else 0
        # Buckets floor the free amount (whole cores for CPU flavors), so the lowest bucket
        # that may hold a unit is the floor too: rounding up would skip nodes that fit.
        per_unit = amount // nodes.scale
        one_per_node = pod_set.one_unit_per_node
        bound = nodes.upper_bound_units(amount, one_per_node)
        if bound < units:
            return PlacementResult(None, bound)
        if one_per_node:
            return self._spread(pod_set, unit, units, per_unit, nodes, node_filter, overlay)
        return self._pack(unit, units, amount, nodes, node_filter, overlay, pod_set.share)

    @staticmethod
    def _fits(
        slot: NodeSlot,
        unit: dict[str, int],
        node_filter: NodeFilter | None,
        overlay: Overlay,
        share: tuple[int, int] | None = None,
    ) -> int:
        if node_filter is not None and not node_filter(slot):
            return 0
        return slot.fit_units(unit, overlay.get(slot), share)

    def _spread(
        self,
        pod_set: PodSetShape,
        unit: dict[str, int],
        units: int,
        per_unit: int,
        nodes: FlavorNodes,
        node_filter: NodeFilter | None,
        overlay: Overlay,
    ) -> PlacementResult:
        chosen: list[tuple[NodeSlot, int]] = []
        exclusive = pod_set.exclusive
        share = pod_set.share
        for slot in nodes.candidates_ascending(per_unit):
            if exclusive and (not slot.idle or slot in overlay):
                continue
            if self._fits(slot, unit, node_filter, overlay, share):
                chosen.append((slot, 1))
                if len(chosen) == units:
                    return PlacementResult(tuple(chosen), units)
        return PlacementResult(None, len(chosen))

    def _pack(
        self,
        unit: dict[str, int],
        units: int,
        amount: int,
        nodes: FlavorNodes,
        node_filter: NodeFilter | None,
        overlay: Overlay,
        share: tuple[int, int] | None,
    ) -> PlacementResult:
        keys = nodes.sorted_keys()
        top = keys[-1] if keys else 0
        scale = nodes.scale
        chosen: list[tuple[NodeSlot, int]] = []
        taken: set[NodeSlot] = set()
        remaining = units
        largest = nodes.candidates_descending(amount // scale)
        while remaining > 0:
            need = remaining * amount // scale
            if amount == 0 or need <= top:
                for slot in nodes.candidates_ascending(need):
                    if slot not in taken and self._fits(
                        slot, unit, node_filter, overlay, share
                    ) >= (remaining):
                        chosen.append((slot, remaining))
                        return PlacementResult(tuple(chosen), units)
            for slot in largest:
                if slot in taken:
                    continue
                n = self._fits(slot, unit, node_filter, overlay, share)
                if n:
                    take = min(n, remaining)
                    chosen.append((slot, take))
                    taken.add(slot)
                    remaining -= take
                    break
            else:
                return PlacementResult(None, units - remaining)
        return PlacementResult(tuple(chosen), units)
