"""``srun`` inside a phalanx batch job: ``python -I -m phalanx.runtime.srun ARGS``.

The local runtime puts a ``srun`` wrapper for this module first on the batch
script's ``PATH`` and points ``PHALANX_SLURM_CONTEXT`` at ``JOBDIR/slurm.json``.
A step's tasks run as local processes (every virtual node is this machine)
with the environment of :func:`phalanx.dialects.slurm.environment.step_env`.
They stay in srun's process group, which is the batch shell's: the
supervisor's cancel and time limit (SIGTERM, then SIGKILL after kill_wait)
reach them directly. Their output is forwarded line by line to srun's own
stdout/stderr (``-l`` prefixes ``RANK: ``) unless ``-o``/``-e`` name files.

Exit status as Slurm's srun: the highest exit code of the tasks, or 128 plus
the highest terminating signal when a task was killed (``srun: error: <node>:
task <n>: <signal name>``). ``-K`` terminates the step when a task fails.

Signals srun receives are forwarded to its tasks, except SIGTERM/SIGINT/SIGHUP
while the supervisor is terminating the job (``JOBDIR/terminating``): the
whole group got those already. While a step runs, its task pids are in
``JOBDIR/steps/<id>.pids`` (the supervisor's ``--signal`` target); step ids
count from 0 per job (``JOBDIR/steps/next``, under ``flock``).

Under the Ray runtime (``PHALANX_RAY_AGENTS`` names each node's agent) a task
that belongs on another node runs through :mod:`phalanx.runtime.ray.proxy` in its
place, and this node's tasks see the GPU ids Ray gave the node's bundle
(``PHALANX_RAY_GPU_MAP``).

Standard library, :mod:`phalanx.dialects.slurm.environment` and
:mod:`hostlist` only: it starts in a few tens of milliseconds.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import signal
import socket
import sys
import termios
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from phalanx.dialects.slurm.environment import STEP_CLEARED, StepRequest, step_env
from phalanx.runtime.containers import FLAGS as PYXIS_FLAGS
from phalanx.runtime.containers import OPTIONS as PYXIS_OPTIONS
from phalanx.runtime.srunhet import HetError, HetStep
from phalanx.runtime.srunhet import plan as het_plan
from phalanx.runtime.stepd import AttachPoint, next_step_id, task_ranges, write_all

PROXY = "phalanx.runtime.ray.proxy"
"""The module srun runs in place of a task that belongs on another Ray node."""

__all__ = ["CONTAINER_ERROR", "SrunOptions", "UsageError", "main", "parse_args"]

CONTAINER_ERROR = (
    "srun: error: --container-image: containers are turned off on this phalanx cluster "
    "(phalanx up --container-runtime host runs such steps on the host, without the image)"
)
CONTAINER_FLAGS = frozenset(PYXIS_FLAGS)
CONTAINER_OPTIONS = CONTAINER_FLAGS | PYXIS_OPTIONS
IGNORED_WITH_VALUE = frozenset(
    {
        "--mpi",
        "--cpu-bind",
        "--cpu_bind",
        "--gpu-bind",
        "--distribution",
        "--mem",
        "--mem-per-cpu",
        "--mem-per-gpu",
        "--gres",
        "--gpus",
        "--gpus-per-node",
        "--time",
        "--partition",
        "--account",
        "--qos",
        "--hint",
        "--wait",
        "--network",
        "--propagate",
        "--mpi-type",
        "--comment",
        "--exclude",
        "--nodelist",
        "--constraint",
        "--tres-per-task",
        "--threads-per-core",
        "--mem-bind",
        "--slurmd-debug",
        "--epilog",
        "--prolog",
        "--task-epilog",
        "--task-prolog",
    }
)
IGNORED_SHORT_WITH_VALUE = {"m": "--distribution", "G": "--gpus", "t": "--time", "p": "--partition"}
IGNORED_SHORT_WITH_VALUE.update({"A": "--account", "W": "--wait", "x": "--exclude"})
IGNORED_SHORT_WITH_VALUE.update({"w": "--nodelist", "C": "--constraint"})
IGNORED_FLAGS = frozenset(
    {
        "--exclusive",
        "--overlap",
        "--overcommit",
        "--verbose",
        "--quiet",
        "--whole",
        "--exact",
        "--no-kill",
        "--preserve-env",
    }
)
IGNORED_SHORT_FLAGS = frozenset("OvQkE")
WITH_VALUE = {
    "--nodes": "nodes",
    "--ntasks": "ntasks",
    "--ntasks-per-node": "ntasks_per_node",
    "--cpus-per-task": "cpus_per_task",
    "--gpus-per-task": "gpus_per_task",
    "--export": "export",
    "--output": "output",
    "--error": "error",
    "--job-name": "job_name",
    "--chdir": "chdir",
    "--open-mode": "open_mode",
    "--input": "input",
    "--het-group": "het_group",
    "--pack-group": "het_group",
}
SHORT_WITH_VALUE = {
    "N": "--nodes",
    "n": "--ntasks",
    "c": "--cpus-per-task",
    "o": "--output",
    "e": "--error",
    "J": "--job-name",
    "D": "--chdir",
    "i": "--input",
}
ALLOCATION_UNSET = (
    "SLURM_DISTRIBUTION",
    "SLURM_MEM_PER_CPU",
    "SLURM_NODE_ALIASES",
    "SLURM_JOB_CPUS_PER_NODE_PACK_GROUP_0",
    "SLURM_GPUS_PER_NODE",
    "SLURM_JOB_GPUS",
)
"""Batch variables a step of an srun or salloc allocation does not have (Slurm 22.05)."""
GATHER_S = 0.1
"""How long a failed task's report waits for others that end with it (one line each)."""
HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
FORWARDED = (*HANDLED, signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM, signal.SIGCONT)


