"""One task of a Kubernetes job: ``python -I -m phalanx.runtime.kubepod JOBDIR``.

The supervisor starts this as every task of a job whose ``launch.json`` has
``kube`` (see :meth:`phalanx.runtime.local.LocalRuntime.launch`). It reads its
pods from ``kube.tasks[PHALANX_TASK_RANK]`` and runs them one after the
other, as a Job's parallelism slot works through its completion indices:

* A pod runs its init containers one by one, then all its containers at once,
  each a process in this task's process group (the supervisor's signals reach
  them all). The pod succeeds when every container exits 0.
* Each container gets the task's environment, then the pod's (``HOSTNAME``,
  ``JOB_COMPLETION_INDEX``, ...), then its own ``env``; with nss_wrapper,
  ``gethostname()`` is the pod's name and every pod name of the job resolves
  (``JOBDIR/hosts``).
* A failed pod counts against the job's ``backoffLimit`` (one counter for the
  job, ``JOBDIR/kube/failures``, under a lock): while the failures do not
  exceed it the pod is started again at once; when they do, the job has
  failed: this task writes ``JOBDIR/kube/failed`` and exits with the pod's
  code, and every other task stops its running pod and starts no new one.
* A container with no ``command`` cannot run (its image's entrypoint is unknown
  without a container runtime): the job fails at once with a message naming
  the field.
* Once its first pod's containers run (after the init containers) the task
  creates ``JOBDIR/kube/ready/<rank>``: when every task has, the supervisor
  reports the job started, which is Kueue's PodsReady.
* RayJob workers (``waitForHead``) hold their place until the head pod, which
  runs the ``entrypoint``, has ended (``JOBDIR/kube/head-done``).
* Each container's standard output and error go to the task's (the job's output
  file) and also to ``JOBDIR/kube/logs/<pod>/<container>.log``, which the
  Kubernetes API serves as the pod's log (``kubectl logs``); a container started
  again after a failure moves the previous one's to ``<container>.previous.log``.

The first failure's message goes to ``JOBDIR/message``, which the supervisor
reports as the job's message. Standard library only.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

__all__ = ["main"]

POLL_S = 0.1


class PodRunner:
    """Runs the pods of one task and reports the outcome as an exit code."""

    def __init__(self, jobdir: str) -> None:
        self.jobdir = jobdir
        with open(os.path.join(jobdir, "launch.json"), encoding="utf-8") as fh:
            self.spec: dict[str, Any] = json.load(fh)
        self.kube: dict[str, Any] = self.spec["kube"]
        self.rank = int(os.environ.get("PHALANX_TASK_RANK", "0"))
        self.state = os.path.join(jobdir, "kube")
        os.makedirs(self.state, exist_ok=True)
        self.failed_path = os.path.join(self.state, "failed")
        self.head_done = os.path.join(self.state, "head-done")
        self.workdir = str(self.spec.get("working_dir") or "/")
        self.copiers: list[threading.Thread] = []
        self.terminating = False
        """The supervisor's SIGTERM came: no container starts again; this process ends
        once the running ones have, after copying their last output."""

    # -- the job's shared state ------------------------------------------------

    def job_failed(self) -> bool:
        return os.path.exists(self.failed_path)

    def fail_job(self, message: str) -> None:
        path = os.path.join(self.jobdir, "message")
        with contextlib.suppress(FileExistsError, OSError):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(message)
        with open(self.failed_path, "a", encoding="utf-8") as fh:
            fh.write(message + "\n")

    def count_failure(self) -> int:
        """One more failed pod for the job; returns the job's failures so far."""
        path = os.path.join(self.state, "failures")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            text = os.read(fd, 64).decode("ascii").strip()
            count = (int(text) if text.isdigit() else 0) + 1
            os.lseek(fd, 0, os.SEEK_SET)
            os.ftruncate(fd, 0)
            os.write(fd, str(count).encode("ascii"))
            return count
        finally:
            os.close(fd)

    def log(self, message: str) -> None:
        print(f"phalanx: {message}", file=sys.stderr, flush=True)

    # -- pods ------------------------------------------------------------------

    def container_env(self, pod: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
        env = dict(os.environ)
        env.update({str(k): str(v) for k, v in (container.get("env") or {}).items()})
        if "NSS_WRAPPER_HOSTS" in env:
            env["NSS_WRAPPER_HOSTS"] = os.path.join(self.jobdir, "hosts")
            env["NSS_WRAPPER_HOSTNAME"] = str(pod["name"])
        return env

    def in_image(self) -> bool:
        """Containers run in their images (the builtin container runtime)."""
        return (self.kube.get("containers") or {}).get("runtime") == "builtin"

    def start(self, pod: dict[str, Any], container: dict[str, Any]) -> subprocess.Popen[bytes]:
        if self.in_image():
            from phalanx.runtime.containers import pyxis
            from phalanx.runtime.containers.kube import KubeContainerError, container_spec

            try:
                spec, argv, env = container_spec(
                    container,
                    pod=str(pod["name"]),
                    containers=self.kube.get("containers") or {},
                    jobdir=self.jobdir,
                    environ=os.environ,
                )
            except KubeContainerError as exc:
                raise _CannotRun(
                    f"pod {pod['name']} container {container.get('name')!r}: {exc}"
                ) from None
            command = pyxis.command(spec, argv)
            workdir = "/"
        else:
            command = [str(part) for part in container.get("command") or ()]
            if not command:
                raise _CannotRun(
                    f"{container.get('field') or 'command'}: required: container "
                    f"{container.get('name')!r} of pod {pod['name']} has no command, and the "
                    f"entrypoint of image {container.get('image') or '(none)'!r} is unknown "
                    "without a container runtime"
                )
            workdir = container.get("workingDir") or self.workdir
            env = self.container_env(pod, container)
        log = self.open_log(str(pod["name"]), str(container.get("name") or "main"))
        try:
            proc = subprocess.Popen(
                command,
                cwd=workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE if log is not None else None,
                stderr=subprocess.PIPE if log is not None else None,
                close_fds=True,
            )
        except OSError as exc:
            if log is not None:
                log.close()
            raise _CannotRun(
                f"{container.get('field') or 'command'}: pod {pod['name']} container "
                f"{container.get('name')!r}: cannot run {command[0]!r} (in {workdir}): "
                f"{exc.strerror or exc}"
            ) from None
        if log is not None:
            lock = threading.Lock()
            ended: list[int] = []
            assert proc.stdout is not None and proc.stderr is not None
            for pipe, fd in ((proc.stdout, 1), (proc.stderr, 2)):
                thread = threading.Thread(
                    target=_copy, args=(pipe, fd, log, lock, ended), daemon=True
                )
                thread.start()
                self.copiers.append(thread)
        return proc

    def open_log(self, pod: str, container: str) -> Any:
        """The container's log file (None when it cannot be written: output still goes to
        the job's file, unchanged)."""
        folder = os.path.join(self.state, "logs", pod)
        path = os.path.join(folder, f"{container}.log")
        try:
            os.makedirs(folder, exist_ok=True)
            if os.path.exists(path):
                os.replace(path, os.path.join(folder, f"{container}.previous.log"))
            return open(path, "ab", buffering=0)  # closed by the copiers
        except OSError:
            return None

    def drain(self) -> None:
        """Wait (briefly: a grandchild may hold a pipe) for the copies of ended containers."""
        for thread in self.copiers:
            thread.join(timeout=2.0)
        self.copiers = [t for t in self.copiers if t.is_alive()]

    def wait_all(self, procs: list[subprocess.Popen[bytes]]) -> int | None:
        """The pod's exit code once every container exited (None: the job failed meanwhile)."""
        while True:
            codes = [p.poll() for p in procs]
            if all(c is not None for c in codes):
                worst = 0
                for code in codes:
                    assert code is not None
                    worst = max(worst, 128 - code if code < 0 else code)
                self.drain()
                return worst
            if self.job_failed():
                for proc in procs:
                    with contextlib.suppress(ProcessLookupError):
                        proc.terminate()
                for proc in procs:
                    proc.wait()
                self.drain()
                return None
            time.sleep(POLL_S)

    def run_pod(self, pod: dict[str, Any]) -> int | None:
        for init in pod.get("initContainers") or ():
            code = self.wait_all([self.start(pod, init)])
            if code != 0:
                return code
        procs: list[subprocess.Popen[bytes]] = []
        try:
            for container in pod.get("containers") or ():
                procs.append(self.start(pod, container))
        except _CannotRun:
            for proc in procs:
                proc.kill()
                proc.wait()
            raise
        self.report_ready()
        return self.wait_all(procs)

    def report_ready(self) -> None:
        """This task's pod has its containers running (once: the job's PodsReady)."""
        folder = os.path.join(self.state, "ready")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, str(self.rank))
        if not os.path.exists(path):
            with open(path, "w", encoding="ascii") as fh:
                fh.write("ready\n")

    def wait_for_head(self) -> int:
        self.report_ready()
        while not os.path.exists(self.head_done):
            if self.job_failed() or self.terminating:
                return 1
            time.sleep(POLL_S)
        return 0

    def run(self) -> int:
        pods: list[dict[str, Any]] = self.kube["tasks"][self.rank]
        limit = int(self.kube.get("backoffLimit", 6))
        for pod in pods:
            if pod.get("waitForHead"):
                return self.wait_for_head()
            while True:
                if self.job_failed() or self.terminating:
                    return 1
                try:
                    code = self.run_pod(pod)
                except _CannotRun as exc:
                    self.log(str(exc))
                    self.fail_job(str(exc))
                    return 2
                if code is None:
                    return 1
                if self.terminating:
                    return code
                if code == 0:
                    break
                failures = self.count_failure()
                if failures > limit:
                    message = (
                        f"pod {pod['name']} failed (exit code {code}); the job has failed "
                        f"{failures} pod(s), more than its backoffLimit of {limit}"
                    )
                    self.log(message)
                    self.fail_job(message)
                    return code
                self.log(
                    f"pod {pod['name']} failed (exit code {code}); starting it again "
                    f"({failures} failure(s), backoffLimit {limit})"
                )
        if self.kube.get("headRank") == self.rank:
            with open(self.head_done, "w", encoding="ascii") as fh:
                fh.write("done\n")
        return 0


