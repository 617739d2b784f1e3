"""Run the API with uvicorn, in the foreground or on a thread, and stop it on request.

``port=0`` binds a free port; :attr:`ApiServer.port` tells which once started.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import uvicorn

__all__ = ["ApiServer", "serve"]


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, on_started: Callable[[], None] | None) -> None:
        super().__init__(config)
        self._on_started = on_started
        self.started_event = threading.Event()

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            self.started_event.set()
            if self._on_started is not None:
                self._on_started()


class ApiServer:
    """One uvicorn server for ``app``: :meth:`run` blocks, :meth:`start` runs it on a thread."""

    def __init__(
        self,
        app: Any,
        host: str = "127.0.0.1",
        port: int = 6900,
        *,
        on_started: Callable[[], None] | None = None,
        log_level: str = "warning",
    ) -> None:
        self.host = host
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level=log_level,
            access_log=False,
            lifespan="off",
            server_header=False,
            timeout_graceful_shutdown=5,
        )
        self._server = _Server(config, on_started)
        self._thread: threading.Thread | None = None

    @property
    def started(self) -> bool:
        return self._server.started

    @property
    def port(self) -> int:
        """The bound port (the configured one, or the one the OS chose for ``port=0``)."""
        for server in self._server.servers:
            for sock in server.sockets:
                return int(sock.getsockname()[1])
        return int(self._server.config.port)

    @property
    def url(self) -> str:
        host = self.host if self.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    def run(self) -> None:
        """Serve until :meth:`stop` (or SIGINT/SIGTERM when on the main thread)."""
        self._server.run()

    def start(self, timeout: float = 30.0) -> ApiServer:
        """Serve on a daemon thread; returns once the socket is bound."""
        self._thread = threading.Thread(target=self.run, name="phalanx-api", daemon=True)
        self._thread.start()
        deadline = timeout
        while not self._server.started_event.wait(0.05):
            deadline -= 0.05
            if not self._thread.is_alive():
                raise RuntimeError(f"the API server did not start on {self.host}")
            if deadline <= 0:
                raise TimeoutError(f"the API server did not start within {timeout}s")
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Ask the server to finish its requests and exit; joins the thread if it has one."""
        self._server.should_exit = True
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)


def serve(
    app: Any,
    host: str,
    port: int,
    *,
    on_started: Callable[[], None] | None = None,
    server: list[ApiServer] | None = None,
) -> None:
    """Serve ``app`` in the foreground until SIGINT/SIGTERM or ``ApiServer.stop()``.

    ``on_started`` runs once the socket is bound; pass a list as ``server`` to
    receive the :class:`ApiServer` (to stop it from another thread).
    """
    api = ApiServer(app, host, port, on_started=on_started)
    if server is not None:
        server.append(api)
    api.run()
