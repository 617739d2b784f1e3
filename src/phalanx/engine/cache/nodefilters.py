"""Per-node filters of pod sets, remembered: each node's verdict is worked out once.

Whether a node suits a pod set in a flavor (its node selector, required node
affinity, tolerations, allowed and excluded nodes, the other flavors it was given)
depends only on the node's object and those constraints. Placement and backfill ask
it of the same nodes over and over: a backfill pass walks the nodes in the order
they free up for every job it tests, and a job that wants one GPU model among many
is turned down by most of them, each time by its affinity terms. :class:`NodeFilters`
keeps one filter per set of constraints, with its verdict per node for the node's
current version (an updated node is a new object, so its verdict is worked out
again); the verdicts are those of :func:`~phalanx.engine.placement.assigner.node_filter`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from phalanx.engine.cache.capacity import NodeSlot
from phalanx.model import Node, ResourceFlavor

if TYPE_CHECKING:
    from phalanx.engine.queueing.shapes import PodSetShape

__all__ = ["NodeFilters"]

NodeFilter = Callable[[NodeSlot], bool]

_MAX_FILTERS = 1024
"""Filters kept at most; past that all are forgotten (they are only a memo)."""


class _Remembered:
    """A filter with its verdict per node version."""

    __slots__ = ("accept", "extra", "flavor", "verdicts")

    def __init__(
        self, accept: NodeFilter, flavor: ResourceFlavor, extra: tuple[ResourceFlavor, ...]
    ) -> None:
        self.accept = accept
        self.flavor = flavor
        self.extra = extra
        self.verdicts: dict[NodeSlot, tuple[Node, bool]] = {}

    def __call__(self, slot: NodeSlot) -> bool:
        known = self.verdicts.get(slot)
        node = slot.node
        if known is not None and known[0] is node:
            return known[1]
        verdict = self.accept(slot)
        self.verdicts[slot] = (node, verdict)
        return verdict


class NodeFilters:
    """The remembered filters of one engine's cluster."""

    __slots__ = ("_filters", "_numbers", "_of_shape")

    def __init__(self) -> None:
        self._numbers: dict[tuple[Any, ...], int] = {}
        """A number for each set of constraints seen."""
        self._of_shape: dict[PodSetShape, tuple[int, bool]] = {}
        """Each shape's constraints, by number (shapes are hashed once; tuples are not),
        and whether it has none of its own (only a flavor's taints or labels filter)."""
        self._filters: dict[tuple[Any, ...], _Remembered | None] = {}

    def get(
        self,
        pod_set: PodSetShape,
        flavor: ResourceFlavor,
        tainted: bool,
        other_flavors: tuple[ResourceFlavor, ...],
        make: Callable[
            [PodSetShape, ResourceFlavor, bool, tuple[ResourceFlavor, ...]], NodeFilter | None
        ],
    ) -> NodeFilter | None:
        """The filter ``make`` gives for these arguments (None: every node passes),
        remembering its verdicts."""
        known = self._of_shape.get(pod_set)
        if known is None:
            if len(self._of_shape) >= _MAX_FILTERS or len(self._filters) >= _MAX_FILTERS:
                self._numbers.clear()
                self._of_shape.clear()
                self._filters.clear()
            constraints = (
                pod_set.node_selector,
                pod_set.node_affinity,
                pod_set.tolerations,
                pod_set.node_names,
                pod_set.exclude_nodes,
            )
            # Without taints or other flavors to look at, ``make`` filters only by the
            # pod set's own constraints.
            free = make(pod_set, flavor, False, ()) is None
            number = self._numbers.setdefault(constraints, len(self._numbers))
            known = self._of_shape[pod_set] = (number, free)
        number, free = known
        if free and not tainted and not any(f.node_labels for f in other_flavors):
            return None  # what ``make`` says of a pod set without constraints of its own
        extra = tuple(f for f in other_flavors if f.node_labels)
        key = (number, flavor.name, tainted, tuple(f.name for f in extra))
        if key in self._filters:
            remembered = self._filters[key]
            if remembered is None:
                return None
            if remembered.flavor is flavor and all(
                a is b for a, b in zip(remembered.extra, extra, strict=True)
            ):
                return remembered
        accept = make(pod_set, flavor, tainted, other_flavors)
        remembered = _Remembered(accept, flavor, extra) if accept is not None else None
        self._filters[key] = remembered
        return remembered
