"""ResourceFlavors (node sets selected by labels) and Topologies."""

from __future__ import annotations

from pydantic import Field, model_validator

from phalanx.model.base import PhalanxModel
from phalanx.model.node import Node, Taint, Toleration

__all__ = ["HOSTNAME_LABEL", "ResourceFlavor", "Topology", "TopologyLevel"]

HOSTNAME_LABEL = "kubernetes.io/hostname"


class ResourceFlavor(PhalanxModel):
    """A set of nodes picked by ``nodeLabels``; empty labels select every node."""

    name: str = Field(min_length=1)
    node_labels: dict[str, str] = Field(default_factory=dict, max_length=8)
    node_taints: list[Taint] = Field(default_factory=list, max_length=8)
    tolerations: list[Toleration] = Field(default_factory=list, max_length=8)
    topology_name: str | None = None

    @model_validator(mode="after")
    def _topology_needs_labels(self) -> ResourceFlavor:
        if self.topology_name and not self.node_labels:
            raise ValueError("topologyName requires at least one nodeLabel")
        return self

    def selects(self, node: Node) -> bool:
        """True when the node carries every label of this flavor."""
        labels = node.labels
        return all(labels.get(k) == v for k, v in self.node_labels.items())


class TopologyLevel(PhalanxModel):
    node_label: str = Field(min_length=1)


class Topology(PhalanxModel):
    """Ordered topology levels, highest first (e.g. block > rack > hostname)."""

    name: str = Field(min_length=1)
    levels: list[TopologyLevel] = Field(min_length=1, max_length=16)

    @model_validator(mode="after")
    def _levels_valid(self) -> Topology:
        labels = [level.node_label for level in self.levels]
        if len(set(labels)) != len(labels):
            raise ValueError("levels must be unique")
        if HOSTNAME_LABEL in labels[:-1]:
            raise ValueError(f"{HOSTNAME_LABEL} may only be the lowest level")
        return self