class UsageError(Exception):
    """A command line srun refuses; the message is srun's (without the ``srun: `` prefix)."""


@dataclass(slots=True)
class SrunOptions:
    nodes: int | None = None
    ntasks: int | None = None
    ntasks_per_node: int | None = None
    cpus_per_task: int | None = None
    gpus_per_task: int | None = None
    label: bool = False
    kill_on_bad_exit: bool = False
    export: str | None = None
    output: str | None = None
    error: str | None = None
    job_name: str | None = None
    chdir: str | None = None
    open_mode: str = "truncate"
    container: bool = False
    container_args: list[tuple[str, str | None]] = field(default_factory=list)
    """pyxis' options, in order: ``(option, value)``, flags with ``None``."""
    help: bool = False
    unbuffered: bool = False
    """``-u``: output passes on as it comes, without waiting for the end of its line."""
    input: str = "all"
    """``--input``: ``all`` tasks get srun's standard input (Slurm's default), a task
    number only that task, ``none`` none of them, else a file every task reads."""
    pty: bool = False
    """``--pty``: task 0 on srun's terminal (as its controlling terminal); the others'
    output is dropped."""
    het_group: str | None = None
    """``--het-group``: the heterogeneous job components the step runs on (see
    :mod:`phalanx.runtime.srunhet`)."""
    command: list[str] = field(default_factory=list)


def _number(option: str, value: str, *, allow_range: bool = False) -> int:
    text = value.split("-", 1)[0] if allow_range and "-" in value else value
    try:
        number = int(text)
    except ValueError:
        raise UsageError(f'error: Invalid numeric value "{value}" for {option}.') from None
    if number < 1:
        raise UsageError(f'error: Invalid numeric value "{value}" for {option}.')
    return number


def _set(opts: SrunOptions, option: str, value: str) -> None:
    name = WITH_VALUE[option]
    if name in ("nodes", "ntasks", "ntasks_per_node", "cpus_per_task", "gpus_per_task"):
        setattr(opts, name, _number(option, value, allow_range=name == "nodes"))
    elif name == "open_mode":
        if value not in ("append", "truncate", "a", "t"):
            raise UsageError(f"error: Invalid --open-mode argument: {value}.  Ignored")
        opts.open_mode = "append" if value.startswith("a") else "truncate"
    else:
        setattr(opts, name, value)


def _kill_on_bad_exit(value: str | None) -> bool:
    if value is None or value == "":
        return True
    try:
        return int(value) != 0
    except ValueError:
        raise UsageError(f"error: Invalid --kill-on-bad-exit argument: {value}") from None


def parse_args(argv: list[str]) -> SrunOptions:
    """srun's options up to the first operand (getopt with ``+``); the rest is the command."""
    opts = SrunOptions()
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            i += 1
            break
        if not arg.startswith("-") or arg == "-":
            break
        if arg.startswith("--"):
            option, eq, value = arg.partition("=")
            has_value = bool(eq)
            if option in CONTAINER_OPTIONS:
                opts.container = True
                if option in CONTAINER_FLAGS:
                    opts.container_args.append((option, None))
                else:
                    if not has_value:
                        if i + 1 >= len(argv):
                            raise UsageError(f"option '{option}' requires an argument")
                        i += 1
                        value = argv[i]
                    opts.container_args.append((option, value))
            elif option in WITH_VALUE or option in IGNORED_WITH_VALUE:
                if not has_value:
                    if i + 1 >= len(argv):
                        raise UsageError(f"option '{option}' requires an argument")
                    i += 1
                    value = argv[i]
                if option in WITH_VALUE:
                    _set(opts, option, value)
            elif option == "--label":
                opts.label = True
            elif option == "--pty":
                opts.pty = True
            elif option == "--unbuffered":
                opts.unbuffered = True
            elif option == "--kill-on-bad-exit":
                opts.kill_on_bad_exit = _kill_on_bad_exit(value if has_value else None)
            elif option == "--help" or option == "--usage":
                opts.help = True
            elif option in IGNORED_FLAGS:
                pass
            else:
                raise UsageError(f"unrecognized option '{arg}'")
            i += 1
            continue
        # A cluster of short options: -lK, -n4, -N 2.
        j = 1
        while j < len(arg):
            letter = arg[j]
            rest = arg[j + 1 :]
            if letter in SHORT_WITH_VALUE or letter in IGNORED_SHORT_WITH_VALUE:
                if rest:
                    value = rest
                else:
                    if i + 1 >= len(argv):
                        raise UsageError(f"option requires an argument -- '{letter}'")
                    i += 1
                    value = argv[i]
                if letter in SHORT_WITH_VALUE:
                    _set(opts, SHORT_WITH_VALUE[letter], value)
                break
            if letter == "K":
                opts.kill_on_bad_exit = _kill_on_bad_exit(rest or None)
                break
            if letter == "l":
                opts.label = True
            elif letter == "u":
                opts.unbuffered = True
            elif letter == "h":
                opts.help = True
            elif letter not in IGNORED_SHORT_FLAGS:
                raise UsageError(f"invalid option -- '{letter}'")
            j += 1
        i += 1
    opts.command = argv[i:]
    return opts


