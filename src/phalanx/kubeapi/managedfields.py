"""Server-side apply and ``metadata.managedFields``, on plain dicts.

This follows the semantics of Kubernetes' field management (the apiserver's
fieldmanager over sigs.k8s.io/structured-merge-diff), simplified where a
schema-less dict world forces it but honest about what it tracks:

* Every write records which manager owns which fields, as ``managedFields``
  entries in the FieldsV1 encoding: ``f:<name>`` for a map key,
  ``k:{"key":value}`` for an item of an associative list (``x-kubernetes-list-type:
  map``, keys sorted by name), ``v:<json>`` for an item of a set list, and ``".": {}``
  where a node that has children is itself owned. Atomic lists and scalars are
  leaves (``{}``).
* An apply (operation ``Apply``) owns exactly the fields of its configuration.
  The configuration is merged into the live object (map lists by their keys,
  set lists by value, atomic lists replaced). A field another manager owns whose
  value would change is a conflict, refused unless ``force``, which moves the
  field to the applier. The same value is shared ownership, not a conflict.
  Fields the manager applied before and no longer applies are removed from the
  object unless somebody else still owns them.
* Any other write (operation ``Update``) gives the writer every field it added
  or changed, taking them from other managers, and drops removed fields from
  everyone.
* ``apiVersion``, ``kind`` and the server-set metadata (name, namespace, uid,
  resourceVersion, generation, creationTimestamp, selfLink, managedFields) are
  never owned. Apply managers are one entry per (manager, subresource); update
  managers one per (manager, apiVersion, subresource).

* An object that exists but has no managedFields is not tracked by updates;
  its first apply hands its existing fields to an Update manager named
  ``before-first-apply``, so that the apply can conflict with them.

The FieldsV1 encoding is in :mod:`phalanx.kubeapi.fieldsv1`, the list types of
the kinds served in :mod:`phalanx.kubeapi.listtypes`. Simplifications: no
conversion between API versions (paths are taken as equal across versions), no
union (discriminator) handling, no ``last-applied-configuration`` interplay
with client-side apply, and update managers are not capped into an
``ancient-changes`` entry.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from phalanx.kubeapi.fieldsv1 import (
    Element,
    FieldPath,
    decode_fields,
    encode_fields,
    field_names,
    item_element,
    spell,
)
from phalanx.kubeapi.listtypes import (
    DEFAULT_LIST_TYPES,
    KUEUE_LIST_TYPES,
    ListType,
    ListTypes,
)
from phalanx.kubeapi.patch import PatchError

__all__ = [
    "DEFAULT_LIST_TYPES",
    "KUEUE_LIST_TYPES",
    "ApplyConflict",
    "Conflict",
    "ListType",
    "ListTypes",
    "ensure_valid_managed_fields",
    "record_update",
    "server_side_apply",
    "strip_managed",
]


@dataclass(frozen=True)
class Conflict:
    """A field another manager owns; ``path`` is spelled as the apiserver spells it."""

    manager: str
    path: str


class ApplyConflict(Exception):
    """An apply refused because it would change fields other managers own (HTTP 409)."""

    def __init__(self, conflicts: list[Conflict]) -> None:
        self.conflicts = conflicts
        self.message = _conflict_message(conflicts)
        super().__init__(self.message)


def _conflict_message(conflicts: list[Conflict]) -> str:
    if len(conflicts) == 1:
        c = conflicts[0]
        return f"Apply failed with 1 conflict: conflict with {c.manager}: {c.path}"
    by_manager: dict[str, list[str]] = {}
    for c in conflicts:
        by_manager.setdefault(c.manager, []).append(c.path)
    lines: list[str] = []
    for manager in by_manager:  # the caller's order: by manager identifier, as Kubernetes
        lines.append(f"conflicts with {manager}:")
        lines.extend(f"- {p}" for p in by_manager[manager])
    return f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)


_NODE = object()  # the value recorded for a non-leaf path by _nodes


def _nodes(value: Any, lists: ListTypes, path: FieldPath = ()) -> dict[FieldPath, Any]:
    """Every path of ``value``, mapped to its value for leaves and _NODE for the rest."""
    out: dict[FieldPath, Any] = {}
    if isinstance(value, dict):
        for key, child in value.items():
            sub = (*path, ("f", key))
            out.update(_nodes_child(child, lists, sub))
    return out


def _nodes_child(value: Any, lists: ListTypes, path: FieldPath) -> dict[FieldPath, Any]:
    if isinstance(value, dict):
        return {path: _NODE, **_nodes(value, lists, path)}
    if isinstance(value, list):
        lt = lists.get(field_names(path))
        if lt.type == "atomic":
            return {path: value}
        out: dict[FieldPath, Any] = {path: _NODE}
        for i, item in enumerate(value):
            sub = (*path, item_element(item, lt, i))
            out.update(_nodes_child(item, lists, sub) if lt.type == "map" else {sub: item})
        return out
    return {path: value}


def _field_set(config: Any, lists: ListTypes, path: FieldPath = ()) -> set[FieldPath]:
    """The fields an applied configuration sets (structured-merge-diff's ToFieldSet)."""
    out: set[FieldPath] = set()
    if not isinstance(config, dict):
        return out
    for key, value in config.items():
        sub = (*path, ("f", key))
        if isinstance(value, dict):
            out |= _field_set(value, lists, sub) if value else {sub}
        elif isinstance(value, list):
            lt = lists.get(field_names(sub))
            if lt.type == "atomic" or not value:
                # Kubernetes leaves an empty set or map list unowned; owning it
                # lets its applier take it away again.
                out.add(sub)
                continue
            seen: set[Element] = set()
            for i, item in enumerate(value):
                element = item_element(item, lt, i)
                _check_item(item, element, lt, seen, sub)
                item_path = (*sub, element)
                out.add(item_path)
                if lt.type == "map":
                    out |= _field_set(item, lists, item_path)
        else:
            out.add(sub)
    return out


def _check_item(
    item: Any, element: Element, lt: ListType, seen: set[Element], path: FieldPath
) -> None:
    """Refuse what structured-merge-diff cannot type: keyless or duplicate items."""
    if lt.type == "map" and (not isinstance(item, dict) or lt.key_of(item) is None):
        defaults = dict(lt.defaults)
        missing = next(
            k
            for k in lt.keys
            if not isinstance(item, dict) or (k not in item and k not in defaults)
        )
        raise PatchError(
            f"{spell(path)}: associative list with keys has an element that omits key "
            f'field "{missing}" (and doesn\'t have default value)',
            422,
        )
    if element in seen:
        raise PatchError(f"{spell(path)}: duplicate entries for key {spell((element,))}", 422)
    seen.add(element)


_SERVER_META = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "selfLink",
    "managedFields",
    "clusterName",
)
_STRIP: frozenset[FieldPath] = frozenset(
    {(("f", "apiVersion"),), (("f", "kind"),), (("f", "metadata"),)}
    | {(("f", "metadata"), ("f", m)) for m in _SERVER_META}
)


