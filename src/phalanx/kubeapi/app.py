"""The Kubernetes API's ASGI app: routing, authentication, content negotiation, errors.

Paths are a real API server's: ``/version``, ``/api``, ``/apis``, ``/api/v1/...``,
``/apis/{group}/{version}/...`` (cluster-scoped and ``namespaces/{ns}/...``
resources, subresources, the legacy ``/watch/`` prefix), ``/openapi/v3``. Every
request but ``/version`` and the health checks needs a bearer token (the REST
API's tokens); the answer is JSON, or a ``Table`` when the client asks for one
(``kubectl get``), or a stream of watch events. Failures are ``Status``
objects (:mod:`.status`). A standby server serves reads it can and hands the rest
to the leader (:mod:`phalanx.api.forward`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from phalanx.api.errors import LEADER_HEADER
from phalanx.api.plane import ControlPlane
from phalanx.auth import Principal
from phalanx.errors import NotLeader, PhalanxError
from phalanx.kubeapi import protobuf, resources
from phalanx.kubeapi.handlers import Handlers, ListOptions, WriteOptions
from phalanx.kubeapi.status import KubeError, from_phalanx
from phalanx.kubeapi.storage import Ctx
from phalanx.kubeapi.watch import Feed, WatchOptions, watch_events

__all__ = ["KUBE_PREFIX", "create_kube_app"]

log = logging.getLogger("phalanx.kubeapi")

KUBE_PREFIX = "/kube"
"""Where the REST API's server also serves this app (a standby forwards there)."""

_JSON = "application/json"
_BODY_TYPES = ("application/json", "application/yaml", "application/x-yaml", "text/yaml", "")
_ALL_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type=_JSON, headers=headers)


def _error(exc: KubeError) -> Response:
    headers = dict(exc.headers)
    if exc.retry_after is not None:
        headers["Retry-After"] = str(exc.retry_after)
    return _json(exc.body(), exc.code, headers)


