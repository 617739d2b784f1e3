"""``/api/v1/usage``: the usage ledger read back (``sshare``, ``sacct``'s charges).

``GET /api/v1/usage`` is the tenant tree with shares, decayed usage and
fair-share factors; ``GET /api/v1/usage/jobs?id=...`` what the ledger charged
each job (jobs of the caller's tenants only, unless the caller is the admin).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, Query

from phalanx.api.deps import Caller, Plane, job_ids

__all__ = ["router"]

router = APIRouter(prefix="/api/v1", tags=["usage"])


@router.get("/usage")
def usage(plane: Plane, principal: Caller) -> dict[str, Any]:
    """Every association (root, tenants, their users) in sshare's order: raw and
    normalized shares, raw usage (billable TRES-seconds, decayed), GPU-hours,
    normalized and effective usage, fair-share factor and level fair-share."""
    report: dict[str, Any] = plane.usage_report()
    return report


@router.get("/usage/jobs")
def job_charges(
    plane: Plane,
    principal: Caller,
    id: Annotated[list[str], Query(description="job ids, repeatable or comma-separated")] = [],  # noqa: B006
) -> dict[str, Any]:
    """What each job was charged, undecayed: GPU-seconds, billing TRES-seconds, its
    allocated TRES and their billable value per second."""
    rows = plane.store.job_charges(job_ids(id))
    items = [asdict(row) for row in rows if principal.admin or principal.may_act_for(row.tenant)]
    return {"items": items}