def _filter(paths: Iterable[FieldPath], ignore: tuple[str, ...]) -> set[FieldPath]:
    return {
        p
        for p in paths
        if p not in _STRIP
        and p[:2] != (("f", "metadata"), ("f", "managedFields"))
        and not (p and p[0][0] == "f" and p[0][1] in ignore)
    }


# (manager, operation, apiVersion for Update or "", subresource)
ManagerId = tuple[str, str, str, str]


@dataclass
class _Entry:
    api_version: str
    time: str | None
    fields: set[FieldPath]


def ensure_valid_managed_fields(value: Any) -> list[str]:
    """Problems with a client-sent ``metadata.managedFields``; empty when it is valid."""
    if value is None:
        return []
    if not isinstance(value, list):
        return ["managedFields must be a list"]
    problems: list[str] = []
    seen: set[ManagerId] = set()
    for i, entry in enumerate(value):
        where = f"managedFields[{i}]"
        if not isinstance(entry, dict):
            problems.append(f"{where} must be an object")
            continue
        op = entry.get("operation")
        if op not in ("Apply", "Update"):
            problems.append(f"{where}.operation must be Apply or Update, not {op!r}")
        if not entry.get("apiVersion"):
            problems.append(f"{where}.apiVersion must not be empty")
        if entry.get("fieldsType") != "FieldsV1":
            problems.append(f"{where}.fieldsType must be FieldsV1")
        for name in ("manager", "apiVersion", "time", "subresource"):
            if name in entry and not isinstance(entry[name], str):
                problems.append(f"{where}.{name} must be a string")
        try:
            decode_fields(entry.get("fieldsV1", {}))
        except ValueError as exc:
            problems.append(f"{where}.fieldsV1: {exc}")
        ident = _ident(entry)
        if ident in seen:
            problems.append(f"{where} duplicates the entry of manager {entry.get('manager')!r}")
        seen.add(ident)
    return problems


