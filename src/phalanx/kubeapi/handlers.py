"""The verbs of the Kubernetes API over the kinds' storages: get, list, create, update,
patch (merge, JSON, strategic, server-side apply), delete.

What every kind shares lives here: authorization (:mod:`.authz`), label and field
selectors, ``limit``/``continue`` paging over a consistent snapshot, field
validation (``fieldValidation=Strict|Warn|Ignore``), ``dryRun``, the
``resourceVersion`` precondition of an update, and the managed fields every
write records (server-side apply's, and the ``Update`` entries of other
writers). Writes are serialised in this process, so that a read-modify-write
(a patch) is not interleaved with another.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from phalanx.kubeapi import resources
from phalanx.kubeapi.authz import allowed
from phalanx.kubeapi.jobs import JOB_KINDS, JobStorage
from phalanx.kubeapi.meta import rfc3339
from phalanx.kubeapi.namespaces import NamespaceStorage
from phalanx.kubeapi.objects import ObjectStorage
from phalanx.kubeapi.resources import Resource
from phalanx.kubeapi.reviews import ReviewStorage
from phalanx.kubeapi.selectors import FieldSelector, field_getter, parse_fields, parse_labels
from phalanx.kubeapi.status import KubeError
from phalanx.kubeapi.storage import Ctx, Storage

__all__ = ["Handlers", "ListOptions", "WriteOptions", "storage_for"]

_OBJECT_KINDS = {
    "ResourceFlavor": "ResourceFlavor",
    "ClusterQueue": "ClusterQueue",
    "LocalQueue": "LocalQueue",
    "Cohort": "Cohort",
    "Topology": "Topology",
    "WorkloadPriorityClass": "PriorityClass",
    "PriorityClass": "PriorityClass",
    "Tenant": "Tenant",
    "Node": "Node",
}


class _NativeGangs(Storage):
    """``scheduling.k8s.io`` Workloads (Kubernetes 1.35's gang API for bare Pods):
    listed empty, refused on create, naming the field (phalanx takes gangs as jobs)."""

    def items(self, ctx: Ctx, namespace: str | None) -> list[dict[str, Any]]:
        return []

    def create(
        self, ctx: Ctx, namespace: str | None, obj: dict[str, Any], *, dry_run: bool
    ) -> dict[str, Any]:
        name = str((obj.get("metadata") or {}).get("name") or "")
        raise KubeError.invalid(
            ctx.target(name),
            [
                (
                    "spec.podGroups",
                    "Unsupported value: a scheduling.k8s.io Workload groups bare Pods, which "
                    "phalanx does not run (Pods are read-only here); submit the gang as a "
                    "batch/v1 Job, JobSet, PyTorchJob or RayJob (its pods are admitted "
                    "together), or as a kueue.x-k8s.io Workload",
                )
            ],
        )


def storage_for(resource: Resource) -> Storage:
    """The storage behind a resource."""
    kind = resource.kind
    if resource.group == "scheduling.k8s.io":
        return _NativeGangs()
    if kind in JOB_KINDS and (kind != "Workload" or resource.group == "kueue.x-k8s.io"):
        return JobStorage(kind)
    if kind in _OBJECT_KINDS:
        return ObjectStorage(_OBJECT_KINDS[kind])
    if kind == "Namespace":
        return NamespaceStorage()
    if kind in ("SelfSubjectReview", "SelfSubjectAccessReview"):
        return ReviewStorage()
    if kind == "Pod":
        from phalanx.kubeapi.pods import PodStorage

        return PodStorage()
    if kind == "Event":
        from phalanx.kubeapi.events import EventStorage

        return EventStorage()
    return Storage()


@dataclass(frozen=True)
class ListOptions:
    label_selector: str = ""
    field_selector: str = ""
    limit: int = 0
    continue_: str = ""
    resource_version: str = ""


@dataclass(frozen=True)
class WriteOptions:
    dry_run: bool = False
    field_manager: str = ""
    field_validation: str = ""
    """``Strict``, ``Warn`` or ``Ignore`` (empty: ``Warn``, the API server's default)."""
    force: bool = False


class Handlers:
    """The verbs, for one API server (its storages and its list snapshots)."""

    def __init__(self) -> None:
        self._storages: dict[tuple[str, str], Storage] = {}
        self._write_lock = threading.RLock()
        self._snapshots: OrderedDict[str, tuple[float, str, tuple[list[tuple[str, Any]], bool]]] = (
            OrderedDict()
        )
        self._snap_lock = threading.Lock()

    def storage(self, resource: Resource) -> Storage:
        key = (resource.group, resource.kind)
        found = self._storages.get(key)
        if found is None:
            found = self._storages[key] = storage_for(resource)
        return found

    # -- authorization ------------------------------------------------------------

    @staticmethod
    def authorize(
        ctx: Ctx, verb: str, namespace: str | None, name: str = "", sub: str = ""
    ) -> None:
        ok, _ = allowed(ctx.principal, verb, ctx.resource, namespace or "", sub)
        if not ok:
            raise KubeError.forbidden(ctx.principal.user, verb, ctx.target(name), namespace or "")

    # -- reads --------------------------------------------------------------------

    def get(self, ctx: Ctx, namespace: str | None, name: str) -> dict[str, Any]:
        self.authorize(ctx, "get", namespace, name)
        return self.storage(ctx.resource).get(ctx, namespace, name)

    def selection(
        self, ctx: Ctx, namespace: str | None, label_selector: str, field_selector: str
    ) -> tuple[Callable[[dict[str, Any]], bool], FieldSelector]:
        """Whether an object is in the namespace and matches the selectors (a list's and
        a watch's), and the parsed field selector."""
        storage = self.storage(ctx.resource)
        labels = parse_labels(label_selector)
        fields = parse_fields(field_selector, storage.field_selectors, ctx.resource.kind)
        namespaced = ctx.resource.namespaced

        def keep(obj: dict[str, Any]) -> bool:
            meta = obj.get("metadata") or {}
            if namespace and namespaced and meta.get("namespace") != namespace:
                return False
            return labels.matches(meta.get("labels")) and fields.matches(field_getter(obj))

        return keep, fields

    def matching(
        self, ctx: Ctx, namespace: str | None, options: ListOptions
    ) -> tuple[list[dict[str, Any]], Callable[[dict[str, Any]], bool]]:
        """Every object the list names, and the filter its selectors make."""
        storage = self.storage(ctx.resource)
        keep, fields = self.selection(
            ctx, namespace, options.label_selector, options.field_selector
        )

        name = fields.value_of("metadata.name")
        if name is not None and ctx.resource.kind not in ("Event",):
            try:
                found = [storage.get(ctx, namespace, name)]
            except KubeError as exc:
                if exc.code != 404:
                    raise
                found = []
            if ctx.resource.namespaced and not namespace:
                found = [o for o in storage.items(ctx, None) if o["metadata"]["name"] == name]
            return found, keep
        narrowed = getattr(storage, "items_for", None)
        if narrowed is not None:
            # The storage narrows the list by the selector itself (Events by object name).
            return narrowed(ctx, namespace, fields), keep
        return storage.items(ctx, namespace), keep

    def _entries(
        self, ctx: Ctx, namespace: str | None, options: ListOptions
    ) -> tuple[list[tuple[str, Any]], bool]:
        """What a list holds, each with its (namespace/name) sort key, in order; and
        whether they are storage handles still to render (a large list renders only
        the page asked for) rather than objects."""
        storage = self.storage(ctx.resource)
        keyed = getattr(storage, "keyed", None)
        if keyed is not None and not options.label_selector and not options.field_selector:
            return sorted(keyed(ctx, namespace), key=lambda e: e[0]), True
        found, keep = self.matching(ctx, namespace, options)
        entries = [(_sort_key(o), o) for o in found if keep(o)]
        entries.sort(key=lambda e: e[0])
        return entries, False

    def list_objects(
        self, ctx: Ctx, namespace: str | None, options: ListOptions, revision: int
    ) -> dict[str, Any]:
        """A ``<Kind>List`` in (namespace, name) order, a page of it with ``limit``; the
        pages of one list come from one snapshot (``continue`` names it), and only the
        page is rendered."""
        self.authorize(ctx, "list", namespace)
        offset = 0
        owner = f"{ctx.principal.user}/{ctx.resource.group_version}/{ctx.resource.plural}"
        if options.continue_:
            snapshot_rv, offset, key = _decode_continue(options.continue_)
            found = self._snapshot(key, owner)
            if found is None:
                raise KubeError(
                    410,
                    "Expired",
                    "The provided continue parameter is too old to display a consistent list "
                    "result. You can start a new list without the continue parameter.",
                )
            entries, handles = found
            revision = snapshot_rv
        else:
            entries, handles = self._entries(ctx, namespace, options)
            key = ""
        page = entries[offset:]
        remaining = 0
        token = ""
        if options.limit > 0:
            page = entries[offset : offset + options.limit]
            remaining = len(entries) - offset - len(page)
            if remaining > 0:
                if not key:
                    key = self._remember((entries, handles), owner)
                token = _encode_continue(revision, offset + len(page), key)
        items = [e[1] for e in page]
        if handles:
            items = self.storage(ctx.resource).render_keyed(ctx, items)  # type: ignore[attr-defined]
        r = ctx.resource
        metadata: dict[str, Any] = {"resourceVersion": str(revision)}
        if token:
            metadata["continue"] = token
            metadata["remainingItemCount"] = remaining
        return {
            "kind": f"{r.kind}List",
            "apiVersion": r.api_version,
            "metadata": metadata,
            "items": items,
        }

    def _remember(self, entries: tuple[list[tuple[str, Any]], bool], owner: str) -> str:
        import secrets

        key = secrets.token_hex(8)
        with self._snap_lock:
            self._snapshots[key] = (time.monotonic(), owner, entries)
            while len(self._snapshots) > 8:
                self._snapshots.popitem(last=False)
        return key

    def _snapshot(self, key: str, owner: str) -> tuple[list[tuple[str, Any]], bool] | None:
        """A list's snapshot, for the one who listed it (a continue token is not a way into
        another user's list)."""
        with self._snap_lock:
            found = self._snapshots.get(key)
            if found is None or time.monotonic() - found[0] > 300 or found[1] != owner:
                return None
            return found[2]

    # -- writes -------------------------------------------------------------------

    def create(
        self, ctx: Ctx, namespace: str | None, body: dict[str, Any], options: WriteOptions
    ) -> dict[str, Any]:
        name = str((body.get("metadata") or {}).get("name") or "")
        self.authorize(ctx, "create", namespace, name)
        body = self._check_body(ctx, namespace, body, options)
        with self._write_lock:
            if ctx.resource.kind not in ("SelfSubjectReview", "SelfSubjectAccessReview"):
                body = _record(ctx, None, body, options.field_manager or "unknown", "")
            return self.storage(ctx.resource).create(ctx, namespace, body, dry_run=options.dry_run)

    def update(
        self,
        ctx: Ctx,
        namespace: str | None,
        name: str,
        body: dict[str, Any],
        options: WriteOptions,
        subresource: str = "",
    ) -> dict[str, Any]:
        self.authorize(ctx, "update", namespace, name, subresource)
        body = self._check_body(ctx, namespace, body, options, name)
        storage = self.storage(ctx.resource)
        with self._write_lock:
            current = storage.get(ctx, namespace, name)
            _precondition(ctx, current, body, name)
            body = _record(ctx, current, body, options.field_manager or "unknown", subresource)
            return storage.replace(
                ctx, namespace, name, body, dry_run=options.dry_run, subresource=subresource
            )

    def patch(
        self,
        ctx: Ctx,
        namespace: str | None,
        name: str,
        raw: bytes,
        content_type: str,
        options: WriteOptions,
        subresource: str = "",
    ) -> tuple[int, dict[str, Any]]:
        """The patched object, and 201 when a server-side apply created it."""
        from phalanx.kubeapi import patch as patches

        self.authorize(ctx, "patch", namespace, name, subresource)
        storage = self.storage(ctx.resource)
        with self._write_lock:
            if content_type == patches.APPLY_YAML:
                return self._apply(ctx, namespace, name, raw, options, subresource)
            current = storage.get(ctx, namespace, name)
            strategic = _strategic_schema(ctx.resource)
            try:
                patched = patches.apply_patch(current, raw, content_type, strategic=strategic)
            except patches.PatchError as exc:
                reason = {415: "UnsupportedMediaType", 422: "Invalid"}.get(exc.code, "BadRequest")
                raise KubeError(exc.code, reason, exc.message, ctx.target(name)) from None
            _precondition(ctx, current, patched, name)
            _same_identity(ctx, current, patched, name)
            patched = self._check_body(ctx, namespace, patched, options, name)
            manager = options.field_manager or "unknown"
            patched = _record(ctx, current, patched, manager, subresource)
            return 200, storage.replace(
                ctx, namespace, name, patched, dry_run=options.dry_run, subresource=subresource
            )

    def _apply(
        self,
        ctx: Ctx,
        namespace: str | None,
        name: str,
        raw: bytes,
        options: WriteOptions,
        subresource: str,
    ) -> tuple[int, dict[str, Any]]:
        """Server-side apply: merge the applied configuration, with ownership."""
        from phalanx.kubeapi import managedfields

        if not options.field_manager:
            raise KubeError.bad_request(
                "PATCH, application/apply-patch+yaml requires fieldManager parameter"
            )
        applied = _yaml_object(raw)
        given = applied.get("metadata")
        if given is not None and not isinstance(given, dict):
            raise KubeError.bad_request("metadata: expected an object")
        meta: dict[str, Any] = given or {}
        if meta.get("name") not in (None, name):
            raise KubeError.bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the "
                f"URL ({name})"
            )
        storage = self.storage(ctx.resource)
        try:
            live: dict[str, Any] | None = storage.get(ctx, namespace, name)
        except KubeError as exc:
            if exc.code != 404:
                raise
            live = None
        applied.setdefault("metadata", {})["name"] = name
        if namespace and ctx.resource.namespaced:
            applied["metadata"].setdefault("namespace", namespace)
        applied = self._check_body(ctx, namespace, applied, options, name)
        try:
            merged = managedfields.server_side_apply(
                live,
                applied,
                options.field_manager,
                force=options.force,
                api_version=ctx.resource.api_version,
                now=rfc3339(ctx.now),
                lists=_list_types(ctx.resource),
            )
        except managedfields.ApplyConflict as exc:
            causes = [
                {
                    "reason": "FieldManagerConflict",
                    "message": f'conflict with "{c.manager}"',
                    "field": c.path,
                }
                for c in exc.conflicts
            ]
            raise KubeError(409, "Conflict", exc.message, ctx.target(name), causes) from None
        if live is None:
            self.authorize(ctx, "create", namespace, name)
            return 201, storage.create(ctx, namespace, merged, dry_run=options.dry_run)
        return 200, storage.replace(
            ctx, namespace, name, merged, dry_run=options.dry_run, subresource=subresource
        )

    def delete(
        self, ctx: Ctx, namespace: str | None, name: str, options: WriteOptions
    ) -> dict[str, Any]:
        self.authorize(ctx, "delete", namespace, name)
        with self._write_lock:
            return self.storage(ctx.resource).delete(ctx, namespace, name, dry_run=options.dry_run)

    # -- checks -------------------------------------------------------------------

    def _check_body(
        self,
        ctx: Ctx,
        namespace: str | None,
        body: dict[str, Any],
        options: WriteOptions,
        name: str = "",
    ) -> dict[str, Any]:
        r = ctx.resource
        kind = body.get("kind")
        if kind is not None and kind != r.kind:
            raise KubeError.bad_request(
                f"the kind of the object ({kind}) does not match the resource "
                f"({r.plural}: {r.kind})"
            )
        api_version = body.get("apiVersion")
        if (
            api_version is not None
            and str(api_version).split("/")[0] != r.api_version.split("/")[0]
        ):
            raise KubeError.bad_request(
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({r.api_version})"
            )
        body = {**body, "kind": r.kind}
        body.setdefault("apiVersion", r.api_version)
        meta = body.get("metadata")
        if meta is not None and not isinstance(meta, dict):
            raise KubeError.bad_request("metadata: expected an object")
        meta = dict(meta or {})
        if r.namespaced:
            given = meta.get("namespace")
            if given and namespace and given != namespace:
                raise KubeError.bad_request(
                    "the namespace of the provided object does not match the namespace sent on "
                    "the request"
                )
            meta["namespace"] = given or namespace or "default"
        if name and meta.get("name") not in (None, "", name):
            raise KubeError.bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the URL "
                f"({name})"
            )
        if name:
            meta["name"] = name
        body["metadata"] = meta
        return _validate_fields(ctx, body, options.field_validation)


