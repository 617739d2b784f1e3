"""``kubectl auth whoami`` and ``kubectl auth can-i``: SelfSubjectReview and
SelfSubjectAccessReview, answered from the caller's token and :mod:`.authz`."""

from __future__ import annotations

from typing import Any

from phalanx.kubeapi import resources
from phalanx.kubeapi.authz import allowed
from phalanx.kubeapi.status import KubeError
from phalanx.kubeapi.storage import Ctx, Storage

__all__ = ["ReviewStorage"]


class ReviewStorage(Storage):
    """Create-only: the answer is the created object's ``status``."""

    def create(
        self, ctx: Ctx, namespace: str | None, obj: dict[str, Any], *, dry_run: bool
    ) -> dict[str, Any]:
        p = ctx.principal
        r = ctx.resource
        out: dict[str, Any] = {
            "kind": r.kind,
            "apiVersion": r.api_version,
            "metadata": {"creationTimestamp": None},
        }
        if r.kind == "SelfSubjectReview":
            groups = ["system:authenticated", *(f"phalanx:tenant:{t}" for t in sorted(p.tenants))]
            if p.admin:
                groups.insert(0, "system:masters")
            out["status"] = {"userInfo": {"username": p.user, "groups": groups}}
            return out
        spec = obj.get("spec") or {}
        out["spec"] = spec
        attrs = spec.get("resourceAttributes")
        if not isinstance(attrs, dict):
            if isinstance(spec.get("nonResourceAttributes"), dict):
                out["status"] = {"allowed": True, "reason": "discovery is open to every user"}
                return out
            raise KubeError.invalid(
                ctx.target(), [("spec.resourceAttributes", "Required value: give the resource")]
            )
        group = str(attrs.get("group") or "")
        plural = str(attrs.get("resource") or "")
        verb = str(attrs.get("verb") or "")
        target = _find(group, plural, str(attrs.get("version") or ""))
        ok, why = (
            allowed(
                p,
                verb,
                target,
                str(attrs.get("namespace") or ""),
                str(attrs.get("subresource") or ""),
            )
            if target is not None or plural == "*"
            else (p.admin, "the admin may do everything" if p.admin else f"no resource {plural}")
        )
        status: dict[str, Any] = {"allowed": ok, "reason": why}
        if not ok:
            status["denied"] = False
        out["status"] = status
        return out


def _find(group: str, plural: str, version: str) -> resources.Resource | None:
    for r in resources.RESOURCES:
        if r.group == group and r.plural == plural and (not version or r.version == version):
            return r
    return None