def _ident(entry: Mapping[str, Any]) -> ManagerId:
    op = str(entry.get("operation", ""))
    version = str(entry.get("apiVersion", "")) if op == "Update" else ""
    return (str(entry.get("manager", "")), op, version, str(entry.get("subresource", "")))


def _read(obj: Mapping[str, Any] | None) -> dict[ManagerId, _Entry]:
    meta = (obj or {}).get("metadata") or {}
    raw = meta.get("managedFields")
    if not raw or ensure_valid_managed_fields(raw):
        return {}
    return {
        _ident(e): _Entry(
            e.get("apiVersion", ""), e.get("time"), decode_fields(e.get("fieldsV1", {}))
        )
        for e in raw
    }


def _write(obj: dict[str, Any], managers: dict[ManagerId, _Entry]) -> dict[str, Any]:
    entries = []
    for (manager, op, _, sub), e in managers.items():
        if not e.fields:
            continue
        entry: dict[str, Any] = {"manager": manager, "operation": op, "apiVersion": e.api_version}
        if e.time is not None:
            entry["time"] = e.time
        entry["fieldsType"] = "FieldsV1"
        entry["fieldsV1"] = encode_fields(e.fields)
        if sub:
            entry["subresource"] = sub
        entries.append(entry)
    entries.sort(
        key=lambda e: (
            e["operation"],
            e.get("time", ""),
            e["manager"],
            e["apiVersion"],
            e.get("subresource", ""),
        )
    )
    meta = obj.setdefault("metadata", {})
    if entries:
        meta["managedFields"] = entries
    else:
        meta.pop("managedFields", None)
    return obj


def _ident_json(ident: ManagerId) -> str:
    """The manager identifier the apiserver sorts conflicting managers by."""
    names = ("manager", "operation", "apiVersion", "subresource")
    return _dumps_ordered({n: v for n, v in zip(names, ident, strict=True) if v})


def _dumps_ordered(value: dict[str, str]) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _print_manager(ident: ManagerId, entry: _Entry) -> str:
    manager, op, _, sub = ident
    out = json.dumps(manager)
    if sub:
        out += f" with subresource {json.dumps(sub)}"
    if op == "Update":
        out += f" using {entry.api_version}"
    return out


