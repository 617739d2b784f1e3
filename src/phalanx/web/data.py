"""What the dashboard's pages show, gathered from the control plane as plain data.

Each function reads the control plane (its store, its engine's live status)
for one page and returns dictionaries and lists the templates render; nothing
here renders HTML or checks a session. Job data is filtered to the caller's
tenants exactly as ``/api/v1/jobs`` filters it; cluster objects (flavors,
queues, nodes, the tenant tree) are visible to every signed-in user, as they
are through the API.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from phalanx.api.plane import ControlPlane
from phalanx.auth import Principal
from phalanx.model import GPU, JobState, Node, ResourceFlavor
from phalanx.store.records import JobRow

__all__ = [
    "PAGE_SIZE",
    "JobFilter",
    "job_page",
    "nodes_page",
    "overview",
    "queues_page",
    "tenants_page",
]

PAGE_SIZE = 50
SPARK_BUCKETS = 72
SPARK_BUCKET_S = 300.0
DOWN_STATES = ("down", "drain", "draining")
TOPOLOGY_LEVELS = ("topology.phalanx.io/block", "topology.phalanx.io/rack")


def _nodes(plane: ControlPlane) -> list[Node]:
    return [Node.model_validate(row.spec) for row in plane.store.objects("Node")]


def _flavors(plane: ControlPlane) -> list[ResourceFlavor]:
    return [
        ResourceFlavor.model_validate(row.spec) for row in plane.store.objects("ResourceFlavor")
    ]


def _in_flavor(node: Node, flavor: ResourceFlavor) -> bool:
    return all(node.labels.get(k) == v for k, v in flavor.node_labels.items())


def _visible(principal: Principal) -> list[str] | None:
    """The tenants whose jobs the caller sees (None: every tenant)."""
    return None if principal.admin else sorted(principal.tenants)


# --------------------------------------------------------------------------- overview


def overview(plane: ControlPlane, principal: Principal, now: float) -> dict[str, Any]:
    """GPUs per flavor, job counts, admissions per minute and the utilisation sparkline."""
    status = plane.node_status()
    nodes = _nodes(plane)
    rows = []
    for flavor in _flavors(plane) or [ResourceFlavor(name="all")]:
        used = free = down = 0
        for node in nodes:
            if not _in_flavor(node, flavor):
                continue
            s = status.get(node.name, {})
            gpus, taken = int(s.get("gpus", 0)), int(s.get("gpus_used", 0))
            used += taken
            if s.get("state") in DOWN_STATES:
                down += gpus - taken
            else:
                free += gpus - taken
        total = used + free + down
        rows.append({"name": flavor.name, "total": total, "used": used, "free": free, "down": down})
    tenants = _visible(principal)
    counts = plane.store.count_jobs(tenants=tenants)
    started = plane.store.started_since(now - 600, tenants=tenants)
    total_gpus = sum(int(s.get("gpus", 0)) for s in status.values())
    in_use = sum(int(s.get("gpus_used", 0)) for s in status.values())
    return {
        "flavors": rows,
        "running": counts.get(JobState.RUNNING.value, 0) + counts.get("COMPLETING", 0),
        "pending": counts.get(JobState.PENDING.value, 0),
        "admissions_per_min": round(started / 10, 1),
        "gpus": total_gpus,
        "gpus_used": in_use,
        # 5-minute means, then the present moment.
        "spark": [
            *sparkline(
                plane.store.gpu_spans(now - SPARK_BUCKETS * SPARK_BUCKET_S), total_gpus, now
            ),
            in_use / total_gpus if total_gpus else 0.0,
        ],
    }


def sparkline(
    spans: Sequence[tuple[float, float | None, int]], total_gpus: int, now: float
) -> list[float]:
    """The share of the GPUs in use in each 5-minute bucket of the last 6 hours."""
    start = now - SPARK_BUCKETS * SPARK_BUCKET_S
    held = [0.0] * SPARK_BUCKETS
    for begin, end, gpus in spans:
        a, b = max(begin, start), min(now if end is None else end, now)
        if b <= a:
            continue
        first, last = int((a - start) // SPARK_BUCKET_S), int((b - start) // SPARK_BUCKET_S)
        for i in range(first, min(last, SPARK_BUCKETS - 1) + 1):
            lo = start + i * SPARK_BUCKET_S
            overlap = min(b, lo + SPARK_BUCKET_S) - max(a, lo)
            if overlap > 0:
                held[i] += overlap * gpus
    capacity = total_gpus * SPARK_BUCKET_S
    return [min(1.0, h / capacity) if capacity else 0.0 for h in held]


# --------------------------------------------------------------------------- queues


def queues_page(plane: ControlPlane) -> dict[str, Any]:
    """ClusterQueues with nominal, used, borrowed and lent quota per flavor and resource,
    grouped under their cohort tree, and the LocalQueues with their pending jobs."""
    status = plane.cluster_queue_status()
    cohorts = {row.name: row.spec.get("parentName") for row in plane.store.objects("Cohort")}
    queues: list[dict[str, Any]] = []
    for name in sorted(status):
        s = status[name]
        cohorts.setdefault(s.get("cohort") or "", None)
        bars = []
        for flavor, nominal in sorted(s.get("nominal", {}).items()):
            for resource, amount in sorted(nominal.items()):
                used = s.get("usage", {}).get(flavor, {}).get(resource, 0)
                borrowed = s.get("borrowed", {}).get(flavor, {}).get(resource, 0)
                bars.append(
                    {
                        "flavor": flavor,
                        "resource": resource,
                        "nominal": amount,
                        "used": used,
                        "borrowed": borrowed,
                        "lent": 0,
                    }
                )
        queues.append(
            {
                "name": name,
                "cohort": s.get("cohort"),
                "active": s.get("active", True),
                "inactive_reason": s.get("inactive_reason"),
                "pending": s.get("pending", 0),
                "admitted": s.get("admitted", 0),
                "bars": bars,
            }
        )
    _attribute_lending(queues)
    for q in queues:
        for bar in q["bars"]:
            bar["scale"] = max(bar["nominal"], bar["used"] + bar["lent"], 1)
            bar["display"] = {k: _amount(bar["resource"], bar[k]) for k in _AMOUNTS}
    pending = plane.store.pending_by_queue()
    local = [
        {
            "name": row.name,
            "cluster_queue": row.spec.get("clusterQueue"),
            "pending": pending.get(row.name, 0),
        }
        for row in sorted(plane.store.objects("LocalQueue"), key=lambda r: r.name)
    ]
    return {"tree": _cohort_tree(cohorts, queues), "local_queues": local}


_AMOUNTS = ("nominal", "used", "borrowed", "lent")


def _amount(resource: str, value: int) -> str:
    if resource == "cpu":
        return f"{value / 1000:g}"
    if resource == "memory":
        return f"{value / 2**30:.0f}Gi"
    return str(value)


def _attribute_lending(queues: list[dict[str, Any]]) -> None:
    """What each ClusterQueue lends: the cohort's borrowing of a flavor's resource split
    over the queues with unused nominal quota there, in proportion to it."""
    by_key: dict[tuple[str | None, str, str], list[dict[str, Any]]] = {}
    for q in queues:
        if q["cohort"] is None:
            continue
        for bar in q["bars"]:
            by_key.setdefault((q["cohort"], bar["flavor"], bar["resource"]), []).append(bar)
    for bars in by_key.values():
        borrowed = sum(b["borrowed"] for b in bars)
        unused = {id(b): max(0, b["nominal"] - b["used"]) for b in bars}
        room = sum(unused.values())
        if not borrowed or not room:
            continue
        for bar in bars:
            bar["lent"] = math.floor(borrowed * unused[id(bar)] / room)


def _cohort_tree(
    parents: Mapping[str, str | None], queues: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Cohorts as nested nodes (roots first), each with its ClusterQueues; queues without a
    cohort at the end under a node named ``""``."""
    nodes: dict[str, dict[str, Any]] = {
        name: {"name": name, "children": [], "queues": []} for name in parents if name
    }
    for q in queues:
        key = q["cohort"] or ""
        nodes.setdefault(key, {"name": key, "children": [], "queues": []})["queues"].append(q)
    roots = []
    for name in sorted(nodes, key=lambda n: (n == "", n)):
        parent = parents.get(name)
        if parent and parent in nodes and parent != name:
            nodes[parent]["children"].append(nodes[name])
        else:
            roots.append(nodes[name])
    return [r for r in roots if r["queues"] or r["children"]]


