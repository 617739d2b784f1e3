"""The remembered node filters give the verdicts of the filter they remember, whatever
changes: a node's labels, taints or state, a flavor's tolerations, shapes that share
constraints or differ only in tolerations."""

from __future__ import annotations

import itertools

from phalanx.engine.cache.capacity import NodeSlot, node_capacity
from phalanx.engine.cache.nodefilters import NodeFilters
from phalanx.engine.placement.assigner import node_filter
from phalanx.engine.queueing.shapes import PodSetShape
from phalanx.model import Node, ResourceFlavor
from phalanx.model.affinity import NodeSelectorRequirement, NodeSelectorTerm
from phalanx.model.node import Taint, Toleration

GPU = "nvidia.com/gpu"


def _shape(
    selector: tuple[tuple[str, str], ...] = (),
    tolerations: tuple[Toleration, ...] = (),
    affinity: tuple[NodeSelectorTerm, ...] | None = None,
    exclude: frozenset[str] = frozenset(),
) -> PodSetShape:
    return PodSetShape(
        "main",
        1,
        ((GPU, 1),),
        selector,
        tolerations,
        None,
        False,
        exclude_nodes=exclude,
        node_affinity=affinity,
    )


H100 = (
    NodeSelectorTerm(
        match_expressions=(NodeSelectorRequirement(key="gpu", operator="In", values=("h100",)),)
    ),
)
SHAPES = [
    _shape(),
    _shape(selector=(("rack", "r1"),)),
    _shape(affinity=H100),
    _shape(affinity=H100, tolerations=(Toleration(key="maint", operator="Exists"),)),
    _shape(tolerations=(Toleration(key="maint", operator="Exists"),)),
    _shape(exclude=frozenset({"n2"})),
]


def _nodes() -> list[Node]:
    taint = [Taint(key="maint")]
    return [
        Node(name="n0", labels={"gpu": "h100", "rack": "r1"}, capacity={GPU: 8}),
        Node(name="n1", labels={"gpu": "a100", "rack": "r1"}, capacity={GPU: 8}, taints=taint),
        Node(name="n2", labels={"gpu": "h100", "rack": "r2"}, capacity={GPU: 8}),
        Node(name="n3", labels={"gpu": "h100", "rack": "r2"}, capacity={GPU: 8}, taints=taint),
    ]


def _agree(filters: NodeFilters, slots: list[NodeSlot], flavors: list[ResourceFlavor]) -> int:
    checked = 0
    for shape, flavor, tainted in itertools.product(SHAPES, flavors, (False, True)):
        for others in ((), tuple(flavors)):
            plain = node_filter(shape, flavor, tainted, others)
            remembered = filters.get(shape, flavor, tainted, others, node_filter)
            assert (plain is None) == (remembered is None), (shape, flavor, tainted, others)
            for slot in slots:
                expected = plain is None or plain(slot)
                assert (remembered is None or remembered(slot)) == expected, (shape, slot.name)
                checked += 1
    return checked


def test_remembered_verdicts_follow_nodes_and_flavors_as_they_change() -> None:
    filters = NodeFilters()
    slots = [NodeSlot(node=n, capacity=node_capacity(n)) for n in _nodes()]
    flavors = [ResourceFlavor(name="any"), ResourceFlavor(name="r1", node_labels={"rack": "r1"})]
    assert _agree(filters, slots, flavors) > 0
    assert _agree(filters, slots, flavors) > 0  # now from memory
    # Nodes change: labels, taints, state (new objects, as every update makes).
    n0, n1, n2, n3 = (slot.node for slot in slots)
    slots[0].reset(
        n0.model_copy(update={"labels": {"gpu": "a100", "rack": "r2"}}), slots[0].capacity
    )
    slots[1].reset(n1.model_copy(update={"taints": []}), slots[1].capacity)
    slots[3].reset(n3.model_copy(update={"state": "DRAIN"}), slots[3].capacity)
    _agree(filters, slots, flavors)
    # A flavor changes: it tolerates the taint now, or selects other nodes.
    tolerant = ResourceFlavor(name="any", tolerations=[Toleration(key="maint", operator="Exists")])
    _agree(filters, slots, [tolerant, flavors[1]])
    moved = ResourceFlavor(name="r1", node_labels={"rack": "r2"})
    _agree(filters, slots, [tolerant, moved])
    assert n2 is slots[2].node  # the unchanged node kept its object
