"""Storage of Events (``v1`` and ``events.k8s.io/v1``, read-only): phalanx's job
histories told as Kueue and Kubernetes' job controller tell theirs.

Every entry of a job's history (:meth:`phalanx.store.Store.events_of`) becomes
one or more Events: about the job's Workload (Kueue's ``QuotaReserved``,
``Admitted``, ``Preempted``, ``Evicted...``, ``Requeued``, ``Finished``; the
rest as phalanx's own reasons), and, for a job applied as a Kubernetes kind,
about that object as the job controller reports it (``Resumed``,
``SuccessfulCreate``, ``Suspended``, ``Completed``, ``BackoffLimitExceeded``).
A pending job also has one ``Pending`` event with its pending message. An
Event's name is ``<object name>.<hex>``, the hex being the history entry's id
times 256 plus the Event's place among those made from it, so names are stable
and unique. Its ``resourceVersion`` is its job's revision.

Lists with an ``involvedObject.name`` (``regarding.name``) field selector, as
``kubectl describe`` sends, read only the jobs of that name
(:meth:`EventStorage.items_for`). Events never change once made, so a watch
sends each once: per watch (its :attr:`Ctx.watch_state`) the storage keeps the
highest history id it has shown, listing included, and a changed job yields
only its entries above it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from phalanx.api.kube import API_VERSIONS, workload_name
from phalanx.kubeapi.jobs import JobStorage, kube_of
from phalanx.kubeapi.meta import rfc3339
from phalanx.kubeapi.pods import job_uid, pods_of
from phalanx.kubeapi.selectors import FieldSelector
from phalanx.kubeapi.storage import Change, Ctx, Storage
from phalanx.model import JobState
from phalanx.store import JobRow, ObjectRow
from phalanx.store.records import JobEventRow, TombstoneRow

__all__ = ["EventStorage", "job_events"]

_WORKLOAD_API = API_VERSIONS["Workload"]
_SEEN = "events.seen"
"""The key of the highest history id a watch has shown, in its ``watch_state``."""
_MAX_CREATED = 20
"""SuccessfulCreate events per admission at most (a large job's would flood describe)."""


def _involved(kind: str, api_version: str, name: str, row: JobRow, uid: str) -> dict[str, Any]:
    return {
        "kind": kind,
        "namespace": row.tenant,
        "name": name,
        "uid": uid,
        "apiVersion": api_version,
        "resourceVersion": str(row.revision),
    }


def _event(
    row: JobRow,
    involved: dict[str, Any],
    number: int,
    at: float,
    type_: str,
    reason: str,
    message: str,
    component: str,
) -> dict[str, Any]:
    stamp = rfc3339(at)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{involved['name']}.{number:x}",
            "namespace": row.tenant,
            "uid": f"phalanx-event-{row.id}-{number:x}",
            "resourceVersion": str(row.revision),
            "creationTimestamp": stamp,
        },
        "involvedObject": involved,
        "reason": reason,
        "message": message,
        "source": {"component": component},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
        "type": type_,
        "eventTime": None,
        "reportingComponent": component,
        "reportingInstance": "",
    }


def _wait(seconds: float) -> str:
    return f"{max(0, round(seconds))}s"


