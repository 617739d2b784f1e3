"""Storage of Namespaces: phalanx's tenants, as Kubernetes namespaces.

A namespace exists when a Tenant object names it, a LocalQueue lives in it or a
job ran in it (``default`` always exists). Its labels are the Tenant's (what a
ClusterQueue's ``namespaceSelector`` matches). Creating a Namespace creates a
Tenant; deleting one deletes its Tenant (refused while it is in use, and for
``default``). Users see their own tenants' namespaces.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from phalanx.errors import NotLeader, PhalanxError
from phalanx.kubeapi.meta import compose
from phalanx.kubeapi.objects import apply_manifest, status_success
from phalanx.kubeapi.status import KubeError, from_phalanx
from phalanx.kubeapi.storage import Change, Ctx, Storage
from phalanx.store import JobRow, ObjectRow
from phalanx.store.records import TombstoneRow

__all__ = ["NamespaceStorage"]

_NAME_LABEL = "kubernetes.io/metadata.name"


class NamespaceStorage(Storage):
    tracks_creation = True

    def _render(
        self,
        name: str,
        row: ObjectRow | None,
        stored: dict[str, Any] | None,
        phase: str = "Active",
        since: float = 0.0,
    ) -> dict[str, Any]:
        labels = dict((row.spec.get("labels") or {}) if row is not None else {})
        labels[_NAME_LABEL] = name
        base = {"name": name, "labels": labels}
        meta = compose(
            base,
            stored,
            kind="Namespace",
            key=name,
            created=row.created if row is not None else since,
            revision=row.revision if row is not None else 1,
            model_owned=("labels",),
        )
        return {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": meta,
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": phase},
        }

    def _names(self, ctx: Ctx) -> dict[str, tuple[ObjectRow | None, float]]:
        """Every namespace, its Tenant (if any) and when it was first used."""
        store = ctx.plane.store
        since: dict[str, float] = {}

        def seen(name: str, when: float) -> None:
            since[name] = min(since.get(name, when), when)

        for lq in store.objects("LocalQueue"):
            seen(lq.name.split("/", 1)[0], lq.created)
        for tenant, first in store.job_tenants().items():
            seen(tenant, first)
        tenants = {row.name: row for row in store.objects("Tenant")}
        for name, row in tenants.items():
            seen(name, row.created)
        if "default" not in since:
            first = min((o.created for o in store.objects()), default=ctx.now)
            seen("default", min(since.values(), default=first))
        if not ctx.principal.admin:
            since = {n: t for n, t in since.items() if n in ctx.principal.tenants}
            for tenant in ctx.principal.tenants:
                since.setdefault(tenant, ctx.now)
        return {n: (tenants.get(n), since[n]) for n in sorted(since)}

    def items(self, ctx: Ctx, namespace: str | None) -> list[dict[str, Any]]:
        stored = ctx.plane.store.meta("Tenant")
        return [
            self._render(n, r, stored.get(n), since=t) for n, (r, t) in self._names(ctx).items()
        ]

    def get(self, ctx: Ctx, namespace: str | None, name: str) -> dict[str, Any]:
        names = self._names(ctx)
        if name not in names:
            raise KubeError.not_found(ctx.target(name))
        row, since = names[name]
        stored = ctx.plane.store.meta("Tenant", [name]).get(name)
        return self._render(name, row, stored, since=since)

    def create(
        self, ctx: Ctx, namespace: str | None, obj: dict[str, Any], *, dry_run: bool
    ) -> dict[str, Any]:
        name = str((obj.get("metadata") or {}).get("name") or "")
        if not ctx.principal.admin:
            raise KubeError.forbidden(ctx.principal.user, "create", ctx.target(name), "")
        if ctx.plane.store.get_object("Tenant", name) is not None or name == "default":
            raise KubeError.already_exists(ctx.target(name))
        labels = {
            k: v
            for k, v in ((obj.get("metadata") or {}).get("labels") or {}).items()
            if k != _NAME_LABEL
        }
        tenant = {
            "apiVersion": "phalanx.io/v1",
            "kind": "Tenant",
            "metadata": {"name": name},
            "spec": {"labels": labels} if labels else {},
        }
        import uuid

        meta = {
            "uid": str(uuid.uuid4()),
            "annotations": (obj.get("metadata") or {}).get("annotations") or {},
        }
        apply_manifest(ctx, tenant, ("Tenant", name), meta, dry_run=dry_run, name=name)
        if dry_run:
            return self._render(name, None, meta, since=ctx.now)
        return self.get(ctx, None, name)

    def delete(
        self, ctx: Ctx, namespace: str | None, name: str, *, dry_run: bool
    ) -> dict[str, Any]:
        if not ctx.principal.admin:
            raise KubeError.forbidden(ctx.principal.user, "delete", ctx.target(name), "")
        current = self.get(ctx, None, name)
        if name == "default":
            raise KubeError(
                403,
                "Forbidden",
                'namespaces "default" is forbidden: this namespace may not be deleted',
                ctx.target(name),
            )
        if ctx.plane.store.get_object("Tenant", name) is None:
            raise KubeError.conflict(
                ctx.target(name),
                "the namespace holds LocalQueues or jobs and has no Tenant of its own to delete",
            )
        if not dry_run:
            try:
                ctx.plane.delete(ctx.principal, "Tenant", name)
            except NotLeader:
                raise  # the app hands the request to the leader
            except PhalanxError as exc:
                raise from_phalanx(exc, ctx.target(name)) from None
        return status_success(ctx, name, current["metadata"]["uid"])

    def touched_by(
        self, jobs: Sequence[JobRow], objects: Sequence[ObjectRow], gone: Sequence[TombstoneRow]
    ) -> bool:
        return any(o.kind == "Tenant" for o in objects) or any(t.kind == "Tenant" for t in gone)

    def changes(
        self,
        ctx: Ctx,
        jobs: Sequence[JobRow],
        objects: Sequence[ObjectRow],
        gone: Sequence[TombstoneRow],
    ) -> list[Change]:
        out: list[Change] = []
        for o in objects:
            if o.kind == "Tenant" and ctx.principal.may_act_for(o.name):
                stored = ctx.plane.store.meta("Tenant", [o.name]).get(o.name)
                out.append(Change("MODIFIED", self._render(o.name, o, stored), o.created_revision))
        for t in gone:
            if t.kind == "Tenant" and ctx.principal.may_act_for(t.name):
                row = ObjectRow(t.kind, t.name, t.spec, 0, t.created, t.time, t.revision)
                out.append(Change("DELETED", self._render(t.name, row, t.meta, "Terminating")))
        return out
