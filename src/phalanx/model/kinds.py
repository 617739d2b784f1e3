"""The configuration kinds and their models, in the order they depend on each other.

Flavors and topologies first, then cohorts, ClusterQueues and LocalQueues,
tenants, priority classes, and nodes last: applying (or recovering) objects in
this order means every object finds what it names already there.
"""

from __future__ import annotations

from pydantic import BaseModel

from phalanx.model.flavor import ResourceFlavor, Topology
from phalanx.model.node import Node
from phalanx.model.queue import ClusterQueue, Cohort, LocalQueue
from phalanx.model.tenant import PriorityClass, Tenant

__all__ = ["KINDS", "MODEL_BY_KIND"]

MODEL_BY_KIND: dict[str, type[BaseModel]] = {
    "ResourceFlavor": ResourceFlavor,
    "Topology": Topology,
    "Cohort": Cohort,
    "ClusterQueue": ClusterQueue,
    "LocalQueue": LocalQueue,
    "Tenant": Tenant,
    "PriorityClass": PriorityClass,
    "Node": Node,
}
KINDS: tuple[str, ...] = tuple(MODEL_BY_KIND)
"""Canonical kinds (``phalanx.engine.events.ObjectKind``) in the order to apply them."""
