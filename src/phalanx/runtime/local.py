"""The local runtime: one detached supervisor process per job attempt, on this machine.

Every attempt of a job gets ``STATE/runtime/jobs/<job_id>/<attempt>/``; its
creation (``os.mkdir``) is the guard that keeps an attempt from being launched
twice, and its ``taken`` file (:func:`phalanx.runtime.supervisor.take`) the one
that keeps it from running twice: an attempt given up as never started is taken
here first, so a supervisor that comes up late runs nothing.
The control plane writes ``launch.json`` there and starts
``python -I -m phalanx.runtime.supervisor DIR`` (see
:mod:`phalanx.runtime.supervisor`), which detaches and reports through
``status.json``. :meth:`LocalRuntime.poll` turns those files into
:class:`~phalanx.runtime.spec.Started` / :class:`~phalanx.runtime.spec.Exited`
events; a supervisor that vanished without writing its exit (its lock on
``supervisor.lock`` is free) ends its job ``FAILED`` ("supervisor lost", its
tasks killed with SIGKILL), or ``NODE_FAIL`` when it never started (nothing ran,
and the control plane launches the job again).

Supervisors are forked by a fork server (:mod:`phalanx.runtime.forkserver`,
about a millisecond each instead of a fresh interpreter); if it cannot be
used the supervisor command is run directly.

``-I`` (isolated mode) is used on purpose: the supervisor ignores
``PYTHONPATH``, the user site and the current directory, and finds phalanx in
the interpreter's site-packages (the editable install's ``.pth`` hook keeps
working under ``-I``). Set :attr:`LocalRuntime.supervisor_command` to change it.

With ``run_as`` (a server running as root, see :mod:`phalanx.runtime.accounts`)
every attempt runs as its user's Unix account: the runtime writes the job
directory as root, then gives it (mode 0700) to the account, and the
supervisor becomes the account before anything else. Every file the runtime
touches there afterwards is opened without following symlinks and read only
when it is a regular file, and a pid read from there is signalled only when
the process is the account's: the account may have changed any of them.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import errno
import fcntl
import json
import logging
import os
import secrets
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from phalanx.errors import PhalanxError
from phalanx.runtime.accounts import reachable
from phalanx.runtime.batch import slurm_files, write_bin, write_files
from phalanx.runtime.spec import (
    Account,
    AlreadyLaunched,
    Checkpointed,
    Exited,
    LaunchSpec,
    RuntimeEvent,
    Started,
    StepsReported,
    TaskSpec,
)
from phalanx.runtime.supervisor import take

__all__ = ["LocalRuntime"]

log = logging.getLogger(__name__)


def _find_nss_wrapper() -> str | None:
    for folder in (
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
    ):
        path = os.path.join(folder, "libnss_wrapper.so")
        if os.path.exists(path):
            return path
    return None


NSS_WRAPPER = _find_nss_wrapper()
"""nss_wrapper, to make the virtual nodes' names resolve inside jobs (None: not installed)."""

LIVENESS_INTERVAL_S = 1.0
"""How often (per job) :meth:`LocalRuntime.poll` checks that a supervisor is alive."""

START_GRACE_S = 10.0
"""How long an adopted attempt may lack both ``status.json`` and a live supervisor."""


@dataclass(slots=True)
class _Attempt:
    job_id: int
    attempt: int
    path: Path
    process: subprocess.Popen[bytes] | None = None
    """The first supervisor process (it exits once the real one holds the lock)."""
    failed_to_start: bool = False
    status_key: tuple[int, int, int, int] | None = None
    status: dict[str, Any] = field(default_factory=dict)
    started: bool = False
    exited: bool = False
    checkpoint_at: float | None = None
    steps: list[Any] | None = None
    next_liveness: float = 0.0
    tracked_at: float = field(default_factory=time.monotonic)
    status_path: str = field(init=False, default="")
    """``path / "status.json"`` as text: stat-ed at every poll of every attempt."""

    def __post_init__(self) -> None:
        self.status_path = os.path.join(self.path, "status.json")


