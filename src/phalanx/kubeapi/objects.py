"""Storage of the configuration kinds: Kueue's objects, Nodes, phalanx's Tenants and
PriorityClasses, kept in the store's ``objects`` table.

Reads render an object as ``phalanx get -o yaml`` does (the model's manifest, its
live ``status``), with Kubernetes metadata (:mod:`phalanx.kubeapi.meta`). Writes go
through the control plane's apply, with the same validation as ``phalanx apply``
and the Kubernetes metadata stored in the same transaction; deletes through its
delete (refused while jobs or other objects use the object). Configuration is
the admin's to change; every user may read it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from phalanx.errors import NotLeader, PhalanxError
from phalanx.kubeapi.conversion import to_version
from phalanx.kubeapi.meta import compose, stored_meta
from phalanx.kubeapi.status import KubeError, from_phalanx
from phalanx.kubeapi.storage import Change, Ctx, Storage
from phalanx.store import JobRow, ObjectRow
from phalanx.store.records import TombstoneRow

__all__ = ["ObjectStorage", "apply_manifest", "status_success"]

_MODEL_OWNED: dict[str, tuple[str, ...]] = {
    "Node": ("labels", "annotations"),
    "ClusterQueue": ("annotations",),
}
"""Metadata maps a kind's model decides (a Node's labels place jobs)."""


def status_success(ctx: Ctx, name: str, uid: str) -> dict[str, Any]:
    """The ``Status`` a delete answers with."""
    r = ctx.resource
    details: dict[str, Any] = {"name": name, "kind": r.plural, "uid": uid}
    if r.group:
        details["group"] = r.group
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    }


def apply_manifest(
    ctx: Ctx,
    body: dict[str, Any],
    meta_key: tuple[str, str],
    meta: dict[str, Any],
    *,
    dry_run: bool,
    name: str,
) -> None:
    """Check ``body`` as ``phalanx apply`` would and, unless ``dry_run``, apply it with
    its Kubernetes metadata; a problem is a 422 ``Invalid`` naming the fields."""
    from phalanx.dialects import kueue

    # A status is the server's, but for a Node's: phalanx's nodes are declared, their
    # capacity with them (status.capacity), as a kubelet would report it.
    node = body.get("kind") == "Node"
    clean = {k: v for k, v in body.items() if k != "status" or node}
    if node and isinstance(clean.get("status"), dict):
        clean["status"] = {"capacity": clean["status"].get("capacity") or {}}
    try:
        manifests = kueue.load_documents([clean], f"{ctx.resource.plural}/{name}")
    except NotLeader:
        raise  # the app hands the request to the leader
    except PhalanxError as exc:
        raise _invalid(ctx, name, exc) from None
    if meta_key[0] != "job" and len(manifests) == 1:
        to_dict = getattr(manifests[0].obj, "to_dict", None)
        if to_dict is not None:
            meta["written"] = {
                "hash": model_hash(to_dict()),
                "apiVersion": clean.get("apiVersion"),
                "body": {k: v for k, v in clean.items() if k not in _IDENTITY},
            }
    if dry_run:
        return
    try:
        ctx.plane.apply(ctx.principal, manifests, {meta_key: meta})
    except NotLeader:
        raise  # the app hands the request to the leader
    except PhalanxError as exc:
        raise _invalid(ctx, name, exc) from None


_IDENTITY = ("apiVersion", "kind", "metadata")


def model_hash(spec: Any) -> str:
    """A stored model's fingerprint: whether the object is still what was written."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()


def overlay(rendered: Any, written: Any) -> Any:
    """``rendered`` in the spelling it was ``written`` in (``9`` stays ``9``, ``9Gi`` stays
    ``9Gi``), its defaults kept: so ``kubectl apply`` of an unchanged file is a no-op and
    GitOps tools see no drift."""
    if isinstance(rendered, dict) and isinstance(written, dict):
        out = dict(rendered)
        for key, value in written.items():
            out[key] = overlay(rendered.get(key), value) if key in rendered else value
        return out
    if isinstance(rendered, list) and isinstance(written, list) and len(rendered) == len(written):
        return [overlay(r, w) for r, w in zip(rendered, written, strict=True)]
    return written


