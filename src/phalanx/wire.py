"""The lean transport of :class:`phalanx.client.Client`: HTTP/1.1 over a plain socket, JSON in.

``squeue`` and the other commands people type many times a day start a fresh
interpreter each time, and what they import is most of what they cost:
``http.client`` brings ``email``, ``ssl`` and ``socket`` (``enum``), ``json`` brings
``re``, ``urllib.parse`` brings ``re`` too. This module talks to an ``http://``
server with the built-in ``_socket`` and decodes JSON with the ``_json``
accelerator's scanner, so a command that only reads pays none of that. It speaks
the part of HTTP/1.1 the phalanx server uses: keep-alive, ``Content-Length`` and
chunked bodies; ``https`` stays with ``http.client`` and ``ssl``.
"""

from __future__ import annotations

import _json
import _socket

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["Connection", "loads", "quote", "split_url", "urlencode"]

_MAX_HEAD = 65536
"""The most bytes of status line and headers read before giving up on an answer."""


class _Context:
    """What ``_json.make_scanner`` reads off a ``json.JSONDecoder``, with its defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {
        "-Infinity": float("-inf"),
        "Infinity": float("inf"),
        "NaN": float("nan"),
    }.__getitem__


_scan = _json.make_scanner(_Context())  # type: ignore[arg-type]


def loads(data: bytes | str) -> Any:
    """``json.loads`` without importing :mod:`json` (and :mod:`re`) for well-formed input;
    anything else goes to :func:`json.loads`, which raises its usual error."""
    text = data.decode("utf-8") if isinstance(data, bytes | bytearray) else data
    stripped = text.strip(" \t\n\r")
    try:
        value, end = _scan(stripped, 0)
    except Exception:  # StopIteration, or the scanner's own error (without json.decoder)
        end = -1
    if end != len(stripped):
        import json

        return json.loads(text)
    return value


# --------------------------------------------------------------------------- URLs

_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~")


def quote(text: str, safe: str = "/", *, plus: bool = False) -> str:
    """``urllib.parse.quote`` (``plus``: ``quote_plus``) of UTF-8 text."""
    keep = _SAFE | frozenset(safe.encode())
    out = []
    for byte in text.encode():
        if byte in keep:
            out.append(chr(byte))
        elif plus and byte == 32:
            out.append("+")
        else:
            out.append(f"%{byte:02X}")
    return "".join(out)


def urlencode(query: list[tuple[str, str]]) -> str:
    """``urllib.parse.urlencode`` of ``(name, text)`` pairs."""
    return "&".join(f"{quote(k, '', plus=True)}={quote(v, '', plus=True)}" for k, v in query)


def split_url(url: str) -> tuple[str, str, int | None, str] | None:
    """``scheme://host[:port][/path]`` as ``(scheme, host, port, path)``; ``None`` when the
    URL has more than that (user, query, fragment) or is not of that form."""
    scheme, sep, rest = url.partition("://")
    if not sep or any(c in rest for c in "@?#"):
        return None
    netloc, slash, path = rest.partition("/")
    if netloc.startswith("["):
        host, bracket, after = netloc[1:].partition("]")
        if not bracket or (after and not after.startswith(":")):
            return None
        port_text = after[1:]
    else:
        host, _, port_text = netloc.partition(":")
    if port_text and not port_text.isdigit():
        return None
    port = int(port_text) if port_text else None
    if port is not None and port > 65535:
        return None
    return scheme.lower(), host.lower(), port, slash + path


# --------------------------------------------------------------------------- HTTP


class Connection:
    """One keep-alive HTTP/1.1 connection to ``host:port``, opened on first use.

    Errors are the builtin ones :mod:`http.client` raises for the same events, so the
    client handles both alike: :class:`ConnectionRefusedError`,
    :class:`ConnectionResetError` (the server hung up before answering),
    :class:`TimeoutError`, ``_socket.gaierror`` (an :class:`OSError`).
    """

    def __init__(self, host: str, port: int, timeout: float) -> None:
        self.host = host
        self.port = port
        self.timeout = timeout
        self._sock: Any = None
        self._buffer = b""

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._buffer = b""

    def _connect(self) -> Any:
        error: OSError | None = None
        # A str host goes through the "idna" codec, which imports re, stringprep and
        # unicodedata: an ASCII name (or address) is passed as bytes instead.
        host: str | bytes = self.host.encode() if self.host.isascii() else self.host
        for family, kind, proto, _, address in _socket.getaddrinfo(
            host, self.port, 0, _socket.SOCK_STREAM
        ):
            sock = _socket.socket(family, kind, proto)
            try:
                sock.settimeout(self.timeout)
                sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
                sock.connect(address)
            except OSError as exc:
                sock.close()
                error = exc
                continue
            return sock
        raise error or OSError(f"{self.host}: no address")

    def request(
        self, method: str, target: str, body: bytes | None, headers: dict[str, str]
    ) -> tuple[int, dict[str, str], bytes]:
        """Send one request and read its answer: status, headers (lower-case names), body."""
        if self._sock is None:
            self._sock = self._connect()
        host = f"[{self.host}]" if ":" in self.host else self.host
        lines = [f"{method} {target} HTTP/1.1", f"Host: {host}:{self.port}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        if body is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(body or b'')}")
        self._sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b""))
        status, answer = self._head()
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            data = b""
        elif answer.get("transfer-encoding", "").lower() == "chunked":
            data = self._chunked()
        elif "content-length" in answer:
            data = self._exactly(int(answer["content-length"]))
        else:
            data = self._until_closed()
            answer["connection"] = "close"
        if answer.get("connection", "").lower() == "close":
            self.close()
        return status, answer, data

    def _recv(self) -> bytes:
        chunk: bytes = self._sock.recv(65536)
        if not chunk:
            raise ConnectionResetError("the server closed the connection")
        return chunk

    def _head(self) -> tuple[int, dict[str, str]]:
        while True:
            end = self._buffer.find(b"\r\n\r\n")
            if end >= 0:
                break
            if len(self._buffer) > _MAX_HEAD:
                raise ConnectionResetError("the server's answer has no end of headers")
            try:
                self._buffer += self._recv()
            except ConnectionResetError:
                if self._buffer:
                    raise
                raise ConnectionResetError(
                    "Remote end closed connection without response"
                ) from None
        head = self._buffer[:end].decode("latin-1").split("\r\n")
        self._buffer = self._buffer[end + 4 :]
        parts = head[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise ConnectionResetError(f"not an HTTP answer: {head[0]!r}")
        answer: dict[str, str] = {}
        for line in head[1:]:
            name, _, value = line.partition(":")
            key = name.strip().lower()
            value = value.strip()
            answer[key] = f"{answer[key]}, {value}" if key in answer else value
        return int(parts[1]), answer

    def _exactly(self, size: int) -> bytes:
        while len(self._buffer) < size:
            self._buffer += self._recv()
        data, self._buffer = self._buffer[:size], self._buffer[size:]
        return data

    def _line(self) -> bytes:
        while True:
            end = self._buffer.find(b"\r\n")
            if end >= 0:
                line, self._buffer = self._buffer[:end], self._buffer[end + 2 :]
                return line
            self._buffer += self._recv()

    def _chunked(self) -> bytes:
        parts: list[bytes] = []
        while True:
            size = int(self._line().split(b";", 1)[0].strip(), 16)
            if size == 0:
                while self._line():  # trailers, up to the empty line
                    pass
                return b"".join(parts)
            parts.append(self._exactly(size))
            self._exactly(2)

    def _until_closed(self) -> bytes:
        parts = [self._buffer]
        self._buffer = b""
        while True:
            chunk = self._sock.recv(65536)
            if not chunk:
                return b"".join(parts)
            parts.append(chunk)
