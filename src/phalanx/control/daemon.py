"""``phalanx up --detach`` and ``phalanx down``: a server in the background, and stopping it.

``up --detach`` forks before anything starts (no threads exist yet), the child
leaves the terminal's session, sends its output to ``STATE/server.log`` and
runs the server; the parent waits until the server answers (it has written
``client.json`` afresh and ``/healthz`` says yes) and prints the start-up
lines, or the log's error when the child exits first.

``down`` finds the server of a state directory through its lock file (which
holds the pid while the server holds the lock), sends it SIGTERM, and waits
until the lock is free: the API and the control loop have stopped. Jobs keep
running under their supervisors, as after Ctrl-C; ``phalanx cancel --all``
ends them.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from phalanx.errors import Forbidden, PhalanxError, Unavailable
from phalanx.statedir import CLIENT_CONFIG, LOCK_FILE, LOG_FILE, make_state_dir

__all__ = ["detach", "stop_server"]


def detach(state: Path, serve: Callable[[], None], *, timeout: float = 120.0) -> str:
    """Run ``serve`` in a detached child; return its start-up lines once it answers.

    Raises :class:`PhalanxError` with the log's last lines when it exits first.
    """
    make_state_dir(state)
    log_path = state / LOG_FILE
    client_json = state / CLIENT_CONFIG
    start = log_path.stat().st_size if log_path.exists() else 0
    begun = time.time_ns()
    pid = os.fork()
    if pid == 0:  # the child: the server
        os.setsid()
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        os.close(null)
        sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
        sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
        code = 0
        try:
            serve()
        except PhalanxError as exc:
            sys.stderr.write(f"phalanx: error: {exc.detail}\n")
            code = 1
        except BaseException as exc:
            sys.stderr.write(f"phalanx: error: {type(exc).__name__}: {exc}\n")
            code = 1
        sys.stderr.flush()
        os._exit(code)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            said = _read_from(log_path, start).replace("phalanx: error: ", "").strip()
            code = os.waitstatus_to_exitcode(status)
            raise PhalanxError(said or f"phalanx up exited with status {code}")
        if _answers(client_json, begun):
            return _startup_lines(log_path, start)
        time.sleep(0.05)
    raise Unavailable(
        f"phalanx up (pid {pid}) did not answer within {timeout:g} s; it still runs: "
        f"see {log_path}, stop it with 'phalanx down'"
    )


def _answers(client_json: Path, since_ns: int) -> bool:
    try:
        if client_json.stat().st_mtime_ns < since_ns:
            return False
        info = json.loads(client_json.read_text())
    except (OSError, ValueError):
        return False
    from phalanx.control.spawn import healthy

    return healthy(info["url"], info["token"])


def _read_from(path: Path, offset: int) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            return fh.read().decode(errors="replace")
    except OSError:
        return ""


def _startup_lines(log_path: Path, offset: int, wait: float = 2.0) -> str:
    """The start-up lines the server writes once it serves (it answers just before)."""
    deadline = time.monotonic() + wait
    text = _read_from(log_path, offset)
    while "phalanx is up" not in text and time.monotonic() < deadline:
        time.sleep(0.02)
        text = _read_from(log_path, offset)
    return text[text.find("phalanx is up") :] if "phalanx is up" in text else text


def stop_server(state: Path, *, timeout: float = 60.0) -> int | None:
    """SIGTERM the server of ``state`` and wait until it has stopped; its pid, or None
    when no server runs there."""
    lock_path = state / LOCK_FILE
    try:
        lock = open(lock_path)  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise Forbidden(f"cannot read {lock_path}: {exc.strerror}") from None
    with lock:
        if _free(lock):
            return None
        text = lock.read().strip()
        if not text.isdigit():
            raise PhalanxError(
                f"the server on {state} shares it with others on PostgreSQL and recorded no "
                "pid: stop each server with Ctrl-C or kill"
            )
        pid = int(text)
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return None
        except PermissionError:
            raise Forbidden(
                f"not allowed to stop the server of {state} (pid {pid}): it runs as another "
                "user; stop it as that user or root"
            ) from None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if _free(lock):
                return pid
            time.sleep(0.05)
    raise Unavailable(f"the server of {state} (pid {pid}) did not stop within {timeout:g} s")


def _free(lock: IO[str]) -> bool:
    """Whether no server holds the state directory's lock (taken and let go at once)."""
    fd = lock.fileno()
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    fcntl.flock(fd, fcntl.LOCK_UN)
    return True
