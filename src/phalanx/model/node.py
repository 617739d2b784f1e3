"""Nodes, their taints, and the tolerations that let tasks land on them."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import Field, field_validator

from phalanx.model.base import PhalanxModel
from phalanx.model.resources import ResourceList, parse_resources

__all__ = [
    "GPU_MODEL_LABELS",
    "GPU_PRODUCT_LABEL",
    "GPU_TYPE_LABEL",
    "AdminState",
    "Node",
    "NodeState",
    "Taint",
    "Toleration",
    "tolerates",
]

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
"""NVIDIA GPU feature discovery's label for a node's GPU model (``NVIDIA-A100-SXM4-80GB``)."""
GPU_TYPE_LABEL = "slurm.phalanx.io/gpu-type"
"""A node's Slurm GRES type (``gpu:h100:8`` -> ``h100``), from slurm.conf."""
GPU_MODEL_LABELS = (GPU_PRODUCT_LABEL, GPU_TYPE_LABEL)
"""The labels that name a node's GPU model, first found wins."""


class AdminState(StrEnum):
    """What an operator has said about a node (Slurm's resume / drain / down)."""

    UP = "up"
    DRAIN = "drain"
    DOWN = "down"


class NodeState(StrEnum):
    """A node's state as sinfo shows it: derived from allocations and AdminState."""

    IDLE = "idle"
    MIXED = "mixed"
    ALLOCATED = "allocated"
    DRAINING = "draining"
    """Drained, and jobs still run on it (sinfo's ``drng``)."""
    DRAIN = "drain"
    """Drained, and no job runs on it any more (sinfo's ``drain``, ``drained``)."""
    DOWN = "down"


TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class Taint(PhalanxModel):
    """A Kubernetes node taint."""

    key: str = Field(min_length=1)
    value: str = ""
    effect: TaintEffect = "NoSchedule"


class Toleration(PhalanxModel):
    """A Kubernetes toleration (``Equal`` or ``Exists``)."""

    key: str = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: TaintEffect | Literal[""] = ""
    toleration_seconds: int | None = None

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


def tolerates(tolerations: list[Toleration] | tuple[Toleration, ...], taints: list[Taint]) -> bool:
    """True when every NoSchedule/NoExecute taint is tolerated (PreferNoSchedule is ignored)."""
    return all(
        taint.effect == "PreferNoSchedule" or any(t.tolerates(taint) for t in tolerations)
        for taint in taints
    )


class Node(PhalanxModel):
    """A machine (or a virtual node) with labels, taints and a capacity."""

    name: str = Field(min_length=1)
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)
    capacity: ResourceList = Field(default_factory=dict)
    state: AdminState = AdminState.UP
    reason: str = ""
    reason_user: str = ""
    """Who set the reason (``scontrol update``, an apply), as Slurm's ``[user@time]``."""
    reason_time: float | None = None
    """When the reason was set (epoch seconds); ``None`` when no reason is set."""
    health_check_reason: str = ""
    """The reason the health check drained the node with: while ``reason`` is still
    this one, the drain is the check's, and a passing check resumes the node."""

    @field_validator("capacity", mode="before")
    @classmethod
    def _parse_capacity(cls, value: Any) -> dict[str, int]:
        return parse_resources(value)

    @property
    def gpu_model(self) -> str:
        """The node's GPU model from its labels (:data:`GPU_MODEL_LABELS`), or ``""``."""
        labels = self.labels
        for label in GPU_MODEL_LABELS:
            model = labels.get(label)
            if model:
                return model
        return ""
