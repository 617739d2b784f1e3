"""Storage of ``v1`` Pods: a read-only view of the tasks of admitted phalanx jobs, and
their logs (``pods/log``).

Which pods a job has:

* A job applied as a Kubernetes kind (Job, JobSet, PyTorchJob, RayJob, Workload)
  has the pods phalanx runs for it: :func:`phalanx.dialects.kueue.jobs.pod_plan`
  of the admitted pod counts (``row.assignment["tasks"]``), named as their
  hostnames are. A task (a parallelism slot) runs its pods one after another.
* Any other job (sbatch, srun, ``phalanx submit``) has one pod per task, named
  ``<job name>-<job id>-<rank>`` (the name made DNS-safe), with one container
  ``main``.

Only jobs that hold an admission have pods: a pending (or requeued) job has none,
and a job deleted through the Kubernetes API takes its pods with it. A pod's
``resourceVersion`` is its job's revision; its uid is stable for one attempt of
the job (a requeued job's new pods are new objects, as a real Job's are).

A pod's log is ``JOBDIR/kube/logs/<pod>/<container>.log`` of the job's attempt,
which :mod:`phalanx.runtime.kubepod` writes beside the job's output; without it
(a job that is not a Kubernetes kind, another runtime) the pod's log is the
job's output file (:meth:`ControlPlane.output_paths`), shared by its tasks.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import re
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from phalanx.api.kube import API_VERSIONS, workload_name
from phalanx.kubeapi.jobs import CONTROLLER_UID, JOB_NAME, kube_of
from phalanx.kubeapi.meta import rfc3339, uid_for
from phalanx.kubeapi.status import KubeError
from phalanx.kubeapi.storage import Change, Ctx, Storage
from phalanx.model import JobState
from phalanx.store import JobRow, ObjectRow
from phalanx.store.records import TombstoneRow

__all__ = ["PodStorage", "PodView", "job_uid", "pods_of"]

FOLLOW_POLL_S = 0.2
"""How often a followed log is read again."""

_SBATCH_POD = re.compile(r"^.*-(\d+)-(\d+)$")
_HOST_IP = "127.0.0.1"


@dataclass
class PodView:
    """One pod of a job, before rendering."""

    name: str
    row: JobRow
    rank: int
    pod_set: str
    node: str
    index: int | None
    position: int
    """Its place among the pods its task runs one after another (0: the first)."""
    containers: list[dict[str, Any]] = field(default_factory=list)
    kube: bool = True


def job_uid(row: JobRow, kind: str, stored: dict[str, Any] | None) -> str:
    """The uid :class:`~phalanx.kubeapi.jobs.JobStorage` gives the job's ``kind`` object."""
    return str((stored or {}).get("uid") or uid_for(kind, str(row.id), row.submit_time))


def _dns(text: str) -> str:
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return name[:40] or "job"


def pods_of(row: JobRow) -> list[PodView]:
    """The pods of ``row``'s current (or last) admission; empty when it has none."""
    placed = (row.assignment or {}).get("tasks") or []
    if not placed:
        return []
    kube = kube_of(row)
    if kube is None:
        return [
            PodView(
                name=f"{_dns(row.name)}-{row.id}-{int(t.get('rank', i))}",
                row=row,
                rank=int(t.get("rank", i)),
                pod_set=str(t.get("podSet", "") or "main"),
                node=str(t.get("node", "")),
                index=None,
                position=0,
                containers=[_plain_container(row)],
                kube=False,
            )
            for i, t in enumerate(placed)
        ]
    from phalanx.dialects.kueue.jobs import pod_plan

    run = row.parsed_submission.run.kube
    if run is None:
        return []
    counts: dict[str, int] = {}
    for t in placed:
        counts[str(t.get("podSet", ""))] = counts.get(str(t.get("podSet", "")), 0) + 1
    try:
        plan = pod_plan(run, counts)
    except (KeyError, ValueError, IndexError):
        return []
    containers_of = {p.name: p.containers for p in run.pod_sets}
    taken: dict[str, int] = {}
    out: list[PodView] = []
    for i, t in enumerate(placed):
        pod_set = str(t.get("podSet", ""))
        slot = taken.get(pod_set, 0)
        taken[pod_set] = slot + 1
        slots = plan.get(pod_set) or []
        if slot >= len(slots):
            continue
        for position, pod in enumerate(slots[slot]):
            containers = pod.get("containers")
            if containers is None:  # a RayJob worker: its pod set's containers
                containers = [
                    {"name": c.name, "image": c.image, "command": list(c.command)}
                    for c in containers_of.get(pod_set, [])
                ]
            out.append(
                PodView(
                    name=str(pod["name"]),
                    row=row,
                    rank=int(t.get("rank", i)),
                    pod_set=pod_set,
                    node=str(t.get("node", "")),
                    index=pod.get("index"),
                    position=position,
                    containers=list(containers),
                )
            )
    return out


