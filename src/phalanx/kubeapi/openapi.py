"""OpenAPI v3 documents: ``/openapi/v3`` and ``/openapi/v3/<api|apis/group>/<version>``.

One document per served group-version, laid out as the Kubernetes API server
lays its own out, because kubectl reads them:

* ``kubectl explain`` looks up ``/apis/<g>/<v>/<plural>`` (or
  ``.../namespaces/{namespace}/<plural>``), takes the GVK from the ``get``
  (else ``post``) operation's ``x-kubernetes-group-version-kind`` and renders
  the ``components.schemas`` entry whose ``x-kubernetes-group-version-kind``
  lists that GVK, following ``$ref``/``allOf``.
* kubectl's server-side field validation check (cli-runtime's
  ``queryParamVerifierV3``) fetches the group-version's document, finds the
  path whose ``patch`` operation carries the kind's
  ``x-kubernetes-group-version-kind`` and looks for a ``fieldValidation``
  parameter ``in: query`` on that operation; without it kubectl falls back to
  client-side validation. Every write operation here lists it inline.

kubectl 1.27 and 1.28 fetch ``/openapi/v2`` (protobuf) before anything else in
``kubectl explain`` and give up on a 404, even though they then render from v3;
:func:`openapi_v2_protobuf` is the empty v2 document (a valid, empty protobuf
message) the server answers with, so they go on to the v3 documents (checked
with the real binaries).

The index's ``serverRelativeURL`` carries ``?hash=`` the upper-case SHA-512 of
the document's canonical JSON, so clients may cache a document for good.
Documents are built once per process (:func:`functools.cache`) and shared:
callers serialize them and must not modify them.
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any

from phalanx.kubeapi.resources import RESOURCES, Resource, group_versions, version_info
from phalanx.kubeapi.schemas import (
    DELETE_OPTIONS,
    PATCH,
    STATUS,
    component_name,
    kind_schema,
    list_schema,
    meta_schemas,
)

__all__ = [
    "OPENAPI_V2_CONTENT_TYPE",
    "document_path",
    "openapi_v2_protobuf",
    "openapi_v3_document",
    "openapi_v3_index",
    "resolve_ref",
    "schema_of",
]

Schema = dict[str, Any]

_JSON = "application/json"
_PATCH_TYPES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
)
"""Patch bodies of the built-in kinds; custom resources (and phalanx's own) have no
strategic merge patch, as on a real API server."""
_BUILTIN_GROUPS = ("", "batch", "events.k8s.io")


OPENAPI_V2_CONTENT_TYPE = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
"""The ``Content-Type`` of ``/openapi/v2`` (Go's MIME parser refuses the ``@`` of the
``Accept`` value kubectl sends, so the API server's own spelling it is)."""


def openapi_v2_protobuf() -> bytes:
    """``GET /openapi/v2``: an empty OpenAPI v2 document (no definitions)."""
    return b""


def document_path(group_version: str) -> str:
    """``api/v1`` or ``apis/<group>/<version>``: the index key of a group-version."""
    return "api/v1" if group_version == "v1" else f"apis/{group_version}"


def _query(name: str, description: str, kind: str = "string", unique: bool = True) -> Schema:
    return {
        "name": name,
        "in": "query",
        "description": description,
        "schema": {"type": kind, "uniqueItems": unique},
    }


_PRETTY = _query("pretty", "If 'true', the output is pretty printed.")
_DRY_RUN = _query("dryRun", "When present (All), the change is checked but not persisted.")
_FIELD_MANAGER = _query("fieldManager", "The name of the actor making the change.")
_FIELD_VALIDATION = _query(
    "fieldValidation",
    "How to handle unknown and duplicate fields: Ignore, Warn (the default: a warning "
    "header per field) or Strict (the request fails).",
)
_FORCE = _query(
    "force",
    "Force an apply: take over fields other managers own. Only for apply requests.",
    "boolean",
)
_LIST_PARAMS = [
    _query("allowWatchBookmarks", "Ask for BOOKMARK watch events.", "boolean"),
    _query("continue", "The continue token of the previous page."),
    _query("fieldSelector", "Select objects by fields."),
    _query("labelSelector", "Select objects by labels."),
    _query("limit", "The most objects to return.", "integer"),
    _query("resourceVersion", "The version to list or watch from."),
    _query("resourceVersionMatch", "How resourceVersion applies to a list."),
    _query("sendInitialEvents", "Start a watch with the current objects.", "boolean"),
    _query("timeoutSeconds", "How long a watch lasts.", "integer"),
    _query("watch", "Watch for changes instead of listing.", "boolean"),
]
_DELETE_PARAMS = [
    _DRY_RUN,
    _query("gracePeriodSeconds", "Seconds before the object is deleted.", "integer"),
    _query("propagationPolicy", "Orphan, Background or Foreground."),
    _query("orphanDependents", "Deprecated: use propagationPolicy.", "boolean"),
]
_LOG_PARAMS = [
    _query("container", "The container to stream logs of."),
    _query("follow", "Follow the log stream.", "boolean"),
    _query("insecureSkipTLSVerifyBackend", "Unused.", "boolean"),
    _query("limitBytes", "The most bytes to return.", "integer"),
    _query("previous", "The previous (terminated) container's logs.", "boolean"),
    _query("sinceSeconds", "Only logs newer than this many seconds.", "integer"),
    _query("sinceTime", "Only logs after this time (RFC 3339)."),
    _query("tailLines", "Only this many lines from the end.", "integer"),
    _query("timestamps", "Prefix each line with its time.", "boolean"),
]


def _path_param(name: str, description: str) -> Schema:
    return {
        "name": name,
        "in": "path",
        "description": description,
        "required": True,
        "schema": {"type": "string", "uniqueItems": True},
    }


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _response(name: str, description: str = "OK", codes: tuple[str, ...] = ("200",)) -> Schema:
    body = {"description": description, "content": {_JSON: {"schema": _ref(name)}}}
    return {code: body for code in codes}


def _operation_id(verb: str, r: Resource, suffix: str = "") -> str:
    group = "".join(p.capitalize() for p in r.group.replace("-", ".").split(".")) or "Core"
    scope = "Namespaced" if r.namespaced and verb not in ("listForAllNamespaces",) else ""
    if verb == "listForAllNamespaces":
        return f"list{group}{r.version.capitalize()}{r.kind}ForAllNamespaces"
    return f"{verb}{group}{r.version.capitalize()}{scope}{r.kind}{suffix}"


def _op(
    r: Resource,
    action: str,
    verb: str,
    response: Schema,
    parameters: list[Schema],
    *,
    body: str | None = None,
    kind: str | None = None,
    suffix: str = "",
    description: str = "",
) -> Schema:
    op: Schema = {
        "tags": [r.group_version.replace("/", "_").replace(".", "")],
        "description": description or f"{verb} {r.kind} {suffix}".strip(),
        "operationId": _operation_id(verb, r, suffix),
        "parameters": parameters,
        "responses": {**response, "401": {"description": "Unauthorized"}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {
            "group": r.group,
            "version": r.version,
            "kind": kind or r.kind,
        },
    }
    if body is not None:
        types: tuple[str, ...] = _PATCH_TYPES if action == "patch" else (_JSON, "application/yaml")
        if action == "patch" and r.group not in _BUILTIN_GROUPS:
            types = tuple(t for t in types if "strategic" not in t)
        op["requestBody"] = {
            "content": {t: {"schema": _ref(body)} for t in types},
            "required": True,
        }
    return op


def _paths(r: Resource, name: str, list_name: str) -> dict[str, Schema]:
    prefix = "/api/v1" if not r.group else f"/apis/{r.group}/{r.version}"
    verbs = set(r.verbs)
    scope = f"{prefix}/namespaces/{{namespace}}" if r.namespaced else prefix
    collection, item = f"{scope}/{r.plural}", f"{scope}/{r.plural}/{{name}}"
    common = [_PRETTY]
    ns = [_path_param("namespace", "The object's namespace.")] if r.namespaced else []
    named = [_path_param("name", f"The {r.kind}'s name.")]
    write = [_DRY_RUN, _FIELD_MANAGER, _FIELD_VALIDATION]
    paths: dict[str, Schema] = {}

    coll: Schema = {}
    if "list" in verbs:
        coll["get"] = _op(r, "list", "list", _response(list_name), _LIST_PARAMS)
    if "create" in verbs:
        coll["post"] = _op(
            r, "post", "create", _response(name, codes=("200", "201", "202")), write, body=name
        )
    if "deletecollection" in verbs:
        coll["delete"] = _op(
            r,
            "deletecollection",
            "deleteCollection",
            _response(STATUS),
            [*_DELETE_PARAMS, *_LIST_PARAMS],
            body=DELETE_OPTIONS,
        )
    if coll:
        paths[collection] = {**coll, "parameters": [*ns, *common]}

    one: Schema = {}
    if "get" in verbs:
        one["get"] = _op(r, "get", "read", _response(name), [])
    if "update" in verbs:
        one["put"] = _op(
            r, "put", "replace", _response(name, codes=("200", "201")), write, body=name
        )
    if "patch" in verbs:
        one["patch"] = _op(
            r, "patch", "patch", _response(name, codes=("200", "201")), [*write, _FORCE], body=PATCH
        )
    if "delete" in verbs:
        one["delete"] = _op(
            r, "delete", "delete", _response(STATUS, codes=("200", "202")), _DELETE_PARAMS,
            body=DELETE_OPTIONS,
        )  # fmt: skip
    if one:
        paths[item] = {**one, "parameters": [*named, *ns, *common]}

    for sub in r.subresources:
        if sub == "status":
            status: Schema = {
                "get": _op(r, "get", "read", _response(name), [], suffix="Status"),
                "put": _op(r, "put", "replace", _response(name), write, body=name, suffix="Status"),
                "patch": _op(
                    r, "patch", "patch", _response(name), [*write, _FORCE], body=PATCH,
                    suffix="Status",
                ),
            }  # fmt: skip
            paths[f"{item}/status"] = {**status, "parameters": [*named, *ns, *common]}
        elif sub == "log":
            log_op = _op(r, "connect", "read", {}, _LOG_PARAMS, suffix="Log")
            log_op["responses"] = {
                "200": {
                    "description": "OK",
                    "content": {"text/plain": {"schema": {"type": "string"}}},
                },
                "401": {"description": "Unauthorized"},
            }
            paths[f"{item}/log"] = {"get": log_op, "parameters": [*named, *ns, *common]}

    if r.namespaced and "list" in verbs:
        paths[f"{prefix}/{r.plural}"] = {
            "get": _op(r, "list", "listForAllNamespaces", _response(list_name), _LIST_PARAMS),
            "parameters": common,
        }
    return paths


@functools.cache
def _documents() -> dict[str, Schema]:
    docs: dict[str, Schema] = {}
    for gv in group_versions():
        schemas = dict(meta_schemas())
        paths: dict[str, Schema] = {}
        for r in (r for r in RESOURCES if r.group_version == gv):
            name = component_name(r.group, r.version, r.kind)
            list_name = f"{name}List"
            schemas[name] = kind_schema(r)
            if "list" in r.verbs:
                schemas[list_name] = list_schema(r, name)
            paths.update(_paths(r, name, list_name))
        docs[document_path(gv)] = {
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": version_info()["gitVersion"]},
            "paths": paths,
            "components": {
                "schemas": schemas,
                "securitySchemes": {
                    "BearerToken": {
                        "type": "apiKey",
                        "description": "Bearer Token authentication",
                        "name": "authorization",
                        "in": "header",
                    }
                },
            },
            "security": [{"BearerToken": []}],
        }
    return docs


def _hash(document: Schema) -> str:
    text = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return hashlib.sha512(text.encode()).hexdigest().upper()


@functools.cache
def openapi_v3_index() -> dict[str, Any]:
    """``GET /openapi/v3``: each group-version's document and its content hash."""
    return {
        "paths": {
            path: {"serverRelativeURL": f"/openapi/v3/{path}?hash={_hash(doc)}"}
            for path, doc in _documents().items()
        }
    }


def openapi_v3_document(path: str) -> dict[str, Any] | None:
    """``GET /openapi/v3/<path>``: ``path`` is ``api/v1`` or ``apis/<group>/<version>``
    (a leading ``/`` or ``/openapi/v3/`` and a ``?hash=`` query are ignored); None when
    no such group-version is served."""
    path = path.split("?", 1)[0].strip("/")
    path = path.removeprefix("openapi/v3/")
    return _documents().get(path)


def resolve_ref(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with a ``$ref`` (direct or as the single ``allOf``) followed."""
    target = schema.get("$ref")
    if target is None and len(schema.get("allOf") or ()) == 1:
        target = schema["allOf"][0].get("$ref")
    if not isinstance(target, str) or not target.startswith("#/components/schemas/"):
        return schema
    found: dict[str, Any] = document["components"]["schemas"][target.rsplit("/", 1)[1]]
    return found


def schema_of(api_version: str, kind: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The schema of ``kind`` objects in ``api_version`` and the document holding it
    (to resolve its ``$ref``\\ s); None when the kind is not served."""
    document = openapi_v3_document(document_path(api_version))
    if document is None:
        return None
    group, _, version = api_version.rpartition("/")
    schema = document["components"]["schemas"].get(component_name(group, version, kind))
    return None if schema is None else (schema, document)
