"""Table responses: what ``kubectl get`` prints (``Accept: application/json;as=Table;
v=v1;g=meta.k8s.io``).

:func:`columns` and :func:`cells` follow the real API server's table convertors:

* Custom resources (Kueue's kinds, JobSet, PyTorchJob, RayJob, phalanx's own):
  ``Name`` then the CRD's ``additionalPrinterColumns``, or ``Name``, ``Age``
  when the CRD declares none (so ClusterQueue and LocalQueue have no Age
  column, as with real Kueue). Each column's JSONPath is evaluated on the
  object; a missing value is ``None`` (an empty cell); ``date``
  columns are ages, ``integer`` columns numbers, ``string`` columns the value
  as text.
* Built-in kinds (Job, Pod, Node, Namespace, Event): the columns and cell rules
  of Kubernetes' own printers, wide columns (``priority: 1``) included: the API
  server always sends them and kubectl shows them with ``-o wide``.

Ages are Kubernetes' ``HumanDuration`` (:func:`human_duration`) of ``now`` minus
the timestamp; ``now`` is passed in (epoch seconds), never read from a clock.

kubectl asks for rows with ``includeObject`` unset (the server's default,
``Metadata``: each row carries a ``PartialObjectMetadata``, which is what
``-o name``, ``--show-labels`` and ``-L`` read) or ``includeObject=Object``
when it sorts (``--sort-by`` evaluates JSONPath on the full object).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from phalanx.kubeapi.resources import Resource

__all__ = ["cells", "columns", "evaluate", "human_duration", "partial_metadata", "table"]


@dataclass(frozen=True)
class _Column:
    name: str
    type: str
    json_path: str = ""
    priority: int = 0
    format: str = ""
    description: str = ""


_NAME = _Column("Name", "string", ".metadata.name", format="name",
                description="The object's name, unique within its namespace.")  # fmt: skip
_AGE = _Column("Age", "date", ".metadata.creationTimestamp",
               description="Time since the object was created.")  # fmt: skip

# The additionalPrinterColumns of each custom resource (Kueue's CRDs for Kueue's kinds).
_CRD_COLUMNS: dict[tuple[str, str], tuple[_Column, ...]] = {
    ("kueue.x-k8s.io", "ClusterQueue"): (
        _Column("Cohort", "string", ".spec.cohortName",
                description="The Cohort the ClusterQueue belongs to."),
        _Column("Strategy", "string", ".spec.queueingStrategy", 1,
                description="How pending workloads are ordered."),
        _Column("Pending Workloads", "integer", ".status.pendingWorkloads",
                description="Workloads waiting for admission."),
        _Column("Admitted Workloads", "integer", ".status.admittedWorkloads", 1,
                description="Admitted workloads that have not finished."),
    ),
    ("kueue.x-k8s.io", "LocalQueue"): (
        _Column("ClusterQueue", "string", ".spec.clusterQueue",
                description="The ClusterQueue behind the queue."),
        _Column("Pending Workloads", "integer", ".status.pendingWorkloads",
                description="Workloads waiting for admission."),
        _Column("Admitted Workloads", "integer", ".status.admittedWorkloads",
                description="Admitted workloads that have not finished."),
    ),
    ("kueue.x-k8s.io", "Workload"): (
        _Column("Queue", "string", ".spec.queueName",
                description="The LocalQueue the workload was submitted to."),
        _Column("Reserved in", "string", ".status.admission.clusterQueue",
                description="The ClusterQueue holding the workload's quota."),
        _Column("Admitted", "string", '.status.conditions[?(@.type=="Admitted")].status',
                description="Whether the workload is admitted."),
        _Column("Finished", "string", '.status.conditions[?(@.type=="Finished")].status',
                description="Whether the workload has finished."),
        _AGE,
    ),
    ("kueue.x-k8s.io", "WorkloadPriorityClass"): (
        _Column("Value", "integer", ".value", description="The priority value."),
    ),
    # The job operators' CRDs (JobSet, Kubeflow's training operator, KubeRay).
    ("jobset.x-k8s.io", "JobSet"): (
        _Column("TerminalState", "string", ".status.terminalState",
                description="Completed or Failed once the JobSet has finished."),
        _Column("Restarts", "string", ".status.restarts",
                description="How many times the JobSet was restarted."),
        _Column("Completed", "string", '.status.conditions[?(@.type=="Completed")].status',
                description="Whether the JobSet has completed."),
        _Column("Suspended", "string", ".spec.suspend",
                description="Whether the JobSet is suspended."),
        _AGE,
    ),
    ("kubeflow.org", "PyTorchJob"): (
        _Column("State", "string", ".status.conditions[-1:].type",
                description="The latest condition."),
        _AGE,
    ),
    ("ray.io", "RayJob"): (
        _Column("Job Status", "string", ".status.jobStatus",
                description="The Ray job's status."),
        _Column("Deployment Status", "string", ".status.jobDeploymentStatus",
                description="The RayJob's deployment status."),
        _Column("Ray Cluster Name", "string", ".status.rayClusterName",
                description="The Ray cluster the job runs on."),
        _Column("Start Time", "string", ".status.startTime", description="When the job started."),
        _Column("End Time", "string", ".status.endTime", description="When the job ended."),
        _AGE,
    ),
    ("phalanx.io", "Tenant"): (
        _Column("Parent", "string", ".spec.parent", description="The parent tenant."),
        _Column("Allocation", "number", ".spec.allocation", description="The fair share."),
        _AGE,
    ),
    ("phalanx.io", "PriorityClass"): (
        _Column("Value", "integer", ".value", description="The priority value."),
        _AGE,
    ),
}  # fmt: skip

_CUSTOM_GROUPS = ("kueue.x-k8s.io", "jobset.x-k8s.io", "kubeflow.org", "ray.io", "phalanx.io")

_BUILTIN_COLUMNS: dict[tuple[str, str], tuple[_Column, ...]] = {
    ("batch", "Job"): (
        _NAME,
        _Column("Status", "string", description="The job's status."),
        _Column("Completions", "string", description="Succeeded pods of those needed."),
        _Column("Duration", "string", description="How long the job ran (or has run)."),
        _Column("Age", "string", description="Time since the job was created."),
        _Column("Containers", "string", priority=1, description="The template's containers."),
        _Column("Images", "string", priority=1, description="The containers' images."),
        _Column("Selector", "string", priority=1, description="The job's pod selector."),
    ),
    ("", "Pod"): (
        _NAME,
        _Column("Ready", "string", description="Ready containers of all containers."),
        _Column("Status", "string", description="The pod's aggregate status."),
        _Column("Restarts", "string", description="Container restarts, and the last one's age."),
        _Column("Age", "string", description="Time since the pod was created."),
        _Column("IP", "string", priority=1, description="The pod's IP address."),
        _Column("Node", "string", priority=1, description="The node the pod runs on."),
        _Column("Nominated Node", "string", priority=1,
                description="The node preemption nominated for the pod."),
        _Column("Readiness Gates", "string", priority=1,
                description="Readiness gates that are true, of all."),
    ),
    ("", "Node"): (
        _NAME,
        _Column("Status", "string", description="Ready or NotReady, and SchedulingDisabled."),
        _Column("Roles", "string", description="The node's roles (node-role labels)."),
        _Column("Age", "string", description="Time since the node was created."),
        _Column("Version", "string", description="The kubelet's version."),
        _Column("Internal-IP", "string", priority=1, description="The internal address."),
        _Column("External-IP", "string", priority=1, description="The external address."),
        _Column("OS-Image", "string", priority=1, description="The operating system image."),
        _Column("Kernel-Version", "string", priority=1, description="The kernel version."),
        _Column("Container-Runtime", "string", priority=1,
                description="The container runtime and its version."),
    ),
    ("", "Namespace"): (
        _NAME,
        _Column("Status", "string", description="Active or Terminating."),
        _Column("Age", "string", description="Time since the namespace was created."),
    ),
    ("", "Event"): (
        _Column("Last Seen", "string", description="Time since the event was last seen."),
        _Column("Type", "string", description="Normal or Warning."),
        _Column("Reason", "string", description="Why the event happened."),
        _Column("Object", "string", description="The object the event is about."),
        _Column("Subobject", "string", priority=1, description="The part of the object."),
        _Column("Source", "string", priority=1, description="Who reported the event."),
        _Column("Message", "string", description="What happened."),
        _Column("First Seen", "string", priority=1, description="Time since first seen."),
        _Column("Count", "string", priority=1, description="How many times it happened."),
        _Column("Name", "string", priority=1, format="name", description="The event's name."),
    ),
}  # fmt: skip
_BUILTIN_COLUMNS[("events.k8s.io", "Event")] = _BUILTIN_COLUMNS[("", "Event")]

_DEFAULT = (_NAME, _Column("Created At", "date", description="When the object was created."))


def _columns_of(r: Resource) -> tuple[_Column, ...]:
    key = (r.group, r.kind)
    if key in _BUILTIN_COLUMNS:
        return _BUILTIN_COLUMNS[key]
    if r.group in _CUSTOM_GROUPS:
        crd = _CRD_COLUMNS.get(key)
        if crd is not None and r.group == "kueue.x-k8s.io" and r.version == "v1beta1":
            crd = tuple(_V1BETA1.get(c.json_path, c) for c in crd)
        return (_NAME, *(crd if crd is not None else (_AGE,)))
    return _DEFAULT


_V1BETA1 = {
    ".spec.cohortName": _Column(
        "Cohort", "string", ".spec.cohort", description="The Cohort the ClusterQueue belongs to."
    )
}


def columns(resource: Resource) -> list[dict[str, Any]]:
    """The Table's ``columnDefinitions`` for ``resource``."""
    return [
        {
            "name": c.name,
            "type": c.type,
            "format": c.format,
            "description": c.description,
            "priority": c.priority,
        }
        for c in _columns_of(resource)
    ]


