"""Errors the control plane raises and the API turns into ``{"error", "detail"}`` bodies.

Each carries a short machine-readable ``error`` code, a sentence ``detail``
that names the field, file or object at fault and what is expected, and the
HTTP status the API answers with.
"""

from __future__ import annotations

__all__ = [
    "Conflict",
    "Forbidden",
    "Invalid",
    "NotFound",
    "NotLeader",
    "PhalanxError",
    "Unauthorized",
    "Unavailable",
]


class PhalanxError(Exception):
    """Base of every error phalanx reports to a user."""

    status = 400
    error = "BadRequest"

    def __init__(self, detail: str, *, error: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        if error is not None:
            self.error = error

    def to_dict(self) -> dict[str, str]:
        return {"error": self.error, "detail": self.detail}


class Invalid(PhalanxError):
    """The input is malformed or breaks a rule; nothing was written."""

    status = 422
    error = "Invalid"


class NotFound(PhalanxError):
    status = 404
    error = "NotFound"


class Conflict(PhalanxError):
    status = 409
    error = "Conflict"


class Unauthorized(PhalanxError):
    status = 401
    error = "Unauthorized"


class Forbidden(PhalanxError):
    status = 403
    error = "Forbidden"


class Unavailable(PhalanxError):
    """The control plane could not commit (database down, shutting down)."""

    status = 503
    error = "Unavailable"


class NotLeader(Unavailable):
    """This server stands by: another one leads (``leader``: its URL, when known).

    The API forwards such a request to the leader (:mod:`phalanx.api.forward`).
    """

    error = "NotLeader"

    def __init__(self, detail: str, *, leader: str | None) -> None:
        super().__init__(detail)
        self.leader = leader
