"""The client side of a job step run from a login shell: ``srun`` and ``sattach``.

Finds the job's step socket through the API, then speaks
:mod:`phalanx.runtime.stepd`'s protocol: standard input to the step, its output
to this process's, signals as Slurm's ``srun`` treats them. Ctrl-C once prints
the tasks' state (``srun: interrupt (one more within 1 sec to abort)``), twice
within a second sends the tasks SIGINT and then ends the step; losing the
terminal (SIGHUP) cancels a job this srun made, as its allocation has no other
owner. With ``--pty`` the terminal is put in raw mode and every key, Ctrl-C
included, goes to the step's pseudo-terminal.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from phalanx.runtime import stepd

__all__ = ["StepAnswer", "attach", "connect_step", "run_step", "step_socket"]

FORWARDED = (signal.SIGTERM, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCONT)
SOCKET_WAIT_S = 15.0


class StepAnswer(Exception):
    """The step could not be run: ``message`` is the line to print, ``code`` srun's status."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def _say(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def step_socket(client: Any, job_id: int, *, environment: bool = False) -> dict[str, Any]:
    """The job's steps answer once its step socket listens (a job just started needs a
    moment); :class:`StepAnswer` when the job does not run."""
    deadline = time.monotonic() + SOCKET_WAIT_S
    query = "?environment=true" if environment else ""
    while True:
        answer: dict[str, Any] = client._json("GET", f"/api/v1/jobs/{job_id}/steps{query}")
        state = answer.get("state")
        if not answer.get("owner", True):
            raise StepAnswer(
                f"error: Unable to confirm allocation for job {job_id}: Access/permission denied"
            )
        if answer.get("socket"):
            return answer
        if state != "RUNNING" and state not in ("PENDING", "ADMITTED"):
            raise StepAnswer(f"error: Job {job_id} has ended (state {state})")
        if state == "RUNNING" and time.monotonic() > deadline:
            raise StepAnswer(
                f"error: Job {job_id}: its step socket cannot be found; steps from outside "
                "the job run on the machine of its first node"
            )
        time.sleep(0.05)


def connect_step(
    client: Any, job_id: int, *, environment: bool = False
) -> tuple[stepd.Channel, dict[str, Any]]:
    """A connection to the running job's step socket, and the job's steps answer."""
    answer = step_socket(client, job_id, environment=environment)
    try:
        return stepd.connect(str(answer["socket"])), answer
    except OSError as exc:
        raise StepAnswer(f"error: Job {job_id}: cannot reach its step socket: {exc}") from None


class _Session:
    """One step's connection and the signals this process gets while it runs."""

    def __init__(
        self,
        channel: stepd.Channel,
        job_id: int,
        *,
        pty: bool,
        on_hangup: Callable[[], None] | None,
    ) -> None:
        self.channel = channel
        self.job_id = job_id
        self.pty = pty
        self.on_hangup = on_hangup
        self.step: int | None = None
        self.code: int | None = None
        self.last_interrupt = 0.0
        self.aborting = False
        self.tasks: list[int] = []

    def on_signal(self, signum: int, frame: Any) -> None:
        """Counted from the wake-up fd instead (one byte per delivery): see pump."""

    def handle_signals(self, delivered: bytes) -> None:
        for signum in delivered:
            if signum == signal.SIGWINCH:
                rows, cols = stepd.winsize(0)
                self.channel.control({"op": "winch", "rows": rows, "cols": cols})
            elif signum == signal.SIGINT:
                self.interrupt()
            elif signum == signal.SIGHUP and self.on_hangup is not None:
                # The terminal is gone: so is the job this srun made for its step.
                _say("srun: forcing job termination")
                self.on_hangup()
            else:
                self.channel.control({"op": "signal", "signal": signum})

    def interrupt(self) -> None:
        now = time.monotonic()
        step = f"StepId={self.job_id}.{self.step}"
        if self.aborting:
            return
        if now - self.last_interrupt <= 1.0:
            self.aborting = True
            _say(f"srun: sending Ctrl-C to {step}")
            _say("srun: forcing job termination")
            if self.on_hangup is not None:
                # The job this srun made is cancelled with its step (Slurm: CANCELLED).
                self.on_hangup()
            else:
                for signum in (signal.SIGINT, signal.SIGCONT, signal.SIGTERM):
                    self.channel.control({"op": "signal", "signal": signum})
            return
        self.last_interrupt = now
        _say("srun: interrupt (one more within 1 sec to abort)")
        self.channel.control({"op": "status"})

    def on_control(self, message: dict[str, Any]) -> bool:
        op = message.get("op")
        if op == "tasks":
            step = f"StepId={self.job_id}.{message.get('step')}"
            for key, word in (("running", "running"), ("exited", "exited")):
                ranks = [int(r) for r in message.get(key) or ()]
                if ranks:
                    noun = "task" if len(ranks) == 1 else "tasks"
                    _say(f"srun: {step} {noun} {stepd.task_ranges(ranks)}: {word}")
        elif op == "exit":
            self.code = int(message.get("code") or 0)
            self.tasks = list(message.get("tasks") or ())
            return False
        return True


