"""The per-job supervisor: ``python -I -m phalanx.runtime.supervisor JOBDIR``.

Standard library only (and nothing from phalanx), so it starts in a few tens
of milliseconds. The control plane starts it with ``start_new_session=True``,
stdin on ``/dev/null`` and stdout/stderr on ``JOBDIR/supervisor.log``; the
process then forks once more so that the real supervisor is not a child of the
control plane (the first process exits as soon as the second one holds the job
lock), and it keeps running when the control plane is killed. With
``--foreground`` (the Ray runtime's node actors start it so) it stays the child
of the process that started it, and that parent's death counts as the node's:
the tasks are killed and the attempt ends ``NODE_FAIL``.

Files in ``JOBDIR``:

``launch.json``
    The :class:`~phalanx.runtime.spec.LaunchSpec` as JSON (written by the
    control plane before the supervisor starts).
``status.json``
    Written here, atomically (temporary file + ``os.replace``)::

        {"state": "starting|running|exited", "pid", "tasks": [pids],
         "start_time", "end_time", "job_state": "COMPLETED|FAILED|CANCELLED|PREEMPTED|TIMEOUT",
         "exit_code", "signal", "message"}

``supervisor.lock``
    ``flock``-ed (exclusively) by the supervisor for its whole life; a lock
    that can be taken means no supervisor is alive (immune to pid reuse).
``taken``
    Created (``O_EXCL``) by the first supervisor of the attempt once it holds
    the lock, before anything runs, or by the control plane when it gives up an
    attempt that never started (:func:`take`). A supervisor that finds it
    already there runs nothing: an attempt runs at most once, also when a
    second supervisor is started after the first one has finished, or after
    the control plane ended the attempt ``NODE_FAIL`` and launched the job anew.
``supervisor.pid``
    The real supervisor's pid, written by the first process before it exits.
``cancel``
    A marker the control plane creates to cancel; checked before the tasks
    start and every :data:`TICK_S` seconds, so a cancel is never lost even when
    it comes before the supervisor is up. SIGTERM to the supervisor means the
    same thing, immediately. A preemption writes ``{"reason": "PREEMPTED",
    "grace_s": S}`` into it: the job ends PREEMPTED, and with ``S > 0`` its tasks
    get ``S`` seconds between SIGTERM and SIGKILL instead of ``kill_wait_s``.
    With ``preemption_notice`` ``(sig, secs, batch_only)`` in ``launch.json``
    the end is ``S`` seconds away instead: ``sig`` comes ``secs`` before it (at
    once when ``S`` is shorter), then SIGCONT and SIGTERM at the end and SIGKILL
    ``kill_wait_s`` later, as at a time limit.
``checkpoint``
    ``PHALANX_CHECKPOINT_FILE`` of every task: the job touches it when it saved
    its work (``phalanx checkpoint``); each new mtime goes into ``status.json``
    as ``checkpoint_at``.

When ``launch.json`` names an ``account`` (the local runtime of a server
running as root), the supervisor becomes that account (``setgroups``,
``setgid``, ``setuid``) right after reading it, before it forks or writes
anything: its files, the output files (opened with ``O_NOFOLLOW``) and the
tasks are the account's. It believes such a ``launch.json`` only when root
owns it, it has one link and the job directory belongs to the account.

Each task runs in its own process group and session with ``cwd=working_dir``
and an environment built from scratch: ``PATH``, ``HOME`` and ``LANG`` of the
supervisor, then the job's env, the task's env, the account's ``HOME``,
``USER`` and ``LOGNAME`` (when it has one), then ``PHALANX_JOB_ID``,
``PHALANX_NODE_NAME``, ``PHALANX_TASK_RANK``, ``PHALANX_TASK_COUNT`` and, only
when the task has GPUs (as Slurm does), ``CUDA_VISIBLE_DEVICES``.

Job states follow Slurm: COMPLETED when every task exits 0; FAILED otherwise,
with ``exit_code`` the largest exit code and ``signal`` the first terminating
signal (Slurm's derived exit code ``code:signal``); TIMEOUT when
``time_limit_s`` passes, CANCELLED on cancel and PREEMPTED on a preemption, all
after SIGTERM to every task's process group, ``kill_wait_s`` seconds (a
preemption's grace time), then SIGKILL. A missing working
directory fails the job with exit code 1 and a command that cannot be executed
with exit code 2; either way a ``slurmstepd: error:`` line goes to the output
file and into ``message``.

``status.json``'s ``ready`` is false while the pods of a Kubernetes job are
not all running (their init containers run first): each task creates
``JOBDIR/kube/ready/<rank>`` when its containers have started.

A task that fails may leave a line in ``JOBDIR/message`` (the pods of a
Kubernetes job do, see :mod:`phalanx.runtime.kubepod`): it becomes the
FAILED job's ``message``.

Slurm batch jobs (``launch.json`` has ``slurm``; the control plane has already
turned the script into ``tasks[0]``, see ``LocalRuntime._prepare_slurm``):
``open_mode`` ``truncate`` empties the output files when the attempt starts;
``signal`` ``(sig, secs, batch_only)`` is sent once, ``secs`` before the time
limit, to the batch shell (``batch_only``) or to the tasks of the running
``srun`` steps (``steps/<id>.pids``, written by :mod:`phalanx.runtime.srun`),
as Slurm's ``--signal=[B:]SIG@secs``. Cancel and time limit write
``terminating`` (the reason; srun then does not forward the group's SIGTERM
again) and ``slurmstepd: error: *** JOB <id> ON <node> CANCELLED AT <time>[ DUE
TO TIME LIMIT] ***`` to the error output, send SIGCONT and SIGTERM, and wait
up to ``kill_wait_s`` for every process of the task groups (srun's tasks too),
not only for the batch shell, before SIGKILL.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = ["TAKEN", "TICK_S", "forked", "main", "take"]

TICK_S = 0.2
"""Longest sleep of the supervisor loop: how often it looks at the cancel marker."""

BASE_ENV = ("PATH", "HOME", "LANG")
"""Variables taken from the supervisor's own environment into every task's."""

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"

SETTLE_S = 0.05
"""How old a checkpoint file's time must be before it is reported (see check_checkpoint)."""
CLAIM_WAIT_S = 60.0
"""How long an ``srun``/``salloc`` allocation waits for its srun or salloc to connect."""