# --------------------------------------------------------------------------- durations


def human_duration(seconds: float) -> str:
    """Kubernetes' ``duration.HumanDuration``: ``5s``, ``2m3s``, ``10m``, ``3h``, ``2d``, ``3y``.

    Under two minutes in seconds; then minutes (with seconds below 10m); hours
    (with minutes below 8h) from 3h; days (with hours below 8d) from 48h; years
    (with days below 8y) from two years. A little negative (clock skew) is
    ``0s``; more than a second negative is ``<invalid>``.
    """
    whole = math.trunc(seconds)
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 120:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 10:
        s = whole % 60
        return f"{minutes}m" if s == 0 else f"{minutes}m{s}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = whole // 3600
    if hours < 8:
        m = minutes % 60
        return f"{hours}h" if m == 0 else f"{hours}h{m}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        h = hours % 24
        return f"{hours // 24}d" if h == 0 else f"{hours // 24}d{h}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        years = hours // 24 // 365
        return f"{years}y" if days == 0 else f"{years}y{days}d"
    return f"{hours // 24 // 365}y"


def _epoch(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _since(value: Any, now: float) -> str:
    """Kubernetes' ``translateTimestampSince``: ``<unknown>`` without a timestamp."""
    t = _epoch(value)
    return "<unknown>" if t is None else human_duration(now - t)


# --------------------------------------------------------------------------- JSONPath

_STEP = re.compile(
    r"""\.(?P<field>[A-Za-z0-9_-]+)
      | \[\?\(@\.(?P<key>[A-Za-z0-9_-]+)\s*==\s*(?P<q>["'])(?P<want>[^"']*)(?P=q)\)\]
      | \[(?P<start>-?\d+):\]
      | \[(?P<index>-?\d+)\]""",
    re.VERBOSE,
)


def evaluate(path: str, obj: Any) -> list[Any]:
    """The values the JSONPath ``path`` selects in ``obj``: the forms printer columns
    use (``.a.b``, ``.a[0]``, ``.a[-1:]``, ``.a[?(@.type=="Admitted")].status``)."""
    current: list[Any] = [obj]
    pos = 0
    while pos < len(path):
        m = _STEP.match(path, pos)
        if m is None:
            raise ValueError(f"unsupported JSONPath {path!r} at {pos}")
        pos = m.end()
        nxt: list[Any] = []
        for value in current:
            if m.group("field") is not None:
                if isinstance(value, Mapping) and m.group("field") in value:
                    nxt.append(value[m.group("field")])
            elif m.group("key") is not None:
                if isinstance(value, list):
                    nxt.extend(
                        v
                        for v in value
                        if isinstance(v, Mapping) and v.get(m.group("key")) == m.group("want")
                    )
            elif isinstance(value, list):
                if m.group("start") is not None:
                    nxt.extend(value[int(m.group("start")) :])
                elif m.group("index") is not None:
                    i = int(m.group("index"))
                    if -len(value) <= i < len(value):
                        nxt.append(value[i])
        current = nxt
    return current


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, separators=(",", ":"))