# -- the job directory -----------------------------------------------------------


def _kill_wait(jobdir: str) -> float:
    try:
        with open(os.path.join(jobdir, "launch.json"), encoding="utf-8") as fh:
            return float(json.load(fh).get("kill_wait_s", 30.0))
    except (OSError, ValueError, TypeError):
        return 30.0


def _expand(pattern: str, ctx: Mapping[str, Any], step: int, rank: int, node: str, nid: int) -> str:
    """srun's ``-o``/``-e`` patterns: ``%j %J %s %t %n %N %u %x %%``."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch != "%" or i + 1 >= len(pattern):
            out.append(ch)
            i += 1
            continue
        code = pattern[i + 1]
        values = {
            "j": str(ctx["jobId"]),
            "J": f"{ctx['jobId']}.{step}",
            "s": str(step),
            "t": str(rank),
            "n": str(nid),
            "N": node,
            "u": str(ctx.get("user") or ""),
            "x": str(ctx.get("jobName") or ""),
            "%": "%",
        }
        out.append(values.get(code, "%" + code))
        i += 2
    return "".join(out)


def _say(message: str) -> None:
    write_all(2, (message + "\n").encode())


# -- running a step ----------------------------------------------------------------


class Step:
    """The tasks of one srun step, their output and their exit statuses."""

    het: HetStep | None = None
    """In a heterogeneous job: the components the step runs on, each with its command."""

    def __init__(
        self, ctx: Mapping[str, Any], jobdir: str, opts: SrunOptions, container: Any = None
    ) -> None:
        self.ctx = ctx
        self.jobdir = jobdir
        self.opts = opts
        self.container = container
        """pyxis' options (:class:`phalanx.runtime.containers.pyxis.PyxisOptions`), if any."""
        self.pids: dict[int, int] = {}
        """pid -> index into ``self.tasks``."""
        self.status: dict[int, int] = {}
        """index -> wait status."""
        self.streams: dict[int, tuple[int, int, bytearray]] = {}
        """read fd -> (task index, target fd, pending bytes)."""
        self.signals: list[int] = []
        self.cancelled = False
        self.terminate_at: float | None = None
        self.killed = False
        self.unreported: dict[tuple[str, str], list[int]] = {}
        """Failed tasks not reported yet: (node, status) -> ranks (see flush_errors)."""
        self.unreported_at = 0.0
        self.usage: dict[int, tuple[float, float, int]] = {}
        """index -> (user CPU s, system CPU s, max RSS KiB) of each ended task."""
        self.start_time = time.time()
        self.tasks: list[Any] = []
        self.pty = opts.pty and os.isatty(0)
        self.devnull = os.open(os.devnull, os.O_WRONLY) if self.pty else -1
        self.stdin_for: dict[int, int] = {}
        """task index -> the fd it gets as standard input (absent: srun's own)."""
        self.task_ends: list[int] = []
        """fds only the tasks need (closed once they are started)."""
        self.broadcast: dict[int, bytearray] = {}
        """Each task's input pipe (write end) and what is pending for it (``--input=all``)."""
        self.reading_stdin = False
        self.attach: AttachPoint | None = None
        """``steps/S.sock``: where ``sattach`` gets this step's output."""

    # .. environment ..

    def base_env(self) -> dict[str, str]:
        env = dict(os.environ)
        for name in STEP_CLEARED:
            env.pop(name, None)

        export = self.opts.export
        if export is None or export.upper() == "ALL":
            return env
        items = [item for item in export.split(",") if item]
        keep_all = any(item.upper() == "ALL" for item in items)
        out = dict(env) if keep_all else {k: v for k, v in env.items() if k.startswith("SLURM")}
        for item in items:
            if item.upper() in ("ALL", "NONE"):
                continue
            name, eq, value = item.partition("=")
            if eq:
                out[name] = value
            elif name in env:
                out[name] = env[name]
        if not keep_all:
            for name in ("PHALANX_SLURM_CONTEXT", "PHALANX_JOB_ID"):
                if name in env:
                    out[name] = env[name]
        return out

    # .. launching ..

    def launch(self) -> int:
        opts = self.opts
        given = os.environ.pop("PHALANX_STEP_ID", "")
        step_id = int(given) if given.isascii() and given.isdigit() else next_step_id(self.jobdir)
        self.step_id = step_id
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        self.listener = listener
        request = StepRequest(
            step_id=step_id,
            nodes=opts.nodes,
            ntasks=opts.ntasks,
            ntasks_per_node=opts.ntasks_per_node,
            cpus_per_task=opts.cpus_per_task or _env_int("SRUN_CPUS_PER_TASK"),
            gpus_per_task=opts.gpus_per_task,
            comm_port=listener.getsockname()[1],
            umask=_umask(),
        )
        try:
            self.tasks = (
                self.het.tasks(self.ctx, request) if self.het else step_env(self.ctx, request)
            )
        except ValueError as exc:
            _say(f"srun: error: {exc}")
            return 1
        # Without -N, srun in an allocation asks for all of its nodes (SLURM_NNODES).
        nodes = opts.nodes if opts.nodes is not None else _env_int("SLURM_NNODES")
        if nodes is not None and opts.ntasks is not None and opts.ntasks < nodes and not self.het:
            _say(
                f"srun: Warning: can't run {opts.ntasks} processes on {nodes} nodes, "
                f"setting nnodes to {opts.ntasks}"
            )
        base = self.base_env()
        width = len(str(len(self.tasks) - 1))
        self.labels = [f"{t.rank:>{width}}: ".encode() for t in self.tasks]
        files: dict[str, int] = {}
        command = list(opts.command)
        agents, here, gpu_map = _ray_placement()
        plans: list[tuple[list[str], dict[str, str]]] = []
        for task in self.tasks:
            env = {**base, **task.env}
            if self.ctx.get("allocation"):
                # A job that srun or salloc made has no batch environment: Slurm's steps
                # there do not have these.
                for name in ALLOCATION_UNSET:
                    env.pop(name, None)
            if "NSS_WRAPPER_HOSTNAME" in env:
                # The task's hostname is its own node's (the batch shell's is node 0's).
                env["NSS_WRAPPER_HOSTNAME"] = task.node
            remote = bool(agents) and task.node != here and task.node in agents
            if not remote and gpu_map and env.get("CUDA_VISIBLE_DEVICES"):
                devices = env["CUDA_VISIBLE_DEVICES"].split(",")
                env["CUDA_VISIBLE_DEVICES"] = ",".join(gpu_map.get(d, d) for d in devices)
            argv = self.het.command(task, command) if self.het else command
            if self.container is not None:
                failed = self.containerised(task, env, argv)
                if isinstance(failed, int):
                    return failed
                argv = failed
            if remote:
                # Another Ray node: its agent runs the task (phalanx.runtime.ray.proxy).
                argv = [sys.executable, "-I", "-m", PROXY, agents[task.node], "--", *argv]
            plans.append((argv, env))
        try:
            self.plan_input()
        except OSError as exc:
            _say(f"srun: error: Could not open stdin file: {exc.strerror}")
            return 1
        try:
            for index, task in enumerate(self.tasks):
                out_fd, err_fd = self.task_outputs(task, files)
                if self.pty:
                    # Task 0 has srun's terminal; the others' output goes nowhere (Slurm).
                    out_fd, err_fd = (-3, -3) if index == 0 else (self.devnull, self.devnull)
                argv, env = plans[index]
                pid = self.spawn(index, argv, env, out_fd, err_fd)
                self.pids[pid] = index
        finally:
            for fd in files.values():
                os.close(fd)
        for fd in self.task_ends:
            os.close(fd)
        self.task_ends.clear()
        self.write_pids()
        self.start_time = time.time()
        self.write_record()
        self.attach = AttachPoint(self.jobdir, step_id)
        return -1

    def plan_input(self) -> None:
        """Which standard input each task gets (``--input``): srun's own (task 0 alone,
        or every task when srun's is not a pipe worth sharing), a pipe srun copies its
        input into for each task (several tasks, ``all``), ``/dev/null``, or a file."""
        mode = self.opts.input
        count = len(self.tasks)
        null = os.open(os.devnull, os.O_RDONLY)
        self.task_ends.append(null)
        if mode == "none":
            self.stdin_for = dict.fromkeys(range(count), null)
        elif mode.isascii() and mode.isdigit():
            self.stdin_for = {i: (-1 if i == int(mode) else null) for i in range(count)}
        elif mode != "all":
            path = _expand(mode, self.ctx, self.step_id, 0, self.tasks[0].node, 0)
            source = os.open(path, os.O_RDONLY)
            self.task_ends.append(source)
            self.stdin_for = dict.fromkeys(range(count), source)
        elif count == 1 or _is_null(0):
            self.stdin_for = {}
        else:
            # Every task gets what srun reads, as Slurm's srun broadcasts it.
            for index in range(count):
                r, w = os.pipe()
                os.set_blocking(w, False)
                self.stdin_for[index] = r
                self.task_ends.append(r)
                self.broadcast[w] = bytearray()
            self.reading_stdin = True

    def copy_input(self, readable: list[int], writable: list[int]) -> None:
        """Copy srun's standard input to every task's pipe, without blocking."""
        if self.reading_stdin and 0 in readable:
            try:
                data = os.read(0, 1 << 16)
            except OSError:
                data = b""
            if data:
                for pending in self.broadcast.values():
                    pending += data
            else:
                self.reading_stdin = False
        for fd in list(self.broadcast):
            pending = self.broadcast[fd]
            if pending and fd in writable:
                try:
                    n = os.write(fd, pending)
                    del pending[:n]
                except BlockingIOError:
                    pass
                except OSError:
                    pending.clear()
                    os.close(fd)
                    del self.broadcast[fd]
                    continue
            if not pending and not self.reading_stdin:
                os.close(fd)
                del self.broadcast[fd]

    def containerised(self, task: Any, env: dict[str, str], command: list[str]) -> list[str] | int:
        """The command line that runs ``command`` in the task's container (pyxis), or
        srun's exit status when the container cannot be had."""
        from phalanx.runtime.containers import pyxis

        try:
            spec = pyxis.task_spec(
                self.container,
                ctx=self.ctx,
                jobdir=self.jobdir,
                node=task.node,
                env=env,
                cwd=self.opts.chdir or os.getcwd(),
            )
        except pyxis.PyxisError as exc:
            for line in pyxis.error_lines(exc):
                _say(line)
            _say(
                "slurmstepd: error: spank: required plugin spank_pyxis.so: "
                "task_init() failed with rc=-1"
            )
            _say(f"srun: error: {task.node}: task {task.rank}: Exited with exit code 1")
            return 1
        return pyxis.command(spec, command)

    def task_outputs(self, task: Any, files: dict[str, int]) -> tuple[int, int]:
        """The fds a task writes to: files (``-o``/``-e``) or pipes to srun (negative: none)."""
        opts = self.opts

        def open_file(pattern: str) -> int:
            path = _expand(pattern, self.ctx, self.step_id, task.rank, task.node, task.node_id)
            if pattern.lower() == "none":
                path = os.devnull
            if path not in files:
                flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
                if opts.open_mode == "truncate":
                    flags |= os.O_TRUNC
                files[path] = os.open(path, flags, 0o644)
            return files[path]

        out_fd = open_file(opts.output) if opts.output else -1
        if opts.error:
            err_fd = open_file(opts.error)
        elif opts.output:
            err_fd = out_fd
        else:
            err_fd = -2
        return out_fd, err_fd

    def spawn(self, index: int, command: list[str], env: dict[str, str], out: int, err: int) -> int:
        pipes: list[tuple[int, int, int]] = []  # (read end, write end, target)
        if out == -3:
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child execs at once
                self.child(index, command, env, out, err)
            return pid
        if out == -1:
            r, w = os.pipe()
            pipes.append((r, w, 1))
            out = w
        if err == -2:
            r, w = os.pipe()
            pipes.append((r, w, 2))
            err = w
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child execs at once
            self.child(index, command, env, out, err)
        for r, w, target in pipes:
            os.close(w)
            self.streams[r] = (index, target, bytearray())
        return pid

    def child(
        self, index: int, command: list[str], env: dict[str, str], out: int, err: int
    ) -> None:
        code = 2
        try:
            for sig in (*FORWARDED, signal.SIGCHLD, signal.SIGPIPE, signal.SIGXFSZ):
                signal.signal(sig, signal.SIG_DFL)
            signal.set_wakeup_fd(-1)
            if out == -3:
                # srun --pty: a session of its own, with the terminal as its controlling one.
                os.setsid()
                fcntl.ioctl(0, termios.TIOCSCTTY, 0)
            else:
                source = self.stdin_for.get(index, -1)
                if source >= 0:
                    os.dup2(source, 0)
                os.dup2(out, 1)
                os.dup2(err, 2)
            os.closerange(3, 1 << 16)
            if self.opts.chdir:
                try:
                    os.chdir(self.opts.chdir)
                except OSError as exc:
                    message = f"couldn't chdir to `{self.opts.chdir}': {exc.strerror}"
                    _say(f"slurmstepd: error: {message}: going to /tmp instead")
                    os.chdir("/tmp")
            env["SLURM_TASK_PID"] = str(os.getpid())
            try:
                os.execvpe(command[0], command, env)
            except OSError as exc:
                _say(f"slurmstepd: error: execve(): {command[0]}: {exc.strerror}")
        finally:
            os._exit(code)

    def write_pids(self) -> None:
        path = os.path.join(self.jobdir, "steps", f"{self.step_id}.pids")
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="ascii") as fh:
            fh.write(" ".join(str(pid) for pid in self.pids) + "\n")
        os.replace(tmp, path)

    # .. the loop ..

    def on_signal(self, signum: int, frame: Any) -> None:
        self.signals.append(signum)

    def handle_signals(self) -> None:
        signals, self.signals = self.signals, []
        for signum in signals:
            if signum in HANDLED and os.path.exists(os.path.join(self.jobdir, "terminating")):
                if not self.cancelled:
                    self.cancelled = True
                    self.step_notice()
                continue
            self.forward(signum)

    def step_notice(self) -> None:
        try:
            with open(os.path.join(self.jobdir, "terminating"), encoding="utf-8") as fh:
                reason = fh.read().strip()
        except OSError:
            reason = ""
        tail = {"TIMEOUT": " DUE TO TIME LIMIT", "PREEMPTED": " DUE TO PREEMPTION"}.get(reason, "")
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        node = self.tasks[0].node if self.tasks else "localhost"
        job = self.ctx["jobId"]
        _say(
            f"srun: Job step aborted: Waiting up to {int(_kill_wait(self.jobdir)) + 2} "
            "seconds for job step to finish."
        )
        step = f"{job}.{self.step_id}"
        _say(f"slurmstepd: error: *** STEP {step} ON {node} CANCELLED AT {stamp}{tail} ***")

    def forward(self, signum: int) -> None:
        for pid, index in self.pids.items():
            if index not in self.status:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signum)

    def terminate(self) -> None:
        """``-K``: SIGCONT + SIGTERM to the tasks still running, SIGKILL after kill_wait."""
        if self.terminate_at is not None:
            return
        _say(f"srun: error: Terminating StepId={self.ctx['jobId']}.{self.step_id}")
        self.cancelled = True
        self.forward(signal.SIGCONT)
        self.forward(signal.SIGTERM)
        self.terminate_at = time.monotonic() + _kill_wait(self.jobdir)

    def reap(self) -> None:
        finished: list[int] = []
        for pid, index in self.pids.items():
            if index in self.status:
                continue
            try:
                done, status, usage = os.wait4(pid, os.WNOHANG)
            except ChildProcessError:
                done, status, usage = pid, 0, None
            if done:
                self.status[index] = status
                if usage is not None:
                    self.usage[index] = (usage.ru_utime, usage.ru_stime, usage.ru_maxrss)
                finished.append(index)
        if finished:
            self.report(finished)

    def report(self, finished: list[int]) -> None:
        groups: dict[tuple[str, str], list[int]] = {}
        bad = False
        for index in finished:
            status = self.status[index]
            task = self.tasks[index]
            if os.WIFEXITED(status):
                code = os.WEXITSTATUS(status)
                if code == 0:
                    continue
                bad = True
                text = f"Exited with exit code {code}"
            else:
                bad = True
                if self.cancelled:
                    continue
                sig = os.WTERMSIG(status)
                text = signal.strsignal(sig) or f"Signal {sig}"
                if os.WCOREDUMP(status):
                    text += " (core dumped)"
            groups.setdefault((task.node, text), []).append(self.reported_rank(task))
        if groups and not self.unreported:
            self.unreported_at = time.monotonic()
        for key, ranks in groups.items():
            self.unreported.setdefault(key, []).extend(ranks)
        if bad and self.opts.kill_on_bad_exit and len(self.status) < len(self.tasks):
            self.flush_errors()
            self.terminate()

    def reported_rank(self, task: Any) -> int:
        """The task number srun's error lines give: in a heterogeneous step, the task's
        number within its component (as Slurm's), else its rank."""
        if not self.het:
            return int(task.rank)
        first = min(t.rank for t in self.tasks if t.component == task.component)
        return int(task.rank) - int(first)

    def flush_errors(self) -> None:
        """``srun: error: NODE: task(s) N: ...``, one line per node and status: tasks that
        end together are reported together, as slurmstepd reports them."""
        for (node, text), ranks in self.unreported.items():
            word = "task" if len(ranks) == 1 else "tasks"
            _say(f"srun: error: {node}: {word} {task_ranges(ranks)}: {text}")
        self.unreported.clear()

    def pump(self, timeout: float) -> None:
        fds = list(self.streams)
        attach = self.attach.fds() if self.attach is not None else []
        stdin = [0] if self.reading_stdin else []
        out = [fd for fd, pending in self.broadcast.items() if pending]
        try:
            ready, writable, _ = select.select(
                [*fds, self.wakeup, *attach, *stdin], out, [], timeout
            )
        except InterruptedError:  # pragma: no cover - PEP 475 retries select
            return
        if stdin or out:
            self.copy_input(ready, writable)
        if self.attach is not None and attach:
            self.attach.handle(ready)
        for fd in ready:
            if fd in attach or fd in stdin:
                continue
            if fd == self.wakeup:
                with contextlib.suppress(BlockingIOError):
                    while os.read(fd, 512):
                        pass
                continue
            self.read(fd)

    def read(self, fd: int) -> None:
        index, target, pending = self.streams[fd]
        try:
            data = os.read(fd, 65536)
        except OSError:
            data = b""
        if not data:
            if pending:
                self.emit(index, target, bytes(pending) + b"\n" if self.opts.label else pending)
            os.close(fd)
            del self.streams[fd]
            return
        pending += data
        if self.opts.unbuffered and not self.opts.label:
            # -u: a prompt without a newline shows at once (with -l lines still wait).
            self.emit(index, target, bytes(pending))
            pending.clear()
            return
        cut = pending.rfind(b"\n")
        if cut < 0:
            if len(pending) > 1 << 16:
                self.emit(index, target, bytes(pending))
                pending.clear()
            return
        chunk = bytes(pending[: cut + 1])
        del pending[: cut + 1]
        self.emit(index, target, chunk)

    def emit(self, index: int, target: int, chunk: bytes | bytearray) -> None:
        raw = chunk
        if self.opts.label:
            label = self.labels[index]
            lines = bytes(chunk).splitlines(keepends=True)
            chunk = b"".join(label + line for line in lines)
        if self.attach is not None:
            self.attach.send(target, index, bytes(raw))
        write_all(target, bytes(chunk))

    def run(self) -> int:
        rfd, wfd = os.pipe()
        os.set_blocking(rfd, False)
        os.set_blocking(wfd, False)
        self.wakeup = rfd
        signal.set_wakeup_fd(wfd, warn_on_full_buffer=False)
        for sig in FORWARDED:
            signal.signal(sig, self.on_signal)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        failed = self.launch()
        if failed >= 0:
            return failed
        drain_until: float | None = None
        try:
            while True:
                self.handle_signals()
                self.reap()
                now = time.monotonic()
                if self.unreported and (
                    len(self.status) == len(self.tasks) or now - self.unreported_at >= GATHER_S
                ):
                    self.flush_errors()
                if self.terminate_at is not None and not self.killed and now >= self.terminate_at:
                    self.forward(signal.SIGKILL)
                    self.killed = True
                if len(self.status) == len(self.tasks):
                    # Every task exited: what their leftover children still write gets
                    # a moment, then the pipes are given up (slurmstepd kills them).
                    if not self.streams:
                        break
                    if drain_until is None:
                        drain_until = now + 0.5
                    elif now >= drain_until:
                        break
                self.pump(0.1 if drain_until is None else max(0.0, drain_until - now))
        finally:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self.jobdir, "steps", f"{self.step_id}.pids"))
            self.listener.close()
        code = self.exit_code()
        if not self.cancelled and any(
            os.WIFSIGNALED(s) and os.WTERMSIG(s) in (signal.SIGKILL, signal.SIGTERM)
            for s in self.status.values()
        ):
            _say(f"srun: Force Terminated StepId={self.ctx['jobId']}.{self.step_id}")
        self.write_record(code)
        if self.attach is not None:
            statuses = [self.status.get(i, 0) for i in range(len(self.tasks))]
            self.attach.close(
                code,
                [-os.WTERMSIG(st) if os.WIFSIGNALED(st) else os.WEXITSTATUS(st) for st in statuses],
            )
        return code

    def write_record(self, code: int | None = None) -> None:
        """``steps/S.json``: the step as sacct shows it (the supervisor reports it), at its
        start and again at its end (``code``: srun's exit status)."""
        record: dict[str, Any] = {
            "step": self.step_id,
            "name": self.opts.job_name
            or (os.path.basename(self.opts.command[0]) if self.opts.command else ""),
            "nodes": list(dict.fromkeys(t.node for t in self.tasks)),
            "taskNodes": [t.node for t in self.tasks],
            "ntasks": len(self.tasks),
            "cpusPerTask": self.opts.cpus_per_task or _env_int("SRUN_CPUS_PER_TASK") or 1,
            "start": self.start_time,
            "state": "RUNNING",
        }
        if self.het:
            record.update(self.het.record(self.tasks))
        if code is not None:
            signaled = [os.WTERMSIG(s) for s in self.status.values() if os.WIFSIGNALED(s)]
            exits = [os.WEXITSTATUS(s) for s in self.status.values() if os.WIFEXITED(s)]
            if (self.cancelled and self.terminate_at is None) or signaled:
                state = "CANCELLED"  # as Slurm records a step whose task a signal ended
            elif any(exits):
                state = "FAILED"
            else:
                state = "COMPLETED"
            user = sum(u[0] for u in self.usage.values())
            system = sum(u[1] for u in self.usage.values())
            rss = max(self.usage.items(), key=lambda item: item[1][2], default=None)
            record.update(
                state=state,
                end=time.time(),
                exitCode=max(exits, default=0),
                signal=max(signaled) if signaled else None,
                userCpu=round(user, 6),
                systemCpu=round(system, 6),
                maxRssKb=int(rss[1][2]) if rss else 0,
                maxRssTask=rss[0] if rss else 0,
            )
        path = os.path.join(self.jobdir, "steps", f"{self.step_id}.json")
        tmp = f"{path}.tmp"
        with contextlib.suppress(OSError):
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(record, fh)
            os.replace(tmp, path)

    def exit_code(self) -> int:
        signaled = [os.WTERMSIG(s) for s in self.status.values() if os.WIFSIGNALED(s)]
        if signaled:
            return 128 + max(signaled)
        return max((os.WEXITSTATUS(s) for s in self.status.values()), default=0)