def _sort_key(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{meta.get('namespace', '')}/{meta['name']}"


def _encode_continue(revision: int, offset: int, key: str) -> str:
    raw = json.dumps({"v": "phalanx/1", "rv": revision, "offset": offset, "key": key})
    return base64.urlsafe_b64encode(raw.encode()).decode()


def _decode_continue(token: str) -> tuple[int, int, str]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode() + b"=="))
        return int(data["rv"]), max(0, int(data["offset"])), str(data["key"])
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise KubeError.bad_request(f"continue key is not valid: {token!r}") from None


def _precondition(ctx: Ctx, current: dict[str, Any], new: dict[str, Any], name: str) -> None:
    wanted = (new.get("metadata") or {}).get("resourceVersion")
    have = (current.get("metadata") or {}).get("resourceVersion")
    if wanted and str(wanted) != str(have):
        raise KubeError.conflict(
            ctx.target(name),
            "the object has been modified; please apply your changes to the latest version "
            "and try again",
        )
    uid = (new.get("metadata") or {}).get("uid")
    if uid and uid != (current.get("metadata") or {}).get("uid"):
        raise KubeError.conflict(
            ctx.target(name),
            f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
            f"{(current.get('metadata') or {}).get('uid')}",
        )


def _same_identity(ctx: Ctx, current: dict[str, Any], new: dict[str, Any], name: str) -> None:
    for field in ("name", "namespace"):
        if (new.get("metadata") or {}).get(field) != (current.get("metadata") or {}).get(field):
            raise KubeError.invalid(
                ctx.target(name), [(f"metadata.{field}", "Invalid value: field is immutable")]
            )