# --------------------------------------------------------------------------- nodes


def nodes_page(plane: ControlPlane, principal: Principal) -> dict[str, Any]:
    """Nodes grouped by topology (block, then rack), each with its GPU allocation and state
    and the jobs on it that ``principal`` may see."""
    status = plane.node_status(principal)
    levels = _topology_levels(plane)
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for node in sorted(_nodes(plane), key=lambda n: n.name):
        s = status.get(node.name, {})
        gpus, used = int(s.get("gpus", 0)), int(s.get("gpus_used", 0))
        key = tuple(node.labels.get(level, "-") for level in levels)
        groups.setdefault(key, []).append(
            {
                "name": node.name,
                "state": s.get("state", "unknown"),
                "gpus": gpus,
                "used": used,
                "fill": round(used / gpus, 3) if gpus else 0.0,
                "jobs": s.get("jobs", []),
                "model": node.gpu_model,
                "reason": node.reason,
                "reason_user": node.reason_user,
                "reason_time": _stamp(node.reason_time),
            }
        )
    return {
        "levels": [lv.rsplit("/", 1)[-1] for lv in levels],
        "groups": [{"key": list(k), "nodes": v} for k, v in sorted(groups.items())],
        "unavailable": [
            n for g in groups.values() for n in g if n["state"] in DOWN_STATES or n["reason"]
        ],
    }


