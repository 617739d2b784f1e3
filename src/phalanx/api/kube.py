"""Jobs as Kubernetes objects: ``/api/v1/workloads`` and ``/api/v1/{jobs.batch,jobsets,...}``.

Every phalanx job has a Kueue ``Workload`` (``kueue.x-k8s.io/v1beta2``):
``spec.podSets`` from the job, ``status.admission`` from its admission and
``status.conditions`` derived from the job's row and its event history, with
Kueue's condition types, reasons and messages (``QuotaReserved``,
``Admitted``, ``PodsReady``, ``Evicted``, ``Preempted``, ``Requeued``,
``Finished``). A job applied as a Kubernetes object (Job, JobSet, PyTorchJob,
RayJob) is also shown as that object, its ``status`` reflecting the job's
state; deleting the object cancels its job. Names: ``namespace/name``, or
``name`` alone when it is unique.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

from fastapi import APIRouter

from phalanx.api.deps import Caller, Plane
from phalanx.api.views import rfc3339
from phalanx.auth import Principal
from phalanx.errors import NotFound
from phalanx.model import HOSTNAME_LABEL, JobState
from phalanx.model.resources import format_resources, parse_resources
from phalanx.store import JobEventRow, JobRow

__all__ = [
    "API_VERSIONS",
    "JOB_PLURALS",
    "WORKLOAD_PLURALS",
    "kube_object",
    "router",
    "workload",
]

router = APIRouter(prefix="/api/v1", tags=["kubernetes"])

WORKLOAD_PLURALS = ("workloads", "workload", "wl", "kwl")
JOB_PLURALS: dict[str, str] = {
    "jobs.batch": "Job",
    "job.batch": "Job",
    "jobsets": "JobSet",
    "jobset": "JobSet",
    "js": "JobSet",
    "pytorchjobs": "PyTorchJob",
    "pytorchjob": "PyTorchJob",
    "rayjobs": "RayJob",
    "rayjob": "RayJob",
}
"""``phalanx get`` names of the Kubernetes job kinds -> kind."""

API_VERSIONS = {
    "Job": "batch/v1",
    "JobSet": "jobset.x-k8s.io/v1alpha2",
    "PyTorchJob": "kubeflow.org/v1",
    "RayJob": "ray.io/v1",
    "Workload": "kueue.x-k8s.io/v1beta2",
}
"""The apiVersion of each job kind phalanx shows jobs as."""


# ---------------------------------------------------------------------- Workloads


def _kube(row: JobRow) -> dict[str, Any] | None:
    kube = (row.submission.get("run") or {}).get("kube")
    return kube if isinstance(kube, dict) else None


def workload_name(row: JobRow) -> str:
    """Kueue's ``<kind>-<job name>-<hash>``; ``job-<id>`` for jobs without a Kubernetes owner."""
    kube = _kube(row)
    if kube is None:
        return f"job-{row.id}"
    if kube["kind"] == "Workload":
        return str(kube["name"])
    owner = f"{kube['kind']}/{kube['namespace']}/{kube['name']}/{row.id}"
    digest = hashlib.sha256(owner.encode()).hexdigest()[:5]
    return f"{str(kube['kind']).lower()}-{kube['name']}-{digest}"[:63]


class _Conditions:
    """Kueue's conditions, replayed from the job's events."""

    def __init__(self) -> None:
        self.items: dict[str, dict[str, Any]] = {}

    def set(self, kind: str, status: bool, reason: str, message: str, at: float) -> None:
        previous = self.items.get(kind)
        value = "True" if status else "False"
        since = at if previous is None or previous["status"] != value else previous["_since"]
        self.items[kind] = {
            "type": kind,
            "status": value,
            "reason": reason,
            "message": message,
            "lastTransitionTime": rfc3339(since),
            "_since": since,
        }

    def clear_eviction(self, at: float) -> None:
        for kind in ("Evicted", "Preempted"):
            if kind in self.items and self.items[kind]["status"] == "True":
                self.set(
                    kind, False, "QuotaReserved", "Previously: " + self.items[kind]["message"], at
                )

    def out(self) -> list[dict[str, Any]]:
        order = ("QuotaReserved", "Admitted", "PodsReady", "Evicted", "Preempted", "Requeued")
        ranked = sorted(
            self.items.values(),
            key=lambda c: order.index(c["type"]) if c["type"] in order else len(order),
        )
        return [{k: v for k, v in c.items() if not k.startswith("_")} for c in ranked]