def _plain_container(row: JobRow) -> dict[str, Any]:
    run = row.submission.get("run") or {}
    command = run.get("command") or []
    if not command and run.get("script") is not None:
        command = ["/bin/sh", "-c", "# sbatch script"]
    image = str(run.get("container") or run.get("image") or "")
    return {"name": "main", "image": image, "command": [str(c) for c in command]}


class PodStorage(Storage):
    """``v1`` Pods (read-only), and their logs."""

    field_selectors = (
        "metadata.name",
        "metadata.namespace",
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    )

    # -- reading ------------------------------------------------------------------

    def _visible_rows(self, ctx: Ctx, namespace: str | None) -> list[JobRow]:
        p = ctx.principal
        tenants = [namespace] if namespace else None if p.admin else sorted(p.tenants)
        return [
            r
            for r in ctx.plane.store.list_jobs(tenants=tenants)
            if r.state != JobState.PENDING.value and r.assignment
        ]

    def _render_rows(self, ctx: Ctx, rows: Sequence[JobRow]) -> list[dict[str, Any]]:
        if not rows:
            return []
        stored = ctx.plane.store.meta("job", [str(r.id) for r in rows])
        out: list[dict[str, Any]] = []
        for r in rows:
            meta = stored.get(str(r.id))
            if _has_no_pods(r, meta):
                continue
            views = pods_of(r)
            started = _started_pods(ctx, r, views)
            out.extend(self.render(ctx, v, meta, started) for v in views)
        return out

    def items(self, ctx: Ctx, namespace: str | None) -> list[dict[str, Any]]:
        return self._render_rows(ctx, self._visible_rows(ctx, namespace))

    def _find(self, ctx: Ctx, namespace: str | None, name: str) -> PodView | None:
        """The pod ``name``: its job is found by id (``<name>-<id>-<rank>``) or by the
        Kubernetes job names its name may start with, not by rendering every pod."""
        store = ctx.plane.store
        tenants = [namespace] if namespace else None
        candidates: list[JobRow] = []
        numbered = _SBATCH_POD.match(name)
        if numbered:
            row = store.get_job(int(numbered.group(1)))
            if row is not None:
                candidates.append(row)
        parts = name.split("-")
        prefixes = ["-".join(parts[:i]) for i in range(1, len(parts))]
        if prefixes:
            candidates += store.list_jobs(names=prefixes, tenants=tenants)
        seen: set[int] = set()
        for row in reversed(candidates):  # the newest job of a name first
            if row.id in seen:
                continue
            seen.add(row.id)
            if namespace and row.tenant != namespace:
                continue
            if row.state == JobState.PENDING.value or not row.assignment:
                continue
            if not ctx.principal.may_act_for(row.tenant):
                continue
            for view in pods_of(row):
                if view.name == name:
                    meta = store.meta("job", [str(row.id)]).get(str(row.id))
                    return None if _has_no_pods(row, meta) else view
        return None

    def get(self, ctx: Ctx, namespace: str | None, name: str) -> dict[str, Any]:
        view = self._find(ctx, namespace, name)
        if view is None:
            raise KubeError.not_found(ctx.target(name))
        meta = ctx.plane.store.meta("job", [str(view.row.id)]).get(str(view.row.id))
        return self.render(ctx, view, meta, _started_pods(ctx, view.row, [view]))

    # -- rendering ----------------------------------------------------------------

    def render(
        self, ctx: Ctx, view: PodView, stored: dict[str, Any] | None, started: set[str] | None
    ) -> dict[str, Any]:
        row = view.row
        kube = kube_of(row) or {}
        kind = str(kube.get("kind") or "")
        attempt = max(1, row.attempt)
        created = row.start_time or row.submit_time
        labels: dict[str, str] = {"phalanx.io/job-id": str(row.id)}
        if row.queue:
            labels["kueue.x-k8s.io/queue-name"] = row.queue
        if view.kube:
            labels["kueue.x-k8s.io/podset"] = view.pod_set
        owners: list[dict[str, Any]] = []
        if kind and kind in API_VERSIONS:
            kube_name = str(kube.get("name") or "")
            uid = job_uid(row, kind, stored)
            labels.update(_kind_labels(kind, kube_name, uid, view))
            owners.append(
                {
                    "apiVersion": API_VERSIONS[kind],
                    "kind": kind,
                    "name": kube_name,
                    "uid": uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            )
        else:
            labels["phalanx.io/job-name"] = _label_value(row.name)
            labels["kueue.x-k8s.io/workload"] = workload_name(row)
        meta: dict[str, Any] = {
            "name": view.name,
            "namespace": row.tenant,
            "uid": uid_for("Pod", f"{row.id}/{attempt}/{view.name}", row.submit_time),
            "resourceVersion": str(row.revision),
            "creationTimestamp": rfc3339(created),
            "labels": labels,
            "annotations": {"phalanx.io/job-id": str(row.id), "phalanx.io/rank": str(view.rank)},
        }
        if owners:
            meta["ownerReferences"] = owners
        phase, ready, state, exit_code = _pod_state(row, view, started)
        containers = [
            {
                "name": str(c.get("name") or "main"),
                "image": str(c.get("image") or ""),
                **({"command": list(c.get("command") or [])} if c.get("command") else {}),
                "imagePullPolicy": "IfNotPresent",
                "terminationMessagePolicy": "File",
            }
            for c in view.containers
        ] or [{"name": "main", "image": ""}]
        statuses = []
        started_at = rfc3339(row.start_time) if row.start_time else None
        for c in containers:
            if state == "running":
                cstate: dict[str, Any] = {"running": {"startedAt": started_at}}
            elif state == "terminated":
                done = phase == "Succeeded"
                cstate = {
                    "terminated": {
                        "exitCode": exit_code,
                        "reason": "Completed" if done else "Error",
                        "startedAt": started_at,
                        "finishedAt": rfc3339(row.end_time or ctx.now),
                    }
                }
                if row.signal:
                    cstate["terminated"]["signal"] = row.signal
            else:
                cstate = {"waiting": {"reason": "ContainerCreating"}}
            statuses.append(
                {
                    "name": c["name"],
                    "image": c["image"],
                    "imageID": "",
                    "containerID": f"phalanx://{row.id}/{attempt}/{view.name}/{c['name']}",
                    "ready": ready,
                    "started": state == "running",
                    "restartCount": attempt - 1,
                    "state": cstate,
                }
            )
        scheduled_at = rfc3339(created)
        ready_text = "True" if ready else "False"
        status: dict[str, Any] = {
            "phase": phase,
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled_at},
                {
                    "type": "Initialized",
                    "status": "True" if state != "waiting" else "False",
                    "lastTransitionTime": scheduled_at,
                },
                {
                    "type": "ContainersReady",
                    "status": ready_text,
                    "lastTransitionTime": scheduled_at,
                },
                {"type": "Ready", "status": ready_text, "lastTransitionTime": scheduled_at},
            ],
            "hostIP": _HOST_IP,
            "hostIPs": [{"ip": _HOST_IP}],
            "containerStatuses": statuses,
            "qosClass": "BestEffort",
        }
        if state != "waiting":
            status["podIP"] = _HOST_IP
            status["podIPs"] = [{"ip": _HOST_IP}]
        if started_at:
            status["startTime"] = started_at
        if row.message and phase == "Failed":
            status["message"] = row.message
            status["reason"] = row.reason or "Error"
        spec: dict[str, Any] = {
            "containers": containers,
            "nodeName": view.node,
            "hostname": view.name,
            "restartPolicy": "Never",
            "schedulerName": "phalanx",
            "serviceAccountName": "default",
            "terminationGracePeriodSeconds": 30,
        }
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}

    # -- watching -----------------------------------------------------------------

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
        rows = [r for r in jobs if r.assignment and ctx.principal.may_act_for(r.tenant)]
        if not rows:
            return []
        stored = ctx.plane.store.meta("job", [str(r.id) for r in rows])
        out: list[Change] = []
        for r in rows:
            meta = stored.get(str(r.id))
            views = pods_of(r)
            started = _started_pods(ctx, r, views)
            # A requeued (pending) job's pods are gone, as are those of a job deleted
            # through the Kubernetes API; the watch reports them only if it showed them.
            kind = "DELETED" if _has_no_pods(r, meta) else "MODIFIED"
            out.extend(Change(kind, self.render(ctx, v, meta, started)) for v in views)
        return out

    # -- logs ---------------------------------------------------------------------

    def log(
        self, ctx: Ctx, namespace: str | None, name: str, query: dict[str, str]
    ) -> AsyncIterator[bytes]:
        """The log of one container of the pod, as ``GET pods/NAME/log`` answers it."""
        view = self._find(ctx, namespace, name)
        if view is None:
            raise KubeError.not_found(ctx.target(name))
        names = [str(c.get("name") or "main") for c in view.containers] or ["main"]
        container = query.get("container") or ""
        if not container:
            if len(names) > 1:
                raise KubeError.bad_request(
                    f"a container name must be specified for pod {name}, choose one of: "
                    f"[{' '.join(names)}]"
                )
            container = names[0]
        elif container not in names:
            raise KubeError.bad_request(f"container {container} is not valid for pod {name}")
        started = _started_pods(ctx, view.row, [view])
        _, _, state, _ = _pod_state(view.row, view, started)
        if state == "waiting":
            raise KubeError.bad_request(
                f'container "{container}" in pod "{name}" is waiting to start: ContainerCreating'
            )
        path = _log_path(ctx, view, container, previous=_flag(query.get("previous")))
        if path is None:
            raise KubeError.bad_request(
                f'previous terminated container "{container}" in pod "{name}" not found'
            )
        follow = _flag(query.get("follow"))
        return _stream(
            ctx,
            view.row.id,
            path,
            follow=follow and state == "running",
            tail=_number(query.get("tailLines"), "tailLines"),
            limit=_number(query.get("limitBytes"), "limitBytes"),
            since=_number(query.get("sinceSeconds"), "sinceSeconds"),
            timestamps=_flag(query.get("timestamps")),
        )


