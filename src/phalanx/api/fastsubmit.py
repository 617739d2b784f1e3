"""Submissions on the event loop: ``POST /api/v1/jobs`` and ``/api/v1/jobs/batch`` without
FastAPI's routing, dependency injection and thread pool.

Submitting is what scripts do in bursts (``sbatch`` in a loop, sixteen submitters at
once), and each submit only queues a command for the control loop and waits for its
commit. FastAPI would route the request, solve its dependencies and then park a pool
thread on that wait; here the command goes onto the loop's inbox from the event loop
and the answer comes back through an ``asyncio`` future, so a submit costs its parse,
its validation and its share of the commit.

Only the requests this layer fully understands take it: a JSON body that validates,
from a token the control plane has already authenticated (:meth:`cached_principal`).
Any other request, a first request with a new token or an invalid body included, goes
on to the app unchanged, which answers it as before (its errors byte for byte). The
answer of a submit taken here is the one the app gives: ``201`` with ``{"id", "ids"}``
(``{"ids"}`` for a batch), or the ``{"error", "detail"}`` of a
:class:`~phalanx.errors.PhalanxError` (a standby's ``NotLeader`` included, which the
forwarding layer around this one sends on to the leader).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from phalanx.api.errors import bug_response, phalanx_error_response
from phalanx.api.forward import Receive, Scope, Send, replaying
from phalanx.api.jobs import BatchRequest
from phalanx.api.plane import ControlPlane
from phalanx.errors import PhalanxError
from phalanx.model.submission import JobSubmission

__all__ = ["FastSubmit"]

log = logging.getLogger("phalanx.api")


_SINGLE = "/api/v1/jobs"
_BATCH = "/api/v1/jobs/batch"
_PATHS = (_SINGLE, _BATCH)


class FastSubmit:
    """ASGI middleware: the submit routes answered on the event loop when it can."""

    def __init__(self, app: Any, *, plane: Callable[[], ControlPlane]) -> None:
        self.app = app
        self.plane = plane

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path")
        if scope["type"] != "http" or scope.get("method") != "POST" or path not in _PATHS:
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replay = replaying(body, receive)

        submissions = self._understood(scope, body, batch=path == _BATCH)
        if submissions is None:
            await self.app(scope, replay, send)
            return
        principal, jobs = submissions
        try:
            ids: list[int] = await asyncio.wrap_future(self.plane().submit_later(principal, jobs))
        except PhalanxError as exc:
            await phalanx_error_response(exc)(scope, replay, send)
            return
        except Exception as exc:  # the app's last resort, as for any route
            log.exception("internal error answering POST %s", path)
            await bug_response(exc)(scope, replay, send)
            return
        answer = {"ids": ids} if path == _BATCH else {"id": ids[0], "ids": ids}
        content = json.dumps(answer, separators=(",", ":")).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 201,
                "headers": [
                    (b"content-length", str(len(content)).encode()),
                    (b"content-type", b"application/json"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": content, "more_body": False})

    def _understood(
        self, scope: Scope, body: bytes, *, batch: bool
    ) -> tuple[Any, list[JobSubmission]] | None:
        """The caller and its submissions, or None: the app answers this request."""
        authorization = content_type = b""
        for key, value in scope.get("headers", []):
            if key == b"authorization":
                authorization = value
            elif key == b"content-type":
                content_type = value
        if content_type.lower() != b"application/json":
            return None
        scheme, _, token = authorization.decode("latin-1").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        principal = self.plane().cached_principal(token.strip())
        if principal is None:
            return None
        try:
            data = json.loads(body)
            if batch:
                return principal, list(BatchRequest.model_validate(data).jobs)
            return principal, [JobSubmission.model_validate(data)]
        except (ValueError, RecursionError, ValidationError):
            return None