_PENDING_REASONS = {
    "InsufficientQuota": "WaitingForQuota",
    "Priority": "WaitingForQuota",
    "StrictFIFO": "WaitingForQuota",
    "Resources": "WaitingForQuota",
    "ExceedsMaxQuota": "ExceedsMaxQuota",
    "NoMatchingFlavor": "NoMatchingFlavor",
    "NoNodeFit": "TopologyPlacementFailed",
    "PendingPreemption": "WaitingForPreemptedWorkloads",
    "WaitingForPodsReady": "WaitingForPodsReady",
    "ClusterQueueNotFound": "Misconfigured",
    "LocalQueueNotFound": "Misconfigured",
    "ClusterQueueInactive": "Misconfigured",
    "UndeclaredResource": "Misconfigured",
    "NamespaceMismatch": "Misconfigured",
    "Stopped": "Suspended",
    "JobHeldUser": "Suspended",
    "JobHeldAdmin": "Suspended",
}
"""phalanx's pending reasons as Kueue v0.19's structured ``QuotaReserved=False`` reasons
(UnadmittedWorkloadsObservability); the rest are ``Pending``, as before v0.19."""


def pending_reason(code: str | None) -> str:
    """The Kueue reason of a pending workload's ``QuotaReserved=False`` condition."""
    if code is None:
        return "PendingEvaluation"
    return _PENDING_REASONS.get(code, "Pending")


def workload_conditions(row: JobRow, events: Sequence[JobEventRow]) -> list[dict[str, Any]]:
    """The Workload's conditions after ``events`` (oldest first) and the row's current state."""
    conds = _Conditions()
    created = row.submit_time
    conds.set("QuotaReserved", False, "Pending", "the workload is waiting for quota", created)
    for event in events:
        t = event.time
        data = event.data or {}
        if event.kind == "Admitted":
            cq = data.get("cluster_queue") or row.cluster_queue or ""
            conds.set(
                "QuotaReserved", True, "QuotaReserved", f"Quota reserved in ClusterQueue {cq}", t
            )
            conds.set("Admitted", True, "Admitted", "The workload is admitted", t)
            conds.set("PodsReady", False, "WaitForStart", "Not all pods are ready or succeeded", t)
            conds.clear_eviction(t)
        elif event.kind == "Started":
            conds.set(
                "PodsReady",
                True,
                "Started",
                "All pods reached readiness and the workload is running",
                t,
            )
        elif event.kind == "Evicting":
            message = event.message or _eviction_message(event.reason, data)
            conds.set("Evicted", True, event.reason or "Evicted", message, t)
            preemption = data.get("preemption_reason")
            if event.reason == "Preempted" and preemption:
                conds.set("Preempted", True, str(preemption), message, t)
        elif event.kind == "Requeued":
            conds.set("QuotaReserved", False, "Pending", f"requeued: {event.reason}", t)
            conds.set("Admitted", False, "NoReservation", "The workload has no reservation", t)
            if "PodsReady" in conds.items:
                conds.set(
                    "PodsReady", False, "WaitForStart", "Not all pods are ready or succeeded", t
                )
            conds.set(
                "Requeued",
                True,
                event.reason or "Requeued",
                f"The workload was requeued: {event.reason}",
                t,
            )
        elif event.kind == "Deactivated":
            message = event.message or "The workload is deactivated"
            conds.set("Evicted", True, "Deactivated", message, t)
            conds.set("QuotaReserved", False, "Inadmissible", message, t)
            conds.set("Admitted", False, "NoReservation", "The workload has no reservation", t)
            conds.set("Finished", True, event.reason or "Deactivated", message, t)
        elif event.kind in ("Finished", "Cancelled"):
            state = event.reason or row.state
            if state == JobState.COMPLETED.value:
                conds.set(
                    "Finished", True, "Succeeded", event.message or "Job finished successfully", t
                )
            else:
                message = event.message or f"Job {state.lower()}"
                conds.set("Finished", True, "Failed", message, t)
    state = JobState(row.state)
    if state is JobState.PENDING and row.reason and row.message:
        since = conds.items["QuotaReserved"]["_since"]
        conds.set("QuotaReserved", False, pending_reason(row.reason), row.message, since)
    if state.finished and "Finished" not in conds.items:
        at = row.end_time or row.submit_time
        reason = "Succeeded" if state is JobState.COMPLETED else "Failed"
        conds.set("Finished", True, reason, row.message or f"Job {state.value.lower()}", at)
    return conds.out()


def _eviction_message(reason: str, data: dict[str, Any]) -> str:
    if reason == "Preempted":
        by = data.get("preemptor")
        why = data.get("preemption_reason") or ""
        return f"Preempted to accommodate a workload (job {by}) due to {why}".strip()
    if reason == "PodsReadyTimeout":
        return "Exceeded the PodsReady timeout"
    return f"Evicted: {reason}"