def _copy(pipe: Any, fd: int, log: Any, lock: threading.Lock, ended: list[int]) -> None:
    """Copy a container's stream to this task's ``fd`` and to the container's log."""
    try:
        while True:
            chunk = os.read(pipe.fileno(), 65536)
            if not chunk:
                break
            with contextlib.suppress(OSError):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view) :]
            with lock, contextlib.suppress(OSError, ValueError):
                log.write(chunk)
    finally:
        pipe.close()
        with lock:
            # The second stream to end closes the file.
            ended.append(fd)
            if len(ended) == 2:
                log.close()


class _CannotRun(Exception):
    """A container that cannot be started: the job fails, naming the field."""


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -I -m phalanx.runtime.kubepod JOBDIR", file=sys.stderr)
        return 2
    runner = PodRunner(os.path.abspath(args[0]))

    # The supervisor's SIGTERM reaches the containers through the process group. This
    # process stays until they end, as a container runtime does: dying first would
    # close their output pipes, and a container writing in its TERM handler would die
    # of SIGPIPE instead of finishing. A handler, so the containers get TERM's default
    # action back on exec.
    def on_term(signum: int, frame: Any) -> None:
        runner.terminating = True

    signal.signal(signal.SIGTERM, on_term)
    notice = runner.spec.get("preemption_notice")
    if notice and int(notice[0]) != signal.SIGTERM:
        # The preemption notice is for the containers (the group): this process stays.
        # A handler, not SIG_IGN, so the containers get the default action back on exec.
        with contextlib.suppress(OSError, ValueError):
            signal.signal(int(notice[0]), lambda signum, frame: None)
    try:
        code = runner.run()
    finally:
        if runner.kube.get("headRank") == runner.rank and not os.path.exists(runner.head_done):
            # The head ended (failed): its workers must not wait for ever.
            with contextlib.suppress(OSError), open(runner.head_done, "w") as fh:
                fh.write("failed\n")
    if runner.terminating:
        # Ended by the SIGTERM, as the task's status has always said.
        runner.drain()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
    return code


if __name__ == "__main__":
    sys.exit(main())