def _flag(value: str | None) -> bool:
    return (value or "").lower() in ("true", "1")


def _number(value: str | None, name: str) -> int | None:
    if value in (None, ""):
        return None
    try:
        return max(0, int(str(value)))
    except ValueError:
        raise KubeError.bad_request(f"{name}: {value!r} is not an integer") from None


def _label_value(text: str) -> str:
    value = re.sub(r"[^A-Za-z0-9._-]+", "-", text)[:63].strip("-._")
    return value or "job"


def _has_no_pods(row: JobRow, stored: dict[str, Any] | None) -> bool:
    deleted = stored is not None and stored.get("deleted") is not None
    return deleted or row.state == JobState.PENDING.value or not row.assignment


def _kind_labels(kind: str, name: str, uid: str, view: PodView) -> dict[str, str]:
    """The labels the kind's controller puts on its pods (``kubectl logs job/X`` and
    ``describe job`` select pods by the Job's ``spec.selector``)."""
    if kind == "Job":
        labels = {CONTROLLER_UID: uid, JOB_NAME: name, "controller-uid": uid, "job-name": name}
        if view.index is not None:
            labels["batch.kubernetes.io/job-completion-index"] = str(view.index)
        return labels
    if kind == "JobSet":
        return {
            "jobset.sigs.k8s.io/jobset-name": name,
            "jobset.sigs.k8s.io/replicatedjob-name": view.pod_set,
        }
    if kind == "PyTorchJob":
        labels = {
            "training.kubeflow.org/job-name": name,
            "training.kubeflow.org/operator-name": "pytorchjob-controller",
            "training.kubeflow.org/replica-type": view.pod_set.lower(),
        }
        if view.index is not None:
            labels["training.kubeflow.org/replica-index"] = str(view.index)
        return labels
    if kind == "RayJob":
        return {"ray.io/originated-from-cr-name": name, "ray.io/group": view.pod_set}
    return {"kueue.x-k8s.io/workload": name}