class LocalRuntime:
    """Runs admitted jobs on this machine, one detached supervisor per attempt."""

    def __init__(self, state_dir: Path, *, run_as: Callable[[str], Account] | None = None) -> None:
        self.state_dir = Path(state_dir)
        self.root = self.state_dir / "runtime"
        self.jobs_dir = self.root / "jobs"
        self.logs_dir = self.root / "logs"
        self.jobs_dir.mkdir(parents=True, exist_ok=True)
        self.run_as = run_as
        """The account a user's jobs run as (raises :class:`~phalanx.errors.PhalanxError`
        when there is none); ``None``: every job runs as this process's user."""
        if run_as is not None:
            self.logs_dir.mkdir(exist_ok=True)
            # Other accounts' supervisors enter these whatever the server's umask.
            for folder in (self.root, self.jobs_dir, self.logs_dir):
                folder.chmod(0o755)
            python = os.path.realpath(sys.executable)
            if reachable(python) is not None:
                log.warning(
                    "%s is in %s, which other accounts cannot enter: srun, scontrol and "
                    "Kubernetes pods in the jobs of users other than root will fail "
                    "(install phalanx where every user can read it)",
                    python,
                    reachable(python),
                )
        self.supervisor_command: list[str] = [
            sys.executable,
            "-I",
            "-m",
            "phalanx.runtime.supervisor",
        ]
        """The command line the job directory is appended to."""
        self._default_command = list(self.supervisor_command)
        self.use_forkserver = True
        """Fork supervisors from a fork server (only with the default supervisor command)."""
        self._forkserver: subprocess.Popen[bytes] | None = None
        self._unanswered: collections.deque[_Attempt] = collections.deque()
        """Launches sent to the fork server whose answer has not been read, in order."""
        self._answer_buffer = b""
        self._attempts: dict[tuple[int, int], _Attempt] = {}
        self._backlog: list[RuntimeEvent] = []

    # -- paths ----------------------------------------------------------------

    def attempt_dir(self, job_id: int, attempt: int) -> Path:
        return self.jobs_dir / str(job_id) / str(attempt)

    def default_output(self, job_id: int) -> Path:
        """Where a job's output goes when the submission names no file."""
        return self.logs_dir / f"{job_id}.out"

    # -- commands -------------------------------------------------------------

    def launch(self, spec: LaunchSpec) -> None:
        """Start the supervisor of ``spec``'s attempt; :class:`AlreadyLaunched` if it exists."""
        path = self.attempt_dir(spec.job_id, spec.attempt)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(path)
        except FileExistsError:
            raise AlreadyLaunched(
                f"job {spec.job_id} attempt {spec.attempt} was launched already ({path})"
            ) from None
        record = _Attempt(spec.job_id, spec.attempt, path)
        if self.run_as is not None:
            try:
                account = self.run_as(spec.user)
                # Root's own jobs run as the server itself, as without accounts.
                if account.uid != os.geteuid():
                    spec = dataclasses.replace(spec, account=account)
            except PhalanxError as exc:
                self._attempts[(spec.job_id, spec.attempt)] = record
                _write_json(path / "status.json", _failed(str(exc.detail)))
                return
        if spec.script is not None or spec.slurm is not None:
            spec = self._prepare_slurm(path, spec)
        spec = self._with_node_names(spec)
        if spec.kube is not None:
            spec = self._prepare_kube(path, spec)
        # Written in place: the directory is new, and nothing reads it before the
        # supervisor starts (a crash before then ends the attempt NODE_FAIL, unread).
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        fd = os.open(path / "launch.json", flags, 0o644)
        with open(fd, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(_spec_dict(spec)))
        if spec.account is not None:
            self._give(path, spec)
        self._attempts[(spec.job_id, spec.attempt)] = record
        direct = not self.use_forkserver or self.supervisor_command != self._default_command
        if direct or not self._fork(record):
            self._start_directly(record)

    def _give(self, path: Path, spec: LaunchSpec) -> None:
        """Hand the attempt's directory to its account (``launch.json`` stays root's).

        Also the default output files, in the runtime's own ``logs`` folder, which
        the account cannot write.
        """
        account = spec.account
        assert account is not None
        os.mkdir(path / "signals", 0o755)
        os.close(os.open(path / "supervisor.log", os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644))
        os.chmod(path / "launch.json", 0o644)
        for folder, dirs, files in os.walk(path):
            for name in [*dirs, *files]:
                if folder == str(path) and name == "launch.json":
                    continue
                os.chown(
                    os.path.join(folder, name), account.uid, account.gid, follow_symlinks=False
                )
        for output in {spec.output, spec.error}:
            if output is not None and Path(output).parent == self.logs_dir:
                flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                out = os.open(output, flags, 0o644)
                try:
                    os.fchown(out, account.uid, account.gid)
                finally:
                    os.close(out)
        os.chmod(path, 0o700)
        os.chown(path, account.uid, account.gid)

    def set_node_names(self, names: Iterable[str]) -> None:
        """The virtual nodes' names: inside jobs they resolve to this machine.

        Every virtual node runs here, but a job script takes ``MASTER_ADDR`` from
        ``scontrol show hostnames`` and torch's rendezvous resolves it. With
        nss_wrapper (Debian's ``libnss-wrapper``) installed, tasks get it preloaded
        with a hosts file naming every node as 127.0.0.1 and ::1, and ``gethostname()`` is
        the task's node; without it the names resolve only where DNS or
        /etc/hosts knows them.
        """
        hosts = self.root / "hosts"
        # Both families: torch's TCPStore asks for IPv6 first and does not fall back
        # to IPv4 for a name nss_wrapper knows.
        lines = "".join(f"127.0.0.1 {name}\n::1 {name}\n" for name in sorted(set(names)))
        tmp = hosts.with_name("hosts.tmp")
        tmp.write_text(lines, encoding="ascii")
        os.replace(tmp, hosts)

    def _with_node_names(self, spec: LaunchSpec) -> LaunchSpec:
        hosts = self.root / "hosts"
        if NSS_WRAPPER is None or not hosts.exists():
            return spec
        tasks = []
        for task in spec.tasks:
            preload = task.env.get("LD_PRELOAD") or spec.env.get("LD_PRELOAD") or ""
            env = {
                **task.env,
                "LD_PRELOAD": f"{NSS_WRAPPER} {preload}".strip(),
                "NSS_WRAPPER_HOSTS": str(hosts),
                # gethostname() is the virtual node's name, as on a real node: torch's
                # rendezvous decides by it which agent hosts the store.
                "NSS_WRAPPER_HOSTNAME": task.node,
            }
            tasks.append(dataclasses.replace(task, env=env))
        return dataclasses.replace(spec, tasks=tuple(tasks))

    def _prepare_kube(self, path: Path, spec: LaunchSpec) -> LaunchSpec:
        """Every task runs :mod:`phalanx.runtime.kubepod`; ``JOBDIR/hosts`` adds the pod names.

        The pods' names resolve like the nodes' (to this machine): the job's
        hosts file is the nodes' plus one line pair per pod.
        """
        try:
            nodes = (self.root / "hosts").read_text(encoding="ascii")
        except FileNotFoundError:
            nodes = ""
        names = sorted(set(spec.kube.get("podNames") or ())) if spec.kube else []
        lines = nodes + "".join(f"127.0.0.1 {name}\n::1 {name}\n" for name in names)
        (path / "hosts").write_text(lines, encoding="ascii")
        command = (*self._default_command[:-1], "phalanx.runtime.kubepod", str(path))
        return dataclasses.replace(spec, command=command)

    def bin_dir(self) -> Path:
        """``STATE/runtime/bin``: ``srun`` and ``scontrol`` for batch scripts (written once)."""
        return write_bin(self.root / "bin", sys.executable)

    def _prepare_slurm(self, path: Path, spec: LaunchSpec) -> LaunchSpec:
        """Write ``slurm.json`` and ``script``; make ``tasks[0]`` run the batch script
        (:func:`phalanx.runtime.batch.slurm_files`)."""
        spec, files = slurm_files(spec, str(path), str(self.bin_dir()))
        write_files(path, files)
        return spec

    def _fork(self, record: _Attempt) -> bool:
        """Ask the fork server to start the supervisor of ``record``; False if it cannot.

        The request is written and the answer read later (:meth:`_answers`), so a
        cycle's launches go out one after the other without waiting for each fork.
        """
        server = self._forkserver
        if server is not None and server.poll() is not None:
            self._answers()  # what it answered before it went
            if self._forkserver is not None:
                self._forkserver_died()
            server = None
        if server is None:
            server = self._start_forkserver()
            if server is None:
                return False
        assert server.stdin is not None
        try:
            server.stdin.write(f"{record.path}\n".encode())
            server.stdin.flush()
        except OSError:
            self._forkserver_died()
            return False
        self._unanswered.append(record)
        self._answers()
        return True

    def _start_forkserver(self) -> subprocess.Popen[bytes] | None:
        try:
            server = subprocess.Popen(
                [*self._default_command[:-1], "phalanx.runtime.forkserver"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                close_fds=True,
                start_new_session=True,
                cwd="/",
            )
        except OSError:
            self.use_forkserver = False
            return None
        assert server.stdout is not None
        os.set_blocking(server.stdout.fileno(), False)
        self._forkserver = server
        self._answer_buffer = b""
        return server

    def _answers(self) -> None:
        """Read the fork server's answers so far: ``ok PID``, or ``error MESSAGE``, in the
        order of the requests; a refused one is started directly."""
        server = self._forkserver
        if server is None or not self._unanswered:
            return
        assert server.stdout is not None
        gone = False
        while True:
            try:
                chunk = os.read(server.stdout.fileno(), 65536)
            except BlockingIOError:
                break
            except OSError:
                chunk = b""
            if not chunk:
                gone = True
                break
            self._answer_buffer += chunk
        *lines, self._answer_buffer = self._answer_buffer.split(b"\n")
        for line in lines:
            if not self._unanswered:
                break
            record = self._unanswered.popleft()
            if not line.startswith(b"ok "):
                self._start_directly(record)
        if gone:
            self._forkserver_died()

    def _forkserver_died(self) -> None:
        """The fork server is gone: the requests it did not answer are started directly,
        unless their supervisor came up before it went. The next launch starts a new one."""
        server, self._forkserver = self._forkserver, None
        if server is not None:
            with contextlib.suppress(OSError):
                server.kill()
            server.wait()
        pending, self._unanswered = self._unanswered, collections.deque()
        for record in pending:
            if not (record.path / "supervisor.pid").exists() and not _supervisor_alive(record.path):
                self._start_directly(record)

    def _start_directly(self, record: _Attempt) -> None:
        """Start the supervisor command of ``record`` as a child process."""
        path = record.path
        fd = os.open(
            path / "supervisor.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644
        )
        with open(fd, "ab") as log:
            try:
                record.process = subprocess.Popen(
                    [*self.supervisor_command, str(path)],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    close_fds=True,
                    start_new_session=True,
                    cwd="/",
                )
            except OSError as exc:
                # The directory exists now, so it is never retried: report NODE_FAIL.
                log.write(f"cannot start the supervisor: {exc}\n".encode())
                record.failed_to_start = True

    def cancel(self, job_id: int, *, preempt_grace_s: float | None = None) -> None:
        """Cancel the current attempt of ``job_id`` (marker file first, then SIGTERM).

        ``preempt_grace_s`` (not None) makes it a preemption: the job ends PREEMPTED,
        and its tasks get that many seconds between SIGTERM and SIGKILL (0: the
        job's kill wait).
        """
        attempt = self._current_attempt(job_id)
        if attempt is None:
            return
        path = self.attempt_dir(job_id, attempt)
        with contextlib.suppress(FileNotFoundError):
            if preempt_grace_s is None:
                _write_file(path / "cancel", "")
            else:
                # Complete before it exists: the supervisor reads it as soon as it sees it.
                _write_json(path / "cancel", {"reason": "PREEMPTED", "grace_s": preempt_grace_s})
        pid = _read_pid(path)
        if pid is not None and _supervisor_alive(path) and _may_signal(path, pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGTERM)

    def signal(self, job_id: int, signum: int, *, batch_only: bool = False) -> None:
        """Deliver ``signum`` to the current attempt's tasks (or only its batch shell).

        The request is a file the supervisor picks up within a tick, so it is
        delivered by the process that owns the tasks.
        """
        attempt = self._current_attempt(job_id)
        if attempt is None:
            return
        folder = self.attempt_dir(job_id, attempt) / "signals"
        with contextlib.suppress(FileExistsError):
            folder.mkdir()
        name = f"{time.time_ns()}-{os.getpid()}.json"
        body = json.dumps({"signal": int(signum), "batch_only": batch_only})
        # Not through a symlink: the folder may be the job's account's (which may
        # also have made it something else: then the request is dropped).
        try:
            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            return
        try:
            _write_file(Path(name), body, dir_fd=fd)
        finally:
            os.close(fd)

    def set_time_limit(self, job_id: int, seconds: float | None) -> None:
        """Change the running attempt's time limit (seconds from its start; None: none)."""
        attempt = self._current_attempt(job_id)
        if attempt is None:
            return
        path = self.attempt_dir(job_id, attempt) / "time_limit"
        _write_file(path, "none" if seconds is None else f"{seconds:.3f}")

    def adopt(self, job_id: int, attempt: int) -> bool:
        """Track an attempt started before a restart; False when it was never launched."""
        key = (job_id, attempt)
        if key in self._attempts:
            return True
        path = self.attempt_dir(job_id, attempt)
        if not path.is_dir():
            return False
        self._attempts[key] = _Attempt(job_id, attempt, path)
        return True

    def forget(self, job_id: int, attempt: int | None = None) -> None:
        """Stop tracking ``attempt`` (default: every attempt) of ``job_id``; supervisors run on."""
        for key in [k for k in self._attempts if k[0] == job_id and attempt in (None, k[1])]:
            record = self._attempts.pop(key)
            if record.process is not None:
                record.process.poll()
        self._backlog = [
            e for e in self._backlog if not (e.job_id == job_id and attempt in (None, e.attempt))
        ]

    def close(self) -> None:
        """Stop tracking; running supervisors keep running."""
        server = self._forkserver
        if server is not None:
            with contextlib.suppress(OSError):
                assert server.stdin is not None
                server.stdin.close()
            # It answers what it was sent before it exits: read that to the end.
            assert server.stdout is not None
            os.set_blocking(server.stdout.fileno(), True)
            while self._unanswered and self._forkserver is not None:
                self._answers()
            self._forkserver = None
            with contextlib.suppress(subprocess.TimeoutExpired):
                server.wait(timeout=5)
        for record in self._attempts.values():
            if record.process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    record.process.wait(timeout=1.0)
        self._attempts.clear()
        self._backlog.clear()

    # -- events ---------------------------------------------------------------

    def poll(self) -> list[RuntimeEvent]:
        """Events since the last call: Started once per attempt, then Exited once."""
        self._collect()
        events, self._backlog = self._backlog, []
        return events

    def next_event_time(self) -> float | None:
        """Unknown: supervisors report through files, found by polling every interval."""
        return None

    def wait(self, job_id: int, timeout: float) -> Exited | None:
        """Poll until ``job_id`` exits (its events stay queued for :meth:`poll`)."""
        deadline = time.monotonic() + timeout
        while True:
            self._collect()
            for event in self._backlog:
                if isinstance(event, Exited) and event.job_id == job_id:
                    return event
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.02)

    def _collect(self) -> None:
        self._answers()
        now = time.monotonic()
        for record in list(self._attempts.values()):
            if record.exited:
                continue
            if record.process is not None:
                rc = record.process.poll()
                if rc is not None:
                    record.process = None
                    if rc != 0:
                        record.failed_to_start = True
                        record.next_liveness = now  # find out at once
            if self._read_status(record):
                self._report(record)
            if record.exited or now < record.next_liveness:
                continue
            record.next_liveness = now + LIVENESS_INTERVAL_S
            if record.process is not None or _supervisor_alive(record.path):
                continue
            had_status = bool(record.status)
            if self._reread(record):
                continue  # dead, having written its exit just before going
            if (
                not had_status
                and record.status
                and (_supervisor_alive(record.path) or self._reread(record))
            ):
                # Its first status is newer than the check above: it started since,
                # and is alive, or has ended already and said so.
                continue
            if (
                not record.status
                and not record.failed_to_start
                and now - record.tracked_at < START_GRACE_S
                and not (record.path / "supervisor.pid").exists()
            ):
                continue  # adopted while a previous control plane was still starting it
            # Not started: taken here, unless a supervisor took it after all (it reports,
            # unless it died before its first status: then nothing ran).
            if (
                not record.status
                and not take(str(record.path))
                and (_supervisor_alive(record.path) or self._reread(record))
            ):
                continue
            message = "supervisor failed to start" if not record.status else "supervisor lost"
            self._lost(record, message)

    def _reread(self, record: _Attempt) -> bool:
        """Read ``status.json`` again, changed or not, and report it; whether it says the
        attempt exited."""
        record.status_key = None
        if self._read_status(record):
            self._report(record)
        return record.exited

    def _read_status(self, record: _Attempt) -> bool:
        path = record.status_path
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return False
        key = (st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_size)
        if key == record.status_key:
            return False
        try:
            status = json.loads(_read_small(path))
        except (OSError, ValueError):
            return False
        if not isinstance(status, dict):
            return False
        record.status_key = key
        record.status = status
        return True

    def _report(self, record: _Attempt) -> None:
        status = record.status
        state = status.get("state")
        start = status.get("start_time")
        # A Kubernetes job starts when its pods are all running (Kueue's PodsReady).
        # A job whose pods never all ran exits without having started.
        ready = status.get("ready", True)
        if state in ("running", "exited") and start is not None and ready and not record.started:
            record.started = True
            self._backlog.append(Started(record.job_id, record.attempt, float(start)))
        checkpoint = status.get("checkpoint_at")
        if isinstance(checkpoint, (int, float)) and checkpoint != record.checkpoint_at:
            record.checkpoint_at = float(checkpoint)
            self._backlog.append(Checkpointed(record.job_id, record.attempt, float(checkpoint)))
        steps = status.get("steps")
        if isinstance(steps, list) and steps != record.steps:
            record.steps = steps
            self._backlog.append(StepsReported(record.job_id, record.attempt, tuple(steps)))
        if state == "exited":
            record.exited = True
            self._backlog.append(
                Exited(
                    job_id=record.job_id,
                    attempt=record.attempt,
                    state=str(status.get("job_state") or "FAILED"),
                    exit_code=status.get("exit_code"),
                    signal=status.get("signal"),
                    start_time=float(start) if start is not None else None,
                    end_time=float(status.get("end_time") or time.time()),
                    message=str(status.get("message") or ""),
                )
            )

    def _lost(self, record: _Attempt, message: str) -> None:
        record.exited = True
        # Its tasks must not outlive it holding GPUs that are about to be given away;
        # each task leads its own process group (best effort).
        killed = False
        for pid in record.status.get("tasks") or ():
            if isinstance(pid, int) and pid > 1 and _may_signal(record.path, pid):
                killed = True
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)
        start = record.status.get("start_time")
        # One that had started failed with its supervisor (FAILED, as Slurm's job whose
        # step daemon died); one that never started did not run at all (NODE_FAIL: the
        # control plane launches it again).
        failed = bool(record.status)
        if failed:
            detail = "the job's supervisor process died without reporting its end"
            if killed:
                detail += "; its tasks were killed (SIGKILL)"
            message = f"{message}: {detail}"
        self._backlog.append(
            Exited(
                job_id=record.job_id,
                attempt=record.attempt,
                state="FAILED" if failed else "NODE_FAIL",
                exit_code=None,
                signal=int(signal.SIGKILL) if killed else None,
                start_time=float(start) if start is not None else None,
                end_time=time.time(),
                message=message,
            )
        )

    def step_socket(self, job_id: int) -> str | None:
        """The running job's step socket (:mod:`phalanx.runtime.stepd`), if it listens."""
        attempt = self._current_attempt(job_id)
        if attempt is None:
            return None
        path = self.attempt_dir(job_id, attempt) / "step.sock"
        return str(path) if path.exists() else None

    def step_usage(self, job_id: int) -> list[dict[str, Any]]:
        """The running steps' usage, read from ``/proc`` (``sstat``)."""
        from phalanx.runtime.stepd import step_usage

        attempt = self._current_attempt(job_id)
        if attempt is None:
            return []
        return step_usage(str(self.attempt_dir(job_id, attempt)))

    def _current_attempt(self, job_id: int) -> int | None:
        tracked = [a for (j, a) in self._attempts if j == job_id]
        if tracked:
            return max(tracked)
        try:
            names = os.listdir(self.jobs_dir / str(job_id))
        except FileNotFoundError:
            return None
        attempts = [int(n) for n in names if n.isdigit()]
        return max(attempts) if attempts else None