def _write_json(path: str, data: dict[str, Any]) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)


def _open_append(path: str, truncate: bool = False) -> int:
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    # Never through a symlink as the last component: the file is the job's own.
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | (os.O_TRUNC if truncate else 0)
    return os.open(path, flags, 0o644)


def _read_spec(jobdir: str) -> dict[str, Any]:
    """``launch.json``; with an account in it, only as the runtime wrote it (see
    :func:`_drop_privileges`)."""
    fd = os.open(os.path.join(jobdir, "launch.json"), os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, encoding="utf-8") as fh:
        st = os.fstat(fh.fileno())
        spec: dict[str, Any] = json.load(fh)
    account = spec.get("account")
    if account and os.geteuid() == 0:
        # The job directory belongs to the job's account, which could put a file of
        # its own there: only a launch.json the runtime (root) wrote, not linked from
        # elsewhere, is believed.
        if st.st_uid != 0 or st.st_nlink != 1:
            raise PermissionError(f"{jobdir}/launch.json was not written by the runtime")
        if os.stat(jobdir).st_uid != int(account["uid"]):
            raise PermissionError(f"{jobdir} does not belong to account {account['name']!r}")
    return spec


def _drop_privileges(spec: dict[str, Any]) -> None:
    """Become the job's account (``spec["account"]``): groups, then gid, then uid.

    Done before anything else, so that the supervisor's files, the output files and
    the tasks are the account's, and the kernel refuses what the account may not do.
    """
    account = spec.get("account")
    if not account:
        return
    uid, gid = int(account["uid"]), int(account["gid"])
    if uid == 0:
        raise PermissionError("a job never runs as root (uid 0)")
    if os.geteuid() == uid and os.getegid() == gid:
        return
    os.setgroups([int(g) for g in account.get("groups") or (gid,)])
    os.setgid(gid)
    os.setuid(uid)