def _is_null(fd: int) -> bool:
    """Whether ``fd`` is ``/dev/null`` (or not open): nothing to share among tasks."""
    try:
        st = os.fstat(fd)
    except OSError:
        return True
    try:
        null = os.stat(os.devnull)
    except OSError:
        return False
    return st.st_rdev == null.st_rdev and (st.st_mode & 0o170000) == 0o020000


def _ray_placement() -> tuple[dict[str, str], str, dict[str, str]]:
    """Under the Ray runtime: the agent of each node, this node's name, and the GPU ids
    Ray gave this node's bundle for the engine's indices (all empty otherwise)."""
    try:
        agents = json.loads(os.environ.get("PHALANX_RAY_AGENTS") or "{}")
        gpu_map = json.loads(os.environ.get("PHALANX_RAY_GPU_MAP") or "{}")
    except ValueError:
        return {}, "", {}
    return agents, os.environ.get("PHALANX_NODE_NAME", ""), gpu_map


def _env_int(name: str) -> int | None:
    try:
        value = int(os.environ.get(name, ""))
    except ValueError:
        return None
    return value if value > 0 else None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


USAGE = """\
Usage: srun [-N nnodes] [-n ntasks] [--ntasks-per-node=n] [-c ncpus] [-l] [-K[0|1]]
            [--export=ALL|NONE|VAR[=val],...] [-o file] [-e file] [-J name] [-D dir]
            executable [args...]
(phalanx: runs a job step inside a batch job; every node's tasks run on this machine)
"""


