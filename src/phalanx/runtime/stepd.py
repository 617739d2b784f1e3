"""Steps started from outside a job: the job's step socket and the relay of each such step.

Slurm's ``srun`` outside a batch script (``srun`` that makes its own allocation,
``srun --jobid=N``, ``srun`` in a ``salloc`` shell) and ``sattach`` reach a
running job through ``JOBDIR/step.sock``, a Unix socket the job's supervisor
listens on (:class:`StepServer`). Only the job's own account and root may
connect (the job directory is the account's, and ``SO_PEERCRED`` is checked).

The protocol is a stream of frames, ``!BI`` (kind, length) then the payload:

=====  =========  ==============================================================
kind   name       payload
=====  =========  ==============================================================
0      CONTROL    a JSON object with an ``op``
1      STDOUT     bytes for standard output
2      STDERR     bytes for standard error
3      STDIN      bytes for the step's standard input (empty: end of input)
=====  =========  ==============================================================

A client opens with one CONTROL frame:

``{"op": "step", "argv": [srun's options and command], "env", "cwd", "pty",
"rows", "cols", "release"}``
    Run a step. The supervisor forks a relay (:func:`relay_step`) that owns the
    connection from then on: it runs the job's own ``srun``
    (:mod:`phalanx.runtime.srun`) with the client's environment over the job's
    Slurm variables, in the client's working directory, sends ``{"op":
    "started", "step": S}``, the step's output, and at the end ``{"op": "exit",
    "code": N}``. The client may send STDIN frames and ``{"op": "signal",
    "signal": N}`` (forwarded to srun, which forwards it to the tasks),
    ``{"op": "status"}`` (answered ``{"op": "tasks", "running": [...],
    "exited": [...]}``) and ``{"op": "winch", "rows", "cols"}``. With
    ``"release": true`` (an ``srun`` that made the allocation) the allocation
    ends with the step, with its exit code. A client that goes away ends its
    step. With ``"pty": true`` task 0 runs on a pseudo-terminal
    (``srun --pty``).
``{"op": "hold"}``
    ``salloc``: the allocation is held for this connection. ``{"op": "release",
    "code": N}`` ends it with that exit code; a connection that closes without
    it ends it as cancelled.

Every running step's srun (:mod:`phalanx.runtime.srun`, started from outside the
job or by a batch script) listens on ``JOBDIR/steps/S.sock`` for ``sattach``:
``{"op": "attach"}`` is answered ``{"op": "attached"}``, then what the step
printed so far (its last MiB, as slurmstepd replays it) and from then on, each
STDOUT/STDERR payload led by the task's rank (``!I``), and at the end ``{"op":
"exit", "code": N, "tasks": [each task's exit code, or minus its signal]}``.

Standard library only: the supervisor imports it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import signal
import socket
import struct
import sys
import termios
import time
from collections.abc import Callable
from typing import Any

__all__ = [
    "CONTROL",
    "SOCKET",
    "STDERR",
    "STDIN",
    "STDOUT",
    "Channel",
    "StepServer",
    "connect",
    "next_step_id",
]

SOCKET = "step.sock"
CONTROL, STDOUT, STDERR, STDIN = 0, 1, 2, 3
HEADER = struct.Struct("!BI")
RANK = struct.Struct("!I")
"""The task rank in front of the output an attached client gets."""
HISTORY_BYTES = 1 << 20
MAX_FRAME = 1 << 20
SRUN = "phalanx.runtime.srun"
LOST_KILL_S = 2.0
"""How long a step whose client went away gets between SIGTERM and SIGKILL."""


class ProtocolError(Exception):
    """A frame that is not one of the protocol's."""


# -- framing ----------------------------------------------------------------------