def _pod_sets(row: JobRow) -> list[dict[str, Any]]:
    kube = _kube(row)
    templates: dict[str, Any] = {}
    if kube is not None:
        templates = _templates(kube)
    out: list[dict[str, Any]] = []
    for pod_set in row.submission.get("podSets") or []:
        name = str(pod_set.get("name") or "main")
        requests = format_resources(parse_resources(pod_set.get("requests") or {}))
        template = templates.get(name) or {
            "spec": {"containers": [{"name": "main", "resources": {"requests": requests}}]}
        }
        entry: dict[str, Any] = {"name": name, "count": int(pod_set.get("count") or 1)}
        if pod_set.get("minCount") is not None:
            entry["minCount"] = pod_set["minCount"]
        entry["template"] = template
        out.append(entry)
    return out


def _templates(kube: dict[str, Any]) -> dict[str, Any]:
    """Pod templates by pod set name, from the job's manifest."""
    spec = (kube.get("manifest") or {}).get("spec") or {}
    kind = kube["kind"]
    if kind == "Job":
        return {"main": spec.get("template")}
    if kind == "JobSet":
        return {
            rj.get("name"): ((rj.get("template") or {}).get("spec") or {}).get("template")
            for rj in spec.get("replicatedJobs") or []
        }
    if kind == "PyTorchJob":
        return {
            role.lower(): (rs or {}).get("template")
            for role, rs in (spec.get("pytorchReplicaSpecs") or {}).items()
        }
    if kind == "RayJob":
        cluster = spec.get("rayClusterSpec") or {}
        out = {"head": (cluster.get("headGroupSpec") or {}).get("template")}
        for group in cluster.get("workerGroupSpecs") or []:
            out[group.get("groupName")] = group.get("template")
        return out
    return {p.get("name") or "main": p.get("template") for p in spec.get("podSets") or []}


def _topology_assignment(nodes: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Kueue v1beta2's ``topologyAssignment`` of a pod set: its pods per node, by the
    nodes' hostnames (one slice)."""
    counts = [int(n["count"]) for n in nodes]
    pods: dict[str, Any] = (
        {"universal": counts[0]} if len(set(counts)) == 1 else {"individual": counts}
    )
    return {
        "levels": [HOSTNAME_LABEL],
        "slices": [
            {
                "domainCount": len(nodes),
                "valuesPerLevel": [{"individual": {"roots": [str(n["node"]) for n in nodes]}}],
                "podCounts": pods,
            }
        ],
    }


def _admission(row: JobRow) -> dict[str, Any] | None:
    if row.assignment is None or JobState(row.state) is JobState.PENDING:
        return None
    # Where a TAS workload's pods go: for a job placed in a flavor with a Topology.
    topology = _topology_placed(row)
    admit = row.assignment.get("admit") or {}
    requests = {
        str(p.get("name") or "main"): parse_resources(p.get("requests") or {})
        for p in row.submission.get("podSets") or []
    }
    assignments = []
    for pod_set in admit.get("pod_sets") or []:
        name = str(pod_set.get("name"))
        count = int(pod_set.get("count", sum(n["count"] for n in pod_set.get("nodes") or [])))
        usage = {r: q * count for r, q in requests.get(name, {}).items()}
        assignment: dict[str, Any] = {
            "name": name,
            "flavors": dict(pod_set.get("flavors") or {}),
            "resourceUsage": format_resources(usage),
            "count": count,
        }
        if topology:
            assignment["topologyAssignment"] = _topology_assignment(pod_set.get("nodes") or [])
        assignments.append(assignment)
    return {
        "clusterQueue": admit.get("cluster_queue") or row.cluster_queue,
        "podSetAssignments": assignments,
    }


def _topology_placed(row: JobRow) -> bool:
    return bool(row.assignment is not None and row.assignment.get("topology"))


def workload(row: JobRow, events: Sequence[JobEventRow]) -> dict[str, Any]:
    """The Kueue ``Workload`` of a job."""
    kube = _kube(row)
    namespace = kube["namespace"] if kube else row.tenant
    labels = {"phalanx.io/job-id": str(row.id)}
    owners: list[dict[str, Any]] = []
    if kube is not None and kube["kind"] != "Workload":
        owners.append(
            {"apiVersion": API_VERSIONS[kube["kind"]], "kind": kube["kind"], "name": kube["name"]}
        )
    spec: dict[str, Any] = {"podSets": _pod_sets(row), "active": not _deactivated(events)}
    if row.queue:
        spec["queueName"] = row.queue
    if row.priority_class:
        spec["priorityClassRef"] = {
            "group": "kueue.x-k8s.io",
            "kind": "WorkloadPriorityClass",
            "name": row.priority_class,
        }
    if row.priority is not None:
        spec["priority"] = row.priority
    status: dict[str, Any] = {"conditions": workload_conditions(row, events)}
    admission = _admission(row)
    if admission is not None:
        status["admission"] = admission
    requeues = sum(1 for e in events if e.kind == "Requeued")
    if requeues:
        status["requeueState"] = {"count": requeues}
    metadata: dict[str, Any] = {
        "name": workload_name(row),
        "namespace": namespace,
        "labels": labels,
        "creationTimestamp": rfc3339(row.submit_time),
    }
    if owners:
        metadata["ownerReferences"] = owners
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": metadata,
        "spec": spec,
        "status": status,
    }


