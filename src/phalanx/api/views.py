"""What the API answers: store records rendered as the JSON the DESIGN contract names.

Job views are snake_case with RFC 3339 UTC times (``2026-12-03T07:21:10.123Z``)
so scripts can parse them without knowing phalanx; the pydantic models below
document the shapes in the OpenAPI schema.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, Field

from phalanx.auth import Principal
from phalanx.store.records import JobEventRow, JobRow, TokenRow

__all__ = [
    "EventView",
    "JobList",
    "JobView",
    "PodSetView",
    "TokenView",
    "event_view",
    "job_view",
    "principal_view",
    "rfc3339",
    "token_view",
]

GPU = "nvidia.com/gpu"


def rfc3339(t: float | None) -> str | None:
    """Epoch seconds as RFC 3339 UTC with milliseconds; ``None`` stays ``None``."""
    if t is None:
        return None
    stamp = datetime.fromtimestamp(t, UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"


class PodSetView(BaseModel):
    name: str
    count: int
    tasks_per_node: int | None = None
    requests: dict[str, Any] = Field(default_factory=dict)
    flavors: dict[str, str] = Field(default_factory=dict)
    """Resource -> flavor, once admitted."""
    nodes: list[dict[str, Any]] = Field(default_factory=list)
    """``[{"node", "count"}]``, once admitted."""


class JobView(BaseModel):
    """One job, as ``GET /api/v1/jobs/{id}`` and ``phalanx get jobs -o json`` show it."""

    id: int
    name: str
    state: str
    reason: str
    message: str
    tenant: str
    user: str
    queue: str | None
    cluster_queue: str | None
    flavor: str | None
    priority: int | None
    priority_class: str | None
    nodes: list[str]
    gpus: int
    submit_time: str | None
    start_time: str | None
    end_time: str | None
    exit_code: int | None
    signal: int | None
    estimated_start: str | None
    command: list[str]
    working_dir: str | None
    time_limit: int | None
    """Seconds; ``None`` is no limit."""
    attempt: int
    cancel_requested: bool
    pod_sets: list[PodSetView]
    gpu_indices: dict[str, list[int]]
    """Node -> GPU indices the job holds there, once admitted."""


class JobList(BaseModel):
    items: list[JobView]
    continue_: str | None = Field(default=None, alias="continue")


class EventView(BaseModel):
    time: str | None
    kind: str
    reason: str
    message: str
    data: dict[str, Any]


class TokenView(BaseModel):
    id: int
    name: str
    user: str
    tenants: list[str]
    admin: bool
    created: str | None
    expires: str | None
    revoked: bool


def _pod_sets(row: JobRow) -> list[dict[str, Any]]:
    placed: dict[str, dict[str, Any]] = {}
    if row.assignment:
        for p in (row.assignment.get("admit") or {}).get("pod_sets", []):
            placed[p.get("name", "")] = p
    views = []
    for p in row.submission.get("podSets", []):
        name = p.get("name", "main")
        assigned = placed.get(name, {})
        flavors = assigned.get("flavors") or {}
        if isinstance(flavors, list):  # [(resource, flavor), ...] from a tuple encoding
            flavors = {r: f for r, f in flavors}
        views.append(
            {
                "name": name,
                "count": p.get("count", 1),
                "tasks_per_node": p.get("tasksPerNode"),
                "requests": p.get("requests", {}),
                "flavors": flavors,
                "nodes": list(assigned.get("nodes") or []),
            }
        )
    return views


def job_view(row: JobRow) -> dict[str, Any]:
    """The DESIGN contract's job object (see :class:`JobView`)."""
    run = row.submission.get("run") or {}
    gpu_indices = (row.assignment or {}).get("gpus") or {}
    return {
        "id": row.id,
        "name": row.name,
        "state": row.state,
        "reason": row.reason,
        "message": row.message,
        "tenant": row.tenant,
        "user": row.user,
        "queue": row.queue,
        "cluster_queue": row.cluster_queue,
        "flavor": row.flavor,
        "priority": row.priority,
        "priority_class": row.priority_class,
        "nodes": list(row.nodes),
        "gpus": row.gpus,
        "submit_time": rfc3339(row.submit_time),
        "start_time": rfc3339(row.start_time),
        "end_time": rfc3339(row.end_time),
        "exit_code": row.exit_code,
        "signal": row.signal,
        "estimated_start": None,
        "command": list(run.get("command") or []),
        "working_dir": run.get("workingDir"),
        "time_limit": run.get("timeLimit"),
        "attempt": row.attempt,
        "cancel_requested": row.cancel_requested,
        "pod_sets": _pod_sets(row),
        "gpu_indices": {node: list(ix) for node, ix in gpu_indices.items()},
    }


def event_view(row: JobEventRow) -> dict[str, Any]:
    return {
        "time": rfc3339(row.time),
        "kind": row.kind,
        "reason": row.reason,
        "message": row.message,
        "data": dict(row.data),
    }


def token_view(row: TokenRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "name": row.name,
        "user": row.user,
        "tenants": list(row.tenants),
        "admin": row.admin,
        "created": rfc3339(row.created),
        "expires": rfc3339(row.expires),
        "revoked": row.revoked,
    }


def principal_view(principal: Principal) -> dict[str, Any]:
    return {
        "user": principal.user,
        "tenants": sorted(principal.tenants),
        "admin": principal.admin,
    }
