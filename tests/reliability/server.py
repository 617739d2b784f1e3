"""Start and kill real ``phalanx up`` processes for the reliability tests."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import httpx

from phalanx.control.spawn import spawn_server
from phalanx.errors import PhalanxError


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    url: str
    token: str
    state: Path

    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {self.token}"}, timeout=60
        )

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs, as in a crash or an OOM kill."""
        self.proc.kill()
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


def start(state: Path, *configs: Path, port: int = 0) -> Server:
    """``phalanx up`` on a free port; returns once ``/healthz`` answers."""
    args = ["--port", str(port)]
    for c in configs:
        args += ["--config", str(c)]
    try:
        server = spawn_server(state, args)
    except PhalanxError as exc:
        raise AssertionError(exc.detail) from None
    return Server(server.proc, server.url, server.token, state)