def job_events(
    row: JobRow, history: Sequence[JobEventRow], stored: dict[str, Any] | None
) -> list[tuple[int, dict[str, Any]]]:
    """The Events of one job, each with the id of the history entry it comes from (0:
    the pending event, made from the job's current state)."""
    workload = _involved(
        "Workload", _WORKLOAD_API, workload_name(row), row, job_uid(row, "Workload", stored)
    )
    kube = kube_of(row) or {}
    kind = str(kube.get("kind") or "")
    owner: dict[str, Any] | None = None
    if kind in API_VERSIONS and kind != "Workload":
        owner = _involved(
            kind, API_VERSIONS[kind], str(kube.get("name")), row, job_uid(row, kind, stored)
        )
    out: list[tuple[int, dict[str, Any]]] = []
    reserved_at = row.submit_time

    def add(
        entry: JobEventRow,
        target: dict[str, Any] | None,
        type_: str,
        reason: str,
        message: str,
        component: str,
    ) -> None:
        if target is None:
            return
        number = entry.id * 256 + sum(1 for i, _ in out if i == entry.id)
        out.append(
            (entry.id, _event(row, target, number, entry.time, type_, reason, message, component))
        )

    for e in history:
        data = e.data or {}
        if e.kind == "Admitted":
            cq = str(data.get("cluster_queue") or row.cluster_queue or "")
            add(
                e,
                workload,
                "Normal",
                "QuotaReserved",
                f"Quota reserved in ClusterQueue {cq}, wait time since queued was "
                f"{_wait(e.time - reserved_at)}",
                "kueue-admission",
            )
            add(
                e,
                workload,
                "Normal",
                "Admitted",
                f"Admitted by ClusterQueue {cq}, wait time since reservation was 0s",
                "kueue-admission",
            )
            if owner is not None:
                add(e, owner, "Normal", "Resumed", "Job resumed", "job-controller")
                for pod in pods_of(row)[:_MAX_CREATED]:
                    add(
                        e,
                        owner,
                        "Normal",
                        "SuccessfulCreate",
                        f"Created pod: {pod.name}",
                        "job-controller",
                    )
        elif e.kind == "Evicting":
            reason = e.reason or "Evicted"
            if reason == "Preempted":
                message = e.message or "Preempted to accommodate a workload"
                add(e, workload, "Normal", "Preempted", message, "kueue-admission")
            else:
                message = e.message or f"The workload was evicted: {reason}"
                kueue_reason = reason if reason.startswith("Evicted") else f"EvictedDueTo{reason}"
                add(e, workload, "Normal", kueue_reason, message, "kueue-admission")
            add(e, owner, "Normal", "Suspended", "Job suspended", "job-controller")
        elif e.kind == "Requeued":
            reserved_at = e.time
            add(
                e,
                workload,
                "Normal",
                "Requeued",
                f"The workload was requeued: {e.reason or 'requeued'}",
                "kueue-admission",
            )
        elif e.kind == "Deactivated":
            message = e.message or "The workload is deactivated"
            add(e, workload, "Warning", "WorkloadDeactivated", message, "kueue-admission")
        elif e.kind in ("Finished", "Cancelled"):
            state = e.reason or row.state
            if e.kind == "Finished" and state == JobState.COMPLETED.value:
                add(
                    e,
                    workload,
                    "Normal",
                    "Finished",
                    e.message or "Job finished successfully",
                    "kueue-admission",
                )
                add(e, owner, "Normal", "Completed", "Job completed", "job-controller")
            elif e.kind == "Cancelled":
                message = e.message or f"Job cancelled: {e.reason or 'cancelled'}"
                add(e, workload, "Normal", "Stopped", message, "phalanx")
            else:
                message = e.message or f"Job {state.lower()}"
                add(e, workload, "Warning", "Finished", message, "kueue-admission")
                add(
                    e,
                    owner,
                    "Warning",
                    "BackoffLimitExceeded" if kind == "Job" else "Failed",
                    "Job has reached the specified backoff limit" if kind == "Job" else message,
                    "job-controller",
                )
        elif e.kind in ("Started", "Checkpointed", "Updated", "Held", "Released"):
            if e.kind == "Started":
                add(
                    e,
                    workload,
                    "Normal",
                    "PodsReady",
                    "All pods reached readiness and the workload is running",
                    "phalanx",
                )
            else:
                add(e, workload, "Normal", e.kind, e.message or e.kind, "phalanx")
        else:
            warn = e.kind in ("EpilogFailed", "ImageNotPulled", "NodeReplaced", "Signalled")
            message = e.message or (f"{e.kind}: {e.reason}" if e.reason else e.kind)
            add(e, workload, "Warning" if warn else "Normal", e.kind, message, "phalanx")
    if row.state == JobState.PENDING.value and row.message:
        pending = _event(
            row,
            workload,
            0,
            row.submit_time,
            "Normal",
            "Pending",
            row.message,
            "kueue-admission",
        )
        pending["metadata"]["name"] = f"{workload['name']}.pending"
        pending["lastTimestamp"] = rfc3339(max(row.submit_time, reserved_at))
        out.append((0, pending))
    return out