def main(argv: list[str] | None = None) -> int:
    """Entry point: parse the options, run the step, return srun's exit status."""
    args = sys.argv[1:] if argv is None else argv
    try:
        opts = parse_args(args)
    except UsageError as exc:
        _say(f"srun: {exc}")
        _say('Try "srun --help" for more information')
        return 1
    if opts.help:
        write_all(1, USAGE.encode())
        return 0
    context = os.environ.get("PHALANX_SLURM_CONTEXT")
    if not context:
        # Not in a job's task: srun as a login shell's (allocate, or --jobid).
        command = [sys.executable, "-m", "phalanx.cli.main", "srun", *args]
        try:
            os.execv(sys.executable, command)
        except OSError as exc:
            _say(f"srun: error: cannot run {sys.executable}: {exc.strerror or exc}")
            return 1
    if not opts.command:
        _say("srun: fatal: No command given to execute.")
        return 1
    try:
        with open(context, encoding="utf-8") as fh:
            ctx = json.load(fh)
    except (OSError, ValueError) as exc:
        _say(f"srun: error: cannot read the job's context {context}: {exc}")
        return 1
    container = None
    if opts.container:
        # containerRuntime: the key of the jobs an earlier phalanx started (re-adopted).
        runtime = (ctx.get("containers") or {}).get("runtime") or ctx.get("containerRuntime")
        if runtime == "host":
            _say(
                "srun: warning: the container runtime is 'host': the step runs on this "
                "machine, without the image or its mounts (--container-* ignored)"
            )
        else:
            from phalanx.runtime.containers import pyxis

            try:
                container = pyxis.parse(opts.container_args, os.environ)
            except pyxis.PyxisError as exc:
                _say(f"srun: error: pyxis: {exc}")
                return 1
            for note in pyxis.ignored(container):
                _say(note)
            if not container.wanted:
                container = None
            elif runtime is None:
                _say(CONTAINER_ERROR)
                return 1
    step = Step(ctx, os.path.dirname(os.path.abspath(context)), opts, container)
    try:
        step.het = het_plan(opts, ctx, parse_args)
    except (HetError, UsageError) as exc:
        for line in exc.lines if isinstance(exc, HetError) else (f"srun: {exc}",):
            _say(line)
        return exc.code if isinstance(exc, HetError) else 1
    return step.run()


if __name__ == "__main__":
    sys.exit(main())
