"""Storage of the job kinds: Kubernetes' Job, JobSet, PyTorchJob, RayJob, and Kueue's
Workload, all backed by phalanx jobs.

A job applied as one of these kinds is shown as that object (its ``status`` from
the job's state, :func:`phalanx.api.kube.kube_object`); every phalanx job, an
sbatch job included, has a Workload in its tenant's namespace
(:func:`phalanx.api.kube.workload`). Creating one submits a job, through the
control plane's apply, with the same checks as ``phalanx apply``; users create
jobs in their own namespaces. A job's spec cannot change once created (as a
Job's pod template cannot); labels and annotations can. Deleting one cancels
its job (its tasks are stopped) and takes it out of the Kubernetes API; the job
stays in phalanx's history (``sacct``, ``phalanx jobs``).
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from phalanx.api.kube import kube_object, workload, workload_name
from phalanx.errors import NotLeader, PhalanxError
from phalanx.kubeapi.meta import compose, stored_meta
from phalanx.kubeapi.objects import apply_manifest, status_success
from phalanx.kubeapi.status import KubeError, from_phalanx
from phalanx.kubeapi.storage import Change, Ctx, Storage
from phalanx.model import JobState
from phalanx.store import JobRow, ObjectRow
from phalanx.store.records import TombstoneRow

__all__ = ["JOB_KINDS", "JobStorage"]

JOB_KINDS = ("Job", "JobSet", "PyTorchJob", "RayJob", "Workload")

CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
JOB_NAME = "batch.kubernetes.io/job-name"

_WORKLOAD_NAME = re.compile(r"^job-(\d+)$")

RENDER_CACHE = 50_000
"""How many rendered job objects a kind keeps for its lists (about 2 KB each)."""


def kube_of(row: JobRow) -> dict[str, Any] | None:
    kube = (row.submission.get("run") or {}).get("kube")
    return kube if isinstance(kube, dict) else None


class JobStorage(Storage):
    """One job kind (``Workload``: every job)."""

    tracks_creation = True

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._rendered: OrderedDict[tuple[int, int, str], dict[str, Any]] = OrderedDict()
        """Lists' rendered objects by job, revision and version (a job that has not changed
        renders the same): the most recent :data:`RENDER_CACHE` of them."""
        self._lock = threading.Lock()

    # -- which rows ---------------------------------------------------------------

    def _mine(self, row: JobRow) -> bool:
        if self.kind == "Workload":
            return True
        kube = kube_of(row)
        return kube is not None and kube.get("kind") == self.kind

    def name_of(self, row: JobRow) -> str:
        if self.kind == "Workload":
            return workload_name(row)
        kube = kube_of(row) or {}
        return str(kube.get("name", ""))

    def _visible(self, ctx: Ctx, namespace: str | None) -> list[JobRow]:
        p = ctx.principal
        tenants = [namespace] if namespace else None if p.admin else sorted(p.tenants)
        rows = ctx.plane.store.list_jobs(tenants=tenants)
        return [r for r in rows if self._mine(r)]

    def _find(self, ctx: Ctx, namespace: str | None, name: str) -> JobRow | None:
        store = ctx.plane.store
        tenants = [namespace] if namespace else None
        candidates: list[JobRow] = []
        if self.kind == "Workload":
            numbered = _WORKLOAD_NAME.match(name)
            if numbered:
                row = store.get_job(int(numbered.group(1)))
                candidates = [row] if row is not None else []
            else:
                # <kind>-<name>-<hash>, or a Workload applied under its own name.
                names = {name}
                for prefix in ("job-", "jobset-", "pytorchjob-", "rayjob-"):
                    if name.startswith(prefix) and len(name) > len(prefix) + 6:
                        names.add(name[len(prefix) : -6])
                candidates = store.list_jobs(names=sorted(names), tenants=tenants)
        else:
            candidates = store.list_jobs(names=[name], tenants=tenants)
        found = [
            r
            for r in candidates
            if self._mine(r)
            and self.name_of(r) == name
            and (not namespace or r.tenant == namespace)
        ]
        if not found and self.kind == "Workload" and not _WORKLOAD_NAME.match(name):
            found = [r for r in self._visible(ctx, namespace) if self.name_of(r) == name]
        deleted = _deleted(ctx, found)
        live = [r for r in found if r.id not in deleted]
        return live[-1] if live else None

    # -- rendering ----------------------------------------------------------------

    def render(
        self, ctx: Ctx, row: JobRow, events: Sequence[Any] | None, stored: dict[str, Any] | None
    ) -> dict[str, Any]:
        is_workload = self.kind == "Workload"
        obj = workload(row, list(events or [])) if is_workload else kube_object(row)
        base = dict(obj.get("metadata") or {})
        owned: tuple[str, ...] = ()
        if stored and "annotations" in stored:
            base["annotations"] = {
                k: v
                for k, v in (base.get("annotations") or {}).items()
                if k.startswith("phalanx.io/")
            }
            owned = ("annotations",)
        meta = compose(
            base,
            stored,
            kind=self.kind,
            key=str(row.id),
            created=row.submit_time,
            revision=row.revision,
            generation=1,
            model_owned=owned,
        )
        obj["metadata"] = meta
        if self.kind == "Job":
            _job_selector(obj, meta["uid"], meta["name"])
        if ctx.resource.api_version != obj.get("apiVersion"):
            from phalanx.kubeapi.conversion import to_version

            obj = to_version(obj, ctx.resource.api_version)
        return obj

    def _render_rows(self, ctx: Ctx, rows: Sequence[JobRow]) -> list[dict[str, Any]]:
        """``rows`` rendered, in order (deleted ones too: the callers leave them out)."""
        store = ctx.plane.store
        stored = store.meta("job", [str(r.id) for r in rows]) if rows else {}
        events = store.events_of([r.id for r in rows]) if self.kind == "Workload" else {}
        return [self.render(ctx, r, events.get(r.id), stored.get(str(r.id))) for r in rows]

    def items(self, ctx: Ctx, namespace: str | None) -> list[dict[str, Any]]:
        return self.render_keyed(ctx, [r for _, r in self.keyed(ctx, namespace)])

    def keyed(self, ctx: Ctx, namespace: str | None) -> list[tuple[str, JobRow]]:
        """The visible jobs (deleted ones left out) with their ``namespace/name`` keys,
        unrendered: a list renders only its page."""
        rows = self._visible(ctx, namespace)
        deleted = _deleted(ctx, rows)
        return [(f"{r.tenant}/{self.name_of(r)}", r) for r in rows if r.id not in deleted]

    def render_keyed(self, ctx: Ctx, rows: Sequence[JobRow]) -> list[dict[str, Any]]:
        """``rows`` rendered, each once per revision (lists share the renders; callers
        must not change them)."""
        version = ctx.resource.api_version
        out: list[dict[str, Any] | None] = []
        missing: list[JobRow] = []
        with self._lock:
            for r in rows:
                hit = self._rendered.get((r.id, r.revision, version))
                out.append(hit)
                if hit is None:
                    missing.append(r)
        if missing:
            made = {id(r): o for r, o in zip(missing, self._render_rows(ctx, missing), strict=True)}
            with self._lock:
                for r in missing:
                    self._rendered[(r.id, r.revision, version)] = made[id(r)]
                while len(self._rendered) > RENDER_CACHE:
                    self._rendered.popitem(last=False)
            out = [o if o is not None else made[id(r)] for o, r in zip(out, rows, strict=True)]
        return [o for o in out if o is not None]

    def get(self, ctx: Ctx, namespace: str | None, name: str) -> dict[str, Any]:
        row = self._find(ctx, namespace, name)
        if row is None or not _may_see(ctx, row):
            raise KubeError.not_found(ctx.target(name))
        return self._render_rows(ctx, [row])[0]

    # -- writing ------------------------------------------------------------------

    def _check_write(self, ctx: Ctx, verb: str, namespace: str | None, name: str) -> None:
        ns = namespace or "default"
        if not ctx.principal.may_act_for(ns):
            raise KubeError.forbidden(ctx.principal.user, verb, ctx.target(name), ns)

    def create(
        self, ctx: Ctx, namespace: str | None, obj: dict[str, Any], *, dry_run: bool
    ) -> dict[str, Any]:
        metadata = dict(obj.get("metadata") or {})
        namespace = namespace or metadata.get("namespace") or "default"
        name = str(metadata.get("name") or "")
        if not name and metadata.get("generateName"):
            import secrets

            name = f"{metadata['generateName']}{secrets.token_hex(3)[:5]}"
        self._check_write(ctx, "create", namespace, name)
        if name and self._find(ctx, namespace, name) is not None:
            raise KubeError.already_exists(ctx.target(name))
        metadata.update(name=name, namespace=namespace)
        metadata.pop("generateName", None)
        body = {**obj, "metadata": metadata}
        import uuid

        uid = str(uuid.uuid4())
        meta = stored_meta(metadata, uid)
        key = ("job", f"{obj.get('kind')}/{namespace}/{name}")
        apply_manifest(ctx, body, key, meta, dry_run=dry_run, name=name)
        if dry_run:
            out = dict(body)
            out["metadata"] = {**metadata, "uid": uid}
            return out
        return self.get(ctx, namespace, name)

    def replace(
        self,
        ctx: Ctx,
        namespace: str | None,
        name: str,
        obj: dict[str, Any],
        *,
        dry_run: bool,
        subresource: str = "",
    ) -> dict[str, Any]:
        row = self._find(ctx, namespace, name)
        if row is None or not _may_see(ctx, row):
            raise KubeError.not_found(ctx.target(name))
        self._check_write(ctx, "update", row.tenant, name)
        current = self.get(ctx, namespace, name)
        if subresource == "status":
            return current  # the job's status is the scheduler's
        changed = _spec_changes(current.get("spec"), obj.get("spec"))
        if changed:
            raise KubeError.invalid(
                ctx.target(name),
                [
                    (
                        f"spec.{key}",
                        "Invalid value: field is immutable (phalanx runs the job as submitted; "
                        "delete it and create it again to change it)",
                    )
                    for key in changed
                ],
            )
        metadata = obj.get("metadata") or {}
        stored = ctx.plane.store.meta("job", [str(row.id)]).get(str(row.id)) or {}
        meta = {**stored, **stored_meta(metadata, current["metadata"]["uid"])}
        meta["annotations"] = {
            k: v
            for k, v in (meta.get("annotations") or {}).items()
            if not k.startswith("phalanx.io/")
        }
        if not dry_run and meta != stored:
            try:
                ctx.plane.put_meta(ctx.principal, "job", str(row.id), meta)
            except NotLeader:
                raise  # the app hands the request to the leader
            except PhalanxError as exc:
                raise from_phalanx(exc, ctx.target(name)) from None
            return self.get(ctx, namespace, name)
        if dry_run:
            out = dict(current)
            out["metadata"] = {
                **current["metadata"],
                **{k: v for k, v in meta.items() if k in ("labels", "annotations")},
            }
            return out
        return current

    def delete(
        self, ctx: Ctx, namespace: str | None, name: str, *, dry_run: bool
    ) -> dict[str, Any]:
        row = self._find(ctx, namespace, name)
        if row is None or not _may_see(ctx, row):
            raise KubeError.not_found(ctx.target(name))
        self._check_write(ctx, "delete", row.tenant, name)
        current = self.get(ctx, namespace, name)
        if dry_run:
            return status_success(ctx, name, current["metadata"]["uid"])
        try:
            if not JobState(row.state).finished:
                ctx.plane.cancel(ctx.principal, row.id)
            stored = ctx.plane.store.meta("job", [str(row.id)]).get(str(row.id)) or {}
            stored = {**stored, "uid": current["metadata"]["uid"], "deleted": ctx.now}
            ctx.plane.put_meta(ctx.principal, "job", str(row.id), stored)
        except NotLeader:
            raise  # the app hands the request to the leader
        except PhalanxError as exc:
            raise from_phalanx(exc, ctx.target(name)) from None
        return status_success(ctx, name, current["metadata"]["uid"])

    # -- watching -----------------------------------------------------------------

    def touched_by(
        self, jobs: Sequence[JobRow], objects: Sequence[ObjectRow], gone: Sequence[TombstoneRow]
    ) -> bool:
        return any(self._mine(r) for r in jobs)

    def changes(
        self,
        ctx: Ctx,
        jobs: Sequence[JobRow],
        objects: Sequence[ObjectRow],
        gone: Sequence[TombstoneRow],
    ) -> list[Change]:
        rows = [r for r in jobs if self._mine(r) and _may_see(ctx, r)]
        if not rows:
            return []
        store = ctx.plane.store
        stored = store.meta("job", [str(r.id) for r in rows])
        events = store.events_of([r.id for r in rows]) if self.kind == "Workload" else {}
        out: list[Change] = []
        for r in rows:
            meta = stored.get(str(r.id))
            obj = self.render(ctx, r, events.get(r.id), meta)
            deleted = meta is not None and meta.get("deleted") is not None
            out.append(Change("DELETED" if deleted else "MODIFIED", obj, r.created_revision))
        return out


def _ours(annotations: dict[str, Any] | None) -> dict[str, Any]:
    """The annotations phalanx sets on a job's object (``phalanx.io/job-id``)."""
    return {k: v for k, v in (annotations or {}).items() if k.startswith("phalanx.io/")}