def _invalid(ctx: Ctx, name: str, exc: PhalanxError) -> KubeError:
    from phalanx.errors import Invalid

    if not isinstance(exc, Invalid):
        return from_phalanx(exc, ctx.target(name))
    causes = []
    for line in exc.detail.splitlines():
        # "source:LINE: Kind/name (document 1): spec.x: message" -> ("spec.x", "message")
        text = line.split("): ", 1)[1] if "): " in line else line
        field, sep, message = text.partition(": ")
        if not sep or " " in field:
            field, message = "", text
        causes.append((field, message))
    return KubeError.invalid(ctx.target(name), causes or [("", exc.detail)])


class ObjectStorage(Storage):
    """One configuration kind; ``model_kind`` is the store's kind (a
    WorkloadPriorityClass is a phalanx PriorityClass)."""

    tracks_creation = True

    def __init__(self, model_kind: str) -> None:
        self.model_kind = model_kind

    # -- reading ----------------------------------------------------------------

    def _key(self, namespace: str | None, name: str) -> str:
        return f"{namespace}/{name}" if self.model_kind == "LocalQueue" else name

    def render(
        self,
        ctx: Ctx,
        row: ObjectRow,
        status: dict[str, Any] | None,
        stored: dict[str, Any] | None,
    ) -> dict[str, Any]:
        from phalanx.dialects import kueue
        from phalanx.model.kinds import MODEL_BY_KIND

        model = MODEL_BY_KIND[row.kind].model_validate(row.spec)
        manifest = dict(kueue.to_manifest(row.kind, cast(kueue.ManifestObject, model)))
        kind = ctx.resource.kind
        if kind == "WorkloadPriorityClass":
            body = model.model_dump() if hasattr(model, "model_dump") else {}
            manifest = {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": kind,
                "metadata": {"name": row.name},
                "value": body.get("value", 0),
            }
            if body.get("description"):
                manifest["description"] = body["description"]
        elif kind == "PriorityClass" and manifest.get("kind") != "PriorityClass":
            spec = {k: v for k, v in cast(Any, model).to_dict().items() if k != "name"}
            manifest = {
                "apiVersion": "phalanx.io/v1",
                "kind": kind,
                "metadata": {"name": row.name},
                "spec": spec,
            }
        if status is not None and row.name in status:
            merged = dict(manifest.get("status") or {})
            merged.update(status[row.name])
            manifest["status"] = _kueue_status(row.kind, merged)
        if row.kind == "Node":
            manifest["status"] = _node_status(manifest, manifest.get("status") or {})
        manifest["metadata"] = compose(
            manifest.get("metadata") or {"name": row.name},
            stored,
            kind=row.kind,
            key=row.name,
            created=row.created,
            revision=row.revision,
            generation=row.generation,
            model_owned=_MODEL_OWNED.get(row.kind, ()),
        )
        manifest = to_version(manifest, ctx.resource.api_version)
        written = (stored or {}).get("written")
        if (
            isinstance(written, dict)
            and written.get("apiVersion") == manifest.get("apiVersion")
            and written.get("hash") == model_hash(row.spec)
        ):
            # Read back in the version it was written in: in its spelling too.
            body = {k: v for k, v in manifest.items() if k not in _IDENTITY and k != "status"}
            manifest.update(overlay(body, written.get("body") or {}))
        return manifest

    def _status(self, ctx: Ctx) -> dict[str, Any] | None:
        from phalanx.api.objects import live_status

        status = live_status(ctx.plane, self.model_kind, ctx.principal)
        if self.model_kind == "LocalQueue" and status is not None:
            counts = ctx.plane.store.queue_counts()
            for name, entry in status.items():
                by_state = counts.get(name, {})
                entry["pending"] = by_state.get("PENDING", 0)
                entry["admitted"] = sum(n for s, n in by_state.items() if s != "PENDING")
        return status

    def items(self, ctx: Ctx, namespace: str | None) -> list[dict[str, Any]]:
        rows = ctx.plane.store.objects(self.model_kind)
        if self.model_kind == "LocalQueue" and namespace:
            rows = [r for r in rows if r.name.split("/", 1)[0] == namespace]
        status = self._status(ctx)
        stored = ctx.plane.store.meta(self.model_kind)
        return [self.render(ctx, r, status, stored.get(r.name)) for r in rows]

    def get(self, ctx: Ctx, namespace: str | None, name: str) -> dict[str, Any]:
        key = self._key(namespace, name)
        row = ctx.plane.store.get_object(self.model_kind, key)
        if row is None:
            raise KubeError.not_found(ctx.target(name))
        stored = ctx.plane.store.meta(self.model_kind, [key]).get(key)
        return self.render(ctx, row, self._status(ctx), stored)

    # -- writing ----------------------------------------------------------------

    def _require_admin(self, ctx: Ctx, verb: str, namespace: str | None, name: str) -> None:
        if not ctx.principal.admin:
            raise KubeError.forbidden(ctx.principal.user, verb, ctx.target(name), namespace or "")

    def _body(self, ctx: Ctx, obj: dict[str, Any], namespace: str | None) -> dict[str, Any]:
        body = dict(obj)
        metadata = dict(body.get("metadata") or {})
        if self.model_kind == "LocalQueue":
            metadata["namespace"] = namespace or metadata.get("namespace") or "default"
        body["metadata"] = metadata
        if ctx.resource.kind == "PriorityClass" and body.get("apiVersion") == "phalanx.io/v1":
            return body
        return body

    def create(
        self, ctx: Ctx, namespace: str | None, obj: dict[str, Any], *, dry_run: bool
    ) -> dict[str, Any]:
        name = str((obj.get("metadata") or {}).get("name") or "")
        self._require_admin(ctx, "create", namespace, name)
        key = self._key(namespace, name)
        if ctx.plane.store.get_object(self.model_kind, key) is not None:
            raise KubeError.already_exists(ctx.target(name))
        return self._write(ctx, namespace, name, obj, dry_run=dry_run, uid=_new_uid())

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
        self._require_admin(ctx, "update", namespace, name)
        current = self.get(ctx, namespace, name)
        if subresource == "status":
            # Status is computed by the scheduler: a write to it changes nothing.
            return current
        if self.model_kind == "Node":
            obj = _uncordoned(current, obj)
        return self._write(
            ctx, namespace, name, obj, dry_run=dry_run, uid=current["metadata"]["uid"]
        )

    def _write(
        self,
        ctx: Ctx,
        namespace: str | None,
        name: str,
        obj: dict[str, Any],
        *,
        dry_run: bool,
        uid: str,
    ) -> dict[str, Any]:
        body = self._body(ctx, obj, namespace)
        key = self._key(namespace, name)
        meta = stored_meta(body.get("metadata") or {}, uid)
        if self.model_kind == "Node":
            # A node's state annotations are its model's (drain, down, reason): not kept here.
            meta["annotations"] = {
                k: v for k, v in meta["annotations"].items() if k not in _NODE_STATE_KEYS
            }
        apply_manifest(ctx, body, (self.model_kind, key), meta, dry_run=dry_run, name=name)
        if dry_run:
            out = dict(body)
            out["metadata"] = {**(body.get("metadata") or {}), "uid": uid}
            return out
        return self.get(ctx, namespace, name)

    def delete(
        self, ctx: Ctx, namespace: str | None, name: str, *, dry_run: bool
    ) -> dict[str, Any]:
        self._require_admin(ctx, "delete", namespace, name)
        current = self.get(ctx, namespace, name)
        if not dry_run:
            try:
                ctx.plane.delete(ctx.principal, self.model_kind, self._key(namespace, name))
            except NotLeader:
                raise  # the app hands the request to the leader
            except PhalanxError as exc:
                raise from_phalanx(exc, ctx.target(name)) from None
        return status_success(ctx, name, current["metadata"]["uid"])

    # -- watching ---------------------------------------------------------------

    def touched_by(
        self, jobs: Sequence[JobRow], objects: Sequence[ObjectRow], gone: Sequence[TombstoneRow]
    ) -> bool:
        if self.model_kind in ("ClusterQueue", "LocalQueue", "Node") and jobs:
            return True  # their status counts jobs
        return any(o.kind == self.model_kind for o in objects) or any(
            t.kind == self.model_kind for t in gone
        )

    def changes(
        self,
        ctx: Ctx,
        jobs: Sequence[JobRow],
        objects: Sequence[ObjectRow],
        gone: Sequence[TombstoneRow],
    ) -> list[Change]:
        mine = [o for o in objects if o.kind == self.model_kind]
        if self.model_kind in ("ClusterQueue", "LocalQueue", "Node") and jobs and not mine:
            return []  # status-only changes are not events (as Kueue's status updates batch)
        out: list[Change] = []
        if mine:
            try:
                status = self._status(ctx)
            except NotLeader:
                status = None  # a standby's watch: the spec, without the leader's live status
            stored = ctx.plane.store.meta(self.model_kind, [o.name for o in mine])
            out += [
                Change(
                    "MODIFIED", self.render(ctx, o, status, stored.get(o.name)), o.created_revision
                )
                for o in mine
            ]
        for t in gone:
            if t.kind != self.model_kind:
                continue
            row = ObjectRow(t.kind, t.name, t.spec, 0, t.created, t.time, t.revision)
            try:
                out.append(Change("DELETED", self.render(ctx, row, None, t.meta)))
            except (ValueError, PhalanxError):
                continue
        return out


