"""Request dependencies: the control plane behind the app and the caller's principal."""

from __future__ import annotations

from typing import Annotated, cast

from fastapi import Depends, Request

from phalanx.api.plane import ControlPlane
from phalanx.auth import Principal
from phalanx.errors import Invalid, Unauthorized

__all__ = ["MAX_IDS", "Caller", "Plane", "get_plane", "get_principal", "job_id", "job_ids"]

MAX_IDS = 10_000
"""Job ids one request may name in ``?id=``."""


def job_ids(values: list[str]) -> list[int] | None:
    """The job ids of a repeatable, comma-separated ``id`` query parameter (None: none)."""
    ids: list[int] = []
    for part in (p.strip() for value in values for p in value.split(",")):
        if not part:
            continue
        ids.append(job_id(part))
    if len(ids) > MAX_IDS:
        raise Invalid(f"id (query): at most {MAX_IDS} job ids per request")
    return ids or None


def job_id(text: str) -> int:
    """One job id of an ``id`` query parameter: ASCII digits, below 2**63."""
    if not (text.isascii() and text.isdigit() and len(text) <= 19 and int(text) < 2**63):
        raise Invalid(f"id (query): {text!r} is not a job id")
    return int(text)


def get_plane(request: Request) -> ControlPlane:
    return cast(ControlPlane, request.app.state.plane)


def get_principal(request: Request) -> Principal:
    """The principal of the request's ``Authorization: Bearer <token>``; 401 without one."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized(
            "this API needs a token: send 'Authorization: Bearer <token>' "
            "(the CLI reads PHALANX_TOKEN or the state directory's client.json)"
        )
    return get_plane(request).authenticate(token.strip())


Plane = Annotated[ControlPlane, Depends(get_plane)]
Caller = Annotated[Principal, Depends(get_principal)]
