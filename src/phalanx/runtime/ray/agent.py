"""The node agent: one long-lived Ray actor per Ray node that runs the tasks of every job
attempt placed there.

The Ray runtime starts one agent per Ray node when it first sees the node, pinned to
it (``NodeAffinitySchedulingStrategy``, not soft), detached, reserving nothing
(``num_cpus=0``) and named ``phalanx-<id>/node/<ray node id>`` so that a restarted
control plane finds it again. It lives as long as its node (a node that joins again
has a new Ray node id, and gets a new agent): a job starts in a process that is
already running, with no Ray worker to start per attempt.

Each attempt's bundle on the node is one *part* of the agent, keyed
``<job>/<attempt>/<bundle>``. :meth:`NodeAgent.start` writes the part's job
directory (``ROOT/phalanx-<id>/jobs/<job>/<attempt>/<bundle>``: ``launch.json``
with the node's own tasks, the Slurm files, a hosts file), waits until Ray has
placed the attempt's placement group (its reservation of the node's resources),
then runs the standard supervisor there as the agent's child (``python -I -m
phalanx.runtime.supervisor --foreground DIR``): the same process tree, environment,
output files, time limit and cancel as the local runtime's. The bundle's GPUs are
the engine's indices on the node: index ``i`` is Ray's GPU slot ``i`` (the raylet's
``CUDA_VISIBLE_DEVICES`` entry ``i`` when it has one), as Ray itself numbers them.

:meth:`NodeAgent.watch` answers for all the node's parts at once: it waits until one
of them changes (``status.json``; on a node that runs only srun's tasks, their
checkpoint file, ``PHALANX_CHECKPOINT_FILE`` being the part's own there).
:meth:`NodeAgent.cancel`, :meth:`NodeAgent.signal` and
:meth:`NodeAgent.set_time_limit` write the supervisor's marker files;
:meth:`NodeAgent.shutdown` ends what still runs of a part and forgets it.

``srun`` steps of a batch job reach the other nodes through their agents:
:meth:`NodeAgent.step_start` runs one task of a step on this node (through
:mod:`phalanx.runtime.ray.proxy`, which srun starts in the task's place; the task's
``PHALANX_RAY_ATTEMPT`` names the attempt), and :meth:`NodeAgent.step_read` /
:meth:`NodeAgent.step_signal` stream its output and forward signals. Step tasks die
with the agent (``PR_SET_PDEATHSIG``), as they would with their node.

This module imports Ray only inside the agent (:func:`agent_class`).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from phalanx.runtime.batch import JobFile, write_bin, write_files

__all__ = ["NodeAgent", "agent_class"]

STEP_READ_MAX = 1 << 20
WATCH_PERIOD_S = 0.01
"""How often :meth:`NodeAgent.watch` looks at the parts' files."""
PLACE_PERIOD_S = 0.5
"""How long one wait for a placement group lasts (a cancel is seen between two)."""
MAX_CONCURRENCY = 128
_PR_SET_PDEATHSIG = 1
_GONE = [-1, -1, -1, -1]
"""The stat key of a status the agent made up (no ``status.json`` says it)."""


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _find_nss_wrapper() -> str | None:
    from phalanx.runtime.local import NSS_WRAPPER

    return NSS_WRAPPER


