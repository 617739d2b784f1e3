"""The cluster cache: configuration objects, the quota tree and node capacity.

This is the engine's view of the cluster (Kueue's ``pkg/cache``): every
ResourceFlavor, Topology, Cohort, ClusterQueue, LocalQueue, Tenant,
PriorityClass and Node it has been told about, the :class:`QuotaNode` tree
built from the queues and cohorts, and the per-flavor node indexes.
Configuration changes rebuild the affected structure; usage changes are
incremental.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from phalanx.engine.cache.capacity import FlavorNodes, NodeSlot, node_capacity
from phalanx.engine.cache.nodefilters import NodeFilters
from phalanx.engine.cache.quota import FlavorResource, QuotaNode
from phalanx.engine.explain.reasons import Reason, ReasonCode
from phalanx.model import (
    GPU,
    ClusterQueue,
    Cohort,
    LocalQueue,
    Node,
    PriorityClass,
    ResourceFlavor,
    ResourceGroup,
    StopPolicy,
    Tenant,
    Topology,
)

__all__ = ["ClusterCache", "ClusterQueueInfo", "GroupInfo"]


@dataclass(frozen=True, slots=True)
class GroupInfo:
    covered: tuple[str, ...]
    flavors: tuple[str, ...]
    _hash: int = field(default=0, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        # The dataclass's hash, once: groups key the assigner's memos on every head.
        object.__setattr__(self, "_hash", hash((self.covered, self.flavors)))

    def __hash__(self) -> int:
        return self._hash


@dataclass(eq=False, slots=True)
class ClusterQueueInfo:
    model: ClusterQueue
    node: QuotaNode
    groups: tuple[GroupInfo, ...]
    group_for: dict[str, GroupInfo]
    inactive: Reason | None = None
    preempts: bool = False
    """The queue's ``preemption`` allows something (any policy other than Never)."""
    _root_key: tuple[QuotaNode, str] | None = field(default=None, init=False, repr=False)

    @property
    def name(self) -> str:
        return self.model.name

    @property
    def flavors(self) -> tuple[str, ...]:
        return tuple(f for g in self.groups for f in g.flavors)

    @property
    def root_key(self) -> str:
        root = self.node.root()
        kept = self._root_key
        if kept is not None and kept[0] is root:
            return kept[1]
        key = f"root:{root.kind}/{root.name}"
        self._root_key = (root, key)
        return key


def _quotas(
    groups: list[ResourceGroup],
) -> tuple[dict[FlavorResource, int], dict[FlavorResource, int], dict[FlavorResource, int]]:
    nominal: dict[FlavorResource, int] = {}
    borrowing: dict[FlavorResource, int] = {}
    lending: dict[FlavorResource, int] = {}
    for group in groups:
        for flavor in group.flavors:
            for quota in flavor.resources:
                fr = (flavor.name, quota.name)
                nominal[fr] = quota.nominal_quota
                if quota.borrowing_limit is not None:
                    borrowing[fr] = quota.borrowing_limit
                if quota.lending_limit is not None:
                    lending[fr] = quota.lending_limit
    return nominal, borrowing, lending