def _slurm_time(now: float | None = None) -> str:
    """Slurm's log time stamp, local time: ``2024-05-01T12:00:00``."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(now))


class Supervisor:
    """Runs the tasks of one job attempt and records what happened in ``status.json``."""

    def __init__(self, jobdir: str, spec: dict[str, Any] | None = None) -> None:
        self.jobdir = jobdir
        self.status_path = os.path.join(jobdir, "status.json")
        self.cancel_path = os.path.join(jobdir, "cancel")
        self.terminating_path = os.path.join(jobdir, "terminating")
        self.steps_dir = os.path.join(jobdir, "steps")
        self.spec: dict[str, Any] = _read_spec(jobdir) if spec is None else spec
        self.procs: list[subprocess.Popen[bytes]] = []
        self.returncodes: dict[int, int] = {}
        self.start_time: float | None = None
        self.reason: str | None = None
        """CANCELLED, PREEMPTED or TIMEOUT once termination began."""
        self.kill_deadline: float | None = None
        self.killed = False
        self.cancel_requested = False
        self.cancel_reason = "CANCELLED"
        """CANCELLED, or PREEMPTED when the cancel marker says so."""
        self.cancel_grace: float | None = None
        self.marker_read = False
        self.signal_sent = False
        self.notice_at: float | None = None
        """When the preemption notice is due (``preemption_notice``), once preempted."""
        self.notice_sent = False
        self.term_at: float | None = None
        """When a preempted job with a notice gets SIGTERM (the end of its grace period)."""
        self.checkpoint_path = os.path.join(jobdir, "checkpoint")
        self.checkpoint_mtime: float | None = None
        self.limit_mtime: int | None = None
        self.parent: int | None = None
        """With ``--foreground``: the pid whose death means the node is lost."""
        slurm = self.spec.get("slurm") or {}
        self.allocation: str | None = slurm.get("allocation")
        """``srun``/``salloc``: a job without a batch script, held until released
        (``noshell``: ``salloc --no-shell``, held until cancelled or its time limit)."""
        self.steps: Any = None
        """The step socket (:class:`phalanx.runtime.stepd.StepServer`) of a Slurm job."""
        self.claimed = False
        self.steps_mtime: int | None = None
        self.status_written = False
        self.status: dict[str, Any] = {
            "state": "starting",
            "pid": os.getpid(),
            "tasks": [],
            "start_time": None,
            "end_time": None,
            "job_state": None,
            "exit_code": None,
            "signal": None,
            "message": "",
        }

    # -- status ---------------------------------------------------------------

    def write_status(self, **changes: Any) -> None:
        self.status.update(changes)
        _write_json(self.status_path, self.status)
        self.status_written = True

    def finish(
        self, job_state: str, exit_code: int | None, sig: int | None, message: str = ""
    ) -> None:
        self.write_status(
            state="exited",
            end_time=time.time(),
            job_state=job_state,
            exit_code=exit_code,
            signal=sig,
            message=message,
        )

    # -- signals --------------------------------------------------------------

    def _on_term(self, signum: int, frame: Any) -> None:
        self.cancel_requested = True

    def install_signals(self) -> int:
        rfd, wfd = os.pipe()
        os.set_blocking(rfd, False)
        os.set_blocking(wfd, False)
        signal.set_wakeup_fd(wfd, warn_on_full_buffer=False)
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, self._on_term)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        # Handlers rather than SIG_IGN: caught signals reset to default on exec,
        # ignored ones would stay ignored in the tasks.
        signal.signal(signal.SIGHUP, lambda signum, frame: None)
        return rfd

    def cancelled(self) -> bool:
        if not self.marker_read and os.path.exists(self.cancel_path):
            self.cancel_requested = True
            self.marker_read = True
            self.read_marker()
        return self.cancel_requested

    def read_marker(self) -> None:
        """What the cancel marker says beyond "cancel": a preemption and its grace time."""
        try:
            with open(self.cancel_path, encoding="utf-8") as fh:
                text = fh.read(4096).strip()
            data = json.loads(text) if text else {}
        except (OSError, ValueError):
            return
        if not isinstance(data, dict):
            return
        if data.get("reason") == "PREEMPTED":
            self.cancel_reason = "PREEMPTED"
        grace = data.get("grace_s")
        if isinstance(grace, (int, float)) and grace > 0:
            self.cancel_grace = float(grace)

    # -- tasks ----------------------------------------------------------------

    def task_env(self, task: dict[str, Any]) -> dict[str, str]:
        env = {name: os.environ[name] for name in BASE_ENV if name in os.environ}
        env.setdefault("PATH", DEFAULT_PATH)
        env.update({str(k): str(v) for k, v in (self.spec.get("env") or {}).items()})
        env.update({str(k): str(v) for k, v in (task.get("env") or {}).items()})
        account = self.spec.get("account")
        if account:
            env["HOME"] = str(account["home"])
            env["USER"] = env["LOGNAME"] = str(account["name"])
        env["PHALANX_JOB_ID"] = str(self.spec["job_id"])
        env["PHALANX_NODE_NAME"] = str(task["node"])
        env["PHALANX_TASK_RANK"] = str(task["rank"])
        env["PHALANX_TASK_COUNT"] = str(self.spec.get("task_count") or len(self.spec["tasks"]))
        env["PHALANX_CHECKPOINT_FILE"] = self.checkpoint_path
        gpus = task.get("gpus") or ()
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
        return env

    def launch_error(self, out_fd: int, err_fd: int, message: str) -> None:
        line = f"slurmstepd: error: {message}\n".encode()
        for fd in {out_fd, err_fd}:
            with contextlib.suppress(OSError):
                os.write(fd, line)

    def start_tasks(self) -> tuple[str, int] | None:
        """Start every task; on failure return ``(message, exit_code)``."""
        spec = self.spec
        truncate = spec.get("open_mode") == "truncate"
        out_fd = err_fd = -1
        try:
            out_fd = err_fd = _open_append(spec["output"], truncate)
            if spec.get("error") and spec["error"] != spec["output"]:
                err_fd = _open_append(spec["error"], truncate)
        except OSError as exc:
            # As the job's account: a file it may not write, or a symlink, is refused.
            if out_fd >= 0:
                os.close(out_fd)
            return f"cannot open output file {exc.filename}: {exc.strerror or exc}", 1
        try:
            workdir = spec["working_dir"]
            if not os.path.isdir(workdir):
                message = f"couldn't chdir to `{workdir}': No such file or directory"
                self.launch_error(out_fd, err_fd, message)
                return message, 1
            command = [str(part) for part in spec["command"]]
            if not command:
                message = "execve(): empty command"
                self.launch_error(out_fd, err_fd, message)
                return message, 2
            for task in sorted(spec["tasks"], key=lambda t: int(t["rank"])):
                try:
                    proc = subprocess.Popen(
                        command,
                        cwd=workdir,
                        env=self.task_env(task),
                        stdin=subprocess.DEVNULL,
                        stdout=out_fd,
                        stderr=err_fd,
                        close_fds=True,
                        start_new_session=True,
                        restore_signals=True,
                    )
                except OSError as exc:
                    reason = exc.strerror or str(exc)
                    message = f"execve(): {command[0]}: {reason}"
                    self.launch_error(out_fd, err_fd, message)
                    return message, 2
                self.procs.append(proc)
            return None
        finally:
            os.close(out_fd)
            if err_fd != out_fd:
                os.close(err_fd)

    def pods_ready(self) -> bool:
        """Every task of a Kubernetes job has its first pod's containers running."""
        folder = os.path.join(self.jobdir, "kube", "ready")
        try:
            ready = set(os.listdir(folder))
        except FileNotFoundError:
            return False
        return all(str(task["rank"]) in ready for task in self.spec["tasks"])

    def signal_groups(self, signum: int) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signum)
        if self.steps is not None:
            self.steps.signal(signum)
            if signum == signal.SIGKILL:
                # srun --pty's task 0 leads a session of its own, outside its srun's group.
                self.signal_steps(signum)

    def signal_steps(self, signum: int) -> None:
        """Signal the tasks of the running ``srun`` steps (``steps/<id>.pids``), not the shell."""
        try:
            names = os.listdir(self.steps_dir)
        except FileNotFoundError:
            return
        for name in names:
            if not name.endswith(".pids"):
                continue
            try:
                with open(os.path.join(self.steps_dir, name), encoding="ascii") as fh:
                    pids = [int(word) for word in fh.read().split()]
            except (OSError, ValueError):
                continue
            for pid in pids:
                if pid > 1:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signum)

    def limit_update(self) -> tuple[bool, float | None]:
        """A new time limit from ``JOBDIR/time_limit`` (seconds, or ``none``), once per change."""
        path = os.path.join(self.jobdir, "time_limit")
        try:
            mtime = os.stat(path).st_mtime_ns
        except FileNotFoundError:
            return False, None
        if mtime == self.limit_mtime:
            return False, None
        self.limit_mtime = mtime
        try:
            with open(path, encoding="ascii") as fh:
                text = fh.read().strip()
        except OSError:
            return False, None
        if text == "none":
            return True, None
        try:
            return True, float(text)
        except ValueError:
            return False, None

    def deliver_requested_signals(self) -> None:
        """Signals asked for through ``JOBDIR/signals/*.json`` (``scancel --signal``)."""
        folder = os.path.join(self.jobdir, "signals")
        try:
            names = sorted(os.listdir(folder))
        except FileNotFoundError:
            return
        for name in names:
            path = os.path.join(folder, name)
            if not name.endswith(".json"):
                continue
            try:
                with open(path, encoding="utf-8") as fh:
                    request = json.load(fh)
                os.unlink(path)
            except (OSError, ValueError):
                continue
            signum = int(request.get("signal", 0))
            if not 0 < signum < 65:
                continue
            # As scancel --signal: a batch job's steps, or with --batch its batch shell;
            # a job without a batch script is all tasks.
            if request.get("batch_only"):
                if self.procs and self.procs[0].pid not in self.returncodes:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(self.procs[0].pid, signum)
            elif self.spec.get("script"):
                self.signal_steps(signum)
            else:
                self.signal_groups(signum)

    def send_user_signal(self) -> None:
        """Slurm's ``--signal``: the batch shell only (``B:``), else every step's tasks."""
        self.signal_sent = True
        signum, _, batch_only = self.spec["signal"]
        self.deliver(int(signum), bool(batch_only))

    def deliver(self, signum: int, batch_only: bool) -> None:
        """A ``--signal`` signal: the batch shell only (``B:``), else every step's tasks
        (a job without a batch script: every task)."""
        if batch_only:
            if self.procs and self.procs[0].pid not in self.returncodes:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(self.procs[0].pid, int(signum))
        elif self.spec.get("script"):
            self.signal_steps(int(signum))
        else:
            self.signal_groups(int(signum))

    def check_checkpoint(self, final: bool = False) -> None:
        """The job touched ``PHALANX_CHECKPOINT_FILE``: its time goes into ``status.json``.

        A time younger than :data:`SETTLE_S` waits for the next look (``final``: not):
        ``touch`` creates the file, then sets its time, and one checkpoint must not be
        reported twice."""
        try:
            mtime = os.stat(self.checkpoint_path).st_mtime
        except OSError:
            return
        if not final and time.time() - mtime < SETTLE_S:
            return
        if mtime != self.checkpoint_mtime:
            self.checkpoint_mtime = mtime
            self.write_status(checkpoint_at=mtime)

    def groups_alive(self) -> bool:
        """True while any task's process group still has a member (``srun`` tasks included)."""
        if self.steps is not None and self.steps.alive():
            return True
        for proc in self.procs:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                continue
            except PermissionError:
                return True
            return True
        return False

    def slurm_notice(self, reason: str) -> None:
        """Slurm's ``*** JOB <id> ON <node> CANCELLED AT <time> ... ***`` on the error output."""
        ctx = self.spec.get("slurm")
        if not ctx:
            return
        tasks = self.spec.get("tasks") or [{}]
        node = tasks[0].get("node") or "localhost"
        tail = {"TIMEOUT": " DUE TO TIME LIMIT", "PREEMPTED": " DUE TO PREEMPTION"}.get(reason, "")
        job = ctx.get("jobId", self.spec["job_id"])
        stamp = _slurm_time()
        line = f"slurmstepd: error: *** JOB {job} ON {node} CANCELLED AT {stamp}{tail} ***\n"
        path = self.spec.get("error") or self.spec["output"]
        with contextlib.suppress(OSError):
            fd = _open_append(path)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)

    def reap(self) -> None:
        for proc in self.procs:
            if proc.pid not in self.returncodes:
                rc = proc.poll()
                if rc is not None:
                    self.returncodes[proc.pid] = rc

    def alive(self) -> bool:
        if self.allocation:
            return self.steps is not None and self.steps.released is None
        return len(self.returncodes) < len(self.procs)

    # -- steps from outside the job (srun, salloc, sattach) -----------------------

    def serve_steps(self) -> None:
        """Listen on ``JOBDIR/step.sock`` (a Slurm job): see :mod:`phalanx.runtime.stepd`."""
        if not self.spec.get("slurm"):
            return
        from phalanx.runtime import stepd

        tasks = self.spec.get("tasks") or [{}]
        env = self.task_env(tasks[0]) if tasks[0] else {}
        try:
            self.steps = stepd.StepServer(self.jobdir, env)
        except OSError as exc:
            print(f"supervisor: no step socket: {exc}", file=sys.stderr)

    def hold_expired(self, started: float) -> bool:
        """An allocation that no srun or salloc claimed within :data:`CLAIM_WAIT_S`."""
        if self.allocation in (None, "noshell") or self.steps is None:
            return False
        if self.steps.relays or self.steps.holders:
            self.claimed = True
        return not self.claimed and time.monotonic() - started > CLAIM_WAIT_S

    def collect_steps(self, final: bool = False) -> None:
        """The steps' records (``steps/S.json``, written by srun) into ``status.json``;
        ``final``: the job ended, a step whose srun was killed ended with it."""
        try:
            mtime = os.stat(self.steps_dir).st_mtime_ns
        except OSError:
            return
        if mtime == self.steps_mtime and not final:
            return
        self.steps_mtime = mtime
        records = []
        for name in os.listdir(self.steps_dir):
            if not name.endswith(".json"):
                continue
            with contextlib.suppress(OSError, ValueError):
                with open(os.path.join(self.steps_dir, name), encoding="utf-8") as fh:
                    record = json.load(fh)
                if isinstance(record, dict):
                    records.append(record)
        records.sort(key=lambda r: int(r.get("step") or 0))
        if final:
            state = "NODE_FAIL" if self.reason == "NODE_FAIL" else "CANCELLED"
            for record in records:
                if record.get("state") == "RUNNING":
                    record.update(state=state, end=time.time(), signal=signal.SIGKILL)
        if records != self.status.get("steps"):
            self.write_status(steps=records)

    def begin_termination(self, reason: str) -> None:
        notice = self.spec.get("preemption_notice")
        if reason == "PREEMPTED" and notice:
            # Preemption sets the end to now + the grace period (Slurm's GraceTime); the
            # notice comes its seconds before that end (at once when the grace period is
            # shorter: it is not lengthened), then the end is a time limit's kill.
            self.reason = reason
            now = time.monotonic()
            grace = self.cancel_grace or 0.0
            self.notice_at = max(now, now + grace - float(notice[1]))
            self.term_at = now + grace
            return
        self.terminate(reason)

    def terminate(self, reason: str) -> None:
        self.reason = reason
        self.term_at = None
        # srun reads this: the whole group gets the signal, it must not forward it again.
        with contextlib.suppress(OSError), open(self.terminating_path, "w") as fh:
            fh.write(reason)
        self.slurm_notice(reason)
        self.signal_groups(signal.SIGCONT)
        self.signal_groups(signal.SIGTERM)
        wait = float(self.spec.get("kill_wait_s", 30.0))
        if reason == "PREEMPTED" and self.cancel_grace is not None and not self.notice_sent:
            wait = self.cancel_grace
        self.kill_deadline = time.monotonic() + wait

    # -- main loop ------------------------------------------------------------

    def run(self) -> None:
        wakeup = self.install_signals()
        if not self.status_written:
            self.write_status()
        if self.cancelled():
            self.finish(self.cancel_reason, None, None, "cancelled before start")
            return
        self.start_time = time.time()
        started = time.monotonic()
        failure = None if self.allocation else self.start_tasks()
        self.serve_steps()
        kube = self.spec.get("kube") is not None
        self.write_status(
            state="running",
            tasks=[proc.pid for proc in self.procs],
            start_time=self.start_time,
            ready=not kube,
        )
        if failure is not None:
            message, code = failure
            if self.procs:
                self.signal_groups(signal.SIGKILL)
                for proc in self.procs:
                    proc.wait()
            self.finish("FAILED", code, None, message)
            return
        limit = self.spec.get("time_limit_s")
        deadline = started + float(limit) if limit is not None else None
        signal_at: float | None = None
        if self.spec.get("signal") and deadline is not None:
            signal_at = max(started, deadline - float(self.spec["signal"][1]))
        while True:
            self.reap()
            if not self.status["ready"] and self.pods_ready():
                self.write_status(ready=True)
            changed, new_limit = self.limit_update()
            if changed and self.reason is None:
                deadline = started + new_limit if new_limit is not None else None
                signal_at = None
                if self.spec.get("signal") and deadline is not None:
                    signal_at = max(started, deadline - float(self.spec["signal"][1]))
            self.deliver_requested_signals()
            if self.steps is not None:
                self.steps.reap()
                if self.reason is None and self.hold_expired(started):
                    self.steps.released = (0, None, False)
            self.collect_steps()
            if self.allocation and self.reason is not None:
                if self.killed or not self.groups_alive():
                    break
            elif not self.alive() and (
                self.reason is None or self.killed or not self.groups_alive()
            ):
                # On cancel and time limit the tasks' children (srun's tasks) get
                # kill_wait seconds too, even when the batch shell died at once.
                break
            if self.parent is not None and os.getppid() != self.parent:
                self.node_lost()
                return
            now = time.monotonic()
            if self.reason is None:
                if self.cancelled():
                    self.begin_termination(self.cancel_reason)
                elif deadline is not None and now >= deadline:
                    self.begin_termination("TIMEOUT")
                elif signal_at is not None and not self.signal_sent and now >= signal_at:
                    self.send_user_signal()
            if self.notice_at is not None and now >= self.notice_at:
                self.notice_at = None
                self.notice_sent = True
                sig, _, batch_only = self.spec["preemption_notice"]
                self.deliver(int(sig), bool(batch_only))
            if self.term_at is not None and now >= self.term_at:
                self.terminate(self.reason or "PREEMPTED")
            self.check_checkpoint()
            if self.kill_deadline is not None and not self.killed and now >= self.kill_deadline:
                self.signal_groups(signal.SIGKILL)
                self.killed = True
            timeout = TICK_S
            if self.reason is None and deadline is not None:
                timeout = min(timeout, max(0.0, deadline - now))
            if self.reason is None and signal_at is not None and not self.signal_sent:
                timeout = min(timeout, max(0.0, signal_at - now))
            if self.kill_deadline is not None and not self.killed:
                timeout = min(timeout, max(0.0, self.kill_deadline - now))
            for due in (self.notice_at, self.term_at):
                if due is not None:
                    timeout = min(timeout, max(0.0, due - now))
            self.sleep(wakeup, timeout)
        # Leftover processes in the tasks' groups die with the job, as under Slurm.
        if self.steps is not None:
            self.steps.close()
        self.signal_groups(signal.SIGKILL)
        self.check_checkpoint(final=True)
        self.collect_steps(final=True)
        self.conclude()

    def node_lost(self) -> None:
        """The process that started this supervisor died (its node is gone): the tasks
        die at once, as they would with the machine."""
        self.signal_groups(signal.SIGKILL)
        self.reap()
        self.finish("NODE_FAIL", None, None, "the node's agent died")

    def sleep(self, wakeup: int, timeout: float) -> None:
        steps = self.steps.fds() if self.steps is not None else []
        try:
            ready, _, _ = select.select([wakeup, *steps], [], [], timeout)
        except InterruptedError:  # pragma: no cover - PEP 475 retries select
            return
        if self.steps is not None and ready:
            self.steps.handle(ready, bool(self.allocation))
        if wakeup in ready:
            with contextlib.suppress(BlockingIOError):
                while os.read(wakeup, 512):
                    pass

    def conclude(self) -> None:
        if self.allocation and self.reason is None:
            released = self.steps.released if self.steps is not None else None
            code, sig, clean = released or (0, None, False)
            if not clean:
                self.finish("CANCELLED", 0, None, "no srun or salloc holds the allocation")
            elif code == 0 and sig is None:
                self.finish("COMPLETED", 0, None)
            else:
                self.finish("FAILED", code, sig)
            return
        codes = [self.returncodes[proc.pid] for proc in self.procs]
        exit_code = max((c for c in codes if c >= 0), default=0)
        sig = next((-c for c in codes if c < 0), None)
        if self.reason is not None:
            message = {"CANCELLED": "cancelled", "PREEMPTED": "preempted"}.get(
                self.reason, "time limit reached"
            )
            self.finish(self.reason, exit_code, sig, message)
        elif exit_code == 0 and sig is None:
            self.finish("COMPLETED", 0, None)
        else:
            self.finish("FAILED", exit_code, sig, self.task_message())

    def task_message(self) -> str:
        """What a task wrote to ``JOBDIR/message`` about its failure (Kubernetes pods do)."""
        try:
            with open(os.path.join(self.jobdir, "message"), encoding="utf-8") as fh:
                return fh.read(4096).strip()
        except OSError:
            return ""