def _may_see(ctx: Ctx, row: JobRow) -> bool:
    return ctx.principal.may_act_for(row.tenant)


def _deleted(ctx: Ctx, rows: Sequence[JobRow]) -> set[int]:
    if not rows:
        return set()
    # Many rows: one read of every job's metadata beats a read per 500 ids.
    names = None if len(rows) > 500 else [str(r.id) for r in rows]
    stored = ctx.plane.store.meta("job", names)
    return {int(k) for k, v in stored.items() if v.get("deleted") is not None}


_MANAGED_SPEC = {"suspend", "selector", "active"}
"""Spec fields phalanx sets itself (a pending job is suspended, as under Kueue)."""


def _spec_changes(current: Any, new: Any) -> list[str]:
    if new is None:
        return []
    if not isinstance(current, dict) or not isinstance(new, dict):
        return [] if current == new else ["spec"]
    keys = sorted(set(current) | set(new))
    out = []
    for key in keys:
        if key in _MANAGED_SPEC:
            continue
        if key == "template":
            if _strip_template(current.get(key)) != _strip_template(new.get(key)):
                out.append(key)
        elif current.get(key) != new.get(key):
            out.append(key)
    return out


def _strip_template(template: Any) -> Any:
    """A Job's pod template without the labels the API server adds to it."""
    if not isinstance(template, dict):
        return template
    meta = dict(template.get("metadata") or {})
    labels = {
        k: v
        for k, v in (meta.get("labels") or {}).items()
        if k not in (CONTROLLER_UID, JOB_NAME, "controller-uid", "job-name")
    }
    if labels:
        meta["labels"] = labels
    else:
        meta.pop("labels", None)
    out = dict(template)
    if meta:
        out["metadata"] = meta
    else:
        out.pop("metadata", None)
    return out


def _job_selector(obj: dict[str, Any], uid: str, name: str) -> None:
    """A Job's selector and pod labels, as the API server defaults them: ``kubectl logs
    job/X`` and ``describe`` find its pods by them."""
    spec = obj.setdefault("spec", {})
    labels = {CONTROLLER_UID: uid, JOB_NAME: name, "controller-uid": uid, "job-name": name}
    spec.setdefault("selector", {"matchLabels": {CONTROLLER_UID: uid}})
    template = spec.setdefault("template", {})
    if isinstance(template, dict):
        meta = template.setdefault("metadata", {})
        if isinstance(meta, dict):
            meta["labels"] = {**(meta.get("labels") or {}), **labels}
