"""``/api/v1/priority``: pending jobs' priorities broken into their factors (``sprio``).

``GET /api/v1/priority`` answers the ordering weights and, for every pending
job the caller may see (``id`` and ``user`` narrow it), its ClusterQueue,
user, priority, the preset that orders it and that preset's factors
(:meth:`phalanx.engine.Engine.priority_factors`).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from phalanx.api.deps import Caller, Plane, job_ids

__all__ = ["router"]

router = APIRouter(prefix="/api/v1", tags=["priority"])


@router.get("/priority")
def priority(
    plane: Plane,
    principal: Caller,
    id: Annotated[list[str], Query(description="job ids, repeatable or comma-separated")] = [],  # noqa: B006
    user: Annotated[list[str], Query(description="users, repeatable or comma-separated")] = [],  # noqa: B006
) -> dict[str, Any]:
    """``weights`` (``preset``, ``slurm``, ``phalanx``) and ``jobs``: one item per pending
    job with ``id``, ``partition``, ``user``, ``tenant``, ``priority``, ``preset`` and
    ``factors``."""
    users = [u for value in user for u in (p.strip() for p in value.split(",")) if u]
    answer: dict[str, Any] = plane.priority_factors(principal, job_ids(id), users or None)
    return answer
