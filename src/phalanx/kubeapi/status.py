"""Errors as a Kubernetes API server gives them: ``Status`` objects with reason and code.

:class:`KubeError` carries everything a ``Status`` says; :func:`from_phalanx` turns
the control plane's errors into one, so that every failure a client sees is a
``Status`` (never a 500 for bad input: an unexpected exception is an
``InternalError`` with its message, and logged).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from phalanx.errors import (
    Conflict,
    Forbidden,
    Invalid,
    NotFound,
    NotLeader,
    PhalanxError,
    Unauthorized,
    Unavailable,
)

__all__ = ["KubeError", "Target", "from_phalanx", "status_body"]


@dataclass(frozen=True)
class Target:
    """What a request was about, for a Status' message and ``details``."""

    group: str
    plural: str
    kind: str
    name: str = ""

    @property
    def qualified(self) -> str:
        """``clusterqueues.kueue.x-k8s.io`` (``pods`` for the core group)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


@dataclass
class KubeError(Exception):
    """A failed request, as its ``Status``."""

    code: int
    reason: str
    message: str
    target: Target | None = None
    causes: list[dict[str, str]] = field(default_factory=list)
    retry_after: int | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.message

    @classmethod
    def not_found(cls, target: Target) -> KubeError:
        return cls(404, "NotFound", f'{target.qualified} "{target.name}" not found', target)

    @classmethod
    def already_exists(cls, target: Target) -> KubeError:
        message = f'{target.qualified} "{target.name}" already exists'
        return cls(409, "AlreadyExists", message, target)

    @classmethod
    def conflict(cls, target: Target, why: str) -> KubeError:
        message = f'Operation cannot be fulfilled on {target.qualified} "{target.name}": {why}'
        return cls(409, "Conflict", message, target)

    @classmethod
    def forbidden(cls, user: str, verb: str, target: Target, namespace: str) -> KubeError:
        """The RBAC wording: ``pods "x" is forbidden: User "bob" cannot get resource
        "pods" in API group "" in the namespace "team-b"``."""
        scope = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
        what = f'{target.qualified} "{target.name}"' if target.name else target.qualified
        message = (
            f'{what} is forbidden: User "{user}" cannot {verb} resource "{target.plural}" '
            f'in API group "{target.group}"{scope}'
        )
        return cls(403, "Forbidden", message, target)

    @classmethod
    def bad_request(cls, message: str) -> KubeError:
        return cls(400, "BadRequest", message)

    @classmethod
    def invalid(cls, target: Target, causes: list[tuple[str, str]]) -> KubeError:
        """``Kind.group "name" is invalid: field: message, ...`` with one cause per problem."""
        kind = f"{target.kind}.{target.group}" if target.group else target.kind
        parts = [f"{f}: {m}" if f else m for f, m in causes]
        said = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
        return cls(
            422,
            "Invalid",
            f'{kind} "{target.name}" is invalid: {said}',
            target,
            [{"reason": "FieldValueInvalid", "message": m, "field": f} for f, m in causes],
        )

    @classmethod
    def method_not_allowed(cls, what: str) -> KubeError:
        message = f"the server does not allow this method on the requested resource{what}"
        return cls(405, "MethodNotAllowed", message)

    def body(self) -> dict[str, Any]:
        return status_body(self)


def status_body(error: KubeError) -> dict[str, Any]:
    """The ``Status`` object of a failure."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": error.message,
        "reason": error.reason,
        "code": error.code,
    }
    details: dict[str, Any] = {}
    if error.target is not None:
        if error.target.name:
            details["name"] = error.target.name
        if error.target.group:
            details["group"] = error.target.group
        details["kind"] = error.target.plural
    if error.causes:
        details["causes"] = error.causes
    if error.retry_after is not None:
        details["retryAfterSeconds"] = error.retry_after
    if details:
        body["details"] = details
    return body


def from_phalanx(exc: PhalanxError, target: Target | None) -> KubeError:
    """The Status of a control-plane error about ``target``."""
    detail = exc.detail
    if isinstance(exc, NotFound):
        return KubeError(404, "NotFound", detail, target)
    if isinstance(exc, Invalid):
        if target is None:
            return KubeError(422, "Invalid", detail)
        return KubeError.invalid(target, [("", line) for line in detail.splitlines() if line])
    if isinstance(exc, Conflict):
        return KubeError(409, "Conflict", detail, target)
    if isinstance(exc, Forbidden):
        return KubeError(403, "Forbidden", detail, target)
    if isinstance(exc, Unauthorized):
        return KubeError(401, "Unauthorized", "Unauthorized")
    if isinstance(exc, NotLeader | Unavailable):
        return KubeError(503, "ServiceUnavailable", detail, target, retry_after=1)
    reason = "BadRequest" if exc.status == 400 else "InternalError"
    return KubeError(exc.status, reason, detail, target)