def _stamp(when: float | None) -> str:
    """A reason's time as ``scontrol show node`` prints it (local time), or ``""``."""
    if when is None:
        return ""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(when))


def _topology_levels(plane: ControlPlane) -> list[str]:
    """The node labels that group nodes: a Topology's levels above the hostname, or
    phalanx's block and rack labels."""
    for row in plane.store.objects("Topology"):
        levels = [lv.get("nodeLabel", "") for lv in row.spec.get("levels", [])]
        above = [lv for lv in levels if lv and lv != "kubernetes.io/hostname"]
        if above:
            return above
    return list(TOPOLOGY_LEVELS)


# --------------------------------------------------------------------------- tenants


def tenants_page(plane: ControlPlane) -> dict[str, Any]:
    report = plane.usage_report()
    return {
        "fair_tree": report["fair_tree"],
        "half_life_h": report["half_life_s"] / 3600,
        "rows": report["associations"],
    }


# --------------------------------------------------------------------------- jobs


@dataclass(frozen=True, slots=True)
class JobFilter:
    """The Jobs page's query: filters, sort and page."""

    state: str = ""
    tenant: str = ""
    user: str = ""
    queue: str = ""
    search: str = ""
    sort: str = "id"
    desc: bool = True
    page: int = 1
    states: tuple[str, ...] = field(default=())

    def query(self, **changes: Any) -> str:
        """This filter as a query string, with ``changes``."""
        from urllib.parse import urlencode

        values = {
            "state": self.state,
            "tenant": self.tenant,
            "user": self.user,
            "queue": self.queue,
            "q": self.search,
            "sort": self.sort,
            "desc": "1" if self.desc else "0",
            "page": str(self.page),
        }
        values.update({k: str(v) for k, v in changes.items()})
        return urlencode({k: v for k, v in values.items() if v not in ("", None)})