def run_step(
    channel: stepd.Channel,
    job_id: int,
    argv: list[str],
    *,
    pty: bool,
    release: bool,
    on_hangup: Callable[[], None] | None = None,
) -> int:
    """Run one step of ``job_id`` through ``channel``; srun's exit status."""
    if pty and not os.isatty(0):
        _say("srun: error: ioctl(TIOCGWINSZ): Inappropriate ioctl for device")
        _say("srun: error: Not using a pseudo-terminal, disregarding --pty option")
        argv = [word for word in argv if word != "--pty"]
        pty = False
    rows, cols = stepd.winsize(0) if pty else (0, 0)
    channel.control(
        {
            "op": "step",
            "argv": argv,
            "env": dict(os.environ),
            "cwd": os.getcwd(),
            "pty": pty,
            "rows": rows,
            "cols": cols,
            "term": os.environ.get("TERM", ""),
            "release": release,
        }
    )
    first = channel.read_control(30.0)
    if first is None:
        raise StepAnswer(f"error: Job {job_id}: the job's step socket did not answer")
    if first.get("op") != "started":
        raise StepAnswer(f"error: Job {job_id}: {first.get('message') or 'step refused'}")
    session = _Session(channel, job_id, pty=pty, on_hangup=on_hangup)
    session.step = int(first.get("step") or 0)
    return _pump(session, stdin=_stdin())


def attach(channel: stepd.Channel, job_id: int, step: int, *, label: bool = False) -> int:
    """``sattach``: the step's output so far and from now on; its status as sattach's:
    the highest exit code of its tasks (a task a signal ended counts as 0), one
    ``sattach: error: task N exited with exit code C`` line per failed task."""
    channel.control({"op": "attach"})
    first = channel.read_control(10.0)
    if first is None or first.get("op") != "attached":
        raise StepAnswer(f"error: Could not get job step info: Job step {job_id}.{step} ended")
    session = _Session(channel, job_id, pty=False, on_hangup=None)
    session.step = step
    _pump(session, stdin=None, ranked=True, label=label)
    codes = [int(c) for c in session.tasks]
    for rank, code in enumerate(codes):
        if code > 0:
            _say(f"sattach: error: task {rank} exited with exit code {code}")
    return max((c for c in codes if c > 0), default=0) if session.code is not None else 1


def _stdin() -> int | None:
    try:
        os.fstat(0)
    except OSError:
        return None
    return 0


def _pump(
    session: _Session, stdin: int | None, *, ranked: bool = False, label: bool = False
) -> int:
    rfd, wfd = os.pipe()
    os.set_blocking(rfd, False)
    os.set_blocking(wfd, False)
    handled: tuple[int, ...] = (signal.SIGINT, signal.SIGHUP, *FORWARDED)
    if session.pty:
        handled = (signal.SIGHUP, signal.SIGTERM, signal.SIGWINCH)
    old_wakeup = signal.set_wakeup_fd(wfd, warn_on_full_buffer=False)
    previous = {sig: signal.signal(sig, session.on_signal) for sig in handled}
    terminal = stepd.Terminal(0) if session.pty else None
    try:
        if terminal is not None:
            terminal.__enter__()
        stepd.pump(
            session.channel,
            stdin=stdin,
            on_control=session.on_control,
            wakeup=rfd,
            on_wakeup=session.handle_signals,
            ranked=ranked,
            label=label,
        )
    finally:
        if terminal is not None:
            terminal.__exit__()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        signal.set_wakeup_fd(old_wakeup)
        os.close(rfd)
        os.close(wfd)
        session.channel.close()
    if session.code is None:
        _say(f"srun: error: Job {session.job_id}: lost the connection to the step")
        return 1
    # Ctrl-C twice: srun's status is SIGINT's, whatever the tasks ended with.
    return 130 if session.aborting else session.code
