"""The configuration objects the control plane holds, and who refers to whom.

The engine has its own view of these objects; the registry is the control
plane's: it resolves a submission's queue, and it refuses to delete an object
another one still names (a flavor a ClusterQueue uses, a ClusterQueue a
LocalQueue points at), as Kueue's finalizers do.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from phalanx.model import LocalQueue
from phalanx.model.kinds import KINDS, MODEL_BY_KIND

__all__ = ["KIND_ORDER", "MODEL_BY_KIND", "Registry", "object_key"]

KIND_ORDER = KINDS
"""Kinds in the order recovery applies them: what is referred to comes first."""
_KIND_BY_MODEL = {model: kind for kind, model in MODEL_BY_KIND.items()}


def object_key(obj: Any) -> tuple[str, str]:
    """``(kind, name)``; LocalQueues are named ``namespace/name``."""
    kind = _KIND_BY_MODEL.get(type(obj))
    if kind is None:
        raise TypeError(f"not a configuration object: {type(obj).__name__}")
    if isinstance(obj, LocalQueue):
        return kind, f"{obj.namespace}/{obj.name}"
    return kind, obj.name


class Registry:
    """Objects by kind and name."""

    def __init__(self) -> None:
        self._objects: dict[str, dict[str, Any]] = {kind: {} for kind in MODEL_BY_KIND}

    def put(self, kind: str, name: str, obj: Any) -> None:
        self._objects[kind][name] = obj

    def remove(self, kind: str, name: str) -> None:
        self._objects.get(kind, {}).pop(name, None)

    def get(self, kind: str, name: str) -> Any | None:
        return self._objects.get(kind, {}).get(name)

    def all(self, kind: str) -> dict[str, Any]:
        return self._objects.get(kind, {})

    def local_queues_of(self, namespace: str) -> list[LocalQueue]:
        prefix = f"{namespace}/"
        return [lq for key, lq in self._objects["LocalQueue"].items() if key.startswith(prefix)]

    def with_objects(self, objects: Iterable[Any]) -> Registry:
        """A copy of this registry with ``objects`` put in (for checking an apply)."""
        copy = Registry()
        copy._objects = {kind: dict(objs) for kind, objs in self._objects.items()}
        for obj in objects:
            kind, name = object_key(obj)
            copy.put(kind, name, obj)
        return copy

    def check_apply(self, objects: Iterable[Any]) -> None:
        """Every object is a configuration object, and no update changes an immutable field."""
        from phalanx.dialects.kueue.immutable import check_update, format_problems
        from phalanx.errors import Invalid

        problems: list[str] = []
        batch: dict[tuple[str, str], Any] = {}
        for obj in objects:
            key = object_key(obj)
            old = batch.get(key, self.get(*key))
            if old is not None:
                problems += format_problems(*key, check_update(key[0], old, obj))
            batch[key] = obj
        if problems:
            raise Invalid("\n".join(problems))

    def users_of(self, kind: str, name: str) -> list[str]:
        """The objects that refer to ``kind/name`` (an object in use is not deleted)."""
        users: list[str] = []
        if kind == "ResourceFlavor":
            for key, obj in [*self.all("ClusterQueue").items(), *self.all("Cohort").items()]:
                if any(f.name == name for g in obj.resource_groups for f in g.flavors):
                    users.append(f"{type(obj).__name__}/{key}")
        elif kind == "Cohort":
            for key, cq in self.all("ClusterQueue").items():
                if cq.cohort_name == name:
                    users.append(f"ClusterQueue/{key}")
            for key, cohort in self.all("Cohort").items():
                if cohort.parent_name == name:
                    users.append(f"Cohort/{key}")
        elif kind == "ClusterQueue":
            for key, lq in self.all("LocalQueue").items():
                if lq.cluster_queue == name:
                    users.append(f"LocalQueue/{key}")
        elif kind == "Topology":
            for key, flavor in self.all("ResourceFlavor").items():
                if flavor.topology_name == name:
                    users.append(f"ResourceFlavor/{key}")
        return users
