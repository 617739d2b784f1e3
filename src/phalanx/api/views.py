"""What the API answers: store records rendered as the JSON the DESIGN contract names.

Job views are snake_case with RFC 3339 UTC times (``2026-12-03T07:21:10.123Z``)
so scripts can parse them without knowing phalanx; the pydantic models below
document the shapes in the OpenAPI schema.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, Field

from phalanx.auth import Principal
from phalanx.dialects.slurm.reasons import slurm_reason
from phalanx.model import SlurmRequest
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
    # isoformat truncates to milliseconds as microsecond // 1000 would, in a third less time.
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


class PodSetView(BaseModel):
    name: str
    count: int
    tasks_per_node: int | None = None
    requests: dict[str, Any] = Field(default_factory=dict)
    node_names: list[str] = Field(default_factory=list)
    """The nodes it must run on (Slurm's ``--nodelist``); empty: any."""
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
    no_estimate: str | None
    """Why a pending job has no ``estimated_start`` (no time limits, beyond the planning
    window, ...); null when it has one or is not pending."""
    command: list[str]
    working_dir: str | None
    time_limit: int | None
    """Seconds; ``None`` is no limit."""
    attempt: int
    cancel_requested: bool
    pod_sets: list[PodSetView]
    gpu_indices: dict[str, list[int]]
    """Node -> GPU indices the job holds there, once admitted."""
    stdout: str | None = None
    stderr: str | None = None
    """``None``: merged into ``stdout``."""
    partition: str | None = None
    """Slurm's names: partition = ClusterQueue, account = tenant, qos = PriorityClass."""
    account: str
    qos: str | None = None
    slurm_reason: str
    """Why it is pending in Slurm's words (Priority, Resources, Dependency, ...); None if not."""
    array_job_id: int | None = None
    array_task_id: int | None = None
    array_spec: str | None = None
    dependency: str | None = None
    begin_time: str | None = None
    hold: bool = False
    requeue: bool = False
    nice: int = 0
    comment: str = ""
    num_nodes: int
    num_tasks: int
    num_cpus: int
    batch: bool = False
    """Submitted as a batch script (sbatch)."""
    het_components: list[dict[str, Any]] | None = None
    """A Slurm heterogeneous job's components, in order (null for any other job): each
    with ``het_job_id`` (this job's id), ``het_job_offset`` (N), ``id`` (its own id in
    Slurm's numbering: the job's + N), ``pod_set``, ``partition``, ``nodes`` (placed,
    in order), ``num_nodes``, ``num_tasks``, ``num_cpus`` and ``gpus``."""


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
    expired: bool
    """Its expiry has passed (it no longer works, as a revoked one)."""


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
                "node_names": list(p.get("nodeNames") or []),
                "flavors": flavors,
                "nodes": list(assigned.get("nodes") or []),
            }
        )
    return views


