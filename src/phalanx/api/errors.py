"""Every failure as ``{"error", "detail"}`` JSON: phalanx errors, bad requests, genuine bugs.

Bad input is always a 4xx naming the field path (``jobs[3].podSets[0].count:
...``, one line per problem); only a bug in phalanx itself answers 500, and
then without a traceback (that goes to the server log).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from phalanx.errors import NotLeader, PhalanxError

__all__ = [
    "ERROR_STATUSES",
    "LEADER_HEADER",
    "bug_response",
    "document_errors",
    "error_response",
    "field_path",
    "format_errors",
    "install_error_handlers",
    "phalanx_error_response",
]

log = logging.getLogger("phalanx.api")

LEADER_HEADER = "X-Phalanx-Leader"
"""On a standby's 503 answer: the leader's URL (empty while none leads)."""

_SOURCES = {"body", "query", "path", "header", "cookie"}
_HTTP_ERRORS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    413: "TooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
}


def error_response(status: int, error: str, detail: str, **headers: str) -> JSONResponse:
    return JSONResponse({"error": error, "detail": detail}, status_code=status, headers=headers)


def field_path(loc: Sequence[Any]) -> str:
    """``("body", "jobs", 3, "podSets")`` -> ``jobs[3].podSets``."""
    parts = list(loc)
    where = ""
    if parts and parts[0] in _SOURCES:
        where = str(parts.pop(0))
    path = ""
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
        elif "[" in str(part):  # pydantic's validator/union tags, not fields
            continue
        else:
            path += f".{part}" if path else str(part)
    if where in ("query", "path", "header") and path:
        return f"{path} ({where})"
    return path or where or "request"


def _message(error: dict[str, Any]) -> str:
    if error.get("type") == "missing" and tuple(error.get("loc", ())) == ("body",):
        return "a JSON request body is required"
    msg = str(error.get("msg", "invalid"))
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix) :]
    return msg


def format_errors(errors: Iterable[dict[str, Any]], prefix: Sequence[Any] = ()) -> str:
    """pydantic/FastAPI errors as one ``path: message`` line per problem."""
    lines = []
    for error in errors:
        lines.append(f"{field_path([*prefix, *error.get('loc', ())])}: {_message(error)}")
    return "\n".join(dict.fromkeys(lines)) or "invalid request"


def _validation_handler(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    bad_json = [e for e in errors if e.get("type") == "json_invalid"]
    if bad_json:
        ctx = bad_json[0].get("ctx") or {}
        reason = ctx.get("error", "malformed")
        position = bad_json[0].get("loc", ("body", "?"))[-1]
        return error_response(
            400, "BadRequest", f"the request body is not valid JSON: {reason} at {position}"
        )
    return error_response(422, "Invalid", format_errors(errors))


def _pydantic_handler(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ValidationError)
    return error_response(422, "Invalid", format_errors(exc.errors()))  # type: ignore[arg-type]


def phalanx_error_response(exc: PhalanxError) -> JSONResponse:
    """The answer to a :class:`PhalanxError` (a standby's ``NotLeader`` with the leader)."""
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else {}
    if isinstance(exc, NotLeader):
        # The forwarding middleware (phalanx.api.forward) sends the request on to it.
        headers = {LEADER_HEADER: exc.leader or "", "Retry-After": "1"}
    return error_response(exc.status, exc.error, exc.detail, **headers)


def _phalanx_handler(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, PhalanxError)
    return phalanx_error_response(exc)


def _http_handler(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    status = exc.status_code
    if status == 404 and exc.detail == "Not Found":
        detail = f"no such API path: {request.method} {request.url.path}"
    elif status == 405:
        detail = f"{request.method} is not allowed on {request.url.path}"
    else:
        detail = str(exc.detail)
    return error_response(
        status, _HTTP_ERRORS.get(status, "Error"), detail, **dict(exc.headers or {})
    )


def _store_down_handler(request: Request, exc: Exception) -> JSONResponse:
    """The database is unreachable (restarting, network): a 503 to retry, not a bug."""
    log.warning("store unreachable answering %s %s: %s", request.method, request.url.path, exc)
    return error_response(
        503,
        "Unavailable",
        f"the store is unreachable ({type(exc).__name__}); nothing was applied: try again",
        **{"Retry-After": "1"},
    )


def bug_response(exc: Exception) -> JSONResponse:
    """The answer to a bug in phalanx: 500, no traceback (the caller logs it)."""
    return error_response(
        500, "Internal", f"internal error ({type(exc).__name__}); the server log has the details"
    )


def _bug_handler(request: Request, exc: Exception) -> JSONResponse:
    log.exception("internal error answering %s %s", request.method, request.url.path)
    return bug_response(exc)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _validation_handler)
    app.add_exception_handler(ValidationError, _pydantic_handler)
    app.add_exception_handler(PhalanxError, _phalanx_handler)
    app.add_exception_handler(StarletteHTTPException, _http_handler)
    from sqlalchemy.exc import DisconnectionError, OperationalError

    app.add_exception_handler(OperationalError, _store_down_handler)
    app.add_exception_handler(DisconnectionError, _store_down_handler)
    app.add_exception_handler(Exception, _bug_handler)


ERROR_STATUSES = {
    "400": "The request is malformed (not JSON, a bad parameter).",
    "401": "No token, or a token that is unknown, revoked or expired.",
    "403": "The token may not do this.",
    "404": "No such object, or one the token may not see.",
    "409": "It conflicts with the current state.",
    "413": "The request is too large.",
    "422": "Invalid input: ``detail`` names each bad field, one line per problem.",
    "429": "Over the request-rate limit: retry after ``Retry-After`` seconds.",
    "503": "Not ready, stopping, the store is unreachable, or (``NotLeader``) no server "
    "leads just now: nothing was applied.",
}
"""The failures every operation may answer, each with the ``{"error", "detail"}`` body."""


def document_errors(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` (an OpenAPI document) with phalanx's error body declared for every
    failure status of every operation, in place of FastAPI's default 422 schema."""
    schemas = spec.setdefault("components", {}).setdefault("schemas", {})
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    schemas["Error"] = {
        "type": "object",
        "title": "Error",
        "required": ["error", "detail"],
        "properties": {
            "error": {"type": "string", "description": "the kind (Invalid, NotFound, ...)"},
            "detail": {"type": "string", "description": "what is wrong, in words"},
        },
    }
    body = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for path_item in spec.get("paths", {}).values():
        for operation in path_item.values():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            responses = operation["responses"]
            for status, description in ERROR_STATUSES.items():
                responses[status] = {"description": description, "content": body}
    return spec