class KubeApp:
    """State shared by the routes: the plane, the verbs, the watch feed."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.handlers = Handlers()
        self.feed = Feed(plane.store, lambda: plane.leading)

    def principal(self, request: Request) -> Principal:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise KubeError(401, "Unauthorized", "Unauthorized")
        try:
            return self.plane.authenticate(token.strip())
        except PhalanxError:
            raise KubeError(401, "Unauthorized", "Unauthorized") from None


def create_kube_app(plane: ControlPlane, *, own_url: str = "") -> Any:
    """The Kubernetes API of ``plane``, as an ASGI app (``own_url``: this server's REST
    URL, for a leader's log of forwarded requests)."""
    from phalanx.api.forward import Forwarding

    state = KubeApp(plane)

    async def version(request: Request) -> Response:
        return _json(resources.version_info())

    async def healthz(request: Request) -> Response:
        return Response("ok", media_type="text/plain")

    async def discovery(request: Request) -> Response:
        try:
            await run_in_threadpool(state.principal, request)
            path = request.url.path.rstrip("/")
            if path.endswith("/api"):
                return _json(resources.api_versions())
            if path.endswith("/apis"):
                return _json(resources.api_group_list())
            group = request.path_params.get("group")
            version_ = request.path_params.get("version")
            if group and not version_:
                found_group = resources.api_group(group)
                if found_group is None:
                    raise _not_served()
                return _json(found_group)
            gv = f"{group}/{version_}" if group else "v1"
            found = resources.api_resource_list(gv)
            if found is None:
                raise _not_served()
            return _json(found)
        except KubeError as exc:
            return _error(exc)

    async def openapi(request: Request) -> Response:
        from phalanx.kubeapi import openapi as docs

        try:
            await run_in_threadpool(state.principal, request)
            path = request.path_params.get("path")
            if not path:
                return _json(docs.openapi_v3_index())
            doc = docs.openapi_v3_document(path)
            if doc is None:
                raise _not_served()
            return _json(doc, headers={"Cache-Control": "public, immutable"})
        except KubeError as exc:
            return _error(exc)

    async def openapi_v2(request: Request) -> Response:
        # kubectl 1.27/1.28 fetch v2 before they use v3 for explain; an empty answer
        # sends them on to v3 (a 404 stops them).
        from phalanx.kubeapi import openapi as docs

        return Response(docs.openapi_v2_protobuf(), media_type=docs.OPENAPI_V2_CONTENT_TYPE)

    async def core(request: Request) -> Response:
        return await _dispatch(state, request, "v1", request.path_params["rest"])

    async def grouped(request: Request) -> Response:
        p = request.path_params
        return await _dispatch(state, request, f"{p['group']}/{p['version']}", p["rest"])

    routes = [
        Route("/version", version),
        Route("/version/", version),
        Route("/healthz", healthz),
        Route("/livez", healthz),
        Route("/readyz", healthz),
        Route("/api", discovery),
        Route("/api/", discovery),
        Route("/apis", discovery),
        Route("/apis/", discovery),
        Route("/api/v1", discovery),
        Route("/apis/{group}", discovery),
        Route("/apis/{group}/{version}", discovery),
        Route("/openapi/v3", openapi),
        Route("/openapi/v3/{path:path}", openapi),
        Route("/openapi/v2", openapi_v2),
        Route("/api/v1/{rest:path}", core, methods=_ALL_METHODS),
        Route("/apis/{group}/{version}/{rest:path}", grouped, methods=_ALL_METHODS),
    ]
    app = Starlette(routes=routes)
    app.state.kube = state
    served = Forwarding(app, own_url=own_url)
    served.close = state.feed.stop  # type: ignore[attr-defined]
    return served


def _not_served() -> KubeError:
    return KubeError(404, "NotFound", "the server could not find the requested resource")


async def _dispatch(state: KubeApp, request: Request, gv: str, rest: str) -> Response:
    try:
        return await _serve(state, request, gv, rest)
    except KubeError as exc:
        return _error(exc)
    except NotLeader as exc:
        if exc.leader:
            body = from_phalanx(exc, None).body()
            return _json(body, 503, {LEADER_HEADER: exc.leader.rstrip("/") + "/kube"})
        return _error(from_phalanx(exc, None))
    except PhalanxError as exc:
        return _error(from_phalanx(exc, None))
    except Exception as exc:  # a bug: say so as a Status, and log it
        log.exception("kube API %s %s failed", request.method, request.url.path)
        return _error(KubeError(500, "InternalError", f"Internal error occurred: {exc}"))


def _route(gv: str, rest: str) -> tuple[resources.Resource, str | None, str, str, bool]:
    """The resource, namespace, name and subresource of a path, and whether it is a
    legacy ``/watch/`` path."""
    parts = [p for p in rest.split("/") if p != ""]
    watch = False
    if parts and parts[0] == "watch":
        watch = True
        parts = parts[1:]
    namespace: str | None = None
    if len(parts) >= 3 and parts[0] == "namespaces":
        candidate = resources.resolve(gv, parts[2])
        if candidate is not None and candidate.namespaced:
            namespace = parts[1]
            parts = parts[2:]
    if not parts:
        raise _not_served()
    resource = resources.resolve(gv, parts[0])
    if resource is None:
        raise _not_served()
    name = parts[1] if len(parts) > 1 else ""
    sub = parts[2] if len(parts) > 2 else ""
    if len(parts) > 3 or (sub and sub not in resource.subresources):
        raise _not_served()
    return resource, namespace, name, sub, watch


def _truthy(value: str | None) -> bool:
    return (value or "").lower() in ("true", "1")


async def _serve(state: KubeApp, request: Request, gv: str, rest: str) -> Response:
    principal = await run_in_threadpool(state.principal, request)
    resource, namespace, name, sub, watch_path = _route(gv, rest)
    query = request.query_params
    ctx = Ctx(state.plane, principal, time.time(), resource)
    handlers = state.handlers
    method = request.method
    table = _wants_table(request)
    if method == "GET":
        if sub == "log":
            storage = handlers.storage(resource)
            handlers.authorize(ctx, "get", namespace, name, "log")
            reader = getattr(storage, "log", None)
            if reader is None:
                raise _not_served()
            stream = await run_in_threadpool(reader, ctx, namespace, name, dict(query))
            return StreamingResponse(stream, media_type="text/plain")
        if not name and (watch_path or _truthy(query.get("watch"))):
            return _watch(state, request, ctx, namespace, table)
        if name:
            obj = await run_in_threadpool(handlers.get, ctx, namespace, name)
            return _answer(ctx, obj, table, request)
        options = ListOptions(
            label_selector=query.get("labelSelector", ""),
            field_selector=query.get("fieldSelector", ""),
            limit=_int(query.get("limit"), "limit"),
            continue_=query.get("continue", ""),
            resource_version=query.get("resourceVersion", ""),
        )
        revision, _ = await run_in_threadpool(state.plane.store.revision)
        listed = await run_in_threadpool(handlers.list_objects, ctx, namespace, options, revision)
        return _answer(ctx, listed, table, request)
    write = WriteOptions(
        dry_run=bool(query.getlist("dryRun")),
        field_manager=query.get("fieldManager", "") or _manager(request),
        field_validation=query.get("fieldValidation", ""),
        force=_truthy(query.get("force")),
    )
    if method == "DELETE":
        if not name:
            raise KubeError.method_not_allowed(": delete a collection item by item")
        out = await run_in_threadpool(handlers.delete, ctx, namespace, name, write)
        return _answer(ctx, out, False, request)
    raw = await request.body()
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if method == "PATCH":
        if not name:
            raise KubeError.method_not_allowed("")
        code, out = await run_in_threadpool(
            handlers.patch, ctx, namespace, name, raw, ctype, write, sub
        )
        return _answer(ctx, out, False, request, code)
    body = _body(raw, ctype)
    if method == "POST":
        if name:
            raise KubeError.method_not_allowed("")
        out = await run_in_threadpool(handlers.create, ctx, namespace, body, write)
        return _answer(ctx, out, False, request, 201)
    if method == "PUT":
        if not name:
            raise KubeError.method_not_allowed("")
        out = await run_in_threadpool(handlers.update, ctx, namespace, name, body, write, sub)
        return _answer(ctx, out, False, request)
    raise KubeError.method_not_allowed("")


def _int(value: str | None, name: str) -> int:
    if not value:
        return 0
    try:
        return max(0, int(value))
    except ValueError:
        raise KubeError.bad_request(f"{name}: {value!r} is not an integer") from None


def _manager(request: Request) -> str:
    """The field manager a write without ``fieldManager`` records: the user agent's
    program name, as the API server does (``kubectl-edit``, ``kubectl-label``)."""
    agent = request.headers.get("user-agent", "")
    return agent.split("/")[0][:128] if agent else ""


def _body(raw: bytes, ctype: str) -> dict[str, Any]:
    if ctype == protobuf.MEDIA_TYPE:
        return protobuf.decode(raw)
    if ctype not in _BODY_TYPES:
        raise KubeError(
            415,
            "UnsupportedMediaType",
            f"the body of the request was in an unknown format ({ctype}) - accepted media types "
            "include: application/json, application/yaml, application/vnd.kubernetes.protobuf "
            "(for the kinds kubectl's imperative commands send)",
        )
    if ctype in ("application/json", ""):
        try:
            data = orjson.loads(raw or b"null")
        except orjson.JSONDecodeError as exc:
            raise KubeError.bad_request(f"the request body is not valid JSON: {exc}") from None
    else:
        import yaml

        try:
            data = yaml.safe_load(raw.decode())
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise KubeError.bad_request(f"the request body is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise KubeError.bad_request("the request body must be a JSON object")
    return data


def _wants_table(request: Request) -> bool:
    accept = request.headers.get("accept", "")
    return "as=Table" in accept


def _answer(
    ctx: Ctx, body: dict[str, Any], table: bool, request: Request, code: int = 200
) -> Response:
    if table and body.get("kind") != "Status":
        from phalanx.kubeapi import tables

        include = request.query_params.get("includeObject", "Metadata")
        items = body.get("items", [body])
        meta = body.get("metadata") or {}
        converted = tables.table(
            ctx.resource,
            items,
            ctx.now,
            include,
            resource_version=str(meta.get("resourceVersion", "")),
            continue_token=str(meta.get("continue", "")) if "items" in body else "",
        )
        if "items" in body and meta.get("remainingItemCount") is not None:
            converted.setdefault("metadata", {})["remainingItemCount"] = meta["remainingItemCount"]
        body = converted
    response = _json(body, code)
    if ctx.warnings:
        from phalanx.kubeapi.fieldvalidation import warning_header

        for warning in ctx.warnings:
            response.headers.append("Warning", warning_header(warning))
    return response


def _watch(
    state: KubeApp, request: Request, ctx: Ctx, namespace: str | None, table: bool
) -> Response:
    query = request.query_params
    timeout = _int(query.get("timeoutSeconds"), "timeoutSeconds") or 1800
    initial = query.get("sendInitialEvents")
    options = WatchOptions(
        resource_version=query.get("resourceVersion", ""),
        label_selector=query.get("labelSelector", ""),
        field_selector=query.get("fieldSelector", ""),
        timeout_s=float(timeout),
        bookmarks=_truthy(query.get("allowWatchBookmarks")),
        send_initial_events=None if initial is None else _truthy(initial),
    )
    include = query.get("includeObject", "Metadata")

    async def lines() -> AsyncIterator[bytes]:
        first = True
        try:
            async for event in watch_events(
                state.handlers, state.feed, ctx, namespace, options, request.is_disconnected
            ):
                obj = event["object"]
                if table and event["type"] not in ("ERROR", "BOOKMARK"):
                    from phalanx.kubeapi import tables

                    converted = tables.table(
                        ctx.resource,
                        [obj],
                        time.time(),
                        include,
                        resource_version=str(obj.get("metadata", {}).get("resourceVersion", "")),
                    )
                    if not first:
                        converted["columnDefinitions"] = []
                    first = False
                    event = {"type": event["type"], "object": converted}
                yield orjson.dumps(event) + b"\n"
        except KubeError as exc:
            yield orjson.dumps({"type": "ERROR", "object": exc.body()}) + b"\n"
        except PhalanxError as exc:
            yield orjson.dumps({"type": "ERROR", "object": from_phalanx(exc, None).body()}) + b"\n"

    return StreamingResponse(lines(), media_type=_JSON, headers={"Cache-Control": "no-cache"})