def _het_components(row: JobRow) -> list[dict[str, Any]] | None:
    """A heterogeneous job's components (see :attr:`JobView.het_components`); ``None``
    for any other job."""
    slurm = row.slurm_request
    if slurm is None or slurm.components is None:
        return None
    placed: dict[str, dict[str, Any]] = {}
    if row.assignment:
        for p in (row.assignment.get("admit") or {}).get("pod_sets", []):
            placed[p.get("name", "")] = p
    out: list[dict[str, Any]] = []
    pod_sets = row.submission.get("podSets") or []
    for index, (part, pod_set) in enumerate(zip(slurm.components, pod_sets, strict=False)):
        name = str(pod_set.get("name", ""))
        nodes = [str(n.get("node")) for n in placed.get(name, {}).get("nodes") or []]
        count = int(pod_set.get("count", 1))
        requests = pod_set.get("requests") or {}
        num_nodes = len(nodes) or part.nodes or _requested_nodes([pod_set])
        tasks = part.ntasks or 0
        if not tasks and part.ntasks_per_node:
            tasks = part.ntasks_per_node * num_nodes
        if not tasks:
            tasks = num_nodes if part.nodes else count
        cpu_milli = count * _cpu_milli(requests.get("cpu", 0))
        out.append(
            {
                "het_job_id": row.id,
                "het_job_offset": index,
                "id": row.id + index,
                "pod_set": name,
                "partition": part.partition or row.cluster_queue,
                "nodes": nodes,
                "num_nodes": num_nodes,
                "num_tasks": tasks,
                "num_cpus": max(1, -(-cpu_milli // 1000)) if cpu_milli else tasks,
                "gpus": count * int(_cpu_milli(requests.get(GPU, 0)) // 1000),
            }
        )
    return out


def _sizes(row: JobRow, het: list[dict[str, Any]] | None = None) -> tuple[int, int, int]:
    """``(nodes, tasks, cpus)``: placed ones once admitted, requested ones before (a
    heterogeneous job's: its components' together)."""
    if het:
        nodes = len(row.nodes) or sum(int(c["num_nodes"]) for c in het)
        return nodes, sum(int(c["num_tasks"]) for c in het), sum(int(c["num_cpus"]) for c in het)
    sub = row.submission
    slurm = row.slurm_request or SlurmRequest()
    pod_sets = sub.get("podSets") or []
    units = sum(int(p.get("count", 1)) for p in pod_sets)
    cpu_milli = 0
    for p in pod_sets:
        cpu_milli += int(p.get("count", 1)) * _cpu_milli(p.get("requests", {}).get("cpu", 0))
    nodes = len(row.nodes) or (slurm.nodes or 0) or _requested_nodes(pod_sets)
    tasks = slurm.ntasks or 0
    if not tasks and slurm.ntasks_per_node:
        tasks = slurm.ntasks_per_node * nodes
    if not tasks:
        tasks = nodes if slurm.nodes else units
    return nodes, tasks, max(1, -(-cpu_milli // 1000)) if cpu_milli else tasks


def _requested_nodes(pod_sets: list[dict[str, Any]]) -> int:
    """The fewest nodes a pending job can run on: each pod set spread ``tasksPerNode``
    to a node takes ``ceil(count / tasksPerNode)``; pod sets free to share a node, one
    node together."""
    spread = 0
    packed = False
    for p in pod_sets:
        per_node = int(p.get("tasksPerNode") or 0)
        if per_node > 0:
            spread += -(-int(p.get("count", 1)) // per_node)
        else:
            packed = True
    return max(1, spread + (1 if packed and not spread else 0))


def _cpu_milli(value: Any) -> int:
    if isinstance(value, int | float):
        return int(value * 1000)
    text = str(value)
    if text.endswith("m"):
        return int(float(text[:-1]))
    try:
        return int(float(text) * 1000)
    except ValueError:
        return 0


def job_view(
    row: JobRow,
    paths: tuple[Any, Any] | None = None,
    estimated_start: float | None = None,
    no_estimate: str | None = None,
) -> dict[str, Any]:
    """The DESIGN contract's job object (see :class:`JobView`).

    ``paths`` are the job's output files as the control plane resolves them;
    ``estimated_start`` a pending job's planned start (epoch seconds) from the engine,
    ``no_estimate`` why it has none.
    """
    run = row.submission.get("run") or {}
    sub = row.submission
    gpu_indices = (row.assignment or {}).get("gpus") or {}
    stdout, stderr = paths if paths is not None else (None, None)
    het = _het_components(row)
    nodes, tasks, cpus = _sizes(row, het)
    array = sub.get("array") or {}
    pending = row.state == "PENDING"
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
        "estimated_start": rfc3339(estimated_start) if pending else None,
        "no_estimate": no_estimate if pending and estimated_start is None else None,
        "command": list(run.get("command") or []),
        "working_dir": run.get("workingDir"),
        "time_limit": run.get("timeLimit"),
        "attempt": row.attempt,
        "cancel_requested": row.cancel_requested,
        "pod_sets": _pod_sets(row),
        "gpu_indices": {node: list(ix) for node, ix in gpu_indices.items()},
        "stdout": str(stdout) if stdout is not None else None,
        "stderr": str(stderr) if stderr is not None else None,
        "partition": row.cluster_queue,
        "account": row.tenant,
        "qos": row.priority_class,
        "slurm_reason": slurm_reason(row.state, row.reason),
        "array_job_id": row.array_job_id,
        "array_task_id": row.array_task_id,
        "array_spec": array.get("text") or None,
        "dependency": sub.get("dependency"),
        "begin_time": rfc3339(sub.get("beginTime")),
        "hold": row.hold,
        "requeue": bool(sub.get("requeue")),
        "nice": int(sub.get("nice") or 0),
        "comment": sub.get("comment") or "",
        "num_nodes": nodes,
        "num_tasks": tasks,
        "num_cpus": cpus,
        "het_components": het,
        "batch": run.get("script") is not None and not (sub.get("slurm") or {}).get("allocation"),
        "allocation": (sub.get("slurm") or {}).get("allocation"),
    }


def event_view(row: JobEventRow) -> dict[str, Any]:
    return {
        "time": rfc3339(row.time),
        "kind": row.kind,
        "reason": row.reason,
        "message": row.message,
        "data": dict(row.data),
    }


def token_view(row: TokenRow, now: float | None = None) -> dict[str, Any]:
    """A token without its secret; ``expired`` as of ``now`` (default: the current time)."""
    now = time.time() if now is None else now
    return {
        "id": row.id,
        "name": row.name,
        "user": row.user,
        "tenants": list(row.tenants),
        "admin": row.admin,
        "created": rfc3339(row.created),
        "expires": rfc3339(row.expires),
        "revoked": row.revoked,
        "expired": row.expires is not None and row.expires <= now,
    }


def principal_view(principal: Principal) -> dict[str, Any]:
    return {
        "user": principal.user,
        "tenants": sorted(principal.tenants),
        "admin": principal.admin,
    }