def _crd_cell(column: _Column, obj: Mapping[str, Any], now: float) -> Any:
    found = evaluate(column.json_path, obj)
    if not found or found[0] is None:
        return None
    value = found[0]
    if column.type == "date":
        return _since(value, now) if isinstance(value, str) else None
    if column.type == "integer":
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return int(value)
    if column.type == "number":
        return value if isinstance(value, int | float) and not isinstance(value, bool) else None
    if column.type == "boolean":
        return value if isinstance(value, bool) else None
    return _text(value)


# --------------------------------------------------------------------------- built-in printers


def _get(obj: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _has_true(conditions: Any, kind: str) -> bool:
    return any(
        isinstance(c, Mapping) and c.get("type") == kind and c.get("status") == "True"
        for c in _list(conditions)
    )


def _selector_text(selector: Any) -> str:
    """``metav1.FormatLabelSelector``: requirements sorted by key, ``<none>`` when empty."""
    if not isinstance(selector, Mapping):
        return "<none>"
    parts: list[tuple[str, str]] = []
    for key, value in (selector.get("matchLabels") or {}).items():
        parts.append((str(key), f"{key}={value}"))
    for expr in _list(selector.get("matchExpressions")):
        if not isinstance(expr, Mapping):
            continue
        key, op = str(expr.get("key", "")), expr.get("operator")
        values = ",".join(sorted(str(v) for v in _list(expr.get("values"))))
        text = {
            "In": f"{key} in ({values})",
            "NotIn": f"{key} notin ({values})",
            "Exists": key,
            "DoesNotExist": f"!{key}",
        }.get(str(op), key)
        parts.append((key, text))
    text = ",".join(t for _, t in sorted(parts, key=lambda p: p[0]))
    return text or "<none>"


def _job_cells(obj: Mapping[str, Any], now: float) -> list[Any]:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    succeeded = int(status.get("succeeded") or 0)
    if spec.get("completions") is not None:
        completions = f"{succeeded}/{spec['completions']}"
    elif int(spec.get("parallelism") or 0) > 1:
        completions = f"{succeeded}/1 of {spec['parallelism']}"
    else:
        completions = f"{succeeded}/1"
    start, end = _epoch(status.get("startTime")), _epoch(status.get("completionTime"))
    duration = ""
    if start is not None:
        duration = human_duration((end if end is not None else now) - start)
    conditions = status.get("conditions")
    if _has_true(conditions, "Complete"):
        state = "Complete"
    elif _has_true(conditions, "Failed"):
        state = "Failed"
    elif _get(obj, "metadata", "deletionTimestamp"):
        state = "Terminating"
    elif _has_true(conditions, "Suspended"):
        state = "Suspended"
    elif _has_true(conditions, "FailureTarget"):
        state = "FailureTarget"
    elif _has_true(conditions, "SuccessCriteriaMet"):
        state = "SuccessCriteriaMet"
    else:
        state = "Running"
    containers = [c for c in _list(_get(spec, "template", "spec", "containers")) if c]
    return [
        _get(obj, "metadata", "name"),
        state,
        completions,
        duration,
        _since(_get(obj, "metadata", "creationTimestamp"), now),
        ",".join(str(c.get("name", "")) for c in containers),
        ",".join(str(c.get("image", "")) for c in containers),
        _selector_text(spec.get("selector")),
    ]


def _terminated_reason(term: Mapping[str, Any], prefix: str = "") -> str:
    if term.get("reason"):
        return f"{prefix}{term['reason']}"
    if term.get("signal"):
        return f"{prefix}Signal:{term['signal']}"
    return f"{prefix}ExitCode:{term.get('exitCode', 0)}"


def _pod_cells(obj: Mapping[str, Any], now: float) -> list[Any]:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    phase = str(status.get("phase") or "")
    reason = str(status.get("reason") or phase)
    for cond in _list(status.get("conditions")):
        if cond.get("type") == "PodScheduled" and cond.get("reason") == "SchedulingGated":
            reason = "SchedulingGated"
    total = len(_list(spec.get("containers")))
    ready = restarts = 0
    last_restart: float | None = None

    def note_restart(cs: Mapping[str, Any]) -> None:
        nonlocal restarts, last_restart
        restarts += int(cs.get("restartCount") or 0)
        finished = _epoch(_get(cs, "lastState", "terminated", "finishedAt"))
        if finished is not None and (last_restart is None or finished > last_restart):
            last_restart = finished

    init_count = len(_list(spec.get("initContainers")))
    initializing = False
    for i, cs in enumerate(_list(status.get("initContainerStatuses"))):
        note_restart(cs)
        state = cs.get("state") or {}
        term, waiting = state.get("terminated"), state.get("waiting")
        if term is not None and int(term.get("exitCode") or 0) == 0:
            continue
        if term is not None:
            reason = _terminated_reason(term, "Init:")
        elif waiting and waiting.get("reason") and waiting.get("reason") != "PodInitializing":
            reason = f"Init:{waiting['reason']}"
        else:
            reason = f"Init:{i}/{init_count}"
        initializing = True
        break
    initialized = _has_true(status.get("conditions"), "Initialized")
    if not initializing or initialized:
        restarts, last_restart = 0, None
        running = False
        for cs in reversed(_list(status.get("containerStatuses"))):
            note_restart(cs)
            state = cs.get("state") or {}
            waiting, term = state.get("waiting"), state.get("terminated")
            if waiting and waiting.get("reason"):
                reason = str(waiting["reason"])
            elif term is not None:
                reason = _terminated_reason(term)
            elif cs.get("ready") and state.get("running") is not None:
                running = True
                ready += 1
        if reason == "Completed" and running:
            reason = "Running" if _has_true(status.get("conditions"), "Ready") else "NotReady"
    deleting = _get(obj, "metadata", "deletionTimestamp")
    if deleting and status.get("reason") == "NodeLost":
        reason = "Unknown"
    elif deleting and phase not in ("Succeeded", "Failed"):
        reason = "Terminating"
    restarts_text = str(restarts)
    if restarts and last_restart is not None:
        restarts_text = f"{restarts} ({human_duration(now - last_restart)} ago)"
    ips = _list(status.get("podIPs"))
    ip = (ips[0].get("ip") if ips and isinstance(ips[0], Mapping) else None) or "<none>"
    gates = _list(spec.get("readinessGates"))
    gates_text = "<none>"
    if gates:
        by_type = {c.get("type"): c.get("status") for c in _list(status.get("conditions"))}
        true = sum(1 for g in gates if by_type.get(g.get("conditionType")) == "True")
        gates_text = f"{true}/{len(gates)}"
    return [
        _get(obj, "metadata", "name"),
        f"{ready}/{total}",
        reason,
        restarts_text,
        _since(_get(obj, "metadata", "creationTimestamp"), now),
        ip,
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        gates_text,
    ]


def _node_cells(obj: Mapping[str, Any], now: float) -> list[Any]:
    status = obj.get("status") or {}
    ready = [
        c
        for c in _list(status.get("conditions"))
        if isinstance(c, Mapping) and c.get("type") == "Ready"
    ]
    states = [("Ready" if ready[-1].get("status") == "True" else "NotReady")] if ready else []
    if not states:
        states = ["Unknown"]
    if _get(obj, "spec", "unschedulable"):
        states.append("SchedulingDisabled")
    roles: set[str] = set()
    for key, value in (_get(obj, "metadata", "labels") or {}).items():
        if key.startswith("node-role.kubernetes.io/") and key.split("/", 1)[1]:
            roles.add(key.split("/", 1)[1])
        elif key == "kubernetes.io/role" and value:
            roles.add(str(value))
    info = status.get("nodeInfo") or {}

    def address(kind: str) -> str:
        for a in _list(status.get("addresses")):
            if isinstance(a, Mapping) and a.get("type") == kind:
                return str(a.get("address"))
        return "<none>"

    return [
        _get(obj, "metadata", "name"),
        ",".join(states),
        ",".join(sorted(roles)) or "<none>",
        _since(_get(obj, "metadata", "creationTimestamp"), now),
        info.get("kubeletVersion") or "",
        address("InternalIP"),
        address("ExternalIP"),
        info.get("osImage") or "<unknown>",
        info.get("kernelVersion") or "<unknown>",
        info.get("containerRuntimeVersion") or "<unknown>",
    ]


def _event_cells(obj: Mapping[str, Any], now: float, events_v1: bool) -> list[Any]:
    if events_v1:
        # events.k8s.io/v1's names for the same fields.
        involved = obj.get("regarding") or {}
        message = obj.get("note") or ""
        first_ts, last_ts = obj.get("deprecatedFirstTimestamp"), obj.get("deprecatedLastTimestamp")
        count = obj.get("deprecatedCount") or 0
        source = obj.get("deprecatedSource") or {}
        controller = obj.get("reportingController") or ""
    else:
        involved = obj.get("involvedObject") or {}
        message = obj.get("message") or ""
        first_ts, last_ts = obj.get("firstTimestamp"), obj.get("lastTimestamp")
        count = obj.get("count") or 0
        source = obj.get("source") or {}
        controller = obj.get("reportingComponent") or ""
    first = _since(first_ts, now) if first_ts else _since(obj.get("eventTime"), now)
    last = _since(last_ts, now) if last_ts else first
    series = obj.get("series")
    if isinstance(series, Mapping):
        last = _since(series.get("lastObservedTime"), now)
        count = series.get("count") or 0
    elif not count:
        count = 1
    kind = str(involved.get("kind") or "").lower()
    target = f"{kind}/{involved['name']}" if involved.get("name") else kind
    component = source.get("component") or controller
    instance = source.get("host") or obj.get("reportingInstance") or ""
    return [
        last,
        obj.get("type") or "",
        obj.get("reason") or "",
        target,
        involved.get("fieldPath") or "",
        f"{component}, {instance}" if instance else component,
        str(message).strip(),
        first,
        int(count),
        _get(obj, "metadata", "name"),
    ]


def cells(resource: Resource, obj: Mapping[str, Any], now: float) -> list[Any]:
    """One row's cells for ``obj``, one per column of :func:`columns` (wide ones too)."""
    key = (resource.group, resource.kind)
    if key == ("batch", "Job"):
        return _job_cells(obj, now)
    if key == ("", "Pod"):
        return _pod_cells(obj, now)
    if key == ("", "Node"):
        return _node_cells(obj, now)
    if key == ("", "Namespace"):
        return [
            _get(obj, "metadata", "name"),
            _get(obj, "status", "phase") or "",
            _since(_get(obj, "metadata", "creationTimestamp"), now),
        ]
    if resource.kind == "Event" and resource.group in ("", "events.k8s.io"):
        return _event_cells(obj, now, resource.group == "events.k8s.io")
    cols = _columns_of(resource)
    if cols is _DEFAULT:
        return [_get(obj, "metadata", "name"), _get(obj, "metadata", "creationTimestamp")]
    out: list[Any] = [_get(obj, "metadata", "name")]
    out.extend(_crd_cell(c, obj, now) for c in cols[1:])
    return out


_POD_DONE = {
    "Succeeded": [
        {"type": "Completed", "status": "True", "reason": "Succeeded",
         "message": "The pod has completed successfully."}
    ],
    "Failed": [
        {"type": "Completed", "status": "True", "reason": "Failed", "message": "The pod failed."}
    ],
}  # fmt: skip


def partial_metadata(obj: Mapping[str, Any]) -> dict[str, Any]:
    """``obj``'s metadata as a ``meta.k8s.io/v1`` PartialObjectMetadata."""
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": dict(obj.get("metadata") or {}),
    }


def table(
    resource: Resource,
    objects: Iterable[Mapping[str, Any]],
    now: float,
    include_object: str = "Metadata",
    *,
    resource_version: str = "",
    continue_token: str = "",
) -> dict[str, Any]:
    """The ``meta.k8s.io/v1`` Table of ``objects``.

    ``include_object`` is the request's ``includeObject``: ``None`` (no object),
    ``Object`` (the object as stored) or ``Metadata`` (the default, also for an
    empty value: a PartialObjectMetadata).
    """
    rows = []
    for obj in objects:
        row: dict[str, Any] = {"cells": cells(resource, obj, now)}
        if resource.group == "" and resource.kind == "Pod":
            done = _POD_DONE.get(str(_get(obj, "status", "phase")))
            if done is not None:
                row["conditions"] = done
        if include_object == "None":
            row["object"] = None
        elif include_object == "Object":
            row["object"] = dict(obj)
        else:
            row["object"] = partial_metadata(obj)
        rows.append(row)
    metadata: dict[str, Any] = {"resourceVersion": resource_version}
    if continue_token:
        metadata["continue"] = continue_token
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": columns(resource),
        "rows": rows,
    }