def _spec_dict(spec: LaunchSpec) -> dict[str, Any]:
    """``dataclasses.asdict(spec)`` as far as JSON can tell, without its deep copies (the
    dict is only written out)."""
    data = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}
    data["tasks"] = [_task_dict(t) for t in spec.tasks]
    data["allocation"] = [_task_dict(t) for t in spec.allocation]
    if spec.account is not None:
        data["account"] = dataclasses.asdict(spec.account)
    return data


def _task_dict(task: TaskSpec) -> dict[str, Any]:
    return {f.name: getattr(task, f.name) for f in dataclasses.fields(task)}


def _write_json(path: Path, data: dict[str, Any]) -> None:
    _write_file(path, json.dumps(data))


def _write_file(path: Path, text: str, *, dir_fd: int | None = None) -> None:
    """Write ``path`` atomically through a fresh temporary file that no one could have
    planted (a random name, ``O_EXCL``, ``O_NOFOLLOW``)."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    fd = os.open(tmp, flags, 0o644, dir_fd=dir_fd)
    with open(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def _read_small(path: str | Path, limit: int = 1 << 24) -> str:
    """A regular file's text, never through a symlink nor blocking on a FIFO."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with open(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        return fh.read(limit).decode("utf-8")


def _failed(message: str) -> dict[str, Any]:
    """The status of an attempt that failed before its supervisor could start."""
    return {
        "state": "exited",
        "pid": None,
        "tasks": [],
        "start_time": None,
        "end_time": time.time(),
        "job_state": "FAILED",
        "exit_code": 1,
        "signal": None,
        "message": message,
    }


def _uid_of(pid: int) -> int | None:
    """The real uid of process ``pid`` (None when it is gone or unknown)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _may_signal(path: Path, pid: int) -> bool:
    """Whether the runtime may signal ``pid``, read from the attempt directory ``path``.

    A directory that belongs to another account (a job that runs as its user)
    holds what that account wrote: its pids are signalled only when they are its.
    """
    try:
        owner = os.stat(path).st_uid
    except OSError:
        return False
    return owner == os.geteuid() or _uid_of(pid) == owner


def _read_pid(path: Path) -> int | None:
    try:
        return int(_read_small(path / "supervisor.pid").strip())
    except (OSError, ValueError):
        pass
    try:
        pid = json.loads(_read_small(path / "status.json")).get("pid")
    except (OSError, ValueError, AttributeError):
        return None
    return int(pid) if isinstance(pid, int) else None


def _supervisor_alive(path: Path) -> bool:
    """True while a supervisor holds ``supervisor.lock`` (a free lock means none is alive)."""
    try:
        fd = os.open(path / "supervisor.lock", os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:  # gone, or not the lock file any more (a symlink, ...)
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return True
        raise
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)
