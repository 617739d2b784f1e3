"""Start and kill real ``phalanx up`` processes for the reliability tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx


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
    state.mkdir(parents=True, exist_ok=True)
    client_json = state / "client.json"
    client_json.unlink(missing_ok=True)
    args = [sys.executable, "-m", "phalanx.cli.main", "up", "--state-dir", str(state)]
    args += ["--port", str(port)]
    for c in configs:
        args += ["--config", str(c)]
    log = open(state / "server.log", "ab")  # noqa: SIM115 - owned by the child
    proc = subprocess.Popen(args, stdout=log, stderr=log, env={**os.environ})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"phalanx up exited: {(state / 'server.log').read_text()}")
        if client_json.exists():
            try:
                info = json.loads(client_json.read_text())
                if httpx.get(info["url"] + "/healthz", timeout=2).status_code == 200:
                    return Server(proc, info["url"], info["token"], state)
            except (ValueError, KeyError, httpx.HTTPError):
                pass
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"phalanx up did not start: {(state / 'server.log').read_text()}")