def _stat_key(path: Path) -> list[int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return [st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_size]


class _Spawner:
    """Starts every child from one long-lived thread: ``PR_SET_PDEATHSIG`` fires when
    the thread that forked a child ends, so that thread must live as long as the agent."""

    def __init__(self) -> None:
        self._queue: queue.Queue[tuple[Callable[[], Any], Future[Any]]] = queue.Queue()
        threading.Thread(target=self._run, name="phalanx-spawner", daemon=True).start()

    def _run(self) -> None:
        while True:
            call, future = self._queue.get()
            try:
                future.set_result(call())
            except BaseException as exc:
                future.set_exception(exc)

    def spawn(self, call: Callable[[], Any]) -> Any:
        future: Future[Any] = Future()
        self._queue.put((call, future))
        return future.result()


class _Forked:
    """A supervisor the fork server started: the agent is not its parent, so it is
    looked for by pid (the fork server reaps it)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def poll(self) -> int | None:
        """``None`` while it runs, else 0 (its status is the fork server's)."""
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return 0
        except PermissionError:
            pass
        return None

    def send_signal(self, signum: int) -> None:
        os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def wait(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout)
            time.sleep(0.02)
        return 0


class _ForkServer:
    """The node's fork server (:mod:`phalanx.runtime.forkserver`): supervisors forked
    from an interpreter that has them imported already, not a fresh one each. It is
    the agent's child and ends with it (standard input closed, ``PR_SET_PDEATHSIG``);
    its supervisors run ``--foreground`` under it, so its end is the node's for them."""

    def __init__(self, spawner: _Spawner) -> None:
        self.spawner = spawner
        self.proc: subprocess.Popen[str] | None = None
        self.lock = threading.Lock()
        self.broken = False

    def start(self, jobdir: Path) -> _Forked | None:
        """The supervisor of ``jobdir``, or ``None`` when the fork server cannot start it."""
        with self.lock:
            for _ in range(2):
                if self.broken:
                    return None
                proc = self.proc
                if proc is None or proc.poll() is not None:
                    try:
                        proc = self.proc = self.spawner.spawn(self._open)
                    except OSError:
                        self.broken = True
                        return None
                assert proc.stdin is not None and proc.stdout is not None
                try:
                    proc.stdin.write(f"--foreground {jobdir}\n")
                    proc.stdin.flush()
                    answer = proc.stdout.readline()
                except OSError:
                    answer = ""
                if answer.startswith("ok "):
                    return _Forked(int(answer.split()[1]))
                if answer.startswith("error "):
                    return None
                # It died: a fresh one, once.
                with contextlib.suppress(OSError):
                    proc.kill()
                self.proc = None
            return None

    @staticmethod
    def _open() -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-I", "-m", "phalanx.runtime.forkserver"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            close_fds=True,
            cwd="/",
            preexec_fn=_die_with_parent,
        )


class _StepTask:
    def __init__(
        self, part: str, proc: subprocess.Popen[bytes], out: Path, err: Path, env: dict[str, str]
    ) -> None:
        self.part = part
        """The key of the part it runs for."""
        self.proc = proc
        self.out = out
        self.err = err
        self.step = env.get("SLURM_STEP_ID", "")
        """Which step and rank it is (``SLURM_STEP_ID``, ``SLURM_PROCID``): for sstat."""
        self.rank = env.get("SLURM_PROCID", "")


@dataclass(slots=True)
class _Part:
    """One attempt's bundle on this node."""

    key: str
    node: str
    jobdir: Path
    gpu_map: dict[int, str]
    runs_tasks: bool
    supervisor: subprocess.Popen[bytes] | _Forked | None = None
    final: dict[str, Any] | None = None
    """Its end when no supervisor reports it (never started, or gone without a word)."""
    cancel: tuple[float | None] | None = None
    """A cancel that came before the supervisor started: its preemption grace."""
    started: bool = False
    """Whether it got past the wait for its placement group."""
    closed: bool = False
    placed: threading.Event = field(default_factory=threading.Event)


class NodeAgent:
    """Runs the tasks of every attempt placed on one node (see the module docstring)."""

    def __init__(self, root: str) -> None:
        import ray

        self.root = Path(root)
        write_bin(self.root / "bin", sys.executable)
        self.node_id: str = ray.get_runtime_context().get_node_id()
        self.gpu_ids = _node_gpu_ids()
        self.spawner = _Spawner()
        self.forkserver = _ForkServer(self.spawner)
        self.parts: dict[str, _Part] = {}
        self.steps: dict[int, _StepTask] = {}
        self.next_step = 0
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        """Notified when a part is added or ends before its supervisor starts."""
        self.generation = 0
        # A threaded actor runs calls in any order: a cancel or a shutdown may come
        # before the start of its part.
        self.early_cancel: dict[str, tuple[float | None]] = {}
        self.early_calls: dict[str, list[Callable[[], None]]] = {}
        """Signals and time limits for parts not started yet."""
        self.dropped: dict[str, float] = {}
        """Parts shut down before they started (never to start), and when."""

    def about(self, key: str | None = None) -> dict[str, Any] | None:
        """This agent's node; with ``key``, what a restarted control plane needs to know
        of that part (``None``: the agent has no such part)."""
        if key is None:
            return {"node_id": self.node_id, "parts": sorted(self.parts)}
        part = self.parts.get(key)
        if part is None:
            return None
        return {"node": part.node, "node_id": self.node_id, "runs_tasks": part.runs_tasks}

    # -- parts ----------------------------------------------------------------

    def start(self, key: str, plan: dict[str, Any], pg: Any = None) -> None:
        """Add the part ``key``: write its job directory now, start its supervisor (when
        it has tasks) once Ray has placed ``pg``. Never raises: a failure is the part's
        end, reported by :meth:`watch`."""
        engine = sorted(plan.get("gpus") or ())
        gpu_map = {
            index: self.gpu_ids[index] if index < len(self.gpu_ids) else str(index)
            for index in engine
        }
        part = _Part(key, plan["node"], Path(plan["jobdir"]), gpu_map, plan.get("spec") is not None)
        with self.changed:
            if key in self.parts or key in self.dropped:
                return
            part.cancel = self.early_cancel.pop(key, None)
            early = self.early_calls.pop(key, [])
            self.parts[key] = part
            self.generation += 1
            self.changed.notify_all()
        try:
            if plan.get("root", str(self.root)) != str(self.root):
                # A control plane started with another --ray-workdir than the agent's.
                write_bin(Path(plan["root"]) / "bin", sys.executable)
            part.jobdir.mkdir(parents=True, exist_ok=True)
            (part.jobdir / "hosts").write_text(plan.get("hosts", ""), encoding="ascii")
            write_files(part.jobdir, [JobFile(*f) for f in plan.get("files", [])])
            for call in early:
                call()
        except Exception as exc:
            self._end(part, "NODE_FAIL", f"the agent on {part.node} could not start the job: {exc}")
            return
        threading.Thread(
            target=self._run_when_placed,
            args=(part, plan, pg, float(plan.get("place_timeout_s") or 120.0)),
            name=f"phalanx-place-{key}",
            daemon=True,
        ).start()

    def _run_when_placed(self, part: _Part, plan: dict[str, Any], pg: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        try:
            while pg is not None and not pg.wait(PLACE_PERIOD_S):
                if part.cancel is not None or part.closed:
                    break
                if time.monotonic() >= deadline:
                    self._end(
                        part,
                        "NODE_FAIL",
                        f"Ray did not place the job's bundles within {timeout:.0f} s",
                    )
                    return
            with self.lock:
                if part.final is not None:
                    return
                if part.cancel is not None or part.closed:
                    preempted = part.cancel is not None and part.cancel[0] is not None
                    state = "PREEMPTED" if preempted else "CANCELLED"
                    part.final = {
                        "state": "exited",
                        "job_state": state,
                        "end_time": time.time(),
                        "message": "",
                    }
                    self.generation += 1
                    self.changed.notify_all()
                    return
                part.started = True
            if plan.get("spec") is not None:
                self._start_supervisor(part, plan["spec"], bool(plan.get("kube")))
        except Exception as exc:
            self._end(part, "NODE_FAIL", f"the agent on {part.node} could not start the job: {exc}")
        finally:
            part.placed.set()

    def _end(self, part: _Part, state: str, message: str) -> None:
        with self.changed:
            if part.final is None:
                part.final = {
                    "state": "exited",
                    "job_state": state,
                    "end_time": time.time(),
                    "message": message,
                }
            self.generation += 1
            self.changed.notify_all()

    def node_env(self, part: _Part, env: dict[str, str]) -> dict[str, str]:
        """A task environment as it must be on this node: its hosts file, its name."""
        out = dict(env)
        out["PHALANX_RAY_NODE_ID"] = self.node_id
        nss = _find_nss_wrapper()
        if nss is not None:
            preload = out.get("LD_PRELOAD", "")
            if nss not in preload:
                out["LD_PRELOAD"] = f"{nss} {preload}".strip()
            out["NSS_WRAPPER_HOSTS"] = str(part.jobdir / "hosts")
            out["NSS_WRAPPER_HOSTNAME"] = part.node
        if "PHALANX_SLURM_CONTEXT" in out:
            out["PHALANX_SLURM_CONTEXT"] = str(part.jobdir / "slurm.json")
        if part.gpu_map:
            out["PHALANX_RAY_GPU_MAP"] = json.dumps({str(k): v for k, v in part.gpu_map.items()})
        gpus = out.get("CUDA_VISIBLE_DEVICES")
        if gpus and part.gpu_map:
            out["CUDA_VISIBLE_DEVICES"] = ",".join(
                part.gpu_map.get(int(g), g) if g.isdigit() else g for g in gpus.split(",")
            )
        return out

    def _start_supervisor(self, part: _Part, spec: dict[str, Any], kube: bool) -> None:
        tasks = []
        for task in spec["tasks"]:
            gpus = [part.gpu_map.get(int(g), str(g)) for g in task.get("gpus") or ()]
            tasks.append({**task, "gpus": gpus, "env": self.node_env(part, task.get("env") or {})})
        spec = {**spec, "tasks": tasks}
        if kube:
            spec["command"] = [
                sys.executable,
                "-I",
                "-m",
                "phalanx.runtime.kubepod",
                str(part.jobdir),
            ]
        (part.jobdir / "launch.json").write_text(json.dumps(spec), encoding="utf-8")
        command = [
            sys.executable,
            "-I",
            "-m",
            "phalanx.runtime.supervisor",
            "--foreground",
            str(part.jobdir),
        ]

        def start() -> subprocess.Popen[bytes]:
            with open(part.jobdir / "supervisor.log", "ab") as log:
                return subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    close_fds=True,
                    cwd="/",
                )

        part.supervisor = self.forkserver.start(part.jobdir) or self.spawner.spawn(start)

    def watch(
        self, known: dict[str, list[int] | None], timeout: float
    ) -> dict[str, tuple[list[int], dict[str, Any]]]:
        """The parts of ``known`` whose status differs from the stat key given there:
        ``{key: (stat key, status)}``; waits until there is one, a part is added, or
        ``timeout`` seconds have passed."""
        deadline = time.monotonic() + timeout
        with self.lock:
            generation = self.generation
        while True:
            found: dict[str, tuple[list[int], dict[str, Any]]] = {}
            for key, seen in known.items():
                answer = self._status(key, seen)
                if answer is not None:
                    found[key] = answer
            if found:
                return found
            with self.changed:
                if self.generation != generation:
                    return found
                left = deadline - time.monotonic()
                if left <= 0:
                    return found
                self.changed.wait(min(left, WATCH_PERIOD_S))

    def _status(self, key: str, seen: list[int] | None) -> tuple[list[int], dict[str, Any]] | None:
        part = self.parts.get(key)
        if part is None:
            # Not started yet: the calls of a threaded actor may run in any order.
            return None
        if not part.runs_tasks:
            # Only srun's tasks run here: their checkpoint file is the part's news.
            stat = _stat_key(part.jobdir / "checkpoint")
            if stat is None or stat == seen:
                return None
            return stat, {"checkpoint_at": stat[0] / 1e9}
        path = part.jobdir / "status.json"
        stat = _stat_key(path)
        if stat is not None and stat != seen:
            with contextlib.suppress(OSError, ValueError):
                return stat, json.loads(path.read_text(encoding="utf-8"))
            return None
        gone = part.supervisor is not None and part.supervisor.poll() is not None
        if part.final is None and gone:
            try:
                last = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                last = {}
            if last.get("state") != "exited":
                # Gone without a last word (its own status may still be "running").
                self._end(part, "NODE_FAIL", f"the supervisor on {part.node} exited unexpectedly")
        if part.final is not None and seen != _GONE:
            return _GONE, dict(part.final)
        return None

    def cancel(self, key: str, preempt_grace_s: float | None = None) -> None:
        """As :meth:`LocalRuntime.cancel <phalanx.runtime.local.LocalRuntime.cancel>`,
        and on a cancel every step task of the part gets SIGTERM. On a preemption the
        batch node's supervisor times the step tasks' signals (the preemption notice,
        then SIGTERM at the end of the grace period), which srun forwards to them. A
        part whose supervisor has not started yet ends without starting it."""
        with self.changed:
            part = self.parts.get(key)
            if part is None:
                self.early_cancel[key] = (preempt_grace_s,)
                return
            if not part.started:
                part.cancel = (preempt_grace_s,)
                return
        marker = part.jobdir / "cancel"
        if preempt_grace_s is None:
            marker.touch()
        else:
            data = json.dumps({"reason": "PREEMPTED", "grace_s": preempt_grace_s})
            tmp = marker.with_name("cancel.tmp")
            tmp.write_text(data, encoding="utf-8")
            os.replace(tmp, marker)
        if part.supervisor is not None and part.supervisor.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                part.supervisor.send_signal(signal.SIGTERM)
        if preempt_grace_s is None:
            for step, task in list(self.steps.items()):
                if task.part == key:
                    self.step_signal(step, signal.SIGTERM)

    def _later(self, key: str, call: Callable[[], None]) -> bool:
        """Keep ``call`` for the start of part ``key`` when that has not come yet;
        whether it was kept (or the part is gone for good)."""
        with self.lock:
            if key in self.parts:
                return False
            if key not in self.dropped:
                self.early_calls.setdefault(key, []).append(call)
            return True

    def signal(self, key: str, signum: int, batch_only: bool) -> None:
        if self._later(key, lambda: self.signal(key, signum, batch_only)):
            return
        part = self.parts.get(key)
        if part is None:
            return
        folder = part.jobdir / "signals"
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{time.time_ns()}.tmp"
        tmp.write_text(json.dumps({"signal": signum, "batch_only": batch_only}), encoding="utf-8")
        os.replace(tmp, folder / f"{time.time_ns()}-{os.getpid()}.json")

    def set_time_limit(self, key: str, seconds: float | None) -> None:
        if self._later(key, lambda: self.set_time_limit(key, seconds)):
            return
        part = self.parts.get(key)
        if part is None:
            return
        part.jobdir.mkdir(parents=True, exist_ok=True)
        path = part.jobdir / "time_limit"
        tmp = path.with_name("time_limit.tmp")
        tmp.write_text("none" if seconds is None else f"{seconds:.3f}", encoding="ascii")
        os.replace(tmp, path)

    def shutdown(self, key: str, kill_wait_s: float = 0.0) -> None:
        """End everything of the part that still runs here (the attempt is over), then
        forget it. The supervisor's tasks lead sessions of their own: they are ended
        one by one, not with the supervisor."""
        with self.changed:
            part = self.parts.get(key)
            if part is None:
                now = time.monotonic()
                self.dropped = {k: t for k, t in self.dropped.items() if now - t < 3600}
                self.dropped[key] = now
                self.early_cancel.pop(key, None)
                return
            part.closed = True
        part.placed.wait(PLACE_PERIOD_S * 2)
        supervisor = part.supervisor
        if supervisor is not None and supervisor.poll() is None:
            self.cancel(key)
            with contextlib.suppress(subprocess.TimeoutExpired):
                supervisor.wait(timeout=kill_wait_s + 5.0)
            if supervisor.poll() is None:
                self._kill_tasks(part)
                with contextlib.suppress(ProcessLookupError):
                    supervisor.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    supervisor.wait(timeout=5.0)
        for step, task in list(self.steps.items()):
            if task.part == key:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(task.proc.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    task.proc.wait(timeout=5.0)
                del self.steps[step]
        with self.changed:
            self.parts.pop(key, None)

    def _kill_tasks(self, part: _Part) -> None:
        """SIGKILL the supervisor's tasks (each leads its own process group)."""
        try:
            status = json.loads((part.jobdir / "status.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        for pid in status.get("tasks") or ():
            if isinstance(pid, int) and pid > 1:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)

    def exit_if_idle(self) -> bool:
        """End this agent when it runs nothing (its runtime is going away); whether it
        does."""
        import ray

        with self.lock:
            if self.parts or any(t.proc.poll() is None for t in self.steps.values()):
                return False
        ray.actor.exit_actor()  # type: ignore[no-untyped-call]
        return True

    # -- srun step tasks ------------------------------------------------------

    def _step_part(self, env: dict[str, str]) -> _Part:
        """The part a step task belongs to: the first bundle here of the attempt its
        ``PHALANX_RAY_ATTEMPT`` (``<job>/<attempt>``) names."""
        attempt = env.get("PHALANX_RAY_ATTEMPT", "")
        mine = [p for k, p in self.parts.items() if k.rsplit("/", 1)[0] == attempt and not p.closed]
        if not attempt or not mine:
            raise LookupError(f"job attempt {attempt or '?'} does not run on this node")
        return min(mine, key=lambda p: int(p.key.rsplit("/", 1)[1]))

    def step_start(self, command: list[str], env: dict[str, str], cwd: str) -> int:
        """Start one step task here; returns its key for :meth:`step_read`."""
        part = self._step_part(env)
        with self.lock:
            key = self.next_step
            self.next_step += 1
        folder = part.jobdir / "remote"
        folder.mkdir(exist_ok=True)
        out, err = folder / f"{key}.out", folder / f"{key}.err"
        task_env = self.node_env(part, env)
        # The batch node's checkpoint file is on its machine: this node's part watches
        # its own (the supervisor's, when one runs here).
        task_env["PHALANX_CHECKPOINT_FILE"] = str(part.jobdir / "checkpoint")
        if not os.path.isdir(cwd):
            cwd = "/tmp"

        def start() -> subprocess.Popen[bytes]:
            with open(out, "wb") as out_fh, open(err, "wb") as err_fh:
                return subprocess.Popen(
                    command,
                    cwd=cwd,
                    env=task_env,
                    stdin=subprocess.DEVNULL,
                    stdout=out_fh,
                    stderr=err_fh,
                    close_fds=True,
                    start_new_session=True,
                    preexec_fn=_die_with_parent,
                )

        try:
            proc = self.spawner.spawn(start)
        except OSError as exc:
            err.write_text(f"slurmstepd: error: execve(): {command[0]}: {exc.strerror}\n")
            proc = subprocess.Popen(["/bin/sh", "-c", "exit 2"])
        self.steps[key] = _StepTask(part.key, proc, out, err, env)
        return key

    def step_usage(self, key: str) -> list[dict[str, Any]]:
        """The running steps of the part's batch shell, task by task (see
        :func:`phalanx.runtime.stepd.step_usage`; a task on another node is its proxy
        here, :meth:`remote_usage` of that node's agent has the task's own)."""
        from phalanx.runtime.stepd import step_usage

        part = self.parts.get(key)
        return [] if part is None else step_usage(str(part.jobdir))

    def remote_usage(self, key: str) -> list[dict[str, Any]]:
        """The usage of the step tasks running here for the part, for srun on another
        node: ``[{"step", "rank", "cpu", ...}]``."""
        from phalanx.runtime.stepd import proc_table, tree_usage

        children = proc_table()
        out = []
        for task in list(self.steps.values()):
            if (
                task.part == key
                and task.proc.poll() is None
                and task.step.isdigit()
                and task.rank.isdigit()
            ):
                usage = tree_usage(task.proc.pid, children)
                out.append({"step": int(task.step), "rank": int(task.rank), **usage})
        return out

    def step_read(
        self, key: int, out_at: int, err_at: int, timeout: float
    ) -> tuple[bytes, bytes, int | None]:
        """New output of step task ``key`` from the given offsets, and its return code
        once it has exited (negative: killed by that signal); waits up to ``timeout``."""
        task = self.steps[key]
        deadline = time.monotonic() + timeout
        while True:
            code = task.proc.poll()
            out = _read_from(task.out, out_at)
            err = _read_from(task.err, err_at)
            if out or err or code is not None or time.monotonic() >= deadline:
                if code is not None and (len(out) == STEP_READ_MAX or len(err) == STEP_READ_MAX):
                    code = None  # more to read first
                return out, err, code
            time.sleep(0.02)

    def step_signal(self, key: int, signum: int) -> None:
        task = self.steps.get(key)
        if task is None or task.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(task.proc.pid, signum)


def _node_gpu_ids() -> list[str]:
    """The node's GPU ids in Ray's slot order: the raylet's ``CUDA_VISIBLE_DEVICES`` when
    it has one (Ray maps slot ``i`` to its entry ``i``), else the slots' own numbers."""
    import ray

    worker = ray._private.worker.global_worker
    original = getattr(worker, "original_visible_accelerator_ids", {}).get("GPU")
    return [str(i) for i in original] if original else []


def _read_from(path: Path, offset: int) -> bytes:
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            return fh.read(STEP_READ_MAX)
    except OSError:
        return b""


@functools.cache
def agent_class() -> Any:
    """:class:`NodeAgent` as a Ray actor class (threaded: a long :meth:`NodeAgent.watch`
    does not hold back a start or a cancel)."""
    import ray

    return ray.remote(max_concurrency=MAX_CONCURRENCY)(NodeAgent)  # type: ignore[call-overload]