class Channel:
    """One end of a step connection: frames out, frames in (non-blocking reads)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = bytearray()
        self.closed = False
        self.early: list[tuple[int, bytes]] = []
        """Frames that came with the first CONTROL frame, for the next :meth:`receive`."""

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, kind: int, payload: bytes) -> bool:
        """Send one frame; False when the other end is gone."""
        if self.closed:
            return False
        try:
            self.sock.sendall(HEADER.pack(kind, len(payload)) + payload)
        except OSError:
            self.closed = True
            return False
        return True

    def control(self, message: dict[str, Any]) -> bool:
        return self.send(CONTROL, json.dumps(message).encode())

    def receive(self) -> list[tuple[int, bytes]] | None:
        """The frames that arrived (after select said readable); None at end of stream."""
        if self.early:
            early, self.early = self.early, []
            return early
        try:
            data = self.sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return []
        except OSError:
            data = b""
        if not data:
            self.closed = True
            return None
        self.buffer += data
        frames: list[tuple[int, bytes]] = []
        while len(self.buffer) >= HEADER.size:
            kind, length = HEADER.unpack_from(self.buffer)
            if kind > STDIN or length > MAX_FRAME:
                raise ProtocolError(f"bad frame (kind {kind}, {length} bytes)")
            if len(self.buffer) < HEADER.size + length:
                break
            frames.append((kind, bytes(self.buffer[HEADER.size : HEADER.size + length])))
            del self.buffer[: HEADER.size + length]
        return frames

    def read_control(self, timeout: float) -> dict[str, Any] | None:
        """Block up to ``timeout`` for the first CONTROL frame; frames before it are
        dropped, those after it kept for :meth:`receive`."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.sock], [], [], left)
            if not ready:
                return None
            frames = self.receive()
            if frames is None:
                return None
            for at, (kind, payload) in enumerate(frames):
                if kind == CONTROL:
                    message = json.loads(payload)
                    if isinstance(message, dict):
                        self.early = frames[at + 1 :]
                        return message

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(OSError):
            self.sock.close()


def _short(path: str) -> tuple[str, int]:
    """A path for ``bind``/``connect`` that fits a socket address (108 bytes): through
    ``/proc/self/fd`` of the folder when the path is long; the fd to close after."""
    if len(path.encode()) < 100:
        return path, -1
    folder, name = os.path.split(path)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    return f"/proc/self/fd/{fd}/{name}", fd


