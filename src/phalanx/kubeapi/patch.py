"""The PATCH request bodies a Kubernetes API server accepts, applied to plain dicts.

Three of the four patch media types the apiserver takes are handled here; the
fourth, ``application/apply-patch+yaml``, is server-side apply and lives in
:mod:`phalanx.kubeapi.managedfields`.

* ``application/merge-patch+json``: RFC 7386. ``null`` deletes a key, arrays
  replace wholesale, a body that is not a JSON object is a 400.
* ``application/json-patch+json``: RFC 6902, through the ``jsonpatch`` library. A
  body that is not a list of operations is a 400; an operation that cannot apply
  (missing path, failed ``test``) is a 422, as the apiserver answers it.
* ``application/strategic-merge-patch+json``: Kubernetes' strategic merge patch,
  for built-in kinds only (a custom resource has no Go struct tags to read the
  strategies from, so the apiserver answers 415). Lists named in a
  :class:`StrategicSchema` merge by their ``patchMergeKey``; every other list is
  replaced. The directives ``kubectl apply`` (client side) and ``kubectl patch``
  send are honoured: ``$patch: replace|merge|delete`` in maps and list items,
  ``$setElementOrder/<list>``, ``$deleteFromPrimitiveList/<list>`` and
  ``$retainKeys``.

Everything is pure: the input object is never mutated and no I/O happens.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import jsonpatch
import jsonpointer

__all__ = [
    "APPLY_CBOR",
    "APPLY_YAML",
    "JSON_PATCH",
    "MERGE",
    "PRIMITIVE",
    "STRATEGIC",
    "STRATEGIC_SCHEMAS",
    "PatchError",
    "StrategicSchema",
    "apply_patch",
    "merge_patch",
    "strategic_merge_patch",
]

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY_YAML = "application/apply-patch+yaml"
APPLY_CBOR = "application/apply-patch+cbor"

# What the apiserver lists in a 415 for a custom resource: no strategic merge.
_CRD_ACCEPTED = (JSON_PATCH, MERGE, APPLY_YAML)
_ALL_ACCEPTED = (JSON_PATCH, MERGE, STRATEGIC, APPLY_YAML)

# A merge list of primitives (metadata.finalizers) has no merge key.
PRIMITIVE = ""

_DIRECTIVE = "$patch"
_RETAIN_KEYS = "$retainKeys"
_SET_ORDER = "$setElementOrder/"
_DELETE_PRIMITIVE = "$deleteFromPrimitiveList/"


class PatchError(Exception):
    """A patch the server refuses: ``code`` is the HTTP status to answer with."""

    def __init__(self, message: str, code: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


@dataclass(frozen=True)
class StrategicSchema:
    """The merge strategies of one built-in kind's lists.

    ``merge_lists`` maps a list's field path from the object root (list items are
    transparent: ``("spec", "containers", "env")``) to its ``patchMergeKey``, or to
    :data:`PRIMITIVE` for a merge list of scalars. A list not named is replaced.
    """

    merge_lists: Mapping[tuple[str, ...], str] = field(default_factory=dict)

    def merge_key(self, path: tuple[str, ...]) -> str | None:
        """The merge key of the list at ``path``, PRIMITIVE, or None to replace."""
        return self.merge_lists.get(path)


def _unknown_format(accepted: tuple[str, ...]) -> PatchError:
    return PatchError(
        "the body of the request was in an unknown format - accepted media types include: "
        + ", ".join(accepted),
        415,
    )


def _decode(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise PatchError(f"error decoding patch: {exc}", 400) from exc


def apply_patch(
    obj: dict[str, Any],
    body: bytes,
    content_type: str,
    *,
    strategic: StrategicSchema | None,
) -> dict[str, Any]:
    """Apply a PATCH ``body`` of ``content_type`` to ``obj``; return the new object.

    ``strategic`` is the kind's strategic merge schema, or None for a custom
    resource (then a strategic merge patch is a 415, as on a real apiserver).
    """
    media = content_type.split(";", 1)[0].strip().lower()
    if media == MERGE:
        patch = _decode(body)
        if not isinstance(patch, dict):
            raise PatchError("Invalid JSON Patch", 400)
        result = merge_patch(obj, patch)
        assert isinstance(result, dict)
        return result
    if media == JSON_PATCH:
        return _json_patch(obj, _decode(body))
    if media == STRATEGIC:
        if strategic is None:
            raise _unknown_format(_CRD_ACCEPTED)
        patch = _decode(body)
        if not isinstance(patch, dict):
            kind = "array" if isinstance(patch, list) else type(patch).__name__
            raise PatchError(
                f"json: cannot unmarshal {kind} into Go value of type map[string]interface {{}}",
                400,
            )
        return strategic_merge_patch(obj, patch, strategic)
    raise _unknown_format(_ALL_ACCEPTED)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: returns a new value, leaves both inputs alone."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


_JSON_OPS = ("add", "remove", "replace", "move", "copy", "test")


def _json_patch(obj: dict[str, Any], ops: Any) -> dict[str, Any]:
    if not isinstance(ops, list):
        kind = "object" if isinstance(ops, dict) else type(ops).__name__
        raise PatchError(f"json: cannot unmarshal {kind} into Go value of type jsonpatch.Patch")
    for i, op in enumerate(ops):
        if not isinstance(op, dict) or op.get("op") not in _JSON_OPS:
            raise PatchError(f"invalid JSON patch operation at index {i}: {op!r}")
        if not isinstance(op.get("path"), str):
            raise PatchError(f"JSON patch {op['op']} operation at index {i} has no path")
    result: Any = copy.deepcopy(obj)
    for op in ops:
        where = f"{op['op']} operation on path {op['path']!r}"
        try:
            result = jsonpatch.JsonPatch([op]).apply(result)
        except jsonpatch.JsonPatchTestFailed as exc:
            raise PatchError(f"JSON patch {where} failed: {exc}", 422) from exc
        except (
            jsonpatch.JsonPatchException,
            jsonpointer.JsonPointerException,
            KeyError,
            IndexError,
            TypeError,
        ) as exc:
            raise PatchError(f"JSON patch {where} does not apply: {exc}", 422) from exc
    if not isinstance(result, dict):
        raise PatchError("the patched document is not a JSON object", 422)
    return result


# --- strategic merge patch ------------------------------------------------------


def strategic_merge_patch(
    obj: dict[str, Any], patch: dict[str, Any], schema: StrategicSchema
) -> dict[str, Any]:
    """Apply a strategic merge patch (already decoded) to ``obj`` under ``schema``."""
    merged = _merge_map(copy.deepcopy(obj), copy.deepcopy(patch), (), schema)
    return merged if merged is not None else {}


def _merge_map(
    original: dict[str, Any],
    patch: dict[str, Any],
    path: tuple[str, ...],
    schema: StrategicSchema,
) -> dict[str, Any] | None:
    """Merge ``patch`` into ``original`` (both owned by the caller); None deletes."""
    directive = patch.pop(_DIRECTIVE, None)
    if directive == "delete":
        return None
    if directive == "replace":
        _check_directives(patch)
        return {k: _strip(v) for k, v in patch.items() if not k.startswith("$") and v is not None}
    if directive not in (None, "merge"):
        raise PatchError(f"unknown patch type: {directive} in map: {patch}")

    retain = patch.pop(_RETAIN_KEYS, None)
    if retain is not None:
        if not isinstance(retain, list):
            raise PatchError("invalid patch format of retainKeys")
        for key in patch:
            if not key.startswith("$") and key not in retain:
                raise PatchError("patch content doesn't match retainKeys list", 422)
        for key in list(original):
            if key not in retain:
                del original[key]

    orders: dict[str, list[Any]] = {}
    for key in [k for k in patch if k.startswith("$")]:
        value = patch.pop(key)
        if key.startswith(_SET_ORDER):
            if not isinstance(value, list):
                raise PatchError("invalid patch format of setElementOrder list")
            orders[key[len(_SET_ORDER) :]] = value
        elif key.startswith(_DELETE_PRIMITIVE):
            name = key[len(_DELETE_PRIMITIVE) :]
            if not isinstance(value, list):
                raise PatchError("invalid patch format of primitive list")
            current = original.get(name)
            if isinstance(current, list):
                original[name] = [v for v in current if v not in value]
        else:
            raise PatchError(f"unknown strategic merge patch directive {key!r}")

    for key, value in patch.items():
        sub = (*path, key)
        if value is None:
            original.pop(key, None)
        elif isinstance(value, dict):
            current = original.get(key)
            merged = _merge_map(current if isinstance(current, dict) else {}, value, sub, schema)
            if merged is None:
                original.pop(key, None)
            else:
                original[key] = merged
        elif isinstance(value, list):
            current = original.get(key)
            original[key] = _merge_list(
                current if isinstance(current, list) else [], value, sub, schema
            )
        else:
            original[key] = value

    for key, order in orders.items():
        if isinstance(original.get(key), list):
            original[key] = _reorder(original[key], order, schema.merge_key((*path, key)))
    return original


def _merge_list(
    original: list[Any], patch: list[Any], path: tuple[str, ...], schema: StrategicSchema
) -> list[Any]:
    key = schema.merge_key(path)
    if key is None:
        return [_strip(v) for v in patch]
    if key == PRIMITIVE:
        if any(isinstance(v, dict) for v in patch):
            raise PatchError("invalid patch format of primitive list")
        return original + [v for v in patch if v not in original]

    replace = any(isinstance(i, dict) and i.get(_DIRECTIVE) == "replace" for i in patch)
    if replace:
        return [_strip(i) for i in patch if not (isinstance(i, dict) and _DIRECTIVE in i)]
    result = list(original)
    for item in patch:
        if not isinstance(item, dict):
            raise PatchError(f"merge list {'.'.join(path)} takes objects keyed by {key}")
        if key not in item:
            raise PatchError(f"map: {item} does not contain declared merge key: {key}")
        at = next(
            (i for i, o in enumerate(result) if isinstance(o, dict) and o.get(key) == item[key]),
            None,
        )
        if item.get(_DIRECTIVE) == "delete":
            if at is not None:
                del result[at]
            continue
        if at is None:
            merged = _merge_map({}, item, path, schema)
            if merged is not None:
                result.append(merged)
        else:
            merged = _merge_map(result[at], item, path, schema)
            if merged is None:
                del result[at]
            else:
                result[at] = merged
    return result


def _reorder(items: list[Any], order: list[Any], key: str | None) -> list[Any]:
    """Honour ``$setElementOrder``: listed items in that order, the rest interleaved.

    Items the patch does not list keep their place relative to the listed ones
    where both were in the original list; new listed items go before them.
    """
    if key is None:
        return items

    def ident(item: Any) -> Any:
        raw = item.get(key) if key != PRIMITIVE and isinstance(item, dict) else item
        return json.dumps(raw, sort_keys=True)

    wanted = [ident(o) for o in order]
    rank = {w: i for i, w in enumerate(wanted)}
    listed = sorted((i for i in items if ident(i) in rank), key=lambda i: rank[ident(i)])
    others = [i for i in items if ident(i) not in rank]
    position = {ident(item): n for n, item in enumerate(items)}
    out: list[Any] = []
    a = b = 0
    while a < len(listed) or b < len(others):
        if b >= len(others) or (
            a < len(listed) and position[ident(listed[a])] < position[ident(others[b])]
        ):
            out.append(listed[a])
            a += 1
        else:
            out.append(others[b])
            b += 1
    return out


def _check_directives(patch: dict[str, Any]) -> None:
    for key in patch:
        directive = key.startswith("$") and not key.startswith((_SET_ORDER, _DELETE_PRIMITIVE))
        if directive and key != _RETAIN_KEYS:
            raise PatchError(f"unknown strategic merge patch directive {key!r}")


def _strip(value: Any) -> Any:
    """Drop directives from a value that replaces (rather than merges into) the original."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if not k.startswith("$") and v is not None}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


