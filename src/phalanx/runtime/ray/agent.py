"""The node agent: a Ray actor that runs one job attempt's tasks on one node.

The Ray runtime starts one agent per bundle of an attempt's placement group
(one per node and pod set), pinned into that bundle, detached and named
``phalanx-<id>/<job>/<attempt>/<bundle>`` so that a restarted control plane finds it
again. It holds the bundle's GPUs (``num_gpus``): the GPU ids Ray gives it are
the ones its tasks see (``CUDA_VISIBLE_DEVICES``), in the order of the GPU
indices the engine chose.

An agent with tasks writes the attempt's job directory on its node
(``ROOT/phalanx-<id>/jobs/<job>/<attempt>/<bundle>``: ``launch.json`` with its own tasks,
the Slurm files, a hosts file) and runs the standard supervisor there, as its
child (``python -I -m phalanx.runtime.supervisor --foreground DIR``): the same
process tree, environment, output files, time limit and cancel as the local
runtime's. Its methods are thin: :meth:`NodeAgent.status` waits for
``status.json`` to change (on a node that runs only srun's tasks, for their
checkpoint file: ``PHALANX_CHECKPOINT_FILE`` is the agent's own there);
:meth:`NodeAgent.cancel`, :meth:`NodeAgent.signal` and
:meth:`NodeAgent.set_time_limit` write the supervisor's marker files.

``srun`` steps of a batch job reach the other nodes through their agents:
:meth:`NodeAgent.step_start` runs one task of a step on this node (through
:mod:`phalanx.runtime.ray.proxy`, which srun starts in the task's place), and
:meth:`NodeAgent.step_read` / :meth:`NodeAgent.step_signal` stream its output and
forward signals. Step tasks die with the agent (``PR_SET_PDEATHSIG``), as they
would with their node.

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
from pathlib import Path
from typing import Any

from phalanx.runtime.batch import JobFile, write_bin, write_files

__all__ = ["NodeAgent", "agent_class"]

STEP_READ_MAX = 1 << 20
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _find_nss_wrapper() -> str | None:
    from phalanx.runtime.local import NSS_WRAPPER

    return NSS_WRAPPER


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


class _StepTask:
    def __init__(
        self, proc: subprocess.Popen[bytes], out: Path, err: Path, env: dict[str, str]
    ) -> None:
        self.proc = proc
        self.out = out
        self.err = err
        self.step = env.get("SLURM_STEP_ID", "")
        """Which step and rank it is (``SLURM_STEP_ID``, ``SLURM_PROCID``): for sstat."""
        self.rank = env.get("SLURM_PROCID", "")


class NodeAgent:
    """Runs one attempt's tasks on one node (see the module docstring)."""

    def __init__(self, plan: dict[str, Any]) -> None:
        import ray

        self.node: str = plan["node"]
        self.root = Path(plan["root"])
        self.jobdir = Path(plan["jobdir"])
        self.jobdir.mkdir(parents=True, exist_ok=True)
        write_bin(self.root / "bin", sys.executable)
        (self.jobdir / "hosts").write_text(plan.get("hosts", ""), encoding="ascii")
        write_files(self.jobdir, [JobFile(*f) for f in plan.get("files", [])])
        ids = [str(g) for g in ray.get_gpu_ids()]
        engine = sorted(plan.get("gpus") or ())
        self.gpu_map = {
            index: ids[i] if i < len(ids) else str(index) for i, index in enumerate(engine)
        }
        self.spawner = _Spawner()
        self.steps: dict[int, _StepTask] = {}
        self.next_step = 0
        self.lock = threading.Lock()
        self.supervisor: subprocess.Popen[bytes] | None = None
        self.node_id = ray.get_runtime_context().get_node_id()
        spec = plan.get("spec")
        if spec is not None:
            self._start(spec, plan)

    def about(self) -> dict[str, Any]:
        """What a restarted control plane needs to know of this agent."""
        return {
            "node": self.node,
            "node_id": self.node_id,
            "runs_tasks": self.supervisor is not None,
        }

    # -- the supervisor -------------------------------------------------------

    def node_env(self, env: dict[str, str]) -> dict[str, str]:
        """A task environment as it must be on this node: its hosts file, its name."""
        out = dict(env)
        out["PHALANX_RAY_NODE_ID"] = self.node_id
        nss = _find_nss_wrapper()
        if nss is not None:
            preload = out.get("LD_PRELOAD", "")
            if nss not in preload:
                out["LD_PRELOAD"] = f"{nss} {preload}".strip()
            out["NSS_WRAPPER_HOSTS"] = str(self.jobdir / "hosts")
            out["NSS_WRAPPER_HOSTNAME"] = self.node
        if "PHALANX_SLURM_CONTEXT" in out:
            out["PHALANX_SLURM_CONTEXT"] = str(self.jobdir / "slurm.json")
        if self.gpu_map:
            out["PHALANX_RAY_GPU_MAP"] = json.dumps({str(k): v for k, v in self.gpu_map.items()})
        gpus = out.get("CUDA_VISIBLE_DEVICES")
        if gpus and self.gpu_map:
            out["CUDA_VISIBLE_DEVICES"] = ",".join(
                self.gpu_map.get(int(g), g) if g.isdigit() else g for g in gpus.split(",")
            )
        return out

    def _start(self, spec: dict[str, Any], plan: dict[str, Any]) -> None:
        tasks = []
        for task in spec["tasks"]:
            gpus = [self.gpu_map.get(int(g), str(g)) for g in task.get("gpus") or ()]
            tasks.append({**task, "gpus": gpus, "env": self.node_env(task.get("env") or {})})
        spec = {**spec, "tasks": tasks}
        if plan.get("kube"):
            spec["command"] = [
                sys.executable,
                "-I",
                "-m",
                "phalanx.runtime.kubepod",
                str(self.jobdir),
            ]
        (self.jobdir / "launch.json").write_text(json.dumps(spec), encoding="utf-8")
        command = [
            sys.executable,
            "-I",
            "-m",
            "phalanx.runtime.supervisor",
            "--foreground",
            str(self.jobdir),
        ]

        def start() -> subprocess.Popen[bytes]:
            with open(self.jobdir / "supervisor.log", "ab") as log:
                return subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    close_fds=True,
                    cwd="/",
                )

        self.supervisor = self.spawner.spawn(start)

    def status(
        self, known: list[int] | None, timeout: float
    ) -> tuple[list[int] | None, dict[str, Any]]:
        """``status.json`` once it differs from ``known`` (its stat key), or after
        ``timeout`` seconds; an agent without tasks answers ``{}`` at once."""
        if self.supervisor is None:
            return self._checkpoint_status(known, timeout)
        path = self.jobdir / "status.json"
        deadline = time.monotonic() + timeout
        while True:
            key: list[int] | None = None
            with contextlib.suppress(FileNotFoundError):
                st = os.stat(path)
                key = [st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_size]
            if key is not None and key != known:
                try:
                    return key, json.loads(path.read_text(encoding="utf-8"))
                except (OSError, ValueError):
                    pass
            elif self.supervisor.poll() is not None:
                # Gone without a last word (its own status may still be "running").
                return [-1, -1, -1, -1], {
                    "state": "exited",
                    "job_state": "NODE_FAIL",
                    "end_time": time.time(),
                    "message": f"the supervisor on {self.node} exited unexpectedly",
                }
            if time.monotonic() >= deadline:
                return known, {}
            time.sleep(0.05)

    def _checkpoint_status(
        self, known: list[int] | None, timeout: float
    ) -> tuple[list[int] | None, dict[str, Any]]:
        """For an agent that runs only srun's tasks: ``{"checkpoint_at": mtime}`` once its
        checkpoint file (their ``PHALANX_CHECKPOINT_FILE``) differs from ``known``."""
        path = self.jobdir / "checkpoint"
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(FileNotFoundError):
                st = os.stat(path)
                key = [st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_size]
                if key != known:
                    return key, {"checkpoint_at": st.st_mtime}
            if time.monotonic() >= deadline:
                return known, {}
            time.sleep(0.05)

    def cancel(self, preempt_grace_s: float | None = None) -> None:
        """As :meth:`LocalRuntime.cancel <phalanx.runtime.local.LocalRuntime.cancel>`,
        and on a cancel every step task here gets SIGTERM. On a preemption the batch
        node's supervisor times the step tasks' signals (the preemption notice, then
        SIGTERM at the end of the grace period), which srun forwards to them."""
        marker = self.jobdir / "cancel"
        if preempt_grace_s is None:
            marker.touch()
        else:
            data = json.dumps({"reason": "PREEMPTED", "grace_s": preempt_grace_s})
            tmp = marker.with_name("cancel.tmp")
            tmp.write_text(data, encoding="utf-8")
            os.replace(tmp, marker)
        if self.supervisor is not None and self.supervisor.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.supervisor.send_signal(signal.SIGTERM)
        if preempt_grace_s is None:
            for key in list(self.steps):
                self.step_signal(key, signal.SIGTERM)

    def signal(self, signum: int, batch_only: bool) -> None:
        folder = self.jobdir / "signals"
        folder.mkdir(exist_ok=True)
        tmp = folder / f".{time.time_ns()}.tmp"
        tmp.write_text(json.dumps({"signal": signum, "batch_only": batch_only}), encoding="utf-8")
        os.replace(tmp, folder / f"{time.time_ns()}-{os.getpid()}.json")

    def set_time_limit(self, seconds: float | None) -> None:
        path = self.jobdir / "time_limit"
        tmp = path.with_name("time_limit.tmp")
        tmp.write_text("none" if seconds is None else f"{seconds:.3f}", encoding="ascii")
        os.replace(tmp, path)

    def shutdown(self, kill_wait_s: float = 0.0) -> None:
        """End everything still running here (the attempt is over); the runtime removes
        the agent once this returns. Ray kills an actor's child processes with it, and
        the supervisor's tasks lead sessions of their own: killing the agent alone would
        leave them running."""
        if self.supervisor is not None and self.supervisor.poll() is None:
            self.cancel()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.supervisor.wait(timeout=kill_wait_s + 5.0)
            if self.supervisor.poll() is None:
                self._kill_tasks()
                with contextlib.suppress(ProcessLookupError):
                    self.supervisor.kill()
        for task in self.steps.values():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(task.proc.pid, signal.SIGKILL)

    def _kill_tasks(self) -> None:
        """SIGKILL the supervisor's tasks (each leads its own process group)."""
        try:
            status = json.loads((self.jobdir / "status.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        for pid in status.get("tasks") or ():
            if isinstance(pid, int) and pid > 1:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)

    # -- srun step tasks ------------------------------------------------------

    def step_start(self, command: list[str], env: dict[str, str], cwd: str) -> int:
        """Start one step task here; returns its key for :meth:`step_read`."""
        with self.lock:
            key = self.next_step
            self.next_step += 1
        folder = self.jobdir / "remote"
        folder.mkdir(exist_ok=True)
        out, err = folder / f"{key}.out", folder / f"{key}.err"
        task_env = self.node_env(env)
        # The batch node's checkpoint file is on its machine: this node's agent watches
        # its own (the supervisor's, when one runs here).
        task_env["PHALANX_CHECKPOINT_FILE"] = str(self.jobdir / "checkpoint")
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
        self.steps[key] = _StepTask(proc, out, err, env)
        return key

    def step_usage(self) -> list[dict[str, Any]]:
        """The running steps of this node's batch shell, task by task (see
        :func:`phalanx.runtime.stepd.step_usage`; a task on another node is its proxy
        here, :meth:`remote_usage` of that node's agent has the task's own)."""
        from phalanx.runtime.stepd import step_usage

        return step_usage(str(self.jobdir))

    def remote_usage(self) -> list[dict[str, Any]]:
        """The usage of the step tasks running here for srun on another node:
        ``[{"step", "rank", "cpu", ...}]``."""
        from phalanx.runtime.stepd import proc_table, tree_usage

        children = proc_table()
        out = []
        for task in list(self.steps.values()):
            if task.proc.poll() is None and task.step.isdigit() and task.rank.isdigit():
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


def _read_from(path: Path, offset: int) -> bytes:
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            return fh.read(STEP_READ_MAX)
    except OSError:
        return b""


@functools.cache
def agent_class() -> Any:
    """:class:`NodeAgent` as a Ray actor class (threaded: a long ``status`` wait does not
    hold back a cancel)."""
    import ray

    return ray.remote(max_concurrency=16)(NodeAgent)  # type: ignore[call-overload]
