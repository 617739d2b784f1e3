"""What every kind's storage offers the handlers, and the request context they share.

A storage serves one kind (in each version the kind is served in): it lists,
reads, creates, replaces and deletes objects of that kind as the caller may see
and change them, and turns the store's changes into watch events. The generic
verbs (patch, server-side apply, dry run, preconditions) are the handlers' work,
built on these.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from phalanx.api.plane import ControlPlane
from phalanx.auth import Principal
from phalanx.kubeapi.resources import Resource
from phalanx.kubeapi.status import KubeError, Target
from phalanx.store import JobRow, ObjectRow
from phalanx.store.records import TombstoneRow

__all__ = ["Change", "Ctx", "Storage", "Unsupported"]


@dataclass
class Ctx:
    """One request: the control plane, who calls, when, and which resource version."""

    plane: ControlPlane
    principal: Principal
    now: float
    resource: Resource
    warnings: list[str] = field(default_factory=list)
    watch_state: dict[str, Any] = field(default_factory=dict)
    """What a storage remembers for one request: a watch keeps its ``Ctx`` from its
    first list to its end (the Events it has sent, :mod:`.events`)."""

    def target(self, name: str = "") -> Target:
        r = self.resource
        return Target(r.group, r.plural, r.kind, name)


@dataclass(frozen=True)
class Change:
    """A watch event a storage derived from the store's changes."""

    type: str
    """``MODIFIED`` (the handler makes it ``ADDED`` for an object the watch has not
    seen) or ``DELETED``."""
    object: dict[str, Any]
    created: int = 0
    """The store revision that created the object (0: not known): a watch resumed from
    before it reports the object ADDED."""


class Unsupported(KubeError):
    """A verb this kind does not serve."""


class Storage:
    """The base: every verb refused; a kind's storage overrides what it serves."""

    field_selectors: tuple[str, ...] = ("metadata.name", "metadata.namespace")
    tracks_creation = False
    """Whether its changes say the revision that created each object (:attr:`Change.created`):
    then a watch resumed from a revision needs no list of what exists to tell ADDED
    from MODIFIED."""

    def items(self, ctx: Ctx, namespace: str | None) -> list[dict[str, Any]]:
        raise KubeError.method_not_allowed("")

    def get(self, ctx: Ctx, namespace: str | None, name: str) -> dict[str, Any]:
        for obj in self.items(ctx, namespace):
            if obj["metadata"]["name"] == name:
                return obj
        raise KubeError.not_found(ctx.target(name))

    def create(
        self, ctx: Ctx, namespace: str | None, obj: dict[str, Any], *, dry_run: bool
    ) -> dict[str, Any]:
        raise KubeError.method_not_allowed("")

    def replace(
        self,
        ctx: Ctx,
        namespace: str | None,
        name: str,
        obj: dict[str, Any],
        *,
        dry_run: bool,
        subresource: str = "",
    ) -> dict[str, Any]:
        raise KubeError.method_not_allowed("")

    def delete(
        self, ctx: Ctx, namespace: str | None, name: str, *, dry_run: bool
    ) -> dict[str, Any]:
        raise KubeError.method_not_allowed("")

    def changes(
        self,
        ctx: Ctx,
        jobs: Sequence[JobRow],
        objects: Sequence[ObjectRow],
        gone: Sequence[TombstoneRow],
    ) -> list[Change]:
        """The watch events of a batch of store changes (every visible object they touch)."""
        return []

    def touched_by(
        self, jobs: Sequence[JobRow], objects: Sequence[ObjectRow], gone: Sequence[TombstoneRow]
    ) -> bool:
        """Whether a batch of changes may concern this kind (cheap; before :meth:`changes`)."""
        return bool(jobs or objects or gone)