@dataclass(eq=False)
class ClusterCache:
    flavors: dict[str, ResourceFlavor] = field(default_factory=dict)
    topologies: dict[str, Topology] = field(default_factory=dict)
    cohorts: dict[str, Cohort] = field(default_factory=dict)
    cluster_queues: dict[str, ClusterQueueInfo] = field(default_factory=dict)
    local_queues: dict[str, LocalQueue] = field(default_factory=dict)
    tenants: dict[str, Tenant] = field(default_factory=dict)
    priority_classes: dict[str, PriorityClass] = field(default_factory=dict)
    nodes: dict[str, NodeSlot] = field(default_factory=dict)
    flavor_nodes: dict[str, FlavorNodes] = field(default_factory=dict)
    cohort_nodes: dict[str, QuotaNode] = field(default_factory=dict)
    cluster_gpus: int = 0
    nodes_seen: int = 0
    """Nodes ever added: the next node's rank (its place in the tie-break order)."""
    node_filters: NodeFilters = field(default_factory=NodeFilters)
    """Which nodes suit which pod sets, remembered (placement and backfill ask often)."""

    # nodes -----------------------------------------------------------------

    def upsert_node(self, node: Node) -> NodeSlot:
        slot = self.nodes.get(node.name)
        if slot is None:
            slot = self.nodes[node.name] = NodeSlot(
                node=node, capacity=node_capacity(node), rank=self.nodes_seen
            )
            self.nodes_seen += 1
        else:
            for index in slot.flavors:
                index.remove(slot)
            if slot.schedulable:
                self.cluster_gpus -= slot.capacity.get(GPU, 0)
            slot.reset(node, node_capacity(node))
        slot.flavors = [index for index in self.flavor_nodes.values() if index.flavor.selects(node)]
        for index in slot.flavors:
            index.add(slot)
        if slot.schedulable:
            self.cluster_gpus += slot.capacity.get(GPU, 0)
        return slot

    def delete_node(self, name: str) -> NodeSlot | None:
        slot = self.nodes.pop(name, None)
        if slot is not None:
            for index in slot.flavors:
                index.remove(slot)
            if slot.schedulable:
                self.cluster_gpus -= slot.capacity.get(GPU, 0)
            slot.flavors = []
        return slot

    def reindex(self, slot: NodeSlot) -> None:
        for index in slot.flavors:
            index.update(slot)

    # flavors ---------------------------------------------------------------

    def upsert_flavor(self, flavor: ResourceFlavor) -> None:
        self.delete_flavor(flavor.name)
        self.flavors[flavor.name] = flavor
        index = self.flavor_nodes[flavor.name] = FlavorNodes(flavor)
        for slot in self.nodes.values():
            if flavor.selects(slot.node):
                slot.flavors.append(index)
                index.add(slot)

    def delete_flavor(self, name: str) -> None:
        self.flavors.pop(name, None)
        index = self.flavor_nodes.pop(name, None)
        if index is not None:
            for slot in index.members:
                slot.flavors = [i for i in slot.flavors if i is not index]

    # queues ----------------------------------------------------------------

    def upsert_cluster_queue(self, model: ClusterQueue) -> ClusterQueueInfo:
        old = self.cluster_queues.get(model.name)
        node = old.node if old is not None else QuotaNode(model.name, is_cluster_queue=True)
        node.nominal, node.borrowing_limit, node.lending_limit = _quotas(model.resource_groups)
        groups = tuple(
            GroupInfo(tuple(g.covered_resources), tuple(f.name for f in g.flavors))
            for g in model.resource_groups
        )
        group_for = {r: g for g in groups for r in g.covered}
        p = model.preemption
        info = ClusterQueueInfo(
            model,
            node,
            groups,
            group_for,
            preempts=p.within_cluster_queue != "Never" or p.reclaim_within_cohort != "Never",
        )
        self.cluster_queues[model.name] = info
        self.rebuild_quota()
        return info

    def delete_cluster_queue(self, name: str) -> ClusterQueueInfo | None:
        info = self.cluster_queues.pop(name, None)
        if info is not None:
            self.rebuild_quota()
        return info

    def rebuild_quota(self) -> None:
        """Rebuild the cohort tree from the ClusterQueues and Cohorts, keeping usage."""
        parent_of: dict[str, str | None] = {}
        for name, cohort in self.cohorts.items():
            parent_of[name] = cohort.parent_name
        for info in self.cluster_queues.values():
            implicit = info.model.cohort_name
            if implicit and implicit not in parent_of:
                parent_of[implicit] = None
        for name in list(parent_of):
            parent = parent_of[name]
            if parent and parent not in parent_of:
                parent_of[parent] = None
        cyclic: set[str] = set()
        for start in parent_of:
            seen: list[str] = []
            current: str | None = start
            while current is not None and current not in seen:
                seen.append(current)
                current = parent_of.get(current)
            if current is not None:
                cyclic.update(seen[seen.index(current) :])
        # Everything below a cycle is unusable too.
        changed = True
        while changed:
            changed = False
            for name, parent in parent_of.items():
                if name not in cyclic and parent in cyclic:
                    cyclic.add(name)
                    changed = True

        nodes: dict[str, QuotaNode] = {}
        for name in parent_of:
            node = QuotaNode(name, is_cluster_queue=False)
            model = self.cohorts.get(name)
            if model is not None:
                node.nominal, node.borrowing_limit, node.lending_limit = _quotas(
                    model.resource_groups
                )
            nodes[name] = node
        for name, parent in parent_of.items():
            if parent is not None and name not in cyclic:
                nodes[name].parent = nodes[parent]
                nodes[parent].children.append(nodes[name])
        for info in self.cluster_queues.values():
            cq_node = info.node
            cq_node.children = []
            cq_node.parent = None
            cohort_name = info.model.cohort_name
            info.inactive = None
            absent = [f for f in info.flavors if f not in self.flavors]
            if absent:
                info.inactive = Reason(
                    ReasonCode.INACTIVE,
                    f"ClusterQueue {info.name} is inactive: flavor {absent[0]} not found",
                    {"flavor": absent[0]},
                )
            if cohort_name:
                if cohort_name in cyclic:
                    info.inactive = Reason(
                        ReasonCode.INACTIVE,
                        f"ClusterQueue {info.name} is inactive: cohort {cohort_name} "
                        "is part of a cycle",
                        {"cohort": cohort_name},
                    )
                else:
                    cq_node.parent = nodes[cohort_name]
                    nodes[cohort_name].children.append(cq_node)
        self.cohort_nodes = nodes
        for node in nodes.values():
            if node.parent is None:
                node.rebuild()
        for info in self.cluster_queues.values():
            if info.node.parent is None:
                info.node.rebuild()
            chain = [info.node, *info.node.ancestors()]
            info.node.top = chain[-1]
            info.node.simple = not any(n.borrowing_limit or n.lending_limit for n in chain)

    def stop_reason(self, info: ClusterQueueInfo) -> Reason | None:
        if info.inactive is not None:
            return info.inactive
        if info.model.stop_policy is not StopPolicy.NONE:
            return Reason(
                ReasonCode.STOPPED,
                f"ClusterQueue {info.name} is stopped (stopPolicy {info.model.stop_policy})",
                {"clusterQueue": info.name},
            )
        return None

    @property
    def max_priority_value(self) -> int:
        return max((p.value for p in self.priority_classes.values()), default=0)