def _yaml_object(raw: bytes) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(raw.decode() if raw else "")
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise KubeError.bad_request(f"error decoding YAML: {exc}") from None
    if not isinstance(data, dict):
        raise KubeError.bad_request("the applied configuration is not an object")
    return data


def _strategic_schema(resource: Resource) -> Any:
    """The strategic-merge schema of a built-in kind; None for the CRD kinds (a real
    API server answers 415 to a strategic patch of a custom resource)."""
    from phalanx.kubeapi import patch as patches

    if resource.group in ("", "batch"):
        return patches.STRATEGIC_SCHEMAS.get(resource.kind)
    return None


def _list_types(resource: Resource) -> Any:
    from phalanx.kubeapi import managedfields
    from phalanx.kubeapi.listtypes import ListTypes

    table = (
        managedfields.KUEUE_LIST_TYPES
        if resource.group == "kueue.x-k8s.io"
        else managedfields.DEFAULT_LIST_TYPES
    )
    return table.get(resource.kind, ListTypes())


def _record(
    ctx: Ctx, old: dict[str, Any] | None, new: dict[str, Any], manager: str, subresource: str
) -> dict[str, Any]:
    """``new`` with managed fields recording an ``Update`` by ``manager``."""
    from phalanx.kubeapi import managedfields

    try:
        return managedfields.record_update(
            old,
            new,
            manager,
            api_version=ctx.resource.api_version,
            now=rfc3339(ctx.now),
            lists=_list_types(ctx.resource),
            subresource=subresource,
        )
    except (ValueError, TypeError, KeyError):
        return new


def _validate_fields(ctx: Ctx, body: dict[str, Any], mode: str) -> dict[str, Any]:
    """Unknown fields: refused (``Strict``), warned about (``Warn``, the default) or
    dropped (``Ignore``), with the API server's words."""
    from phalanx.kubeapi import fieldvalidation

    r = ctx.resource
    # A write to the object does not write its status (the status subresource's), so
    # what a client echoes back there (kubectl cordon, edit) is not validated.
    unknown = [
        path
        for path in fieldvalidation.unknown_fields(r.kind, r.api_version, body)
        if path != "status" and not path.startswith("status.")
    ]
    if not unknown:
        return body
    if mode == "Strict":
        raise KubeError.bad_request(
            fieldvalidation.strict_error_message(r.kind, r.api_version, unknown)
        )
    if mode != "Ignore":
        ctx.warnings.extend(fieldvalidation.warn_messages(unknown))
    pruned: dict[str, Any] = fieldvalidation.prune(r.kind, r.api_version, body)
    return pruned


def resource_for(group_version: str, plural: str) -> Resource | None:
    return resources.resolve(group_version, plural)
