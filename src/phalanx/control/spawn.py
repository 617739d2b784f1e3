"""Start ``phalanx up`` as a child process and wait until it serves.

For the programs that drive a real server from outside (the demo, the
benchmarks, the crash tests): the server writes ``client.json`` (its URL and
an admin token) into its state directory once it listens, and ``/healthz``
answers 200 once it accepts work.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from phalanx.errors import PhalanxError
from phalanx.statedir import CLIENT_CONFIG, LOG_FILE

__all__ = ["ServerProcess", "healthy", "spawn_server"]


@dataclass
class ServerProcess:
    """A running ``phalanx up``: its process, URL, admin token and state directory."""

    proc: subprocess.Popen[bytes]
    url: str
    token: str
    state_dir: Path

    @property
    def log(self) -> Path:
        return self.state_dir / LOG_FILE

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def healthy(url: str, token: str) -> bool:
    """Whether the server at ``url`` answers ``/healthz`` (False while it is starting)."""
    from phalanx.client import Client

    try:
        with Client(url, token) as client:
            return client.healthz()
    except Exception:  # not listening yet, or mid start-up
        return False


def spawn_server(
    state_dir: Path,
    args: Sequence[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
    new_session: bool = False,
) -> ServerProcess:
    """``phalanx up --state-dir STATE_DIR [ARGS...]``; returns once ``/healthz`` answers.

    Output goes to ``STATE_DIR/server.log`` (appended). Raises
    :class:`~phalanx.errors.PhalanxError` with the log when the server exits or
    does not become ready within ``timeout`` seconds.
    """
    state_dir.mkdir(parents=True, exist_ok=True)
    client_json = state_dir / CLIENT_CONFIG
    client_json.unlink(missing_ok=True)
    command = [sys.executable, "-m", "phalanx.cli.main", "up", "--state-dir", str(state_dir)]
    command += list(args)
    log_path = state_dir / LOG_FILE
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            start_new_session=new_session,
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise PhalanxError(f"phalanx up exited:\n{log_path.read_text(errors='replace')}")
        try:
            info = json.loads(client_json.read_text())
        except (OSError, ValueError):
            info = None
        if info is not None and healthy(info["url"], info["token"]):
            return ServerProcess(proc, info["url"], info["token"], state_dir)
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise PhalanxError(
        f"phalanx up did not become ready within {timeout:g} s:\n"
        f"{log_path.read_text(errors='replace')}"
    )
