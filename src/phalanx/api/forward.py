"""The outermost layer of the API: bounded request bodies, and forwarding to the leader.

Two jobs, done together because both need the whole request body in hand:

- **Bounded bodies.** A body is read as it arrives, and a request whose body is
  larger than :data:`MAX_BODY_BYTES` (by its ``Content-Length`` or by counting) is
  answered 413 at once, before any of it is parsed or held whole.
- **Forwarding.** On a server that stands by (several servers on one PostgreSQL,
  :mod:`phalanx.store.lease`), whatever needs the leader (every write, and the reads
  that need the scheduler's memory: explain, queues, nodes, priorities, metrics)
  raises :class:`~phalanx.errors.NotLeader`, which the API answers 503 with the
  leader's URL in :data:`~phalanx.api.errors.LEADER_HEADER`. This layer catches
  that answer before it leaves, sends the same request (method, path, headers,
  body) to the leader and relays the leader's answer, so clients may talk to any
  server. A forwarded request carries :data:`FORWARDED_HEADER` and is never
  forwarded again; when no server leads, or the leader cannot be reached, the
  client gets the 503 with ``Retry-After``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from phalanx.api.errors import LEADER_HEADER, error_response

__all__ = ["FORWARDED_HEADER", "MAX_BODY_BYTES", "Forwarding"]

log = logging.getLogger("phalanx.api")

MAX_BODY_BYTES = 64 << 20
"""The largest request body, in bytes (64 MiB: sixteen 4 MiB batch scripts)."""

FORWARDED_HEADER = "X-Phalanx-Forwarded"
"""Set on a request a standby sent on to the leader (its value: the standby's URL)."""

_HOP_BY_HOP = {
    b"connection",
    b"keep-alive",
    b"transfer-encoding",
    b"te",
    b"trailer",
    b"upgrade",
    b"proxy-connection",
    b"host",
    b"content-length",
}

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class Forwarding:
    """ASGI middleware: bounded bodies, and a standby's 503 turned into the leader's answer."""

    def __init__(self, app: Any, *, own_url: str = "", max_body: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.own_url = own_url
        self.max_body = max_body
        self._client: Any = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body:
            await _too_large(self.max_body)(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                await _too_large(self.max_body)(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replay = replaying(body, receive)

        forwarded = FORWARDED_HEADER.lower().encode() in headers
        leader: str | None = None
        held = False

        async def watch(message: Message) -> None:
            nonlocal leader, held
            if message["type"] == "http.response.start" and message["status"] == 503:
                for key, value in message.get("headers", []):
                    if key.lower() == LEADER_HEADER.lower().encode() and value and not forwarded:
                        leader = value.decode("latin-1")
                        held = True
                        return
            if held:
                return  # the standby's own 503 body: replaced by the leader's answer
            await send(message)

        await self.app(scope, replay, watch)
        if held and leader is not None:
            await self._forward(scope, receive, send, body, leader)

    async def _forward(
        self, scope: Scope, receive: Receive, send: Send, body: bytes, leader: str
    ) -> None:
        import httpx

        if self._client is None:
            self._client = httpx.AsyncClient(
                verify=os.environ.get("PHALANX_CA") or True,
                timeout=httpx.Timeout(10.0, read=300.0),
                follow_redirects=False,
            )
        path = scope.get("raw_path") or scope["path"].encode()
        query = scope.get("query_string") or b""
        url = leader.rstrip("/") + path.decode("latin-1") + ("?" + query.decode() if query else "")
        sent = [
            (k.decode("latin-1"), v.decode("latin-1"))
            for k, v in scope.get("headers", [])
            if k.lower() not in _HOP_BY_HOP
        ]
        sent.append((FORWARDED_HEADER, self.own_url or "standby"))
        request = self._client.build_request(scope["method"], url, headers=sent, content=body)
        try:
            response = await self._client.send(request, stream=True)
        except httpx.HTTPError as exc:
            log.warning(
                "forwarding %s %s to the leader %s failed: %s", scope["method"], url, leader, exc
            )
            detail = f"the leader at {leader} cannot be reached ({type(exc).__name__}); try again"
            await error_response(503, "NotLeader", detail, **{"Retry-After": "1"})(
                scope, receive, send
            )
            return
        try:
            out = [
                (k.lower(), v)
                for k, v in response.headers.raw
                if k.lower() not in _HOP_BY_HOP or k.lower() == b"content-length"
            ]
            await send(
                {"type": "http.response.start", "status": response.status_code, "headers": out}
            )
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await response.aclose()


def replaying(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives the app ``body`` (read already) once, then the client's
    own messages (its disconnect)."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _too_large(limit: int) -> Any:
    return error_response(
        413,
        "TooLarge",
        f"the request body is larger than {limit} bytes ({limit >> 20} MiB), the most one "
        "request may carry: send fewer jobs or objects per request",
    )