def job_page(
    plane: ControlPlane, principal: Principal, flt: JobFilter, now: float
) -> dict[str, Any]:
    """One page of the jobs the caller may see, matching ``flt``, and the total."""
    tenants = _visible(principal)
    if flt.tenant:
        wanted = [flt.tenant]
        tenants = wanted if tenants is None else [t for t in tenants if t in wanted]
    filters: dict[str, Any] = {
        "states": [flt.state] if flt.state else None,
        "tenants": tenants,
        "users": [flt.user] if flt.user else None,
        "queue": flt.queue or None,
        "search": flt.search or None,
    }
    total = plane.store.count_matching(**filters)
    pages = max(1, math.ceil(total / PAGE_SIZE))
    page = min(max(1, flt.page), pages)
    rows = plane.store.list_jobs(
        **filters,
        sort=flt.sort,
        descending=flt.desc,
        offset=(page - 1) * PAGE_SIZE,
        limit=PAGE_SIZE,
    )
    return {
        "total": total,
        "page": page,
        "pages": pages,
        "jobs": [job_row(plane, r, now) for r in rows],
    }


def job_row(plane: ControlPlane, row: JobRow, now: float) -> dict[str, Any]:
    """A job as the Jobs table and the job page show it."""
    state = JobState(row.state)
    if row.start_time is not None:
        wait = row.start_time - row.submit_time
    elif state is JobState.PENDING:
        wait = now - row.submit_time
    else:
        wait = None
    estimate = plane.estimated_start(row.id) if state is JobState.PENDING else None
    no_estimate = (
        plane.no_estimate(row.id) if state is JobState.PENDING and estimate is None else None
    )
    return {
        "id": row.id,
        "name": row.name,
        "state": row.state,
        "finished": state.finished,
        "tenant": row.tenant,
        "user": row.user,
        "queue": row.queue or row.cluster_queue or "",
        "cluster_queue": row.cluster_queue or "",
        "gpus": row.gpus,
        "submit": row.submit_time,
        "start": row.start_time,
        "end": row.end_time,
        "wait": wait,
        "estimate": estimate,
        "no_estimate": no_estimate,
        "reason": row.reason,
        "message": row.message,
        "exit_code": row.exit_code,
        "nodes": list(row.nodes),
    }


def job_detail(
    plane: ControlPlane, principal: Principal, job_id: int, now: float
) -> dict[str, Any]:
    """Everything the job page shows; raises NotFound for a job the caller may not see."""
    row = plane.job(principal, job_id)
    job = job_row(plane, row, now)
    tasks = (row.assignment or {}).get("tasks") or []
    placement = [
        {
            "node": t.get("node", ""),
            "gpus": ", ".join(str(g) for g in t.get("gpus", []) or []) or "-",
            "pod_set": t.get("podSet", t.get("pod_set", "")),
            "rank": t.get("rank", t.get("index", "")),
        }
        for t in tasks
        if isinstance(t, dict)
    ]
    run = row.submission.get("run", {}) or {}
    try:
        env = plane.job_environment(principal, job_id)
    except Exception:  # a help on the page, never a reason for it to fail
        env = {str(k): str(v) for k, v in (run.get("env") or {}).items()}
    explanation = None
    if not job["finished"]:
        try:
            explanation = plane.explain(principal, job_id).get("text")
        except Exception:  # the explanation is a help, never a reason for the page to fail
            explanation = None
    events = [
        {"time": e.time, "kind": e.kind, "reason": e.reason, "message": e.message}
        for e in plane.store.job_events(job_id)
    ]
    stdout, stderr = plane.output_paths(row)
    return {
        **job,
        "priority_class": row.priority_class,
        "placement": placement,
        "flavor": row.flavor,
        "env": dict(sorted(env.items())),
        "command": run.get("command"),
        "script": bool(run.get("script")),
        "working_dir": run.get("workingDir"),
        "explanation": explanation,
        "events": events,
        "stdout": str(stdout),
        "stderr": None if stderr is None else str(stderr),
        "gpu_resource": GPU,
    }