def _deactivated(events: Sequence[JobEventRow]) -> bool:
    return any(e.kind == "Deactivated" for e in events)


# ---------------------------------------------------------------------- Kubernetes jobs


def _pods(row: JobRow) -> int:
    return sum(int(p.get("count") or 1) for p in row.submission.get("podSets") or [])


def _completions(row: JobRow, kube: dict[str, Any]) -> int:
    return sum(
        int(p.get("jobs", 1)) * int(p.get("completions", 1)) for p in kube.get("podSets") or []
    )


_COMPLETE = {
    "Job": ("Complete", "CompletionsReached", "Reached expected number of succeeded pods"),
    "JobSet": ("Completed", "AllJobsCompleted", "jobset completed successfully"),
    "PyTorchJob": ("Succeeded", "PyTorchJobSucceeded", "PyTorchJob successfully completed."),
    "RayJob": ("Complete", "Complete", "the RayJob's entrypoint succeeded"),
}
"""Each kind's condition for success: type, reason, message."""


def kube_object(row: JobRow) -> dict[str, Any]:
    """The job as the Kubernetes object it was applied as, with a status from its state."""
    kube = _kube(row)
    assert kube is not None
    manifest = dict(kube.get("manifest") or {})
    kind = str(kube["kind"])
    state = JobState(row.state)
    metadata = dict(manifest.get("metadata") or {})
    metadata["creationTimestamp"] = rfc3339(row.submit_time)
    metadata.setdefault("labels", {})
    metadata["annotations"] = {
        **(metadata.get("annotations") or {}),
        "phalanx.io/job-id": str(row.id),
    }
    manifest["metadata"] = metadata
    spec = dict(manifest.get("spec") or {})
    if kind in ("Job", "JobSet", "RayJob"):
        # Kueue keeps a job suspended until it is admitted.
        spec["suspend"] = state is JobState.PENDING
    manifest["spec"] = spec
    running = state in (JobState.RUNNING, JobState.COMPLETING)
    active = len((row.assignment or {}).get("tasks") or []) if running else 0
    status: dict[str, Any] = {}
    if row.start_time is not None:
        status["startTime"] = rfc3339(row.start_time)
    if state is JobState.COMPLETED and row.end_time is not None:
        status["completionTime"] = rfc3339(row.end_time)
    condition: tuple[str, str, str, float | None] | None = None
    if state is JobState.PENDING:
        condition = ("Suspended", "JobSuspended", "Job suspended", row.submit_time)
    elif state is JobState.COMPLETED:
        condition = (*_COMPLETE[kind], row.end_time)
    elif state is JobState.TIMEOUT:
        message = "Job was active longer than specified deadline"
        condition = ("Failed", "DeadlineExceeded", message, row.end_time)
    elif state.finished:
        reason = "BackoffLimitExceeded" if state is JobState.FAILED else state.value.title()
        condition = ("Failed", reason, row.message or f"Job {state.value.lower()}", row.end_time)
    elif running and kind == "PyTorchJob":
        message = f"PyTorchJob {kube['name']} is running."
        condition = ("Running", "PyTorchJobRunning", message, row.start_time)
    conditions = []
    if condition is not None:
        kind_, reason, message, at = condition
        conditions.append(
            {
                "type": kind_,
                "status": "True",
                "reason": reason,
                "message": message,
                "lastTransitionTime": rfc3339(at if at is not None else row.submit_time),
            }
        )
    if kind == "RayJob":
        status["jobStatus"] = {
            JobState.PENDING: "PENDING",
            JobState.ADMITTED: "PENDING",
            JobState.RUNNING: "RUNNING",
            JobState.COMPLETING: "RUNNING",
            JobState.COMPLETED: "SUCCEEDED",
        }.get(state, "FAILED" if state is not JobState.CANCELLED else "STOPPED")
        status["jobDeploymentStatus"] = (
            "Suspended"
            if state is JobState.PENDING
            else "Running"
            if not state.finished
            else "Complete"
            if state is JobState.COMPLETED
            else "Failed"
        )
    status["active"] = active
    status["succeeded"] = _completions(row, kube) if state is JobState.COMPLETED else 0
    status["failed"] = 0 if state is JobState.COMPLETED or not state.finished else 1
    status["conditions"] = conditions
    manifest["status"] = status
    manifest["apiVersion"] = API_VERSIONS[kind]
    manifest["kind"] = kind
    return manifest


