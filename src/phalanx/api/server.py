"""Run the API with uvicorn on a socket bound up front, in the foreground or on a thread.

The socket is bound when the :class:`ApiServer` is made, so its port (``port=0``
picks a free one) and URL are known, and a port in use is a clear error,
before anything is served.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

import uvicorn

from phalanx.errors import Conflict

__all__ = ["ApiServer", "listen"]


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (``port=0``: a free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise Conflict(
            f"cannot listen on {host}:{port}: {exc.strerror}; choose another with --port"
        ) from None
    sock.listen(2048)
    return sock


class ApiServer:
    """One uvicorn server for ``app``: :meth:`run` blocks, :meth:`start` runs it on a thread.

    With ``tls_cert`` and ``tls_key`` (PEM files) it serves HTTPS only.
    """

    def __init__(
        self,
        app: Any,
        host: str = "127.0.0.1",
        port: int = 6900,
        *,
        sock: socket.socket | None = None,
        log_level: str = "warning",
        tls_cert: str | None = None,
        tls_key: str | None = None,
    ) -> None:
        self.sock = sock if sock is not None else listen(host, port)
        self.host = host
        self.app = app
        self.tls = tls_cert is not None
        config = uvicorn.Config(
            app,
            log_level=log_level,
            access_log=False,
            lifespan="off",
            server_header=False,
            timeout_keep_alive=30,
            timeout_graceful_shutdown=5,
            ssl_certfile=tls_cert,
            ssl_keyfile=tls_key,
        )
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def started(self) -> bool:
        return bool(self._server.started)

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    @property
    def url(self) -> str:
        host = self.host if self.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

    def run(self) -> None:
        """Serve until :meth:`stop` (or SIGINT/SIGTERM when on the main thread)."""
        self._server.run(sockets=[self.sock])

    def start(self, timeout: float = 30.0) -> ApiServer:
        """Serve on a daemon thread; returns once it accepts connections."""
        self._thread = threading.Thread(target=self.run, name="phalanx-api", daemon=True)
        self._thread.start()
        waited = 0.0
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError(f"the API server did not start on {self.url}")
            if waited >= timeout:
                raise TimeoutError(f"the API server did not start within {timeout}s")
            threading.Event().wait(0.01)
            waited += 0.01
        return self

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float = 10.0) -> None:
        """Finish the requests in flight and exit; joins the thread if it has one."""
        self._server.should_exit = True
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        self.sock.close()
