"""Kubernetes object metadata for phalanx's jobs and objects.

A stored object's ``metadata`` is made of what its model keeps (name, namespace,
a Node's labels, a ClusterQueue's annotations, a job's manifest metadata), what
the Kubernetes API stored beside it (``object_meta``: labels and annotations
set through kubectl, ``managedFields``, the uid of an object created here),
and the store's bookkeeping: ``resourceVersion`` is the store revision of the
last change, ``creationTimestamp`` the creation time, ``uid`` stable for the
object's life (derived from its kind, name and creation time when not stored).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping
from typing import Any

__all__ = [
    "KUBE_META_KEYS",
    "compose",
    "rfc3339",
    "stored_meta",
    "uid_for",
]

KUBE_META_KEYS = ("labels", "annotations", "managedFields", "finalizers", "ownerReferences")
"""The metadata fields the Kubernetes API stores beside a model."""

_NAMESPACE = uuid.UUID("5e3a1b1e-7068-616c-616e-780000000000")


def rfc3339(epoch: float) -> str:
    """Kubernetes' time format: whole seconds, UTC, ``Z``."""
    return dt.datetime.fromtimestamp(int(epoch), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def uid_for(kind: str, key: str, created: float) -> str:
    """A stable uid for an object that was not created through the Kubernetes API."""
    return str(uuid.uuid5(_NAMESPACE, f"{kind}/{key}/{created!r}"))


def compose(
    base: Mapping[str, Any],
    stored: Mapping[str, Any] | None,
    *,
    kind: str,
    key: str,
    created: float,
    revision: int,
    generation: int | None = None,
    model_owned: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The full ``metadata`` of an object.

    ``base`` is the metadata its model gives (name, namespace, and the label or
    annotation maps named in ``model_owned``, which the model decides: the stored
    copy is overlaid first, the model's on top). ``stored`` is its ``object_meta``."""
    meta: dict[str, Any] = {"name": base["name"]}
    if base.get("namespace"):
        meta["namespace"] = base["namespace"]
    stored = stored or {}
    meta["uid"] = str(stored.get("uid") or uid_for(kind, key, created))
    meta["resourceVersion"] = str(revision)
    if generation is not None:
        meta["generation"] = generation
    meta["creationTimestamp"] = rfc3339(created)
    for field in ("labels", "annotations"):
        value: dict[str, Any] = {}
        if field in stored:
            value.update(stored[field] or {})
            if field in model_owned:
                value.update(base.get(field) or {})
        else:
            value.update(base.get(field) or {})
        if value:
            meta[field] = value
    for field in ("ownerReferences", "finalizers"):
        value_list = stored.get(field) if field in stored else base.get(field)
        if value_list:
            meta[field] = list(value_list)
    if stored.get("managedFields"):
        meta["managedFields"] = list(stored["managedFields"])
    return meta


def stored_meta(metadata: Mapping[str, Any], uid: str | None = None) -> dict[str, Any]:
    """What of a written object's ``metadata`` the store keeps beside its model."""
    out: dict[str, Any] = {k: metadata[k] for k in KUBE_META_KEYS if metadata.get(k) is not None}
    out.setdefault("labels", {})
    out.setdefault("annotations", {})
    if uid is not None:
        out["uid"] = uid
    return out
