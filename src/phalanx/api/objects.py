"""Configuration objects as Kueue-style manifests: apply, list, get, delete; and tokens.

``/api/v1/{plural}`` takes Kubernetes' plural or short names (``clusterqueues``,
``cq``, ``localqueues``, ``nodes``, ...); a LocalQueue's name is
``namespace/name``. ClusterQueues and Nodes carry a live ``status``.
"""

from __future__ import annotations

import json
from typing import Any, cast

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from phalanx.api.deps import Caller, Plane
from phalanx.api.plane import ControlPlane
from phalanx.api.views import TokenView, principal_view, token_view
from phalanx.auth import Principal
from phalanx.errors import Forbidden, Invalid, NotFound
from phalanx.store.records import ObjectRow

__all__ = ["live_status", "router"]

router = APIRouter(prefix="/api/v1")

_YAML_TYPES = frozenset(
    {"application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml", "text/plain"}
)


class TokenRequest(BaseModel):
    user: str = Field(min_length=1)
    tenants: list[str] = Field(default_factory=list)
    admin: bool = False
    name: str = ""
    """A label, what ``DELETE /api/v1/tokens/{name}`` revokes by (default: the user)."""
    expires: float | None = None
    """Epoch seconds; ``None`` never expires."""


class NewToken(TokenView):
    token: str
    """The bearer token; shown once, stored only hashed."""


def _kind(plural: str) -> str:
    from phalanx.dialects import kueue

    try:
        return str(kueue.resolve_kind(plural))
    except Invalid as exc:
        raise NotFound(exc.detail) from None


def _manifest(plane: ControlPlane, row: ObjectRow, status: dict[str, Any] | None) -> dict[str, Any]:
    from phalanx.dialects import kueue
    from phalanx.model.kinds import MODEL_BY_KIND

    obj = cast(kueue.ManifestObject, MODEL_BY_KIND[row.kind].model_validate(row.spec))
    manifest = dict(kueue.to_manifest(row.kind, obj))
    if status is not None:
        extra = status.get(row.name)
        if extra is not None:
            merged = dict(manifest.get("status") or {})
            merged.update(extra)
            manifest["status"] = merged
    return manifest


def live_status(plane: ControlPlane, kind: str, principal: Principal) -> dict[str, Any] | None:
    if kind == "ClusterQueue":
        return _with_conditions(plane, plane.cluster_queue_status())
    if kind == "LocalQueue":
        return _local_queue_status(plane)
    if kind == "Node":
        # A node's jobs: only those the caller may see are named.
        return plane.node_status(principal)
    return None


def _with_conditions(plane: ControlPlane, status: dict[str, Any]) -> dict[str, Any]:
    """Kueue's ``Active`` condition added to each ClusterQueue's live status."""
    from phalanx.dialects.kueue.conditions import cluster_queue_conditions

    flavors = {row.name for row in plane.store.objects("ResourceFlavor")}
    for row in plane.store.objects("ClusterQueue"):
        entry = status.setdefault(row.name, {})
        groups = row.spec.get("resourceGroups") or []
        named = [f["name"] for g in groups for f in g.get("flavors", [])]
        missing = [name for name in dict.fromkeys(named) if name not in flavors]
        stopped = row.spec.get("stopPolicy", "None") != "None"
        other = entry.get("inactive_reason") if not missing else None
        entry["conditions"] = cluster_queue_conditions(missing, stopped, other)
    return status


def _local_queue_status(plane: ControlPlane) -> dict[str, Any]:
    from phalanx.dialects.kueue.conditions import local_queue_conditions

    cq_status = plane.cluster_queue_status()
    out: dict[str, Any] = {}
    for row in plane.store.objects("LocalQueue"):
        cq = cq_status.get(row.spec.get("clusterQueue", ""))
        stopped = row.spec.get("stopPolicy", "None") != "None"
        active = cq is not None and bool(cq.get("active"))
        out[row.name] = {"conditions": local_queue_conditions(cq is not None, active, stopped)}
    return out


@router.get("/whoami", tags=["auth"])
def whoami(principal: Caller) -> dict[str, Any]:
    """The user, tenants and admin flag the token stands for."""
    return principal_view(principal)


@router.post("/tokens", status_code=201, response_model=NewToken, tags=["auth"])
def create_token(plane: Plane, principal: Caller, request: TokenRequest) -> dict[str, Any]:
    """A new bearer token (admin only); its plaintext is in this answer only."""
    token, row = plane.create_token(
        principal,
        user=request.user,
        tenants=request.tenants,
        admin=request.admin,
        name=request.name,
        expires=request.expires,
    )
    return {"token": token, **token_view(row)}


@router.get("/tokens", tags=["auth"])
def list_tokens(plane: Plane, principal: Caller) -> dict[str, Any]:
    """Every token, never its secret, with ``revoked`` and ``expired`` (admin only)."""
    if not principal.admin:
        raise Forbidden("only the admin may list tokens")
    return {"items": [token_view(t) for t in plane.store.tokens()]}


@router.delete("/tokens/{name:path}", tags=["auth"])
def revoke_token(plane: Plane, principal: Caller, name: str) -> dict[str, Any]:
    """Revoke every token named ``name`` (admin only): they stop working at once, for the
    API and the dashboard; 404 when no token has that name."""
    rows = plane.revoke_tokens(principal, name)
    return {"items": [token_view(t) for t in rows]}