def to_events_v1(obj: dict[str, Any]) -> dict[str, Any]:
    """A ``v1`` Event in ``events.k8s.io/v1``'s shape."""
    stamp = obj.get("firstTimestamp")
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": obj["metadata"],
        "eventTime": (stamp or "").replace("Z", ".000000Z") if stamp else None,
        "reportingController": obj.get("reportingComponent") or "",
        "reportingInstance": obj.get("reportingInstance") or "",
        "action": obj.get("reason") or "",
        "reason": obj.get("reason") or "",
        "regarding": obj.get("involvedObject") or {},
        "note": obj.get("message") or "",
        "type": obj.get("type") or "Normal",
        "deprecatedSource": obj.get("source") or {},
        "deprecatedFirstTimestamp": obj.get("firstTimestamp"),
        "deprecatedLastTimestamp": obj.get("lastTimestamp"),
        "deprecatedCount": obj.get("count") or 1,
    }


class EventStorage(Storage):
    """Events of the jobs the caller may see, in both API groups' shapes."""

    field_selectors = (
        "metadata.name",
        "metadata.namespace",
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "regarding.kind",
        "regarding.namespace",
        "regarding.name",
        "regarding.uid",
        "regarding.apiVersion",
        "regarding.resourceVersion",
        "regarding.fieldPath",
        "reason",
        "reportingComponent",
        "reportingController",
        "source",
        "type",
    )

    def _rows(self, ctx: Ctx, namespace: str | None, names: list[str] | None) -> list[JobRow]:
        p = ctx.principal
        tenants = [namespace] if namespace else None if p.admin else sorted(p.tenants)
        if names is None:
            rows: list[JobRow] = ctx.plane.store.list_jobs(tenants=tenants)
            return rows
        found: dict[int, JobRow] = {}
        for kind in ("Workload", "Job", "JobSet", "PyTorchJob", "RayJob"):
            for name in names:
                row = JobStorage(kind)._find(ctx, namespace, name)
                if row is not None and (tenants is None or row.tenant in tenants):
                    found[row.id] = row
        return [found[k] for k in sorted(found)]

    def _render(self, ctx: Ctx, rows: Sequence[JobRow], after: int = -1) -> list[dict[str, Any]]:
        rows = [r for r in rows if ctx.principal.may_act_for(r.tenant)]
        if not rows:
            return []
        store = ctx.plane.store
        stored = store.meta("job", [str(r.id) for r in rows])
        histories = store.events_of([r.id for r in rows])
        v1 = ctx.resource.group == "events.k8s.io"
        seen = int(ctx.watch_state.get(_SEEN, 0))
        out: list[dict[str, Any]] = []
        for r in rows:
            meta = stored.get(str(r.id))
            if meta is not None and meta.get("deleted") is not None:
                continue
            for entry_id, obj in job_events(r, histories.get(r.id, []), meta):
                if after >= 0 and 0 < entry_id <= after:
                    continue
                seen = max(seen, entry_id)
                out.append(to_events_v1(obj) if v1 else obj)
        ctx.watch_state[_SEEN] = seen
        return out

    def items(self, ctx: Ctx, namespace: str | None) -> list[dict[str, Any]]:
        return self._render(ctx, self._rows(ctx, namespace, None))

    def items_for(
        self, ctx: Ctx, namespace: str | None, fields: FieldSelector
    ) -> list[dict[str, Any]]:
        """The events a list with ``fields`` may keep: with an involved object's name,
        only those of the jobs of that name (``kubectl describe``'s list)."""
        name = fields.value_of("involvedObject.name") or fields.value_of("regarding.name")
        if name is None:
            return self.items(ctx, namespace)
        ns = (
            namespace
            or fields.value_of("involvedObject.namespace")
            or fields.value_of("regarding.namespace")
        )
        return self._render(ctx, self._rows(ctx, ns, [name]))

    def get(self, ctx: Ctx, namespace: str | None, name: str) -> dict[str, Any]:
        # <object name>.<hex>: the object's jobs first, then everything.
        base = name.rsplit(".", 1)[0]
        for obj in self._render(ctx, self._rows(ctx, namespace, [base])):
            if obj["metadata"]["name"] == name:
                return obj
        return super().get(ctx, namespace, name)

    def touched_by(
        self, jobs: Sequence[JobRow], objects: Sequence[ObjectRow], gone: Sequence[TombstoneRow]
    ) -> bool:
        return bool(jobs)

    def changes(
        self,
        ctx: Ctx,
        jobs: Sequence[JobRow],
        objects: Sequence[ObjectRow],
        gone: Sequence[TombstoneRow],
    ) -> list[Change]:
        after = int(ctx.watch_state.get(_SEEN, 0))
        return [Change("MODIFIED", obj) for obj in self._render(ctx, list(jobs), after)]
