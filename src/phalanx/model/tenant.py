"""Tenants (fair-share entities, Slurm accounts / Kubernetes namespaces) and PriorityClasses."""

from __future__ import annotations

from pydantic import Field

from phalanx.model.base import PhalanxModel
from phalanx.model.limits import PriorityClassLimits, TenantLimits

__all__ = ["PriorityClass", "Tenant"]


class Tenant(PhalanxModel):
    """A fair-share entity. ``allocation`` is its share L in the priority formula."""

    name: str = Field(min_length=1)
    parent: str | None = None
    allocation: float = Field(default=1.0, ge=0)
    users: list[str] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)
    """The namespace's labels, matched by a ClusterQueue's ``namespaceSelector``
    (``kubernetes.io/metadata.name: <name>`` is implied)."""
    limits: TenantLimits | None = None
    """Slurm's association limits, over the jobs of the tenant and its descendants."""


class PriorityClass(PhalanxModel):
    """Kueue's WorkloadPriorityClass, Slurm's QOS: an integer priority value and limits."""

    name: str = Field(min_length=1)
    value: int = Field(ge=-(2**31), le=2**31 - 1)
    description: str = Field(default="", max_length=2048)
    limits: PriorityClassLimits | None = None
    """Slurm's QOS limits on the class's jobs (a phalanx field, not Kueue's)."""