# ---------------------------------------------------------------------- routes


def _visible(plane: Any, principal: Principal) -> list[JobRow]:
    tenants = None if principal.admin else sorted(principal.tenants)
    rows: list[JobRow] = plane.store.list_jobs(tenants=tenants)
    return rows


def _find(
    rows: list[JobRow], name: str, label: Callable[[JobRow], tuple[str, str]], kind: str
) -> JobRow:
    namespace, _, short = name.rpartition("/")
    found = [
        r for r in rows if label(r)[1] == short and (not namespace or label(r)[0] == namespace)
    ]
    if len(found) == 1:
        return found[0]
    if not found:
        raise NotFound(f"{kind.lower()}/{name} not found")
    spaces = ", ".join(sorted({label(r)[0] for r in found}))
    raise NotFound(
        f"{kind.lower()}/{name}: in several namespaces ({spaces}): name it namespace/name"
    )


def _workload_label(row: JobRow) -> tuple[str, str]:
    kube = _kube(row)
    return (kube["namespace"] if kube else row.tenant), workload_name(row)


def _kube_label(row: JobRow) -> tuple[str, str]:
    kube = _kube(row) or {}
    return str(kube.get("namespace", "")), str(kube.get("name", ""))


def _visible_of(plane: Any, principal: Principal, kind: str) -> list[JobRow]:
    """The caller's jobs that were applied as a Kubernetes object of ``kind``."""
    return [r for r in _visible(plane, principal) if (_kube(r) or {}).get("kind") == kind]


def _list_workloads(plane: Plane, principal: Caller) -> dict[str, Any]:
    rows = _visible(plane, principal)
    events = plane.store.events_of([r.id for r in rows])
    return {"kind": "Workload", "items": [workload(r, events.get(r.id, [])) for r in rows]}


def _get_workload(plane: Plane, principal: Caller, name: str) -> dict[str, Any]:
    row = _find(_visible(plane, principal), name, _workload_label, "Workload")
    return workload(row, plane.store.job_events(row.id))


def _list_jobs_of(kind: str) -> Callable[..., dict[str, Any]]:
    def handler(plane: Plane, principal: Caller) -> dict[str, Any]:
        return {
            "kind": kind,
            "items": [kube_object(r) for r in _visible_of(plane, principal, kind)],
        }

    return handler


def _get_job_of(kind: str) -> Callable[..., dict[str, Any]]:
    def handler(plane: Plane, principal: Caller, name: str) -> dict[str, Any]:
        row = _find(_visible_of(plane, principal, kind), name, _kube_label, kind)
        return kube_object(row)

    return handler


def _delete_job_of(kind: str) -> Callable[..., dict[str, Any]]:
    def handler(plane: Plane, principal: Caller, name: str) -> dict[str, Any]:
        """Delete the object: its job is cancelled (stopped if it runs), as its pods would be."""
        row = _find(_visible_of(plane, principal, kind), name, _kube_label, kind)
        namespace, short = _kube_label(row)
        if not JobState(row.state).finished:
            plane.cancel(principal, row.id)
        return {"kind": kind, "name": f"{namespace}/{short}", "outcome": "deleted"}

    return handler


for _plural in WORKLOAD_PLURALS:
    router.add_api_route(f"/{_plural}", _list_workloads, methods=["GET"], summary="Workloads")
    router.add_api_route(
        f"/{_plural}/{{name:path}}", _get_workload, methods=["GET"], summary="One Workload"
    )
for _plural, _kind in JOB_PLURALS.items():
    router.add_api_route(f"/{_plural}", _list_jobs_of(_kind), methods=["GET"], summary=f"{_kind}s")
    router.add_api_route(
        f"/{_plural}/{{name:path}}", _get_job_of(_kind), methods=["GET"], summary=f"One {_kind}"
    )
    router.add_api_route(
        f"/{_plural}/{{name:path}}",
        _delete_job_of(_kind),
        methods=["DELETE"],
        summary=f"Delete a {_kind} (cancels its job)",
    )