def strip_managed(obj: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``obj`` without ``metadata.managedFields`` (what a GET shows by default)."""
    out = dict(obj)
    if isinstance(out.get("metadata"), dict) and "managedFields" in out["metadata"]:
        out["metadata"] = {k: v for k, v in out["metadata"].items() if k != "managedFields"}
    return out


# --- the two operations -----------------------------------------------------------------


def _compare(
    old: Any, new: Any, lists: ListTypes, ignore: tuple[str, ...]
) -> tuple[set[FieldPath], set[FieldPath]]:
    """(added or modified, removed) paths between two objects."""
    a = _nodes(old or {}, lists)
    b = _nodes(new, lists)
    changed = {p for p, v in b.items() if p not in a or (v is not _NODE and a[p] != v)}
    changed |= {p for p, v in a.items() if p in b and v is not _NODE and b[p] is _NODE}
    return _filter(changed, ignore), _filter(set(a) - set(b), ignore)


def record_update(
    old: dict[str, Any] | None,
    new: dict[str, Any],
    manager: str,
    *,
    api_version: str,
    now: str,
    lists: ListTypes,
    subresource: str = "",
    ignore: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Record a non-apply write of ``new`` over ``old`` by ``manager`` (operation Update).

    The writer takes every field it added or changed away from other managers;
    removed fields leave everyone. Returns a copy of ``new`` with managedFields set.
    ``ignore`` names top-level fields not tracked (``status`` on the main resource
    of a kind with a status subresource).
    """
    result = copy.deepcopy(new)
    sent = (new.get("metadata") or {}).get("managedFields")
    if sent == [{}]:  # the documented way for a client to clear managedFields
        return strip_managed(result)
    managers = _read(new) if sent and not ensure_valid_managed_fields(sent) else _read(old)
    if old is not None and not managers:
        # As the apiserver does: an existing object nobody manages stays
        # untracked by updates until its first apply.
        return strip_managed(result)
    changed, removed = _compare(strip_managed(old or {}), strip_managed(new), lists, ignore)
    for e in managers.values():
        e.fields -= changed | removed
    ident: ManagerId = (manager, "Update", api_version, subresource)
    mine = managers.get(ident)
    if changed:
        fields = (mine.fields if mine else set()) | changed
        managers[ident] = _Entry(api_version, now, fields)
    return _write(result, managers)


def server_side_apply(
    live: dict[str, Any] | None,
    applied: dict[str, Any],
    manager: str,
    *,
    force: bool,
    api_version: str,
    now: str,
    lists: ListTypes,
    subresource: str = "",
    ignore: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Apply configuration ``applied`` as ``manager``; return the new object.

    ``live`` is None for a create. Raises :class:`ApplyConflict` when the apply
    would change fields other managers own and ``force`` is false, and
    :class:`~phalanx.kubeapi.patch.PatchError` (400) when the configuration
    carries ``metadata.managedFields``.
    """
    if (applied.get("metadata") or {}).get("managedFields") is not None:
        raise PatchError("metadata.managedFields must be nil", 400)
    config = copy.deepcopy(applied)
    for name in ignore:
        config.pop(name, None)
    base = copy.deepcopy(live) if live is not None else {}
    if live is not None and not _read(live):
        # An object nobody has managed yet: its current fields become the
        # before-first-apply manager's, so that an apply can conflict with them.
        base = record_update(
            None,
            base,
            "before-first-apply",
            api_version=api_version,
            now=now,
            lists=lists,
            ignore=ignore,
        )
    managers = _read(base)
    ident: ManagerId = (manager, "Apply", "", subresource)
    previous = managers.get(ident)
    fields = _filter(_field_set(config, lists), ignore)
    managers[ident] = _Entry(api_version, now, fields)

    merged = _merge(strip_managed(base), config, lists, ())
    if previous:
        owned: set[FieldPath] = set().union(*(e.fields for e in managers.values()))
        _prune(merged, previous.fields - owned, owned, lists)

    changed, removed = _compare(strip_managed(base), merged, lists, ignore)
    conflicts: list[tuple[ManagerId, FieldPath]] = []
    for other, e in managers.items():
        if other == ident:
            continue
        conflicts += [(other, p) for p in e.fields & changed]
    if conflicts and not force:
        ordered = sorted(conflicts, key=lambda c: (_ident_json(c[0]), spell(c[1])))
        raise ApplyConflict(
            [Conflict(_print_manager(m, managers[m]), spell(p)) for m, p in ordered]
        )
    for other, e in managers.items():
        if other != ident:
            e.fields -= changed | removed
    return _write(merged, managers)


def _merge(live: Any, config: Any, lists: ListTypes, names: tuple[str, ...]) -> Any:
    if not isinstance(config, dict):
        return copy.deepcopy(config)
    out = copy.deepcopy(live) if isinstance(live, dict) else {}
    for key, value in config.items():
        sub = (*names, key)
        if value is None:
            out.pop(key, None)
        elif isinstance(value, list) and isinstance(out.get(key), list):
            out[key] = _merge_list(out[key], value, lists, sub)
        else:
            out[key] = _merge(out.get(key), value, lists, sub)
    return out


def _merge_list(
    live: list[Any], config: list[Any], lists: ListTypes, names: tuple[str, ...]
) -> Any:
    """Merge an associative or set list the way structured-merge-diff orders it.

    Items in both lists come in the applied order; items only in the live list
    keep their place among them; items only in the applied list come where the
    applied list has them.
    """
    lt = lists.get(names)
    if lt.type == "atomic":
        return copy.deepcopy(config)
    lhs = {item_element(item, lt, i): item for i, item in enumerate(live)}
    rhs = {item_element(item, lt, i): item for i, item in enumerate(config)}
    left, right = list(lhs), list(rhs)
    shared = [k for k in right if k in lhs]

    def item(key: Element) -> Any:
        if key not in rhs:
            return copy.deepcopy(lhs[key])
        return _merge(lhs.get(key), rhs[key], lists, names)

    out: list[Any] = []
    li = ri = si = 0
    while li < len(left) or ri < len(right):
        if li < len(left) and ri < len(right):
            if left[li] == right[ri]:
                out.append(item(left[li]))
                li, ri, si = li + 1, ri + 1, si + 1
                continue
            if left[li] in rhs and si < len(shared) and shared[si] != left[li]:
                li += 1  # a shared item whose turn, in the applied order, is later
                continue
        if li < len(left) and left[li] not in rhs:
            out.append(item(left[li]))
            li += 1
        elif ri < len(right):
            out.append(item(right[ri]))
            if si < len(shared) and shared[si] == right[ri]:
                si += 1
            ri += 1
        else:
            li += 1  # a shared item already emitted in the applied order
    return out


def _prune(
    obj: dict[str, Any], gone: set[FieldPath], owned: set[FieldPath], lists: ListTypes
) -> None:
    """Remove fields the applier dropped that nobody else owns, then emptied parents."""
    removable = {p for p in gone if not any(o[: len(p)] == p for o in owned)}
    # Remove whole subtrees at once: taking a key field out of a list item first
    # would leave the item unaddressable.
    tops = [p for p in removable if not any(p[:n] in removable for n in range(1, len(p)))]
    for path in sorted(tops, key=len, reverse=True):
        _remove(obj, path, lists)
        for cut in range(len(path) - 1, 1, -1):
            parent = path[:cut]
            if parent[-1][0] != "f" or _lookup(obj, parent, lists) not in ({}, []):
                break
            if any(o[:cut] == parent for o in owned):
                break
            _remove(obj, parent, lists)


def _locate(container: Any, element: Element, lists: ListTypes, names: tuple[str, ...]) -> Any:
    """The dict key or list index ``element`` names within ``container``, or None."""
    kind, raw = element
    if kind == "f":
        return raw if isinstance(container, dict) and raw in container else None
    if not isinstance(container, list):
        return None
    lt = lists.get(names)
    for i, item in enumerate(container):
        if item_element(item, lt, i) == element:
            return i
    return None


def _lookup(obj: Any, path: FieldPath, lists: ListTypes) -> Any:
    node = obj
    for n, element in enumerate(path):
        at = _locate(node, element, lists, field_names(path[:n]))
        if at is None:
            return None
        node = node[at]
    return node


def _remove(obj: Any, path: FieldPath, lists: ListTypes) -> None:
    parent = _lookup(obj, path[:-1], lists) if len(path) > 1 else obj
    if parent is None:
        return
    at = _locate(parent, path[-1], lists, field_names(path[:-1]))
    if at is not None:
        del parent[at]
