"""Ray nodes as phalanx Nodes: the Ray runtime's inventory.

Each Ray node (an entry of ``ray.nodes()``) becomes a :class:`~phalanx.model.Node`:
its ``CPU``, ``GPU`` and ``memory`` resources become ``cpu``,
``nvidia.com/gpu`` and ``memory``, its other custom resources keep their names
(``node:*``, ``object_store_memory`` and ``accelerator_type:*`` are Ray's own),
and its labels (``ray start --labels``) become the Node's, so flavors'
``nodeLabels`` and topology levels select Ray nodes unchanged. A Ray
``accelerator_type:X`` resource names the GPU model when no label does.

The node's name is its ``phalanx.io/node`` label, else its host name, else (two
Ray nodes on one host without the label) the host name and the first 8
characters of the Ray node id. The name is also the ``kubernetes.io/hostname``
label, the lowest level of a Topology.

:class:`Inventory` follows the cluster: :meth:`Inventory.update` takes a fresh
``ray.nodes()`` and returns the Nodes that changed; a node whose Ray node died
(and that no live Ray node has replaced) comes back with ``state: down``.
Nothing here imports Ray.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from phalanx.model import HOSTNAME_LABEL, Node
from phalanx.model.node import GPU_PRODUCT_LABEL, AdminState

__all__ = ["NAME_LABEL", "Inventory", "RayNode", "node_of", "ray_nodes"]

NAME_LABEL = "phalanx.io/node"
"""The Ray node label that names the phalanx Node (``ray start --labels``)."""
RAY_NODE_ID_LABEL = "ray.io/node-id"
"""Ray's own label: the node id, which bundles are pinned by."""
_RAY_OWN = ("node:", "accelerator_type:")
_SKIPPED = frozenset({"object_store_memory", "CPU", "GPU", "memory"})


@dataclass(frozen=True, slots=True)
class RayNode:
    """What phalanx keeps of one entry of ``ray.nodes()``."""

    node_id: str
    alive: bool
    address: str
    hostname: str
    resources: Mapping[str, float]
    labels: Mapping[str, str]


def ray_nodes(entries: Iterable[Mapping[str, Any]]) -> list[RayNode]:
    """``ray.nodes()`` entries as :class:`RayNode` (newest registration last)."""
    return [
        RayNode(
            node_id=str(entry.get("NodeID") or ""),
            alive=bool(entry.get("Alive")),
            address=str(entry.get("NodeManagerAddress") or ""),
            hostname=str(entry.get("NodeManagerHostname") or entry.get("NodeName") or ""),
            resources=dict(entry.get("Resources") or {}),
            labels={str(k): str(v) for k, v in (entry.get("Labels") or {}).items()},
        )
        for entry in entries
    ]


def _amount(value: float) -> str:
    text = f"{value:.3f}".rstrip("0").rstrip(".")
    return text or "0"


def node_of(ray: RayNode, name: str) -> Node:
    """The phalanx Node for ``ray``, named ``name``."""
    capacity: dict[str, str] = {}
    res = ray.resources
    if res.get("CPU"):
        capacity["cpu"] = _amount(res["CPU"])
    if res.get("GPU"):
        capacity["nvidia.com/gpu"] = str(math.floor(res["GPU"]))
    if res.get("memory"):
        capacity["memory"] = str(math.floor(res["memory"]))
    model = ""
    for key, value in res.items():
        if key.startswith("accelerator_type:"):
            model = key.partition(":")[2]
        if key in _SKIPPED or key.startswith(_RAY_OWN) or value < 1:
            continue
        capacity[key] = str(math.floor(value))
    labels = {k: v for k, v in ray.labels.items() if k != RAY_NODE_ID_LABEL}
    labels[HOSTNAME_LABEL] = name
    if model and GPU_PRODUCT_LABEL not in labels:
        labels[GPU_PRODUCT_LABEL] = model
    return Node.model_validate({"name": name, "labels": labels, "capacity": capacity})


def _names(nodes: list[RayNode]) -> dict[str, str]:
    """node id -> phalanx name, for the live nodes."""
    hosts: dict[str, int] = {}
    for node in nodes:
        if node.alive and NAME_LABEL not in node.labels:
            hosts[node.hostname] = hosts.get(node.hostname, 0) + 1
    names: dict[str, str] = {}
    for node in nodes:
        if not node.alive:
            continue
        name = node.labels.get(NAME_LABEL)
        if not name:
            name = node.hostname or node.node_id[:8]
            if hosts.get(node.hostname, 0) > 1:
                name = f"{name}-{node.node_id[:8]}"
        names[node.node_id] = name
    return names


class Inventory:
    """The Ray cluster's nodes as phalanx sees them, and what changed since last time."""

    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {}
        """phalanx name -> Node, as last reported (down ones too)."""
        self.live: dict[str, RayNode] = {}
        """phalanx name -> the live Ray node behind it."""
        self.names: dict[str, str] = {}
        """Ray node id -> phalanx name, for every Ray node ever seen live."""

    def update(self, entries: Iterable[Mapping[str, Any]]) -> list[Node]:
        """Take a fresh ``ray.nodes()``; return the Nodes that are new or changed."""
        nodes = ray_nodes(entries)
        names = _names(nodes)
        self.names.update(names)
        live = {names[n.node_id]: n for n in nodes if n.node_id in names}
        changed: list[Node] = []
        for name, ray in sorted(live.items()):
            node = node_of(ray, name)
            if self.nodes.get(name) != node:
                changed.append(node)
                self.nodes[name] = node
        for name, old in sorted(self.nodes.items()):
            if name in live or old.state == AdminState.DOWN:
                continue
            gone = [n.node_id for n in nodes if self.names.get(n.node_id) == name]
            reason = f"{_DIED_PREFIX}{gone[-1][:8] if gone else '?'}{_DIED_SUFFIX}"
            down = old.model_copy(update={"state": AdminState.DOWN, "reason": reason})
            changed.append(down)
            self.nodes[name] = down
        self.live = live
        return changed

    def address(self, name: str) -> str | None:
        """The address of the live Ray node named ``name``."""
        ray = self.live.get(name)
        return ray.address if ray is not None else None

    def node_id(self, name: str) -> str | None:
        """The Ray node id of the live node named ``name``."""
        ray = self.live.get(name)
        return ray.node_id if ray is not None else None


_DIED_PREFIX, _DIED_SUFFIX = "Ray node ", " died"


def died(spec: Mapping[str, Any]) -> bool:
    """Whether a stored Node's fields are the inventory's own ``down``: its Ray node
    died (an operator's drain or down, or a health check's, is not)."""
    reason = str(spec.get("reason") or "")
    return (
        spec.get("state") == AdminState.DOWN.value
        and reason.startswith(_DIED_PREFIX)
        and reason.endswith(_DIED_SUFFIX)
    )