def _attempt_dir(ctx: Ctx, row: JobRow) -> Path | None:
    runtime = getattr(ctx.plane, "runtime", None)
    find = getattr(runtime, "attempt_dir", None)
    if find is None or row.attempt < 1:
        return None
    try:
        return Path(find(row.id, row.attempt))
    except (TypeError, ValueError, OSError):
        return None


def _started_pods(ctx: Ctx, row: JobRow, views: Sequence[PodView]) -> set[str] | None:
    """The pods whose containers have started (their log folders exist); None when the
    runtime keeps no per-pod logs (then a task's first pod counts as started)."""
    if not any(v.kube for v in views):
        return None
    folder = _attempt_dir(ctx, row)
    if folder is None:
        return None
    try:
        return set(os.listdir(folder / "kube" / "logs"))
    except OSError:
        return set() if folder.exists() else None


def _pod_state(row: JobRow, view: PodView, started: set[str] | None) -> tuple[str, bool, str, int]:
    """(phase, ready, container state ``waiting``/``running``/``terminated``, exit code)."""
    state = JobState(row.state)
    if state.finished:
        if state is JobState.COMPLETED:
            return "Succeeded", False, "terminated", 0
        code = row.exit_code if row.exit_code else 1
        if started is not None and view.name not in started:
            return "Failed", False, "waiting", code
        return "Failed", False, "terminated", code
    if state is JobState.ADMITTED or row.start_time is None:
        return "Pending", False, "waiting", 0
    has_begun = view.name in started if started is not None else view.position == 0
    if not has_begun:
        return "Pending", False, "waiting", 0
    if started is not None and view.kube:
        # A later pod of the same task has begun: this one is done.
        for other in pods_of(row):
            if other.rank == view.rank and other.position > view.position and other.name in started:
                return "Succeeded", False, "terminated", 0
    return "Running", True, "running", 0