_NODE_STATE_KEYS = (
    "phalanx.io/state",
    "phalanx.io/reason",
    "phalanx.io/reason-user",
    "phalanx.io/reason-time",
)


def _uncordoned(current: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A Node write that clears ``spec.unschedulable`` (``kubectl uncordon``) resumes the
    node, as ``scontrol update State=RESUME`` would: its drain annotations go too (a
    down node stays down: it must be resumed on purpose)."""
    was = bool((current.get("spec") or {}).get("unschedulable"))
    now = bool((new.get("spec") or {}).get("unschedulable"))
    annotations = dict((new.get("metadata") or {}).get("annotations") or {})
    if not was or now or annotations.get("phalanx.io/state") != "drain":
        return new
    for key in _NODE_STATE_KEYS:
        annotations.pop(key, None)
    return {**new, "metadata": {**(new.get("metadata") or {}), "annotations": annotations}}


def _kueue_status(kind: str, status: dict[str, Any]) -> dict[str, Any]:
    """phalanx's live status of a ClusterQueue or LocalQueue in Kueue's field names
    (what the CRDs' printer columns and Kueue users' scripts read)."""
    if kind not in ("ClusterQueue", "LocalQueue"):
        return status
    from phalanx.model.resources import format_resources

    out: dict[str, Any] = {}
    pending = int(status.get("pending", 0) or 0)
    admitted = int(status.get("admitted", 0) or 0)
    out["pendingWorkloads"] = pending
    out["reservingWorkloads"] = admitted
    out["admittedWorkloads"] = admitted
    usage = status.get("usage") or {}
    borrowed = status.get("borrowed") or {}
    flavors = []
    for flavor in sorted(set(usage) | set(status.get("nominal") or {})):
        used = format_resources(dict(usage.get(flavor) or {}))
        over = format_resources(dict(borrowed.get(flavor) or {}))
        names = sorted(set(used) | set((status.get("nominal") or {}).get(flavor) or {}))
        flavors.append(
            {
                "name": flavor,
                "resources": [
                    {"name": r, "total": used.get(r, "0"), "borrowed": over.get(r, "0")}
                    for r in names
                ],
            }
        )
    if kind == "ClusterQueue":
        out["flavorsReservation"] = flavors
        out["flavorsUsage"] = flavors
    if status.get("conditions"):
        out["conditions"] = status["conditions"]
    return out


def _new_uid() -> str:
    import uuid

    return str(uuid.uuid4())


def _node_status(manifest: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    """A Node's ``status`` as kubectl reads it: capacity, allocatable, a ``Ready``
    condition from its state, and ``nodeInfo``."""
    from phalanx import __version__

    out = dict(status)
    capacity = dict(out.get("capacity") or {})
    out["capacity"] = capacity
    out.setdefault("allocatable", capacity)
    state = str(out.pop("state", "") or "").lower()
    ready = "down" not in state and "fail" not in state
    out["conditions"] = [
        {
            "type": "Ready",
            "status": "True" if ready else "False",
            "reason": "PhalanxNodeReady" if ready else "PhalanxNodeDown",
            "message": f"phalanx node state: {state or 'idle'}",
            "lastHeartbeatTime": manifest.get("metadata", {}).get("creationTimestamp"),
            "lastTransitionTime": manifest.get("metadata", {}).get("creationTimestamp"),
        }
    ]
    out["nodeInfo"] = {
        "kubeletVersion": f"v0.0.0-phalanx-{__version__}",
        "osImage": "phalanx virtual node",
        "kernelVersion": "",
        "containerRuntimeVersion": "phalanx://" + __version__,
        "architecture": "amd64",
        "operatingSystem": "linux",
        "machineID": "",
        "systemUUID": "",
        "bootID": "",
        "kubeProxyVersion": "",
    }
    if state:
        out["phalanx"] = {"state": state}
    return out
