"""``phalanx export``: the whole configuration as Kueue manifests, ready to apply elsewhere.

The objects come from the server as ``get -o yaml`` shows them; export keeps
what an apply needs and drops live state (``status``, except a Node's
``capacity``). Documents are in the order an apply needs them (flavors and
topologies, cohorts, ClusterQueues, LocalQueues, tenants, priority classes,
nodes) and by name within a kind, so exporting the same configuration twice
gives the same bytes, and ``export | apply`` on a fresh server followed by
another export reproduces it exactly.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import yaml

from phalanx.model.kinds import KINDS

__all__ = ["EXPORT_KINDS", "dump_documents", "export_documents"]

EXPORT_KINDS: tuple[str, ...] = KINDS
"""Canonical kinds, in apply order."""


def _name_key(doc: Mapping[str, Any]) -> tuple[str, str]:
    metadata = doc.get("metadata") or {}
    return str(metadata.get("namespace", "")), str(metadata.get("name", ""))


def _clean(doc: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in doc.items() if k != "status"}
    if doc.get("kind") == "Node" and isinstance(doc.get("status"), Mapping):
        capacity = doc["status"].get("capacity")
        if capacity is not None:
            out["status"] = {"capacity": capacity}
    return out


def export_documents(
    fetch: Callable[[str], Iterable[Mapping[str, Any]]], kinds: Sequence[str] = EXPORT_KINDS
) -> list[dict[str, Any]]:
    """Every object of ``kinds`` (``fetch(kind)`` lists them) as an appliable manifest."""
    docs: list[dict[str, Any]] = []
    for kind in sorted(kinds, key=EXPORT_KINDS.index):
        docs.extend(sorted((_clean(d) for d in fetch(kind)), key=_name_key))
    return docs


def dump_documents(docs: list[dict[str, Any]], fmt: str = "yaml") -> str:
    """Multi-document YAML (``---`` between documents), or a JSON ``List``."""
    if fmt == "json":
        return json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}, indent=2) + "\n"
    if not docs:
        return ""
    return str(yaml.safe_dump_all(docs, sort_keys=False, explicit_start=True))