def connect(path: str) -> Channel:
    """A connection to the step socket ``path`` (OSError when nothing listens there)."""
    address, fd = _short(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(address)
    except OSError:
        sock.close()
        raise
    finally:
        if fd >= 0:
            os.close(fd)
    return Channel(sock)


def listen(path: str) -> socket.socket:
    """A listening Unix socket at ``path`` (mode 0600: its owner and root only)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    address, fd = _short(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(address)
        os.chmod(path, 0o600)
        sock.listen(16)
    except OSError:
        sock.close()
        raise
    finally:
        if fd >= 0:
            os.close(fd)
    sock.setblocking(False)
    return sock


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end (``SO_PEERCRED``)."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _, uid, _ = struct.unpack("3i", raw)
    return int(uid)


def accept(listener: socket.socket) -> socket.socket | None:
    """The next connection from the job's account or root; others are closed at once."""
    try:
        sock, _ = listener.accept()
    except (BlockingIOError, InterruptedError):
        return None
    except OSError:
        return None
    try:
        uid = peer_uid(sock)
    except OSError:
        sock.close()
        return None
    if uid not in (0, os.geteuid()):
        sock.close()
        return None
    sock.setblocking(True)
    return sock


def next_step_id(jobdir: str) -> int:
    """The job's next step id (``JOBDIR/steps/next``, under ``flock``)."""
    steps = os.path.join(jobdir, "steps")
    os.makedirs(steps, exist_ok=True)
    fd = os.open(os.path.join(steps, "next"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        raw = os.read(fd, 64).strip()
        step = int(raw) if raw else 0
        os.lseek(fd, 0, os.SEEK_SET)
        os.ftruncate(fd, 0)
        os.write(fd, f"{step + 1}\n".encode())
        return step
    finally:
        os.close(fd)


def step_pids(jobdir: str, step: int) -> list[int]:
    """The pids of a running step's tasks, in rank order (``steps/S.pids``)."""
    try:
        with open(os.path.join(jobdir, "steps", f"{step}.pids"), encoding="ascii") as fh:
            return [int(word) for word in fh.read().split()]
    except (OSError, ValueError):
        return []


# -- the supervisor's side ----------------------------------------------------------


class Relay:
    """A step relay the supervisor forked: its pid (and process group) and its request."""

    __slots__ = ("pid", "release", "step")

    def __init__(self, pid: int, release: bool, step: int) -> None:
        self.pid = pid
        self.release = release
        self.step = step


class StepServer:
    """The supervisor's step socket: accepts connections and forks a relay per step.

    ``env`` is the environment a step starts from (the job's Slurm variables and
    ``PHALANX_*``, as the batch shell has them), ``jobdir`` the job directory.
    """

    def __init__(self, jobdir: str, env: dict[str, str]) -> None:
        self.jobdir = jobdir
        self.env = env
        self.path = os.path.join(jobdir, SOCKET)
        self.listener = listen(self.path)
        self.relays: dict[int, Relay] = {}
        self.holders: list[Channel] = []
        """``salloc`` connections holding the allocation."""
        self.released: tuple[int, int | None, bool] | None = None
        """``(exit code, signal, True)`` once released, ``(0, None, False)`` when its
        holder (an srun's connection, a salloc's) went away without releasing it."""
        self.closed = False

    def fds(self) -> list[int]:
        if self.closed:
            return []
        return [self.listener.fileno(), *(h.fileno() for h in self.holders)]

    def handle(self, ready: list[int], allocation: bool) -> None:
        """Accept what is waiting on the listener; read the holders' messages."""
        if self.closed:
            return
        if self.listener.fileno() in ready:
            while (sock := accept(self.listener)) is not None:
                self.start(Channel(sock), allocation)
        for holder in list(self.holders):
            if holder.fileno() not in ready:
                continue
            try:
                frames = holder.receive()
            except (ProtocolError, ValueError):
                frames = None
            if frames is None:
                self.holders.remove(holder)
                holder.close()
                if self.released is None:
                    self.released = (0, None, False)
                continue
            for kind, payload in frames:
                if kind != CONTROL:
                    continue
                with contextlib.suppress(ValueError):
                    message = json.loads(payload)
                    if isinstance(message, dict) and message.get("op") == "release":
                        code = int(message.get("code") or 0) & 0xFF
                        sig = message.get("signal")
                        self.released = (code, int(sig) if sig else None, True)

    def start(self, channel: Channel, allocation: bool) -> None:
        try:
            request = channel.read_control(5.0)
        except (ProtocolError, ValueError):
            request = None
        if request is None:
            channel.close()
            return
        op = request.get("op")
        if op == "hold" and allocation:
            channel.control({"op": "held"})
            channel.sock.setblocking(False)
            self.holders.append(channel)
            return
        if op != "step" or self.released is not None:
            why = "the allocation was released" if op == "step" else f"unknown request {op!r}"
            channel.control({"op": "refused", "message": why})
            channel.close()
            return
        step = next_step_id(self.jobdir)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the relay process
            code = 1
            try:
                # Nothing of the supervisor's stays open here (its job lock least of all).
                keep = channel.fileno()
                os.closerange(3, keep)
                os.closerange(keep + 1, 1 << 16)
                code = relay_step(channel, request, self.jobdir, self.env, step)
            finally:
                os._exit(code)
        channel.close()
        self.relays[pid] = Relay(pid, bool(request.get("release")) and allocation, step)

    def reap(self) -> None:
        """Collect ended relays; one that ran the allocation's own step releases it."""
        for pid, relay in list(self.relays.items()):
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, status = pid, 0
            if not done:
                continue
            del self.relays[pid]
            if relay.release and self.released is None:
                code = os.waitstatus_to_exitcode(status)
                if code == 255:
                    # The client went away (see relay_step): nobody holds the allocation.
                    self.released = (0, None, False)
                    continue
                # The job ends as its step did: its exit code, or the signal that ended it.
                record = _step_record(self.jobdir, relay.step)
                sig = record.get("signal")
                if "exitCode" in record:
                    code = int(record["exitCode"])
                self.released = (code & 0xFF, int(sig) if sig else None, True)

    def signal(self, signum: int) -> None:
        """Signal every relay's process group (its srun and srun's tasks)."""
        for pid in self.relays:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signum)

    def alive(self) -> bool:
        for pid in self.relays:
            try:
                os.killpg(pid, 0)
            except ProcessLookupError:
                continue
            except PermissionError:
                return True
            return True
        return False

    def close(self) -> None:
        """Stop accepting (the job is ending); tell the holders."""
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(OSError):
            self.listener.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        for holder in self.holders:
            holder.close()
        self.holders.clear()


class AttachPoint:
    """``JOBDIR/steps/S.sock`` of a running step (its srun's): ``sattach`` connections
    get what srun prints from then on, and the exit status."""

    def __init__(self, jobdir: str, step: int) -> None:
        self.path = os.path.join(jobdir, "steps", f"{step}.sock")
        self.step = step
        self.listener: socket.socket | None = None
        with contextlib.suppress(OSError):
            self.listener = listen(self.path)
        self.peers: list[Channel] = []
        self.history: list[tuple[int, bytes]] = []
        """What the step printed so far (the last :data:`HISTORY_BYTES`): an attach
        replays it first, as slurmstepd does."""
        self.history_size = 0

    def fds(self) -> list[int]:
        out = [] if self.listener is None else [self.listener.fileno()]
        return out + [p.fileno() for p in self.peers]

    def handle(self, ready: list[int]) -> None:
        if self.listener is not None and self.listener.fileno() in ready:
            while (sock := accept(self.listener)) is not None:
                peer = Channel(sock)
                try:
                    request = peer.read_control(5.0)
                except (ProtocolError, ValueError):
                    request = None
                if request is None or request.get("op") != "attach":
                    peer.close()
                    continue
                peer.control({"op": "attached", "step": self.step})
                for kind, payload in self.history:
                    peer.send(kind, payload)
                sock.setblocking(False)
                self.peers.append(peer)
        for peer in list(self.peers):
            if peer.fileno() in ready:
                try:
                    gone = peer.receive() is None
                except (ProtocolError, ValueError):
                    gone = True
                if gone:
                    self.peers.remove(peer)
                    peer.close()

    def send(self, kind: int, rank: int, data: bytes) -> None:
        """Task ``rank``'s output (``kind``: STDOUT or STDERR) to the attached clients."""
        payload = RANK.pack(rank) + data
        self.history.append((kind, payload))
        self.history_size += len(payload)
        while self.history_size > HISTORY_BYTES and len(self.history) > 1:
            self.history_size -= len(self.history.pop(0)[1])
        for peer in list(self.peers):
            if not peer.send(kind, payload):
                self.peers.remove(peer)
                peer.close()

    def close(self, code: int, tasks: list[int]) -> None:
        """The step ended: srun's status and each task's (an exit code, or minus the
        signal that ended it)."""
        for peer in self.peers:
            peer.control({"op": "exit", "code": code, "step": self.step, "tasks": tasks})
            peer.close()
        self.peers.clear()
        if self.listener is not None:
            with contextlib.suppress(OSError):
                self.listener.close()
            with contextlib.suppress(OSError):
                os.unlink(self.path)


# -- the relay ------------------------------------------------------------------------


def _step_env(request: dict[str, Any], job_env: dict[str, str]) -> dict[str, str]:
    """The client's environment, then the job's Slurm and phalanx variables over it, and
    the job's ``srun`` first on ``PATH``."""
    client = {str(k): str(v) for k, v in (request.get("env") or {}).items()}
    env = {**client, **job_env}
    # The user's own settings stay the user's (the job's account, if it runs as one,
    # decides HOME): the job's are the job's variables and the machine's defaults.
    for name in ("LANG", "TERM") if "USER" in job_env else ("LANG", "TERM", "HOME"):
        if name in client:
            env[name] = client[name]
    job_path = job_env.get("PATH", "")
    bindir = job_path.split(":", 1)[0]
    if bindir and client.get("PATH"):
        env["PATH"] = f"{bindir}:{client['PATH']}"
    return env


def _set_winsize(fd: int, rows: int, cols: int) -> None:
    if rows > 0 and cols > 0:
        with contextlib.suppress(OSError):
            fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


class _StepRelay:
    """The relay's loop: srun's output to the client, its input and signals to srun."""

    def __init__(self, channel: Channel, jobdir: str, step: int) -> None:
        self.client: Channel | None = channel
        self.jobdir = jobdir
        self.step = step
        self.outputs: dict[int, int] = {}
        """read fd -> STDOUT or STDERR."""
        self.stdin_fd = -1
        self.pending = bytearray()
        """Input the step has not read yet (its pipe was full)."""
        self.stdin_eof = False
        self.master = -1
        self.srun = 0
        self.lost_at: float | None = None

    def broadcast(self, kind: int, data: bytes) -> None:
        if self.client is not None and not self.client.send(kind, data):
            self.client_gone()

    def client_gone(self) -> None:
        """The client closed its end (killed, or its terminal lost): end the step."""
        if self.client is None:
            return
        self.client.close()
        self.client = None
        if self.lost_at is None:
            self.lost_at = time.monotonic()
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.srun, signal.SIGTERM)

    def task_states(self) -> dict[str, Any]:
        running: list[int] = []
        exited: list[int] = []
        for rank, pid in enumerate(step_pids(self.jobdir, self.step)):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                exited.append(rank)
                continue
            except PermissionError:
                pass
            running.append(rank)
        return {"op": "tasks", "step": self.step, "running": running, "exited": exited}

    def on_frames(self, peer: Channel, frames: list[tuple[int, bytes]]) -> None:
        for kind, payload in frames:
            if kind == STDIN:
                self.input(payload)
                continue
            if kind != CONTROL:
                continue
            try:
                message = json.loads(payload)
            except ValueError:
                continue
            if not isinstance(message, dict):
                continue
            op = message.get("op")
            if op == "signal":
                signum = int(message.get("signal") or 0)
                if 0 < signum < 65:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(self.srun, signum)
            elif op == "status":
                peer.control(self.task_states())
            elif op == "winch" and self.master >= 0:
                _set_winsize(
                    self.master, int(message.get("rows") or 0), int(message.get("cols") or 0)
                )

    def input(self, data: bytes) -> None:
        if self.master >= 0:
            if data:  # a terminal has no end of input: ^D is a byte
                with contextlib.suppress(OSError):
                    write_all(self.master, data)
            return
        if self.stdin_fd < 0:
            return
        if not data:
            self.stdin_eof = True
        self.pending += data
        self.flush_input()

    def flush_input(self) -> None:
        """Write what input is pending without blocking; close at its end."""
        try:
            while self.pending:
                n = os.write(self.stdin_fd, self.pending)
                del self.pending[:n]
        except BlockingIOError:
            return
        except OSError:
            self.pending.clear()
            self.stdin_eof = True
        if self.stdin_eof and not self.pending:
            with contextlib.suppress(OSError):
                os.close(self.stdin_fd)
            self.stdin_fd = -1

    def run(self) -> int:
        status = 0
        done = False
        while True:
            if not done:
                try:
                    pid, status = os.waitpid(self.srun, os.WNOHANG)
                except ChildProcessError:
                    pid, status = self.srun, 0
                done = pid != 0
            if done and not self.outputs:
                break
            if self.lost_at is not None and time.monotonic() - self.lost_at > LOST_KILL_S:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(self.srun, signal.SIGKILL)
                for pid in step_pids(self.jobdir, self.step):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
                self.lost_at = float("inf")
            watched: list[Any] = list(self.outputs)
            if self.client is not None:
                watched.append(self.client)
            writable = [self.stdin_fd] if self.pending and self.stdin_fd >= 0 else []
            try:
                ready, can_write, _ = select.select(watched, writable, [], 0.1 if not done else 0.5)
            except InterruptedError:
                continue
            if can_write:
                self.flush_input()
            if done and not ready:
                break  # leftover children hold the output open: give it up
            for item in ready:
                if isinstance(item, int):
                    self.read_output(item)
                else:
                    self.read_peer(item)
        code = os.waitstatus_to_exitcode(status)
        code = code if code >= 0 else 128 - code
        exit_message = {"op": "exit", "code": code, "step": self.step}
        if self.client is not None:
            self.client.control(exit_message)
        return 255 if self.lost_at is not None else code

    def read_output(self, fd: int) -> None:
        try:
            data = os.read(fd, 1 << 16)
        except OSError:
            # EIO: the terminal's other side closed (every process on it ended).
            data = b""
        if not data:
            del self.outputs[fd]
            with contextlib.suppress(OSError):
                os.close(fd)
            if fd == self.master:
                self.master = -1
            return
        self.broadcast(self.outputs[fd], data)

    def read_peer(self, peer: Channel) -> None:
        try:
            frames = peer.receive()
        except (ProtocolError, ValueError):
            frames = None
        if frames is None:
            self.client_gone()
            return
        self.on_frames(peer, frames)


def _step_record(jobdir: str, step: int) -> dict[str, Any]:
    try:
        with open(os.path.join(jobdir, "steps", f"{step}.json"), encoding="utf-8") as fh:
            record = json.load(fh)
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def relay_step(
    channel: Channel, request: dict[str, Any], jobdir: str, job_env: dict[str, str], step: int
) -> int:
    """Run step ``step`` for a client (in the relay process the supervisor forked); its
    exit status (255 when the client went away)."""
    os.setsid()
    for sig in (signal.SIGCHLD, signal.SIGPIPE, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    # The supervisor's cancel reaches this whole group: srun and its tasks end on it, the
    # relay stays to pass on their last words and srun's exit status.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.set_wakeup_fd(-1)
    env = _step_env(request, job_env)
    env["PHALANX_STEP_ID"] = str(step)
    cwd = str(request.get("cwd") or "/")
    argv = [str(a) for a in request.get("argv") or ()]
    pty = bool(request.get("pty"))
    relay = _StepRelay(channel, jobdir, step)
    child_fds: tuple[int, int, int]
    if pty:
        master, slave = os.openpty()
        _set_winsize(master, int(request.get("rows") or 0), int(request.get("cols") or 0))
        relay.master = master
        relay.outputs[master] = STDOUT
        child_fds = (slave, slave, slave)
        if request.get("term"):
            env["TERM"] = str(request["term"])
    else:
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        relay.stdin_fd = in_w
        os.set_blocking(in_w, False)
        relay.outputs[out_r] = STDOUT
        relay.outputs[err_r] = STDERR
        child_fds = (in_r, out_w, err_w)
    channel.control({"op": "started", "step": step})
    pid = os.fork()
    if pid == 0:  # pragma: no cover - becomes srun
        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            for target, fd in enumerate(child_fds):
                os.dup2(fd, target)
            os.closerange(3, 1 << 16)
            try:
                os.chdir(cwd)
            except OSError as exc:
                message = (
                    f"slurmstepd: error: couldn't chdir to `{cwd}': {exc.strerror}: "
                    "going to /tmp instead\n"
                )
                os.write(2, message.encode())
                os.chdir("/tmp")
            os.execve(sys.executable, [sys.executable, "-I", "-m", SRUN, *argv], env)
        except OSError as exc:
            os.write(2, f"srun: error: cannot start srun: {exc}\n".encode())
        os._exit(1)
    relay.srun = pid
    for fd in set(child_fds):
        os.close(fd)
    channel.sock.setblocking(False)
    return relay.run()


# -- the client's side ----------------------------------------------------------------


class Terminal:
    """The client's terminal in raw mode while a ``--pty`` step runs (restored on exit)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.saved: list[Any] | None = None

    def __enter__(self) -> Terminal:
        import tty

        with contextlib.suppress(termios.error):
            self.saved = termios.tcgetattr(self.fd)
            tty.setraw(self.fd)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.saved is not None:
            with contextlib.suppress(termios.error):
                termios.tcsetattr(self.fd, termios.TCSAFLUSH, self.saved)


def winsize(fd: int) -> tuple[int, int]:
    try:
        raw = fcntl.ioctl(fd, termios.TIOCGWINSZ, b"\0" * 8)
    except OSError:
        return 0, 0
    rows, cols, _, _ = struct.unpack("HHHH", raw)
    return rows, cols


def pump(
    channel: Channel,
    *,
    stdin: int | None,
    on_control: Callable[[dict[str, Any]], bool],
    wakeup: int | None = None,
    on_wakeup: Callable[[bytes], None] | None = None,
    ranked: bool = False,
    label: bool = False,
) -> None:
    """The client's loop: ``stdin`` (None: none) to the step, its output to fds 1 and 2,
    each CONTROL message to ``on_control`` (which returns False to stop); ``wakeup`` is
    a signal wake-up fd, ``on_wakeup`` called with what it got (a byte per signal
    delivered: two Ctrl-C in quick succession are two). ``ranked``: the output
    comes with each task's rank (an attached client), ``label`` puts ``rank: `` in
    front of every line."""
    channel.sock.setblocking(False)
    sources: list[int] = [] if stdin is None else [stdin]
    while not channel.closed:
        watched: list[Any] = [channel, *sources]
        if wakeup is not None:
            watched.append(wakeup)
        try:
            ready, _, _ = select.select(watched, [], [], 1.0)
        except InterruptedError:
            ready = []
        signals = b""
        if wakeup is not None and wakeup in ready:
            with contextlib.suppress(BlockingIOError):
                while chunk := os.read(wakeup, 512):
                    signals += chunk
        if on_wakeup is not None and signals:
            on_wakeup(signals)
        if stdin is not None and stdin in ready:
            try:
                data = os.read(stdin, 1 << 16)
            except OSError:
                data = b""
            channel.send(STDIN, data)
            if not data:
                sources.remove(stdin)
        if channel in ready:
            frames = channel.receive()
            if frames is None:
                return
            for kind, payload in frames:
                if kind in (STDOUT, STDERR) and ranked:
                    (rank,) = RANK.unpack_from(payload)
                    data = payload[RANK.size :]
                    if label:
                        lines = data.splitlines(keepends=True)
                        data = b"".join(f"{rank}: ".encode() + line for line in lines)
                    write_all(kind, data)
                elif kind in (STDOUT, STDERR):
                    write_all(kind, payload)
                elif kind == CONTROL:
                    message = json.loads(payload)
                    if isinstance(message, dict) and not on_control(message):
                        return


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (a reader that went away loses the rest)."""
    with contextlib.suppress(OSError):
        while data:
            n = os.write(fd, data)
            data = data[n:]


def task_ranges(ranks: list[int]) -> str:
    """Task numbers as srun lists them: ``0-3,5``."""
    ranks = sorted(ranks)
    parts: list[str] = []
    start = prev = ranks[0]
    for r in [*ranks[1:], None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if r is not None:
            start = prev = r
    return ",".join(parts)


# -- usage of running steps (sstat) -----------------------------------------------------


def proc_table() -> dict[int, list[int]]:
    """Each process's children, from ``/proc/*/stat``."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                raw = fh.read()
        except OSError:
            continue
        fields = raw[raw.rfind(b")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(name))
    return children


def _process_usage(pid: int) -> tuple[float, int, int, int, int] | None:
    """CPU seconds (its own and its reaped children's), RSS and peak RSS (KiB), virtual
    size (KiB) and major page faults of one process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
            status = fh.read()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = sum(int(fields[i]) for i in (11, 12, 13, 14)) / ticks
    majflt = int(fields[9])
    values: dict[str, int] = {}
    for line in status.splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM", "VmSize"):
            values[key] = int(rest.split()[0])
    return cpu, values.get("VmRSS", 0), values.get("VmHWM", 0), values.get("VmSize", 0), majflt


def step_usage(jobdir: str) -> list[dict[str, Any]]:
    """The running steps' usage, task by task (each task with its descendants), as
    ``jobacct_gather/linux`` samples it: ``[{"step", "tasks": [{"rank", "cpu",
    "rssKb", "maxRssKb", "vmSizeKb", "pages"}]}]``."""
    folder = os.path.join(jobdir, "steps")
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    running = sorted(
        int(n[: -len(".pids")]) for n in names if n.endswith(".pids") and n[0].isdigit()
    )
    if not running:
        return []
    children = proc_table()
    out: list[dict[str, Any]] = []
    for step in running:
        tasks = [
            {"rank": rank, **tree_usage(pid, children)}
            for rank, pid in enumerate(step_pids(jobdir, step))
        ]
        out.append({"step": step, "tasks": tasks})
    return out


def tree_usage(pid: int, children: dict[int, list[int]] | None = None) -> dict[str, Any]:
    """The usage of process ``pid`` and its descendants (``children``: from
    :func:`proc_table`, read once for many calls): ``{"pid", "cpu", "rssKb",
    "maxRssKb", "vmSizeKb", "pages"}``."""
    children = proc_table() if children is None else children
    todo, total = [pid], [0.0, 0, 0, 0, 0]
    seen: set[int] = set()
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        usage = _process_usage(current)
        if usage is not None:
            for i, value in enumerate(usage):
                total[i] += value
        todo.extend(children.get(current, ()))
    return {
        "pid": pid,
        "cpu": round(float(total[0]), 3),
        "rssKb": int(total[1]),
        "maxRssKb": int(total[2]),
        "vmSizeKb": int(total[3]),
        "pages": int(total[4]),
    }