# --- the kinds' strategies (k8s.io/api patchStrategy/patchMergeKey tags) -----------


def _pod_spec(prefix: tuple[str, ...]) -> dict[tuple[str, ...], str]:
    lists: dict[tuple[str, ...], str] = {
        (*prefix, "volumes"): "name",
        (*prefix, "imagePullSecrets"): "name",
        (*prefix, "hostAliases"): "ip",
        (*prefix, "topologySpreadConstraints"): "topologyKey",
        (*prefix, "resourceClaims"): "name",
        (*prefix, "schedulingGates"): "name",
    }
    for containers in ("containers", "initContainers", "ephemeralContainers"):
        c = (*prefix, containers)
        lists[c] = "name"
        lists[(*c, "env")] = "name"
        lists[(*c, "ports")] = "containerPort"
        lists[(*c, "volumeMounts")] = "mountPath"
        lists[(*c, "volumeDevices")] = "devicePath"
        lists[(*c, "resizePolicy")] = "resourceName"
    return lists


_METADATA: dict[tuple[str, ...], str] = {
    ("metadata", "ownerReferences"): "uid",
    ("metadata", "finalizers"): PRIMITIVE,
}
_TEMPLATE_METADATA: dict[tuple[str, ...], str] = {
    ("spec", "template", *k): v for k, v in _METADATA.items()
}
_POD_STATUS: dict[tuple[str, ...], str] = {
    ("status", "conditions"): "type",
    ("status", "podIPs"): "ip",
}

STRATEGIC_SCHEMAS: dict[str, StrategicSchema] = {
    "Pod": StrategicSchema({**_METADATA, **_pod_spec(("spec",)), **_POD_STATUS}),
    "Job": StrategicSchema(
        {
            **_METADATA,
            **_TEMPLATE_METADATA,
            **_pod_spec(("spec", "template", "spec")),
            ("status", "conditions"): "type",
        }
    ),
    # spec.taints carries no patch strategy: a patch replaces the whole list.
    "Node": StrategicSchema(
        {
            **_METADATA,
            ("spec", "podCIDRs"): PRIMITIVE,
            ("status", "conditions"): "type",
            ("status", "addresses"): "type",
        }
    ),
    "Namespace": StrategicSchema({**_METADATA, ("status", "conditions"): "type"}),
    "Event": StrategicSchema(dict(_METADATA)),
}
