"""Dashboard sign-in: the API's bearer token, kept in a cookie, and CSRF tokens for forms.

A user signs in by pasting a token (the same one the CLI uses); the server
checks it exactly as the API does and keeps it in an ``HttpOnly``,
``SameSite=Strict`` cookie, so every page and fragment is authorised by the
same tokens and tenant rules as ``/api/v1``. Forms that change something
(cancel, sign out) also carry a CSRF token derived from the session's token,
checked in constant time.
"""

from __future__ import annotations

import hashlib
import hmac

from fastapi import Request, Response

from phalanx.auth import Principal, hash_token
from phalanx.errors import Forbidden, NotFound, Unauthorized

__all__ = ["COOKIE", "csrf_token", "principal_of", "sign_in", "sign_out", "token_of"]

COOKIE = "phalanx_session"
MAX_AGE_S = 12 * 3600


def token_of(request: Request) -> str | None:
    value = request.cookies.get(COOKIE, "").strip()
    return value or None


def principal_of(request: Request) -> Principal | None:
    """Who the session cookie stands for; None when there is none or it no longer works
    (revoked, expired)."""
    token = token_of(request)
    if token is None:
        return None
    try:
        principal: Principal = request.app.state.plane.authenticate(token)
    except (Unauthorized, Forbidden, NotFound):
        return None
    return principal


def sign_in(request: Request, response: Response, token: str) -> None:
    response.set_cookie(
        COOKIE,
        token,
        max_age=MAX_AGE_S,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )


def sign_out(response: Response) -> None:
    response.delete_cookie(COOKIE, path="/")


def csrf_token(token: str) -> str:
    """The CSRF token of a session: a keyed hash of its bearer token."""
    return hmac.new(hash_token(token).encode(), b"phalanx-csrf", hashlib.sha256).hexdigest()


def csrf_ok(request: Request, given: str) -> bool:
    token = token_of(request)
    return token is not None and hmac.compare_digest(csrf_token(token), given or "")