@router.post(
    "/apply",
    tags=["objects"],
    openapi_extra={
        "requestBody": {
            "content": {
                "application/json": {
                    "schema": {
                        "type": "object",
                        "properties": {
                            "documents": {"type": "array", "items": {"type": "object"}},
                            "source": {"type": "string"},
                        },
                        "required": ["documents"],
                    }
                },
                "application/yaml": {"schema": {"type": "string"}},
            },
            "required": True,
        }
    },
)
async def apply(
    request: Request, plane: Plane, principal: Caller, source: str | None = Query(None)
) -> dict[str, Any]:
    """Create or update objects from manifests: all of them, or none (admin only)."""
    from phalanx.dialects import kueue

    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    body = await request.body()
    if ctype in _YAML_TYPES:
        try:
            text = body.decode()
        except UnicodeDecodeError:
            raise Invalid("the manifest text is not UTF-8") from None
        manifests = await run_in_threadpool(kueue.load_text, text, source or "request")
    else:
        try:
            payload = json.loads(body or b"null")
        except ValueError as exc:
            raise Invalid(f"the request body is not valid JSON: {exc}") from None
        except RecursionError:
            raise Invalid(
                "the request body is nested too deeply to read as JSON (a manifest needs "
                "at most 100 levels)"
            ) from None
        if not isinstance(payload, dict) or not isinstance(payload.get("documents"), list):
            raise Invalid(
                'documents: expected {"documents": [manifest, ...], "source": "..."} '
                "or a YAML body with Content-Type: application/yaml"
            )
        docs = payload["documents"]
        if not all(isinstance(d, dict) for d in docs):
            bad = next(i for i, d in enumerate(docs) if not isinstance(d, dict))
            raise Invalid(f"documents[{bad}]: a manifest is a mapping")
        name = source or str(payload.get("source") or "request")
        manifests = await run_in_threadpool(kueue.load_documents, docs, name)
    results = await run_in_threadpool(plane.apply, principal, manifests)
    return {
        "results": [
            {"kind": kind, "name": name, "outcome": outcome} for kind, name, outcome in results
        ]
    }


class NodeUpdate(BaseModel):
    """``scontrol update NodeName=... State=... Reason=...``."""

    nodes: list[str] = Field(min_length=1, max_length=10_000)
    """The node names (expanded: no hostlist expressions)."""
    state: str = ""
    """``drain``, ``down``, ``resume``, ``undrain``, ``idle``; empty: change the reason only."""
    reason: str = Field("", max_length=4096)


@router.post("/nodes/state", tags=["objects"])
def update_nodes(plane: Plane, principal: Caller, body: NodeUpdate) -> dict[str, Any]:
    """Drain, down or resume nodes, all of them or none (admin only). The reason's user
    and time are the caller's and the server's; a node taken down has its jobs requeued.
    404 for an unknown node, 409 to resume a node that is up or idle one that runs jobs."""
    results = plane.update_nodes(principal, body.nodes, body.state, body.reason)
    return {
        "results": [
            {"kind": kind, "name": name, "outcome": outcome} for kind, name, outcome in results
        ]
    }


@router.get("/cluster", tags=["objects"])
def cluster(plane: Plane, principal: Caller) -> dict[str, Any]:
    """The ClusterQueues, ResourceFlavors and Nodes, each list as ``GET /api/v1/{plural}``
    gives it, and ``default_partition``: the ClusterQueue the caller's first tenant's
    ``default`` LocalQueue feeds (``null`` when there is none). Everything ``sinfo``
    shows, in one request instead of five."""
    out: dict[str, Any] = {}
    for key, kind in (
        ("clusterqueues", "ClusterQueue"),
        ("resourceflavors", "ResourceFlavor"),
        ("nodes", "Node"),
    ):
        status = live_status(plane, kind, principal)
        out[key] = [_manifest(plane, r, status) for r in plane.store.objects(kind)]
    tenants = principal_view(principal)["tenants"]
    row = plane.store.get_object("LocalQueue", f"{tenants[0]}/default") if tenants else None
    spec = _manifest(plane, row, None).get("spec") or {} if row is not None else {}
    out["default_partition"] = spec.get("clusterQueue")
    return out


@router.get("/{plural}", tags=["objects"])
def list_objects(plane: Plane, principal: Caller, plural: str) -> dict[str, Any]:
    kind = _kind(plural)
    status = live_status(plane, kind, principal)
    rows = plane.store.objects(kind)
    return {"kind": kind, "items": [_manifest(plane, r, status) for r in rows]}


@router.get("/{plural}/{name:path}", tags=["objects"])
def get_object(plane: Plane, principal: Caller, plural: str, name: str) -> dict[str, Any]:
    kind = _kind(plural)
    row = plane.store.get_object(kind, name)
    if row is None:
        raise NotFound(f"{kind.lower()}/{name} not found")
    return _manifest(plane, row, live_status(plane, kind, principal))


@router.delete("/{plural}/{name:path}", tags=["objects"])
def delete_object(plane: Plane, principal: Caller, plural: str, name: str) -> dict[str, Any]:
    """Delete an object (admin only); 409 while jobs or other objects use it."""
    kind = _kind(plural)
    plane.delete(principal, kind, name)
    return {"kind": kind, "name": name, "outcome": "deleted"}