def _log_path(ctx: Ctx, view: PodView, container: str, *, previous: bool) -> Path | None:
    folder = _attempt_dir(ctx, view.row)
    if folder is not None and view.kube:
        base = folder / "kube" / "logs" / view.name
        path = base / (f"{container}.previous.log" if previous else f"{container}.log")
        if path.exists() or (not previous and base.exists()):
            return path
        if previous:
            return None
    if previous:
        return None
    out, _ = ctx.plane.output_paths(view.row)
    return Path(out)


def _read(path: Path, offset: int) -> bytes:
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            return fh.read()
    except OSError:
        return b""


def _tail(data: bytes, lines: int) -> bytes:
    if lines <= 0:
        return b""
    parts = data.splitlines(keepends=True)
    return b"".join(parts[-lines:])


def _stamp(data: bytes, pending: bytearray) -> bytes:
    """Whole lines of ``pending + data`` with the time they were read in front."""
    pending.extend(data)
    cut = pending.rfind(b"\n")
    if cut < 0:
        return b""
    whole = bytes(pending[: cut + 1])
    del pending[: cut + 1]
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f000Z").encode()
    return b"".join(now + b" " + line for line in whole.splitlines(keepends=True))


async def _stream(
    ctx: Ctx,
    job_id: int,
    path: Path,
    *,
    follow: bool,
    tail: int | None,
    limit: int | None,
    since: int | None,
    timestamps: bool,
) -> AsyncIterator[bytes]:
    from starlette.concurrency import run_in_threadpool

    if since is not None:
        try:
            # Best effort: a file last written before the window has nothing in it.
            if os.path.getmtime(path) < time.time() - since and not follow:
                return
        except OSError:
            pass
    data = await run_in_threadpool(_read, path, 0)
    offset = len(data)
    if tail is not None:
        data = _tail(data, tail)
    sent = 0
    pending = bytearray()

    def shape(chunk: bytes) -> bytes:
        nonlocal sent
        if timestamps:
            chunk = _stamp(chunk, pending)
        if limit is not None:
            chunk = chunk[: max(0, limit - sent)]
        sent += len(chunk)
        return chunk

    out = shape(data)
    if out:
        yield out
    while follow and (limit is None or sent < limit):
        await asyncio.sleep(FOLLOW_POLL_S)
        more = await run_in_threadpool(_read, path, offset)
        offset += len(more)
        if more:
            out = shape(more)
            if out:
                yield out
            continue
        row = await run_in_threadpool(ctx.plane.store.get_job, job_id)
        if row is None or JobState(row.state).finished or row.state == JobState.PENDING.value:
            last = await run_in_threadpool(_read, path, offset)
            if last:
                out = shape(last)
                if out:
                    yield out
            break
    if timestamps and pending and (limit is None or sent < limit):
        pending.extend(b"\n")
        out = shape(b"")
        if out:
            yield out