TAKEN = "taken"
"""The file whose creation takes an attempt (see the module docstring)."""


def take(jobdir: str) -> bool:
    """Take the attempt in ``jobdir``: True for the first caller ever, False after."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    try:
        os.close(os.open(os.path.join(jobdir, TAKEN), flags, 0o644))
    except FileExistsError:
        return False
    return True


def _lock(jobdir: str) -> int | None:
    """Take ``supervisor.lock``; None when another supervisor holds it.

    Retries briefly: the control plane's liveness check holds the lock for
    microseconds when it finds it free.
    """
    fd = os.open(os.path.join(jobdir, "supervisor.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    for _ in range(25):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                os.close(fd)
                raise
            time.sleep(0.02)
        else:
            return fd
    os.close(fd)
    return None


def _own(jobdir: str) -> int | None:
    """Take ``supervisor.lock``, then the attempt (:func:`take`): the lock's descriptor,
    held for the supervisor's life; None, said on stderr, when another supervisor holds
    the lock or the attempt was taken already."""
    lock = _lock(jobdir)
    if lock is None:
        print(f"supervisor: {jobdir} is supervised already", file=sys.stderr)
        return None
    if not take(jobdir):
        print(f"supervisor: {jobdir} was taken already: it runs at most once", file=sys.stderr)
        return None
    return lock


def main(argv: list[str] | None = None) -> int:
    """Entry point: detach (fork once more), take the job lock and supervise the job."""
    args = sys.argv[1:] if argv is None else argv
    foreground = bool(args) and args[0] == "--foreground"
    if foreground:
        args = args[1:]
    if len(args) != 1:
        usage = "usage: python -I -m phalanx.runtime.supervisor [--foreground] JOBDIR"
        print(usage, file=sys.stderr)
        return 2
    jobdir = os.path.abspath(args[0])
    # The very first thing: become the job's account (both processes below run as it).
    spec = _read_spec(jobdir)
    _drop_privileges(spec)
    if foreground:
        return _foreground(jobdir, spec)
    rfd, wfd = os.pipe()
    child = os.fork()
    if child > 0:
        # First process: wait until the supervisor holds the lock, then leave.
        os.close(wfd)
        ok = os.read(rfd, 1) == b"1"
        if ok:
            _write_json_pidfile(jobdir, child)
        os._exit(0 if ok else 1)
    os.close(rfd)

    def ready() -> None:
        os.write(wfd, b"1")
        os.close(wfd)

    def refused() -> None:
        os.close(wfd)

    return _supervise(jobdir, spec, ready, refused)


def forked(jobdir: str) -> int:
    """The supervisor in a child of the fork server (:mod:`phalanx.runtime.forkserver`).

    That child is not the control plane's: it needs no second fork to detach,
    only its own session, and writes ``supervisor.pid`` itself once it holds
    the lock (what the first process of :func:`main` does for the second).
    """
    jobdir = os.path.abspath(jobdir)
    spec = _read_spec(jobdir)
    _drop_privileges(spec)

    def ready() -> None:
        _write_json_pidfile(jobdir, os.getpid())

    return _supervise(jobdir, spec, ready, lambda: None)


def _supervise(
    jobdir: str,
    spec: dict[str, Any],
    ready: Callable[[], None],
    refused: Callable[[], None],
) -> int:
    """Take the job lock in a new session and supervise; ``ready`` once the lock is held
    and the first status written, ``refused`` when another supervisor holds it."""
    # A cancel can come as soon as the lock is held (the pid file is written then),
    # before the supervisor's own handlers are in place: note it, do not die of it.
    early: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: early.append(signum))
    with contextlib.suppress(OSError):
        os.setsid()
    os.chdir("/")
    if _own(jobdir) is None:
        refused()
        return 1
    supervisor: Supervisor | None = None
    try:
        supervisor = Supervisor(jobdir, spec)
        if early:
            supervisor.cancel_requested = True
        supervisor.write_status()
        ready()
        supervisor.run()
    except BaseException as exc:
        print(f"supervisor: {exc!r}", file=sys.stderr)
        if supervisor is not None:
            supervisor.signal_groups(signal.SIGKILL)
            with contextlib.suppress(Exception):
                supervisor.finish("FAILED", 1, None, f"supervisor error: {exc!r}")
        raise
    return 0


def _foreground(jobdir: str, spec: dict[str, Any]) -> int:
    """Supervise without detaching, as the child of a node agent (the Ray runtime's
    node supervisor actor): when that parent dies, the node is taken as lost."""
    parent = os.getppid()
    if _own(jobdir) is None:
        return 1
    _write_json_pidfile(jobdir, os.getpid())
    supervisor = Supervisor(jobdir, spec)
    supervisor.parent = parent
    try:
        supervisor.run()
    except BaseException as exc:
        print(f"supervisor: {exc!r}", file=sys.stderr)
        supervisor.signal_groups(signal.SIGKILL)
        with contextlib.suppress(Exception):
            supervisor.finish("FAILED", 1, None, f"supervisor error: {exc!r}")
        raise
    return 0


def _write_json_pidfile(jobdir: str, pid: int) -> None:
    path = os.path.join(jobdir, "supervisor.pid")
    tmp = f"{path}.tmp"
    # Bytes, not a text file: no codec to look up, which as a job's account (that may
    # not read the interpreter's library) could fail.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, f"{pid}\n".encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
