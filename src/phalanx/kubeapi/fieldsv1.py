"""Field paths and their FieldsV1 encoding, as ``metadata.managedFields`` spells them.

A field path is a tuple of elements: ``("f", name)`` for a map key, ``("k", json)``
for an item of an associative list, named by its key fields as a JSON object
with sorted keys, ``("v", json)`` for an item of a set list, and ``("i", index)``
for an item of a list that has neither. FieldsV1 nests the elements as
``"<kind>:<raw>"`` keys; an empty object marks a member, ``".": {}`` a member
that also has members beneath it. Children are ordered as structured-merge-diff
orders path elements (fields by name, then keys, values, indexes).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from phalanx.kubeapi.listtypes import ListType

# One step of a field path: ("f", name), ("k", key json), ("v", value json) or ("i", index).
Element = tuple[str, str]
FieldPath = tuple[Element, ...]

# --- field paths ------------------------------------------------------------------


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def field_names(path: FieldPath) -> tuple[str, ...]:
    return tuple(name for kind, name in path if kind == "f")


def item_element(item: Any, lt: ListType, index: int) -> Element:
    if lt.type == "set":
        return ("v", dumps(item))
    if lt.type == "map" and isinstance(item, dict):
        key = lt.key_of(item)
        return ("k", dumps(key if key is not None else {k: item[k] for k in lt.keys if k in item}))
    return ("i", str(index))


def spell(path: FieldPath) -> str:
    """A path as the apiserver prints it in a conflict."""
    out = []
    for kind, raw in path:
        if kind == "f":
            out.append("." + raw)
        elif kind == "k":
            keys = json.loads(raw)
            out.append("[" + ",".join(f"{k}={dumps(v)}" for k, v in keys.items()) + "]")
        elif kind == "v":
            out.append(f"[={raw}]")
        else:
            out.append(f"[{raw}]")
    return "".join(out)


# --- FieldsV1 -----------------------------------------------------------------------


def encode_fields(paths: Iterable[FieldPath]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    members: set[FieldPath] = set(paths)
    for p in members:
        node = tree
        for kind, raw in p:
            node = node.setdefault(f"{kind}:{raw}", {})
    return _finish(tree, (), members)


def _finish(tree: dict[str, Any], path: FieldPath, members: set[FieldPath]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if path in members and tree:
        out["."] = {}
    for key in sorted(tree, key=_element_order):
        kind, raw = key.split(":", 1)
        out[key] = _finish(tree[key], (*path, (kind, raw)), members)
    return out


def _value_order(value: Any) -> tuple[int, Any]:
    if isinstance(value, bool) or value is None:
        return (0, str(value))
    if isinstance(value, int | float):
        return (1, value)
    return (2, value) if isinstance(value, str) else (3, dumps(value))


def _element_order(key: str) -> tuple[Any, ...]:
    """structured-merge-diff's order: fields by name, then keys, values, indexes."""
    kind, _, raw = key.partition(":")
    if kind == "k":
        return (1, [(name, _value_order(v)) for name, v in json.loads(raw).items()])
    if kind == "v":
        return (2, _value_order(json.loads(raw)))
    if kind == "i":
        return (3, int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 18 else raw)
    return (0, raw)


def decode_fields(tree: Any, path: FieldPath = ()) -> set[FieldPath]:
    if not isinstance(tree, dict):
        raise ValueError(f"fieldsV1 at {spell(path) or '.'} is not an object")
    out: set[FieldPath] = set()
    for key, child in tree.items():
        if key == ".":
            out.add(path)
            continue
        kind, sep, raw = key.partition(":")
        if not sep or kind not in ("f", "k", "v", "i"):
            raise ValueError(f"unknown fieldsV1 key {key!r}")
        if kind in ("k", "v"):
            json.loads(raw)
        sub = (*path, (kind, raw))
        out |= decode_fields(child, sub) if child else {sub}
    return out


# --- managers -------------------------------------------------------------------------
